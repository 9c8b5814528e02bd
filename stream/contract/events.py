"""One session event, read and checked at the envelope (contract: "Events", "Validation").

``read_event`` separates three outcomes:
- not an event at all (not an object, no usable ``seq``): ``Unreadable`` — dead-lettered;
- an envelope that breaks the contract for every projection (``type``, ``time``, ``data``):
  kept on the event as ``error``, so each projection faults at that seq;
- a ``surfaceOp`` on the wrong type or in the wrong shape: kept as ``surface_error``, an
  error only for the projections that fold the surface.
Per-type ``data`` is validated later by the projection that reads it (``contract.data``).
"""

from dataclasses import dataclass
from typing import Any, Final, NamedTuple

from stream.contract.errors import Unreadable, brief

SURFACE_TYPES: Final = frozenset(
    {"system/message", "user/message", "assistant/message", "tool/result"}
)
METERING_TYPES: Final = frozenset({"compaction/summary", "compaction/prune"})
MAX_SAFE_INTEGER: Final = 2**53 - 1

APPEND: Final = "append"


@dataclass(frozen=True, slots=True)
class Replace:
    """A replace surface op over current nodes ``start..end`` (inclusive, surface order)."""

    start: int
    end: int


SurfaceOp = str | Replace  # APPEND or Replace


# Types some projection reads. Any other type (and a non-usage chunk) is *passive*: for
# every projection it only advances the cursor and expires an armed claim.
READ_TYPES: Final = (
    SURFACE_TYPES
    | METERING_TYPES
    | frozenset({"request/header", "request/context", "assistant/chunk", "assistant/message"})
)


class Event(NamedTuple):
    """An event read at the envelope. A NamedTuple: the hot path builds one per input."""

    type: str
    seq: int
    data: dict[str, Any]
    op: SurfaceOp | None
    error: str | None = None
    surface_error: str | None = None
    passive: bool = False


def as_count(value: Any) -> int | None:
    """A non-negative safe integer as JS sees it (``5.0`` is the integer 5), else None."""
    kind = type(value)
    if kind is int:
        return value if 0 <= value <= MAX_SAFE_INTEGER else None
    if kind is float and value.is_integer() and 0 <= value <= MAX_SAFE_INTEGER:
        return int(value)
    return None


def _is_integer(value: Any) -> bool:
    kind = type(value)
    return kind is int or (kind is float and value.is_integer())


def _read_op(raw: Any) -> tuple[SurfaceOp | None, str | None]:
    if raw == APPEND:
        return APPEND, None
    if type(raw) is not dict or raw.get("op") != "replace" or len(raw) != 3:
        return None, f"carries an invalid surfaceOp {brief(raw)}"
    if "start" in raw and "end" in raw:  # format v0
        start, end = as_count(raw["start"]), as_count(raw["end"])
    elif "startSeq" in raw and "endSeq" in raw:  # format v3
        start, end = as_count(raw["startSeq"]), as_count(raw["endSeq"])
    else:
        return None, f"carries an invalid replace surfaceOp {brief(raw)}"
    if start is None or end is None:
        return None, f"has replace ends that are not non-negative integers: {brief(raw)}"
    return Replace(start, end), None


def event_time(raw: Any) -> int | None:
    """An event's ``time`` when it is a safe integer (epoch ms), else None: what the
    session's latest time and its partition's stream time take (contract: "Session
    expiry"). Integers only, as the envelope check reads them."""
    time = raw.get("time") if type(raw) is dict else None
    if type(time) is int and -MAX_SAFE_INTEGER <= time <= MAX_SAFE_INTEGER:
        return time
    return None


