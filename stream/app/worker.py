"""The worker: one Faust agent folding batches of session events through the pure core into
the sessions table, and publishing every change to Kafka and Redis.

``assemble`` builds its parts in order, hands them to ``Worker`` and, as its last step,
wires them to Faust (``Worker.wire``: the agent, tasks, timers, rebalance signals; the
constructor only keeps its parts). It is the one way a worker is built: ``stream worker``
through ``stream.app.run``, ``faust -A`` through ``stream.app.entry``, the tests on the
settings they need. The parts: the consumer in bulk
(``stream.app.fetch``, ``batching``, ``inflate``), the table (``table``), the outbox
(``producer``), the metrics (``stream.ops.metrics``), the control topic's claims
(``claims``), the publisher (``stream.publish``: Kafka, then Redis), the commit path
(``commit``: ``Committer.commit`` states the order that makes a commit safe) and expiry
(``expiry``). ``stream.app.run`` is the one start-up sequence around it.

Faust reads its settings only from what is passed here (``env={}``): the environment
cannot flip the at-least-once guarantee, the loopback web bind or the empty-stream wait.
"""

import asyncio
import logging
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import faust
from faust.types import TP

from stream import native
from stream.app import batching, fetch, inflate, patches, restore
from stream.app.claims import Claims
from stream.app.commit import Committer, Parts
from stream.app.expiry import Expiry
from stream.app.monitor import LeanMonitor, positions, recovery
from stream.app.producer import BatchSender, Outbox
from stream.app.table import RAW, SessionTable
from stream.config import Settings
from stream.ops import metrics
from stream.publish.publisher import Publisher
from stream.publish.redis_sink import PermanentRedisError, RedisSink
from stream.runtime import tune_gc, tune_switch, use_uvloop, worker_young
from stream.session.batch import BatchResult, Counts, Message
from stream.session.partition import PARTITION_KEY, PartitionRow

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
        # A static member (the pod name) back within the session timeout takes its own
        # partitions back without a rebalance; the client id shows it in `stream lag`.
        consumer_group_instance_id=settings.instance_id,
        broker_client_id=settings.worker_id,
        broker_session_timeout=settings.session_timeout,
        # Members learn of a rebalance on a heartbeat: this bounds how long one waits for them.
        broker_heartbeat_interval=min(settings.heartbeat_interval, settings.session_timeout / 3),
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


class OnLoop:
    """A part built on first use, on the worker's running loop (a Redis client binds to
    the loop it first runs on, and Faust creates that loop when it starts)."""

    def __init__(self, make: Callable[[], Publisher]) -> None:
        self.make = make
        self.built: Publisher | None = None

    def __call__(self) -> Publisher:
        if self.built is None:
            self.built = self.make()
        return self.built


class Ledger:
    """What a committed batch leaves behind (the commit path's ``committed``): the totals
    the worker logs, a line per reset, its sessions in the expiry index."""

    def __init__(self, input_topic: str, expiry: Expiry) -> None:
        self.input_topic = input_topic
        self.expiry = expiry
        self.totals = Counts()

    def __call__(self, messages: list[Message], result: BatchResult) -> None:
        """A batch is delivered and in Redis, about to be acked (``Committer.commit``)."""
        self.totals.add(result.counts)
        self._log_resets(result)
        self.expiry.file(result)

    def _log_resets(self, result: BatchResult) -> None:
        for note in result.resets:  # every reset, applied or not, leaves a line
            log.warning(
                "reset %s session %r to generation %d (it was at %d) from %s[%d]@%d",
                "applied:" if note.applied else "ignored, not above its own:",
                note.session_id,
                note.gen,
                note.previous,
                self.input_topic,
                note.partition,
                note.offset,
            )


