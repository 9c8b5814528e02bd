"""dsh JSONL persistence: the header line and packed chunk rows (SPEC §1).

A log stores runs of ``assistant/chunk`` deltas as one row (``text-chunks``,
``reasoning-chunks``, ``tool-call-chunks``) standing for ``len(texts|args)`` consecutive
chunk events from ``seq0``. A malformed row is corrupt storage: it is refused whole
(``Unreadable``) rather than guessed at, since a guess would silently drop a run.
"""

from typing import Any, Final

from stream.contract.errors import Unreadable
from stream.contract.events import MAX_SAFE_INTEGER

CHUNK_ROWS: Final = {
    "text-chunks": ("texts", "text-delta"),
    "reasoning-chunks": ("texts", "reasoning-delta"),
    "tool-call-chunks": ("args", "tool-call-delta"),
}


def _safe_int(value: Any) -> bool:
    return type(value) is int and -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER


def session_id_of(value: Any) -> str | None:
    """The session id of a header line ``{"type":"session","id":...}``, else None."""
    if type(value) is dict and value.get("type") == "session" and type(value.get("id")) is str:
        return str(value["id"])
    return None


def expand(value: Any) -> list[Any]:
    """One parsed storage line as the events it stands for (most lines: itself)."""
    if type(value) is not dict:
        return [value]
    spec = CHUNK_ROWS.get(value.get("type"))  # type: ignore[arg-type]
    if spec is None:
        return [value]
    tag = value["type"]
    payload_key, chunk_type = spec
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
    turn, step, index = data.get("turn"), data.get("step"), data.get("index")
    if any(type(n) not in (int, float) for n in (turn, step, index)):
        raise Unreadable(f"malformed {tag} row: turn/step/index must be numbers")
    events = []
    time = time0
    for k, member in enumerate(members):
        if k:
            time += gaps[k - 1]
        chunk: dict[str, Any] = {"type": chunk_type, "index": index}
        if payload_key == "texts":
            chunk["text"] = member
        else:
            chunk["id"] = data.get("id")
            if "name" in data:
                chunk["name"] = data["name"]
            chunk["argumentsDelta"] = member
        events.append(
            {
                "type": "assistant/chunk",
                "seq": seq0 + k,
                "time": time,
                "data": {"turn": turn, "step": step, "chunk": chunk},
            }
        )
    return events
