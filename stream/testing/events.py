"""The event factory of the tests and benchmarks, not part of the contract: raw dsh events
and log rows, in the shapes the contract reads (contract: "Events", "Session logs").

The unit tests, the property strategies, the oracle's session generator and the benchmarks
all build their input here; nothing in the service does. Every function returns the plain
JSON value a log line or a Kafka record holds (dicts and lists, keys in the order dsh
writes them); ``stream.contract.events.read_event`` and ``stream.contract.storage.expand``
are the readers.

Nothing here validates. A test that needs a malformed event passes the bad value through
the same function: parameters typed ``Json`` take any value, written as given. An
optional key is left out when its argument is ``ABSENT`` (most optional arguments'
default); any other value, ``None`` included, is written (``null`` is itself a value the
contract rules on).

Pure: no I/O, no clock (``time`` defaults to the fixed ``T0``).
"""

import enum
from collections.abc import Sequence
from typing import Any, Final, Literal, TypeAlias

from stream.contract.events import APPEND
from stream.contract.storage import CHUNK_ROWS

Json: TypeAlias = Any  # any JSON value, deliberately wrong ones included
RawEvent: TypeAlias = dict[str, Any]  # one event object, as a log line or a Kafka record holds it
Block: TypeAlias = dict[str, Any]  # one content block

T0: Final = 1_700_000_000_000  # the default event time (epoch ms); no projection reads it
DEFAULT_CONFIG: Final = {"model": "deepseek-chat"}


class _Absent(enum.Enum):
    ABSENT = "ABSENT"

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Final = _Absent.ABSENT  # leave the key out
Opt: TypeAlias = Json | _Absent  # an optional key's value

MeteringType = Literal["compaction/summary", "compaction/prune"]


def _put(target: dict[str, Any], key: str, value: Opt) -> None:
    if value is not ABSENT:
        target[key] = value


# --- the envelope -------------------------------------------------------------------------------


def event(
    type: Json,
    seq: Json,
    data: Opt = ABSENT,
    *,
    op: Opt = ABSENT,
    time: Opt = T0,
    **extra: Json,
) -> RawEvent:
    """``{type, seq, time, data, surfaceOp?, ...extra}``: any event (contract: "Events").

    ``op`` is the ``surfaceOp`` (``APPEND`` or a :func:`replace`); ``extra`` adds other
    keys as given, e.g. ``sourceEventSeqs=[...]`` or ``ignorable=True``.
    """
    out: RawEvent = {"type": type, "seq": seq}
    _put(out, "time", time)
    _put(out, "data", data)
    _put(out, "surfaceOp", op)
    out.update(extra)
    return out


def replace(start: Json, end: Json, *, v3: bool = False) -> dict[str, Json]:
    """A replace ``surfaceOp`` over surface nodes ``start..end``: format v0
    ``{op, start, end}``, or with ``v3`` format v3 ``{op, startSeq, endSeq}``."""
    if v3:
        return {"op": "replace", "startSeq": start, "endSeq": end}
    return {"op": "replace", "start": start, "end": end}


# --- content blocks (contract: "Pricing") ------------------------------------------------------


def text_block(text: Json) -> Block:
    return {"type": "text", "text": text}


def reasoning_block(text: Json) -> Block:
    return {"type": "reasoning", "text": text}


def texts(*values: str) -> list[Block]:
    """A content list of one text block per value."""
    return [text_block(value) for value in values]


def tool_call_block(call_id: Json, name: Json, arguments: Json) -> Block:
    """``{type: "tool-call", id, name, arguments}``; ``arguments`` is the raw JSON text."""
    return {"type": "tool-call", "id": call_id, "name": name, "arguments": arguments}


def tool_result_block(
    call_id: Json, content: Json, *, name: Opt = ABSENT, is_error: Opt = ABSENT
) -> Block:
    """``{type: "tool-result", callId, name?, content, isError?}``; priced by its content."""
    out: Block = {"type": "tool-result", "callId": call_id}
    _put(out, "name", name)
    out["content"] = content
    _put(out, "isError", is_error)
    return out


# --- per-type data ------------------------------------------------------------------------------


def user_data(content: Json, *, source: Opt = "user") -> dict[str, Json]:
    """A ``user/message``'s data, which is itself the message: ``{role, content, source}``."""
    out: dict[str, Json] = {"role": "user", "content": content}
    _put(out, "source", source)
    return out


def assistant_data(
    content: Json, *, usage: Opt = ABSENT, turn: Opt = ABSENT, step: Opt = ABSENT
) -> dict[str, Json]:
    """``{turn?, step?, message: {role, content}, usage?}``. Content ``[]`` is a usage-only
    step: no node of its own."""
    out: dict[str, Json] = {}
    _put(out, "turn", turn)
    _put(out, "step", step)
    out["message"] = {"role": "assistant", "content": content}
    _put(out, "usage", usage)
    return out