class Worker:
    """One worker process: the Faust app and the parts its agent drives, handed to it
    (``assemble`` builds the real ones); ``wire`` puts them on the app."""

    def __init__(
        self,
        settings: Settings,
        app: faust.App,
        source: Any,
        table: SessionTable,
        stats: metrics.Metrics,
        claims: Claims,
        publisher: OnLoop,
        committer: Committer,
        expiry: Expiry,
        ledger: Ledger,
    ) -> None:
        self.settings = settings
        self.app = app
        self.source = source
        self.table = table
        self.stats = stats
        self.claims = claims
        self.publisher = publisher
        self.committer = committer
        self.expiry = expiry
        self.ledger = ledger
        self.wired = False
        self._held: set[int] = set()  # partitions held after the last rebalance

    async def _agent(self, stream: Any) -> None:
        settings = self.settings
        taken = batching.batches(stream, settings.batch_max, settings.batch_sessions)
        await self.committer.run(taken, settings.batch_max)

    # -- Redis -----------------------------------------------------------------------
    async def reseed(self, partitions: list[int], why: str) -> None:
        """Republish the rows of ``partitions`` to Redis, guarded (never backwards), less
        the sessions past their TTL."""
        publisher = self.publisher()
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
        publisher = self.publisher()
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
        expiry = self.expiry
        for partition in partitions:
            token = census.walking.get(partition)
            if token is None:
                continue
            clock = expiry.clock(partition)
            for n, (key, row) in enumerate(self.table.rows(partition), 1):
                if census.walking.get(partition) is not token:
                    break
                census.visit(partition, key, row)
                expiry.visit(partition, key, row, clock)
                if n % 250 == 0:  # ~10 ms: the start-up after a restore waits on no more
                    await asyncio.sleep(0)  # let batches and heartbeats through
            else:
                census.walked(partition)
                expiry.wanted.set()

    async def recovered(self) -> None:
        """The group's assignment is recovered: count its rows, re-seed Redis from them."""
        stats = self.stats
        stats.recovered = True
        stats.forget_progress()  # a stall is counted from the assignment, not across it
        assigned = self.assigned()
        self.expiry.keep(assigned)
        self.publisher()  # built now: /readyz need not wait for the re-seed to begin
        self.app.add_future(self._after_recovery(self.count_rows(stats.census.assign(assigned))))
        moved_in = sorted(set(assigned) - self._held)
        self._held = set(assigned)
        if self.settings.reseed_on_assign and moved_in:
            # Anything a crash kept from Redis (queued updates of a dead worker) is in the
            # rows of the partitions that moved here: republish them, guarded, so Redis
            # equals the table again. Partitions this worker kept need nothing.
            self.app.add_future(self._after_recovery(self.reseed(moved_in, "partitions assigned")))

    async def _after_recovery(self, work: Awaitable[None]) -> None:
        """``work`` once Faust's steps after the first restore (the seek, the flow resumed)
        are done: walks and re-seeds of many rows ran first and held them up by ~50 ms at
        150,000 rows (docs/notes/021). ``completed`` stays set after the first."""
        tables: Any = self.app.tables  # Faust's TableManager: its recovery is untyped
        await tables.recovery.completed.wait()
        await work

    def wire(self) -> "Worker":
        """The agent, its tasks, timers and signal handlers, on the Faust app (once: wired
        twice, every task and timer would run twice)."""
        if self.wired:
            raise RuntimeError("the worker is wired to its Faust app already")
        self.wired = True
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
            await self.expiry.run(self.committer)

        serving: list[bool] = []  # the metrics server was started

        async def serve_metrics() -> None:
            if settings.metrics_port and not serving:
                serving.append(True)
                app.metrics_runner = await metrics.serve(  # type: ignore[attr-defined]
                    stats, settings.metrics_bind, settings.metrics_port
                )

        @app.task  # type: ignore[untyped-decorator]
        async def _serve_metrics() -> None:
            await serve_metrics()

        @app.on_partitions_assigned.connect  # type: ignore[arg-type]
        async def _on_assigned(sender: Any, assigned: set[TP], **kwargs: Any) -> None:
            topic = settings.input_topic
            stats.assigned = sorted(tp.partition for tp in assigned if tp.topic == topic)
            # Up before the first restore rather than after it (app tasks start once
            # recovery is over): /readyz answers 503 and the restore gauge moves while it
            # runs (docs/notes/021).
            await serve_metrics()

        @app.on_rebalance_complete.connect  # type: ignore[arg-type]
        async def _recovered(sender: Any, **kwargs: Any) -> None:
            await self.recovered()

        @app.timer(interval=30.0)  # type: ignore[untyped-decorator]
        async def _watch_control() -> None:
            await self.claims.watch()

        @app.timer(interval=10.0)  # type: ignore[untyped-decorator]
        async def _report() -> None:
            log.info("totals %s", self.ledger.totals.as_dict())
            stats.refresh(settings, positions(app, settings.input_topic), recovery(app))

        @app.on_before_shutdown.connect
        def _final(sender: Any, /, *args: Any, signal: Any, **kwargs: Any) -> None:
            log.info("final totals %s", self.ledger.totals.as_dict())

        return self


