"""Fold benchmark: the Python fold core against the Node reference, and its O(1) claims.

Prints figures; asserts nothing about speed. Corpus generation is never timed.

    python -m benchmarks.fold [--sessions N] [--turns T] [--repeat R] [--seed S] [--json]
                              [--shape-mb MB] [--shapes PREFIX,...] [--throughput-only]
                              [--profile]

1. Throughput of reading + parsing + folding every log of a generated corpus: ours in
   process (``perf_counter``) and the reference (``node tests/oracle/fold.mjs --bench``, its
   own seconds) on the same files, alternating, best of R each. Once on the corpus as
   written (packed chunk rows, which we fold in O(1) per row), once with every row expanded
   to one line per event (what Kafka delivers). Plus whole-process wall time of both CLIs,
   startup included.
   1b. Whole processes per corpus shape (``benchmarks.corpus.shapes``: long texts, CJK, many
   tool calls, large tool results, short sessions, and many small logs of mixed scripts
   (five times ``--shape-mb``), each in the legacy and the modern envelope, each packed
   and unpacked; ``--shapes`` picks some): ``python -m stream fold DIR`` against
   ``node tests/oracle/fold.mjs DIR``, start-up included, the two alternating, best of R
   to 3R runs (until the two fastest of each agree within 10 %); events/s, the ratio,
   whether the outputs agree, and the worst shape (``report["shapes"]``, ``report["worst"]``).
2. Per-event cost of the three projections (``process``) at a 100- and a 50,000-node session.
3. The positional X-ray (``Surface.fold``): an append at 100 vs 50,000 nodes, and a replace.
4. Checkpoint bytes per session (the codec row) against the per-node checkpoint.

Progress goes to stderr; with --json stdout is exactly one JSON object.
"""

import argparse
import cProfile
import io
import json
import os
import platform
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from random import Random
from typing import Any, TypeVar

import orjson

from benchmarks.corpus import WORDS, Shape, shapes, write_corpus, write_shape
from stream import native
from stream.contract.events import Event, read_event
from stream.contract.storage import expand
from stream.logs.reader import read_logs
from stream.projections.positional import Surface
from stream.runtime import tune_gc
from stream.session import codec
from stream.session.offline import fold_lines
from stream.session.processor import SessionRecord, process
from stream.testing import events as build

ROOT = Path(__file__).resolve().parent.parent
ORACLE = ROOT / "tests" / "oracle" / "fold.mjs"
REFERENCE_PACKAGE = ROOT / "tests" / "oracle" / "node_modules" / "@deepseek-ai" / "dsh-token-meter"

SMALL, LARGE = 100, 50_000  # surface sizes for sections 2 and 3
BATCH = 20_000  # typical events folded per measurement in section 2
APPENDS = 20_000  # appends per measurement in section 3, in rounds of APPEND_ROUND
APPEND_ROUND = 100
REPLACES = 30  # single replaces timed in section 3
REPLACED = 10  # nodes a replace covers: an early span, like a compaction
CHECKPOINTS = (10, 100, 1_000, 10_000, 100_000)
MB = 1e6

T = TypeVar("T")


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# --- machine ------------------------------------------------------------------------------------


def node_binary() -> tuple[str | None, str]:
    """The node executable if the reference can run, else None and why not."""
    node = shutil.which("node")
    if node is None:
        return None, "node not on PATH"
    if not REFERENCE_PACKAGE.is_dir():
        return None, "tests/oracle/node_modules missing (cd tests/oracle && npm ci)"
    return node, ""


def machine(node: str | None) -> dict[str, Any]:
    node_version = None
    if node is not None:
        node_version = subprocess.run(
            [node, "--version"], capture_output=True, text=True, check=True
        ).stdout.strip()
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return {
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "node": node_version,
        "cpus": os.cpu_count(),
        "cpus_usable": usable,
        "platform": platform.platform(),
        "orjson": orjson.__version__,
        "core": native.status(),
    }


# --- timing -------------------------------------------------------------------------------------


