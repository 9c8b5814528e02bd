"""dsh JSONL persistence: the header line and packed chunk rows (contract: "Session logs").

A log stores runs of ``assistant/chunk`` deltas as one row (``text-chunks``,
``reasoning-chunks``, ``tool-call-chunks``) standing for ``len(texts|args)`` consecutive
chunk events from ``seq0``. A malformed row is corrupt storage: it is refused whole
(``Unreadable``) rather than guessed at, since a guess would silently drop a run.
"""

from collections.abc import Iterable, Iterator
from typing import Any, Final, NamedTuple

from stream.contract.errors import BadLine, Unreadable
from stream.contract.events import MAX_SAFE_INTEGER
from stream.contract.jsontext import loads

CHUNK_ROWS: Final = {
    "text-chunks": ("texts", "text-delta"),
    "reasoning-chunks": ("texts", "reasoning-delta"),
    "tool-call-chunks": ("args", "tool-call-delta"),
}


def _safe_int(value: Any) -> int | None:
    """A safe integer as JS reads it (``1.0`` is 1), else None."""
    kind = type(value)
    if kind is float and value.is_integer():
        value = int(value)
    elif kind is not int:
        return None
    return value if -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER else None


def _number(value: Any) -> bool:
    return type(value) in (int, float)


def session_id_of(value: Any) -> str | None:
    """The session id of a header line ``{"type":"session","id":...}``, else None."""
    if type(value) is dict and value.get("type") == "session" and type(value.get("id")) is str:
        return str(value["id"])
    return None


class ChunkRun(NamedTuple):
    """A validated chunk row: ``size`` passive ``assistant/chunk`` events from ``seq0``.

    Delta chunks are read by no projection, so a fold can take the whole run in O(1)
    instead of building ``size`` events; ``events()`` materialises them when needed.
    """

    seq0: int
    size: int
    row: dict[str, Any]

    def events(self) -> list[dict[str, Any]]:
        return _expand_row(self.row)

    @property
    def latest_time(self) -> int:
        """The latest time among the run's members (``time0`` plus the gaps so far; a
        gap may be negative, so not always the last member's): what the members, taken
        one by one, would give."""
        time: int = self.row["time0"]
        latest = time
        for gap in self.row["data"]["dt"]:
            time += gap
            if time > latest:
                latest = time
        return latest


_new: Final = tuple.__new__

_ROW_KEYS: Final = frozenset({"type", "seq0", "time0", "data"})
_TEXT_KEYS: Final = frozenset({"turn", "step", "index", "dt", "texts"})
_TOOL_KEYS: Final = frozenset({"turn", "step", "index", "id", "dt", "args"})
_NAMED_TOOL_KEYS: Final = _TOOL_KEYS | {"name"}


def _bad_row(tag: str, why: str) -> Unreadable:
    # Module level, not a closure in _check_row: compiled, a closure and its environment
    # hold each other, a cycle per row left for the collector.
    return Unreadable(f"malformed {tag} storage row: {why}")


def _plain_gaps(gaps: list[Any]) -> bool:
    """Every gap an int that is a safe integer (what ``_safe_int`` keeps as it is)."""
    for gap in gaps:
        if type(gap) is not int:
            return False
        plain: int = gap
        if not -MAX_SAFE_INTEGER <= plain <= MAX_SAFE_INTEGER:
            return False
    return True


def _times_stay_safe(time: int, gaps: list[Any]) -> bool:
    for gap in gaps:
        step: int = gap
        time += step
        if not -MAX_SAFE_INTEGER <= time <= MAX_SAFE_INTEGER:
            return False
    return True


