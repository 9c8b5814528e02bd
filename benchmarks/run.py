"""``make bench``: every figure of docs/performance.md from one run, in one table.

    python -m benchmarks.run [--smoke] [--only SECTION,...] [--json PATH]

Sections (all by default, in this order):

- ``calibrate``: what this machine is, so a reader can tell a slower machine from a
  regression: a fixed CPU-bound loop (best of 5) and Quix Streams draining a backlog of
  single events. Every other figure is printed next to these.
- ``drain``: a backlog, produced first, read to the end by raw confluent-kafka, Quix
  Streams, stock Faust and our worker, with single events and segments of 16 and 64,
  each system ``--drain-repeat`` times (alternating: ck, quix, faust, ours, again),
  reported by medians with the spread. Our single-event drain is the worker's own
  capacity; the live sweep measures it again.
- ``live``: the live-latency sweep (``benchmarks.sweep``; its load, ``benchmarks.live``):
  paced rates over concurrent sessions, one event per message, at fractions of our
  single-event drain rate (the median of the sweep's drains, one more measured just before
  each step; ``--rates`` sets events/s instead); per rate the latency, the worker's CPU,
  the backlog left when the load stops and how long it took to clear, and per event the
  Kafka requests the worker sent, the Redis commands it ran and the output records it
  wrote. A step behind its load with the worker under 0.9 cores is flagged.
  On two cores or more the worker runs on a core of its own, the load generator, broker,
  Redis and subscriber on the others, and the drains the fractions are of are measured so
  too (``--shared-cores``: all of them share every core). With ``--shared-cores`` each
  step runs first through a plain relay (the floor) and a Quix Streams app (a peer, from
  ``build/peers-venv``: ``make bench`` makes it), each on its own topic, their latency
  and CPU beside the worker's; after the last step, each runner's CPU idle.
  ``--traffic heldout``: traffic like the issue's held-out harness (``benchmarks.heldout``).
- ``scale``: one worker against two on the same load.
- ``replay``: ``benchmarks.replay`` (stream replay, back to lag 0).
- ``fold``: the fold against the reference on both corpus kinds (``benchmarks.fold``).
- ``lifecycle``: ``benchmarks.lifecycle`` (a year of sessions with and without
  ``STREAM_SESSION_TTL``: is what the service keeps flat from month 2 on?).

Starts its own Kafka and Redis unless KAFKA_BOOTSTRAP_SERVERS and REDIS_URL are set.
BENCH_WORKER_TREE=DIR runs the workers from another checkout (a before/after).
``--smoke`` is the CI version, under a minute: small corpora, two short live rates,
single-event drains, the same code paths (replay excepted: it has its own integration
test). Prints figures; asserts only that every event was accounted for.
"""

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.drain import backlog, drain, drain_peer, events_per_s, summarize
from benchmarks.infra import (
    REPO,
    Infra,
    Scenario,
    WorkerProcess,
    corpus_sessions,
    infrastructure,
    produce_backlog,
)
from benchmarks.peers import PEERS_INSTALL, peers_python
from benchmarks.plan import Plan, log, n
from benchmarks.sweep import live, render_live
from stream import native

SECTIONS = ("calibrate", "drain", "live", "scale", "replay", "fold", "lifecycle")

