"""Short names for session events in the unit tests (see conftest.py), and :func:`fold`.

The events themselves come from the event factory, ``stream.testing.events``; these
wrappers only make a test read like the log line it stands for: every builder returns
what ``read_event`` makes of the raw object, and ``raw`` returns the raw object itself.
As in the factory, ``ABSENT`` for an optional argument leaves the key out and any other
value, ``None`` included, is written (``None`` as ``null``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from stream.contract.events import Event, read_event
from stream.testing import events as build
from stream.testing.events import ABSENT

_EMPTY: Any = {}  # raw's default data, standing for a fresh {} each call


def raw(
    type: str,
    seq: int,
    data: Any = _EMPTY,
    surfaceOp: Any = ABSENT,
    time: Any = build.T0,
    **extra: Any,
) -> dict[str, Any]:
    """A raw event object; ``data`` defaults to ``{}`` (``ABSENT`` leaves it out),
    ``surfaceOp`` to absent."""
    return build.event(type, seq, {} if data is _EMPTY else data, op=surfaceOp, time=time, **extra)


def ev(
    type: str,
    seq: int,
    data: Any = _EMPTY,
    surfaceOp: Any = ABSENT,
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
    usage: Any = ABSENT,
    turn: Any = ABSENT,
    step: Any = ABSENT,
) -> Event:
    return read_event(
        build.assistant_message(seq, content(*texts), usage=usage, turn=turn, step=step, op=op)
    )


def tool_result(seq: int, *texts: str, op: Any = "append") -> Event:
    block = build.tool_result_block("c1", content(*texts))
    return read_event(build.tool_result(seq, [block], op=op))


def system(seq: int, *texts: str, op: Any = "append") -> Event:
    return read_event(build.system_message(seq, content(*texts), op=op))


# --- other events -----------------------------------------------------------------------------


def header(seq: int, system: Any = ABSENT, tools: Any = ABSENT) -> Event:
    return read_event(build.request_header(seq, system=system, tools=tools))


def context(seq: int, window: Any = ABSENT) -> Event:
    return read_event(build.request_context(seq, window))


def usage(
    input: int = 0,
    output: int = 0,
    cache_read: Any = ABSENT,
    cache_write: Any = ABSENT,
) -> dict[str, Any]:
    return build.usage(input, output, cache_read=cache_read, cache_write=cache_write)


def usage_chunk(seq: int, sample: Any, turn: int = 0, step: int = 0) -> Event:
    return read_event(build.usage_chunk(seq, sample, turn=turn, step=step))


def text_chunk(seq: int, delta: str = "x", turn: int = 0, step: int = 0) -> Event:
    return read_event(build.assistant_chunk(seq, build.text_delta(delta), turn=turn, step=step))


def meter(
    seq: int,
    start: int,
    end: int,
    tokens: int,
    shadowed: Any = ABSENT,
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
