"""What the worker shows operators: Prometheus metrics, liveness and readiness.

Served on ``STREAM_METRICS_PORT`` (0: off) by aiohttp on the worker's own event loop, so
an answer from ``/livez`` proves the loop turns. ``/readyz`` is 200 only when the worker
holds a recovered assignment (possibly empty: a spare member is ready) and Redis answers.
Counters count what the batches accounted for (new events, not redeliveries): after a
run without crashes they equal the Redis totals; across crashes the Redis totals are the
exact ones (see the README).
"""

import contextlib
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from aiohttp import web
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from stream.config import Settings
from stream.contract.events import READ_TYPES
from stream.ops.census import Census
from stream.publish.publisher import RedisState
from stream.session.batch import BatchResult, Message
from stream.session.expiry import SweepResult
from stream.session.partition import PartitionRow

log = logging.getLogger("stream.metrics")


class Position(NamedTuple):
    """Where the consumer stands in one input partition, as the worker reads it from its
    consumer (``stream.app.monitor.positions``) and hands it to ``Metrics.refresh``."""

    committed: int | None  # the committed offset: the next record to read (None: never)
    high: int  # the high-water mark: the offset the next record written gets


Positions = Mapping[int, Position]  # by partition number

# Event types are input: only the ones the folds know get their own label value.
_KNOWN_TYPES = frozenset(READ_TYPES) | {"session/start", "turn/start", "turn/end"}


