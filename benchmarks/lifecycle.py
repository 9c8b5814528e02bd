"""A year in ten minutes: does what the service keeps stay flat once sessions expire?

    python -m benchmarks.lifecycle [--sessions N] [--days D] [--ttl-days T]
                                   [--restore auto|monthly|some|none] [--no-restore]
                                   [--only ttl|none] [--smoke] [--json PATH]

Replays a compressed year through a local broker, the real worker (``stream worker``),
RocksDB and redis-server: ``--sessions`` sessions (1,500,000) arrive evenly over
``--days`` simulated days (event times), each a ``session/start`` at seq 0 and 1 to 5 small
events more, the last 1 to 5 days after the start. A session's first-day events travel as
one message, the rest as a second (segments when they hold several), each produced at the
time of its last event, so every partition receives its records in event-time order. One
simulated month at a time: month k is produced, the group's committed offsets reach the
end, expiry and the log cleaner are given a moment, and one table row is printed:

- live: the worker's ``stream_sessions_live`` gauge (``stream_state_sessions``, the rows
  counted, where the worker has no expiry); expired: ``stream_sessions_expired_total``,
  all labels, summed over the run's worker processes;
- RocksDB: the worker's state directory, of which WAL: its write-ahead logs (writes not
  yet flushed to tables); changelog and output: the topic's segment files on the broker's
  disk (1 MiB segments, the least Kafka 4 takes, and an eager cleaner on both topics:
  every segment but each partition's active one is compacted, tombstones go a second
  after a pass);
- Redis: ``used_memory`` above what it was when the run began; tallies: the entries of
  ``{prefix}tallies`` (one per session Redis knows);
- RSS: the worker's resident memory: a process that restored at the start of the month
  and folded the month since, or one that has run since the last restore;
- restore: the worker is stopped and started again with an empty state directory, timed
  from launch to ``/readyz`` 200 (the sessions table recovered from the changelog); that
  worker carries on. ``--restore``: every month with the TTL and months 2, the middle and
  the last without (auto), every month, those three, or never.

The run is made twice, with ``STREAM_SESSION_TTL`` (``--ttl-days``, 30) and with
``STREAM_SESSION_TTL=0`` (sessions kept for good), the same events in both; the verdict
compares the last month with month 2 per figure (flat: within 15 %) and gives the band
(max/min) of months 2 to the last. Starts its own Kafka and Redis unless
KAFKA_BOOTSTRAP_SERVERS and REDIS_URL are set (the cleaner's backoff is then set on that
broker too); a run removes its topics and Redis keys when it ends. Prints figures;
asserts only that every record was committed.
"""

import argparse
import itertools
import json
import random
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from benchmarks.infra import (
    Infra,
    Scenario,
    WorkerProcess,
    dir_bytes,
    infrastructure,
    produce_waiting,
)
from stream.contract.jsontext import dumps
from stream.ops.offsets import snapshot
from stream.testing import events as build

DAY = 86_400_000  # ms
YEAR_START = 1_767_225_600_000  # 2026-01-01T00:00:00Z
MONTH_DAYS = 365 / 12
FLAT = 0.15  # the target: the last month within 15 % of month 2
# Small segments and an eager cleaner on the changelog and output topics: compaction
# can only rewrite closed segments, and by default waits 15 s between passes and for half
# of a log to be dirty; tombstones would stay a day.
CLEANER_TOPIC = {
    "min.cleanable.dirty.ratio": "0.01",
    "min.compaction.lag.ms": "0",
    "delete.retention.ms": "1000",
    "segment.ms": "10000",
}
CLEANER_BROKER = {"log.cleaner.backoff.ms": "1000"}


