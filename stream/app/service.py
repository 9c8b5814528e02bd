"""The worker: one Faust agent folding session events into a RocksDB-backed table.

Per batch (``take_events``): fold every event through the pure core, write each touched
session's row once, send one coalesced update per changed session to the output topic
and to Redis, dead-letter what cannot be read. Events are acked only after the batch is
written and published, and agent concurrency stays 1, so a commit never passes a message
still in flight (faust-streaming #606). Faust flushes the producer (changelog, output,
dead letters) before it commits offsets: at-least-once delivery, which the per-projection
cursors turn into effectively-once state.
"""

import asyncio
import logging
from typing import Any

import faust
import orjson
from redis.exceptions import RedisError

from stream.app.current_event import bound
from stream.config import Settings
from stream.publish.redis_sink import RedisSink
from stream.session.batch import Counts, Message, fold_batch

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


async def _publish_with_retry(
    sink: RedisSink, updates: list[tuple[str, int, bytes]], counts: dict[str, int]
) -> None:
    """Redis being away must not crash the agent or drop updates: hold the batch (and so
    the offset commit) and retry with backoff until it is back. Writes are idempotent."""
    delay = 0.1
    while True:
        try:
            await sink.publish(updates, counts)
            return
        except (RedisError, OSError) as error:
            log.warning("redis publish failed (%s); retrying in %.1f s", error, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)


def build_app(settings: Settings, partitions: int | None = None) -> faust.App:
    partitions = partitions or settings.partitions
    app = faust.App(
        settings.app_id,
        broker=[f"kafka://{host.strip()}" for host in settings.bootstrap_servers.split(",")],
        broker_credentials=_credentials(settings),
        store="rocksdb://",
        datadir=settings.state_dir,
        topic_partitions=partitions,
        topic_replication_factor=settings.replication_factor,
        processing_guarantee="at_least_once",
        consumer_auto_offset_reset="earliest",
        web_enabled=settings.web_enabled,
        web_port=settings.web_port,
        web_bind="127.0.0.1",
        producer_acks=-1,
        broker_commit_interval=settings.commit_interval,
        broker_session_timeout=settings.session_timeout,
        broker_heartbeat_interval=min(3.0, settings.session_timeout / 3),
        stream_wait_empty=True,
    )
    raw: dict[str, Any] = {
        "key_type": bytes,
        "value_type": bytes,
        "key_serializer": "raw",
        "value_serializer": "raw",
    }
    source = app.topic(settings.input_topic, partitions=partitions, **raw)
    output = app.topic(settings.output_topic, partitions=partitions, **raw)
    dead_letters = app.topic(settings.dlq_topic, **raw)
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
    totals = Counts()
    sink: RedisSink | None = None

    def load(session_id: str, event: Any) -> bytes | None:
        with bound(event):
            row: bytes | None = table.get(session_id.encode())
            return row

    async def handle(events: list[Any]) -> None:
        nonlocal sink
        if sink is None:
            sink = RedisSink(settings)
        messages = [
            Message(
                e.message.key,
                e.message.value,
                e.message.topic,
                e.message.partition,
                e.message.offset,
                e,
            )
            for e in events
        ]
        result = fold_batch(messages, load)
        updates = []
        for change in result.sessions:
            key = change.session_id.encode()
            with bound(change.handle):
                table[key] = change.row
            payload = orjson.dumps(change.update)
            output.send_soon(key=key, value=payload)
            updates.append((change.session_id, change.update["seq"], payload))
        for dead in result.dead_letters:
            dead_letters.send_soon(key=None, value=dead.value, headers=dead.headers())
            log.warning(
                "dead-lettered %s[%d]@%d: %s", dead.topic, dead.partition, dead.offset, dead.reason
            )
        await _publish_with_retry(sink, updates, result.counts.as_dict())
        totals.add(result.counts)

    async def handle_until_done(events: list[Any]) -> None:
        """Never let a batch fail past this point: Faust's ``take_events`` acks a batch
        when the loop moves on *or raises*, so an escaping error would commit events we
        did not process. A failing batch is retried (the fold is deterministic and the
        cursors make the retry idempotent) while the error is logged; the partition stalls
        visibly instead of losing data."""
        delay = 0.5
        while True:
            try:
                await handle(events)
                return
            except Exception:
                log.exception("batch of %d events failed; retrying in %.1f s", len(events), delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30.0)

    @app.agent(source, concurrency=1)
    async def fold_sessions(stream: Any) -> None:
        async for events in stream.take_events(settings.batch_max, within=settings.batch_within):
            work = asyncio.ensure_future(handle_until_done(events))
            try:
                await asyncio.shield(work)
            except asyncio.CancelledError:
                # Shutdown (SIGTERM): finish this batch and ack it, so the final commit
                # covers it instead of leaving it to be redelivered.
                await work
                for event in events:
                    await stream.ack(event)
                raise

    @app.timer(interval=10.0)  # type: ignore[untyped-decorator]
    async def _report() -> None:
        log.info("totals %s", orjson.dumps(totals.as_dict()).decode())

    @app.on_before_shutdown.connect
    def _final(sender: Any, /, *args: Any, signal: Any, **kwargs: Any) -> None:
        log.info("final totals %s", orjson.dumps(totals.as_dict()).decode())

    return app
