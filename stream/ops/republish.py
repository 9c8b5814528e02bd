"""Re-seed Redis from the compacted output topic: ``stream republish``.

The output topic holds every session's latest update (compacted, key = session id) with
the generation, the session's tally and the view version in its headers (read back by
``output.record.SessionUpdate.from_kafka``), so Redis — a cache of that topic — can be
rebuilt from it at any time: a new Redis, a changed key prefix, an evicted cache.
Writes go through the worker's guarded function, so nothing older overwrites anything newer
and a republish racing live updates never moves a session backwards.
"""

import asyncio
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka import Consumer, TopicPartition

from stream.config import Settings
from stream.output.record import SessionUpdate
from stream.output.redis import OLDER, UNCHANGED, WRITTEN
from stream.publish.queue import now_ms
from stream.publish.redis_sink import RedisSink

CHUNK = 2_000


@dataclass
class RepublishReport:
    records: int = 0  # output records read
    sessions: int = 0  # distinct sessions written
    written: int = 0  # accepted by the guard
    unchanged: int = 0  # Redis already had that version
    older: int = 0  # Redis had something newer (a live update won)
    skipped: int = 0  # records that are not updates (tombstones, foreign data)
    seconds: float = 0.0


def read_latest(
    settings: Settings,
    session: str | None = None,
    progress: Callable[[int], None] | None = None,
    timeout: float = 30.0,
) -> tuple[dict[str, SessionUpdate], int, int]:
    """The latest update per session on the output topic (read to its current end):
    ``(updates by session id, records read, records skipped)``."""
    consumer = Consumer(
        settings.librdkafka()
        | {
            "group.id": f"{settings.app_id}-republish-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "log_level": 2,
        }
    )
    topic = settings.output_topic
    latest: dict[str, SessionUpdate] = {}
    records = skipped = 0
    try:
        metadata = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
        if metadata is None or metadata.error is not None:
            raise RuntimeError(f"output topic {topic!r} not found on {settings.bootstrap_servers}")
        ends: dict[int, int] = {}
        for partition in metadata.partitions:
            low, high = consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=timeout
            )
            if high > low:
                ends[partition] = high
        consumer.assign([TopicPartition(topic, p, 0) for p in ends])
        remaining = dict(ends)
        deadline = time.monotonic() + max(timeout, 1.0)
        while remaining and time.monotonic() < deadline:
            batch = consumer.consume(5_000, 0.5)
            for message in batch:
                if message.error() is not None:
                    continue
                deadline = time.monotonic() + timeout  # progress: keep going
                partition, offset = message.partition() or 0, message.offset() or 0
                if offset + 1 >= remaining.get(partition, 0):
                    remaining.pop(partition, None)
                records += 1
                key, value = message.key(), message.value()
                if key is not None and value is None:  # a tombstone: the session expired
                    latest.pop(key.decode(errors="replace"), None)
                    continue
                if key is None or value is None:
                    skipped += 1
                    continue
                try:
                    update = SessionUpdate.from_kafka(key, value, message.headers())
                except (ValueError, KeyError, TypeError):  # not an update (JSON errors too)
                    skipped += 1
                    continue
                if session is not None and update.session_id != session:
                    continue
                held = latest.get(update.session_id)
                if held is None or update.version >= held.version:
                    latest[update.session_id] = update
            if progress is not None and batch:
                progress(len(batch))
        if remaining:
            raise RuntimeError(
                f"timed out reading {topic!r}: partitions {sorted(remaining)} behind"
            )
    finally:
        consumer.close()
    return latest, records, skipped


async def write_all(
    settings: Settings,
    updates: list[SessionUpdate],
    progress: Callable[[int], None] | None = None,
) -> tuple[int, int, int]:
    """Write through the guarded function, a pipeline of ``CHUNK`` at a time:
    ``(written, unchanged, older)``."""
    sink = RedisSink(settings)
    counts = dict.fromkeys((WRITTEN, UNCHANGED, OLDER), 0)
    try:
        for start in range(0, len(updates), CHUNK):
            chunk = updates[start : start + CHUNK]
            for result in await sink.write(chunk, (), now_ms()):
                counts[result] += 1
            if progress is not None:
                progress(len(chunk))
    finally:
        await sink.close()
    return counts[WRITTEN], counts[UNCHANGED], counts[OLDER]


def republish(
    settings: Settings,
    session: str | None = None,
    read_progress: Callable[[int], None] | None = None,
    write_progress: Callable[[int], None] | None = None,
) -> RepublishReport:
    started = time.monotonic()
    latest, records, skipped = read_latest(settings, session, read_progress)
    report = RepublishReport(records=records, sessions=len(latest), skipped=skipped)
    written, unchanged, older = asyncio.run(
        write_all(settings, list(latest.values()), write_progress)
    )
    report.written, report.unchanged, report.older = written, unchanged, older
    report.seconds = time.monotonic() - started
    return report