FULL = Plan(
    live_sessions=600,
    live_rates=(),
    live_fractions=(1 / 6, 1 / 3, 1 / 2, 3 / 4, 1.0, 1.5),
    live_seconds=15,
    live_turns=16,
    live_variants=((),),
    live_warmup=10,
    live_repeat=1,
    live_own_core=True,
    live_floor=False,
    live_quix=True,
    live_traffic="bench",
    live_idle=45,
    drain_sessions=40,
    drain_turns=30,
    drain_segments=(1, 16, 64),
    drain_systems=("ck", "quix", "faust", "ours"),
    drain_repeat=3,
    scale_sessions=40,
    scale_turns=30,
    scale_settle=8,
    replay_args=("--sessions", "40", "--turns", "30", "--segment", "16"),
    fold_sessions=40,
    fold_turns=30,
    fold_repeat=3,
    lifecycle_args=(),
)
SMOKE = Plan(
    live_sessions=60,
    live_rates=(),
    # Low, so that a short smoke run keeps up; the same path as the full run's fractions.
    live_fractions=(0.02, 0.05),
    live_seconds=3,
    live_turns=4,
    live_variants=((),),
    live_warmup=1,
    live_repeat=1,
    live_own_core=True,
    live_floor=True,
    live_quix=False,  # its venv is `make bench`'s, and its start-up alone is ~10 s
    live_traffic="bench",
    live_idle=2,
    drain_sessions=12,
    drain_turns=6,
    drain_segments=(1,),
    drain_systems=("ck", "faust", "ours"),
    drain_repeat=1,
    scale_sessions=6,
    scale_turns=4,
    scale_settle=3,
    replay_args=(),
    fold_sessions=4,
    fold_turns=4,
    fold_repeat=1,
    lifecycle_args=("--smoke", "--sessions", "8000", "--no-restore"),  # restores: its own test
)


# --- calibrate ----------------------------------------------------------------------------------


def calibrate(infra: Infra, work: Path, plan: Plan) -> dict[str, Any]:
    """A fixed CPU-bound loop (best of 5, in a fresh interpreter) and, when its venv is
    there (``benchmarks.peers``), Quix Streams draining the drain section's backlog of
    single events."""
    loop = "import time\nbest = 1e9\nfor _ in range(5):\n    t = time.perf_counter()\n"
    loop += "    total = 0\n    for i in range(2_000_000):\n        total += i * i % 7\n"
    loop += "    best = min(best, time.perf_counter() - t)\nprint(best)"
    done = subprocess.run([sys.executable, "-c", loop], capture_output=True, text=True, check=True)
    found: dict[str, Any] = {"cpu_loop_ms": float(done.stdout) * 1000}
    log(f"calibrate: CPU loop {found['cpu_loop_ms']:.0f} ms")
    if "quix" in plan.drain_systems:
        topic, messages, _ = backlog(infra, work, plan, 1)
        result = drain_peer(infra, work, "quix", topic, messages)
        found["quix_events_per_s"] = events_per_s(result)
        log(f"calibrate: Quix Streams {found['quix_events_per_s']:,.0f} events/s")
    return found


# --- one worker against two ---------------------------------------------------------------------


def scale(infra: Infra, work: Path, plan: Plan) -> list[dict[str, Any]]:
    corpus = corpus_sessions(work / "scale-corpus", plan.scale_sessions, plan.scale_turns)
    rows = []
    for workers in (1, 2):
        scenario = Scenario(infra, work)
        infra.create_topic(scenario.input_topic, scenario.partitions)
        started = [WorkerProcess(scenario, f"s{i}") for i in range(workers)]
        for w in started:
            w.launch()
        for w in started:
            w.wait_ready()
        time.sleep(plan.scale_settle if workers > 1 else 1)  # the group settles
        try:
            cpu0 = sum(w.cpu_seconds() for w in started)
            began = time.monotonic()
            _, events = produce_backlog(infra, scenario.input_topic, corpus, 1)
            scenario.wait_accounted(events, timeout=900)
            seconds = time.monotonic() - began
            cpu = sum(w.cpu_seconds() for w in started) - cpu0
            rows.append(
                {
                    "workers": workers,
                    "events": events,
                    "events_per_s": events / seconds,
                    "cpu": cpu / seconds,
                }
            )
            log(f"scale: {workers} worker(s): {events / seconds:,.0f} events/s")
        finally:
            for w in started:
                w.stop()
    return rows


# --- replay -------------------------------------------------------------------------------------