@dataclass
class Metrics:
    registry: CollectorRegistry
    events: Counter
    events_by_type: Counter
    batches: Counter
    batch_size: Histogram
    fold_seconds: Histogram
    publish_seconds: Histogram
    redis_seconds: Histogram
    loop_cpu: Counter
    produce_to_redis: Histogram
    event_to_redis: Histogram
    record_age: Histogram
    rebalances: Counter
    fetches: Counter
    committed_records: Counter
    restore_remaining: Gauge
    recovering: Gauge
    redelivered: Counter
    quarantined: Counter
    lag: Gauge
    committed_lag: Gauge
    stalled: Gauge
    retired: Counter
    resets: Counter
    state_sessions: Gauge
    state_events: Gauge
    census_walking: Gauge
    control_unreadable: Gauge
    assigned_partitions: Gauge
    generation: Gauge
    sessions_faulted: Gauge
    rocksdb_bytes: Gauge
    redis_retrying: Gauge
    redis_pending: Gauge
    redis_pending_bytes: Gauge
    redis_oom: Gauge
    redis_rejected: Counter
    ready_gauge: Gauge
    sessions_live: Gauge
    sessions_expired: Counter
    settings: Settings
    redis: RedisState | None = None
    redis_rejected_seen: int = 0  # RedisState.rejected already added to redis_rejected
    assigned: list[int] = field(default_factory=list)
    recovered: bool = False
    fatal: str = ""
    positions: dict[int, int] = field(default_factory=dict)  # next offset per partition
    census: Census = field(default_factory=Census)  # what the assigned partitions' rows hold
    # partition -> (committed offset, since when it stood there, records waiting, as of)
    progress: dict[int, tuple[int | None, float, int, float]] = field(default_factory=dict)
    # Control records refused (unreadable, not one step above the last) or a control topic
    # recreated untrustworthy while the worker runs: said loudly, never applied.
    control_problem: str = ""
    clock: Callable[[], float] = time.time  # for ages from event and record times (tests: fake)

    @classmethod
    def create(cls, settings: Settings) -> "Metrics":
        r = CollectorRegistry()
        seconds = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
        m = cls(
            registry=r,
            events=Counter("stream_events", "Input events by outcome", ["outcome"], registry=r),
            events_by_type=Counter(
                "stream_events_by_type", "Input events by event type", ["type"], registry=r
            ),
            batches=Counter("stream_batches", "Batches folded", registry=r),
            batch_size=Histogram(
                "stream_batch_messages",
                "Messages per batch",
                buckets=(1, 5, 10, 50, 100, 500, 1000, 2000, 5000),
                registry=r,
            ),
            fold_seconds=Histogram(
                "stream_fold_seconds", "Time to fold a batch", buckets=seconds, registry=r
            ),
            publish_seconds=Histogram(
                "stream_publish_seconds",
                "Time to deliver a batch to Kafka and Redis",
                buckets=seconds,
                registry=r,
            ),
            redis_seconds=Histogram(
                "stream_redis_write_seconds",
                "Time to write a batch's updates to Redis (part of stream_publish_seconds)",
                buckets=seconds,
                registry=r,
            ),
            loop_cpu=Counter(
                "stream_batch_loop_cpu_seconds",
                "CPU time of the event loop's thread during each step of a batch (fold, kafka,"
                " redis), other tasks on the loop included: the rest of the step's time the"
                " loop waited (for the broker, Redis, or the GIL)",
                ["step"],
                registry=r,
            ),
            produce_to_redis=Histogram(
                "stream_produce_to_redis_seconds",
                "From the input record's timestamp to its update written",
                buckets=seconds,
                registry=r,
            ),
            # Record end-to-end latency in Kafka Streams' sense, from the event's own time:
            # one observation per published update (its session's latest event), so a
            # batch of many sessions weighs as many. Producer clocks are not ours: a clock
            # ahead counts as 0, a replayed old log lands in +Inf.
            event_to_redis=Histogram(
                "stream_event_to_redis_seconds",
                "From the event time (the latest event's `time`) of each published update"
                " to its Redis write done (or queued while stream_redis_retrying)",
                buckets=(*seconds, 30, 60, 300, 900, 3600),
                registry=r,
            ),
            # Where an update's latency goes: each batch's middle record (each fetch's per
            # partition) observed at every step, aged from its Kafka timestamp.
            record_age=Histogram(
                "stream_record_age_seconds",
                "Age of input records (from their Kafka timestamp) at each step of the worker:"
                " fetched (handed over by the fetch), taken (a batch begins), folded, sent,"
                " delivered (the broker confirmed its records), cached (its Redis write"
                " done), acked; one observation per batch (per partition of a fetch)",
                ["step"],
                buckets=seconds,
                registry=r,
            ),
            rebalances=Counter(
                "stream_rebalances", "Group rebalances completed by this worker", registry=r
            ),
            fetches=Counter(
                "stream_fetches",
                "Fetches sent to the brokers, by their wait: the latency budget while records"
                " arrive, resting (a long poll) while none do (note 034)",
                ["wait"],
                registry=r,
            ),
            committed_records=Counter(
                "stream_committed_records",
                "Input records whose offsets this worker committed (the committed offsets'"
                " advance, seen every 10 s; a partition moving in counts from there)",
                registry=r,
            ),
            restore_remaining=Gauge(
                "stream_restore_remaining_records",
                "Changelog records still to restore into RocksDB, for active and standby"
                " partitions (Faust's recovery; read every 10 s)",
                ["kind"],
                registry=r,
            ),
            recovering=Gauge(
                "stream_recovering",
                "1 while the worker restores its tables after a rebalance (batches wait)",
                registry=r,
            ),
            redelivered=Counter(
                "stream_redelivered_messages", "Messages already accounted for", registry=r
            ),
            quarantined=Counter(
                "stream_quarantined_messages",
                "Messages an unexpected error took out of a batch (dead-lettered)",
                registry=r,
            ),
            lag=Gauge(
                "stream_consumer_lag",
                "Messages behind the end, from the read position",
                ["partition"],
                registry=r,
            ),
            committed_lag=Gauge(
                "stream_committed_lag",
                "Messages behind the end, from the committed offset (what a restart re-reads)",
                ["partition"],
                registry=r,
            ),
            stalled=Gauge(
                "stream_partition_stalled",
                "1 while the committed offset stands still and records wait (STREAM_STALL_SECONDS)",
                ["partition"],
                registry=r,
            ),
            retired=Counter(
                "stream_events_retired",
                "Events of a session life that ended (a reset, or it expired and its next"
                " event started a new one); they stay in every total",
                ["outcome"],
                registry=r,
            ),
            resets=Counter(
                "stream_resets", "Reset records met, applied or ignored", ["applied"], registry=r
            ),
            state_sessions=Gauge(
                "stream_state_sessions",
                "Sessions held in this worker's assigned partitions (counted from the rows)",
                registry=r,
            ),
            state_events=Gauge(
                "stream_state_events",
                "Events accounted in the assigned partitions' rows, by outcome (the Redis"
                " totals' share of this worker; exact across restarts)",
                ["outcome"],
                registry=r,
            ),
            census_walking=Gauge(
                "stream_census_walking_partitions",
                "Assigned partitions whose rows are still being counted",
                registry=r,
            ),
            control_unreadable=Gauge(
                "stream_control_record_problem",
                "1 when the control topic holds a record the worker refused (or is not compacted)",
                registry=r,
            ),
            assigned_partitions=Gauge(
                "stream_assigned_partitions", "Input partitions assigned", registry=r
            ),
            generation=Gauge("stream_generation", "Rebuild generation in use", registry=r),
            sessions_faulted=Gauge(
                "stream_sessions_faulted",
                "Sessions in this worker's assigned partitions with a faulted projection"
                " (counted from the rows)",
                registry=r,
            ),
            rocksdb_bytes=Gauge("stream_rocksdb_bytes", "State directory size", registry=r),
            redis_retrying=Gauge(
                "stream_redis_retrying", "1 while Redis writes are failing", registry=r
            ),
            redis_pending=Gauge(
                "stream_redis_pending_sessions", "Updates queued for Redis", registry=r
            ),
            redis_pending_bytes=Gauge(
                "stream_redis_pending_bytes",
                "Estimated memory of the updates queued for Redis",
                registry=r,
            ),
            redis_oom=Gauge(
                "stream_redis_oom", "1 while Redis refuses writes as out of memory", registry=r
            ),
            redis_rejected=Counter(
                "stream_redis_rejected_writes",
                "Session writes Redis rejected as older than what it holds",
                registry=r,
            ),
            ready_gauge=Gauge("stream_ready", "1 when /readyz is 200", registry=r),
            sessions_live=Gauge(
                "stream_sessions_live",
                "Sessions alive in this worker's assigned partitions (rows not yet expired"
                " or swept; counted from the rows)",
                registry=r,
            ),
            sessions_expired=Counter(
                "stream_sessions_expired",
                "Sessions that expired (STREAM_SESSION_TTL): swept away, or found expired"
                " by their next event",
                ["how"],
                registry=r,
            ),
            settings=settings,
        )
        m.generation.set(settings.generation)
        for outcome in ("folded", "duplicate", "faulted", "dead_lettered"):
            m.events.labels(outcome)
            m.state_events.labels(outcome)
        for outcome in ("folded", "duplicate", "faulted"):
            m.retired.labels(outcome)
        for how in ("swept", "by_event"):
            m.sessions_expired.labels(how)
        for kind in ("active", "standby"):
            m.restore_remaining.labels(kind)
        return m

    # -- updates from the agent --------------------------------------------------------
    def observe_batch(
        self, messages: Sequence[Message], result: BatchResult, stamp: float | None = None
    ) -> None:
        """A batch folded and delivered (``stamp``: its last record's timestamp, s). Cannot
        raise for what a batch holds: a counter takes only what can be added."""
        for outcome, value in result.counts.as_dict().items():
            if value > 0:
                self.events.labels(outcome).inc(value)
            elif value < 0:  # a bug: say so, never take the batch down
                log.error("batch counted %d %s events; not added", value, outcome)
        for outcome, value in result.retired.as_dict().items():
            if value > 0 and outcome != "dead_lettered":
                self.retired.labels(outcome).inc(value)
        for note in result.resets:
            self.resets.labels("yes" if note.applied else "no").inc()
        if result.expired:
            self.sessions_expired.labels("by_event").inc(result.expired)
        for kind, value in result.types.items():
            self.events_by_type.labels(kind if kind in _KNOWN_TYPES else "other").inc(value)
        self.batches.inc()
        self.batch_size.observe(len(messages))
        if result.redelivered:
            self.redelivered.inc(result.redelivered)
        if result.quarantined:
            self.quarantined.inc(result.quarantined)
        for message in messages:
            self.positions[message.partition] = message.offset + 1
        now = self.clock()
        if stamp:
            self.produce_to_redis.observe(max(0.0, now - stamp))
        for change in result.sessions:
            record = change.record
            if record is not None and record.time is not None:
                self.event_to_redis.observe(max(0.0, now - record.time / 1000))

    def observe_fetch(self, resting: bool) -> None:
        """A fetch sent to a broker: resting (a long poll) or within the latency budget."""
        self.fetches.labels("resting" if resting else "budget").inc()

    def observe_age(self, step: str, stamp: float | None) -> None:
        """A record's age at ``step`` (``stamp``: its Kafka timestamp, s; a clock ahead
        counts as 0)."""
        if stamp:
            self.record_age.labels(step).observe(max(0.0, self.clock() - stamp))

    def observe_loop_cpu(self, fold: float, kafka: float, redis: float | None) -> None:
        """The loop thread's CPU seconds during a batch's fold, Kafka delivery and Redis
        write. Their wall times: ``stream_fold_seconds``, ``stream_publish_seconds`` less
        ``stream_redis_write_seconds``, and ``stream_redis_write_seconds``. None: not
        counted (a batch whose waits overlapped the next batch's fold counts its own
        sending as its Kafka step, and its Redis write not at all)."""
        for step, seconds in (("fold", fold), ("kafka", kafka), ("redis", redis)):
            if seconds is not None:
                self.loop_cpu.labels(step).inc(max(0.0, seconds))

    def observe_rows(self, result: BatchResult) -> None:
        """A batch's rows as they go into the store: the census moves with them, in the
        same turn of the loop. Moved later (after the batch's awaits), a walk under way
        could read a new session's row first and the census count it twice."""
        census = self.census
        for change in result.sessions:
            census.observe(change.partition, change.key, change.before, change.after)
        for part in result.partitions:
            census.observe_partition(part.partition, PartitionRow.decode(part.row))

    def observe_sweep(self, sweep: SweepResult, removed: bool = True) -> None:
        """A sweep's sessions expired; ``removed``: their rows are gone (delivered), else
        they wait for Redis and a later sweep removes them (counted here, once)."""
        if not sweep.expired:
            return
        # A session an earlier sweep retired already is deleted again, not counted again.
        self.sessions_expired.labels("swept").inc(sum(not e.again for e in sweep.expired))
        if not removed:
            return
        census = self.census
        for expired in sweep.expired:
            census.observe(sweep.partition, expired.key, expired.part, None)
        if sweep.row:  # empty: the partition row was not written (nothing newly retired)
            census.observe_partition(sweep.partition, PartitionRow.decode(sweep.row))

    def refresh(
        self, settings: Settings, positions: "Positions | None", recovery: Any = None
    ) -> None:
        """Gauges read on a timer (cheap enough every 10 s): ``positions`` are the input's
        partitions this member holds (``stream.app.monitor.positions``; None: no consumer
        yet), ``recovery`` Faust's table recovery."""
        self.assigned_partitions.set(len(self.assigned))
        self.rocksdb_bytes.set(_size(Path(settings.state_dir)))
        self.observe_recovery(recovery)
        if positions is None:
            return
        now = time.monotonic()
        for partition, (committed, high) in positions.items():
            done = 0 if committed is None else committed  # committed: the next to read
            position = self.positions.get(partition, done)
            self.lag.labels(str(partition)).set(max(0, high - position))
            self.observe_progress(partition, committed, max(0, high - done), now)
        for partition in [p for p in self.progress if p not in positions]:
            del self.progress[partition]
            self.stalled.remove(str(partition))
            self.committed_lag.remove(str(partition))
        self.refresh_live()

    def observe_recovery(self, recovery: Any) -> None:
        """Faust's table recovery (``app.tables.recovery``; None: not started): whether
        it runs and how many changelog records it still has to read."""
        if recovery is None:
            return
        try:
            active = recovery.active_remaining_total()
            standby = recovery.standby_remaining_total()
        except Exception:  # highwaters not known yet mid-rebalance: keep the last figures
            return
        self.recovering.set(1 if getattr(recovery, "in_recovery", False) else 0)
        self.restore_remaining.labels("active").set(max(0, active))
        self.restore_remaining.labels("standby").set(max(0, standby))

    def forget_progress(self) -> None:
        """A new assignment (called once per completed rebalance, so it counts them):
        stalls are counted from it, and partitions that moved away leave the exported
        series."""
        self.rebalances.inc()
        for partition in self.progress:
            self.stalled.remove(str(partition))
            self.committed_lag.remove(str(partition))
        self.progress.clear()

    def observe_progress(
        self, partition: int, committed: int | None, waiting: int, now: float
    ) -> None:
        """Track whether a partition's committed offset moves while records wait."""
        self.committed_lag.labels(str(partition)).set(waiting)
        held = self.progress.get(partition)
        if held is not None and held[0] is not None and committed is not None:
            self.committed_records.inc(max(0, committed - held[0]))
        if held is None or held[0] != committed or not waiting:
            self.progress[partition] = (committed, now, waiting, now)
        else:
            self.progress[partition] = (committed, held[1], waiting, now)
        self.stalled.labels(str(partition)).set(1 if self.stalled_for(partition, now) else 0)

    def stalled_for(self, partition: int, now: float | None = None) -> float:
        """Seconds the partition's committed offset has stood still past the allowance
        while records wait (as of ``now``, else the last refresh); 0 when it is moving
        (or nothing waits)."""
        held = self.progress.get(partition)
        if held is None or not held[2]:
            return 0.0
        still = (held[3] if now is None else now) - held[1]
        return still if still >= self.settings.stall_seconds else 0.0

    def refresh_live(self) -> None:
        """Gauges read from memory, at every scrape."""
        state = self.redis
        if state is not None:
            self.redis_retrying.set(1 if state.retrying else 0)
            self.redis_pending.set(state.pending)
            self.redis_pending_bytes.set(state.pending_bytes)
            self.redis_oom.set(1 if state.oom else 0)
            if state.rejected > self.redis_rejected_seen:  # a Counter only goes up
                self.redis_rejected.inc(state.rejected - self.redis_rejected_seen)
            self.redis_rejected_seen = state.rejected
        self.assigned_partitions.set(len(self.assigned))
        figures = self.census.total()
        self.sessions_faulted.set(figures.faulted_sessions)
        self.state_sessions.set(figures.sessions)
        self.sessions_live.set(figures.sessions)
        retired = dict(zip(("folded", "duplicate", "faulted"), figures.retired, strict=True))
        for outcome in ("folded", "duplicate", "faulted", "dead_lettered"):
            value = getattr(figures, outcome) + retired.get(outcome, 0)
            self.state_events.labels(outcome).set(value)
        self.census_walking.set(len(self.census.walking))
        self.control_unreadable.set(1 if self.control_problem else 0)
        self.ready_gauge.set(0 if self.not_ready() else 1)

    # -- probes -----------------------------------------------------------------------
    def not_ready(self) -> list[str]:
        reasons = []
        if self.fatal:
            reasons.append(f"stopping: {self.fatal}")
        # A member whose assignment is empty (more workers than partitions, a standby)
        # is ready: it is in the group and takes over when partitions move to it.
        if not self.recovered:
            reasons.append("no assignment recovered yet")
        if self.redis is None or self.redis.retrying:
            if self.redis is None:
                reasons.append("redis not connected yet")
            else:  # the kind of outage: out of memory is not "unreachable"
                kind = self.redis.reason
                if kind in ("", "connection", "timeout"):
                    reasons.append("redis not reachable")
                else:
                    reasons.append(f"redis refuses writes ({kind}): updates queued")
        for partition, (committed, _, waiting, _) in sorted(self.progress.items()):
            still = self.stalled_for(partition)
            if still:
                reasons.append(
                    f"partition {partition} stalled: committed offset {committed} has not"
                    f" moved for {still:.0f} s while {waiting:,} records wait"
                )
        if self.control_problem:
            reasons.append(f"control record: {self.control_problem}")
        return reasons