def best_of(repeat: int, run: Callable[[], T]) -> tuple[float, T]:
    """Shortest wall time of ``repeat`` runs (seconds) and the last run's result."""
    best = float("inf")
    result: T
    for _ in range(repeat):
        start = time.perf_counter()
        result = run()
        best = min(best, time.perf_counter() - start)
    return best, result


# --- 1. throughput ------------------------------------------------------------------------------


def corpus_bytes(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.glob("*.jsonl"))


def write_unpacked(packed: Path, out: Path) -> None:
    """A copy of the corpus with every packed chunk row expanded to one line per event."""
    out.mkdir(parents=True, exist_ok=True)
    for path in sorted(packed.glob("*.jsonl")):
        lines = [
            orjson.dumps(value)
            for line in path.read_bytes().splitlines()
            if line.strip()
            for value in expand(orjson.loads(line))
        ]
        (out / path.name).write_bytes(b"\n".join(lines) + b"\n")


def fold_logs(directory: Path) -> dict[str, int]:
    """Read, parse and fold every log exactly as ``stream fold`` does, without output."""
    tune_gc()  # as `stream` sets it for every command
    records: dict[str, SessionRecord] = {}
    bad = 0
    for log in read_logs([str(directory)]):
        record = records.setdefault(log.session_id, SessionRecord.new())
        for _ in fold_lines(record, log.lines()):
            bad += 1
    count = sum(r.tally.total for r in records.values())
    faulted = sum(any(s.fault is not None for s in r) for r in records.values())
    return {"events": count, "bad_lines": bad, "faulted_sessions": faulted}


def parse_logs(directory: Path) -> int:
    """Only read and parse (JSON, header, chunk-row validation): the fold's floor."""
    return sum(1 for log in read_logs([str(directory)]) for _ in log.lines())


def reference_bench(node: str, directory: Path, repeat: int) -> dict[str, Any]:
    runs = []
    for _ in range(repeat):
        done = subprocess.run(
            [node, str(ORACLE), "--bench", str(directory)],
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
        )
        runs.append(json.loads(done.stdout))
    best: dict[str, Any] = min(runs, key=lambda r: float(r["seconds"]))
    return best


def wall(command: list[str], repeat: int) -> float:
    """Best whole-process wall time of a command with stdout to /dev/null."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(command, stdout=subprocess.DEVNULL, check=True, cwd=ROOT)
        best = min(best, time.perf_counter() - start)
    return best


def rates(events_count: int, size: int, seconds: float) -> dict[str, float]:
    return {
        "seconds": seconds,
        "events_per_s": events_count / seconds,
        "mb_per_s": size / MB / seconds,
    }


def throughput(
    corpora: dict[str, Path], empty: Path, node: str | None, repeat: int
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, directory in corpora.items():
        size = corpus_bytes(directory)
        log(f"  {name}: ours in process, alternating with the reference")
        parse_seconds, _ = best_of(repeat, partial(parse_logs, directory))
        # Alternating, best of each: a slow spell of the machine (seen here: ours at 0.56
        # and 1.0 of its best in two runs ten minutes apart) hits both alike instead of
        # whichever ran all its repeats in it.
        seconds = float("inf")
        refs: list[dict[str, Any]] = []
        for _ in range(repeat):
            once, summary = best_of(1, partial(fold_logs, directory))
            seconds = min(seconds, once)
            if node is not None:
                refs.append(reference_bench(node, directory, 1))
        entry: dict[str, Any] = {
            "bytes": size,
            "ours": {
                **summary,
                **rates(summary["events"], size, seconds),
                "read_parse_seconds": parse_seconds,
            },
        }
        if refs:
            ref = min(refs, key=lambda r: float(r["seconds"]))
            entry["reference"] = {
                "events": ref["events"],
                "bytes": ref["bytes"],
                **rates(ref["events"], ref["bytes"], ref["seconds"]),
            }
            entry["speedup"] = ref["seconds"] / seconds  # > 1: ours is faster
        out[name] = entry
    walls: dict[str, Any] = {}
    for name, directory in {"startup (empty dir)": empty, **corpora}.items():
        log(f"  wall time: {name}")
        row: dict[str, Any] = {
            "ours": wall([sys.executable, "-m", "stream", "fold", str(directory)], repeat)
        }
        if node is not None:
            row["reference"] = wall([node, str(ORACLE), str(directory)], repeat)
            row["speedup"] = row["reference"] / row["ours"]
        walls[name] = row
    out["wall"] = walls
    return out


# --- 1b. whole process per corpus shape ---------------------------------------------------------


def count_events(directory: Path) -> int:
    """Events in an unpacked corpus: its lines less the header lines (untimed)."""
    count = 0
    for path in directory.glob("*.jsonl"):
        lines = [line for line in path.read_bytes().splitlines() if line.strip()]
        header = bool(lines) and orjson.loads(lines[0]).get("type") == "session"
        count += len(lines) - header
    return count


def timed_run(command: list[str]) -> tuple[float, bytes]:
    """Whole-process wall time of a command and its stdout (a line per session)."""
    start = time.perf_counter()
    done = subprocess.run(command, stdout=subprocess.PIPE, check=True, cwd=ROOT)
    return time.perf_counter() - start, done.stdout


def settled(times: list[float]) -> bool:
    """The two fastest runs agree within 10 %."""
    if len(times) < 2:
        return False
    first, second = sorted(times)[:2]
    return second <= 1.1 * first


def same_output(ours: bytes, reference: bytes) -> bool:
    """Our lines equal the reference's once our extra ``time`` key is left out."""
    mine = []
    for line in ours.splitlines():
        value = orjson.loads(line)
        value.pop("time", None)
        mine.append(value)
    return mine == [orjson.loads(line) for line in reference.splitlines()]


