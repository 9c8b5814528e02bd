"""Deterministic generator of nasty but reference-valid dsh session logs.

Input for the differential test (tests/oracle): every generated session folds through
the reference token meter without a throw, except where a claim-range mismatch is
planted on purpose (the reference throws there, and that projection must fault).

"Nasty" means every edge the contract (docs/contract.md) names, and a few that parsers
trip on: JS string lengths (astral characters count 2, lone surrogates 1), surrogate
pairs split across stream deltas, raw U+2028/U+2029/U+0085 that `str.splitlines`
breaks on, JSON number literals that JavaScript reprints differently (`1.0`, `1e21`,
`-0`, `1e400`, integers beyond 2**53), duplicate keys, escaped keys, packed chunk
rows with negative time gaps, metered / unmetered / expired-claim replacements,
empty system prompts and tool lists, usage-only steps and repeated usage samples.

The JSON text is written by hand (``_JsonWriter``) because ``json.dumps`` can neither
emit such number literals nor choose escapes per character. Number literals that
JavaScript reprints differently appear only inside tool schemas and unknown content
blocks, the only places the pricing reads them back through ``JSON.stringify``; token
counts, seqs and ranges are always plain non-negative integers.

Events, blocks and packed chunk rows are shaped by the event factory
(``stream.testing.events``); what is here is the randomness, the producer's bookkeeping
(surface nodes, independent prices) and the text writer. The block pricing stays an
independent re-implementation of the contract, so the oracle does not check our pricing
with itself.
"""

from __future__ import annotations

import copy
import itertools
import json
import random
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from stream.testing import events as build

Event = build.RawEvent
Json = Any  # dict | list | str | int | bool | None | RawNumber | DupKeyObject

MIN_PACK_RUN: Final = 3  # the reference packer's MIN_RUN: shorter runs stay one line per event


@dataclass(frozen=True, slots=True)
class RawNumber:
    """A JSON number literal written verbatim; its value is whatever JSON.parse makes of it."""

    literal: str


@dataclass(frozen=True, slots=True)
class DupKeyObject:
    """A JSON object written with repeated keys: JSON.parse keeps the last value of each."""

    items: tuple[tuple[str, Json], ...]


# fmt: off
# Literals whose JavaScript round trip differs from their text (contract: "Pricing").
NASTY_NUMBER_LITERALS: Final[tuple[str, ...]] = (
    "1.0", "1e-7", "1e21", "-0", "1E+2", "12345678901234567891", "9007199254740993",
    "-9007199254740993", "1e400", "-1e400", "1e-400", "-1e-400", "-0.0", "0e0", "5e-324",
    "1.7976931348623157e308", "123456789012345678901234567890", "1e20", "1e-6", "1e007",
    "100.00", "0.30000000000000004", "123e-20", "2.5E-7", "-1e+21", "1e16", "0.1",
    "4.35", "9.999999999999999e22", "1e+0", "18446744073709551616",
)

