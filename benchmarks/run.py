"""``make bench``: every figure of docs/performance.md from one run, in one table.

    python -m benchmarks.run [--smoke] [--only SECTION,...] [--json PATH]

Sections (all by default, in this order):

- ``calibrate``: what this machine is, so a reader can tell a slower machine from a
  regression: a fixed CPU-bound loop (best of 5) and Quix Streams draining a backlog of
  single events. Every other figure is printed next to these.
- ``drain``: a backlog, produced first, read to the end by raw confluent-kafka, Quix
  Streams, stock Faust and our worker, with single events and segments of 16 and 64.
  Our single-event drain is the worker's own capacity; the live sweep measures it again.
- ``live``: the live-latency sweep (``benchmarks.live``): paced rates over concurrent
  sessions, one event per message, at fractions of our single-event drain rate (the median
  of the sweep's drains, one more measured just before each step; ``--rates`` sets
  events/s instead); per rate the latency, the
  worker's CPU, the backlog left when the load stops and how long it took to clear, and
  per event the Kafka requests the worker sent, the Redis commands it ran and the output
  records it wrote. A step behind its load with the worker under 0.9 cores is flagged.
  On two cores or more the worker runs on a core of its own, the load generator, broker,
  Redis and subscriber on the others, and the drains the fractions are of are measured so
  too (``--shared-cores``: all of them share every core).
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
import math
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.infra import (
    REPO,
    Infra,
    Placement,
    Scenario,
    WorkerProcess,
    corpus_sessions,
    cpu_seconds,
    idle_seconds,
    infrastructure,
    own_core,
    placed,
    produce_backlog,
)
from benchmarks.live import Load, Relay, Subscriber, latencies, summary
from stream import native

SECTIONS = ("calibrate", "drain", "live", "scale", "replay", "fold", "lifecycle")
# The targets of the live sweep: p99 per fraction of our single-event drain rate.
LIVE_TARGETS = {1 / 3: 0.2, 1 / 2: 0.5}
# Live against the broker (issue 40): p50 and p99 as multiples of the produce-ack of the
# same events in the same step, with everything on the shared cores at 6,000 events/s.
ACK_TARGETS = (3.0, 1.5)
# stream_record_age_seconds' steps, in order: where an update's latency goes.
AGE_STEPS = ("fetched", "taken", "folded", "sent", "delivered", "cached", "acked")
BATCH_STEPS = ("fold", "kafka", "redis")  # the worker's stream_batch_loop_cpu_seconds steps
BUSY = 0.9  # cores: a worker behind its load that uses less is throttled, not busy
# How far above the sweep's first drain a step's drain may set its rate: the corpus is
# sized for it. A faster drain caps the step and says so (its fraction is then lower).
DRIFT = 1.5


@dataclass(frozen=True)
class Plan:
    live_sessions: int
    live_rates: tuple[int, ...]  # events/s, when no fractions are given
    live_fractions: tuple[float, ...]  # of our single-event drain rate
    live_seconds: float
    live_turns: int
    live_variants: tuple[tuple[tuple[str, str], ...], ...]  # worker settings per sweep
    live_warmup: float  # seconds at the first rate before measuring
    live_repeat: int  # sweeps per variant, each on a fresh worker (the p99 is bimodal)
    live_own_core: bool  # the worker on a core of its own, the load elsewhere (Placement)
    live_floor: bool  # each step also timed through a plain relay first (``benchmarks.live``)
    drain_sessions: int
    drain_turns: int
    drain_segments: tuple[int, ...]
    drain_systems: tuple[str, ...]
    scale_sessions: int
    scale_turns: int
    scale_settle: float  # seconds for two workers' group to settle before producing
    replay_args: tuple[str, ...]
    fold_sessions: int
    fold_turns: int
    fold_repeat: int
    lifecycle_args: tuple[str, ...]


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
    drain_sessions=40,
    drain_turns=30,
    drain_segments=(1, 16, 64),
    drain_systems=("ck", "quix", "faust", "ours"),
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
    drain_sessions=12,
    drain_turns=6,
    drain_segments=(1,),
    drain_systems=("ck", "faust", "ours"),
    scale_sessions=6,
    scale_turns=4,
    scale_settle=3,
    replay_args=(),
    fold_sessions=4,
    fold_turns=4,
    fold_repeat=1,
    lifecycle_args=("--smoke", "--sessions", "8000", "--no-restore"),  # restores: its own test
)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# --- live ---------------------------------------------------------------------------------------


def calibrate(infra: Infra, work: Path, plan: Plan) -> dict[str, Any]:
    """A fixed CPU-bound loop (best of 5, in a fresh interpreter) and, when installed,
    Quix Streams draining the drain section's backlog of single events."""
    loop = "import time\nbest = 1e9\nfor _ in range(5):\n    t = time.perf_counter()\n"
    loop += "    total = 0\n    for i in range(2_000_000):\n        total += i * i % 7\n"
    loop += "    best = min(best, time.perf_counter() - t)\nprint(best)"
    done = subprocess.run([sys.executable, "-c", loop], capture_output=True, text=True, check=True)
    found: dict[str, Any] = {"cpu_loop_ms": float(done.stdout) * 1000}
    log(f"calibrate: CPU loop {found['cpu_loop_ms']:.0f} ms")
    if "quix" in plan.drain_systems:
        topic, messages, _ = _backlog(infra, work, plan, 1)
        result = _drain_peer(infra, work, "quix", topic, messages)
        found["quix_events_per_s"] = _events_per_s(result)
        log(f"calibrate: Quix Streams {found['quix_events_per_s']:,.0f} events/s")
    return found


