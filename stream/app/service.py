"""The worker: one Faust agent folding session events into a RocksDB-backed table.

Wiring only. Per batch (``take_events``): ``session.batch.fold_batch`` folds it once
through the pure core; ``publish.Publisher`` writes the rows, the updates and the dead
letters and waits until the broker has confirmed every one, then writes Redis; only then
are the batch's events acked, so a commit never passes a record still in flight. Agent
concurrency stays 1, so a commit never passes a message still being folded either
(faust-streaming #606).

Faust reads its settings only from what is passed here (``env={}``): the environment
cannot flip the at-least-once guarantee, the loopback web bind or the empty-stream wait.
"""

import asyncio
import logging
import os
import sys
from collections.abc import Awaitable, Iterator
from pathlib import Path
from typing import Any

import faust
from faust.types import TP

from stream import native
from stream.app import transport
from stream.config import Settings
from stream.ops import control, metrics
from stream.publish.publisher import Publisher
from stream.publish.redis_sink import PermanentRedisError, RedisSink
from stream.runtime import tune_gc
from stream.session.batch import Counts, DeadLetter, Message, fold_batch

log = logging.getLogger("stream.worker")

TABLE_NAME = "sessions"


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


def _headers(raw: Any) -> list[tuple[str, bytes | None]]:
    """Record headers as (name, value) pairs, whichever shape Faust hands them in."""
    if not raw:
        return []
    items = raw.items() if isinstance(raw, dict) else raw
    return [(str(name), value) for name, value in items]


class _Outbox:
    """The Kafka side of publishing; every call returns its delivery.

    A row goes straight to its partition's RocksDB store (the partition of the input
    events it folds: docs/notes/002) and its changelog record, like the updates and dead
    letters, to one ``BatchSender``: a batch's records leave grouped by topic partition
    (stream.app.transport). This is what Faust's ``table[key] = row`` does, less its
    per-record producer buffer and the "current event" routing it needs a bound event for.
    """

    def __init__(self, app: Any, table: Any, output: str, dead_letters: str) -> None:
        self.table, self.output, self.dead = table, output, dead_letters
        self.sender = transport.BatchSender(app)
        self.changelog = table.changelog_topic.get_topic_name()

    def load(self, key: bytes, partition: int) -> bytes | None:
        row: bytes | None = self.table.data._db_for_partition(partition).get(key)
        return row

    def _persisted(self, partition: int, offset: int) -> None:
        # What Faust's Table._on_changelog_sent does: the store remembers the changelog
        # offset it holds, so a restart with local state recovers only what follows.
        self.table.data.set_persisted_offset(TP(self.changelog, partition), offset)

    def write_row(self, key: bytes, row: bytes, partition: int) -> Awaitable[Any]:
        self.table.data._db_for_partition(partition).put(key, row)
        return self.sender.add(self.changelog, partition, key, row, on_sent=self._persisted)

    def send_update(
        self, key: bytes, payload: bytes, headers: list[tuple[str, bytes]]
    ) -> Awaitable[Any]:
        return self.sender.add(self.output, None, key, payload, headers)

    def send_dead_letter(self, letter: DeadLetter) -> Awaitable[Any]:
        log.warning(
            "dead-lettered %s[%d]@%d: %s",
            letter.topic,
            letter.partition,
            letter.offset,
            letter.reason,
        )
        return self.sender.add(self.dead, None, None, letter.value, letter.headers())


