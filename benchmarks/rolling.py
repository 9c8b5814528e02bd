"""Rolling restart and scaling under live load: what each rebalance costs.

Steady traffic (``--sessions`` sessions round-robin, one event per message, ``--rate``
messages/s) runs through the whole bench while the group is changed the way Kubernetes
changes a StatefulSet, one step at a time:

    steady, 1 worker -> scale 1 -> 3 -> steady, 3 workers -> roll w2, w1, w0 (SIGTERM,
    wait for the exit, start again on the same state directory, wait until /readyz is 200
    and the group has settled) -> steady, 3 workers -> crash w2, back in 1 s (SIGKILL,
    start again on its state directory 1 s later: a container restart) -> steady ->
    crash w1, no return (SIGKILL: a node lost) -> steady, 2 workers -> w1 back (started
    again after the session timeout) -> steady, 3 workers -> scale 3 -> 1 -> steady, 1 worker

with a standby replica (``STREAM_STANDBY_REPLICAS=1``) and the worker's membership
settings (static members named by their tags, a SIGTERM leaving the group; ``--dynamic``,
``--stay-on-stop`` and ``--session-timeout`` measure the alternatives of note 027). A
subscriber process stamps every update as it lands in Redis (``benchmarks.live``). Per
step the table gives the updates of events produced during it, their produce-to-Redis
p50/p99/max, and the longest gap per input partition: the longest time within the step in
which no update of that partition's sessions landed, the longest of those that moved (or
whose worker stopped; marked ``*``) and of the others apart. Then the checks: every event
accounted for exactly once (Redis' totals equal the events produced; nothing duplicate or
dead), every session's update in Redis equals ``stream fold`` of what was produced for
it, no session's seq ever went backwards in what Redis published or on the output topic,
and the group's committed offset is at the end of every partition. Exit status 1 when a check fails.

    python -m benchmarks.rolling [--sessions 120] [--rate 300] [--steady 20] [--json PATH]
        [--session-timeout S] [--dynamic] [--stay-on-stop]

Uses a private single-node broker and Redis (deploy/*.sh) unless KAFKA_BOOTSTRAP_SERVERS
and REDIS_URL name running ones (a 3-node ``deploy/kafka.sh cluster-start`` with
``STREAM_REPLICATION_FACTOR=3``, say). Figures: docs/notes/020-rolling-restarts-and-rebalances.md
and docs/notes/027-static-membership.md.
"""

from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import orjson
from aiokafka.partitioner import DefaultPartitioner  # type: ignore[import-untyped]
from confluent_kafka import Consumer, TopicPartition

from benchmarks.infra import REPO, Scenario, WorkerProcess, corpus_sessions, infrastructure
from benchmarks.live import Load, Subscriber, latencies, summary
from stream.contract.jsontext import dumps