def shape_runs(
    shape: Shape, layouts: dict[str, Path], events_count: int, node: str | None, repeat: int
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for layout, directory in layouts.items():
        name = f"{shape.name}/{layout}"
        log(f"  {name}")
        ours_cmd = [sys.executable, "-m", "stream", "fold", str(directory)]
        ref_cmd = None if node is None else [node, str(ORACLE), str(directory)]
        ours_times: list[float] = []
        ref_times: list[float] = []
        ours_out = ref_out = b""
        # Alternating, so drifting load hits both alike; at least ``repeat`` runs each, and
        # up to 3 x ``repeat`` until each command's two fastest agree within 10 % (a run
        # that shared the 2 cores with another process is not the best one to keep).
        while len(ours_times) < repeat or (
            len(ours_times) < 3 * repeat
            and not (settled(ours_times) and (ref_cmd is None or settled(ref_times)))
        ):
            seconds, ours_out = timed_run(ours_cmd)
            ours_times.append(seconds)
            if ref_cmd is not None:
                seconds, ref_out = timed_run(ref_cmd)
                ref_times.append(seconds)
        ours_best = min(ours_times)
        entry: dict[str, Any] = {
            "name": name,
            "shape": shape.name,
            "layout": layout,
            "files": len(list(directory.glob("*.jsonl"))),
            "bytes": corpus_bytes(directory),
            "events": events_count,
            "runs": len(ours_times),
            "ours": {"seconds": ours_best, "events_per_s": events_count / ours_best},
        }
        if ref_cmd is not None:
            ref_best = min(ref_times)
            entry["reference"] = {"seconds": ref_best, "events_per_s": events_count / ref_best}
            entry["speedup"] = ref_best / ours_best  # > 1: ours is faster
            entry["agree"] = same_output(ours_out, ref_out)
        out.append(entry)
    return out


def shape_throughput(
    root: Path,
    megabytes: float,
    seed: int,
    node: str | None,
    repeat: int,
    only: tuple[str, ...] = (),
) -> list[dict[str, Any]]:
    """Every shape (or those whose name starts with one of ``only``) packed and unpacked:
    `stream fold DIR` against the reference CLI on the same files, whole processes,
    start-up included, best of ``repeat``."""
    entries: list[dict[str, Any]] = []
    for shape in shapes():
        if only and not any(shape.name.startswith(prefix) for prefix in only):
            continue
        base = root / shape.name.replace("/", "-")
        layouts = {"packed": base / "packed", "unpacked": base / "unpacked"}
        size = megabytes * shape.scale
        log(f"writing shape {shape.name}: {size:g} MB packed")
        write_shape(layouts["packed"], shape, size, seed)
        write_unpacked(layouts["packed"], layouts["unpacked"])
        events_count = count_events(layouts["unpacked"])
        entries.extend(shape_runs(shape, layouts, events_count, node, repeat))
        for directory in layouts.values():
            shutil.rmtree(directory)  # one shape on disk at a time
    return entries


def worst_shape(entries: list[dict[str, Any]]) -> dict[str, Any] | None:
    measured = [e for e in entries if "speedup" in e]
    if not measured:
        return None
    worst = min(measured, key=lambda e: float(e["speedup"]))
    return {
        "name": worst["name"],
        "speedup": worst["speedup"],
        "ours_events_per_s": worst["ours"]["events_per_s"],
        "reference_events_per_s": worst["reference"]["events_per_s"],
    }


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


# --- profile ------------------------------------------------------------------------------------


def profile(directory: Path, top: int = 20) -> str:
    profiler = cProfile.Profile()
    profiler.enable()
    fold_logs(directory)
    profiler.disable()
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text)
    stats.strip_dirs().sort_stats("tottime").print_stats(top)
    return text.getvalue()


