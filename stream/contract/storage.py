"""dsh JSONL persistence: the header line and packed chunk rows (SPEC §1).

A log stores runs of ``assistant/chunk`` deltas as one row (``text-chunks``,
``reasoning-chunks``, ``tool-call-chunks``) standing for ``len(texts|args)`` consecutive
chunk events from ``seq0``. A malformed row is corrupt storage: it is refused whole
(``Unreadable``) rather than guessed at, since a guess would silently drop a run.
"""

from typing import Any, Final, NamedTuple, TypeGuard

from stream.contract.errors import Unreadable
from stream.contract.events import MAX_SAFE_INTEGER

CHUNK_ROWS: Final = {
    "text-chunks": ("texts", "text-delta"),
    "reasoning-chunks": ("texts", "reasoning-delta"),
    "tool-call-chunks": ("args", "tool-call-delta"),
}


def _safe_int(value: Any) -> TypeGuard[int]:
    return type(value) is int and -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER


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


def _check_row(value: dict[str, Any], tag: str) -> int:
    """Validate a chunk row like the dsh decoder does; return its member count."""
    payload_key, _ = CHUNK_ROWS[tag]
    seq0, time0, data = value.get("seq0"), value.get("time0"), value.get("data")
    if set(value) != {"type", "seq0", "time0", "data"}:
        raise Unreadable(f"malformed {tag} row: envelope must be exactly type/seq0/time0/data")
    if not _safe_int(seq0) or seq0 < 0 or not _safe_int(time0):
        raise Unreadable(f"malformed {tag} row: seq0/time0 must be safe integers")
    if type(data) is not dict:
        raise Unreadable(f"malformed {tag} row: data must be an object")
    members = data.get(payload_key)
    gaps = data.get("dt")
    if type(members) is not list or not members or any(type(m) is not str for m in members):
        raise Unreadable(f"malformed {tag} row: {payload_key} must be a non-empty string array")
    if type(gaps) is not list or len(gaps) != len(members) - 1 or not all(map(_safe_int, gaps)):
        raise Unreadable(f"malformed {tag} row: dt must hold {len(members) - 1} safe integers")
    if any(type(data.get(k)) not in (int, float) for k in ("turn", "step", "index")):
        raise Unreadable(f"malformed {tag} row: turn/step/index must be numbers")
    if tag == "tool-call-chunks" and (
        type(data.get("id")) is not str or ("name" in data and type(data["name"]) is not str)
    ):
        raise Unreadable(f"malformed {tag} row: id (and name when present) must be strings")
    return len(members)


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
        if tag in CHUNK_ROWS:
            return ChunkRun(value["seq0"], _check_row(value, tag), value)
    return value


def expand(value: Any) -> list[Any]:
    """One parsed storage line as the events it stands for (most lines: itself)."""
    decoded = decode_line(value)
    return decoded.events() if type(decoded) is ChunkRun else [decoded]