def live(infra: Infra, work: Path, plan: Plan) -> list[dict[str, Any]]:
    """The sweep at ``plan.live_fractions`` of our single-event drain (``live_sweep``), or
    at ``plan.live_rates``. With ``plan.live_own_core`` (and two cores or more) the worker
    runs on a core of its own and the rest elsewhere, its drains too."""
    placement = own_core() if plan.live_own_core else None
    if placement is not None:
        log(f"live: {placement.describe()}")
    with placed(infra, placement):
        drain: Callable[[], float] | None = None
        if plan.live_fractions:
            cores = placement.worker if placement is not None else None

            def drain() -> float:
                topic, _, events = _backlog(infra, work, plan, 1)
                result = _drain_ours(infra, work, topic, events, cores)
                rate = _events_per_s(result)
                log(f"live: our single-event drain {rate:,.0f} events/s")
                return rate

        rows = []
        for run in range(1, plan.live_repeat + 1):  # variants alternate: an A/B in time
            for variant in plan.live_variants:
                swept = live_sweep(infra, work, plan, dict(variant), drain, placement)
                rows += [{**row, "run": run} for row in swept]
    return rows


def ack_verdict(row: dict[str, Any]) -> str:
    """Our latency against the broker's produce-ack of the same events (issue target: p50
    within ``ACK_TARGETS[0]``x and p99 within ``ACK_TARGETS[1]``x the ack's)."""
    p50, p99 = row["lat_p50"] / row["ack_p50"], row["lat_p99"] / row["ack_p99"]
    ok = p50 <= ACK_TARGETS[0] and p99 <= ACK_TARGETS[1]
    return (
        f"produce-ack p50 {row['ack_p50'] * 1000:.1f} ms, p99 {row['ack_p99'] * 1000:.1f} ms;"
        f" ours {p50:.1f}x / {p99:.1f}x the ack (target <= {ACK_TARGETS[0]:g}x /"
        f" {ACK_TARGETS[1]:g}x: {'met' if ok else 'MISSED'})"
    )