def read_event(raw: Any) -> Event:
    """Read one parsed JSON value as an event; raise ``Unreadable`` if it is not one."""
    if type(raw) is not dict:
        raise Unreadable(f"event must be a JSON object, got {type(raw).__name__}")
    seq = raw.get("seq")
    kind = raw.get("type")
    data = raw.get("data")
    # Fast paths for the common well-formed events: without a surfaceOp (chunks,
    # headers...), and a surface type appending (messages, tool results).
    if (
        type(seq) is int
        and 0 <= seq <= MAX_SAFE_INTEGER
        and type(kind) is str
        and type(data) is dict
        and type(raw.get("time")) is int
    ):
        # tuple.__new__: the same Event as Event(...), without NamedTuple's Python-level
        # __new__ (a third of this path's cost; most events take this line).
        if "surfaceOp" not in raw:
            if kind not in READ_TYPES:
                return _new(Event, (kind, seq, data, None, None, None, True))
            if kind in SURFACE_TYPES:
                return _read_event_slowly(raw)  # a surface event without its op
            if kind == "assistant/chunk":
                chunk = data.get("chunk")
                if type(chunk) is dict and chunk.get("type") != "usage":
                    return _new(Event, (kind, seq, data, None, None, None, True))
            return _new(Event, (kind, seq, data, None, None, None, False))
        if kind in SURFACE_TYPES and raw["surfaceOp"] == APPEND:
            return _new(Event, (kind, seq, data, APPEND, None, None, False))
    return _read_event_slowly(raw)


_new: Final = tuple.__new__


def passive_seq(raw: dict[str, Any]) -> int:
    """The seq of a well-formed event no projection reads (most of a log: streamed
    deltas), else -1: ``read_event``'s fast path to ``passive=True``, without building
    the ``Event`` a fold of such events only takes the seq of. (-1 says nothing: such an
    event may still be passive; ``read_event`` decides.) A type some projection reads is
    told first, so the other events cost one lookup more than ``read_event`` alone."""
    kind = raw.get("type")
    if type(kind) is not str:
        return -1
    data = raw.get("data")
    if kind in READ_TYPES:
        if kind != "assistant/chunk" or type(data) is not dict:
            return -1
        chunk = data.get("chunk")
        if type(chunk) is not dict or chunk.get("type") == "usage":
            return -1
    elif type(data) is not dict:
        return -1
    seq = raw.get("seq")
    if (
        type(seq) is int
        and 0 <= seq <= MAX_SAFE_INTEGER
        and type(raw.get("time")) is int
        and "surfaceOp" not in raw
    ):
        return seq
    return -1


def _read_event_slowly(raw: dict[str, Any]) -> Event:
    seq = as_count(raw.get("seq"))
    if seq is None:
        raise Unreadable(f"event has no usable seq: {brief(raw.get('seq'))}")
    kind = raw.get("type")
    data = raw.get("data")
    error = None
    if type(kind) is not str:
        error, kind = f"event type must be a string, got {brief(kind)}", ""
    elif type(data) is not dict:
        error = f"{kind} at seq {seq}: data must be an object"
    elif not _is_integer(raw.get("time")):
        error = f"{kind} at seq {seq}: time must be an integer (epoch ms)"
    if type(data) is not dict:
        data = {}
    op: SurfaceOp | None = None
    surface_error = None
    raw_op = raw.get("surfaceOp")
    if kind in SURFACE_TYPES:
        if raw_op is None:
            surface_error = "has no surfaceOp"
        else:
            op, surface_error = _read_op(raw_op)
    elif "surfaceOp" in raw:
        surface_error = "is not a surface type and cannot carry surfaceOp"
    if surface_error is not None:
        surface_error = f"{kind} at seq {seq} {surface_error}"
        return Event(kind, seq, data, op, error, surface_error)
    if error is not None or op is not None:
        return Event(kind, seq, data, op, error)
    if kind not in READ_TYPES:
        return Event(kind, seq, data, None, passive=True)
    if kind == "assistant/chunk":
        chunk = data.get("chunk")
        if type(chunk) is dict and chunk.get("type") != "usage":
            return Event(kind, seq, data, None, passive=True)
    return Event(kind, seq, data, None)
