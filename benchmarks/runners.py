"""The live sweep's other runners and its quiet spell: a peer's step (the plain relay, the
Quix Streams app) on its own topic and sessions, and, after the last step, each runner's
CPU while idle and how soon the worker answers the first events after it
(``benchmarks.sweep`` runs them)."""

import time
from dataclasses import dataclass
from typing import Any

from benchmarks.infra import Scenario, WorkerProcess, idle_seconds
from benchmarks.live import Load, QuixApp, Relay, Subscriber, latencies, summary
from benchmarks.plan import log, n


@dataclass
class Peer:
    """A runner beside the worker, timed at every step on its own topic and sessions: the
    plain relay (``floor``) or the Quix Streams app (``quix``)."""

    name: str  # the rows' key prefix
    label: str
    child: Relay | QuixApp
    load: Load
    tag: str  # its sessions' key prefix


def arrived(subscriber: Subscriber, seen: int, tag: str) -> int:
    """Updates after the first ``seen`` on sessions of ``tag`` (a runner's own)."""
    head = f"{tag}-".encode()
    return sum(1 for key, _, _ in subscriber.arrivals()[seen:] if key.startswith(head))


def wait_arrivals(subscriber: Subscriber, seen: int, tag: str, wanted: int, timeout: float) -> bool:
    """Until ``wanted`` updates on ``tag``'s sessions have arrived after the first
    ``seen``; False on timeout."""
    deadline = time.monotonic() + timeout
    while arrived(subscriber, seen, tag) < wanted:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def idle_stretch(worker: WorkerProcess, peers: list[Peer], seconds: float) -> dict[str, float]:
    """Each runner's CPU (cores) over ``seconds`` with no traffic, after the last step."""
    time.sleep(1.0)  # the last step's tail: acks, commits, the subscriber's flush
    t0 = time.monotonic()
    cpu0 = {"idle_cpu": worker.cpu_seconds()}
    cpu0.update({f"idle_{p.name}_cpu": p.child.cpu_seconds() for p in peers})
    time.sleep(seconds)
    wall = time.monotonic() - t0
    found = {"idle_seconds": wall, "idle_cpu": (worker.cpu_seconds() - cpu0["idle_cpu"]) / wall}
    for p in peers:
        found[f"idle_{p.name}_cpu"] = (p.child.cpu_seconds() - cpu0[f"idle_{p.name}_cpu"]) / wall
    log(
        f"live: idle {wall:.0f} s: worker {found['idle_cpu']:.3f} cores"
        + "".join(f", {p.label} {found[f'idle_{p.name}_cpu']:.3f}" for p in peers)
    )
    return found


WAKE_EVENTS = 10


def wake(load: Load, subscriber: Subscriber, scenario: Scenario) -> dict[str, float]:
    """After the idle stretch, single events half a second apart to the worker: how soon
    a resting worker answers the first events after a quiet spell (max and median)."""
    seen = len(subscriber.arrivals())
    sent = load.total
    for _ in range(WAKE_EVENTS):
        load.run(1_000, 1 / 1_000)  # one event, acknowledged (``run`` flushes)
        time.sleep(0.5)
    try:
        scenario.wait_accounted(sent + WAKE_EVENTS, timeout=30)
    except TimeoutError as error:
        log(f"live: the wake-up events not all accounted: {error}")
    time.sleep(1.0)  # the subscriber's last flush
    lat = summary(latencies(subscriber.arrivals()[seen:], load.produced_at))
    log(
        f"live: {lat['n']} single events after the idle stretch: p50 {lat['p50'] * 1000:.1f} ms,"
        f" max {lat['max'] * 1000:.1f} ms"
    )
    return {"wake_n": lat["n"], "wake_p50": lat["p50"], "wake_max": lat["max"]}


def peer_step(
    peer: Peer, subscriber: Subscriber, seen: int, rate: int, seconds: float
) -> tuple[dict[str, Any], int]:
    """``rate`` for ``seconds`` through a peer: its update latency, its CPU over the step
    (cores, as the worker's), the produce-ack of the same events, how many of them it had
    not answered when the load stopped; and the arrivals seen so far. Waits until it has
    answered every event (120 s at most), so that it does not run into the next step."""
    load = peer.load
    acked = len(load.acks)
    cpu0, t0 = peer.child.cpu_seconds(), time.monotonic()
    stamping0, idle0 = subscriber.cpu_seconds(), idle_seconds()
    sent, _ = load.run(rate, seconds)
    cpu = peer.child.cpu_seconds() - cpu0
    wall = time.monotonic() - t0
    # The subscriber stamps every runner's updates: one that falls behind delays them all.
    stamping = (subscriber.cpu_seconds() - stamping0) / wall
    idle = (idle_seconds() - idle0) / wall
    backlog = max(0, sent - arrived(subscriber, seen, peer.tag))
    began = time.monotonic()
    caught_up = wait_arrivals(subscriber, seen, peer.tag, sent, 120)
    cleared = time.monotonic() - began
    time.sleep(1.0)  # the subscriber's last flush
    arrivals = subscriber.arrivals()
    lat = summary(latencies(arrivals[seen:], load.produced_at))
    ack = summary(load.acks[acked:])
    name = peer.name
    found = {
        **{f"{name}_lat_{k}": v for k, v in lat.items()},
        **{f"{name}_ack_{k}": v for k, v in ack.items()},
        f"{name}_cpu": cpu / wall,
        f"{name}_subscriber_cpu": stamping,
        f"{name}_machine_idle": idle,
        f"{name}_backlog": backlog,
        f"{name}_clear_seconds": cleared if caught_up else None,
    }
    log(
        f"  {peer.label}: p50 {lat['p50'] * 1000:.1f} ms, p99 {lat['p99'] * 1000:.1f} ms"
        f" (its produce-ack p50 {ack['p50'] * 1000:.1f} ms, p99 {ack['p99'] * 1000:.1f} ms),"
        f" {cpu / wall:.2f} cores (the subscriber {stamping:.2f}, machine idle {idle:.2f}),"
        f" backlog {backlog:,}"
        + (f" cleared in {cleared:.1f} s" if caught_up else " NOT CLEARED in 120 s")
    )
    return found, len(arrivals)


PEER_LABELS = {"floor": "plain relay", "quix": "Quix app"}


def runners(row: dict[str, Any]) -> str:
    """p50 / p99 and CPU (cores over the step) of every runner at a step: the worker, the
    plain relay and the Quix app, each on its own topic at the same rate, one after the
    other; a peer still answering its step's events 0.25 s of load after it ends is behind."""
    parts = [f"our worker {ms(row['lat_p50'])} / {ms(row['lat_p99'])} ms, {row['cpu']:.2f} cores"]
    for name, label in PEER_LABELS.items():
        if row.get(f"{name}_lat_n"):
            behind = row.get(f"{name}_backlog", 0) > row["rate"] * 0.25
            parts.append(
                f"{label} {ms(row[f'{name}_lat_p50'])} / {ms(row[f'{name}_lat_p99'])} ms,"
                f" {row[f'{name}_cpu']:.2f} cores" + (" (behind)" if behind else "")
            )
    return "p50 / p99: " + "; ".join(parts)


def ms(seconds: float) -> str:
    """Milliseconds, to a tenth below 10."""
    ms = seconds * 1000
    return n(ms, 1) if ms < 10 else n(ms)
