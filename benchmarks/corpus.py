"""A reproducible, realistic corpus of dsh session logs for the benchmarks.

Shaped like real harness logs: every step re-logs the request envelope (a tool list of a
few KB), streams its reply as packed chunk rows, reports usage as a chunk and again on
the final message, and tool results carry most of the bytes. Compactions are metered
with the exact shadow price, as current producers do. Events and rows come from the
event factory (``stream.testing.events``).

    python -m benchmarks.corpus OUT_DIR [--sessions N] [--turns T] [--seed S]
"""

import argparse
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from stream.contract.events import read_event
from stream.projections.positional import Surface
from stream.testing import events as build

WORDS = [
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "that",
    "for",
    "it",
    "as",
    "with",
    "was",
    "on",
    "be",
    "by",
    "this",
    "are",
    "or",
    "from",
    "at",
]
CJK = "上下文构成只保留系统提示词压缩替换计量"


def _text(rng: random.Random, n_words: int) -> str:
    words = [rng.choice(WORDS) for _ in range(n_words)]
    if rng.random() < 0.2:
        words.append("".join(rng.choice(CJK) for _ in range(rng.randint(2, 12))))
    if rng.random() < 0.05:
        words.append("🙂")
    return " ".join(words)


def _tools(rng: random.Random, count: int) -> list[dict[str, Any]]:
    return [
        {
            "name": f"tool_{i}",
            "description": _text(rng, 40),
            "parameters": {
                "type": "object",
                "properties": {
                    f"arg{j}": {"type": "string", "description": _text(rng, 12)} for j in range(4)
                },
                "required": ["arg0"],
            },
        }
        for i in range(count)
    ]


class _Writer:
    def __init__(self, session_id: str) -> None:
        self.rows: list[bytes] = [orjson.dumps(build.session_header(session_id))]
        self.seq = 0
        self.time = build.T0
        self.surface = Surface()

    def add(self, event: build.RawEvent) -> None:
        self.rows.append(orjson.dumps(event))
        self.surface.fold(read_event(event))
        self.seq += 1
        self.time += 7

    def event(self, kind: str, data: dict[str, Any]) -> None:
        self.add(build.event(kind, self.seq, data, time=self.time))

    def chunks(self, turn: int, step: int, texts: list[str]) -> None:
        dt = [3] * (len(texts) - 1)
        row = build.chunk_row(
            "text-chunks", self.seq, self.time, texts, turn=turn, step=step, dt=dt
        )
        self.rows.append(orjson.dumps(row))
        self.seq += len(texts)
        self.time += 3 * len(texts)