def _size(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):  # a file compacted away mid-walk
                total += os.stat(os.path.join(root, name)).st_size
    return total


def application(metrics: Metrics) -> web.Application:
    async def metrics_page(_: web.Request) -> web.Response:
        metrics.refresh_live()
        body = generate_latest(metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def livez(_: web.Request) -> web.Response:
        # Answering at all proves the event loop turns; a fatal error means restart us.
        if metrics.fatal:
            return web.json_response({"live": False, "reason": metrics.fatal}, status=503)
        return web.json_response({"live": True})

    async def readyz(_: web.Request) -> web.Response:
        reasons = metrics.not_ready()
        metrics.ready_gauge.set(0 if reasons else 1)
        body = {"ready": not reasons, "reasons": reasons, "partitions": metrics.assigned}
        return web.json_response(body, status=503 if reasons else 200)

    web_app = web.Application()
    web_app.router.add_get("/metrics", metrics_page)
    web_app.router.add_get("/livez", livez)
    web_app.router.add_get("/readyz", readyz)
    return web_app


async def serve(metrics: Metrics, host: str, port: int) -> web.AppRunner:
    runner = web.AppRunner(application(metrics), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port, reuse_address=True)
    await site.start()
    log.info("metrics and probes on http://%s:%d (/metrics, /livez, /readyz)", host, port)
    return runner
