"""The live latency sweep of ``benchmarks.run``: the rate steps through our worker and its
peers (``benchmarks.runners``), then an idle stretch, and the verdicts against the targets
(load, subscriber, relay: ``benchmarks.live``; held-out traffic: ``benchmarks.heldout``)."""

import math
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.drain import our_drain
from benchmarks.heldout import figures, heldout_logs
from benchmarks.infra import (
    Infra,
    Placement,
    Scenario,
    WorkerProcess,
    corpus_sessions,
    cpu_seconds,
    idle_seconds,
    own_core,
    pin,
    placed,
)
from benchmarks.live import Load, QuixApp, Relay, Subscriber, latencies, summary
from benchmarks.peers import PEERS_INSTALL, peers_python
from benchmarks.plan import Plan, log, n
from benchmarks.runners import (
    PEER_LABELS,
    Peer,
    idle_stretch,
    ms,
    peer_step,
    runners,
    wait_arrivals,
    wake,
)

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


def live(
    infra: Infra,
    work: Path,
    plan: Plan,
) -> list[dict[str, Any]]:
    """The sweep at ``plan.live_fractions`` of our single-event drain (``live_sweep``), or
    at ``plan.live_rates``. With ``plan.live_own_core`` (and two cores or more) the worker
    runs on a core of its own and the rest elsewhere, its drains too (``drain.our_drain``)."""
    placement = own_core() if plan.live_own_core else None
    if placement is not None:
        log(f"live: {placement.describe()}")
    with placed(infra, placement):
        drain: Callable[[], float] | None = None
        if plan.live_fractions:
            cores = placement.worker if placement is not None else None

            def drain() -> float:
                rate = our_drain(infra, work, plan, cores)
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
    within ``ACK_TARGETS[0]``x and p99 within ``ACK_TARGETS[1]``x the ack's). The target
    is judged only where everything shares the cores, as a demo user runs it: a worker on
    a core of its own is measured against the ack, not judged."""
    p50, p99 = row["lat_p50"] / row["ack_p50"], row["lat_p99"] / row["ack_p99"]
    if row.get("placement", "shared") == "shared":
        ok = p50 <= ACK_TARGETS[0] and p99 <= ACK_TARGETS[1]
        judged = f"target <= {ACK_TARGETS[0]:g}x / {ACK_TARGETS[1]:g}x: {'met' if ok else 'MISSED'}"
    else:
        judged = "the target is judged on shared cores: --shared-cores"
    return (
        f"produce-ack p50 {row['ack_p50'] * 1000:.1f} ms, p99 {row['ack_p99'] * 1000:.1f} ms;"
        f" ours {p50:.1f}x / {p99:.1f}x the ack ({judged})"
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


def _corpus(
    plan: Plan, work: Path, steps: list[tuple[int, float | None]], warm_up: int, runners: int
) -> list[list[Any]]:
    """The logs the sessions replay (shared round-robin): enough events that no session
    runs out. Held-out traffic starts fresh sessions at every step; the bench's own
    sessions go on from step to step (after a warm-up)."""
    if plan.live_traffic == "heldout":
        most = max(r for r, _ in steps)
        per_session = most * plan.live_seconds / plan.live_sessions * 1.2 + 4
        return heldout_logs(work, min(plan.live_sessions, 40), math.ceil(per_session))
    needed = warm_up * plan.live_warmup + sum(r for r, _ in steps) * plan.live_seconds
    if runners > 1:  # the peers' own sessions replay the same logs
        needed = max(needed, (warm_up + sum(r for r, _ in steps)) * (plan.live_seconds + 2))
    per_session = needed / plan.live_sessions * 1.2
    turns = plan.live_turns
    while True:  # grown until the shortest log holds what a session needs
        corpus = corpus_sessions(work / f"live-corpus-{turns}", min(plan.live_sessions, 40), turns)
        shortest = min(len(events) for events in corpus.values())
        if shortest >= per_session:
            return list(corpus.values())
        turns = math.ceil(turns * per_session / max(shortest, 1) * 1.1)


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
    ``plan.live_rates``. With ``plan.live_floor`` each step runs first through the plain
    relay, then the Quix Streams app (``plan.live_quix``), then the worker: the same rate
    and kind of traffic, each runner on a topic and sessions of its own, one at a time (on
    two cores, runners consuming side by side would be timed against each other; one
    topic read by three groups would be the same), each given until it has caught up
    before the next starts."""
    heldout = plan.live_traffic == "heldout"
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
    quix_python: str | None = None
    if plan.live_floor and plan.live_quix:
        quix_python = peers_python()
        if quix_python is None:
            log(f"live: the Quix Streams peer skipped: no peers venv ({PEERS_INSTALL})")
    runners = 1 + plan.live_floor + (quix_python is not None)
    bases = _corpus(plan, work, steps, warm_up, runners)
    if heldout:
        shape = figures(bases)
        log(
            f"live: held-out traffic, mean event {shape['mean_bytes']:.0f} bytes, p99"
            f" {shape['p99_bytes']:,}, {shape['chunk_share']:.0%} chunks; unseen sessions"
            " every step, linger 1 ms, no warm-up"
        )
    linger = 1.0 if heldout else 5.0

    def sessions(tag: str) -> list[tuple[bytes, list[Any]]]:
        return [(f"{tag}-{i}".encode(), bases[i % len(bases)]) for i in range(plan.live_sessions)]

    scenario = Scenario(infra, work, extra=variant)
    infra.create_topic(scenario.input_topic, scenario.partitions)
    own = placement.worker if placement is not None else None
    worker = WorkerProcess(scenario, "live", probe=True, cores=own)
    worker.start()
    subscriber = Subscriber(
        infra.redis_url,
        f"{scenario.prefix}session:*",
        work / f"{scenario.name}.arrivals",
        parsed=heldout,
    )
    subscriber.start()
    load = Load(infra.bootstrap, scenario.input_topic, sessions("live"), linger)
    peers: list[Peer] = []
    if plan.live_floor:
        floor_topic = f"{scenario.input_topic}-floor"
        infra.create_topic(floor_topic, scenario.partitions)
        relay = Relay(infra.bootstrap, floor_topic, infra.redis_url, scenario.prefix)
        floor_load = Load(infra.bootstrap, floor_topic, sessions("floor"), linger)
        peers.append(Peer("floor", "plain relay", relay, floor_load, "floor"))
    if quix_python is not None:
        quix_topic = f"{scenario.input_topic}-quix"
        infra.create_topic(quix_topic, scenario.partitions)
        app = QuixApp(
            quix_python,
            infra.bootstrap,
            quix_topic,
            infra.redis_url,
            scenario.prefix,
            work / f"{scenario.name}-quix-state",
        )
        quix_load = Load(infra.bootstrap, quix_topic, sessions("quix"), linger)
        peers.append(Peer("quix", "Quix app", app, quix_load, "quix"))
    others = {**infra.server_pids(), "load": os.getpid()}
    if subscriber.process is not None:
        others["subscriber"] = subscriber.process.pid
    rows: list[dict[str, Any]] = []
    seen = 0
    try:
        for peer in peers:
            peer.child.start()
            if own is not None and peer.child.process is not None:
                pin(peer.child.process.pid, own)  # each runner has the worker's core in turn
        if heldout:
            # No warm-up: a few events on sessions of their own, so that every runner is
            # assigned and answering before it is timed (the Quix app joins its group).
            for name, runner_load in (("live", load), *((p.tag, p.load) for p in peers)):
                runner_load.renew([f"{name}-probe-{i}".encode() for i in range(plan.live_sessions)])
                runner_load.run(100, 0.3)
            scenario.wait_accounted(load.total, timeout=120)
        else:
            # Warm-up, not measured: the broker's JIT, the worker's first rows and connections.
            load.run(warm_up, plan.live_warmup)
            scenario.wait_accounted(load.total, timeout=120)
            for peer in peers:
                peer.load.run(warm_up, 2.0)
        for peer in peers:  # each has answered its first events (the Quix app joined)
            if not wait_arrivals(subscriber, 0, peer.tag, peer.load.total, 180):
                raise RuntimeError(f"the {peer.label} did not answer its warm-up in 180 s")
        time.sleep(1.0)
        seen = len(subscriber.arrivals())
        for index, (most, fraction) in enumerate(steps):
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
            if heldout:  # unseen sessions at every step, for every runner
                for name, runner_load in (("live", load), *((p.tag, p.load) for p in peers)):
                    keys = [f"{name}-s{index}-{i}".encode() for i in range(plan.live_sessions)]
                    runner_load.renew(keys)
            floor: dict[str, Any] = {}
            for peer in peers:  # the same rate through each peer, just before
                found, seen = peer_step(peer, subscriber, seen, rate, plan.live_seconds)
                floor.update(found)
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
                "traffic": plan.live_traffic,
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
            if row["faulted"] or row["dead_lettered"]:
                log(
                    f"  BENCH BUG: the worker faulted {row['faulted']:.0f} and dead-lettered"
                    f" {row['dead_lettered']:.0f} of the step's events (its log: {worker.log_path})"
                )
            log(
                f"  our worker: p50 {row['lat_p50'] * 1000:.0f} ms,"
                f" p99 {row['lat_p99'] * 1000:.0f} ms"
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
        if rows and plan.live_idle > 0:
            rows[-1].update(idle_stretch(worker, peers, plan.live_idle))
            rows[-1].update(wake(load, subscriber, scenario))
    finally:
        subscriber.stop()
        worker.stop()
        for peer in peers:
            peer.child.stop()
    return rows


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
        # The bench's traffic is valid input: a fault or a dead letter is a bench bug.
        **{
            outcome: metric(f'stream_events_total{{outcome="{outcome}"}}')
            for outcome in ("faulted", "dead_lettered")
        },
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
        "faulted": d["faulted"],
        "dead_lettered": d["dead_lettered"],
    }


