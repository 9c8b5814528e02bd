"""Short names for session events in the unit tests (see conftest.py), and :func:`fold`.

The events themselves come from the one event factory, ``stream.contract.build``; these
wrappers only make a test read like the log line it stands for: every builder returns
what ``read_event`` makes of the raw object, and ``raw`` returns the raw object itself.
``None`` for an optional argument leaves the key out, except where the argument's
default is ``_UNSET`` (then ``None`` writes ``null``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from stream.contract import build
from stream.contract.events import Event, read_event

_UNSET: Any = build.ABSENT


def raw(
    type: str,
    seq: int,
    data: Any = _UNSET,
    surfaceOp: Any = _UNSET,
    time: Any = build.T0,
    **extra: Any,
) -> dict[str, Any]:
    """A raw event object; ``data`` defaults to ``{}``, ``surfaceOp`` to absent."""
    return build.event(type, seq, {} if data is _UNSET else data, op=surfaceOp, time=time, **extra)


def ev(
    type: str,
    seq: int,
    data: Any = _UNSET,
    surfaceOp: Any = _UNSET,
    **extra: Any,
) -> Event:
    """``read_event`` of :func:`raw`."""
    return read_event(raw(type, seq, data, surfaceOp, **extra))


text = build.text_block
content = build.texts


def replace(start: int, end: int, v3: bool = False) -> dict[str, Any]:
    """A replace surfaceOp in format v0 (``start``/``end``) or v3 (``startSeq``/``endSeq``)."""
    return build.replace(start, end, v3=v3)


# --- surface events ---------------------------------------------------------------------------


def user(seq: int, *texts: str, op: Any = "append") -> Event:
    return read_event(build.user_message(seq, content(*texts), op=op))


def assistant(
    seq: int,
    *texts: str,
    op: Any = "append",
    usage: Any = _UNSET,
    turn: int | None = None,
    step: int | None = None,
) -> Event:
    return read_event(
        build.assistant_message(
            seq,
            content(*texts),
            usage=usage,
            turn=build.ABSENT if turn is None else turn,
            step=build.ABSENT if step is None else step,
            op=op,
        )
    )


def tool_result(seq: int, *texts: str, op: Any = "append") -> Event:
    block = build.tool_result_block("c1", content(*texts))
    return read_event(build.tool_result(seq, [block], op=op))


def system(seq: int, *texts: str, op: Any = "append") -> Event:
    return read_event(build.system_message(seq, content(*texts), op=op))


# --- other events -----------------------------------------------------------------------------


def header(seq: int, system: Any = _UNSET, tools: Any = _UNSET) -> Event:
    return read_event(build.request_header(seq, system=system, tools=tools))


def context(seq: int, window: Any = _UNSET) -> Event:
    return read_event(build.request_context(seq, window))


def usage(
    input: int = 0,
    output: int = 0,
    cache_read: int | None = None,
    cache_write: int | None = None,
) -> dict[str, Any]:
    return build.usage(
        input,
        output,
        cache_read=build.ABSENT if cache_read is None else cache_read,
        cache_write=build.ABSENT if cache_write is None else cache_write,
    )


def usage_chunk(seq: int, sample: Any, turn: int = 0, step: int = 0) -> Event:
    return read_event(build.usage_chunk(seq, sample, turn=turn, step=step))


def text_chunk(seq: int, delta: str = "x", turn: int = 0, step: int = 0) -> Event:
    return read_event(build.assistant_chunk(seq, build.text_delta(delta), turn=turn, step=step))


def meter(
    seq: int,
    start: int,
    end: int,
    tokens: int,
    shadowed: Any = _UNSET,
    kind: str = "compaction/summary",
) -> Event:
    """A metering event arming a claim over ``start..end`` priced ``tokens``."""
    return read_event(build.metering(seq, start, end, tokens, shadowed_seqs=shadowed, type=kind))


def noop(seq: int, kind: str = "turn/start") -> Event:
    return ev(kind, seq, {})


# --- folding ----------------------------------------------------------------------------------


def fold(projection: Any, events: Iterable[Event], state: Any = None) -> Any:
    """Apply ``events`` in order to ``state`` (``projection.init()`` when ``None``)."""
    state = projection.init() if state is None else state
    for event in events:
        state = projection.apply(state, event)
    return state
