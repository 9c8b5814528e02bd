"""Sections 2-4 of ``benchmarks.fold``: the fold core's in-process micro-costs.

Per-event cost of the three projections (``process``) at a small and a large session, the
positional X-ray (``Surface.fold``: append and replace) at both sizes, and checkpoint
bytes per session (the codec row against the per-node checkpoint), all on synthetic
events built here with ``stream.testing.events``.
"""

import statistics
import time
from random import Random
from typing import Any

import orjson

from benchmarks.corpus import WORDS
from stream.contract.events import Event, read_event
from stream.projections.positional import Surface
from stream.session import codec
from stream.session.processor import SessionRecord, process
from stream.testing import events as build

SMALL, LARGE = 100, 50_000  # surface sizes for sections 2 and 3
BATCH = 20_000  # typical events folded per measurement in section 2
APPENDS = 20_000  # appends per measurement in section 3, in rounds of APPEND_ROUND
APPEND_ROUND = 100
REPLACES = 30  # single replaces timed in section 3
REPLACED = 10  # nodes a replace covers: an early span, like a compaction
CHECKPOINTS = (10, 100, 1_000, 10_000, 100_000)


# --- synthetic events for sections 2-4 ----------------------------------------------------------


def words(rng: Random, count: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(count))


def at(seq: int) -> int:
    """An event's time: 7 ms per seq from the factory's ``T0``."""
    return build.T0 + 7 * seq


def user(seq: int, text: str, op: Any = build.APPEND) -> Event:
    return read_event(build.user_message(seq, build.texts(text), op=op, time=at(seq)))


def system(seq: int, text: str) -> Event:
    return read_event(build.system_message(seq, build.texts(text), time=at(seq)))


def delta(seq: int, turn: int, text: str) -> Event:
    chunk = build.text_delta(text)
    return read_event(build.assistant_chunk(seq, chunk, turn=turn, time=at(seq)))


