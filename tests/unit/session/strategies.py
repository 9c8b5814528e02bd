"""Hypothesis strategies for random *valid* dsh session logs.

The builder plays the producer: it keeps the positional surface (``Surface``, the
``measure()`` X-ray) of everything it has emitted, and uses it to write what a live
harness writes — a metering event carrying the exact price, range and shadowed seqs of
the replacement that immediately follows it. Besides metered replacements the logs hold
one kind of unmetered replacement: a rewrite of exactly one retained system prompt,
which the contract prices exactly. So on every generated log ``contextBreakdown`` must
equal the positional fold after every event.

Logs are lists of raw event dicts (what ``read_event`` takes), built by the event factory
``stream.testing.events``; seqs are contiguous from 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from stream.contract.events import read_event
from stream.projections.positional import Surface
from stream.testing import events as build

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
    input_tokens, output_tokens = draw(counts), draw(counts)
    cache_read, cache_write, reasoning = (
        draw(st.one_of(counts, st.none())) if draw(st.booleans()) else build.ABSENT
        for _ in range(3)
    )
    return build.usage(
        input_tokens,
        output_tokens,
        cache_read=cache_read,
        cache_write=cache_write,
        reasoning=reasoning,
    )


@st.composite
def blocks(draw: st.DrawFn, tool_calls: bool = True) -> dict[str, Any]:
    kinds = ["text", "reasoning", "tool-call", "image"] if tool_calls else ["text", "image"]
    kind = draw(st.sampled_from(kinds))
    if kind == "text":
        return build.text_block(draw(texts))
    if kind == "reasoning":
        return build.reasoning_block(draw(texts))
    if kind == "tool-call":
        return build.tool_call_block(
            draw(st.text(max_size=8)),
            draw(st.sampled_from(["bash", "read_file", "搜索", ""])),
            draw(texts),
        )
    return {"type": "image", "url": draw(texts), "n": draw(st.sampled_from([1.0, 1e21, -0.0]))}


tool_lists = st.lists(
    st.fixed_dictionaries(
        {
            "name": st.text(max_size=10),
            "description": texts,
            "parameters": st.just({"type": "object", "n": 1.0}),
        }
    ),
    max_size=3,
)


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

    def emit(self, kind: str, data: Any, op: Any = build.ABSENT, **extra: Any) -> None:
        event = build.event(kind, self.seq, data, op=op, time=1_000 + self.seq, **extra)
        self.surface.fold(read_event(event))  # a producer bug would raise right here
        self.events.append(event)

    def system_nodes(self) -> list[int]:
        return [i for i, node in enumerate(self.surface.nodes) if node.system]


def _op(draw: st.DrawFn, start: int, end: int) -> dict[str, Any]:
    return build.replace(start, end, v3=not draw(st.booleans()))  # format v0 or v3


@st.composite
def surface_payload(draw: st.DrawFn, kind: str) -> Any:
    """``data`` for a non-system surface event of ``kind``."""
    if kind == "user/message":
        return build.user_data(draw(contents()), source="cli")
    if kind == "tool/result":
        return build.tool_result_data([build.tool_result_block("c", draw(contents(False, 0)))])
    content = draw(contents())
    if draw(st.booleans()):
        return build.assistant_data(
            content,
            usage=draw(usages()),
            turn=draw(st.integers(0, 3)),
            step=draw(st.integers(0, 3)),
        )
    return build.assistant_data(content)


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
            log.emit(kind, draw(surface_payload(kind)), build.APPEND)
        elif action == "system":
            content = draw(st.lists(blocks(False), max_size=2))
            log.emit("system/message", build.system_data(content), build.APPEND)
        elif action == "header":
            system = draw(texts) if draw(st.booleans()) else build.ABSENT
            tools = draw(tool_lists) if draw(st.booleans()) else build.ABSENT
            log.emit("request/header", build.header_data(system=system, tools=tools))
        elif action == "context":
            window = draw(st.one_of(st.none(), st.integers(1, 2_000_000)))
            log.emit(
                "request/context", build.context_data(build.ABSENT if window is None else window)
            )
        elif action == "usage_chunk":
            log.step += draw(st.sampled_from([0, 0, 1]))
            chunk = build.usage_delta(draw(usages()))
            log.emit("assistant/chunk", build.chunk_data(chunk, turn=log.turn, step=log.step))
        elif action == "text_chunk":
            chunk = build.text_delta(draw(texts))
            log.emit("assistant/chunk", build.chunk_data(chunk, turn=log.turn, step=log.step))
        elif action == "usage_only":
            data = build.assistant_data([], usage=draw(usages()), turn=log.turn, step=log.step)
            log.emit("assistant/message", data, build.APPEND)
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
            first, last = shadowed[0].seq, shadowed[-1].seq
            data = build.metering_data(
                first,
                last,
                sum(n.price for n in shadowed),
                shadowed_seqs=[n.seq for n in shadowed],
            )
            op = _op(draw, first, last)
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
                log.emit("system/message", build.system_data(content), op)
            else:  # any other replacement removes it
                kind = draw(st.sampled_from(["user/message", "tool/result"]))
                log.emit(kind, draw(surface_payload(kind)), op)
    if not log.events:  # every drawn action needed a surface that was not there yet
        log.emit("user/message", draw(surface_payload("user/message")), build.APPEND)
    return log.events


def is_unmetered_replace(log: list[Any], index: int) -> bool:
    event = log[index]
    if type(event.get("surfaceOp")) is not dict:
        return False
    return index == 0 or log[index - 1]["type"] not in ("compaction/summary", "compaction/prune")


@st.composite
def bad_events(draw: st.DrawFn, seq: int) -> list[Any]:
    """Events, from ``seq`` on, whose last one breaks the contract for some projection."""
    user = build.user_data(build.texts("abcd"), source=build.ABSENT)
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

    def event(kind: str, data: Any, op: Any = build.ABSENT, at: int = seq) -> dict[str, Any]:
        return build.event(kind, at, data, op=op, time=5)

    if choice == "gap":
        return [event("user/message", user, build.APPEND, seq + draw(st.integers(1, 5)))]
    if choice in ("usage_null", "usage_negative", "count_float", "count_bool"):
        bad = {
            "usage_null": None,
            "usage_negative": build.usage(-1, 0),
            "count_float": build.usage(1.5, 0),
            "count_bool": build.usage(1, True),
        }[choice]
        return [build.usage_chunk(seq, bad, time=5)]
    if choice == "window_zero":
        window = draw(st.sampled_from([0, -1, -100]))
        return [build.request_context(seq, window, time=5)]
    if choice == "no_surface_op":
        kind = draw(
            st.sampled_from(["user/message", "assistant/message", "tool/result", "system/message"])
        )
        return [event(kind, {"message": user, **user})]
    if choice == "surface_op_on_other":
        kind = draw(st.sampled_from(["request/header", "assistant/chunk", "x/unknown"]))
        return [event(kind, {}, build.APPEND)]
    if choice == "replace_extra_key":
        return [event("user/message", user, {**build.replace(0, 0), "extra": 1})]
    if choice == "replace_missing_key":
        return [event("user/message", user, {"op": "replace", "startSeq": 0})]
    if choice == "content_not_list":
        return [event("user/message", {"content": "abcd"}, build.APPEND)]
    if choice == "text_not_string":
        block = draw(
            st.sampled_from(
                [
                    build.text_block(5),
                    {"type": "tool-call", "name": None, "arguments": ""},
                    {"type": "tool-call", "name": "x", "arguments": {}},
                ]
            )
        )
        return [event("user/message", {"content": [block]}, build.APPEND)]
    if choice == "data_not_object":
        return [event("user/message", draw(st.sampled_from([None, [], "x"])), build.APPEND)]
    if choice == "seqs_not_array":
        return [build.metering(seq, 0, 0, 3, shadowed_seqs="0", type="compaction/prune", time=5)]
    if choice == "negative_count":
        return [build.metering(seq, 0, 0, -3, time=5)]
    if choice == "claim_mismatch":
        return [
            build.metering(seq, 0, 0, 3, shadowed_seqs=[0], time=5),
            event("user/message", user, build.replace(0, 10_000), seq + 1),
        ]
    # system_over_other: an unmetered system/message over something not a retained prompt
    return [event("system/message", {"message": user}, build.replace(10_000, 10_000))]