def assemble(
    settings: Settings, partitions: int | None = None, control_problems: tuple[str, ...] = ()
) -> Worker:
    """A worker's parts, built in this order and handed to it (``stream.app.run`` prepares
    the topics and the settings first):

    1. the Faust app: at-least-once, RocksDB tables, acks=all;
    2. the input topic and the sessions table (RocksDB, its changelog);
    3. the outbox: rows, updates and dead letters out through the producer in batches;
    4. the metrics (``/metrics``, ``/readyz``), with what start-up found on the control
       topic; the consumer, which takes the input in bulk (``fetch``) and reports records'
       age to them, the changelog restored in bulk (``restore``), compressed batches
       inflated within bounds (``patches``);
    5. the claims: the reset ceiling and the control topic's problems, kept up while it runs;
    6. the publisher: the outbox, then Redis (built on the worker's loop, on first use);
    7. expiry: the index of idle sessions (its sweeps step between the commit path's
       batches, handed it when they run);
    8. the commit path, handed the table and the outbox (it writes the rows and their
       changelog records), the publisher, the acks, the metrics, the claims
       and what a committed batch leaves (``Ledger``: the totals, reset lines, expiry);
    9. the worker, wired to Faust (``Worker.wire``): the agent, tasks, timers, signals.
    """
    partitions = partitions or settings.partitions
    tune_switch(settings.switch_interval)  # before the consumer thread starts
    app = faust_app(settings, partitions)  # 1
    source = app.topic(settings.input_topic, partitions=partitions, **RAW)  # 2
    table = SessionTable(app, partitions, settings.rocksdb_write_buffer, settings.keep_records)
    outbox = Outbox(BatchSender(app), table, settings.output_topic, settings.dlq_topic)  # 3
    stats = metrics.Metrics.create(settings)  # 4
    fetch.install(  # the consumer's settings, its record-age metric among them
        app,
        fetch.FetchSettings.of(
            settings,
            record_age=stats.record_age.labels("fetched").observe,
            fetches=stats.observe_fetch,
            leaving=lambda: settings.leave_on_stop,  # a static member's SIGTERM (note 027)
        ),
    )
    restore.install(app, table, stats.observe_recovery)  # the changelog restored in bulk
    # aiokafka's codecs and record classes, bounded and the changelog in bulk (note 017, 021)
    bounds = inflate.Bounds.of(settings.max_inflated_bytes)
    patches.install(patches.Patches(bounds, frozenset({table.changelog})))
    stats.control_problem = "; ".join(control_problems)[:500]
    claims = Claims(settings, stats)  # 5

    def publisher() -> Publisher:  # 6
        built = Publisher(settings, outbox, RedisSink(settings))
        built.on_permanent = lambda error: _stop_on_permanent(stats, error)
        stats.redis = built.state
        return built

    on_loop = OnLoop(publisher)
    expiry = Expiry(settings.limits, table, on_loop, stats)  # 7
    ledger = Ledger(settings.input_topic, expiry)
    committer = Committer(  # 8
        Parts(
            table=table,
            changelog=outbox,
            publisher=on_loop,
            ack=lambda batch: batching.ack(batch, app.consumer),
            stats=stats,
            gate=claims,
            committed=ledger,
        )
    )
    worker = Worker(settings, app, source, table, stats, claims, on_loop, committer, expiry, ledger)
    return worker.wire()  # 9


EXIT_STOPPED = 3  # the process' status when a permanent error stopped it


def _stop_on_permanent(stats: metrics.Metrics, error: BaseException) -> None:
    # A permanent refusal is a configuration problem: exit non-zero, loudly, rather than
    # loop. Hard exit: the failing batch must not be acked, and a graceful stop would wait
    # for it forever. Earlier batches are delivered; whatever they had not committed yet
    # is redelivered to the next owner and counted once (row offsets).
    log.critical("stopping: %s", error)
    stats.fatal = str(error)
    print(f"stream worker: stopped: {error}", file=sys.stderr, flush=True)
    logging.shutdown()
    os._exit(EXIT_STOPPED)


__all__ = ["EXIT_STOPPED", "Ledger", "OnLoop", "Worker", "assemble", "faust_app"]
