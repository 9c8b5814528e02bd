"""How fast a worker restores its table, beside how fast a plain consumer reads the changelog.

    python -m benchmarks.restore [--sessions N] [--partitions P] [--runs R] [--json PATH]
                                 [--before TREE]

Fills a sessions changelog (``<app>-sessions-changelog``, compacted, ``--partitions``) with
``--sessions`` rows as the worker writes them (the core's codec bytes of a short folded
session, keyed by session id, uncompressed record batches), then, in one run on one
machine, ``--runs`` times each:

- plain consumer: a confluent-kafka consumer assigned every partition from its beginning,
  timed from its creation until it has read every record up to the high watermarks,
  ``poll()``-ing a record at a time and, again, ``consume()``-ing 10,000 at a time;
- worker: ``stream worker`` with an empty state directory, timed from launch until
  ``/readyz`` answers 200 (its table recovered from the changelog), its restore gauge
  read meanwhile;

and each again on an empty changelog (a fresh app id): the cold start, taken off. Net
rates: records / (the median time on the full changelog - the median on the empty one).
Also printed: each run's own difference, and the restore alone, from the worker's log
(Faust's "Restoring state" to its "Restore complete!"). The worker's state directory is
then checked to hold every row (value for value on a sample).
``--before TREE`` also runs the worker from another checkout (an earlier commit's tree),
each run beside this one's, for a before/after under the same load.
Starts its own Kafka and Redis unless KAFKA_BOOTSTRAP_SERVERS and REDIS_URL are set.
"""

import argparse
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined,unused-ignore]
from rocksdict import AccessType, Rdict

from benchmarks import infra as bench_infra
from benchmarks.infra import Infra, Scenario, WorkerProcess, infrastructure, produce_waiting
from benchmarks.reseed import _row
from stream.ops.admin import create_topic

OFFSET_KEY = b"__faust\0offset__"  # Faust's persisted offset, beside the rows


@dataclass
class Result:
    """Seconds of each run: each reader on the empty changelog (cold) and on the full."""

    sessions: int
    changelog_bytes: int
    seconds: dict[str, list[float]]

    def nets(self, reader: str) -> list[float]:
        """Each run's time on the full changelog less the same run's cold start."""
        full, cold = self.seconds[f"{reader} full"], self.seconds[f"{reader} cold"]
        return [f - c for f, c in zip(full, cold, strict=True)]

    def net(self, reader: str) -> float:
        """The median time on the full changelog less the median cold start: a cold start
        varies by a second on a shared machine, as much as a small restore takes, so one
        run's difference can even come out below zero."""
        full, cold = self.seconds[f"{reader} full"], self.seconds[f"{reader} cold"]
        return statistics.median(full) - statistics.median(cold)

    def rate(self, reader: str) -> float:
        return self.sessions / max(1e-9, self.net(reader))


READERS = ("poll", "consume", "worker")  # plain consumer a record / 10,000 at a time; worker


def rows(sessions: int) -> list[tuple[bytes, bytes]]:
    """``sessions`` rows of a few hundred distinct folded sessions, under distinct ids."""
    templates = [_row(i) for i in range(500)]
    rng = random.Random(7)
    return [
        (f"s-{rng.getrandbits(64):016x}-{i:08d}".encode(), templates[i % len(templates)])
        for i in range(sessions)
    ]


