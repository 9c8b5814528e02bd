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
import pstats
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.corpus import write_corpus
from benchmarks.fold_costs import (
    BATCH,
    KINDS,
    LARGE,
    REPLACED,
    SMALL,
    checkpoint_sizes,
    positional_cost,
    projection_cost,
    session_of,
)
from benchmarks.fold_reference import (
    MB,
    corpus_bytes,
    fold_logs,
    log,
    machine,
    n,
    node_binary,
    render_shapes,
    shape_throughput,
    table,
    throughput,
    worst_shape,
    write_unpacked,
)

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
