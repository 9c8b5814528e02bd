"""The worker: one Faust agent folding batches of session events through the pure core into
the sessions table, and publishing every change to Kafka and Redis.

``Worker.start`` is the one start-up sequence (``stream worker`` and ``faust -A stream.app``
both call it); ``Worker.commit`` states the order that makes a commit safe. The parts it
wires: the consumer (``stream.app.fetch``, ``stream.app.batching``: records in bulk), the table
(``stream.app.table``), the producer (``stream.app.producer``: a batch's records out),
the publisher (``stream.publish``: Kafka, then Redis) and the metrics (``stream.ops``).

Faust reads its settings only from what is passed here (``env={}``): the environment
cannot flip the at-least-once guarantee, the loopback web bind or the empty-stream wait.
"""

import asyncio
import logging
import os
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import faust
from faust.types import TP

from stream import native
from stream.app import batching, fetch, inflate
from stream.app.monitor import LeanMonitor
from stream.app.producer import BatchSender, Outbox
from stream.app.table import RAW, SessionTable
from stream.config import Settings
from stream.ops import control, metrics
from stream.ops.admin import ensure_topics
from stream.publish.publisher import Publisher
from stream.publish.redis_sink import PermanentRedisError, RedisSink
from stream.runtime import tune_gc, use_uvloop, worker_young
from stream.session import codec
from stream.session.batch import BatchResult, Counts, Message, fold_batch
from stream.session.expiry import Deadlines, sweep
from stream.session.input import reset_generation
from stream.session.partition import PARTITION_KEY, PartitionRow

# A sweep takes at most this many due sessions at a time, and the agent's batches go
# between two such steps (the lock is fair), so a million sessions expiring at once are
# worked off in steps of a few tens of milliseconds (docs/notes/013).
SWEEP_STEP = 256

log = logging.getLogger("stream.worker")


def faust_app(settings: Settings, partitions: int) -> faust.App:
    """The Faust app as the worker runs it: at-least-once, RocksDB tables, acks=all, the
    lean monitor, and every timing from ``settings``."""
    use_uvloop()  # before the worker creates its event loops
    return faust.App(
        settings.app_id,
        env={},  # our settings only: see the module docstring
        broker=[f"kafka://{host.strip()}" for host in settings.bootstrap_servers.split(",")],
        broker_credentials=_credentials(settings),
        store="rocksdb://",
        datadir=settings.state_dir,
        topic_partitions=partitions,
        topic_replication_factor=settings.replication_factor,
        table_standby_replicas=settings.standby_replicas,
        processing_guarantee="at_least_once",
        consumer_auto_offset_reset="earliest",
        web_enabled=settings.web_enabled,
        web_port=settings.web_port,
        web_bind="127.0.0.1",
        producer_acks=-1,
        producer_linger=settings.producer_linger,
        producer_max_request_size=1_048_576,
        # A batch's records leave as one record batch per topic partition (BatchSender):
        # let one hold a few hundred rows or updates, still well under the request size.
        producer_max_batch_size=262_144,
        broker_commit_interval=settings.commit_interval,
        broker_session_timeout=settings.session_timeout,
        broker_heartbeat_interval=min(3.0, settings.session_timeout / 3),
        broker_max_poll_interval=settings.max_poll_interval,
        stream_wait_empty=True,
        # The agent's queue holds two full batches: the hand-over waits for room beyond
        # that (fetch.BulkConsumer._room), and a batch can grow to its cap under load.
        stream_buffer_maxsize=max(4096, 2 * settings.batch_max),
        Monitor=LeanMonitor,
    )


def _credentials(settings: Settings) -> Any:
    security = settings.kafka
    if security.uses_sasl:
        return faust.SASLCredentials(
            username=security.sasl_username,
            password=security.sasl_password,
            mechanism=security.sasl_mechanism,
            ssl_context=security.ssl_context() if security.uses_ssl else None,
        )
    if security.uses_ssl:
        return faust.SSLCredentials(security.ssl_context())
    return None


def _unread(m: Any) -> Message:
    """A record batch the fetch could not inflate within bounds (``inflate.Unread``)."""
    value: inflate.Unread = m.value
    return Message(
        m.key, bytes(value), m.topic, m.partition, m.offset, (), value.reason, value.records
    )