def build_app(
    settings: Settings, partitions: int | None = None, control_problems: tuple[str, ...] = ()
) -> faust.App:
    partitions = partitions or settings.partitions
    transport.use_uvloop()  # before the worker creates its event loops
    app = faust.App(
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
        Monitor=transport.LeanMonitor,
    )
    # The input topic's records reach the agent in bulk (stream.app.transport).
    transport.install(app, [settings.input_topic])
    raw: dict[str, Any] = {
        "key_type": bytes,
        "value_type": bytes,
        "key_serializer": "raw",
        "value_serializer": "raw",
    }
    source = app.topic(settings.input_topic, partitions=partitions, **raw)
    table = app.Table(
        TABLE_NAME,
        default=None,
        partitions=partitions,
        schema=faust.Schema(**raw),
        options={"driver": "rocksdict"},
    )
    # Faust picks a table's serializers from its key/value *types* (json unless the type
    # is a Model), ignoring the schema's, and registering the table already built its
    # changelog topic with them. Rows are our own codec bytes: store and recover them raw.
    table.key_serializer = table.value_serializer = "raw"  # type: ignore[attr-defined]
    table.changelog_topic = table._new_changelog_topic()  # type: ignore[attr-defined]
    limits = settings.limits
    totals = Counts()
    outbox = _Outbox(app, table, settings.output_topic, settings.dlq_topic)
    publisher: Publisher | None = None
    stats = metrics.Metrics.create(settings)
    stats.control_problem = "; ".join(control_problems)[:500]

    def stop_on_permanent(error: BaseException) -> None:
        # A permanent refusal is a configuration problem: exit non-zero, loudly, rather
        # than loop. Hard exit: the failing batch must not be acked, and a graceful stop
        # would wait for it forever. Earlier batches are delivered; whatever they had not
        # committed yet is redelivered to the next owner and counted once (row offsets).
        log.critical("stopping: %s", error)
        stats.fatal = str(error)
        print(f"stream worker: stopped: {error}", file=sys.stderr, flush=True)
        logging.shutdown()
        os._exit(3)

    def get_publisher() -> Publisher:
        nonlocal publisher
        if publisher is None:
            publisher = Publisher(settings, outbox, RedisSink(settings))
            publisher.on_permanent = stop_on_permanent
            stats.redis = publisher.state
        return publisher

    async def handle(events: list[Any]) -> None:
        messages: list[Message] = []
        add = messages.append
        for e in events:
            m = e.message
            headers = _headers(m.headers) if m.headers else []
            add(Message(m.key, m.value, m.topic, m.partition, m.offset, headers))
        with stats.fold_seconds.time():
            result = fold_batch(messages, outbox.load, limits)
        with stats.publish_seconds.time():
            await get_publisher().publish(result)
        totals.add(result.counts)
        for note in result.resets:  # every reset, applied or not, leaves a line
            log.warning(
                "reset %s session %r to generation %d (it was at %d) from %s[%d]@%d",
                "applied:" if note.applied else "ignored, not above its own:",
                note.session_id,
                note.gen,
                note.previous,
                settings.input_topic,
                note.partition,
                note.offset,
            )
        try:  # the batch is delivered: nothing in the metrics may keep it from its ack
            stats.observe_batch(messages, result, events[-1].message.timestamp)
        except Exception:
            log.exception("metrics of a batch not recorded")

    def rows_of(partition: int) -> Iterator[tuple[bytes, bytes]]:
        store: Any = table.data
        db = store._dbs.get(partition)
        if db is None:
            return iter(())
        items: Iterator[tuple[bytes, bytes]] = store._visible_items(db)
        return items

    async def reseed(partitions: list[int], why: str) -> None:
        publisher = get_publisher()
        sent = 0
        for partition in sorted(partitions):
            sent += await publisher.reseed(rows_of(partition), partition)
        # Marked only once really written: with Redis away the updates stay queued, the
        # marker stays missing, and the next check re-seeds again.
        if await publisher.flush(60):
            try:
                await publisher.mark(sorted(partitions))
            except Exception as error:  # transient: the next check tries again
                log.warning("could not mark re-seeded partitions: %s", error)
        publisher.state.reseeds += 1
        log.info("re-seeded Redis from %d partitions (%d sessions): %s", len(partitions), sent, why)

    def assigned() -> list[int]:
        actives = app.assignor.assigned_actives()
        return [tp.partition for tp in actives if tp.topic == settings.input_topic]

    @app.agent(source, concurrency=1)
    async def fold_sessions(stream: Any) -> None:
        # Bulk batches (stream.app.transport.batches), acked once delivered.
        async for events in transport.batches(stream, settings.batch_max, settings.batch_within):
            work = asyncio.ensure_future(handle(events))
            try:
                await asyncio.shield(work)
            except asyncio.CancelledError:
                # Shutdown (SIGTERM): finish this batch and ack it, so the final commit
                # covers it instead of leaving it to be redelivered.
                try:
                    await asyncio.wait_for(work, 30)
                except (PermanentRedisError, TimeoutError):
                    raise
                transport.ack(events, app.consumer)
                raise
            transport.ack(events, app.consumer)

    @app.task  # type: ignore[untyped-decorator]
    async def _tune_gc() -> None:  # once the app's long-lived objects exist
        tune_gc(freeze=True)
        log.info("%s", native.status())  # which fold runs: compiled or pure Python

    @app.task  # type: ignore[untyped-decorator]
    async def _watch_redis() -> None:
        """Re-seed when Redis lost what we published (a restart without persistence, a
        failover to an empty replica, FLUSHALL): the marker key is gone."""
        publisher = get_publisher()
        while True:
            await asyncio.sleep(settings.redis_check_interval)
            try:
                lost = await publisher.unmarked(assigned())
                if lost:
                    await reseed(lost, "Redis lost its data (marker missing)")
            except PermanentRedisError:
                return
            except Exception as error:  # transient: the publisher's queue notes it
                log.debug("marker check failed: %s", error)

    @app.on_partitions_assigned.connect  # type: ignore[arg-type]
    async def _assigned(sender: Any, assigned: set[TP], **kwargs: Any) -> None:
        stats.assigned = sorted(tp.partition for tp in assigned if tp.topic == settings.input_topic)

    async def count_rows(partitions: list[int]) -> None:
        """The census of newly assigned partitions, walked in the background a chunk at a
        time; a partition that moves away meanwhile is left (its walk token changes)."""
        census = stats.census
        for partition in partitions:
            token = census.walking.get(partition)
            if token is None:
                continue
            for n, (key, row) in enumerate(rows_of(partition), 1):
                if census.walking.get(partition) is not token:
                    break
                census.visit(partition, key, row)
                if n % 2000 == 0:
                    await asyncio.sleep(0)  # let batches and heartbeats through
            else:
                census.walked(partition)

    @app.on_rebalance_complete.connect  # type: ignore[arg-type]
    async def _recovered(sender: Any, **kwargs: Any) -> None:
        stats.recovered = True
        stats.progress.clear()  # a stall is counted from the assignment, not across it
        app.add_future(count_rows(stats.census.assign(assigned())))
        if settings.reseed_on_assign:
            # Anything a crash kept from Redis (queued updates of a dead worker) is in the
            # rows: republish them, guarded, so Redis equals the table again.
            app.add_future(reseed(assigned(), "partitions assigned"))

    @app.timer(interval=30.0)  # type: ignore[untyped-decorator]
    async def _watch_control() -> None:
        """Re-read the control topic: a record refused later is said loudly too."""
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
        if problem and problem != stats.control_problem:
            log.error("%s: %s", control.control_topic(settings), problem)
        stats.control_problem = problem

    @app.timer(interval=10.0)  # type: ignore[untyped-decorator]
    async def _report() -> None:
        log.info("totals %s", totals.as_dict())
        stats.refresh(app, table, settings)

    @app.on_before_shutdown.connect
    def _final(sender: Any, /, *args: Any, signal: Any, **kwargs: Any) -> None:
        log.info("final totals %s", totals.as_dict())

    @app.task  # type: ignore[untyped-decorator]
    async def _serve_metrics() -> None:
        if settings.metrics_port:
            app.metrics_runner = await metrics.serve(  # type: ignore[attr-defined]
                stats, settings.metrics_bind, settings.metrics_port
            )

    app.stream_metrics = stats  # type: ignore[attr-defined]
    return app