def usage_of(turn: int) -> dict[str, int]:
    pressure = 2_000 + 400 * (turn % 300)
    return build.usage(pressure // 10, 60, cache_read=pressure)


def usage_chunk(seq: int, turn: int) -> Event:
    return read_event(build.usage_chunk(seq, usage_of(turn), turn=turn, time=at(seq)))


def assistant(seq: int, turn: int, text: str, tool_call: bool = False) -> Event:
    content = [build.text_block(text)]
    if tool_call:
        content.append(build.tool_call_block(f"c{turn}", "tool_1", '{"arg0":"x"}'))
    event = build.assistant_message(
        seq, content, usage=usage_of(turn), turn=turn, step=0, time=at(seq)
    )
    return read_event(event)


def tool_result(seq: int, turn: int, text: str) -> Event:
    block = build.tool_result_block(f"c{turn}", build.texts(text), name="tool_1")
    return read_event(build.tool_result(seq, [block], time=at(seq)))


KINDS = (
    "user/message append",
    "assistant/chunk delta",
    "assistant/chunk delta",
    "assistant/chunk delta",
    "assistant/chunk usage",
    "assistant/message +usage",
)


def typical_batch(seq0: int, count: int, seed: int) -> tuple[list[Event], list[str]]:
    """``count`` events from ``seq0``: per turn a user message, three deltas, a usage chunk
    and the assistant message with usage. The same seed gives the same content."""
    rng = Random(seed)
    batch: list[Event] = []
    kinds: list[str] = []
    turn = 0
    while len(batch) < count:
        seq = seq0 + len(batch)
        cycle = [
            user(seq, words(rng, rng.randint(5, 80))),
            *(delta(seq + k, turn, words(rng, 2) + " ") for k in (1, 2, 3)),
            usage_chunk(seq + 4, turn),
            assistant(seq + 5, turn, words(rng, rng.randint(20, 200))),
        ]
        batch.extend(cycle)
        kinds.extend(KINDS)
        turn += 1
    return batch[:count], kinds[:count]


def session_of(nodes: int, seed: int) -> tuple[SessionRecord, Surface]:
    """A session of ``nodes`` appended user messages, as a record and as a surface."""
    rng = Random(seed)
    record, surface = SessionRecord.new(), Surface()
    for seq in range(nodes):
        event = user(seq, words(rng, rng.randint(5, 40)))
        process(record, event)
        surface.fold(event)
    return record, surface


def copy(record: SessionRecord) -> SessionRecord:
    return codec.decode(codec.encode(record))


def check_clean(record: SessionRecord, what: str) -> None:
    """A faulted projection skips events: its timing would measure nothing."""
    faults = [s.fault for s in record if s.fault is not None]
    if faults:
        raise RuntimeError(f"{what}: benchmark events faulted a projection: {faults}")


# --- 2. per-event cost of the projections -------------------------------------------------------


def timer_overhead_ns() -> float:
    clock = time.perf_counter_ns
    samples = []
    for _ in range(5):
        start = clock()
        for _ in range(10_000):
            t0 = clock()
            _ = clock() - t0
        samples.append((clock() - start) / 10_000)
    return min(samples)


def projection_cost(
    bases: dict[int, SessionRecord], seed: int, repeat: int
) -> dict[str, dict[str, Any]]:
    overhead = timer_overhead_ns()
    out: dict[str, dict[str, Any]] = {}
    for nodes, base in bases.items():
        batch, kinds = typical_batch(nodes, BATCH, seed)

        best = float("inf")
        for _ in range(repeat):
            record = copy(base)  # records are O(1): a fresh copy per run is cheap
            start = time.perf_counter()
            for event in batch:
                process(record, event)
            best = min(best, time.perf_counter() - start)
            check_clean(record, f"{nodes}-node batch")
        # Per kind: one clock pair per event, its calibrated overhead subtracted.
        clock = time.perf_counter_ns
        record = copy(base)
        totals: dict[str, int] = dict.fromkeys(KINDS, 0)
        counts: dict[str, int] = dict.fromkeys(KINDS, 0)
        for event, kind in zip(batch, kinds, strict=True):
            t0 = clock()
            process(record, event)
            totals[kind] += clock() - t0
            counts[kind] += 1
        check_clean(record, f"{nodes}-node per-kind batch")
        out[str(nodes)] = {
            "nodes": nodes,
            "events": len(batch),
            "ns_per_event": best / len(batch) * 1e9,
            "ns_by_kind": {k: max(0.0, totals[k] / counts[k] - overhead) for k in totals},
        }
    return out


# --- 3. the positional fold ---------------------------------------------------------------------


def time_appends(surface: Surface, seed: int, repeat: int) -> float:
    """ns per ``Surface.fold`` of an append, at (about) the surface's current size: appends run
    in rounds of APPEND_ROUND and the surface is cut back after each round (untimed)."""
    size, total = len(surface.nodes), surface.total
    rng = Random(seed)
    round_events = [user(10**9 + k, words(rng, rng.randint(5, 80))) for k in range(APPEND_ROUND)]
    best = float("inf")
    for _ in range(repeat):
        spent = 0.0
        for _ in range(APPENDS // APPEND_ROUND):
            start = time.perf_counter()
            for event in round_events:
                surface.fold(event)
            spent += time.perf_counter() - start
            del surface.nodes[size:]
            surface.total = total
        best = min(best, spent)
    return best / (APPENDS // APPEND_ROUND * APPEND_ROUND) * 1e9


def time_replace(surface: Surface) -> dict[str, float]:
    """ns for ``Surface.fold`` of a replace of the first REPLACED nodes (a compaction of an
    early span), restored after each (untimed)."""
    nodes, total = surface.nodes, surface.total
    event = user(
        10**9, "Summary: the span so far", build.replace(nodes[0].seq, nodes[REPLACED - 1].seq)
    )
    samples = []
    for _ in range(REPLACES):
        surface.nodes, surface.total = list(nodes), total
        start = time.perf_counter()
        surface.fold(event)
        samples.append(time.perf_counter() - start)
    surface.nodes, surface.total = nodes, total
    return {"best_ns": min(samples) * 1e9, "median_ns": statistics.median(samples) * 1e9}


def time_metered_replace(base: SessionRecord, surface: Surface) -> dict[str, float]:
    """ns for the same replace through ``process`` (the O(1) projections), metered the way
    producers do it: ``compaction/summary`` then the replace, both timed."""
    seq = base.seen + 1
    shadowed = surface.nodes[:REPLACED]
    first, last = shadowed[0].seq, shadowed[-1].seq
    tokens = sum(n.price for n in shadowed)
    seqs = [n.seq for n in shadowed]
    summary = read_event(build.metering(seq, first, last, tokens, shadowed_seqs=seqs, time=at(seq)))
    replace = user(seq + 1, "Summary: the span so far", build.replace(first, last))
    samples = []
    for _ in range(REPLACES):
        record = copy(base)
        start = time.perf_counter()
        process(record, summary)
        process(record, replace)
        samples.append(time.perf_counter() - start)
        check_clean(record, "metered replace")
    return {"best_ns": min(samples) * 1e9, "median_ns": statistics.median(samples) * 1e9}


def positional_cost(
    bases: dict[int, tuple[SessionRecord, Surface]], seed: int, repeat: int
) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for nodes, (record, surface) in bases.items():
        out[str(nodes)] = {
            "nodes": nodes,
            "append_ns": time_appends(surface, seed, repeat),
            "replace": time_replace(surface),
            "metered_replace_via_process": time_metered_replace(record, surface),
        }
    return out


# --- 4. checkpoint size -------------------------------------------------------------------------


def checkpoint_sizes(seed: int) -> list[dict[str, int]]:
    """Row bytes and per-node checkpoint bytes as a session grows: one system prompt, then
    per turn a user message, a usage chunk, the assistant message (with a tool call and
    usage) and the tool result. Message count = surface nodes."""
    rng = Random(seed)
    record, surface = SessionRecord.new(), Surface()
    texts = [words(rng, rng.randint(5, 80)) for _ in range(64)]
    seq = 0
    out: list[dict[str, int]] = []
    wanted = list(CHECKPOINTS)

    def fold(event: Event) -> None:
        nonlocal seq
        process(record, event)
        surface.fold(event)
        seq += 1
        if wanted and len(surface.nodes) == wanted[0]:
            wanted.pop(0)
            out.append(
                {
                    "messages": len(surface.nodes),
                    "events": seq,
                    "row_bytes": len(codec.encode(record)),
                    "per_node_bytes": len(orjson.dumps(surface.checkpoint())),
                }
            )

    fold(system(seq, "You are a careful coding agent. " + texts[0]))
    turn = 0
    while wanted:
        text = texts[turn % len(texts)]
        fold(user(seq, text))
        fold(usage_chunk(seq, turn))
        fold(assistant(seq, turn, text, tool_call=True))
        fold(tool_result(seq, turn, text))
        turn += 1
    check_clean(record, "checkpoint session")
    return out