def floor_verdict(row: dict[str, Any]) -> str:
    """Our latency against the plain relay's at the same rate, just before (the floor of
    one fetch and one Redis round trip on this machine), and the relay's against its own
    produce-ack: how far below the ack targets the machine itself stays."""
    ack50, ack99 = (
        row["floor_lat_p50"] / row["floor_ack_p50"],
        row["floor_lat_p99"] / row["floor_ack_p99"],
    )
    return (
        f"a plain relay p50 {row['floor_lat_p50'] * 1000:.1f} ms, p99"
        f" {row['floor_lat_p99'] * 1000:.1f} ms ({ack50:.1f}x / {ack99:.1f}x its own ack);"
        f" ours {row['lat_p50'] / row['floor_lat_p50']:.1f}x /"
        f" {row['lat_p99'] / row['floor_lat_p99']:.1f}x the relay"
    )


def _rate(events_per_s: float) -> int:
    """A step's rate: to the hundred, at least 100 events/s."""
    return max(100, round(events_per_s / 100) * 100)


def regime(row: dict[str, Any], sessions: int) -> str:
    """Which of the two regimes a live step settled in (docs/notes/016): batches smaller
    than the sessions (each session about once a batch, the cost per event), or larger
    (sessions coalesced, the cost per session touched). The same rate can settle in
    either, with p99 2-4x apart, so a step's p99 is read with its regime."""
    per_batch = row.get("events_per_batch", float("nan"))
    touched = per_batch * row["updates"] / row["events"] if row.get("events") else float("nan")
    name = "small batches" if per_batch <= sessions else "large batches"
    return (
        f"{name}: {per_batch:,.0f} events over {touched:,.0f} sessions a batch"
        f" ({per_batch / max(touched, 1e-9):.1f} events per session)"
    )