def tool_result_data(blocks: Json) -> dict[str, Json]:
    """``{message: {role: "tool", content: blocks}}`` (usually tool-result blocks)."""
    return {"message": {"role": "tool", "content": blocks}}


def system_data(content: Json) -> dict[str, Json]:
    """``{message: {role: "system", content}}``; priced as one prompt."""
    return {"message": {"role": "system", "content": content}}


def header_data(
    *, system: Opt = ABSENT, tools: Opt = ABSENT, config: Json = DEFAULT_CONFIG
) -> dict[str, Json]:
    """``{header: {config, system?, tools?}}``: the request envelope. ``""`` and ``[]``
    count as absent (canonical)."""
    header: dict[str, Json] = {"config": dict(config) if type(config) is dict else config}
    _put(header, "system", system)
    _put(header, "tools", tools)
    return {"header": header}


def context_data(window: Opt = ABSENT) -> dict[str, Json]:
    """``{contextWindow?}``; leaving it out removes the window from the view."""
    out: dict[str, Json] = {}
    _put(out, "contextWindow", window)
    return out


def chunk_data(chunk: Json, *, turn: Opt = 0, step: Opt = 0) -> dict[str, Json]:
    """An ``assistant/chunk``'s data: ``{turn, step, chunk}``."""
    out: dict[str, Json] = {}
    _put(out, "turn", turn)
    _put(out, "step", step)
    out["chunk"] = chunk
    return out


def metering_data(
    start: Json, end: Json, tokens: Json, *, shadowed_seqs: Opt = ABSENT
) -> dict[str, Json]:
    """A metering event's data: the claim ``{shadowedRange: {start, end},
    shadowedTokenCount, shadowedSeqs?}`` (contract: "The shadow-price claim")."""
    out: dict[str, Json] = {
        "shadowedRange": {"start": start, "end": end},
        "shadowedTokenCount": tokens,
    }
    _put(out, "shadowedSeqs", shadowed_seqs)
    return out


def usage(
    input_tokens: Json,
    output_tokens: Json,
    *,
    cache_read: Opt = ABSENT,
    cache_write: Opt = ABSENT,
    reasoning: Opt = ABSENT,
) -> dict[str, Json]:
    """A usage object ``{inputTokens, outputTokens, cacheReadTokens?, cacheWriteTokens?,
    reasoningTokens?}``; ``None`` writes ``null`` ("no such bucket")."""
    out: dict[str, Json] = {"inputTokens": input_tokens, "outputTokens": output_tokens}
    _put(out, "cacheReadTokens", cache_read)
    _put(out, "cacheWriteTokens", cache_write)
    _put(out, "reasoningTokens", reasoning)
    return out


# --- chunks -------------------------------------------------------------------------------------


def usage_delta(sample: Json) -> dict[str, Json]:
    """The chunk ``{type: "usage", usage}``: a usage sample."""
    return {"type": "usage", "usage": sample}


def text_delta(text: Json, *, index: Json = 0) -> dict[str, Json]:
    return {"type": "text-delta", "index": index, "text": text}


def reasoning_delta(text: Json, *, index: Json = 0) -> dict[str, Json]:
    return {"type": "reasoning-delta", "index": index, "text": text}


def tool_call_delta(
    call_id: Json, arguments_delta: Json, *, index: Json = 0, name: Opt = ABSENT
) -> dict[str, Json]:
    """``{type: "tool-call-delta", index, id, name?, argumentsDelta}``."""
    out: dict[str, Json] = {"type": "tool-call-delta", "index": index, "id": call_id}
    _put(out, "name", name)
    out["argumentsDelta"] = arguments_delta
    return out


# --- events -------------------------------------------------------------------------------------


def user_message(
    seq: Json, content: Json, *, source: Opt = "user", op: Opt = APPEND, time: Opt = T0
) -> RawEvent:
    """A ``user/message`` (:func:`user_data`); a compaction summary has source
    ``"compaction"``."""
    return event("user/message", seq, user_data(content, source=source), op=op, time=time)


def assistant_message(
    seq: Json,
    content: Json,
    *,
    usage: Opt = ABSENT,
    turn: Opt = ABSENT,
    step: Opt = ABSENT,
    op: Opt = APPEND,
    time: Opt = T0,
) -> RawEvent:
    data = assistant_data(content, usage=usage, turn=turn, step=step)
    return event("assistant/message", seq, data, op=op, time=time)


def tool_result(seq: Json, blocks: Json, *, op: Opt = APPEND, time: Opt = T0) -> RawEvent:
    """A ``tool/result`` whose message holds ``blocks`` (see :func:`tool_result_block`)."""
    return event("tool/result", seq, tool_result_data(blocks), op=op, time=time)


def system_message(seq: Json, content: Json, *, op: Opt = APPEND, time: Opt = T0) -> RawEvent:
    return event("system/message", seq, system_data(content), op=op, time=time)


def request_header(
    seq: Json,
    *,
    system: Opt = ABSENT,
    tools: Opt = ABSENT,
    config: Json = DEFAULT_CONFIG,
    time: Opt = T0,
) -> RawEvent:
    data = header_data(system=system, tools=tools, config=config)
    return event("request/header", seq, data, time=time)