def fill_changelog(
    infra: Infra, topic: str, partitions: int, data: list[tuple[bytes, bytes]]
) -> int:
    """The changelog topic, created compacted as Faust does, holding ``data``; its bytes."""
    create_topic(
        infra.admin(),
        NewTopic(topic, partitions, 1, config={"cleanup.policy": "compact"}),
        timeout=30,
    )
    producer = Producer(
        {
            "bootstrap.servers": infra.bootstrap,
            "partitioner": "murmur2_random",  # the worker's: Java's partitioner
            "linger.ms": 20,
            "batch.size": 262_144,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    size = 0
    for key, value in data:
        produce_waiting(producer, topic, key, value)
        size += len(key) + len(value)
    if producer.flush(120):
        raise RuntimeError("changelog not delivered")
    return size


def empty_changelog(infra: Infra, topic: str, partitions: int) -> None:
    create_topic(
        infra.admin(),
        NewTopic(topic, partitions, 1, config={"cleanup.policy": "compact"}),
        timeout=30,
    )


def consume_all(infra: Infra, topic: str, partitions: int, batch: int) -> tuple[float, int]:
    """Seconds for a plain consumer, from its creation, to read ``topic`` to its end
    (``batch`` 1: ``poll`` a record at a time, as a plain consumer loop does; more:
    ``consume`` that many at a time), touching each record's key and value; and the
    records it read."""
    began = time.monotonic()
    consumer = Consumer(
        {
            "bootstrap.servers": infra.bootstrap,
            "group.id": f"restore-bench-{time.monotonic_ns()}",
            "enable.auto.commit": False,
        }
    )
    try:
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(partitions)
        }
        left = {p for p, end in ends.items() if end > 0}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in left])
        read = size = 0
        while left:
            if batch == 1:
                one = consumer.poll(1.0)
                messages = [] if one is None else [one]
            else:
                messages = consumer.consume(num_messages=batch, timeout=1.0)
            for message in messages:
                if message.error() is not None:
                    continue
                read += 1
                size += len(message.key() or b"") + len(message.value() or b"")
                partition, offset = message.partition(), message.offset()
                if partition is not None and offset is not None and offset + 1 >= ends[partition]:
                    left.discard(partition)
        return time.monotonic() - began, read
    finally:
        consumer.close()


def restore(
    scenario: Scenario, tag: str, tree: Path | None = None
) -> tuple[float, WorkerProcess, float]:
    """Seconds from a worker's launch (from ``tree``, else the bench's worker tree), empty
    state directory, to ``/readyz`` 200; the worker, stopped; the most records its restore
    gauge showed left meanwhile."""
    worker = WorkerProcess(scenario, tag)
    shutil.rmtree(worker.state_dir, ignore_errors=True)
    began = time.monotonic()
    own = bench_infra.WORKER_TREE
    bench_infra.WORKER_TREE = tree or own  # read by launch, for this worker only
    try:
        worker.launch()
    finally:
        bench_infra.WORKER_TREE = own
    shown = 0.0
    try:
        while not worker.ready():
            if not worker.alive() or time.monotonic() - began > 1800:
                raise RuntimeError(worker.tail())
            left = [
                v
                for k, v in worker.metrics().items()
                if k.startswith("stream_restore_remaining_records{") and "active" in k
            ]
            shown = max([shown, *left])
            time.sleep(0.05)
        seconds = time.monotonic() - began
    finally:
        worker.stop()
    return seconds, worker, shown


def restore_phase(log: str) -> float | None:
    """Seconds from Faust's "Restoring state" to its "Restore complete!" in the last
    start logged: the restore alone, no start-up in it."""
    began = ended = None
    for line in log.splitlines():
        if "Restoring state from changelog topics" in line:
            began, ended = _stamp(line), None
        elif "Restore complete!" in line and began is not None:
            ended = _stamp(line)
    return None if began is None or ended is None else ended - began


def _stamp(line: str) -> float:
    """A Faust log line's time (``[2026-12-06 17:14:32,828]``) in seconds."""
    clock = line[1:24].split(" ")[1]
    hours, minutes, seconds = clock.replace(",", ".").split(":")
    return int(hours) * 3600 + int(minutes) * 60 + float(seconds)


def stored(state_dir: Path) -> dict[bytes, bytes]:
    """Every row the worker's state directory holds (its partitions' RocksDBs)."""
    found: dict[bytes, bytes] = {}
    for db_path in sorted(state_dir.rglob("*.db")):
        if not (db_path / "CURRENT").exists():
            continue
        db = Rdict(str(db_path), access_type=AccessType.read_only())
        try:
            for key, value in db.items():
                if isinstance(key, bytes) and key != OFFSET_KEY:
                    found[key] = value
        finally:
            db.close()
    return found