def log(text: str) -> None:
    print(f"[rolling {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


# --- the group ------------------------------------------------------------------------------


def readyz(worker: WorkerProcess) -> dict[str, Any]:
    """The worker's ``/readyz`` body (``{}`` when nothing answers)."""
    url = f"http://127.0.0.1:{worker.metrics_port}/readyz"
    try:
        with urllib.request.urlopen(url, timeout=5) as page:
            body: dict[str, Any] = json.loads(page.read())
    except urllib.error.HTTPError as error:
        body = json.loads(error.read() or b"{}")
    except (OSError, ValueError):
        return {}
    return body


def settled(workers: list[WorkerProcess], partitions: int) -> bool:
    """Every live worker ready, and their assignments cover every partition exactly once."""
    live = [w for w in workers if w.alive()]
    if not all(w.ready() for w in live):
        return False
    owned = sorted(p for w in live for p in readyz(w).get("partitions", []))
    return owned == list(range(partitions))


def wait(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} after {timeout:.0f} s")
        time.sleep(0.1)


def owners(workers: list[WorkerProcess]) -> dict[int, str]:
    """Partition -> the tag of the live worker that owns it."""
    return {p: w.tag for w in workers if w.alive() for p in readyz(w).get("partitions", [])}


def crash(worker: WorkerProcess) -> None:
    """SIGKILL, as a crash or a lost node: nothing flushed, committed or left."""
    assert worker.process is not None
    worker.process.kill()
    worker.process.wait(30)


def leave(worker: WorkerProcess) -> None:
    """SIGTERM, as Kubernetes stops a pod: the worker must leave cleanly (exit 0)."""
    assert worker.process is not None
    worker.process.terminate()
    code = worker.process.wait(120)
    if code != 0:
        raise RuntimeError(f"{worker.tag} exited {code}:\n{worker.tail()}")


# --- the figures ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    name: str
    began: float  # wall clock (time.time), as the produce and arrival stamps
    ended: float
    moved: frozenset[int] = frozenset()  # partitions that changed owner or whose owner stopped


@dataclass(frozen=True)
class Row:
    step: str
    seconds: float
    updates: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    gaps: list[float]  # per partition: the longest time without an update, seconds
    moved: list[int]

    def gap(self, moved: bool) -> str:
        found = [g for p, g in enumerate(self.gaps) if (p in self.moved) == moved]
        return f"{max(found):5.1f}" if found else "    -"

    def line(self) -> str:
        gaps = " ".join(
            f"{g:4.1f}{'*' if p in self.moved else ' '}" for p, g in enumerate(self.gaps)
        )
        return (
            f"| {self.step:<26} | {self.seconds:5.1f} | {self.updates:7,} | {self.p50_ms:6.0f} |"
            f" {self.p99_ms:6.0f} | {self.max_ms:6.0f} | {self.gap(True)} | {self.gap(False)} |"
            f" {gaps}|"
        )


HEADER = (
    "| step                       |     s | updates | p50 ms | p99 ms | max ms | moved gap s |"
    " others gap s | longest gap per partition, s (* moved) |\n"
    "|---|---:|---:|---:|---:|---:|---:|---:|---|"
)


def row(
    step: Step,
    arrivals: list[tuple[bytes, int, float]],
    produced_at: dict[tuple[bytes, int], float],
    partition_of: dict[bytes, int],
    partitions: int,
) -> Row:
    """The step's figures: updates of events produced during it, and per partition the
    longest stretch of the step in which no update of its sessions landed in Redis."""
    mine = [a for a in arrivals if step.began <= produced_at.get((a[0], a[1]), 0.0) < step.ended]
    values = summary(latencies(mine, produced_at))
    landed: dict[int, list[float]] = {p: [] for p in range(partitions)}
    for key, _, at in arrivals:
        if step.began <= at <= step.ended:
            landed[partition_of[key]].append(at)
    gaps = []
    for p in range(partitions):
        times = [step.began, *sorted(landed[p]), step.ended]
        gaps.append(max(b - a for a, b in itertools.pairwise(times)))
    return Row(
        step.name,
        step.ended - step.began,
        int(values["n"]),
        values["p50"] * 1000,
        values["p99"] * 1000,
        values["max"] * 1000,
        gaps,
        sorted(step.moved),
    )


# --- the checks -----------------------------------------------------------------------------


def offline_fold(work: Path, produced: dict[str, list[Any]]) -> dict[str, Any]:
    """``stream fold`` of what was produced for each session."""
    logs = work / "produced"
    logs.mkdir(parents=True, exist_ok=True)
    for n, (session, events) in enumerate(sorted(produced.items())):
        header = orjson.dumps({"type": "session", "id": session})
        (logs / f"p{n:05d}.jsonl").write_bytes(
            b"\n".join([header, *(dumps(e) for e in events)]) + b"\n"
        )
    done = subprocess.run(
        [sys.executable, "-m", "stream", "fold", str(logs)],
        cwd=REPO,
        capture_output=True,
        check=True,
    )
    lines = [orjson.loads(line) for line in done.stdout.splitlines()]
    return {line["sessionId"]: line for line in lines}


def topic_records(bootstrap: str, topic: str) -> list[Any]:
    """Every record of ``topic``, each partition in offset order."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"rolling-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
        }
    )
    try:
        found = consumer.list_topics(topic, timeout=20).topics[topic].partitions
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=20)[1]
            for p in found
        }
        consumer.assign([TopicPartition(topic, p, 0) for p in ends if ends[p]])
        records: list[Any] = []
        at = dict.fromkeys(ends, 0)
        deadline = time.monotonic() + 300
        while any(at[p] < ends[p] for p in ends) and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error():
                continue
            records.append(message)
            at[message.partition()] = int(message.offset() or 0) + 1
        return records
    finally:
        consumer.close()


def committed_at_end(bootstrap: str, group: str, topic: str) -> dict[int, tuple[int, int]]:
    """Per partition: (the group's committed offset, the end offset)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        found = consumer.list_topics(topic, timeout=20).topics[topic].partitions
        done = consumer.committed([TopicPartition(topic, p) for p in found], timeout=20)
        return {
            tp.partition: (
                tp.offset,
                consumer.get_watermark_offsets(TopicPartition(topic, tp.partition), timeout=20)[1],
            )
            for tp in done
        }
    finally:
        consumer.close()


def backwards(sequence: list[tuple[bytes, int]]) -> list[str]:
    """Sessions whose seq went down somewhere in ``sequence`` (key, seq), in order."""
    last: dict[bytes, int] = {}
    found = []
    for key, seq in sequence:
        if seq < last.get(key, -1):
            found.append(f"{key.decode()}: {last[key]} -> {seq}")
        last[key] = max(seq, last.get(key, -1))
    return found


# --- the run --------------------------------------------------------------------------------


def corpus(work: Path, sessions: int, needed: int) -> dict[str, list[Any]]:
    """``sessions`` corpus sessions of at least ``needed`` events each."""
    turns = 8
    while True:
        found = corpus_sessions(work / f"corpus-{turns}", sessions, turns)
        if min(len(events) for events in found.values()) >= needed:
            return found
        turns *= 2


def run(args: argparse.Namespace, work: Path) -> int:
    partitions = args.partitions
    steady = args.steady
    # The load runs for the whole bench; the group changes take what they take, so the
    # load is sized for a generous upper bound and stopped once the last step is done.
    budget = 3 * steady + 900
    per_session = int(args.rate * budget / args.sessions) + 1
    with infrastructure(work) as infra:
        membership = {
            "STREAM_STATIC_MEMBERSHIP": "0" if args.dynamic else "1",
            "STREAM_LEAVE_ON_STOP": "0" if args.stay_on_stop else "1",
        }
        if args.session_timeout:
            membership["STREAM_SESSION_TIMEOUT"] = str(args.session_timeout)
        scenario = Scenario(
            infra,
            work,
            partitions=partitions,
            extra={"STREAM_STANDBY_REPLICAS": "1", "STREAM_COMMIT_INTERVAL": "0.5", **membership},
        )
        sessions = corpus(work, args.sessions, per_session)
        keyed = [(s.encode(), events) for s, events in sessions.items()]
        choose = DefaultPartitioner()
        everyone = list(range(partitions))
        partition_of = {key: int(choose(key, everyone, everyone)) for key, _ in keyed}
        workers = [WorkerProcess(scenario, f"w{n}") for n in range(3)]
        subscriber = Subscriber(infra.redis_url, f"{scenario.prefix}session:*", work / "arrivals")
        load = Load(infra.bootstrap, scenario.input_topic, keyed)
        steps: list[Step] = []
        stop = threading.Event()

        def step(
            name: str,
            change: Callable[[], None],
            hold: float = 0.0,
            touched: tuple[WorkerProcess, ...] = (),
        ) -> None:
            before = owners(workers)
            began = time.time()
            change()
            wait(lambda: settled(workers, partitions), 300, f"{name}: the group settled")
            after = owners(workers)
            tags = {w.tag for w in touched}
            moved = {p for p in range(partitions) if before.get(p) in tags}
            moved |= {p for p in range(partitions) if before.get(p) != after.get(p)}
            time.sleep(hold)
            steps.append(Step(name, began, time.time(), frozenset(moved)))
            log(f"{name}: {steps[-1].ended - began:.1f} s, moved {sorted(moved)}")

        def roll(worker: WorkerProcess) -> None:
            leave(worker)
            worker.start()

        def crash_and_return(worker: WorkerProcess) -> None:
            crash(worker)
            time.sleep(1.0)
            worker.start()

        def scale_up() -> None:
            for worker in workers[1:]:
                worker.start()

        def scale_down() -> None:  # a StatefulSet removes the highest ordinal first
            for worker in reversed(workers[1:]):
                leave(worker)

        def feed(load: Load) -> None:
            while not stop.is_set():
                load.run(args.rate, 1.0)

        try:
            subscriber.start()
            workers[0].start()
            wait(lambda: settled(workers, partitions), 300, "the first worker's assignment")
            feeder = threading.Thread(target=feed, args=(load,), daemon=True)
            feeder.start()
            time.sleep(3)  # the first updates: the group has committed
            step("steady, 1 worker", lambda: None, steady)
            step("scale 1 -> 3", scale_up)
            step("steady, 3 workers", lambda: None, steady)
            for worker in reversed(workers):  # a StatefulSet rolls from the highest ordinal
                rolled = (worker,)
                step(f"roll {worker.tag}", lambda w=worker: roll(w), touched=rolled)  # type: ignore[misc]
            step("steady, 3 workers", lambda: None, steady)
            w1, w2 = workers[1], workers[2]
            step("crash w2, back in 1 s", lambda: crash_and_return(w2), touched=(w2,))
            step("steady, 3 workers", lambda: None, steady)
            step("crash w1, no return", lambda: crash(w1), touched=(w1,))
            step("steady, 2 workers", lambda: None, steady)
            step("w1 back", w1.start)
            step("steady, 3 workers", lambda: None, steady)
            step("scale 3 -> 1", scale_down, touched=(w1, w2))
            step("steady, 1 worker", lambda: None, steady)
            stop.set()
            feeder.join(30)
            load.producer.flush(60)
            produced = {
                key.decode(): events[: load.cursor[i]] for i, (key, events) in enumerate(keyed)
            }
            total = sum(len(e) for e in produced.values())
            log(f"produced {total:,} events; waiting for them in Redis")
            scenario.wait_accounted(total, timeout=300)
            time.sleep(2)  # the subscriber's last stamps
        finally:
            stop.set()
            subscriber.stop()
            for worker in workers:
                worker.stop()

        arrivals = subscriber.arrivals()
        rows = [row(s, arrivals, load.produced_at, partition_of, partitions) for s in steps]
        print(
            f"\nRolling restart and scaling: {args.sessions} sessions, {args.rate} events/s,"
            f" {partitions} partitions, standby replicas 1, {membership}\n"
        )
        print(HEADER)
        for found in rows:
            print(found.line())

        # The checks: nothing lost, nothing twice, nothing backwards.
        failures = []
        raw: dict[bytes, bytes] = infra.redis().hgetall(f"{scenario.prefix}stats")  # type: ignore[assignment]
        stats = {k.decode(): int(v) for k, v in raw.items()}
        events = {k: stats.get(k, 0) for k in ("folded", "duplicate", "faulted", "dead_lettered")}
        if sum(events.values()) != total or events["duplicate"] or events["dead_lettered"]:
            failures.append(f"totals {events} for {total} events produced")
        expected = offline_fold(work, produced)
        client = infra.redis()
        pipe = client.pipeline(transaction=False)
        for session in expected:
            pipe.hget(f"{scenario.prefix}session:{session}", "update")
        found_updates = dict(zip(expected, pipe.execute(), strict=True))
        wrong = [s for s in expected if orjson.loads(found_updates[s] or b"null") != expected[s]]
        if wrong:
            failures.append(f"{len(wrong)} sessions differ from stream fold in Redis: {wrong[:3]}")
        published = backwards([(key, seq) for key, seq, _ in arrivals])
        if published:
            failures.append(f"Redis published seqs going backwards: {published[:3]}")
        records = topic_records(infra.bootstrap, scenario.output_topic)
        on_topic = backwards([(r.key(), orjson.loads(r.value())["seq"]) for r in records])
        if on_topic:
            failures.append(f"seqs going backwards on the output topic: {on_topic[:3]}")
        offsets = committed_at_end(infra.bootstrap, scenario.name, scenario.input_topic)
        behind = {p: o for p, o in offsets.items() if o[0] != o[1]}
        if behind:
            failures.append(f"committed offsets short of the end: {behind}")
        print(
            f"\n{total:,} events produced; Redis totals {events}; {len(expected)} sessions equal"
            f" `stream fold`: {not wrong}; {len(arrivals):,} updates published and"
            f" {len(records):,} on the output topic, none backwards:"
            f" {not published and not on_topic};"
            f" committed offsets at the end of all {len(offsets)} partitions: {not behind}"
        )
        for failure in failures:
            print(f"FAILED: {failure}")
        if args.json:
            Path(args.json).write_text(
                json.dumps({"rows": [asdict(r) for r in rows], "failures": failures}, indent=2)
            )
        del load  # its producer goes before the broker does (no reconnect noise after it)
        return 1 if failures else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=120)
    parser.add_argument("--rate", type=int, default=300, help="events (messages) per second")
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--steady", type=float, default=20.0, help="seconds of each steady step")
    parser.add_argument("--work", help="working directory (default: a temporary one)")
    parser.add_argument("--json", help="also write the rows and failures here")
    parser.add_argument(
        "--session-timeout", type=float, help="STREAM_SESSION_TIMEOUT (default: the worker's)"
    )
    parser.add_argument(
        "--dynamic", action="store_true", help="dynamic members (STREAM_STATIC_MEMBERSHIP=0)"
    )
    parser.add_argument(
        "--stay-on-stop",
        action="store_true",
        help="a SIGTERM does not leave the group (STREAM_LEAVE_ON_STOP=0)",
    )
    args = parser.parse_args()
    if args.work:
        Path(args.work).mkdir(parents=True, exist_ok=True)
        raise SystemExit(run(args, Path(args.work)))
    with tempfile.TemporaryDirectory(prefix="rolling-") as work:
        raise SystemExit(run(args, Path(work)))


if __name__ == "__main__":
    main()