def _headers(raw: Any) -> list[tuple[str, bytes | None]]:
    """Record headers as (name, value) pairs, whichever shape Faust hands them in."""
    if not raw:
        return []
    items = raw.items() if isinstance(raw, dict) else raw
    return [(str(name), value) for name, value in items]


@dataclass
class Flight:
    """A batch between its fold and its ack (``Worker.commit``)."""

    sent: "asyncio.Future[None]"  # its rows are in the store: the next batch may fold
    delivered: "asyncio.Future[None]"  # the broker confirmed its records
    after: "Flight | None"  # the batch before it, while this one has not sent
    done: "asyncio.Task[None]" = field(init=False)  # the commit, through the ack


class Worker:
    """One worker process: the Faust app (``app``) and everything its agent drives."""

    def __init__(
        self,
        settings: Settings,
        partitions: int | None = None,
        control_problems: tuple[str, ...] = (),
    ) -> None:
        self.settings = settings
        self.partitions = partitions or settings.partitions
        self.app = app = faust_app(settings, self.partitions)
        # The input topic's records reach the agent in bulk (stream.app.fetch), inflated
        # within bounds whatever a producer compressed (stream.app.inflate).
        fetch.install(
            app, [settings.input_topic], settings.fetch_max_wait, settings.max_buffered_bytes
        )
        inflate.install(inflate.Bounds(settings.max_inflated_bytes, settings.max_inflated_bytes))
        self.source = app.topic(settings.input_topic, partitions=self.partitions, **RAW)
        self.table = SessionTable(
            app, self.partitions, settings.rocksdb_write_buffer, settings.keep_records
        )
        sender = BatchSender(app)
        self.outbox = Outbox(sender, self.table, settings.output_topic, settings.dlq_topic)
        self.limits = settings.limits
        self.totals = Counts()
        self.deadlines = Deadlines()  # the expiry index: sessions by last activity
        self.stream_time: dict[int, int | None] = {}  # per partition, after the last batch
        self.lock = asyncio.Lock()  # a batch and a sweep step never interleave
        self._sweep_wanted = asyncio.Event()
        self._held: set[int] = set()  # partitions held after the last rebalance
        self.stats = metrics.Metrics.create(settings)
        self.stats.control_problem = "; ".join(control_problems)[:500]
        self._publisher: Publisher | None = None
        self._last: Flight | None = None  # the batch taken last (Worker.take)
        self._wire()

    @classmethod
    def start(cls, settings: Settings) -> "Worker":
        """The one start-up sequence. Before Faust opens RocksDB: the topics exist (the
        table takes the input's partition count), local state a rebuild discarded is
        dropped, and the control record's generation is taken (``ops.control``). Raises
        ``KafkaException`` or ``RuntimeError`` with the reason when that cannot be done."""
        partitions = ensure_topics(settings)
        settings, problems = control.worker_settings(settings)
        return cls(settings, partitions, problems)

    # -- one batch -------------------------------------------------------------------
    def take(self, batch: list[Any], after: "Flight | None" = None) -> "Flight":
        """``commit`` of ``batch`` as a task; ``after``: the batch before it, still landing
        (its delivery and its Redis write then overlap this batch's fold)."""
        loop = asyncio.get_running_loop()
        flight = Flight(loop.create_future(), loop.create_future(), after)
        flight.done = asyncio.ensure_future(self.commit(batch, flight))
        self._last = flight
        return flight

    async def commit(self, batch: list[Any], flight: "Flight") -> None:
        """One batch, in the order that makes a commit safe:

        1. fold: every message once through the pure core (``session.batch.fold_batch``),
           which cannot raise for what a message holds;
        2. rows: each touched session's row into its partition's store and changelog;
        3. updates: one coalesced update per touched session to the output topic;
        4. dead letters: what could not be read, with its reason;
        5. delivery: wait until the broker confirmed every record of 2-4 (re-sent with
           backoff; the batch is held, never committed past);
        6. Redis: the updates in one round trip, guarded (queued while Redis is away);
        7. offsets: the batch's events acked, so Faust's next commit may pass them.

        With ``flight.after``, the batch before it, this one is folded while that one waits for
        the broker and Redis (``_agent``: when a whole batch is waiting behind it). The
        fold reads what that batch put in the store; this batch's rows and records follow
        once that batch's records are confirmed (a re-send of those must never overtake
        these), and its Redis write and ack once that batch is done. ``flight`` says when
        this batch's rows are in (the next batch may fold) and when it is delivered.

        Agent concurrency stays 1, so a commit never passes a message still being folded
        either (faust-streaming #606).
        """
        try:
            await self._commit_batch(batch, flight)
        except BaseException as error:
            for future in (flight.sent, flight.delivered):  # the batch after it stops too
                if not future.done():
                    future.set_exception(error)
                    future.exception()  # retrieved: the task's own error is the one raised
            raise

    async def _commit_batch(self, batch: list[Any], flight: "Flight") -> None:
        stats = self.stats
        after = flight.after
        cpu = time.thread_time  # the loop's thread: how much of a step was work, not waiting
        if after is not None:
            # The batch before it is sent: its records leave before this fold holds the
            # loop, so their round trip runs alongside the fold instead of after it.
            await self.publisher.left()
        async with self.lock:
            messages = [
                Message(m.key, m.value, m.topic, m.partition, m.offset, _headers(m.headers))
                if type(m.value) is not inflate.Unread
                else _unread(m)
                for m in batch
            ]
            if self.limits.resets:
                await self._claimed(messages)
            started = cpu()
            with stats.fold_seconds.time():
                kept = self.table.kept.recall
                result = fold_batch(messages, self.table.load, self.limits, kept)  # 1
            folded = cpu()
            publisher = self.publisher
            if after is not None:
                await after.delivered
            sending = time.perf_counter()
            records = publisher.records(result)
            try:  # no await before the rows go in (send): see observe_rows
                stats.observe_rows(result)
            except Exception:
                log.exception("census of a batch not moved")
            confirmed = publisher.send(result, records)  # 2, 3, 4
            self.table.kept.remember(result.sessions)  # the next batch's fold recalls them
            flight.sent.set_result(None)
            flight.after = None  # what _landed follows only while a batch has not sent
        sent = cpu()
        await confirmed  # 5
        flight.delivered.set_result(None)
        delivered = cpu()
        if after is not None:
            await after.done  # its Redis write and its ack go first
        with stats.redis_seconds.time():
            await publisher.cache(result, records)  # 6
        stats.publish_seconds.observe(time.perf_counter() - sending)
        cached = cpu()
        self.totals.add(result.counts)
        self._log_resets(result)
        self._file(result)
        try:  # the batch is delivered: nothing in the metrics may keep it from its ack
            stats.observe_batch(messages, result, batch[-1].timestamp)
            if after is None:
                stats.observe_loop_cpu(folded - started, delivered - folded, cached - delivered)
            else:  # its waits overlapped other batches' work: only its own steps count
                stats.observe_loop_cpu(folded - started, sent - folded, None)
        except Exception:
            log.exception("metrics of a batch not recorded")
        batching.ack(batch, self.app.consumer)  # 7

    async def _landed(self) -> None:
        """With the lock held: wait until every batch folded so far is acked (its waits
        may still run while the next batch is folded). A batch taken and not yet folded
        waits for the lock, and so for the holder's work to be done first."""
        flight = self._last
        while flight is not None and not flight.sent.done():
            flight = flight.after
        if flight is not None and not flight.done.done():
            await asyncio.shield(flight.done)  # each batch is acked after the one before

    # -- expiry --------------------------------------------------------------------
    def _file(self, result: BatchResult) -> None:
        """The batch's sessions into the expiry index, its stream times noted."""
        if self.limits.session_ttl <= 0:
            return
        deadlines = self.deadlines
        for change in result.sessions:
            deadlines.set(change.partition, change.key, change.touched)
        for part in result.partitions:
            self.stream_time[part.partition] = part.now
        self._sweep_wanted.set()

    def _due(self, partition: int) -> bool:
        publisher = self._publisher
        if publisher is not None and publisher.state.retrying:
            return False  # Redis is away: a sweep would only queue drops (Publisher.expire)
        now = self.stream_time.get(partition)
        first = self.deadlines.next_due(partition)
        return now is not None and first is not None and first < now - self.limits.session_ttl

    async def sweep_step(self) -> int:
        """Expire up to ``SWEEP_STEP`` due sessions of one walked partition (the first
        with any due); returns how many left (0: those due were alive, filed again),
        -1 when no partition had any due. Holds the lock for this step only."""
        ttl = self.limits.session_ttl
        async with self.lock:
            await self._landed()
            for partition in self.stats.census.walked_partitions():
                if not self._due(partition):
                    continue
                now = self.stream_time[partition]
                assert now is not None
                keys = self.deadlines.due(partition, now - ttl, SWEEP_STEP)
                if not keys:
                    continue
                result = sweep(partition, keys, self.table.load, ttl, self.limits.folds)
                for key, touched in result.alive:
                    self.deadlines.set(partition, key, touched)
                removed = await self.publisher.expire(result)
                if not removed:
                    # Redis is away: the drops wait in its queue and the rows stay until a
                    # later sweep finds them again (counted once: the cursor moved).
                    for expired in result.expired:
                        self.deadlines.set(partition, expired.key, expired.touched)
                try:
                    self.stats.observe_sweep(result, removed)
                except Exception:
                    log.exception("metrics of a sweep not recorded")
                return len(result.expired) if removed else -1
        return -1

    async def _sweeper(self) -> None:
        """Work off due sessions a step at a time, between batches, whenever any are due
        (the batches say when: only the input moves a partition's stream time)."""
        if self.limits.session_ttl <= 0:
            return
        while True:
            await self._sweep_wanted.wait()
            self._sweep_wanted.clear()
            idle = 0  # steps in a row that expired nothing
            while any(self._due(p) for p in self.stats.census.walked_partitions()):
                started = time.monotonic()
                gone = await self.sweep_step()
                # A step whose candidates were all alive files them again and lets the
                # next partition's due sessions through; stopping there would leave those
                # until the next batch. A few such steps in a row: the next batch says more.
                idle = idle + 1 if gone <= 0 else 0
                if gone < 0 or idle > 8:
                    break
                if gone > 0:
                    log.debug(
                        "expired %d sessions in %.1f ms", gone, 1e3 * (time.monotonic() - started)
                    )
                await asyncio.sleep(0)  # batches and heartbeats between steps

    def _log_resets(self, result: BatchResult) -> None:
        for note in result.resets:  # every reset, applied or not, leaves a line
            log.warning(
                "reset %s session %r to generation %d (it was at %d) from %s[%d]@%d",
                "applied:" if note.applied else "ignored, not above its own:",
                note.session_id,
                note.gen,
                note.previous,
                self.settings.input_topic,
                note.partition,
                note.offset,
            )

    async def _agent(self, stream: Any) -> None:
        """Each batch committed in turn. A worker a whole batch (``STREAM_BATCH_MAX``)
        behind folds the next batch while the last one waits for the broker and Redis,
        so it spends its core on folding instead of waiting (``commit``; note 016);
        otherwise each batch is committed before the next is taken, which publishes
        sooner at a fraction of capacity."""
        settings = self.settings
        try:
            async for batch in batching.batches(
                stream, settings.batch_max, settings.batch_within, settings.batch_sessions
            ):
                behind = getattr(batch, "behind", 0) >= settings.batch_max
                last = self._last
                if last is not None and last.done.done():
                    last.done.result()  # what the batch before raised stops the agent here
                    last = None
                flight = self.take(batch, last)
                await asyncio.shield(flight.sent if behind else flight.done)
            await self._landed()
        except asyncio.CancelledError:
            # Shutdown (SIGTERM): finish the batches in hand and ack them, so the final
            # commit covers them instead of leaving them to be redelivered.
            last = self._last
            if last is not None:
                await asyncio.wait_for(last.done, 30)
            raise

    # -- Redis -----------------------------------------------------------------------
    @property
    def publisher(self) -> Publisher:
        if self._publisher is None:  # on the worker's loop: the Redis client binds to it
            self._publisher = Publisher(self.settings, self.outbox, RedisSink(self.settings))
            self._publisher.on_permanent = self._stop_on_permanent
            self.stats.redis = self._publisher.state
        return self._publisher

    def _stop_on_permanent(self, error: BaseException) -> None:
        # A permanent refusal is a configuration problem: exit non-zero, loudly, rather
        # than loop. Hard exit: the failing batch must not be acked, and a graceful stop
        # would wait for it forever. Earlier batches are delivered; whatever they had not
        # committed yet is redelivered to the next owner and counted once (row offsets).
        log.critical("stopping: %s", error)
        self.stats.fatal = str(error)
        print(f"stream worker: stopped: {error}", file=sys.stderr, flush=True)
        logging.shutdown()
        os._exit(3)

    async def reseed(self, partitions: list[int], why: str) -> None:
        """Republish the rows of ``partitions`` to Redis, guarded (never backwards), less
        the sessions past their TTL."""
        publisher = self.publisher
        sent = 0
        for partition in sorted(partitions):
            clock = PartitionRow.decode(self.table.load(PARTITION_KEY, partition))
            sent += await publisher.reseed(self.table.rows(partition), partition, clock)
        # Marked only once really written: with Redis away the updates stay queued, the
        # marker stays missing, and the next check re-seeds again.
        if await publisher.flush(60):
            try:
                await publisher.mark(sorted(partitions))
            except Exception as error:  # transient: the next check tries again
                log.warning("could not mark re-seeded partitions: %s", error)
        publisher.state.reseeds += 1
        log.info("re-seeded Redis from %d partitions (%d sessions): %s", len(partitions), sent, why)

    async def _watch_redis(self) -> None:
        """Re-seed when Redis lost what we published (a restart without persistence, a
        failover to an empty replica, FLUSHALL): the marker key is gone."""
        publisher = self.publisher
        while True:
            await asyncio.sleep(self.settings.redis_check_interval)
            try:
                lost = await publisher.unmarked(self.assigned())
                if lost:
                    await self.reseed(lost, "Redis lost its data (marker missing)")
            except PermanentRedisError:
                return
            except Exception as error:  # transient: the publisher's queue notes it
                log.debug("marker check failed: %s", error)

    # -- assignment, metrics, control ------------------------------------------------
    def assigned(self) -> list[int]:
        actives = self.app.assignor.assigned_actives()
        return [tp.partition for tp in actives if tp.topic == self.settings.input_topic]

    async def count_rows(self, partitions: list[int]) -> None:
        """The census and the expiry index of newly assigned partitions, walked in the
        background a chunk at a time; a partition that moves away meanwhile is left (its
        walk token changes). Sweeps of a partition start once its walk is complete."""
        census = self.stats.census
        ttl = self.limits.session_ttl
        folds = self.limits.folds
        for partition in partitions:
            token = census.walking.get(partition)
            if token is None:
                continue
            clock = PartitionRow.decode(self.table.load(PARTITION_KEY, partition))
            self.stream_time[partition] = clock.now
            for n, (key, row) in enumerate(self.table.rows(partition), 1):
                if census.walking.get(partition) is not token:
                    break
                census.visit(partition, key, row)
                if ttl > 0 and key != PARTITION_KEY:
                    try:
                        touched = clock.touched(codec.decode(row, folds))
                    except codec.RowError:
                        touched = None
                    if touched is not None and not self.deadlines.filed(partition, key):
                        self.deadlines.set(partition, key, touched)
                if n % 2000 == 0:
                    await asyncio.sleep(0)  # let batches and heartbeats through
            else:
                census.walked(partition)
                self._sweep_wanted.set()

    async def recovered(self) -> None:
        """The group's assignment is recovered: count its rows, re-seed Redis from them."""
        stats = self.stats
        stats.recovered = True
        stats.forget_progress()  # a stall is counted from the assignment, not across it
        assigned = self.assigned()
        self.deadlines.keep(assigned)
        for partition in [p for p in self.stream_time if p not in assigned]:
            del self.stream_time[partition]
        self.app.add_future(self.count_rows(stats.census.assign(assigned)))
        moved_in = sorted(set(assigned) - self._held)
        self._held = set(assigned)
        if self.settings.reseed_on_assign and moved_in:
            # Anything a crash kept from Redis (queued updates of a dead worker) is in the
            # rows of the partitions that moved here: republish them, guarded, so Redis
            # equals the table again. Partitions this worker kept need nothing.
            self.app.add_future(self.reseed(moved_in, "partitions assigned"))

    async def _claimed(self, messages: list[Message]) -> None:
        """Before a batch naming a reset generation above the highest claimed one this
        worker knows: read the control topic to its end again. ``stream produce --reset``
        writes its claim before its first reset record, so a claim that exists is seen;
        a generation still above it was never claimed and the fold dead-letters it. A
        producer that keeps naming unclaimed generations costs one control read per batch
        that holds one (tens of milliseconds), never a session."""
        wanted = max((reset_generation(m.headers) for m in messages if m.headers), default=0)
        if wanted <= self.limits.reset_ceiling:
            return
        try:
            found = await asyncio.to_thread(control.read_control_log, self.settings, 10.0)
        except Exception as error:  # the broker is away: judged on what was read before
            log.error("control topic not read for a reset: %s", error)
            return
        ceiling = found.control.worker_generation(self.settings.generation)
        if ceiling > self.limits.reset_ceiling:
            log.info("resets up to generation %d claimed on the control topic", ceiling)
            self.limits = replace(self.limits, reset_ceiling=ceiling)

    async def watch_control(self) -> None:
        """Re-read the control topic: a record refused later is said loudly too."""
        settings = self.settings
        try:
            found = await asyncio.to_thread(control.read_control_log, settings, 10.0)
        except Exception as error:  # the broker is away: the consumer says so already
            log.debug("control topic not read: %s", error)
            return
        problems = list(found.problems)
        floor = control.local_generation(Path(settings.state_dir))
        if found.control.generation < floor:
            problems.append(f"generation {found.control.generation} is below {floor}, kept")
        problem = "; ".join(problems)[:500]
        if problem and problem != self.stats.control_problem:
            log.error("%s: %s", control.control_topic(settings), problem)
        self.stats.control_problem = problem

    def _wire(self) -> None:
        """The agent, its tasks, timers and signal handlers, on the Faust app."""
        app, settings, stats = self.app, self.settings, self.stats
        app.agent(self.source, concurrency=1, name="fold_sessions")(self._agent)

        @app.task  # type: ignore[untyped-decorator]
        async def _tune_gc() -> None:  # once the app's long-lived objects exist
            tune_gc(freeze=True, young=worker_young(settings.batch_max))
            log.info("%s", native.status())  # which fold runs: compiled or pure Python

        @app.task  # type: ignore[untyped-decorator]
        async def _watch_redis() -> None:
            await self._watch_redis()

        @app.task  # type: ignore[untyped-decorator]
        async def _sweeper() -> None:
            await self._sweeper()

        @app.task  # type: ignore[untyped-decorator]
        async def _serve_metrics() -> None:
            if settings.metrics_port:
                app.metrics_runner = await metrics.serve(  # type: ignore[attr-defined]
                    stats, settings.metrics_bind, settings.metrics_port
                )

        @app.on_partitions_assigned.connect  # type: ignore[arg-type]
        async def _on_assigned(sender: Any, assigned: set[TP], **kwargs: Any) -> None:
            topic = settings.input_topic
            stats.assigned = sorted(tp.partition for tp in assigned if tp.topic == topic)

        @app.on_rebalance_complete.connect  # type: ignore[arg-type]
        async def _recovered(sender: Any, **kwargs: Any) -> None:
            await self.recovered()

        @app.timer(interval=30.0)  # type: ignore[untyped-decorator]
        async def _watch_control() -> None:
            await self.watch_control()

        @app.timer(interval=10.0)  # type: ignore[untyped-decorator]
        async def _report() -> None:
            log.info("totals %s", self.totals.as_dict())
            stats.refresh(app, self.table, settings)

        @app.on_before_shutdown.connect
        def _final(sender: Any, /, *args: Any, signal: Any, **kwargs: Any) -> None:
            log.info("final totals %s", self.totals.as_dict())


def build_app(
    settings: Settings, partitions: int | None = None, control_problems: tuple[str, ...] = ()
) -> faust.App:
    """The Faust app of a worker on ``settings`` as they are (no start-up checks)."""
    return Worker(settings, partitions, control_problems).app


__all__ = ["Worker", "build_app", "faust_app"]