def run(
    infra: Infra, work: Path, sessions: int, partitions: int, runs: int, before: Path | None
) -> Result:
    full = Scenario(infra, work, partitions=partitions)
    cold = Scenario(infra, work, partitions=partitions)
    data = rows(sessions)
    size = fill_changelog(infra, full.changelog_topic, partitions, data)
    empty_changelog(infra, cold.changelog_topic, partitions)
    for scenario in (full, cold):
        infra.create_topic(scenario.input_topic, partitions)
    timings: dict[str, list[float]] = {}
    last: WorkerProcess | None = None
    gauge = 0.0  # the most records the restore gauge showed left
    for n in range(runs):
        # Interleaved, so a busier moment of the machine falls on every reader.
        for side, scenario in (("cold", cold), ("full", full)):
            for reader, batch in (("poll", 1), ("consume", 10_000)):
                seconds, read = consume_all(infra, scenario.changelog_topic, partitions, batch)
                if side == "full" and read < sessions:
                    raise RuntimeError(f"the consumer read {read:,} of {sessions:,} records")
                timings.setdefault(f"{reader} {side}", []).append(seconds)
            workers = [("worker", None), ("before", before)] if before else [("worker", None)]
            for reader, tree in workers:
                seconds, worker, shown = restore(scenario, f"{reader}-{side}{n}", tree)
                timings.setdefault(f"{reader} {side}", []).append(seconds)
                phase = restore_phase(worker.log_path.read_text(errors="replace"))
                if side == "full" and phase is not None:
                    timings.setdefault(f"{reader} restore phase", []).append(phase)
                if reader == "worker":
                    last, gauge = worker, max(gauge, shown)
        print(
            f"run {n + 1}: "
            + ", ".join(
                f"{r} {timings[f'{r} cold'][-1]:.2f} / {timings[f'{r} full'][-1]:.2f} s"
                for r in (*READERS, "before")
                if f"{r} full" in timings
            )
            + " (empty / full changelog)",
            flush=True,
        )
    assert last is not None
    check(last, dict(data))
    print(f"restore gauge: up to {gauge:,.0f} records left shown while restoring")
    return Result(sessions, size, timings)


def check(worker: WorkerProcess, data: dict[bytes, bytes]) -> None:
    """The restored state holds every row, the values equal on a sample; the log shows
    the restore's progress."""
    found = stored(worker.state_dir)
    missing = len(data.keys() - found.keys())
    if missing:
        raise RuntimeError(f"{missing:,} of {len(data):,} rows not restored")
    for key in random.Random(1).sample(sorted(data), min(1000, len(data))):
        if found[key] != data[key]:
            raise RuntimeError(f"row {key!r} restored with another value")
    log = worker.log_path.read_text(errors="replace")
    lines = [line for line in log.splitlines() if "restor" in line.lower()]
    print(f"restored state: {len(found):,} rows, every one; log lines on the restore:")
    for line in lines[-4:]:
        print(f"  {line[-160:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=150_000)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--keep", type=Path, default=None, help="work here and keep the logs")
    parser.add_argument(
        "--before", type=Path, default=None, help="also run the worker from this checkout"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="restore-bench-") as tmp:
        work = args.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        with infrastructure(work) as infra:
            result = run(infra, work, args.sessions, args.partitions, args.runs, args.before)
    print(f"changelog: {result.sessions:,} records, {result.changelog_bytes / 1e6:.1f} MB")
    labels = {
        "poll": "plain consumer, poll()",
        "consume": "plain consumer, consume(10000)",
        "worker": "worker restore",
        "before": "worker restore, --before tree",
    }
    for reader, label in labels.items():
        if f"{reader} full" not in result.seconds:
            continue
        runs = ", ".join(f"{n:.2f}" for n in result.nets(reader))
        print(
            f"{label:<31} net {result.net(reader):.2f} s: {result.rate(reader):>10,.0f}"
            f" records/s (each run's: {runs} s)"
        )
    for reader, label in (("worker", "worker log"), ("before", "--before")):
        phases = result.seconds.get(f"{reader} restore phase")
        if phases:
            phase = statistics.median(phases)
            print(
                f"{f'the restore alone ({label})':<31} {phase:.2f} s:"
                f" {result.sessions / phase:>10,.0f} records/s"
                f" ({result.sessions / phase / result.rate('poll'):.2f}x of poll())"
            )
    ratios = {r: result.rate("worker") / result.rate(r) for r in ("poll", "consume")}
    print(f"restore / read: {ratios['poll']:.2f}x of poll(), {ratios['consume']:.2f}x of consume()")
    if "before full" in result.seconds:
        print(f"--before tree: {result.rate('before') / result.rate('poll'):.2f}x of poll()")
    if args.json is not None:
        figures = asdict(result) | {
            "rates": {
                r: result.rate(r) for r in (*READERS, "before") if f"{r} full" in result.seconds
            },
            "ratios": ratios,
        }
        args.json.write_text(json.dumps(figures, indent=2))
    sys.exit(0)


if __name__ == "__main__":
    main()