def live_sweep(
    infra: Infra,
    work: Path,
    plan: Plan,
    variant: dict[str, str],
    drain: Callable[[], float] | None,
    placement: Placement | None,
) -> list[dict[str, Any]]:
    """One worker through the steps: ``plan.live_fractions`` of the median of the sweep's
    drains, one more taken just before each step (this machine's speed drifts within
    minutes, and one drain swings with it: 70,259-103,274 events/s within one sweep), else
    ``plan.live_rates``."""
    steps: list[tuple[int, float | None]]
    drains: list[float] = []
    if drain is not None:
        first = drain()  # sets the warm-up and sizes the corpus; each step measures again
        drains.append(first)
        steps = [(_rate(first * DRIFT * f), f) for f in plan.live_fractions]
        warm_up = _rate(first * plan.live_fractions[0])
    else:
        steps = [(rate, None) for rate in plan.live_rates]
        warm_up = steps[0][0]
    # Enough turns that the sweep does not run out of events (the 40 generated logs are
    # shared round-robin): grown until the shortest log holds what a session needs.
    needed = warm_up * plan.live_warmup + sum(r for r, _ in steps) * plan.live_seconds
    if plan.live_floor:  # the floor's own sessions replay the same logs
        needed = max(needed, (warm_up + sum(r for r, _ in steps)) * (plan.live_seconds + 2))
    per_session = needed / plan.live_sessions * 1.2
    turns = plan.live_turns
    while True:
        corpus = corpus_sessions(work / f"live-corpus-{turns}", min(plan.live_sessions, 40), turns)
        shortest = min(len(events) for events in corpus.values())
        if shortest >= per_session:
            break
        turns = math.ceil(turns * per_session / max(shortest, 1) * 1.1)
    bases = list(corpus.values())
    sessions = [(f"live-{i}".encode(), bases[i % len(bases)]) for i in range(plan.live_sessions)]
    scenario = Scenario(infra, work, extra=variant)
    infra.create_topic(scenario.input_topic, scenario.partitions)
    own = placement.worker if placement is not None else None
    worker = WorkerProcess(scenario, "live", probe=True, cores=own)
    worker.start()
    subscriber = Subscriber(
        infra.redis_url, f"{scenario.prefix}session:*", work / f"{scenario.name}.arrivals"
    )
    subscriber.start()
    load = Load(infra.bootstrap, scenario.input_topic, sessions)
    relay: Relay | None = None
    if plan.live_floor:
        floor_topic = f"{scenario.input_topic}-floor"
        infra.create_topic(floor_topic, scenario.partitions)
        relay = Relay(infra.bootstrap, floor_topic, infra.redis_url, scenario.prefix)
        relay.start()
        floor_load = Load(
            infra.bootstrap,
            floor_topic,
            [(f"floor-{i}".encode(), bases[i % len(bases)]) for i in range(plan.live_sessions)],
        )
    others = {**infra.server_pids(), "load": os.getpid()}
    if subscriber.process is not None:
        others["subscriber"] = subscriber.process.pid
    rows: list[dict[str, Any]] = []
    seen = 0
    try:
        # Warm-up, not measured: the broker's JIT, the worker's first rows and connections.
        load.run(warm_up, plan.live_warmup)
        scenario.wait_accounted(load.total, timeout=120)
        if relay is not None:
            floor_load.run(warm_up, 2.0)
        time.sleep(1.0)
        seen = len(subscriber.arrivals())
        for most, fraction in steps:
            rate, drain_rate, capped = most, None, False
            if drain is not None and fraction is not None:
                drains.append(drain())
                drain_rate = statistics.median(drains)
                target = _rate(drain_rate * fraction)
                rate = min(most, target)
                capped = rate < target  # past what the corpus holds
                if capped:
                    log(f"live: capped at {rate:,} events/s ({DRIFT}x the first drain)")
                    fraction = rate / drain_rate  # no longer a target's fraction
            share = f" ({fraction:.2f} of our drain)" if fraction is not None else ""
            log(
                f"live: {rate:,} events/s{share} over {plan.live_sessions} sessions {variant or ''}"
            )
            floor: dict[str, float] = {}
            if relay is not None:  # the same rate through the plain relay, just before
                floor, seen = _floor_step(floor_load, subscriber, seen, rate, plan.live_seconds)
            before = _counters(infra, worker, scenario)
            cpu0, t0 = worker.cpu_seconds(), time.monotonic()
            other0 = {name: cpu_seconds(pid) for name, pid in others.items()}
            idle0, own_idle0 = idle_seconds(), idle_seconds(own)
            acked = len(load.acks)
            sent, took = load.run(rate, plan.live_seconds)
            ack = summary(load.acks[acked:])
            cpu = worker.cpu_seconds() - cpu0
            wall = time.monotonic() - t0
            idle = (idle_seconds() - idle0) / wall  # cores nobody used meanwhile
            own_idle = (idle_seconds(own) - own_idle0) / wall  # of those the worker may use
            other = {f"cpu_{k}": (cpu_seconds(pid) - other0[k]) / wall for k, pid in others.items()}
            backlog = max(0, load.total - scenario.accounted())  # events not yet in Redis
            cleared: float | None
            try:
                cleared = scenario.wait_accounted(load.total, timeout=120)
            except TimeoutError as error:
                log(f"  not drained: {error}")
                cleared = None
            # The worker while it clears the backlog alone: behind with no load to share
            # the machine with, so nothing but the worker itself keeps it off its core.
            clearing = None
            if cleared is not None and cleared >= 1.0:  # shorter: too few samples of /proc
                clearing = (worker.cpu_seconds() - cpu0 - cpu) / cleared
            time.sleep(1.0)  # the subscriber's last flush
            arrivals = subscriber.arrivals()
            step, seen = arrivals[seen:], len(arrivals)
            after = _counters(infra, worker, scenario)
            lat = summary(latencies(step, load.produced_at))
            # Behind: more than a quarter second of load still waiting when it stopped.
            behind = backlog > rate * 0.25
            row: dict[str, Any] = {
                "rate": rate,
                "fraction": fraction,
                "drain_rate": drain_rate,  # the median of ``drains``
                "drains": list(drains),
                "capped": capped,
                "variant": " ".join(f"{k}={v}" for k, v in variant.items()),
                "achieved": sent / took,
                "events": sent,
                "updates": len(step),
                "cpu": cpu / wall,
                "backlog": backlog,
                "clear_seconds": cleared,
                "clearing_cpu": clearing,
                # Events folded per second over the step and its clearing: rises with the
                # load while the worker keeps up, and stays there above its capacity.
                "throughput": sent / (took + (cleared or 0.0)),
                "behind": behind,
                "idle_cores": idle,
                "worker_idle_cores": own_idle if placement is not None else None,
                "placement": placement.describe() if placement is not None else "shared",
                # Throttled: behind, under 0.9 cores, while its cores had CPU to give. On
                # its own core, what it left idle; sharing them, the machine had to have a
                # third of a core idle (the broker, Redis and the load take their share).
                "throttled": behind
                and cpu / wall < BUSY
                and (own_idle >= 1 - BUSY if placement is not None else idle >= 0.3),
                **other,
                **{f"lat_{k}": v for k, v in lat.items()},
                # The broker's produce-ack of the same step's events: the floor read beside ours.
                **{f"ack_{k}": v for k, v in ack.items()},
                **floor,
                **_per_event(before, after, sent),
            }
            rows.append(row)
            log(
                f"  p50 {row['lat_p50'] * 1000:.0f} ms, p99 {row['lat_p99'] * 1000:.0f} ms"
                f" (the broker's produce-ack p50 {ack['p50'] * 1000:.1f} ms,"
                f" p99 {ack['p99'] * 1000:.1f} ms: {row['lat_p50'] / ack['p50']:.1f}× /"
                f" {row['lat_p99'] / ack['p99']:.1f}×),"
                f" worker {row['cpu']:.2f} cores, {regime(row, plan.live_sessions)},"
                f" backlog {backlog:,} cleared in {cleared if cleared is not None else -1:.1f} s"
                + (f" at {clearing:.2f} cores" if clearing is not None else "")
                + f", machine idle {idle:.2f} cores"
                + (f" (its core {own_idle:.2f})" if placement is not None else "")
                + ("  THROTTLED: behind under 0.9 cores with CPU idle" if row["throttled"] else "")
            )
            if not lat["n"] or cleared is None:
                break
    finally:
        subscriber.stop()
        worker.stop()
        if relay is not None:
            relay.stop()
    return rows