# --- output -------------------------------------------------------------------------------------


def table(title: str, header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        first = cells[0].ljust(widths[0])
        rest = (c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True))
        return "  ".join([first, *rest]).rstrip()

    rule = "-" * len(line(header))
    return "\n".join([title, rule, line(header), rule, *map(line, rows), ""])


def n(value: float, digits: int = 0) -> str:
    return f"{value:,.{digits}f}"


def render_shapes(result: dict[str, Any]) -> str:
    rows = []
    for e in result["shapes"]:
        ref = e.get("reference")
        rows.append(
            [
                e["name"],
                n(e["events"]),
                n(e["bytes"] / MB, 1),
                n(e["ours"]["events_per_s"]),
                "" if ref is None else n(ref["events_per_s"]),
                "" if ref is None else n(e["speedup"], 2) + "x",
                "" if ref is None else ("yes" if e["agree"] else "NO"),
            ]
        )
    text = table(
        f"1b. whole process per corpus shape ({result['shape_mb']:g} MB packed each):"
        " `python -m stream fold DIR` vs `node tests/oracle/fold.mjs DIR`, start-up"
        f" included, best of {result['repeat']} to {3 * result['repeat']} runs (until the two"
        " fastest of each agree within 10 %)",
        ["shape", "events", "MB", "ours ev/s", "reference ev/s", "ours/ref", "same output"],
        rows,
    )
    worst = result.get("worst")
    if worst:
        text += (
            f"   worst shape: {worst['name']}, {worst['speedup']:.2f}x"
            f" ({n(worst['ours_events_per_s'])} vs {n(worst['reference_events_per_s'])}"
            " events/s)\n"
        )
    return text