_WORDS: Final = (
    "the", "fold", "surface", "token", "claim", "replace", "seq", "pressure", "ls -la",
    "cat /etc/hosts", "def f(x):", "return", "SELECT * FROM t;", "lorem", "ipsum", "42",
    "{", "}", "[]", "null", "true", "\\n",
)
# Each piece is a trap for one naive length, escape or line-splitting assumption.
_NASTY_PIECES: Final = (
    "中文字符", "日本語のテキスト", "한국어", "😀", "👩\u200d💻", "🇯🇵", "𝄞", "🏳️\u200d🌈",
    "e\u0301", "\u200b", "\ufeff", "\u2028", "\u2029", "\u0085", "\x7f", "\x00", "\x01",
    "\x1f", "\x1c", "\x0b", "\x0c", "\t", "\n", "\r\n", "\r", "\b", '"', "\\", "\\u0000",
    "\\ud800", "</script>", "\ud800", "\udbff", "\udc00", "\udfff", "\ud83d", "\ude00",
    '{"json": [1, 2.0]}', "ǅ", "ﬀ", "İ", "ß", "\U0010ffff", "\ue000", "/", "//",
)
_TOOL_NAMES: Final = (
    "bash", "read_file", "write_file", "grep", "搜索", "emoji😀tool", "", "a" * 70,
)
_UNKNOWN_BLOCK_TYPES: Final = (
    "image", "file", "document", "citation", "x-vendor-block", "Text", "tool_call", "TEXT",
    "redacted-reasoning", "",
)
_NOOP_TYPES: Final = ("turn/start", "step/start", "step/end", "turn/end")
# In dsh's known vocabulary but read by no fold (compaction/start|end are not metering).
_KNOWN_NOOP_TYPES: Final = (
    "session/title", "llm/retry", "todo/write", "compaction/start", "compaction/end",
)
_UNKNOWN_EVENT_TYPES: Final = ("x-vendor/ping", "agent/status", "tool/progress")
_METERING_TYPES: Final = ("compaction/summary", "compaction/prune")
# fmt: on
_JSON_SHORT_ESCAPES: Final = {"\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
# Characters the writer has to decide about; everything else is copied as is.
_SPECIAL_CHARS: Final = re.compile('[\x00-\x1f"\\\\/\x7f-\U0010ffff]')


def js_len(text: str) -> int:
    """JavaScript string length: UTF-16 code units (a lone surrogate counts 1)."""
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def _ceil4(n: int) -> int:
    return -(-n // 4)


# --------------------------------------------------------------------------- JSON text


class _JsonWriter:
    """Compact JSON text writer; with an rng it varies escapes, key order and spacing.

    Every variation is semantics-preserving JSON (JS and Python parsers read back the
    same value), so it trips only readers that pattern-match the raw text.
    """

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng
        self._spaced = False

    def line(self, value: Json) -> str:
        rng = self._rng
        self._spaced = rng is not None and rng.random() < 0.03
        parts: list[str] = []
        self._value(value, parts)
        return "".join(parts)

    def _gap(self) -> str:
        # Insignificant whitespace between tokens (never a newline: one record per line).
        if not self._spaced or self._rng is None:
            return ""
        return self._rng.choice(("", " ", "\t", "  "))

    def _value(self, value: Json, out: list[str]) -> None:
        if value is None:
            out.append("null")
        elif value is True:
            out.append("true")
        elif value is False:
            out.append("false")
        elif isinstance(value, int):
            out.append(str(value))
        elif isinstance(value, RawNumber):
            out.append(value.literal)
        elif isinstance(value, float):
            raise TypeError("floats must be written as RawNumber literals")
        elif isinstance(value, str):
            out.append(self._string(value))
        elif isinstance(value, DupKeyObject):
            self._object(list(value.items), out)
        elif isinstance(value, dict):
            items = list(value.items())
            if self._rng is not None and self._rng.random() < 0.04:
                self._rng.shuffle(items)  # key order never matters, not even for JSON lengths
            self._object(items, out)
        elif isinstance(value, list | tuple):
            out.append("[" + self._gap())
            for i, item in enumerate(value):
                if i:
                    out.append(self._gap() + "," + self._gap())
                self._value(item, out)
            out.append(self._gap() + "]")
        else:
            raise TypeError(f"not JSON-writable: {type(value).__name__}")

    def _object(self, items: Sequence[tuple[str, Json]], out: list[str]) -> None:
        out.append("{" + self._gap())
        for i, (key, item) in enumerate(items):
            if i:
                out.append(self._gap() + "," + self._gap())
            out.append(self._string(key) + self._gap() + ":" + self._gap())
            self._value(item, out)
        out.append(self._gap() + "}")

    def _string(self, text: str) -> str:
        rng = self._rng
        if rng is not None and rng.random() < 0.02:
            # Rarely escape everything escapable, ASCII included ("\u0074ype").
            return '"' + "".join(self._char(c, 0.5) for c in text) + '"'
        return '"' + _SPECIAL_CHARS.sub(lambda m: self._char(m.group(), 0.0), text) + '"'

    def _char(self, c: str, ascii_escape: float) -> str:
        rng = self._rng
        code = ord(c)
        if c == '"':
            return '\\"'
        if c == "\\":
            return "\\\\"
        if code < 0x20:
            short = _JSON_SHORT_ESCAPES.get(c)
            if short is not None and (rng is None or rng.random() < 0.8):
                return short
            return self._u(code)
        if 0xD800 <= code <= 0xDFFF:
            return self._u(code)  # lone surrogates cannot be UTF-8: always escaped
        if code > 0xFFFF:
            if rng is not None and rng.random() < 0.3:
                high, low = divmod(code - 0x10000, 0x400)
                return self._u(0xD800 + high) + self._u(0xDC00 + low)
            return c
        if rng is None:
            return c
        if c == "/":
            return "\\/" if rng.random() < 0.2 else c
        if code >= 0x7F:
            return self._u(code) if rng.random() < 0.15 else c
        return self._u(code) if rng.random() < ascii_escape else c

    def _u(self, code: int) -> str:
        text = f"\\u{code:04x}"
        if self._rng is not None and self._rng.random() < 0.3:
            text = "\\u" + text[2:].upper()
        return text


def encode_json(value: Json) -> str:
    """Plain compact JSON text of a generated value (for diagnostics)."""
    return _JsonWriter().line(value)


# --------------------------------------------------------------------------- values


def nasty_text(rng: random.Random, max_pieces: int = 12) -> str:
    """A string mixing words with length, escape and line-splitting traps."""
    roll = rng.random()
    if roll < 0.07:
        return ""
    if roll < 0.10:
        # Long text: pricing at scale (ceil4 of thousands of code units).
        return rng.choice(_WORDS + _NASTY_PIECES) * rng.randrange(200, 3000)
    pieces: list[str] = []
    for _ in range(rng.randrange(1, max_pieces + 1)):
        pieces.append(rng.choice(_NASTY_PIECES) if rng.random() < 0.3 else rng.choice(_WORDS))
        if rng.random() < 0.5:
            pieces.append(" ")
    return "".join(pieces)


def _random_number_literal(rng: random.Random) -> str:
    """A random but valid JSON number literal (exponents with leading zeros included)."""
    sign = "-" if rng.random() < 0.3 else ""
    digits = str(rng.randrange(1, 10)) + "".join(
        str(rng.randrange(10)) for _ in range(rng.randrange(0, 24))
    )
    kind = rng.randrange(5)
    if kind == 0:
        return sign + digits
    if kind == 1:
        return f"{sign}{rng.randrange(0, 1000)}.{digits}"
    if kind == 2:
        # Around JS's switch to exponent form below 1e-6: 0.000001 vs 1e-7.
        return f"{sign}0.{'0' * rng.randrange(0, 10)}{digits}"
    exponent = rng.randrange(-30, 31) if rng.random() < 0.85 else rng.randrange(-340, 340)
    mantissa = digits if kind == 3 else f"{digits[0]}.{digits[1:] or '0'}"
    exp_sign = "-" if exponent < 0 else rng.choice(("", "+"))
    return f"{sign}{mantissa}{rng.choice('eE')}{exp_sign}{abs(exponent):0{rng.randrange(1, 4)}d}"


def _nasty_number(rng: random.Random) -> RawNumber:
    if rng.random() < 0.6:
        return RawNumber(rng.choice(NASTY_NUMBER_LITERALS))
    return RawNumber(_random_number_literal(rng))


def _nasty_key(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.1:
        return rng.choice(
            ("", "__proto__", "constructor", "10", "2", "0", "-1", "1.5", "\ud800", "キー")
        )
    if roll < 0.2:
        return nasty_text(rng, 2)
    return rng.choice(("a", "b", "min", "max", "default", "enum", "x", "nested", "n"))


def nasty_value(rng: random.Random, depth: int = 0) -> Json:
    """A JSON value full of number, key and string traps (for schemas and unknown blocks only)."""
    roll = rng.random()
    if depth >= 4 or roll < 0.35:
        return _nasty_number(rng)
    if roll < 0.55:
        return nasty_text(rng, 4)
    if roll < 0.62:
        return rng.choice((True, False, None, 0, 1, -1, 2**53, 2**64))
    if roll < 0.78:
        return [nasty_value(rng, depth + 1) for _ in range(rng.randrange(0, 5))]
    if roll < 0.83:
        # Duplicate keys: the last value wins, so the JSON length changes.
        key = _nasty_key(rng)
        items = [(key, nasty_value(rng, depth + 1)) for _ in range(rng.randrange(2, 4))]
        items.insert(
            rng.randrange(len(items)), (_nasty_key(rng) + "_", nasty_value(rng, depth + 1))
        )
        return DupKeyObject(tuple(items))
    return {_nasty_key(rng): nasty_value(rng, depth + 1) for _ in range(rng.randrange(0, 5))}


def tool_schema(rng: random.Random) -> dict[str, Json]:
    """One tool definition for `request/header`, with numeric traps in its JSON schema."""
    properties: dict[str, Json] = {}
    for _ in range(rng.randrange(0, 4)):
        properties[_nasty_key(rng)] = {
            "type": rng.choice(("number", "integer", "string")),
            "minimum": _nasty_number(rng),
            "maximum": RawNumber("1e21") if rng.random() < 0.3 else _nasty_number(rng),
            "default": RawNumber(rng.choice(("-0", "1.0", "1E+2", "12345678901234567891"))),
            "description": nasty_text(rng, 4),
        }
    schema: dict[str, Json] = {
        "name": rng.choice(_TOOL_NAMES),
        "description": nasty_text(rng, 8),
        "parameters": {
            "type": "object",
            "properties": properties,
            "required": list(properties)[: rng.randrange(0, len(properties) + 1)],
        },
    }
    if rng.random() < 0.3:
        schema["x-extra"] = nasty_value(rng)
    return schema


# --------------------------------------------------------------------------- pricing


def _approx_json_len(value: Json) -> int:
    """Rough JSON.stringify length; only used to make shadow prices plausible."""
    if isinstance(value, str):
        return js_len(value) + 2
    if isinstance(value, RawNumber):
        return len(value.literal)
    if isinstance(value, DupKeyObject):
        return 2 + sum(js_len(k) + 3 + _approx_json_len(v) for k, v in value.items)
    if isinstance(value, dict):
        return 2 + sum(js_len(k) + 3 + _approx_json_len(v) for k, v in value.items())
    if isinstance(value, list):
        return 2 + sum(_approx_json_len(v) + 1 for v in value)
    return len(json.dumps(value))


def price_blocks(blocks: Iterable[dict[str, Json]]) -> int:
    """Block pricing, contract "Pricing" (exact for known blocks, approximate for unknown ones)."""
    total = 0
    for block in blocks:
        kind = block.get("type")
        if kind in ("text", "reasoning"):
            total += _ceil4(js_len(block["text"])) + 4
        elif kind == "tool-call":
            total += _ceil4(js_len(block["name"])) + _ceil4(js_len(block["arguments"])) + 4
        elif kind == "tool-result":
            total += price_blocks(block["content"]) + 4
        else:
            total += 4 + _ceil4(_approx_json_len(block))
    return total


# --------------------------------------------------------------------------- blocks


def _text_block(rng: random.Random, kind: str = "text") -> dict[str, Json]:
    text = nasty_text(rng)
    block = build.reasoning_block(text) if kind == "reasoning" else build.text_block(text)
    if rng.random() < 0.05:
        # Known blocks may carry extra keys; pricing reads only `text`.
        block[rng.choice(("cache", "signature", "providerOptions"))] = rng.choice(
            ("ephemeral", "sig==", "")
        )
    return block


def _unknown_block(rng: random.Random) -> dict[str, Json]:
    if rng.random() < 0.01:
        # No `type` at all: still "any other block" to the pricing.
        return {"mediaType": "application/octet-stream", "data": nasty_value(rng)}
    block: dict[str, Json] = {"type": rng.choice(_UNKNOWN_BLOCK_TYPES)}
    if rng.random() < 0.7:
        block["mediaType"] = rng.choice(("image/png", "image/jpeg", "application/pdf", ""))
        alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
        block["data"] = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 600)))
    if rng.random() < 0.3:
        block["text"] = nasty_text(rng, 4)
    block["extra"] = nasty_value(rng)
    if rng.random() < 0.3:
        block["size"] = _nasty_number(rng)
    if rng.random() < 0.02:
        block["deep"] = _deep_value(rng)
    return block