def _floor_step(
    load: Load, subscriber: Subscriber, seen: int, rate: int, seconds: float
) -> tuple[dict[str, float], int]:
    """``rate`` for ``seconds`` through the plain relay (``benchmarks.live``): its update
    latency and the produce-ack of the same events; and the arrivals seen so far."""
    acked = len(load.acks)
    load.run(rate, seconds)
    time.sleep(1.0)  # the subscriber's last flush
    arrivals = subscriber.arrivals()
    lat = summary(latencies(arrivals[seen:], load.produced_at))
    ack = summary(load.acks[acked:])
    found = {
        **{f"floor_lat_{k}": v for k, v in lat.items()},
        **{f"floor_ack_{k}": v for k, v in ack.items()},
    }
    log(
        f"  the plain relay: p50 {lat['p50'] * 1000:.1f} ms, p99 {lat['p99'] * 1000:.1f} ms"
        f" (its produce-ack p50 {ack['p50'] * 1000:.1f} ms, p99 {ack['p99'] * 1000:.1f} ms)"
    )
    return found, len(arrivals)


def _counters(infra: Infra, worker: WorkerProcess, scenario: Scenario) -> dict[str, float]:
    requests = worker.requests()
    page = worker.metrics()  # once: every figure of one moment

    def metric(name: str) -> float:
        return page.get(name, 0.0)

    redis_counts = infra.redis_counters()
    return {
        "produce_requests": requests.get("Produce", 0),
        "kafka_requests": sum(requests.values()),
        "redis_commands": redis_counts["commands"],
        "redis_evalsha": redis_counts["evalsha"],
        "redis_script_usec": redis_counts["script_usec"],
        "output_records": infra.end_offsets(scenario.output_topic),
        "changelog_records": infra.end_offsets(scenario.changelog_topic),
        "batches": metric("stream_batches_total"),
        "fold_seconds": metric("stream_fold_seconds_sum"),
        "publish_seconds": metric("stream_publish_seconds_sum"),
        "redis_seconds": metric("stream_redis_write_seconds_sum"),
        **{
            f"age_{step}_{part}": metric(f'stream_record_age_seconds_{part}{{step="{step}"}}')
            for step in AGE_STEPS
            for part in ("sum", "count")
        },
        **{
            f"{step}_cpu_seconds": metric(f'stream_batch_loop_cpu_seconds_total{{step="{step}"}}')
            for step in BATCH_STEPS
        },
    }


