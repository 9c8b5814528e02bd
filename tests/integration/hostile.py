"""Hostile cases for the fault-injection suite: sessions whose events are mutated into
every shape the contract must fault or dead-letter (wrong types, exotic values, claims
that contradict the fold, depths past the limit, oversized parts, segments regrouped), as
``Outgoing`` messages the ledger of ``tests.integration.faults`` models exactly."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any

import orjson

from stream.contract.jsontext import MAX_DEPTH, text_depth
from tests.generators.sessions import DupKeyObject, RawNumber
from tests.integration.faults import (
    Limits,
    Outgoing,
    Part,
    chunked,
    garbage,
    garbage_message,
    garbage_part,
    interleave,
    segment,
    session_parts,
    single,
    text_of,
)


def deep_array(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def nested_part(text: bytes) -> Part:
    """An event spliced with deep nesting, as a message of its own: readable up to the
    contract's nesting bound, unreadable (dead-lettered) past it."""
    return Part(text, 1 if text_depth(text) <= MAX_DEPTH else 0, alone=True)


def user_message(seq: int, content: Any, op: Any = "append") -> dict[str, Any]:
    return {
        "type": "user/message",
        "seq": seq,
        "time": 1_767_225_600_000 + seq,
        "surfaceOp": op,
        "data": {"role": "user", "content": content, "source": "user"},
    }