def _check_row(value: dict[str, Any], tag: str) -> dict[str, Any]:
    """Validate a chunk row as the dsh decoder does; return it with integral numbers."""
    if value.keys() != _ROW_KEYS:
        raise _bad_row(tag, "envelope must be exactly {type, seq0, time0, data}")
    seq0, time0, data = _safe_int(value["seq0"]), _safe_int(value["time0"]), value["data"]
    if seq0 is None or seq0 < 0:
        raise _bad_row(tag, "seq0 must be a non-negative safe integer")
    if time0 is None:
        raise _bad_row(tag, "time0 must be a safe integer")
    if type(data) is not dict:
        raise _bad_row(tag, "data must be an object")
    payload_key, _ = CHUNK_ROWS[tag]
    keys = data.keys()
    if tag == "tool-call-chunks":
        if keys != _TOOL_KEYS and keys != _NAMED_TOOL_KEYS:
            raise _bad_row(tag, "data must be exactly {turn, step, index, id, name?, dt, args}")
        if type(data["id"]) is not str or ("name" in data and type(data["name"]) is not str):
            raise _bad_row(tag, "id (and name when present) must be strings")
    elif keys != _TEXT_KEYS:
        raise _bad_row(tag, "data must be exactly {turn, step, index, dt, texts}")
    if not (_number(data["turn"]) and _number(data["step"]) and _number(data["index"])):
        raise _bad_row(tag, "turn/step/index must be numbers")
    members = data[payload_key]
    if type(members) is not list or not members or any(type(m) is not str for m in members):
        raise _bad_row(tag, f"{payload_key} must be a non-empty string array")
    gaps = data["dt"]
    if type(gaps) is not list:
        raise _bad_row(tag, "dt must be an array of safe integers")
    if type(value["seq0"]) is int and type(value["time0"]) is int and _plain_gaps(gaps):
        # The common row, integers throughout: checked in one pass and kept as read.
        if len(gaps) != len(members) - 1:
            raise _bad_row(tag, f"dt length {len(gaps)} does not match {len(members)} members")
        if seq0 + len(members) - 1 > MAX_SAFE_INTEGER:
            raise _bad_row(tag, "member seqs must stay safe integers")
        if not _times_stay_safe(time0, gaps):
            raise _bad_row(tag, "member times must stay safe integers")
        return value
    dt = [_safe_int(gap) for gap in gaps]
    if None in dt:
        raise _bad_row(tag, "dt must be an array of safe integers")
    if len(dt) != len(members) - 1:
        raise _bad_row(tag, f"dt length {len(dt)} does not match {len(members)} members")
    # Float arithmetic past 2^53 would silently rebuild different seqs and times.
    if seq0 + len(members) - 1 > MAX_SAFE_INTEGER:
        raise _bad_row(tag, "member seqs must stay safe integers")
    time = time0
    for gap in dt:
        time += gap  # type: ignore[operator]
        if not -MAX_SAFE_INTEGER <= time <= MAX_SAFE_INTEGER:
            raise _bad_row(tag, "member times must stay safe integers")
    return {**value, "seq0": seq0, "time0": time0, "data": {**data, "dt": dt}}


def _expand_row(row: dict[str, Any]) -> list[dict[str, Any]]:
    payload_key, chunk_type = CHUNK_ROWS[row["type"]]
    data = row["data"]
    turn, step, index = data["turn"], data["step"], data["index"]
    events = []
    time = row["time0"]
    for k, member in enumerate(data[payload_key]):
        if k:
            time += data["dt"][k - 1]
        chunk: dict[str, Any] = {"type": chunk_type, "index": index}
        if payload_key == "texts":
            chunk["text"] = member
        else:
            chunk["id"] = data["id"]
            if "name" in data:
                chunk["name"] = data["name"]
            chunk["argumentsDelta"] = member
        events.append(
            {
                "type": "assistant/chunk",
                "seq": row["seq0"] + k,
                "time": time,
                "data": {"turn": turn, "step": step, "chunk": chunk},
            }
        )
    return events


def decode_line(value: Any) -> Any:
    """One parsed storage line: a ``ChunkRun`` for a chunk row, else the value itself."""
    if type(value) is dict:
        tag = value.get("type")
        if type(tag) is str and tag in CHUNK_ROWS:
            row = _check_row(value, tag)
            # tuple.__new__: ChunkRun(...) would run NamedTuple's Python-level __new__.
            run: ChunkRun = _new(ChunkRun, (row["seq0"], len(row["data"][CHUNK_ROWS[tag][0]]), row))
            return run
    return value


def expand(value: Any) -> list[Any]:
    """One parsed storage line as the events it stands for (most lines: itself)."""
    decoded = decode_line(value)
    return decoded.events() if type(decoded) is ChunkRun else [decoded]


SKIPPED: Final[Any] = object()
"""What ``read_line`` gives for a line that stands for no event: blank, or the header."""


def read_line(number: int, line: bytes) -> Any:
    """Line ``number`` of a log as read: a raw event object, a ``ChunkRun`` for a packed
    row, a ``BadLine`` for a line that is not JSON or not a valid storage row, or
    ``SKIPPED`` for a blank line or the header (line 1)."""
    try:
        value = decode_line(loads(line))
    except Unreadable as error:
        if line.strip():  # blank lines are skipped, only checked on failure
            return BadLine(number, str(error))
        return SKIPPED
    if number == 1 and session_id_of(value) is not None:
        return SKIPPED
    return value


def read_lines(lines: Iterable[bytes]) -> Iterator[tuple[int, Any]]:
    """A log's lines as ``(line number, value)`` (``read_line``), skipped ones left out.
    Here, in the compiled core, rather than in the reader: it runs once per line of every
    log."""
    for number, line in enumerate(lines, 1):
        value = read_line(number, line)
        if value is not SKIPPED:
            yield number, value