def _per_event(before: dict[str, float], after: dict[str, float], events: int) -> dict[str, float]:
    d = {k: after[k] - before[k] for k in after}
    n = max(events, 1)
    return {
        "produce_requests_per_event": d["produce_requests"] / n,
        "kafka_requests_per_event": d["kafka_requests"] / n,
        "redis_commands_per_event": d["redis_commands"] / n,
        "redis_scripts_per_event": d["redis_evalsha"] / n,
        "output_records_per_event": d["output_records"] / n,
        "changelog_records_per_event": d["changelog_records"] / n,
        "events_per_batch": n / d["batches"] if d["batches"] else float("nan"),
        # Where a batch's time goes: folding, and waiting for Kafka and Redis (the rest of
        # a worker's time is the hand-over, acks, metrics and waiting for events).
        "fold_ms_per_batch": 1e3 * d["fold_seconds"] / d["batches"] if d["batches"] else 0.0,
        "publish_ms_per_batch": (
            1e3 * d["publish_seconds"] / d["batches"] if d["batches"] else 0.0
        ),
        "redis_ms_per_batch": 1e3 * d["redis_seconds"] / d["batches"] if d["batches"] else 0.0,
        # The loop thread's CPU in the same steps: the rest of each was waiting (for the
        # broker, Redis, or the GIL the consumer thread holds).
        **{
            f"{step}_cpu_ms_per_batch": (
                1e3 * d[f"{step}_cpu_seconds"] / d["batches"] if d["batches"] else 0.0
            )
            for step in BATCH_STEPS
        },
        # The mean age of a batch's middle record at each step (a fetch's, per partition):
        # fetch wait, batch gathering, fold, sending, the broker's and Redis' answers.
        **{
            f"age_{step}_ms": (
                1e3 * d[f"age_{step}_sum"] / d[f"age_{step}_count"]
                if d[f"age_{step}_count"]
                else float("nan")
            )
            for step in AGE_STEPS
        },
        # Redis' own time running the batches' scripts: the part of the Redis step that
        # is Redis at work (or waiting for a core), not the worker.
        "redis_script_ms_per_batch": (
            d["redis_script_usec"] / 1e3 / d["batches"] if d["batches"] else 0.0
        ),
        "batches": d["batches"],
    }


# --- drain --------------------------------------------------------------------------------------


_BACKLOGS: dict[tuple[str, int], tuple[str, int, int]] = {}


def _backlog(infra: Infra, work: Path, plan: Plan, segment: int) -> tuple[str, int, int]:
    """The drain corpus produced to a topic of its own, ``segment`` events per message:
    (topic, messages, events); once per run and segment (every system reads the same)."""
    key = (str(work), segment)
    if key not in _BACKLOGS:
        corpus = corpus_sessions(work / "drain-corpus", plan.drain_sessions, plan.drain_turns)
        topic = f"drain-{segment}-{os.getpid()}-{time.monotonic_ns() % 100_000}"
        infra.create_topic(topic, 6)
        messages, events = produce_backlog(infra, topic, corpus, segment)
        log(f"drain: {events:,} events in {messages:,} messages (segment {segment})")
        _BACKLOGS[key] = (topic, messages, events)
    return _BACKLOGS[key]


def drain(infra: Infra, work: Path, plan: Plan) -> list[dict[str, Any]]:
    rows = []
    for segment in plan.drain_segments:
        topic, messages, events = _backlog(infra, work, plan, segment)
        for system in plan.drain_systems:
            if system == "ours":
                result = _drain_ours(infra, work, topic, events)
            else:
                result = _drain_peer(infra, work, system, topic, messages)
            rate = _events_per_s(result)
            rows.append(
                {
                    "segment": segment,
                    "system": system,
                    "messages": messages,
                    "events": events,
                    "events_per_s": rate,
                    "messages_per_s": rate / (events / messages),
                }
            )
            log(f"  {system}: {rate:,.0f} events/s")
    return rows


