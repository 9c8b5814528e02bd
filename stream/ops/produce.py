"""Publish dsh session logs to the input topic, keyed by session id and in order.

Uses librdkafka with the ``murmur2_random`` partitioner (the Java client's), so our keys
land where Java producers would put them; idempotence keeps per-partition order across
retries. ``segment`` packs up to N consecutive events of a session into one JSON array.
"""

import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Producer

from stream.config import Settings
from stream.contract.jsontext import dumps
from stream.contract.storage import ChunkRun
from stream.logs.reader import BadLine
from stream.logs.replay import raw_events


def producer(settings: Settings, **extra: Any) -> Producer:
    conf = settings.librdkafka() | {
        "partitioner": "murmur2_random",
        "enable.idempotence": True,
        "linger.ms": 20,
        "compression.type": "lz4",
        "queue.buffering.max.messages": 500_000,
    }
    return Producer(conf | extra)


def segments(paths: list[str], size: int) -> Iterator[tuple[str, list[Any]]]:
    """(session id, up to ``size`` consecutive raw events) in log order."""
    current: str | None = None
    pending: list[Any] = []
    for session_id, _, item in raw_events(paths):
        if isinstance(item, BadLine):
            print(f"stream produce: skipped {item}", file=sys.stderr)
            continue
        items = item.events() if isinstance(item, ChunkRun) else [item]
        for event in items:
            if session_id != current or len(pending) >= size:
                if pending and current is not None:
                    yield current, pending
                current, pending = session_id, []
            pending.append(event)
    if pending and current is not None:
        yield current, pending


@dataclass
class ProduceReport:
    messages: int = 0
    events: int = 0
    failed: int = 0
    seconds: float = 0.0


def produce(
    settings: Settings,
    paths: list[str],
    segment: int = 1,
    rate: float | None = None,
    topic: str | None = None,
) -> ProduceReport:
    report = ProduceReport()
    errors: list[str] = []

    def delivered(error: Any, _message: Any) -> None:
        if error is not None:
            report.failed += 1
            if len(errors) < 5:
                errors.append(str(error))

    client = producer(settings)
    target = topic or settings.input_topic
    started = time.monotonic()
    for session_id, events in segments(paths, max(segment, 1)):
        value = dumps(events[0]) if segment <= 1 else dumps(events)
        while True:
            try:
                client.produce(
                    target,
                    value=value,
                    key=session_id.encode("utf-8", "surrogatepass"),
                    on_delivery=delivered,
                )
                break
            except BufferError:  # local queue full: let deliveries drain
                client.poll(0.1)
        client.poll(0)
        report.messages += 1
        report.events += len(events)
        if rate:
            ahead = report.events / rate - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)
    remaining = client.flush(60)
    report.seconds = time.monotonic() - started
    if remaining:
        report.failed += remaining
        errors.append(f"{remaining} messages still undelivered after 60 s")
    for error in errors:
        print(f"stream produce: delivery failed: {error}", file=sys.stderr)
    return report