def replay(infra: Infra, plan: Plan) -> dict[str, Any]:
    if not plan.replay_args:  # the smoke run: stream replay has its own integration test
        return {"skipped": "not in the smoke run (tests/integration/test_replay.py)", "args": []}
    args = list(plan.replay_args)
    env = dict(os.environ, KAFKA_BOOTSTRAP_SERVERS=infra.bootstrap, REDIS_URL=infra.redis_url)
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.replay", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    found = re.search(r"back to lag 0 in ([\d.]+) s.*?-> ([\d,]+) records/s", done.stdout)
    if done.returncode != 0 or not found:
        return {"error": (done.stdout + done.stderr)[-600:], "args": args}
    return {
        "records_per_s": float(found.group(2).replace(",", "")),
        "seconds": float(found.group(1)),
        "args": args,
    }


# --- fold ---------------------------------------------------------------------------------------


def fold(plan: Plan) -> dict[str, Any]:
    """``benchmarks.fold``'s throughput section, in a fresh interpreter: in this process the
    earlier sections' Kafka clients, threads and heap share the GIL with the fold (a full
    run measured 0.82x the reference in process against 1.10x alone, same corpus)."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.fold",
            "--json",
            "--throughput-only",
            f"--sessions={plan.fold_sessions}",
            f"--turns={plan.fold_turns}",
            f"--repeat={plan.fold_repeat}",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    report = json.loads(done.stdout)
    result: dict[str, Any] = report["throughput"]
    result.pop("wall", None)
    result["core"] = report["machine"]["core"]
    if "reference_missing" in report:
        result["reference_missing"] = report["reference_missing"]
    if report.get("worst"):
        result["worst"] = report["worst"]
    return result


# --- lifecycle ----------------------------------------------------------------------------------


def lifecycle(infra: Infra, work: Path, plan: Plan) -> dict[str, Any]:
    """``benchmarks.lifecycle`` against this run's broker and Redis; its verdicts."""
    out = work / "lifecycle.json"
    args = [*plan.lifecycle_args, "--json", str(out)]
    env = dict(os.environ, KAFKA_BOOTSTRAP_SERVERS=infra.bootstrap, REDIS_URL=infra.redis_url)
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.lifecycle", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=7200,
    )
    if done.returncode != 0 or not out.exists():
        return {"error": (done.stdout + done.stderr)[-600:], "args": list(plan.lifecycle_args)}
    found: dict[str, Any] = json.loads(out.read_text())
    found["args"] = list(plan.lifecycle_args)
    found["tables"] = done.stdout
    return found


# --- the table ----------------------------------------------------------------------------------