def render(result: dict[str, Any]) -> str:
    parts: list[str] = []
    m = result["machine"]
    c = result["corpus"]
    parts.append(
        "machine: {python}, node {node}, {cpus} CPUs ({cpus_usable} usable), orjson {orjson},"
        " {platform}; {core}".format(**{k: m[k] or "n/a" for k in m})
    )
    parts.append(
        f"corpus: {c['sessions']} sessions x up to {c['turns']} turns, seed {c['seed']};"
        f" packed {n(c['packed_bytes'] / MB, 1)} MB, unpacked {n(c['unpacked_bytes'] / MB, 1)}"
        f" MB; best of {result['repeat']} runs; MB = 10^6 bytes"
    )
    if result.get("reference_missing"):
        parts.append(f"reference not run: {result['reference_missing']}")
    parts.append("")

    tp = result["throughput"]
    rows = []
    for name in ("packed", "unpacked"):
        entry = tp[name]
        ours, ref = entry["ours"], entry.get("reference")
        rows.append(
            [
                f"{name}  ours",
                n(ours["events"]),
                n(ours["seconds"], 3),
                n(ours["events_per_s"]),
                n(ours["mb_per_s"], 1),
                f"{ours['read_parse_seconds'] / ours['seconds']:.0%}",
                n(entry["speedup"], 2) + "x" if ref else "",
            ]
        )
        if ref:
            rows.append(
                [
                    f"{name}  reference",
                    n(ref["events"]),
                    n(ref["seconds"], 3),
                    n(ref["events_per_s"]),
                    n(ref["mb_per_s"], 1),
                    "",
                    "",
                ]
            )
    parts.append(
        table(
            "1. fold throughput: read + parse + fold every log, in process",
            ["corpus", "events", "seconds", "events/s", "MB/s", "read+parse", "ours/ref"],
            rows,
        )
    )
    clean = ", ".join(
        f"{name}: {tp[name]['ours']['bad_lines']} bad lines,"
        f" {tp[name]['ours']['faulted_sessions']} faulted sessions"
        for name in ("packed", "unpacked")
    )
    parts.append(
        "   packed: chunk rows as stored (we fold a row in O(1)); unpacked: one line per event,"
        " as Kafka delivers.\n   read+parse: share of our time spent reading and parsing"
        " alone. ours/ref: throughput ratio = reference seconds / our seconds (> 1: ours"
        f" faster).\n   ours, {clean}.\n"
    )
    rows = []
    for name, row in tp["wall"].items():
        ref_s = row.get("reference")
        rows.append(
            [
                name,
                n(row["ours"], 3),
                "" if ref_s is None else n(ref_s, 3),
                "" if ref_s is None else n(row["speedup"], 2) + "x",
            ]
        )
    parts.append(
        table(
            "   whole process: `python -m stream fold DIR` vs `node tests/oracle/fold.mjs DIR`,"
            " stdout to /dev/null",
            ["corpus", "ours s", "reference s", "ours/ref"],
            rows,
        )
    )

    if result.get("shapes"):
        parts.append(render_shapes(result))
    if "projections" not in result:  # --throughput-only
        return "\n".join(parts)

    pc = result["projections"]
    small, large = pc[str(SMALL)], pc[str(LARGE)]
    rows = [
        [
            "all (mixed batch)",
            n(small["ns_per_event"]),
            n(large["ns_per_event"]),
            n(large["ns_per_event"] / small["ns_per_event"], 2),
        ]
    ]
    for kind in dict.fromkeys(KINDS):
        a, b = small["ns_by_kind"][kind], large["ns_by_kind"][kind]
        rows.append([f"  {kind}", n(a), n(b), n(b / a, 2) if a else ""])
    parts.append(
        table(
            f"2. projections: ns/event through `process`, {n(BATCH)} typical events after"
            f" N appended user messages",
            ["event", f"N={n(SMALL)}", f"N={n(LARGE)}", "ratio"],
            rows,
        )
    )
    parts.append(
        "   per-kind rows: one clock pair per event, calibrated timer overhead subtracted.\n"
    )

    pos = result["positional"]
    small, large = pos[str(SMALL)], pos[str(LARGE)]
    rows = [
        ["Surface.fold append", n(small["append_ns"]), n(large["append_ns"])],
        [
            f"Surface.fold replace of first {REPLACED} nodes (best)",
            n(small["replace"]["best_ns"]),
            n(large["replace"]["best_ns"]),
        ],
        [
            "  (median)",
            n(small["replace"]["median_ns"]),
            n(large["replace"]["median_ns"]),
        ],
        [
            "process: compaction/summary + that replace (best)",
            n(small["metered_replace_via_process"]["best_ns"]),
            n(large["metered_replace_via_process"]["best_ns"]),
        ],
    ]
    parts.append(
        table(
            "3. positional surface (per-node X-ray): ns per operation",
            ["operation", f"{n(SMALL)} nodes", f"{n(LARGE)} nodes"],
            rows,
        )
    )
    parts.append(
        f"   append ratio {LARGE} vs {SMALL} nodes:"
        f" {large['append_ns'] / small['append_ns']:.2f}; replace ratio:"
        f" {large['replace']['best_ns'] / small['replace']['best_ns']:.0f}\n"
    )

    rows = [
        [
            n(r["messages"]),
            n(r["events"]),
            n(r["row_bytes"]),
            n(r["per_node_bytes"]),
            n(r["per_node_bytes"] / r["row_bytes"], 1),
        ]
        for r in result["checkpoints"]
    ]
    parts.append(
        table(
            "4. checkpoint bytes per session",
            ["messages", "events", "row (codec)", "per-node", "per-node / row"],
            rows,
        )
    )
    return "\n".join(parts)