def _events_per_s(drained: dict[str, Any]) -> float:
    """A drain's rate: the events after the first poll that saw any, over its time."""
    return float(drained["events"] - drained["before"]) / max(float(drained["seconds"]), 1e-9)


def _drain_peer(infra: Infra, work: Path, system: str, topic: str, expect: int) -> dict[str, Any]:
    done = subprocess.run(
        [
            *(sys.executable, "-m", "benchmarks.peers", system, "--bootstrap", infra.bootstrap),
            *("--topic", topic, "--expect", str(expect), "--state-dir", str(work / topic)),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )
    lines = [line[line.index("{") :] for line in done.stdout.splitlines() if '{"messages"' in line]
    if not lines:
        raise RuntimeError(f"{system} peer failed:\n{done.stdout[-2000:]}{done.stderr[-3000:]}")
    found: dict[str, Any] = json.loads(lines[-1])
    found["seconds"] = found["last"] - found["first"]
    return found


def _drain_ours(
    infra: Infra, work: Path, topic: str, events: int, cores: frozenset[int] | None = None
) -> dict[str, Any]:
    scenario = Scenario(infra, work, input_topic=topic)
    worker = WorkerProcess(scenario, "drain", cores=cores)
    worker.start()
    ready = time.monotonic()
    try:
        first = 0.0
        before = 0
        while True:
            have = scenario.accounted()
            now = time.monotonic()
            if have and not first:
                first, before = now, have
                if have >= events:  # a backlog drained within one poll: time it from ready
                    first, before = ready, 0
            if have >= events:
                return {"events": have, "before": before, "seconds": now - first}
            time.sleep(0.005)
    finally:
        worker.stop()


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


def n(value: float, digits: int = 0) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{value:,.{digits}f}"


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
    drains = result.get("drain", [])
    # The targets compare our drain at each segment size with Quix Streams draining the
    # same events one per message (the issue's method: "44,100 when the same events come
    # 64 per message (0.52x)"); Quix at the same segment size is shown beside it.
    quix_single = next(
        (r["events_per_s"] for r in drains if r["system"] == "quix" and r["segment"] == 1), None
    )
    for segment in sorted({r["segment"] for r in drains}):
        group = {r["system"]: r for r in drains if r["segment"] == segment}
        quix = group.get("quix", {}).get("events_per_s")
        for system in ("ck", "quix", "faust", "ours"):
            if system not in group:
                continue
            r = group[system]
            ratio = ""
            if system == "ours" and quix_single:
                ratio = f"; {r['events_per_s'] / quix_single:.2f}x Quix single events"
                if quix and segment != 1:
                    ratio += f", {r['events_per_s'] / quix:.2f}x Quix at segment {segment}"
            add(
                "drain",
                f"segment {segment}: {_system_name(system)}",
                f"{n(r['events_per_s'])} events/s ({n(r['messages_per_s'])} msg/s){ratio}",
            )
    swept = result.get("live", [])
    if swept:
        add("live", "where it ran", swept[0].get("placement", "shared"))
    for row in swept:
        share = ""
        if row.get("fraction") and row.get("drain_rate"):
            share = (
                f" = {row['fraction']:.2f}x our drain ({n(row['drain_rate'])}/s, median of"
                f" {len(row.get('drains', ()))})"
            )
        target = next(
            (
                t
                for f, t in LIVE_TARGETS.items()
                if row.get("fraction") and abs(row["fraction"] - f) < 1e-6
            ),
            None,
        )
        verdict = ""
        if target is not None:
            ok = row["lat_p99"] < target
            verdict = f" (target p99 < {target * 1000:.0f} ms: {'met' if ok else 'MISSED'})"
        repeat = result["plan"].get("live_repeat", 1)
        add(
            "live",
            f"{row['rate']:,}/s{share} over {result['plan']['live_sessions']} sessions"
            + (f", run {row['run']}" if repeat > 1 and row.get("run") else "")
            + (f", {row['variant']}" if row["variant"] else ""),
            f"p50 {n(row['lat_p50'] * 1000)} ms, p99 {n(row['lat_p99'] * 1000)} ms,"
            f" max {n(row['lat_max'] * 1000)} ms{verdict}; worker {row['cpu']:.2f} cores;"
            f" {n(row['events_per_batch'], 1)} events/batch",
        )
        if row.get("ack_n"):
            add("  broker", f"at {row['rate']:,}/s", ack_verdict(row))
        if row.get("floor_lat_n"):
            add("  floor", f"at {row['rate']:,}/s", floor_verdict(row))
        if row.get("events"):
            add("  regime", f"at {row['rate']:,}/s", regime(row, result["plan"]["live_sessions"]))
        cleared = row.get("clear_seconds")
        add(
            "  keeping up",
            f"at {row['rate']:,}/s",
            f"throughput {n(row.get('throughput', 0))} events/s; backlog at the end"
            f" {n(row.get('backlog', 0))} events, cleared in"
            f" {'n/a' if cleared is None else f'{cleared:.1f} s'}"
            + (
                f" (worker {row['clearing_cpu']:.2f} cores meanwhile)"
                if row.get("clearing_cpu") is not None
                else ""
            )
            + f"; machine idle {row.get('idle_cores', float('nan')):.2f} cores"
            + (
                f" (the worker's core {row['worker_idle_cores']:.2f})"
                if row.get("worker_idle_cores") is not None
                else ""
            )
            + ("; THROTTLED: behind under 0.9 cores with CPU idle" if row.get("throttled") else ""),
        )
        add(
            "  machine",
            f"at {row['rate']:,}/s",
            "cores: "
            + ", ".join(
                f"{k.removeprefix('cpu_')} {v:.2f}" for k, v in row.items() if k.startswith("cpu_")
            ),
        )
        add(
            "  per event",
            f"at {row['rate']:,}/s",
            f"Kafka produce req {row['produce_requests_per_event']:.3f}, all req"
            f" {row['kafka_requests_per_event']:.3f}; Redis cmds"
            f" {row['redis_commands_per_event']:.1f} ({row['redis_scripts_per_event']:.2f}"
            f" scripts); output rec {row['output_records_per_event']:.2f}, changelog rec"
            f" {row['changelog_records_per_event']:.2f};"
            f" updates {row['updates'] / row['events']:.2f}",
        )
        if row.get("batches"):
            add(
                "  per batch",
                f"at {row['rate']:,}/s",
                f"fold {row['fold_ms_per_batch']:.1f} ms"
                f" ({row.get('fold_cpu_ms_per_batch', 0.0):.1f} of it the loop's CPU), Kafka"
                f" {row['publish_ms_per_batch'] - row.get('redis_ms_per_batch', 0.0):.1f}"
                f" ({row.get('kafka_cpu_ms_per_batch', 0.0):.1f}),"
                f" Redis {row.get('redis_ms_per_batch', 0.0):.1f}"
                f" ({row.get('redis_cpu_ms_per_batch', 0.0):.1f}; Redis running the scripts"
                f" {row.get('redis_script_ms_per_batch', 0.0):.1f}) ms;"
                f" {n(row['batches'])} batches",
            )
        if row.get("age_acked_ms") is not None:
            add(
                "  where",
                f"at {row['rate']:,}/s",
                "mean age of a batch's records at each step: "
                + ", ".join(f"{step} {n(row[f'age_{step}_ms'], 1)}" for step in AGE_STEPS)
                + " ms",
            )
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
    if {"drain", "calibrate"} & set(only) and "quix" in plan.drain_systems:
        try:
            import quixstreams  # noqa: F401
        except ImportError:
            log("Quix Streams not installed (pip install -e '.[bench]'): drain runs without it")
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