def render(result: dict[str, Any]) -> str:
    rows: list[tuple[str, str, str]] = []

    def add(section: str, what: str, value: str) -> None:
        rows.append((section, what, value))

    cal = result.get("calibrate")
    if cal:
        add("calibrate", "CPU loop (best of 5)", f"{cal['cpu_loop_ms']:.0f} ms")
        if "quix_events_per_s" in cal:
            add(
                "calibrate",
                "Quix Streams, single events",
                f"{n(cal['quix_events_per_s'])} events/s",
            )
    drains = summarize(result.get("drain", []))
    repeat = result["plan"].get("drain_repeat", 1)
    # The targets compare our drain at each segment size with Quix Streams draining the
    # same events one per message (the issue's method: "44,100 when the same events come
    # 64 per message (0.52x)"), by the medians of their runs; Quix at the same segment
    # size is shown beside it.
    quix_single = drains.get((1, "quix"), {}).get("events_per_s")
    for segment in sorted({segment for segment, _ in drains}):
        quix = drains.get((segment, "quix"), {}).get("events_per_s")
        for system in ("ck", "quix", "faust", "ours"):
            if (segment, system) not in drains:
                continue
            r = drains[(segment, system)]
            ratio = ""
            if system == "ours" and quix_single:
                ratio = f"; {r['events_per_s'] / quix_single:.2f}x Quix single events"
                if quix and segment != 1:
                    ratio += f", {r['events_per_s'] / quix:.2f}x Quix at segment {segment}"
                if r["runs"] > 1:
                    ratio += " (by medians)"
            spread = ""
            if r["runs"] > 1:
                spread = f", median of {r['runs']}: {n(r['min'])}-{n(r['max'])}"
            add(
                "drain",
                f"segment {segment}: {_system_name(system)}",
                f"{n(r['events_per_s'])} events/s ({n(r['messages_per_s'])} msg/s{spread})" + ratio,
            )
    if repeat > 1 and drains:
        add("drain", "runs", f"{repeat} of each system, alternating (ck, quix, faust, ours)")
    rows.extend(render_live(result))
    for row in result.get("scale", []):
        add(
            "scale",
            f"{row['workers']} worker(s), single events",
            f"{n(row['events_per_s'])} events/s; workers {row['cpu']:.2f} cores",
        )
    rep = result.get("replay")
    if rep:
        args = " ".join(rep["args"])
        if "skipped" in rep:
            add("replay", "-", rep["skipped"])
        elif "error" in rep:
            add("replay", args, "failed: " + rep["error"].strip().splitlines()[-1][:80])
        else:
            add("replay", args, f"{n(rep['records_per_s'])} records/s to lag 0")
    fl = result.get("fold")
    if fl:
        for kind in ("packed", "unpacked"):
            entry = fl[kind]
            ref = entry.get("reference")
            add(
                "fold",
                f"{kind} logs",
                f"ours {n(entry['ours']['events_per_s'])} events/s"
                + (
                    f", reference {n(ref['events_per_s'])}: {entry['speedup']:.2f}x"
                    if ref
                    else ", reference not run"
                ),
            )
        worst = fl.get("worst")
        if worst:
            add(
                "fold",
                "worst shape, whole process",
                f"{worst['name']}: ours {n(worst['ours_events_per_s'])} events/s,"
                f" reference {n(worst['reference_events_per_s'])}: {worst['speedup']:.2f}x",
            )
    lc = result.get("lifecycle")
    if lc and "error" in lc:
        add(
            "lifecycle",
            " ".join(lc["args"]),
            "failed: " + lc["error"].strip().splitlines()[-1][:80],
        )
    elif lc:
        judged: dict[str, list[str]] = {}
        for v in lc["verdicts"]:
            judged.setdefault(f"{v['figure']}, month {v['last_month']}/month 2", []).append(
                f"{v['run']} {v['ratio']:.2f}x" + (" (flat)" if v["flat"] else "")
            )
        for case, figures in judged.items():
            add("lifecycle", case, "; ".join(figures))
    width = [max(len(r[i]) for r in rows) if rows else 0 for i in range(2)]
    lines = [
        f"context-stream benchmarks ({'smoke' if result['smoke'] else 'full'}):"
        f" {result['machine']}; {result['started']}",
        "",
        f"{'section'.ljust(width[0])}  {'case'.ljust(width[1])}  figures",
        "-" * (width[0] + width[1] + 60),
    ]
    lines += [f"{a.ljust(width[0])}  {b.ljust(width[1])}  {c}" for a, b, c in rows]
    return "\n".join(lines)