def session(rng: random.Random, session_id: str, turns: int) -> bytes:
    w = _Writer(session_id)
    tools = _tools(rng, rng.randint(4, 12))
    system = "You are a careful coding agent. " + _text(rng, 300)
    pressure = 2000
    for turn in range(turns):
        w.event("turn/start", {"turn": turn})
        prompt = build.texts(_text(rng, rng.randint(5, 80)))
        w.add(build.user_message(w.seq, prompt, time=w.time))
        for step in range(rng.randint(1, 4)):
            w.add(build.request_header(w.seq, system=system, tools=tools, time=w.time))
            w.add(build.request_context(w.seq, 128000, time=w.time))
            w.event("step/start", {"turn": turn, "step": step})
            deltas = [_text(rng, rng.randint(1, 3)) + " " for _ in range(rng.randint(20, 200))]
            w.chunks(turn, step, deltas)
            pressure += rng.randint(200, 3000)
            usage = build.usage(
                pressure // 10, len(deltas) * 2, cache_read=pressure - pressure // 10
            )
            w.add(build.usage_chunk(w.seq, usage, turn=turn, step=step, time=w.time))
            call_id = f"c{turn}.{step}"
            arguments = orjson.dumps({"arg0": _text(rng, 8)}).decode()
            content = [
                build.text_block("".join(deltas)),
                build.tool_call_block(call_id, "tool_1", arguments),
            ]
            w.add(
                build.assistant_message(
                    w.seq, content, usage=usage, turn=turn, step=step, time=w.time
                )
            )
            output = build.texts(_text(rng, rng.randint(50, 1500)))
            result = build.tool_result_block(call_id, output, name="tool_1")
            w.add(build.tool_result(w.seq, [result], time=w.time))
            w.event("step/end", {"turn": turn, "step": step})
        w.event("turn/end", {"turn": turn})
        nodes = w.surface.nodes
        if len(nodes) > 12 and rng.random() < 0.25:  # metered compaction of an early span
            first, last = nodes[0], nodes[rng.randint(3, len(nodes) // 2)]
            shadowed = nodes[: nodes.index(last) + 1]
            tokens = sum(n.price for n in shadowed)
            seqs = [n.seq for n in shadowed]
            w.add(
                build.metering(w.seq, first.seq, last.seq, tokens, shadowed_seqs=seqs, time=w.time)
            )
            summary = build.texts("Summary: " + _text(rng, 120))
            op = build.replace(first.seq, last.seq)
            w.add(build.user_message(w.seq, summary, source="compaction", op=op, time=w.time))
            pressure //= 3
    return b"\n".join(w.rows) + b"\n"


def write_corpus(out: Path, sessions: int, turns: int, seed: int) -> list[Path]:
    rng = random.Random(seed)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(sessions):
        path = out / f"bench-{seed}-{i:04d}.jsonl"
        path.write_bytes(
            session(rng, f"bench-{seed}-{i:04d}", rng.randint(max(1, turns // 2), turns))
        )
        paths.append(path)
    return paths


# --- corpus shapes (benchmarks.fold's whole-process comparison) ---------------------------------
#
# Each shape is one way real logs differ from the corpus above: the text it carries, how
# many tool calls a step makes, how large tool results are, and the envelope the producer
# wrote. "legacy": no header line (the session id is the file name), the system prompt
# only in the request envelope, compactions metered without ``shadowedSeqs`` and replaced
# "modern": a header line, the prompt also as a ``system/message`` on the surface and
# ``shadowedSeqs``. Both replace with format v0 ranges: the reference compares a claim with
# ``op.start``, so a metered format-v3 replace faults it (tests/generators/sessions.py). Texts are slices of one long
# source per corpus, so generating tens of MB takes seconds.


@dataclass(frozen=True, slots=True)
class Shape:
    """One corpus shape; ``write_shape`` writes it packed (chunk rows as written)."""

    name: str
    text: str  # "words" (ASCII with a little CJK), "long" (the same, longer), "cjk", "mixed"
    prompt_words: tuple[int, int]  # per user message
    deltas: tuple[int, int]  # streamed text deltas per step
    delta_words: tuple[int, int]  # words per delta
    calls: tuple[int, int]  # tool calls per step (each with a result)
    result_words: tuple[int, int]  # per tool result
    legacy: bool
    turns: tuple[int, int] = (4, 16)  # per session
    system_words: int = 300  # the system prompt
    tools: tuple[int, int] = (4, 12)  # tool schemas in the request envelope
    tool_text: bool = False  # tool descriptions from the corpus text (digits, escapes...)
    file_results: float = 0.0  # share of tool results that are a "file" block, not text
    scale: float = 1.0  # the corpus's size in units of ``--shape-mb``


CONTENTS: dict[str, dict[str, Any]] = {
    "long-texts": {
        "text": "long",
        "prompt_words": (300, 2500),
        "deltas": (150, 600),
        "delta_words": (2, 8),
        "calls": (1, 2),
        "result_words": (200, 2500),
    },
    "cjk": {
        "text": "cjk",
        "prompt_words": (20, 400),
        "deltas": (40, 300),
        "delta_words": (1, 4),
        "calls": (1, 2),
        "result_words": (50, 1500),
    },
    "many-tool-calls": {
        "text": "words",
        "prompt_words": (5, 80),
        "deltas": (5, 40),
        "delta_words": (1, 3),
        "calls": (6, 24),
        "result_words": (5, 120),
    },
    "large-tool-results": {
        "text": "words",
        "prompt_words": (5, 80),
        "deltas": (10, 80),
        "delta_words": (1, 3),
        "calls": (1, 2),
        "result_words": (5_000, 40_000),
    },
    # Many small sessions of long texts (a few hundred events each): per-session costs
    # (opening a log, a new tool list to price) weigh more.
    "short-sessions": {
        "text": "long",
        "prompt_words": (100, 1500),
        "deltas": (20, 120),
        "delta_words": (2, 8),
        "calls": (1, 3),
        "result_words": (100, 1500),
        "turns": (1, 3),
    },
    # Many small legacy-like files, as a held-out corpus of 1,200 sessions had them (~170
    # events, ~285 bytes a line unpacked, ~45 % of the events chunks): here ~170 events
    # and ~60 kB each, ~350 bytes a line, ~50 % chunks in short runs, a ~1.4 kB system
    # prompt in every request/header, messages of 0.5-0.7 kB and tool results of ~0.7 kB,
    # text in mixed scripts (accents, CJK, emoji and other astral letters, control
    # characters, quotes and backslashes, numbers like "1.5" or "2e3"), a tool schema
    # written in it in half the sessions, and half the tool results as a "file" block
    # (priced by the length of its JSON, where such numbers show).
    "small-mixed": {
        "text": "mixed",
        "prompt_words": (60, 100),
        "deltas": (3, 10),
        "delta_words": (1, 4),
        "calls": (1, 2),
        "result_words": (45, 70),
        "turns": (3, 6),
        "system_words": 200,
        "tools": (0, 1),
        "tool_text": True,
        "file_results": 0.5,
        # ~1,000 logs at the default 12 MB: the held-out corpus had 1,200 of ~48 kB, and
        # per-log and per-event costs, not start-up, decide a fold that long.
        "scale": 5.0,
    },
}


def shapes() -> list[Shape]:
    """Every content shape in both envelopes: ``{content}/{legacy|modern}``."""
    return [
        Shape(name=f"{content}/{envelope}", legacy=envelope == "legacy", **params)
        for content, params in CONTENTS.items()
        for envelope in ("legacy", "modern")
    ]


_CJK_COMMON = "".join(chr(c) for c in range(0x4E00, 0x4E00 + 3000))
_CJK_PUNCT = "，。、；：？！「」（）"
_ASTRAL = "🙂😀🚀𠀀𠀁"
# What "mixed" text draws from besides ASCII words: accented words, astral letters
# (mathematical, Gothic, Deseret), control characters and what JSON escapes, numbers.
_ACCENTED = ["café", "naïve", "Ångström", "señor", "über", "façade", "résumé", "Dvořák"]
_LETTERS = "𝐀𝐁𝔄𝔅𝒜𐌰𐌱𐍈𐐀𐐨"
_CONTROL = "\x00\x01\x07\x08\t\n\r\x1b\x1f\x7f"
_ESCAPED = ['"', "\\", "\u2028", "\u2029", "</script>", "\\n", 'say "hi"']
_NUMBERS = ["1.5", "2e3", "v2.0", "42", "3.14", "0x1E", "10,000", "1E-9", "2026-12-06"]


def _mixed_piece(rng: random.Random) -> str:
    r = rng.random()
    if r < 0.62:
        return rng.choice(WORDS) + " "
    if r < 0.72:
        return rng.choice(_ACCENTED) + " "
    if r < 0.84:
        return "".join(rng.choice(_CJK_COMMON) for _ in range(rng.randint(1, 6))) + "，"
    if r < 0.88:
        return rng.choice(_ASTRAL + _LETTERS)
    if r < 0.91:
        return rng.choice(_CONTROL)
    if r < 0.95:
        return rng.choice(_ESCAPED) + " "
    return rng.choice(_NUMBERS) + " "


class _Source:
    """One long text per corpus; a text of n words is a slice of it (a word is ~5 characters
    of ASCII, ~2 of CJK)."""

    def __init__(self, rng: random.Random, kind: str) -> None:
        self.kind = kind
        if kind == "cjk":
            pieces = []
            for _ in range(400_000):
                r = rng.random()
                if r < 0.85:
                    pieces.append(rng.choice(_CJK_COMMON))
                elif r < 0.95:
                    pieces.append(rng.choice(_CJK_PUNCT))
                elif r < 0.99:
                    pieces.append(rng.choice(WORDS) + " ")
                else:
                    pieces.append(rng.choice(_ASTRAL))
            self.text = "".join(pieces)
            self.per_word = 2
        elif kind == "mixed":
            self.text = "".join(_mixed_piece(rng) for _ in range(200_000))
            self.per_word = 5
        else:
            self.text = " ".join(_text(rng, 12) for _ in range(40_000))
            self.per_word = 5
        self.rng = rng

    def take(self, words: int) -> str:
        size = max(1, words * self.per_word)
        while size > len(self.text):  # a result longer than the source: repeat it
            self.text += self.text
        start = self.rng.randrange(0, len(self.text) - size + 1)
        return self.text[start : start + size]


def _result_content(rng: random.Random, source: _Source, shape: Shape) -> list[dict[str, Any]]:
    """A tool result's blocks: its text, or as often as ``shape.file_results`` says a
    ``file`` block, which the estimator prices by its JSON (contract: "Pricing")."""
    text = source.take(rng.randint(*shape.result_words))
    if shape.file_results and rng.random() < shape.file_results:
        path = f"src/{source.take(2).strip() or 'x'}.py"
        return [{"type": "file", "path": path, "mediaType": "text/plain", "text": text}]
    return build.texts(text)


def shaped_session(
    rng: random.Random, source: _Source, session_id: str, shape: Shape, budget: float
) -> bytes:
    """One session of ``shape``: its turns of 1 to 4 steps each, fewer once the session
    holds ``budget`` bytes (a small corpus of large tool results stays small)."""
    w = _Writer(session_id)
    if shape.legacy:
        w.rows.clear()  # no header line: the session id is the file name
    tools = _tools(rng, rng.randint(*shape.tools))
    if shape.tool_text:  # the schemas' descriptions in the corpus text, as real ones are
        for tool in tools:
            tool["description"] = source.take(40)
            for parameter in tool["parameters"]["properties"].values():
                parameter["description"] = source.take(12)
    system = "You are a careful coding agent. " + source.take(shape.system_words)
    if not shape.legacy:
        w.add(build.system_message(w.seq, build.texts(system), time=w.time))
    pressure = 2000
    turns = rng.randint(*shape.turns)

    def span(bounds: tuple[int, int]) -> int:
        return rng.randint(*bounds)

    for turn in range(turns):
        if turn and sum(map(len, w.rows)) >= budget:
            break
        w.event("turn/start", {"turn": turn})
        w.add(
            build.user_message(
                w.seq, build.texts(source.take(span(shape.prompt_words))), time=w.time
            )
        )
        for step in range(rng.randint(1, 4)):
            w.add(build.request_header(w.seq, system=system, tools=tools, time=w.time))
            w.add(build.request_context(w.seq, 128000, time=w.time))
            w.event("step/start", {"turn": turn, "step": step})
            deltas = [source.take(span(shape.delta_words)) for _ in range(span(shape.deltas))]
            w.chunks(turn, step, deltas)
            pressure += rng.randint(200, 3000)
            usage = build.usage(
                pressure // 10, len(deltas) * 2, cache_read=pressure - pressure // 10
            )
            w.add(build.usage_chunk(w.seq, usage, turn=turn, step=step, time=w.time))
            calls = [f"c{turn}.{step}.{k}" for k in range(span(shape.calls))]
            content = [build.text_block("".join(deltas))] + [
                build.tool_call_block(
                    call, f"tool_{k % 4}", orjson.dumps({"arg0": source.take(8)}).decode()
                )
                for k, call in enumerate(calls)
            ]
            w.add(
                build.assistant_message(
                    w.seq, content, usage=usage, turn=turn, step=step, time=w.time
                )
            )
            results = [
                build.tool_result_block(
                    call, _result_content(rng, source, shape), name=f"tool_{k % 4}"
                )
                for k, call in enumerate(calls)
            ]
            if step % 2:  # one tool/result per call, or all results in one
                w.add(build.tool_result(w.seq, results, time=w.time))
            else:
                for result in results:
                    w.add(build.tool_result(w.seq, [result], time=w.time))
            w.event("step/end", {"turn": turn, "step": step})
        w.event("turn/end", {"turn": turn})
        nodes = w.surface.nodes[0 if shape.legacy else 1 :]  # the system prompt stays
        if len(nodes) > 12 and rng.random() < 0.25:  # metered compaction of an early span
            first, last = nodes[0], nodes[rng.randint(3, len(nodes) // 2)]
            shadowed = nodes[: nodes.index(last) + 1]
            tokens = sum(n.price for n in shadowed)
            seqs = build.ABSENT if shape.legacy else [n.seq for n in shadowed]
            w.add(
                build.metering(w.seq, first.seq, last.seq, tokens, shadowed_seqs=seqs, time=w.time)
            )
            summary = build.texts("Summary: " + source.take(120))
            op = build.replace(first.seq, last.seq)  # v3 keys fault the reference here
            w.add(build.user_message(w.seq, summary, source="compaction", op=op, time=w.time))
            pressure //= 3
    return b"\n".join(w.rows) + b"\n"


def write_shape(out: Path, shape: Shape, megabytes: float, seed: int) -> list[Path]:
    """Sessions of ``shape`` until the corpus holds ``megabytes`` (10^6 bytes), packed."""
    rng = random.Random(f"{seed}/{shape.name}")
    source = _Source(rng, shape.text)
    out.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []
    size = 0
    while size < megabytes * 1e6:
        name = f"shape-{seed}-{len(paths):04d}"
        body = shaped_session(rng, source, name, shape, megabytes * 1e6 - size)
        path = out / f"{name}.jsonl"
        path.write_bytes(body)
        paths.append(path)
        size += len(body)
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--sessions", type=int, default=40)
    parser.add_argument("--turns", type=int, default=30)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    paths = write_corpus(args.out, args.sessions, args.turns, args.seed)
    print(f"{len(paths)} logs, {sum(p.stat().st_size for p in paths)} bytes in {args.out}")


if __name__ == "__main__":
    main()