def _deep_value(rng: random.Random) -> Json:
    """A few hundred levels of nesting: recursive JSON-length code must cope (JS does)."""
    value: Json = _nasty_number(rng)
    for _ in range(rng.randrange(50, 300)):
        value = [value] if rng.random() < 0.5 else {_nasty_key(rng): value}
    return value


def _content(
    rng: random.Random, max_blocks: int = 3, *, unknown_rate: float = 0.15
) -> list[dict[str, Json]]:
    if rng.random() < 0.04:
        return []
    blocks: list[dict[str, Json]] = []
    for _ in range(rng.randrange(1, max_blocks + 1)):
        roll = rng.random()
        if roll < unknown_rate:
            blocks.append(_unknown_block(rng))
        elif roll < unknown_rate + 0.03:
            # Pricing is per block type wherever the block sits, even in a user message.
            if rng.random() < 0.5:
                blocks.append(_text_block(rng, "reasoning"))
            else:
                name = rng.choice(_TOOL_NAMES)
                blocks.append(build.tool_call_block("x", name, _tool_arguments(rng)))
        else:
            blocks.append(_text_block(rng))
    return blocks


def _tool_arguments(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.08:
        return rng.choice(("", "{}", '{"path":', "null"))  # empty, trivial, or cut-off streams
    args = {_nasty_key(rng): nasty_text(rng, 4) for _ in range(rng.randrange(0, 4))}
    return json.dumps(args, ensure_ascii=rng.random() < 0.3)


# --------------------------------------------------------------------------- sessions


@dataclass(slots=True)
class _Node:
    """One surface node: its seq, heuristic price, and what the rewrite rules need."""

    seq: int
    price: int
    kind: str
    data: dict[str, Json]


@dataclass(slots=True)
class _Call:
    call_id: str
    name: str


class _SessionBuilder:
    """Appends events while tracking the surface (node seqs in order) and turn/step counters.

    Beyond what the token-meter folds need, the log also satisfies dsh-session's
    positional surface fold (`foldSurface`): replace ranges name current nodes in
    order, replacements cite every shadowed seq in `sourceEventSeqs`, a tool/result
    replacement rewrites exactly one tool/result and changes only its content, and
    types outside dsh's known vocabulary carry `ignorable: true`.
    """

    def __init__(self, rng: random.Random, n_events: int, *, v3_ops: bool) -> None:
        self.rng = rng
        self.n_events = n_events
        self.v3_ops = v3_ops
        self.events: list[Event] = []
        self.surface: list[_Node] = []
        self.time = rng.randrange(1_500_000_000_000, 1_900_000_000_000)
        self.turn = 0
        self.step = 0
        self.calls = 0
        # At most one planted claim-range mismatch; it faults two projections for good.
        self.mismatch_budget = 1 if rng.random() < 0.2 else 0

    @property
    def full(self) -> bool:
        return len(self.events) >= self.n_events

    # -- emission ------------------------------------------------------------

    def _tick(self) -> int:
        roll = self.rng.random()
        if roll < 0.03:
            self.time -= self.rng.randrange(1, 5000)  # clock stepped back: negative row gaps
        elif roll < 0.15:
            pass  # same millisecond
        elif roll < 0.17:
            self.time += self.rng.randrange(10**6, 10**9)
        else:
            self.time += self.rng.randrange(1, 3000)
        return self.time

    def emit(
        self, kind: str, data: dict[str, Json], surface_op: Json = None, **extra: Json
    ) -> Event:
        op = build.ABSENT if surface_op is None else surface_op
        event = build.event(kind, len(self.events), data, op=op, time=self._tick(), **extra)
        self.events.append(event)
        return event

    def _earlier_seqs(self, k: int) -> list[int]:
        seq = len(self.events)
        return self.rng.sample(range(seq), min(k, seq))

    def append(self, kind: str, data: dict[str, Json], price: int) -> Event:
        extra: dict[str, Json] = {}
        if self.rng.random() < 0.04:
            # Provenance the folds ignore; dsh allows an empty list only on assistant/message.
            cited = self._earlier_seqs(self.rng.randrange(1, 4))
            if kind == "assistant/message" and (not cited or self.rng.random() < 0.5):
                cited = []
            if cited or kind == "assistant/message":
                extra["sourceEventSeqs"] = cited
        event = self.emit(kind, data, build.APPEND, **extra)
        self.surface.append(_Node(event["seq"], price, kind, data))
        return event

    def replace(self, kind: str, data: dict[str, Json], price: int, i: int, j: int) -> Event:
        start, end = self.surface[i].seq, self.surface[j].seq
        # Format v3 keys only where no claim is armed (the reference compares `op.start`
        # with the claim, so a v3 op would fault it there).
        v3 = self.v3_ops and self.rng.random() < 0.15 and not self._claim_armed()
        op = build.replace(start, end, v3=v3)
        cited = [node.seq for node in self.surface[i : j + 1]]  # dsh requires every shadowed seq
        if self.rng.random() < 0.2:
            cited += [s for s in self._earlier_seqs(3) if s not in cited]
        if self.rng.random() < 0.3:
            self.rng.shuffle(cited)
        event = self.emit(kind, data, op, sourceEventSeqs=cited)
        self.surface[i : j + 1] = [_Node(event["seq"], price, kind, data)]
        return event

    def _claim_armed(self) -> bool:
        return bool(self.events) and self.events[-1]["type"] in _METERING_TYPES

    def noop(self) -> Event:
        """An event no fold reads; it still expires an armed claim."""
        rng = self.rng
        extra: dict[str, Json] = {"ignorable": True} if rng.random() < 0.05 else {}
        roll = rng.random()
        if roll < 0.6:
            kind = rng.choice(_NOOP_TYPES)
            data: dict[str, Json] = {"turn": self.turn}
            if kind.startswith("step/"):
                data["step"] = self.step
            return self.emit(kind, data, **extra)
        if roll < 0.85:
            # Known but unread; compaction/start|end look like metering and are not.
            kind = rng.choice(_KNOWN_NOOP_TYPES)
            return self.emit(kind, {"note": nasty_text(rng, 3), "n": rng.randrange(0, 10**6)})
        # dsh refuses unknown types unless they are marked ignorable.
        kind = rng.choice(_UNKNOWN_EVENT_TYPES)
        return self.emit(kind, {"note": nasty_text(rng, 3)}, ignorable=True)

    # -- values --------------------------------------------------------------

    def usage(self) -> dict[str, Json]:
        rng = self.rng

        def count() -> int:
            roll = rng.random()
            if roll < 0.1:
                return 0
            if roll < 0.13:
                return rng.randrange(10**9, 10**12)
            return rng.randrange(1, 200_000)

        input_tokens, output_tokens = count(), count()
        cache_read, cache_write, reasoning = (
            count() if rng.random() < 0.5 else build.ABSENT for _ in range(3)
        )
        return build.usage(
            input_tokens,
            output_tokens,
            cache_read=cache_read,
            cache_write=cache_write,
            reasoning=reasoning,
        )

    def _vary_usage(self, usage: dict[str, Json]) -> dict[str, Json]:
        """A later sample for the same step: identical, or with some counts moved."""
        if self.rng.random() < 0.5:
            return dict(usage)
        varied = dict(usage)
        for key in list(varied):
            if self.rng.random() < 0.5:
                varied[key] = max(0, int(varied[key]) + self.rng.randrange(-50, 500))
        if "cacheWriteTokens" in varied and self.rng.random() < 0.3:
            del varied["cacheWriteTokens"]  # an absent bucket counts as 0
        return varied

    def user_data(self, content: list[dict[str, Json]]) -> dict[str, Json]:
        data = build.user_data(content)
        if self.rng.random() < 0.05:
            data["meta"] = {"origin": nasty_text(self.rng, 2)}
        return data

    def _call(self) -> _Call:
        self.calls += 1
        call_id = f"call_{self.calls}_{self.rng.randrange(16**6):06x}"
        return _Call(call_id, self.rng.choice(_TOOL_NAMES))

    def tool_result_block(self, call: _Call, depth: int = 0) -> dict[str, Json]:
        content = _content(self.rng, 3, unknown_rate=0.25)
        if depth == 0 and self.rng.random() < 0.03:
            # A nested tool-result is priced recursively.
            content.append(self.tool_result_block(self._call(), 1))
        is_error = True if self.rng.random() < 0.1 else build.ABSENT
        return build.tool_result_block(call.call_id, content, name=call.name, is_error=is_error)

    def tool_result_data(self, calls: Sequence[_Call]) -> tuple[dict[str, Json], int]:
        blocks = [self.tool_result_block(call) for call in calls]
        return build.tool_result_data(blocks), price_blocks(blocks) + 4

    def assistant_data(
        self, content: list[dict[str, Json]], usage: dict[str, Json] | None
    ) -> tuple[dict[str, Json], int]:
        data = build.assistant_data(
            content,
            usage=build.ABSENT if usage is None else usage,
            turn=self.turn,
            step=self.step,
        )
        # An empty-content message is a usage-only step: it derives no message, price 0.
        return data, (price_blocks(content) + 4 if content else 0)

    # -- episodes ------------------------------------------------------------

    def ep_request(self) -> None:
        rng = self.rng
        if rng.random() < 0.6:
            config: dict[str, Json] = {"model": rng.choice(("m", "deepseek-chat", "m-\u00e9"))}
            if rng.random() < 0.7:
                config = {"provider": "deepseek", **config}
            system: Json = build.ABSENT
            roll = rng.random()
            if roll < 0.15:
                system = ""  # canonical: an empty prompt counts as absent
            elif roll < 0.8:
                system = nasty_text(rng, 20)
            tools: Json = build.ABSENT
            roll = rng.random()
            if roll < 0.15:
                tools = []  # canonical: an empty tool list counts as absent
            elif roll < 0.75:
                tools = [tool_schema(rng) for _ in range(rng.randrange(1, 5))]
            self.emit(
                "request/header", build.header_data(system=system, tools=tools, config=config)
            )
        if rng.random() < 0.6:
            window: Json = build.ABSENT
            if rng.random() < 0.8:  # absent removes the window from the view
                window = rng.choice((1, 8192, 65_536, 128_000, 1_000_000, 2**31, 2**40))
            self.emit("request/context", build.context_data(window))

    def ep_user(self) -> None:
        content = _content(self.rng, 4)
        self.append("user/message", self.user_data(content), price_blocks(content) + 4)

    def _chunk(self, chunk: dict[str, Json]) -> None:
        self.emit("assistant/chunk", build.chunk_data(chunk, turn=self.turn, step=self.step))

    def _stream(self, blocks: list[dict[str, Json]]) -> None:
        """Stream deltas for the step's blocks (same turn/step/index runs get packed on write)."""
        rng = self.rng
        streams: list[list[dict[str, Json]]] = []
        for index, block in enumerate(blocks):
            chunks: list[dict[str, Json]] = []
            if block.get("type") == "tool-call":
                named_every = rng.random() < 0.3
                for k, piece in enumerate(_split_utf16(rng, str(block["arguments"]))):
                    name = block["name"] if k == 0 or named_every else build.ABSENT
                    chunks.append(build.tool_call_delta(block["id"], piece, index=index, name=name))
            elif block.get("type") in ("text", "reasoning"):
                delta = build.reasoning_delta if block["type"] == "reasoning" else build.text_delta
                for piece in _split_utf16(rng, str(block["text"])):
                    chunks.append(delta(piece, index=index))
            streams.append(chunks)
        ordered: list[dict[str, Json]] = []
        if len(streams) >= 2 and rng.random() < 0.15:
            # Interleaved blocks break runs, so short rows and verbatim lines mix.
            while any(streams):
                ordered.append(rng.choice([s for s in streams if s]).pop(0))
        else:
            ordered = [chunk for stream in streams for chunk in stream]
        for chunk in ordered:
            if rng.random() < 0.01:
                self.noop()  # a stray record inside a run splits it
            self._chunk(chunk)
        if rng.random() < 0.3:
            self._chunk({"type": "finish", "reason": "stop"})

    def ep_turn(self) -> None:
        rng = self.rng
        if rng.random() < 0.5:
            self.ep_request()
        self.emit("turn/start", {"turn": self.turn})
        for step in range(rng.randrange(1, 4)):
            if self.full:
                return
            self.step = step
            self.emit("step/start", {"turn": self.turn, "step": step})
            blocks: list[dict[str, Json]] = []
            if rng.random() < 0.3:
                blocks.append(_text_block(rng, "reasoning"))
            if rng.random() < 0.8:
                blocks.append(_text_block(rng))
            calls = [self._call() for _ in range(rng.choice((0, 0, 0, 1, 1, 2)))]
            for call in calls:
                arguments = _tool_arguments(rng)
                blocks.append(
                    {
                        "type": "tool-call",
                        "id": call.call_id,
                        "name": call.name,
                        "arguments": arguments,
                    }
                )
            if rng.random() < 0.03:
                blocks.append(_unknown_block(rng))
            if rng.random() < 0.08:
                blocks, calls = [], []  # usage-only step (e.g. max-tokens)
            self._stream(blocks)
            sample = self.usage() if rng.random() < 0.7 else None
            if sample is not None:
                self._chunk(build.usage_delta(sample))
                if rng.random() < 0.1:
                    # A second sample for the same step replaces the first's contribution.
                    sample = self._vary_usage(sample)
                    self._chunk(build.usage_delta(sample))
            aborted = rng.random() < 0.07  # no final message (and no tool results)
            if not aborted:
                if sample is None:
                    final = self.usage() if rng.random() < 0.8 else None
                else:
                    final = self._vary_usage(sample) if rng.random() < 0.8 else None
                data, price = self.assistant_data(blocks, final)
                self.append("assistant/message", data, price)
            self.emit("step/end", {"turn": self.turn, "step": step})
            if calls and not aborted:
                if len(calls) > 1 and rng.random() < 0.5:
                    data, price = self.tool_result_data(calls)
                    self.append("tool/result", data, price)
                else:
                    for call in calls:
                        data, price = self.tool_result_data([call])
                        self.append("tool/result", data, price)
        self.emit("turn/end", {"turn": self.turn})
        roll = rng.random()
        if roll < 0.03:
            self.turn = 0  # resumed session restarts its counter: (turn, step) pairs repeat
        elif roll >= 0.05:  # else the same turn number again
            self.turn += 1

    # -- replacements --------------------------------------------------------

    def pick_range(self) -> tuple[int, int]:
        rng = self.rng
        n = len(self.surface)
        roll = rng.random()
        if roll < 0.12:
            return 0, n - 1
        i = rng.randrange(n)
        if roll < 0.45:
            return i, i
        return i, min(n - 1, i + rng.randrange(1, 8))

    def shadow_price(self, i: int, j: int) -> int:
        """Mostly the range's price; sometimes a bit off, zero, or over-claimed.

        An over-claim can push a small surface total below zero; the reference then
        publishes a negative messageTokens (and clamps only projectedTokens).
        """
        rng = self.rng
        real = sum(node.price for node in self.surface[i : j + 1])
        roll = rng.random()
        if roll < 0.7:
            return real
        if roll < 0.92:
            return max(0, real + rng.randrange(-20, 21))
        if roll < 0.97:
            return 0
        return real + rng.randrange(1, 200)

    def compaction(self, i: int, j: int) -> Event:
        rng = self.rng
        seqs = [node.seq for node in self.surface[i : j + 1]]
        tokens = self.shadow_price(i, j)
        shadowed = seqs if rng.random() < 0.85 else build.ABSENT  # absent in old logs
        data = build.metering_data(seqs[0], seqs[-1], tokens, shadowed_seqs=shadowed)
        if rng.random() < 0.2:
            data["reason"] = rng.choice(("auto", "manual", "overflow"))
        return self.emit(rng.choice(_METERING_TYPES), data)

    def replacement(self, i: int, j: int) -> None:
        """A surface event over nodes i..j: a pruned tool result, a summary or an assistant turn."""
        rng = self.rng
        target = self.surface[i]
        if i == j and target.kind == "tool/result" and rng.random() < 0.7:
            # dsh's rewrite rule: same tool/result, only the result content changes.
            data = copy.deepcopy(target.data)
            for block in data["message"]["content"]:
                block["content"] = build.texts("[pruned]") if rng.random() < 0.7 else []
            price = price_blocks(data["message"]["content"]) + 4
            self.replace("tool/result", data, price, i, j)
        elif rng.random() < 0.75:
            content = build.texts("Summary: " + nasty_text(rng, 6))
            if rng.random() < 0.15:
                content = _content(rng, 2)
            self.replace("user/message", self.user_data(content), price_blocks(content) + 4, i, j)
        else:
            content = [] if rng.random() < 0.2 else _content(rng, 2)
            data, price = self.assistant_data(content, self.usage() if rng.random() < 0.3 else None)
            self.replace("assistant/message", data, price, i, j)

    def pick_tool_result_or_range(self) -> tuple[int, int]:
        """Prefer a lone tool/result now and then, so prune rewrites happen."""
        tool_results = [k for k, node in enumerate(self.surface) if node.kind == "tool/result"]
        if tool_results and self.rng.random() < 0.35:
            k = self.rng.choice(tool_results)
            return k, k
        return self.pick_range()

    def ep_metered(self) -> None:
        rng = self.rng
        if rng.random() < 0.2:
            self.emit("compaction/start", {"reason": "auto"})  # not metering: arms nothing
        for _ in range(rng.choice((1, 1, 1, 2, 3))):  # back-to-back compactions chain
            if not self.surface or self.full:
                return
            i, j = self.pick_tool_result_or_range()
            self.compaction(i, j)
            self.replacement(i, j)
        if rng.random() < 0.2:
            self.emit("compaction/end", {})

    def ep_double_metered(self) -> None:
        """Two metering events in a row: the second claim replaces the first."""
        i, j = self.pick_tool_result_or_range()
        self.compaction(*self.pick_range())
        self.compaction(i, j)
        self.replacement(i, j)

    def ep_unmetered(self) -> None:
        """A replacement with no claim (pre-protocol log): delta 0 in every surface fold."""
        if self._claim_armed():
            self.noop()
        self.replacement(*self.pick_tool_result_or_range())

    def ep_expired(self) -> None:
        """compaction, then one unrelated event, then the replace: the claim has expired."""
        rng = self.rng
        i, j = self.pick_tool_result_or_range()
        self.compaction(i, j)
        roll = rng.random()
        if roll < 0.2:
            self.emit("compaction/end", {})  # looks like part of the compaction; still expires
        elif roll < 0.5:
            self.noop()
        elif roll < 0.65:
            self.emit("request/context", {"contextWindow": rng.choice((4096, 128_000))})
        elif roll < 0.8:
            self._chunk(build.usage_delta(self.usage()))
        else:
            self.ep_user()  # an append keeps i..j valid (it only grows the tail)
        self.replacement(i, j)

    def ep_dangling(self) -> None:
        """A claim nobody consumes: the next event simply expires it."""
        self.compaction(*self.pick_range())

    def ep_mismatch(self) -> bool:
        """A claim for one range, a replace over another: the reference throws (planted fault)."""

        def seqs(r: tuple[int, int]) -> tuple[int, int]:
            return self.surface[r[0]].seq, self.surface[r[1]].seq

        for _ in range(20):
            a, b = self.pick_range(), self.pick_tool_result_or_range()
            if seqs(a) != seqs(b):
                break
        else:
            return False
        if self.rng.random() < 0.3:
            self.compaction(*b)  # superseded: the newer claim covers a, the replace names b
        self.compaction(*a)
        self.replacement(*b)
        return True

    def build(self) -> list[Event]:
        rng = self.rng
        episodes: list[tuple[float, Callable[[], object], bool]] = [
            (35, self.ep_turn, False),
            (14, self.ep_user, False),
            (12, self.ep_metered, True),
            (3, self.ep_double_metered, True),
            (6, self.ep_unmetered, True),
            (5, self.ep_expired, True),
            (3, self.ep_dangling, True),
            (8, self.noop, False),
            (6, self.ep_request, False),
        ]
        while not self.full:
            if (
                self.mismatch_budget
                and len(self.surface) >= 2
                and len(self.events) > self.n_events // 3
                and rng.random() < 0.05
                and self.ep_mismatch()
            ):
                self.mismatch_budget = 0
                continue
            usable = [(w, ep) for w, ep, needs in episodes if self.surface or not needs]
            rng.choices([ep for _, ep in usable], [w for w, _ in usable])[0]()
        return self.events[: self.n_events]


def _split_utf16(rng: random.Random, text: str) -> list[str]:
    """Split into stream deltas at UTF-16 code-unit cuts, so surrogate pairs can split."""
    units = text.encode("utf-16-le", "surrogatepass")
    n = len(units) // 2
    pieces = rng.randrange(1, 9)
    # Repeated cuts give "" deltas.
    cuts = sorted(rng.randrange(0, n + 1) for _ in range(pieces - 1))
    bounds = [0, *cuts, n]
    return [
        units[2 * a : 2 * b].decode("utf-16-le", "surrogatepass")
        for a, b in itertools.pairwise(bounds)
    ]


def generate_session(
    rng: random.Random, session_id: str, n_events: int, *, v3_ops: bool = False
) -> list[Event]:
    """`n_events` events with seqs 0..n-1 and integer times, reference-valid by construction.

    ``v3_ops`` lets some unmetered replacements use the format-v3 keys
    ``{"op","startSeq","endSeq"}``: the contract ("Events") accepts them and the token
    meter folds them like any claim-less replace, but dsh-session rc.8's positional fold
    rejects them, so they are opt-in.
    """
    if n_events < 0:
        raise ValueError("n_events must be non-negative")
    del session_id  # ids live in the header line; events never repeat them
    return _SessionBuilder(rng, n_events, v3_ops=v3_ops).build()


# --------------------------------------------------------------------------- storage


def _pack_kind(event: Event) -> str | None:
    """The reference packer's whitelist: exact keys and primitive types, else stored verbatim."""
    if event.get("type") != "assistant/chunk" or set(event) != {"type", "seq", "time", "data"}:
        return None
    data = event["data"]
    if not isinstance(data, dict) or set(data) != {"turn", "step", "chunk"}:
        return None
    chunk = data["chunk"]
    kind = chunk.get("type")
    if kind in ("text-delta", "reasoning-delta") and set(chunk) == {"type", "index", "text"}:
        return str(kind)
    if kind == "tool-call-delta" and set(chunk) in (
        {"type", "index", "id", "argumentsDelta"},
        {"type", "index", "id", "name", "argumentsDelta"},
    ):
        return str(kind)
    return None


def _continues(prev: Event, nxt: Event) -> bool:
    a, b = prev["data"], nxt["data"]
    if nxt["seq"] != prev["seq"] + 1 or (a["turn"], a["step"]) != (b["turn"], b["step"]):
        return False
    ca, cb = a["chunk"], b["chunk"]
    if ca["index"] != cb["index"]:
        return False
    if ca["type"] != "tool-call-delta":
        return True
    return bool(
        ca["id"] == cb["id"]
        and ("name" in ca) == ("name" in cb)
        and ca.get("name") == cb.get("name")
    )


def pack_records(events: Sequence[Event], rng: random.Random | None = None) -> list[Json]:
    """Storage records: runs of >= 3 same-block deltas become one chunk row, like dsh's writer.

    With an rng, some runs are cut in two as a writer's flush boundary would cut them.
    """
    out: list[Json] = []
    run: list[Event] = []
    run_kind: str | None = None

    def flush_part(part: list[Event]) -> None:
        if run_kind is not None and len(part) >= MIN_PACK_RUN:
            out.append(build.pack_run(part))
        else:
            out.extend(part)

    def flush() -> None:
        if rng is not None and len(run) >= 2 and rng.random() < 0.15:
            cut = rng.randrange(1, len(run))
            flush_part(run[:cut])
            flush_part(run[cut:])
        else:
            flush_part(run)
        run.clear()

    for event in events:
        kind = _pack_kind(event)
        if kind is None:
            flush()
            run_kind = None
            out.append(event)
        elif kind == run_kind and run and _continues(run[-1], event):
            run.append(event)
        else:
            flush()
            run_kind = kind
            run.append(event)
    flush()
    return out


def write_session_jsonl(
    path: Path | str,
    session_id: str,
    events: Sequence[Event],
    pack_chunks: bool = True,
    *,
    header: bool = True,
) -> None:
    """Write a dsh JSONL log: the session header line, then one storage record per line.

    Escape style, spacing and run splitting vary per line from an rng seeded by the
    session id, so the same call always writes the same bytes.
    """
    rng = random.Random(f"write:{session_id}")
    writer = _JsonWriter(rng)
    records = pack_records(events, rng) if pack_chunks else list(events)
    lines = [writer.line(build.session_header(session_id))] if header else []
    lines += [writer.line(record) for record in records]
    # Lone surrogates are always escaped, so the text is valid UTF-8.
    Path(path).write_text("".join(line + "\n" for line in lines), encoding="utf-8", newline="\n")


__all__ = [
    "NASTY_NUMBER_LITERALS",
    "DupKeyObject",
    "Event",
    "RawNumber",
    "encode_json",
    "generate_session",
    "js_len",
    "nasty_text",
    "nasty_value",
    "pack_records",
    "price_blocks",
    "tool_schema",
    "write_session_jsonl",
]