# --- main ---------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> dict[str, Any]:
    node, missing = node_binary()
    result: dict[str, Any] = {"machine": machine(node), "repeat": args.repeat}
    if missing:
        result["reference_missing"] = missing
    with tempfile.TemporaryDirectory(prefix="context-stream-bench-") as tmp:
        packed, unpacked, empty = Path(tmp, "packed"), Path(tmp, "unpacked"), Path(tmp, "empty")
        log(f"writing corpus: {args.sessions} sessions x up to {args.turns} turns")
        write_corpus(packed, args.sessions, args.turns, args.seed)
        write_unpacked(packed, unpacked)
        empty.mkdir()
        result["corpus"] = {
            "sessions": args.sessions,
            "turns": args.turns,
            "seed": args.seed,
            "packed_bytes": corpus_bytes(packed),
            "unpacked_bytes": corpus_bytes(unpacked),
        }
        log("1. throughput")
        result["throughput"] = throughput(
            {"packed": packed, "unpacked": unpacked}, empty, node, args.repeat
        )
        if args.profile:
            log("profiling the unpacked fold")
            result["profile"] = profile(unpacked)
        if args.shape_mb > 0:
            log(f"1b. shapes, whole process, {args.shape_mb:g} MB each")
            result["shape_mb"] = args.shape_mb
            result["shapes"] = shape_throughput(
                Path(tmp, "shapes"), args.shape_mb, args.seed, node, args.repeat, args.shapes
            )
            result["worst"] = worst_shape(result["shapes"])
    if args.throughput_only:
        return result
    log(f"building sessions of {SMALL} and {LARGE} nodes")
    built = {nodes: session_of(nodes, args.seed) for nodes in (SMALL, LARGE)}
    log("2. projections")
    result["projections"] = projection_cost(
        {k: record for k, (record, _) in built.items()}, args.seed, args.repeat
    )
    log("3. positional")
    result["positional"] = positional_cost(built, args.seed, args.repeat)
    log("4. checkpoints")
    result["checkpoints"] = checkpoint_sizes(args.seed)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=40)
    parser.add_argument("--turns", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure; best is kept")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    parser.add_argument(
        "--throughput-only", action="store_true", help="only section 1 (benchmarks.run)"
    )
    parser.add_argument(
        "--shape-mb",
        type=float,
        default=None,
        help="packed MB per corpus shape, times the shape's scale (small-mixed: 5) (default:"
        " sessions x turns / 100, at most 12; 0: no shapes)",
    )
    parser.add_argument(
        "--shapes",
        type=lambda text: tuple(filter(None, text.split(","))),
        default=(),
        help="only the shapes whose names start with one of these (comma-separated), e.g."
        " small-mixed,cjk/legacy",
    )
    parser.add_argument(
        "--profile", action="store_true", help="also cProfile one fold of the unpacked corpus"
    )
    args = parser.parse_args()
    if args.shape_mb is None:  # scales with the main corpus: 12 MB at the defaults
        args.shape_mb = min(12.0, args.sessions * args.turns / 100)
    if args.sessions < 1 or args.turns < 1 or args.repeat < 1:
        parser.error("--sessions, --turns and --repeat must be positive")
    result = run(args)
    profile_text = result.pop("profile", None)
    if args.json:
        print(json.dumps(result))
        if profile_text:
            print(profile_text, file=sys.stderr)
    else:
        print(render(result))
        if profile_text:
            print("cProfile of one in-process fold of the unpacked corpus (by own time):")
            print(profile_text)


if __name__ == "__main__":
    main()
