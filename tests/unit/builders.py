"""Small builders for session events, shared by the unit tests (see conftest.py).

Every builder returns what ``read_event`` makes of a raw JSON object, so a test reads
exactly like the log line it stands for. ``raw_*`` variants return the raw dict.
"""

from __future__ import annotations

from typing import Any

from stream.contract.events import Event, read_event

_UNSET: Any = object()


def raw(
    type: str,
    seq: int,
    data: Any = _UNSET,
    surfaceOp: Any = _UNSET,
    time: Any = 1_700_000_000_000,
    **extra: Any,
) -> dict[str, Any]:
    """A raw event object; ``data`` defaults to ``{}``, ``surfaceOp`` to absent."""
    event: dict[str, Any] = {"type": type, "seq": seq, "time": time}
    event["data"] = {} if data is _UNSET else data
    if surfaceOp is not _UNSET:
        event["surfaceOp"] = surfaceOp
    event.update(extra)
    return event


def ev(
    type: str,
    seq: int,
    data: Any = _UNSET,
    surfaceOp: Any = _UNSET,
    **extra: Any,
) -> Event:
    """``read_event`` of :func:`raw`."""
    return read_event(raw(type, seq, data, surfaceOp, **extra))


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def content(*texts: str) -> list[dict[str, Any]]:
    return [text(t) for t in texts]


def replace(start: int, end: int, v3: bool = False) -> dict[str, Any]:
    """A replace surfaceOp in format v0 (``start``/``end``) or v3 (``startSeq``/``endSeq``)."""
    if v3:
        return {"op": "replace", "startSeq": start, "endSeq": end}
    return {"op": "replace", "start": start, "end": end}


# --- surface events ---------------------------------------------------------------------------


def user(seq: int, *texts: str, op: Any = "append") -> Event:
    return ev("user/message", seq, {"role": "user", "content": content(*texts)}, op)


def assistant(
    seq: int,
    *texts: str,
    op: Any = "append",
    usage: Any = _UNSET,
    turn: int | None = None,
    step: int | None = None,
) -> Event:
    data: dict[str, Any] = {"message": {"role": "assistant", "content": content(*texts)}}
    if usage is not _UNSET:
        data["usage"] = usage
    if turn is not None:
        data["turn"] = turn
    if step is not None:
        data["step"] = step
    return ev("assistant/message", seq, data, op)


def tool_result(seq: int, *texts: str, op: Any = "append") -> Event:
    block = {"type": "tool-result", "callId": "c1", "content": content(*texts)}
    return ev("tool/result", seq, {"message": {"role": "tool", "content": [block]}}, op)


def system(seq: int, *texts: str, op: Any = "append") -> Event:
    message = {"role": "system", "content": content(*texts)}
    return ev("system/message", seq, {"message": message}, op)


# --- other events -----------------------------------------------------------------------------


def header(seq: int, system: Any = _UNSET, tools: Any = _UNSET) -> Event:
    head: dict[str, Any] = {"config": {"model": "deepseek-chat"}}
    if system is not _UNSET:
        head["system"] = system
    if tools is not _UNSET:
        head["tools"] = tools
    return ev("request/header", seq, {"header": head})


def context(seq: int, window: Any = _UNSET) -> Event:
    return ev("request/context", seq, {} if window is _UNSET else {"contextWindow": window})


def usage(
    input: int = 0,
    output: int = 0,
    cache_read: int | None = None,
    cache_write: int | None = None,
) -> dict[str, Any]:
    out: dict[str, Any] = {"inputTokens": input, "outputTokens": output}
    if cache_read is not None:
        out["cacheReadTokens"] = cache_read
    if cache_write is not None:
        out["cacheWriteTokens"] = cache_write
    return out


def usage_chunk(seq: int, sample: Any, turn: int = 0, step: int = 0) -> Event:
    return ev(
        "assistant/chunk",
        seq,
        {"turn": turn, "step": step, "chunk": {"type": "usage", "usage": sample}},
    )


def text_chunk(seq: int, delta: str = "x", turn: int = 0, step: int = 0) -> Event:
    chunk = {"type": "text-delta", "index": 0, "text": delta}
    return ev("assistant/chunk", seq, {"turn": turn, "step": step, "chunk": chunk})


def meter(
    seq: int,
    start: int,
    end: int,
    tokens: int,
    shadowed: Any = _UNSET,
    kind: str = "compaction/summary",
) -> Event:
    """A metering event arming a claim over ``start..end`` priced ``tokens``."""
    data: dict[str, Any] = {
        "shadowedRange": {"start": start, "end": end},
        "shadowedTokenCount": tokens,
    }
    if shadowed is not _UNSET:
        data["shadowedSeqs"] = shadowed
    return ev(kind, seq, data)


def noop(seq: int, kind: str = "turn/start") -> Event:
    return ev(kind, seq, {})