def render_live(result: dict[str, Any]) -> list[tuple[str, str, str]]:
    """The live section's rows of ``benchmarks.run``'s table: (section, case, figures)."""
    rows: list[tuple[str, str, str]] = []

    def add(section: str, what: str, value: str) -> None:
        rows.append((section, what, value))

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
        add("  runners", f"at {row['rate']:,}/s", runners(row))
        if row.get("idle_seconds"):
            add(
                "  idle",
                f"after {row['rate']:,}/s",
                f"{row['idle_seconds']:.0f} s with no traffic: our worker"
                f" {row['idle_cpu']:.3f} cores"
                + "".join(
                    f", {label} {row[f'idle_{name}_cpu']:.3f}"
                    for name, label in PEER_LABELS.items()
                    if f"idle_{name}_cpu" in row
                )
                + (
                    f"; then {row['wake_n']:.0f} single events 0.5 s apart to the worker:"
                    f" p50 {ms(row['wake_p50'])} ms, max {ms(row['wake_max'])} ms"
                    if row.get("wake_n")
                    else ""
                ),
            )
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
            f" updates {row['updates'] / row['events']:.2f}"
            + (
                f"; faulted {row['faulted']:.0f}, dead-lettered {row['dead_lettered']:.0f}"
                if "faulted" in row
                else ""
            ),
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
    return rows
