"""Hypothesis strategies for random *valid* dsh session logs.

The builder plays the producer: it keeps the positional surface (``Surface``, the
``measure()`` X-ray) of everything it has emitted, and uses it to write what a live
harness writes — a metering event carrying the exact price, range and shadowed seqs of
the replacement that immediately follows it. Besides metered replacements the logs hold
one kind of unmetered replacement: a rewrite of exactly one retained system prompt,
which the contract prices exactly. So on every generated log ``contextBreakdown`` must
equal the positional fold after every event.

Logs are lists of raw event dicts (what ``read_event`` takes); seqs are contiguous from 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from stream.contract.events import read_event
from stream.projections.positional import Surface

NASTY = [
    "",
    "😀",
    "中文字符",
    "e\u0301",
    "\u2028",
    "\x00\x1f",
    '"\\',
    "\ud800",  # lone surrogates are legal JSON.parse output
    "\udc00x",
    "👩\u200d💻",
    "\U0010ffff",
]

texts = st.one_of(
    st.text(max_size=40),
    st.sampled_from(NASTY),
    st.lists(st.sampled_from(NASTY), max_size=4).map("".join),
)

counts = st.integers(min_value=0, max_value=200_000)


@st.composite
def usages(draw: st.DrawFn) -> dict[str, Any]:
    out: dict[str, Any] = {"inputTokens": draw(counts), "outputTokens": draw(counts)}
    for key in ("cacheReadTokens", "cacheWriteTokens", "reasoningTokens"):
        if draw(st.booleans()):
            out[key] = draw(st.one_of(counts, st.none()))
    return out


@st.composite
def blocks(draw: st.DrawFn, tool_calls: bool = True) -> dict[str, Any]:
    kinds = ["text", "reasoning", "tool-call", "image"] if tool_calls else ["text", "image"]
    kind = draw(st.sampled_from(kinds))
    if kind in ("text", "reasoning"):
        return {"type": kind, "text": draw(texts)}
    if kind == "tool-call":
        return {
            "type": "tool-call",
            "callId": draw(st.text(max_size=8)),
            "name": draw(st.sampled_from(["bash", "read_file", "搜索", ""])),
            "arguments": draw(texts),
        }
    return {"type": "image", "url": draw(texts), "n": draw(st.sampled_from([1.0, 1e21, -0.0]))}


def contents(tool_calls: bool = True, min_size: int = 1) -> st.SearchStrategy[list[Any]]:
    return st.lists(blocks(tool_calls), min_size=min_size, max_size=3)


@dataclass
class LogBuilder:
    """The producer: emits events and keeps the surface they build."""

    events: list[dict[str, Any]] = field(default_factory=list)
    surface: Surface = field(default_factory=Surface)
    turn: int = 0
    step: int = 0

    @property
    def seq(self) -> int:
        return len(self.events)

    def emit(self, kind: str, data: Any, op: Any = None, **extra: Any) -> None:
        event: dict[str, Any] = {
            "type": kind,
            "seq": self.seq,
            "time": 1_000 + self.seq,
            "data": data,
        }
        if op is not None:
            event["surfaceOp"] = op
        event.update(extra)
        self.surface.fold(read_event(event))  # a producer bug would raise right here
        self.events.append(event)

    def system_nodes(self) -> list[int]:
        return [i for i, node in enumerate(self.surface.nodes) if node.system]


def _op(draw: st.DrawFn, start: int, end: int) -> dict[str, Any]:
    if draw(st.booleans()):
        return {"op": "replace", "start": start, "end": end}  # format v0
    return {"op": "replace", "startSeq": start, "endSeq": end}  # format v3


@st.composite
def surface_payload(draw: st.DrawFn, kind: str) -> Any:
    """``data`` for a non-system surface event of ``kind``."""
    if kind == "user/message":
        return {"role": "user", "content": draw(contents()), "source": "cli"}
    if kind == "tool/result":
        result = {"type": "tool-result", "callId": "c", "content": draw(contents(False, 0))}
        return {"message": {"role": "tool", "content": [result]}}
    data: dict[str, Any] = {"message": {"role": "assistant", "content": draw(contents())}}
    if draw(st.booleans()):
        data.update(
            usage=draw(usages()), turn=draw(st.integers(0, 3)), step=draw(st.integers(0, 3))
        )
    return data


ACTIONS = [
    "user",
    "assistant",
    "tool",
    "system",
    "header",
    "context",
    "usage_chunk",
    "text_chunk",
    "usage_only",
    "noop",
    "metered",
    "rewrite",
]


@st.composite
def session_logs(draw: st.DrawFn, max_actions: int = 30, systems: bool = True) -> list[Any]:
    """A random valid session log (raw event dicts, seqs 0..n-1).

    ``systems=False`` leaves out ``system/message`` events (and so prompt rewrites).
    """
    log = LogBuilder()
    actions = ACTIONS if systems else [a for a in ACTIONS if a not in ("system", "rewrite")]
    for _ in range(draw(st.integers(1, max_actions))):
        action = draw(st.sampled_from(actions))
        if action in ("user", "assistant", "tool"):
            kind = {
                "user": "user/message",
                "assistant": "assistant/message",
                "tool": "tool/result",
            }[action]
            log.emit(kind, draw(surface_payload(kind)), "append")
        elif action == "system":
            content = draw(st.lists(blocks(False), max_size=2))
            log.emit(
                "system/message", {"message": {"role": "system", "content": content}}, "append"
            )
        elif action == "header":
            head: dict[str, Any] = {"config": {"model": "m"}}
            if draw(st.booleans()):
                head["system"] = draw(texts)
            if draw(st.booleans()):
                head["tools"] = draw(
                    st.lists(
                        st.fixed_dictionaries(
                            {
                                "name": st.text(max_size=10),
                                "description": texts,
                                "parameters": st.just({"type": "object", "n": 1.0}),
                            }
                        ),
                        max_size=3,
                    )
                )
            log.emit("request/header", {"header": head})
        elif action == "context":
            window = draw(st.one_of(st.none(), st.integers(1, 2_000_000)))
            log.emit("request/context", {} if window is None else {"contextWindow": window})
        elif action == "usage_chunk":
            log.step += draw(st.sampled_from([0, 0, 1]))
            chunk = {"type": "usage", "usage": draw(usages())}
            log.emit("assistant/chunk", {"turn": log.turn, "step": log.step, "chunk": chunk})
        elif action == "text_chunk":
            chunk = {"type": "text-delta", "index": 0, "text": draw(texts)}
            log.emit("assistant/chunk", {"turn": log.turn, "step": log.step, "chunk": chunk})
        elif action == "usage_only":
            log.emit(
                "assistant/message",
                {
                    "message": {"role": "assistant", "content": []},
                    "usage": draw(usages()),
                    "turn": log.turn,
                    "step": log.step,
                },
                "append",
            )
        elif action == "noop":
            kind = draw(st.sampled_from(["turn/start", "turn/end", "session/note", "x/y"]))
            extra = {"ignorable": True} if draw(st.booleans()) else {}
            log.emit(kind, {"any": draw(texts)}, **extra)
            if kind == "turn/start":
                log.turn, log.step = log.turn + 1, 0
        elif action == "metered" and log.surface.nodes:
            nodes = log.surface.nodes
            i = draw(st.integers(0, len(nodes) - 1))
            j = draw(st.integers(i, len(nodes) - 1))
            shadowed = nodes[i : j + 1]
            data: dict[str, Any] = {
                "shadowedRange": {"start": shadowed[0].seq, "end": shadowed[-1].seq},
                "shadowedTokenCount": sum(n.price for n in shadowed),
                "shadowedSeqs": [n.seq for n in shadowed],
            }
            op = _op(draw, shadowed[0].seq, shadowed[-1].seq)
            log.emit(draw(st.sampled_from(["compaction/summary", "compaction/prune"])), data)
            kind = draw(st.sampled_from(["user/message", "assistant/message", "tool/result"]))
            log.emit(kind, draw(surface_payload(kind)), op)
        elif action == "rewrite" and log.system_nodes():
            # an unmetered rewrite of exactly one retained system prompt
            index = draw(st.sampled_from(log.system_nodes()))
            seq = log.surface.nodes[index].seq
            op = _op(draw, seq, seq)
            if draw(st.integers(0, 3)):
                content = draw(st.lists(blocks(False), max_size=2))
                log.emit("system/message", {"message": {"role": "system", "content": content}}, op)
            else:  # any other replacement removes it
                kind = draw(st.sampled_from(["user/message", "tool/result"]))
                log.emit(kind, draw(surface_payload(kind)), op)
    if not log.events:  # every drawn action needed a surface that was not there yet
        log.emit("user/message", draw(surface_payload("user/message")), "append")
    return log.events


def is_unmetered_replace(log: list[Any], index: int) -> bool:
    event = log[index]
    if type(event.get("surfaceOp")) is not dict:
        return False
    return index == 0 or log[index - 1]["type"] not in ("compaction/summary", "compaction/prune")


@st.composite
def bad_events(draw: st.DrawFn, seq: int) -> list[Any]:
    """Events, from ``seq`` on, whose last one breaks the contract for some projection."""
    base = {"seq": seq, "time": 5}
    user = {"role": "user", "content": [{"type": "text", "text": "abcd"}]}
    choice = draw(
        st.sampled_from(
            [
                "gap",
                "usage_null",
                "usage_negative",
                "window_zero",
                "no_surface_op",
                "surface_op_on_other",
                "replace_extra_key",
                "replace_missing_key",
                "content_not_list",
                "text_not_string",
                "data_not_object",
                "seqs_not_array",
                "negative_count",
                "claim_mismatch",
                "system_over_other",
                "count_float",
                "count_bool",
            ]
        )
    )
    if choice == "gap":
        return [
            {
                **base,
                "seq": seq + draw(st.integers(1, 5)),
                "type": "user/message",
                "data": user,
                "surfaceOp": "append",
            }
        ]
    if choice in ("usage_null", "usage_negative", "count_float", "count_bool"):
        bad = {
            "usage_null": None,
            "usage_negative": {"inputTokens": -1, "outputTokens": 0},
            "count_float": {"inputTokens": 1.5, "outputTokens": 0},
            "count_bool": {"inputTokens": 1, "outputTokens": True},
        }[choice]
        return [
            {
                **base,
                "type": "assistant/chunk",
                "data": {"turn": 0, "step": 0, "chunk": {"type": "usage", "usage": bad}},
            }
        ]
    if choice == "window_zero":
        window = draw(st.sampled_from([0, -1, -100]))
        return [{**base, "type": "request/context", "data": {"contextWindow": window}}]
    if choice == "no_surface_op":
        kind = draw(
            st.sampled_from(["user/message", "assistant/message", "tool/result", "system/message"])
        )
        return [{**base, "type": kind, "data": {"message": user, **user}}]
    if choice == "surface_op_on_other":
        kind = draw(st.sampled_from(["request/header", "assistant/chunk", "x/unknown"]))
        return [{**base, "type": kind, "data": {}, "surfaceOp": "append"}]
    if choice == "replace_extra_key":
        op = {"op": "replace", "start": 0, "end": 0, "extra": 1}
        return [{**base, "type": "user/message", "data": user, "surfaceOp": op}]
    if choice == "replace_missing_key":
        op = {"op": "replace", "startSeq": 0}
        return [{**base, "type": "user/message", "data": user, "surfaceOp": op}]
    if choice == "content_not_list":
        return [
            {**base, "type": "user/message", "data": {"content": "abcd"}, "surfaceOp": "append"}
        ]
    if choice == "text_not_string":
        block = draw(
            st.sampled_from(
                [
                    {"type": "text", "text": 5},
                    {"type": "tool-call", "name": None, "arguments": ""},
                    {"type": "tool-call", "name": "x", "arguments": {}},
                ]
            )
        )
        return [
            {**base, "type": "user/message", "data": {"content": [block]}, "surfaceOp": "append"}
        ]
    if choice == "data_not_object":
        return [
            {
                **base,
                "type": "user/message",
                "data": draw(st.sampled_from([None, [], "x"])),
                "surfaceOp": "append",
            }
        ]
    meter = {"shadowedRange": {"start": 0, "end": 0}, "shadowedTokenCount": 3}
    if choice == "seqs_not_array":
        return [{**base, "type": "compaction/prune", "data": {**meter, "shadowedSeqs": "0"}}]
    if choice == "negative_count":
        return [{**base, "type": "compaction/summary", "data": {**meter, "shadowedTokenCount": -3}}]
    if choice == "claim_mismatch":
        return [
            {**base, "type": "compaction/summary", "data": {**meter, "shadowedSeqs": [0]}},
            {
                **base,
                "seq": seq + 1,
                "type": "user/message",
                "data": user,
                "surfaceOp": {"op": "replace", "start": 0, "end": 10_000},
            },
        ]
    # system_over_other: an unmetered system/message over something not a retained prompt
    return [
        {
            **base,
            "type": "system/message",
            "data": {"message": user},
            "surfaceOp": {"op": "replace", "start": 10_000, "end": 10_000},
        }
    ]