@dataclass(frozen=True)
class Plan:
    sessions: int = 1_500_000
    days: int = 365
    ttl_days: float = 30
    # When the worker restarts from an empty state dir: "monthly", "some" (month 2, the
    # middle and the last month) or "none"; "auto" is monthly with the TTL and "some"
    # without (a year of sessions restored every month would outlast the run).
    restore: str = "auto"
    # The broker refuses a record batch larger than a segment: at least the worker's
    # producer batch (256 KiB), and Kafka 4 refuses segments under 1 MiB. Every
    # partition's active segment stays uncompacted.
    segment_bytes: int = 1 << 20
    seed: int = 11

    def restores(self, ttl: str) -> set[int]:
        """The months (1-based) after which the run with STREAM_SESSION_TTL ``ttl``
        restores."""
        count = len(self.months)
        mode = self.restore if self.restore != "auto" else "monthly" if ttl != "0" else "some"
        if mode == "monthly":
            return set(range(1, count + 1))
        if mode == "some":
            return {2, (count + 1) // 2, count}
        return set()

    @property
    def months(self) -> list[tuple[int, int]]:
        """Each simulated month as its days ``[first, end)``."""
        count = max(1, round(self.days / MONTH_DAYS))
        bounds = [round(k * self.days / count) for k in range(count + 1)]
        return list(itertools.pairwise(bounds))


SMOKE = Plan(sessions=20_000, days=91)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# --- the year's events --------------------------------------------------------------------------


class Year:
    """The sessions' messages day by day, each day's in event-time order. A session is
    made on the day it starts; its later days' messages wait in ``pending``."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.rng = random.Random(plan.seed)
        self.pending: dict[int, list[tuple[int, bytes, bytes, int]]] = defaultdict(list)
        self.started = 0

    def day(self, day: int) -> list[tuple[bytes, bytes, int]]:
        """(key, value, events) of every message whose events fall on ``day``."""
        plan, rng = self.plan, self.rng
        end = (day + 1) * plan.sessions // plan.days
        last = YEAR_START + plan.days * DAY - 1
        while self.started < end:
            start = YEAR_START + day * DAY + rng.randrange(DAY)
            stop = min(start + rng.randrange(DAY, 5 * DAY), last)
            start = min(start, stop - 1)  # one drawn in the year's last millisecond
            self._session(f"lc-{self.started:07d}".encode(), start, stop, rng.randint(1, 5))
            self.started += 1
        messages = sorted(self.pending.pop(day, []))
        return [(key, value, n) for _, key, value, n in messages]

    def _session(self, key: bytes, start: int, stop: int, more: int) -> None:
        """``session/start`` at ``start``, ``more`` events after it, the last at ``stop``:
        the first day's events as one message, the others as a second one, each produced
        at the time of its last event (as a harness uploads what a session logged)."""
        middle = sorted(self.rng.randint(start + 1, stop) for _ in range(more - 1))
        times = [*middle, stop]
        events = [build.event("session/start", 0, {"model": "deepseek-chat"}, time=start)]
        for seq, at in enumerate(times, 1):
            if seq % 2:
                events.append(build.user_message(seq, build.texts("fix the test"), time=at))
            else:
                usage = build.usage(1_000 + 40 * seq, 30, cache_read=800)
                events.append(
                    build.assistant_message(seq, build.texts("done"), usage=usage, time=at)
                )
        first_day = (start - YEAR_START) // DAY
        split = sum(1 for e in events if (e["time"] - YEAR_START) // DAY == first_day)
        for part in (events[:split], events[split:]):
            if part:
                at = part[-1]["time"]
                value = dumps(part[0]) if len(part) == 1 else dumps(part)
                self.pending[(at - YEAR_START) // DAY].append((at, key, value, len(part)))


def total(metrics: dict[str, float], name: str) -> float:
    """A metric's samples summed over their labels."""
    return sum(v for k, v in metrics.items() if k == name or k.startswith(name + "{"))


def produce(producer: Producer, topic: str, messages: list[tuple[bytes, bytes, int]]) -> None:
    for key, value, _ in messages:
        produce_waiting(producer, topic, key, value)
        producer.poll(0)


# --- one run ------------------------------------------------------------------------------------


@dataclass
class Month:
    month: int
    day: int  # the simulated day the month ends with
    sessions: int  # started so far
    events: int  # produced so far
    fold_seconds: float  # first record produced to the last one committed
    events_per_s: float
    live: float
    expired: float
    rocksdb_bytes: int
    wal_bytes: int  # of which RocksDB's write-ahead logs (writes not yet flushed to tables)
    changelog_bytes: int
    output_bytes: int
    redis_bytes: int
    tallies: int
    rss_bytes: int
    restore_seconds: float | None


class Run:
    """One year against one worker group: ``ttl`` is STREAM_SESSION_TTL."""

    def __init__(self, infra: Infra, work: Path, plan: Plan, ttl: str) -> None:
        self.infra, self.plan, self.ttl = infra, plan, ttl
        self.scenario = Scenario(
            infra,
            work,
            extra={"STREAM_SESSION_TTL": ttl, "STREAM_COMMIT_INTERVAL": "1"},
        )
        self.worker: WorkerProcess | None = None
        self.expired_before = 0.0  # expired by the run's earlier worker processes
        self.starts = 0
        self.first_ready = 0.0

    def months(self) -> Iterator[Month]:
        infra, scenario, plan = self.infra, self.scenario, self.plan
        infra.create_topic(scenario.input_topic, scenario.partitions)
        redis_base = int(infra.redis().info("memory")["used_memory"])
        began = time.monotonic()
        self.worker = self._launch()
        self.first_ready = self.worker.wait_readyz()
        log(f"{self.ttl_name}: first worker ready in {time.monotonic() - began:.1f} s")
        for topic in (scenario.changelog_topic, scenario.output_topic):
            infra.alter_configs(
                "topic", topic, {**CLEANER_TOPIC, "segment.bytes": str(plan.segment_bytes)}
            )
        producer = Producer(
            {
                "bootstrap.servers": infra.bootstrap,
                "partitioner": "murmur2_random",
                "enable.idempotence": True,
                "linger.ms": 20,
                "compression.type": "lz4",
                "queue.buffering.max.messages": 1_000_000,
            }
        )
        year = Year(plan)
        events = 0
        restores = plan.restores(self.ttl)
        for index, (first, end) in enumerate(plan.months, 1):
            started = time.monotonic()
            month_events = 0
            for day in range(first, end):
                messages = year.day(day)
                produce(producer, scenario.input_topic, messages)
                month_events += sum(n for _, _, n in messages)
            if producer.flush(300):
                raise RuntimeError("month not delivered")
            events += month_events
            self._wait_committed(timeout=1800)
            fold = time.monotonic() - started
            self._settle_expiry()
            self._settle_cleaner()
            worker = self.worker
            assert worker is not None
            metrics = worker.metrics()
            live = metrics.get("stream_sessions_live", metrics.get("stream_state_sessions", 0.0))
            expired = self.expired_before + total(metrics, "stream_sessions_expired_total")
            redis = infra.redis()
            row = Month(
                month=index,
                day=end,
                sessions=year.started,
                events=events,
                fold_seconds=fold,
                events_per_s=month_events / fold,
                live=live,
                expired=expired,
                rocksdb_bytes=dir_bytes(worker.state_dir),
                wal_bytes=sum(f.stat().st_size for f in worker.state_dir.rglob("*.db/*.log")),
                changelog_bytes=infra.topic_bytes(scenario.changelog_topic),
                output_bytes=infra.topic_bytes(scenario.output_topic),
                redis_bytes=int(redis.info("memory")["used_memory"]) - redis_base,
                tallies=int(redis.hlen(f"{scenario.prefix}tallies")),
                rss_bytes=worker.rss_bytes(),
                restore_seconds=None,
            )
            if index in restores:  # after the figures: the next worker starts afresh
                row.restore_seconds = self._restore()
            yield row

    @property
    def ttl_name(self) -> str:
        return "no TTL" if self.ttl == "0" else f"TTL {self.ttl}"

    def _launch(self) -> WorkerProcess:
        self.starts += 1
        worker = WorkerProcess(self.scenario, f"w{self.starts}")
        worker.launch()
        return worker

    def _restore(self) -> float:
        """Stop the worker, start one with an empty state dir: seconds to /readyz 200."""
        old = self.worker
        assert old is not None
        self.expired_before += total(old.metrics(), "stream_sessions_expired_total")
        old.stop()
        shutil.rmtree(old.state_dir, ignore_errors=True)
        began = time.monotonic()
        self.worker = self._launch()
        self.worker.wait_readyz(timeout=1800)
        return time.monotonic() - began

    def _wait_committed(self, timeout: float) -> None:
        """Until the group's committed offsets reach the input topic's end."""
        admin = self.infra.admin()
        began = time.monotonic()
        while True:
            offsets = snapshot(admin, self.scenario.name, self.scenario.input_topic)
            lag = sum(p.lag for p in offsets)
            if lag == 0:
                return
            assert self.worker is not None
            if not self.worker.alive() or time.monotonic() - began > timeout:
                raise RuntimeError(f"{lag:,} records not committed\n{self.worker.tail()}")
            time.sleep(0.25)

    def _settle_expiry(self, limit: float = 30) -> None:
        """Until the expiry figures stand still for a second (at once without them)."""
        assert self.worker is not None
        seen: tuple[float | None, ...] = ()
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            metrics = self.worker.metrics()
            if "stream_sessions_live" not in metrics:
                return
            now = (metrics["stream_sessions_live"], total(metrics, "stream_sessions_expired_total"))
            if now == seen:
                return
            seen = now
            time.sleep(1)

    def _settle_cleaner(self, limit: float = 30) -> None:
        """Until both compacted topics' bytes stand still for a second."""
        topics = (self.scenario.changelog_topic, self.scenario.output_topic)
        seen: tuple[int, ...] = ()
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            now = tuple(self.infra.topic_bytes(t) for t in topics)
            if now == seen:
                return
            seen = now
            time.sleep(1)

    def close(self) -> None:
        """Stop the worker; drop the run's topics and Redis keys (the next run starts
        from the same broker and Redis)."""
        if self.worker is not None:
            self.worker.stop()
            shutil.rmtree(self.worker.state_dir, ignore_errors=True)
        admin = self.infra.admin()
        topics = [
            t for t in admin.list_topics(timeout=10).topics if t.startswith(self.scenario.name)
        ]
        if topics:
            for future in admin.delete_topics(topics, request_timeout=30).values():
                future.result()
        redis = self.infra.redis()
        batch = []
        for key in redis.scan_iter(match=f"{self.scenario.prefix}*", count=10_000):
            batch.append(key)
            if len(batch) >= 10_000:
                redis.unlink(*batch)
                batch.clear()
        if batch:
            redis.unlink(*batch)


# --- the tables ---------------------------------------------------------------------------------

COLUMNS = (
    ("month", 5),
    ("day", 4),
    ("sessions", 10),
    ("live", 9),
    ("expired", 10),
    ("RocksDB MB", 10),
    ("WAL MB", 7),
    ("changelog MB", 12),
    ("output MB", 9),
    ("Redis MB", 8),
    ("tallies", 9),
    ("RSS MB", 7),
    ("restore s", 9),
    ("fold ev/s", 9),
)
FIGURES = (  # (name, field) judged month by month
    ("live sessions", "live"),
    ("RocksDB bytes", "rocksdb_bytes"),
    ("changelog bytes", "changelog_bytes"),
    ("output topic bytes", "output_bytes"),
    ("Redis used_memory", "redis_bytes"),
    ("Redis tallies", "tallies"),
    ("worker RSS", "rss_bytes"),
    ("restore seconds", "restore_seconds"),
)


def header() -> str:
    top = "  ".join(name.rjust(width) for name, width in COLUMNS)
    return f"{top}\n{'-' * len(top)}"


def line(row: Month) -> str:
    mb = 1 << 20
    cells = (
        f"{row.month}",
        f"{row.day}",
        f"{row.sessions:,}",
        f"{row.live:,.0f}",
        f"{row.expired:,.0f}",
        f"{row.rocksdb_bytes / mb:,.1f}",
        f"{row.wal_bytes / mb:,.1f}",
        f"{row.changelog_bytes / mb:,.1f}",
        f"{row.output_bytes / mb:,.1f}",
        f"{row.redis_bytes / mb:,.1f}",
        f"{row.tallies:,}",
        f"{row.rss_bytes / mb:,.0f}",
        "-" if row.restore_seconds is None else f"{row.restore_seconds:.1f}",
        f"{row.events_per_s:,.0f}",
    )
    return "  ".join(cell.rjust(width) for cell, (_, width) in zip(cells, COLUMNS, strict=True))


def verdicts(runs: dict[str, list[dict[str, Any]]], names: dict[str, str]) -> list[dict[str, Any]]:
    """Per figure and run: month 2, the last month, their ratio."""
    found = []
    for name, key in FIGURES:
        for run, rows in runs.items():
            if len(rows) < 2 or rows[1][key] is None or rows[-1][key] is None:
                continue
            second, last = rows[1][key], rows[-1][key]
            values = [r[key] for r in rows[1:] if r[key] is not None]
            ratio = last / second if second else float("inf") if last else 1.0
            found.append(
                {
                    "figure": name,
                    "run": names[run],
                    "month2": second,
                    "last": last,
                    "last_month": rows[-1]["month"],
                    "ratio": ratio,
                    "flat": abs(ratio - 1) <= FLAT,
                    # the band of months 2..last: max / min
                    "band": max(values) / min(values) if min(values) > 0 else float("inf"),
                }
            )
    return found


def render_verdicts(found: list[dict[str, Any]]) -> str:
    lines = []
    for v in found:
        unit = 1 << 20 if v["figure"].endswith(("bytes", "used_memory", "RSS")) else 1
        digits = 1 if unit > 1 or v["figure"].startswith("restore") else 0
        fmt = f"{{:,.{digits}f}}{' MB' if unit > 1 else ''}"
        state = "flat" if v["flat"] else "GROWS" if v["ratio"] > 1 else "SHRINKS"
        lines.append(
            f"{v['figure']:<19} {v['run']:<12} month {v['last_month']}/month 2 ="
            f" {v['ratio']:5.2f} ({fmt.format(v['month2'] / unit)} ->"
            f" {fmt.format(v['last'] / unit)}): {state}; months 2-{v['last_month']} max/min"
            f" {v['band']:.2f}"
        )
    return "\n".join(lines)


# --- the command --------------------------------------------------------------------------------


def ttl_setting(days: float) -> str:
    """STREAM_SESSION_TTL for ``days`` ("30d"; seconds when not whole; "0": none)."""
    if days <= 0:
        return "0"
    return f"{days:g}d" if days == int(days) else str(round(days * 86_400))


def year(infra: Infra, work: Path, plan: Plan, only: tuple[str, ...]) -> dict[str, Any]:
    """Both runs (or ``only`` one), tables printed as the months go by."""
    choices = {"ttl": ttl_setting(plan.ttl_days), "none": "0"}
    runs: dict[str, list[dict[str, Any]]] = {}
    details: dict[str, Any] = {}
    for kind in only:
        run = Run(infra, work, plan, choices[kind])
        name = run.ttl_name
        print(f"\n{name}, {plan.sessions:,} sessions over {plan.days} days", flush=True)
        print(header(), flush=True)
        began = time.monotonic()
        rows = runs[kind] = []
        try:
            for row in run.months():
                rows.append(asdict(row))
                print(line(row), flush=True)
        finally:
            run.close()
        details[kind] = {
            "name": name,
            "seconds": round(time.monotonic() - began, 1),
            "first_ready_seconds": round(run.first_ready, 1),
            "events": rows[-1]["events"] if rows else 0,
        }
        print(
            f"{name}: {details[kind]['seconds']:.0f} s, {details[kind]['events']:,} events;"
            f" first start ready in {run.first_ready:.1f} s",
            flush=True,
        )
    found = verdicts(runs, {kind: d["name"] for kind, d in details.items()})
    return {"plan": asdict(plan), "runs": runs, "details": details, "verdicts": found}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sessions", type=int, help="sessions over the year (1,500,000)")
    parser.add_argument("--days", type=int, help="simulated days (365)")
    parser.add_argument("--ttl-days", type=float, help="STREAM_SESSION_TTL of the TTL run (30)")
    parser.add_argument(
        "--restore",
        choices=("auto", "monthly", "some", "none"),
        help="when to restore from the changelog (auto: monthly with the TTL, months 2,"
        " middle and last without)",
    )
    parser.add_argument("--no-restore", action="store_true", help="= --restore none")
    parser.add_argument("--only", choices=("ttl", "none"), help="one of the two runs")
    parser.add_argument("--smoke", action="store_true", help="20,000 sessions over 3 months")
    parser.add_argument("--json", help="also write every figure to this file")
    args = parser.parse_args()
    plan = SMOKE if args.smoke else Plan()
    changes: dict[str, Any] = {}
    if args.sessions is not None:
        changes["sessions"] = args.sessions
    if args.days is not None:
        changes["days"] = args.days
    if args.ttl_days is not None:
        changes["ttl_days"] = args.ttl_days
    if args.restore:
        changes["restore"] = args.restore
    if args.no_restore:
        changes["restore"] = "none"
    plan = Plan(**{**asdict(plan), **changes})
    only = (args.only,) if args.only else ("ttl", "none")
    began = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="context-stream-lifecycle-"))
    try:
        with infrastructure(work) as infra:
            try:
                infra.alter_configs("broker", infra.broker_id(), CLEANER_BROKER)
            except Exception as error:  # the cleaner then runs at its own pace
                log(f"cleaner backoff not set ({error}): compaction may lag the figures")
            if not infra.log_dirs():
                log("the broker's log dirs are not readable here: topic bytes read 0")
            result = year(infra, work, plan, only)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result["seconds"] = round(time.monotonic() - began, 1)
    print()
    print(render_verdicts(result["verdicts"]))
    command = " ".join(["python -m benchmarks.lifecycle", *sys.argv[1:]])
    print(f"\n{result['seconds']:.0f} s; command: {command}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
