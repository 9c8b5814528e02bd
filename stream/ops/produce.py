"""Publish dsh session logs to the input topic, keyed by session id and in order.

Uses librdkafka with the ``murmur2_random`` partitioner (the Java client's), so our keys
land where Java producers would put them; idempotence keeps per-partition order across
retries. ``segment`` packs up to N consecutive events of a session into one JSON array.
Returns a report; printing is the command's job.
"""

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Producer

from stream.config import Settings
from stream.contract.errors import BadLine
from stream.contract.jsontext import dumps
from stream.contract.storage import ChunkRun
from stream.logs.reader import read_logs
from stream.output.headers import RESET_HEADER


def producer(settings: Settings, **extra: Any) -> Producer:
    conf = settings.librdkafka() | {
        "partitioner": "murmur2_random",
        "enable.idempotence": True,
        "linger.ms": 20,
        "compression.type": "lz4",
        "queue.buffering.max.messages": 500_000,
        # A topic the broker does not know fails its records after 5 s, not 30: on a cluster
        # that does not create topics, a missing input topic is said quickly.
        "topic.metadata.propagation.max.ms": 5000,
    }
    return Producer(conf | extra)


def await_producer_id(settings: Settings, timeout: float = 30.0) -> None:
    """Return once the cluster hands out a producer id, or after ``timeout``.

    A fresh cluster loads its transaction coordinator on the first InitProducerId and
    answers "load in progress" meanwhile; an idempotent producer retries, but librdkafka
    logs each try as a warning. A silent probe producer waits it out first.
    """
    state: dict[str, str] = {}

    def stats(text: str) -> None:
        state["idemp"] = json.loads(text).get("eos", {}).get("idemp_state", "")

    probe = Producer(
        settings.librdkafka()
        | {
            "enable.idempotence": True,
            "statistics.interval.ms": 100,
            "stats_cb": stats,
            "log_level": 0,  # the retries are the noise this avoids
        }
    )
    deadline = time.monotonic() + timeout
    while state.get("idemp") != "Assigned" and time.monotonic() < deadline:
        probe.poll(0.1)


@dataclass
class ProduceReport:
    messages: int = 0
    events: int = 0
    failed: int = 0
    seconds: float = 0.0
    skipped: list[str] = field(default_factory=list)  # unreadable lines, path:line: reason
    errors: list[str] = field(default_factory=list)  # first delivery errors


def segments(
    paths: list[str], size: int, skipped: list[str] | None = None
) -> Iterator[tuple[str, list[Any]]]:
    """(session id, up to ``size`` consecutive raw events) in log order."""
    for log in read_logs(paths):
        pending: list[Any] = []
        for _, item in log.lines():
            if type(item) is BadLine:
                if skipped is not None:
                    skipped.append(log.where(item))
                continue
            for event in item.events() if type(item) is ChunkRun else [item]:
                pending.append(event)
                if len(pending) >= size:
                    yield log.session_id, pending
                    pending = []
        if pending:
            yield log.session_id, pending


def produce(
    settings: Settings,
    paths: list[str],
    segment: int = 1,
    rate: float | None = None,
    topic: str | None = None,
    progress: Callable[[int], None] | None = None,
    reset: int | None = None,
) -> ProduceReport:
    """Produce the logs; ``progress(events)`` is called as events are handed over.

    ``reset``: before each session's first event, a reset record (header
    ``stream-reset: G``, no value) that starts the session over under generation G.
    """
    report = ProduceReport()

    def delivered(error: Any, _message: Any) -> None:
        if error is not None:
            report.failed += 1
            if len(report.errors) < 5:
                report.errors.append(str(error))

    client = producer(settings)
    target = topic or settings.input_topic
    started = time.monotonic()

    def send(
        key: bytes, value: bytes | None, headers: list[tuple[str, str | bytes | None]] | None
    ) -> None:
        while True:
            try:
                client.produce(target, value=value, key=key, headers=headers, on_delivery=delivered)
                return
            except BufferError:  # local queue full: let deliveries drain
                client.poll(0.1)

    started_sessions: set[str] = set()
    for session_id, events in segments(paths, max(segment, 1), report.skipped):
        key = session_id.encode("utf-8", "surrogatepass")
        if reset is not None and session_id not in started_sessions:
            started_sessions.add(session_id)
            send(key, None, [(RESET_HEADER, str(reset).encode())])
        send(key, dumps(events[0]) if segment <= 1 else dumps(events), None)
        client.poll(0)
        report.messages += 1
        report.events += len(events)
        if progress is not None:
            progress(len(events))
        if rate:
            ahead = report.events / rate - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)
    remaining = client.flush(60)
    report.seconds = time.monotonic() - started
    if remaining:
        report.failed += remaining
        report.errors.append(f"{remaining} messages still undelivered after 60 s")
    return report