def request_context(seq: Json, window: Opt = ABSENT, *, time: Opt = T0) -> RawEvent:
    return event("request/context", seq, context_data(window), time=time)


def assistant_chunk(
    seq: Json, chunk: Json, *, turn: Opt = 0, step: Opt = 0, time: Opt = T0
) -> RawEvent:
    """An ``assistant/chunk``: passive unless ``chunk`` is a :func:`usage_delta`."""
    return event("assistant/chunk", seq, chunk_data(chunk, turn=turn, step=step), time=time)


def usage_chunk(
    seq: Json, sample: Json, *, turn: Opt = 0, step: Opt = 0, time: Opt = T0
) -> RawEvent:
    """A usage sample as an ``assistant/chunk``."""
    return assistant_chunk(seq, usage_delta(sample), turn=turn, step=step, time=time)


def metering(
    seq: Json,
    start: Json,
    end: Json,
    tokens: Json,
    *,
    shadowed_seqs: Opt = ABSENT,
    type: MeteringType | str = "compaction/summary",
    time: Opt = T0,
) -> RawEvent:
    """A metering event (``compaction/summary`` or ``compaction/prune``) arming a claim
    over ``start..end`` priced ``tokens``."""
    data = metering_data(start, end, tokens, shadowed_seqs=shadowed_seqs)
    return event(type, seq, data, time=time)


# --- session logs (contract: "Session logs") ----------------------------------------------------


def session_header(session_id: Json) -> dict[str, Json]:
    """The first line of a log, ``{type: "session", id}``: it names the session."""
    return {"type": "session", "id": session_id}


ChunkRowType = Literal["text-chunks", "reasoning-chunks", "tool-call-chunks"]


def chunk_row(
    type: ChunkRowType | str,
    seq0: Json,
    time0: Json,
    members: Json,
    *,
    turn: Json = 0,
    step: Json = 0,
    index: Json = 0,
    dt: Json = None,
    call_id: Opt = ABSENT,
    name: Opt = ABSENT,
) -> dict[str, Json]:
    """A packed chunk row standing for ``len(members)`` consecutive chunk events from
    ``seq0``: ``members`` are the texts (text and reasoning rows) or the argument deltas
    (tool-call rows, which also take ``call_id`` and an optional ``name``). ``dt`` (the
    time gaps between members) defaults to all zeros."""
    if dt is None:
        dt = [0] * (len(members) - 1) if isinstance(members, list) and members else []
    data: dict[str, Json] = {"turn": turn, "step": step, "index": index}
    _put(data, "id", call_id)
    _put(data, "name", name)
    data["dt"] = dt
    data["args" if type == "tool-call-chunks" else "texts"] = members
    return {"type": type, "seq0": seq0, "time0": time0, "data": data}


_ROW_OF_DELTA: Final = {delta: tag for tag, (_, delta) in CHUNK_ROWS.items()}


def pack_run(run: Sequence[RawEvent]) -> dict[str, Json]:
    """The chunk row for a run of ``assistant/chunk`` delta events: consecutive seqs, one
    block (same turn, step, index; for tool calls the same id and name). The inverse of
    ``storage.expand``; whether a run may be packed is the caller's decision."""
    if not run:
        raise ValueError("an empty run packs into no row")
    first = run[0]
    chunk = first["data"]["chunk"]
    tag = _ROW_OF_DELTA.get(chunk.get("type"))
    if tag is None:
        raise ValueError(f"not a delta chunk: {chunk.get('type')!r}")
    tool = tag == "tool-call-chunks"
    members = [e["data"]["chunk"]["argumentsDelta" if tool else "text"] for e in run]
    return chunk_row(
        tag,
        first["seq"],
        first["time"],
        members,
        turn=first["data"]["turn"],
        step=first["data"]["step"],
        index=chunk["index"],
        dt=[event["time"] - run[k]["time"] for k, event in enumerate(run[1:])],
        call_id=chunk["id"] if tool else ABSENT,
        name=chunk.get("name", ABSENT) if tool else ABSENT,
    )


__all__ = [
    "ABSENT",
    "APPEND",
    "DEFAULT_CONFIG",
    "T0",
    "Block",
    "Json",
    "RawEvent",
    "assistant_chunk",
    "assistant_data",
    "assistant_message",
    "chunk_data",
    "chunk_row",
    "context_data",
    "event",
    "header_data",
    "metering",
    "metering_data",
    "pack_run",
    "reasoning_block",
    "reasoning_delta",
    "replace",
    "request_context",
    "request_header",
    "session_header",
    "system_data",
    "system_message",
    "text_block",
    "text_delta",
    "texts",
    "tool_call_block",
    "tool_call_delta",
    "tool_result",
    "tool_result_block",
    "tool_result_data",
    "usage",
    "usage_chunk",
    "usage_delta",
    "user_data",
    "user_message",
]