def _text_block(text: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": text}]


def _assistant(seq: int, usage: Any, **data: Any) -> dict[str, Any]:
    return {
        "type": "assistant/message",
        "seq": seq,
        "time": seq,
        "surfaceOp": "append",
        "data": {
            "turn": 0,
            "step": seq,
            "message": {"role": "assistant", "content": []},
            "usage": usage,
            **data,
        },
    }


def _wrong_types(seq: int) -> list[Any]:
    """Events with a usable seq and something wrong everywhere else (contract levels 2-4):
    readable, each faults some projection."""
    big = RawNumber("1e400")
    huge = RawNumber("123456789012345678901234567890")
    t = 1_767_225_600_000 + seq
    return [
        {"type": 7, "seq": seq, "time": t, "data": {}},
        {"type": None, "seq": seq, "time": t, "data": {}},
        {"type": "user/message", "seq": seq, "time": t, "data": [], "surfaceOp": "append"},
        {"type": "turn/start", "seq": seq, "time": "noon", "data": {}},
        {"type": "turn/start", "seq": seq, "time": RawNumber("1.5"), "data": {}},
        {"type": "turn/start", "seq": seq, "time": big, "data": {}},
        {"type": "turn/start", "seq": seq, "data": {}},
        {"type": "turn/start", "seq": RawNumber(f"{seq}.0"), "time": t, "data": {}},
        user_message(seq, _text_block("x"), "prepend"),
        user_message(seq, _text_block("x"), {"op": "replace", "start": 0}),
        user_message(seq, _text_block("x"), {"op": "replace", "start": 0, "endSeq": 1}),
        user_message(seq, _text_block("x"), {"op": "replace", "start": -1, "end": 2}),
        user_message(seq, _text_block("x"), {"op": "replace", "start": 0, "end": big}),
        user_message(seq, _text_block("x"), 5),
        user_message(seq, _text_block("x"), None),
        {"type": "turn/start", "seq": seq, "time": t, "data": {}, "surfaceOp": "append"},
        user_message(seq, "text, not blocks"),
        user_message(seq, [1, 2]),
        user_message(seq, [{"type": "text", "text": 5}]),
        user_message(seq, [{"type": "tool-call", "name": [], "arguments": "{}"}]),
        user_message(seq, [{"type": "tool-result", "content": "x"}]),
        {
            "type": "tool/result",
            "seq": seq,
            "time": t,
            "surfaceOp": "append",
            "data": {"message": "not an object"},
        },
        _assistant(seq, {"inputTokens": -1, "outputTokens": 0}),
        _assistant(seq, {"inputTokens": big, "outputTokens": 0}),
        _assistant(seq, {"inputTokens": 2**60, "outputTokens": 0}),
        _assistant(seq, {"inputTokens": huge, "outputTokens": 0}),
        _assistant(seq, {"inputTokens": "5", "outputTokens": 0}),
        _assistant(seq, {"inputTokens": 5}),
        _assistant(seq, None),
        _assistant(seq, {"inputTokens": 5, "outputTokens": 1, "cacheReadTokens": RawNumber("1.5")}),
        _assistant(seq, {"inputTokens": 5, "outputTokens": 1}, turn=-1),
        _assistant(seq, {"inputTokens": 5, "outputTokens": 1}, step=RawNumber("2.5")),
        {"type": "assistant/chunk", "seq": seq, "time": t, "data": {"chunk": "x"}},
        {
            "type": "assistant/chunk",
            "seq": seq,
            "time": t,
            "data": {"turn": 0, "step": 0, "chunk": {"type": "usage", "usage": []}},
        },
        {"type": "request/context", "seq": seq, "time": t, "data": {"contextWindow": 0}},
        {"type": "request/context", "seq": seq, "time": t, "data": {"contextWindow": None}},
        {"type": "request/context", "seq": seq, "time": t, "data": {"contextWindow": big}},
        {"type": "request/context", "seq": seq, "time": t, "data": {"contextWindow": "1M"}},
        {"type": "request/header", "seq": seq, "time": t, "data": {"header": "x"}},
        {"type": "request/header", "seq": seq, "time": t, "data": {"header": {"system": 5}}},
        {"type": "request/header", "seq": seq, "time": t, "data": {"header": {"tools": {}}}},
        {"type": "compaction/summary", "seq": seq, "time": t, "data": {"shadowedRange": []}},
        {
            "type": "compaction/prune",
            "seq": seq,
            "time": t,
            "data": {"shadowedRange": {"start": "a", "end": 0}, "shadowedTokenCount": 1},
        },
        {
            "type": "compaction/summary",
            "seq": seq,
            "time": t,
            "data": {"shadowedRange": {"start": 0, "end": 0}, "shadowedTokenCount": -1},
        },
        {
            "type": "compaction/summary",
            "seq": seq,
            "time": t,
            "data": {
                "shadowedRange": {"start": 0, "end": 0},
                "shadowedTokenCount": 1,
                "shadowedSeqs": [1, -2],
            },
        },
        DupKeyObject(
            (
                ("type", "turn/start"),
                ("seq", seq),
                ("time", t),
                ("data", {}),
                ("data", "the last duplicate wins"),
            )
        ),
    ]


def _exotic(rng: random.Random, seq: int) -> list[Any]:
    """Readable events that fold (or fault) on odd but legal input: lone surrogates,
    huge numbers in priced JSON, unknown types, duplicate keys."""
    return [
        user_message(seq, _text_block("lone \ud800 high, \udfff low, pair \ud83d\ude00, \u2028")),
        user_message(seq, [{"type": "mystery", "n": RawNumber("1e400"), "m": RawNumber("-0")}]),
        user_message(
            seq, [{"type": "mystery", "\ud834key": RawNumber("123456789012345678901234567890")}]
        ),
        {"type": "no/such/type", "seq": seq, "time": seq, "data": {"x": [None, RawNumber("1e3")]}},
        {"type": "turn/start", "seq": seq, "time": seq, "data": {}, "ignorable": True},
        {
            "type": "assistant/chunk",
            "seq": seq,
            "time": RawNumber("1.7e12"),
            "data": {"turn": 0, "step": 0, "chunk": {"type": "reasoning-delta", "text": "\udc00"}},
        },
        DupKeyObject(
            (("type", "turn/end"), ("seq", seq + 1000), ("seq", seq), ("time", 0), ("data", {}))
        ),
        user_message(seq, _text_block(rng.choice(["中文", "😀" * 50, "\x00\x1f\x7f", "\\u0000"]))),
    ]


@dataclass
class HostileSession:
    """A session's parts with mutations applied; ``cases`` counts what was done to it."""

    key: bytes
    parts: list[Part]
    cases: int = 0
    next_seq: int = 0

    def append(self, part: Part) -> None:
        self.parts.append(part)
        self.next_seq += 1
        self.cases += 1


def _claim_mismatch(seq: int) -> list[Part]:
    """A metering claim over one range, then a replacement naming another (both surface
    projections fault), the way ``docs/examples/faults.jsonl`` does it."""
    return [
        Part(text_of(user_message(seq, _text_block("claimed")))),
        Part(
            text_of(
                {
                    "type": "compaction/summary",
                    "seq": seq + 1,
                    "time": seq + 1,
                    "data": {
                        "shadowedRange": {"start": seq, "end": seq},
                        "shadowedTokenCount": 9,
                        "shadowedSeqs": [seq],
                    },
                }
            )
        ),
        Part(
            text_of(
                user_message(
                    seq + 2, _text_block("summary"), {"op": "replace", "start": seq, "end": seq + 1}
                )
            )
        ),
    ]


def _mutate(rng: random.Random, s: HostileSession, limits: Limits, depth: int) -> None:
    """One hostile change to a session: reorder, duplicate, drop, corrupt, or append an
    odd event (a claim mismatch, a huge string, huge numbers, deep nesting, surrogates)."""
    kind = rng.choice(
        ["swap", "dup", "gap", "corrupt", "corrupt", "claim", "huge", "exotic", "deep", "deep"]
    )
    n = len(s.parts)
    if kind == "swap" and n >= 2:
        i = rng.randrange(n - 1)
        s.parts[i], s.parts[i + 1] = s.parts[i + 1], s.parts[i]
        s.cases += 1
    elif kind == "dup" and n:
        i = rng.randrange(n)
        s.parts.insert(rng.randint(i + 1, n), s.parts[i])
        s.cases += 1
    elif kind == "gap" and n:
        s.parts.pop(rng.randrange(n))
        s.cases += 1
    elif kind == "corrupt" and n:
        # Replaces an event in place: its seq stays, everything else goes wrong.
        i = rng.randrange(n)
        seq = _seq_of(s.parts[i])
        if seq is not None:
            s.parts[i] = Part(text_of(rng.choice(_wrong_types(seq))))
            s.cases += 1
    elif kind == "claim":
        for part in _claim_mismatch(s.next_seq):
            s.parts.append(part)
            s.next_seq += 1
        s.cases += 1
    elif kind == "huge":
        size = rng.randint(limits.message_bytes // 8, limits.message_bytes * 3 // 2)
        filler = rng.choice("ab€😀") * (size // 4)
        s.append(Part(text_of(user_message(s.next_seq, _text_block(filler)))))
    elif kind == "exotic":
        s.append(Part(text_of(rng.choice(_exotic(rng, s.next_seq)))))
    elif kind == "deep":
        # Nesting at or past the contract's bound (the event is priced, or dead-lettered
        # and its seq missing). Spliced in as text (no encoder here recurses that deep).
        seq = s.next_seq
        where = rng.choice(["block", "tools", "ignored"])
        if where == "block":
            event = user_message(seq, [{"type": "mystery", "x": "@DEEP@"}])
        elif where == "tools":
            event = {
                "type": "request/header",
                "seq": seq,
                "time": seq,
                "data": {"header": {"config": {}, "tools": ["@DEEP@"]}},
            }
        else:
            event = {"type": "turn/start", "seq": seq, "time": seq, "data": {"x": "@DEEP@"}}
        levels = rng.choice([MAX_DEPTH - 8, depth])
        s.append(nested_part(text_of(event).replace(b'"@DEEP@"', deep_array(levels))))


def _seq_of(part: Part) -> int | None:
    try:
        value = json.loads(part.text)
    except (ValueError, RecursionError):
        return None
    if isinstance(value, dict) and type(value.get("seq")) is int:
        return int(value["seq"])
    return None


@dataclass
class HostileTraffic:
    messages: list[Outgoing]
    clean: set[str]  # sessions that only ever got valid events (garbage aside)
    cases: int


def hostile_traffic(
    rng: random.Random,
    prefix: str,
    cases: int,
    limits: Limits,
    *,
    depth: int = 1000,
    clean_sessions: int = 40,
) -> HostileTraffic:
    """About ``cases`` hostile cases mixed into good traffic.

    Good traffic: ``clean_sessions`` generated sessions, with unreadable messages and
    segment elements interleaved under their keys (which must not disturb them). Hostile
    cases: sessions mutated by ``_mutate``; unreadable messages of every kind (not JSON,
    not UTF-8, NaN, no usable seq, headers and malformed chunk rows, empty segments);
    messages past the size limits, segments past the element limit and segments of
    unreadable elements up to it (one dead letter each), oversized and
    non-UTF-8 keys, no key; ``depth``-deep arrays as whole messages and inside events.
    Deep nesting never shares a message with a part that needs the slow JSON path.
    """
    queues: list[list[Outgoing]] = []
    clean: set[str] = set()
    keys: list[bytes] = []
    made = 0
    for i in range(clean_sessions):
        session = f"{prefix}-clean-{i}" if i % 5 else f"{prefix}-clean-ü😀\u2028-{i}"
        key = session.encode()
        keys.append(key)
        clean.add(session)
        parts = session_parts(rng, session, rng.randint(20, 120), clean=True)
        queues.append(chunked(rng, key, parts, limits, 8, garbage_rate=0.1))
    while made < cases:
        roll = rng.random()
        if roll < 0.45:
            # A hostile session: generated, then mutated, sent in order.
            n = len(queues)
            session = f"{prefix}-hostile-{n}"
            if n % 11 == 0:  # the longest key the limit allows
                session = (session + "-" + "k" * limits.key_bytes)[: limits.key_bytes]
            key = session.encode()
            keys.append(key)
            s = HostileSession(key, session_parts(rng, session, rng.randint(3, 25), pack=False))
            s.next_seq = len(s.parts)
            for _ in range(rng.randint(1, 6)):
                _mutate(rng, s, limits, depth)
            queue = []
            for part in s.parts:
                if part.alone:
                    queue.append(single(key, part, limits, "deep"))  # alone: see docstring
                elif part.text.startswith(b"[") or rng.random() < 0.5:
                    queue.append(segment(key, [part], limits, "segment"))
                else:
                    queue.append(single(key, part, limits, "event"))
            # Re-pack runs of ordinary parts into segments now and then.
            queues.append(_regroup(rng, key, queue, limits))
            made += s.cases
        elif roll < 0.80:
            queues.append([garbage_message(rng, rng.choice([*keys, None]))])
            made += 1
        else:
            queues.append([_limit_case(rng, prefix, keys, limits, depth)])
            made += 1
    messages = interleave(rng, queues)
    return HostileTraffic(messages, clean, made)


def _regroup(
    rng: random.Random, key: bytes, queue: list[Outgoing], limits: Limits
) -> list[Outgoing]:
    """Merge some consecutive single-part messages into segments (same parts, same order)."""
    out: list[Outgoing] = []
    pending: list[Part] = []

    def flush() -> None:
        if len(pending) == 1:
            out.append(single(key, pending[0], limits, "event"))
        elif pending:
            out.append(segment(key, pending, limits, "segment"))
        pending.clear()

    for message in queue:
        mergeable = (
            message.tag in ("event", "segment")
            and len(message.lines) == 1
            and not message.dead
            and not message.lines[0].startswith(b"[")
        )
        if mergeable and rng.random() < 0.5:
            pending.append(Part(message.lines[0], message.events))
            if len(pending) >= 5:
                flush()
            continue
        flush()
        out.append(message)
    flush()
    return out


def _limit_case(
    rng: random.Random, prefix: str, keys: list[bytes], limits: Limits, depth: int
) -> Outgoing:
    """One message past a limit, with a key the worker cannot use, or a segment as long
    as the limit allows whose elements are all but one unreadable."""
    kind = rng.choice(
        [
            "big",
            "big-segment",
            "long-segment",
            "long-key",
            "bad-key",
            "no-key",
            "empty-key",
            "deep-top",
            "too-deep",
            "hollow",
        ]
    )
    turn = orjson.dumps({"type": "turn/start", "seq": 0, "time": 0, "data": {}})
    throwaway = f"{prefix}-limit-{rng.randrange(10**9)}".encode()
    if kind == "big":
        size = limits.message_bytes + rng.randint(1, limits.message_bytes)
        event = user_message(0, _text_block("x" * size))
        return single(rng.choice([*keys, throwaway]), Part(text_of(event)), limits, "big")
    if kind == "big-segment":
        parts = [Part(turn)] * (limits.message_bytes // len(turn) + 2)
        parts = parts[: limits.segment_events]
        filler = user_message(1, _text_block("y" * limits.message_bytes))
        return segment(throwaway, [*parts, Part(text_of(filler))], limits, "big")
    if kind == "long-segment":
        events = [
            Part(orjson.dumps({"type": "turn/start", "seq": s, "time": s, "data": {}}))
            for s in range(limits.segment_events + rng.randint(1, 20))
        ]
        return segment(throwaway, events, limits, "long-segment")
    if kind == "long-key":
        key = b"k" * (limits.key_bytes + rng.randint(1, 200))
        return single(key, Part(turn), limits, "long-key")
    if kind == "bad-key":
        key = rng.choice(
            [
                b"\xff\xfe",
                b"\xc3\x28",
                b"\xc0\x80",
                "lone-\ud800".encode("utf-8", "surrogatepass"),
                b"ok\x80",
            ]
        )
        return single(key, Part(turn), limits, "bad-key")
    if kind == "no-key":
        return single(None, Part(turn), limits, "no-key")
    if kind == "empty-key":
        return single(b"", Part(turn), limits, "empty-key")
    if kind == "hollow":
        # As many elements as a segment may hold, all but one unreadable: one dead letter
        # counts them (docs/notes/028), the readable one folds.
        parts = [garbage_part(rng) for _ in range(limits.segment_events - 1)]
        parts.insert(rng.randrange(len(parts) + 1), Part(turn))
        return segment(throwaway, parts, limits, "hollow")
    if kind == "deep-top":
        # A ``depth``-deep array is a segment whose element is no event: one dead element.
        return segment(throwaway, [Part(deep_array(depth - 1), 0)], limits, "deep-top")
    # Past what any JSON reader here takes: "nested too deeply", the whole message.
    return garbage(throwaway, deep_array(depth * 3), "too-deep")