def _system_name(system: str) -> str:
    return {
        "ck": "raw confluent-kafka",
        "quix": "Quix Streams",
        "faust": "bare Faust",
        "ours": "our worker",
    }[system]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="the CI version (under a minute)")
    parser.add_argument("--only", default=",".join(SECTIONS), help="comma-separated sections")
    parser.add_argument("--json", help="also write every figure to this file")
    parser.add_argument("--rates", help="live rates, comma-separated (overrides the plan)")
    parser.add_argument(
        "--live-repeat",
        type=int,
        default=0,
        help="live: run the sweep this many times, each on a fresh worker (the p99 of a"
        " step is bimodal: read several runs before claiming a change)",
    )
    parser.add_argument(
        "--default-only",
        action="store_true",
        help="live: only the default settings (kept for old command lines: the default)",
    )
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="K=V[,K=V]",
        help="live: also sweep a worker with these settings (repeatable; an A/B in one run,"
        " the default settings first)",
    )
    parser.add_argument(
        "--shared-cores",
        action="store_true",
        help="live: the worker shares every core with the load, broker and Redis",
    )
    parser.add_argument(
        "--traffic",
        choices=("bench", "heldout"),
        default="bench",
        help="live: the bench's corpus, warmed up (the default), or traffic like the"
        " held-out harness's (benchmarks.heldout: unseen sessions every step, the mixed"
        " modern shape, linger 1 ms, no warm-up, a subscriber that parses each update)",
    )
    parser.add_argument(
        "--idle",
        type=float,
        default=None,
        help="live: seconds with no traffic after the last step, each runner's CPU"
        " meanwhile (0: none; the plan's by default)",
    )
    parser.add_argument(
        "--drain-repeat",
        type=int,
        default=0,
        help="drain: run every system this many times, alternating; medians and spread",
    )
    args = parser.parse_args()
    only = [s for s in args.only.split(",") if s]
    unknown = set(only) - set(SECTIONS)
    if unknown:
        parser.error(f"unknown sections: {', '.join(sorted(unknown))}")
    plan = SMOKE if args.smoke else FULL
    if args.rates:
        rates = tuple(map(int, args.rates.split(",")))
        plan = Plan(**{**plan.__dict__, "live_rates": rates, "live_fractions": ()})
    if args.default_only:
        plan = Plan(**{**plan.__dict__, "live_variants": ((),)})
    if args.variant:
        extra = tuple(
            tuple(tuple(kv.split("=", 1)) for kv in v.split(",") if kv) for v in args.variant
        )
        plan = Plan(**{**plan.__dict__, "live_variants": ((), *extra)})
    if args.shared_cores:
        plan = Plan(**{**plan.__dict__, "live_own_core": False, "live_floor": True})
    if args.live_repeat > 0:
        plan = Plan(**{**plan.__dict__, "live_repeat": args.live_repeat})
    plan = Plan(**{**plan.__dict__, "live_traffic": args.traffic})
    if args.idle is not None:
        plan = Plan(**{**plan.__dict__, "live_idle": args.idle})
    if args.drain_repeat > 0:
        plan = Plan(**{**plan.__dict__, "drain_repeat": args.drain_repeat})
    quix_drain = "quix" in plan.drain_systems
    if {"drain", "calibrate"} & set(only) and quix_drain and peers_python() is None:
        log(f"Quix Streams' venv missing ({PEERS_INSTALL}): drain runs without it")
        plan = Plan(
            **{
                **plan.__dict__,
                "drain_systems": tuple(s for s in plan.drain_systems if s != "quix"),
            }
        )
    result: dict[str, Any] = {
        "smoke": args.smoke,
        "plan": plan.__dict__,
        "machine": f"{platform.python_implementation()} {platform.python_version()},"
        f" {os.cpu_count()} CPUs, {native.status()}",
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    began = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="context-stream-bench-"))
    try:
        with infrastructure(work) as infra:
            sections: dict[str, Any] = {
                "calibrate": lambda: calibrate(infra, work, plan),
                "drain": lambda: drain(infra, work, plan),
                "live": lambda: live(infra, work, plan),
                "scale": lambda: scale(infra, work, plan),
                "replay": lambda: replay(infra, plan),
                "fold": lambda: fold(plan),
                "lifecycle": lambda: lifecycle(infra, work, plan),
            }
            timings = result["section_seconds"] = {}
            for name in SECTIONS:
                if name in only:
                    started = time.monotonic()
                    result[name] = sections[name]()
                    timings[name] = round(time.monotonic() - started, 1)
                    log(f"{name}: {timings[name]} s")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result["seconds"] = time.monotonic() - began
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    print(render(result))
    tables = result.get("lifecycle", {}).get("tables")
    if tables:
        print(f"\nlifecycle, month by month:\n{tables.rstrip()}")
    command = " ".join(["python -m benchmarks.run", *sys.argv[1:]])
    print(f"\n{result['seconds']:.0f} s; command: {command}")


if __name__ == "__main__":
    main()
