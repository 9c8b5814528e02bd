"""Input written by a transactional producer: every transaction ends in a commit marker, a
control record that takes an offset and that no consumer is handed. The worker folds
every event once and commits past the markers, including one at the committed offset
after a restart (stream.app.batching.BulkAcks._new_offset, docs/notes/024). What a
producer aborts is never folded: the worker reads committed (docs/notes/025)."""

import random
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from tests.integration.faults import client_conf, input_topic
from tests.integration.harness import (
    Deployment,
    event_count,
    offline_fold,
    wait_until,
    write_sessions,
)
from tests.integration.verdict import committed, consumer_lag, offline_counts

pytestmark = pytest.mark.integration


def _transactions(
    producer: Producer, topic: str, lines: list[tuple[str, bytes]], size: int, ends: dict[int, int]
) -> None:
    """``lines`` in transactions of ``size``, each committed; ``ends``: per partition, the
    offset after the last record written (a commit marker follows it)."""

    def delivered(error: Any, message: Any) -> None:
        assert error is None, error
        ends[message.partition()] = max(ends[message.partition()], message.offset() + 1)

    for start in range(0, len(lines), size):
        producer.begin_transaction()
        for session_id, line in lines[start : start + size]:
            producer.produce(topic, key=session_id.encode(), value=line, on_delivery=delivered)
        producer.commit_transaction(30)


def test_transactional_input_is_folded_once_and_committed_past_its_markers(
    deployment: Deployment, tmp_path: Path
) -> None:
    """Two halves of 48 sessions' events in transactions of 1 to 40 records, the worker
    restarted (SIGTERM) between them once every partition is committed past its last
    record (to the marker after it, or past that too: either way the restart seeks there).
    Redis ends equal to `stream fold` for every session, its totals to the events; every
    partition is committed to its end, the final marker included, and none reads as
    waiting or stalled."""
    paths = write_sessions(tmp_path / "logs", random.Random(31), "tx-", 48, (20, 60))
    expected = offline_fold(paths)
    total = event_count(paths)
    rng = random.Random(32)
    interleaved = _interleaved(paths, rng)
    topic = input_topic(deployment)
    producer = _transactional_producer(deployment, "tx")
    ends: dict[int, int] = defaultdict(int)
    worker = deployment.start_worker("tx")
    half = len(interleaved) // 2
    _transactions(producer, topic, interleaved[:half], rng.randint(1, 40), ends)
    _committed_past(deployment, ends)
    first_run = worker.log()
    assert worker.terminate(timeout=120) == 0, worker.log()[-3000:]
    worker.restart()
    _transactions(producer, topic, interleaved[half:], rng.randint(1, 40), ends)
    deployment.wait_accounted(total)
    assert deployment.stats() == offline_counts(paths) | {"dead_lettered": 0}
    for session_id, line in expected.items():
        assert deployment.redis_update(session_id) == line, session_id
    # The last offset of each partition is a marker no record follows: passed all the same
    # (``_pass_empty_ends``), so nothing reads as waiting and nothing as stalled.
    wait_until(
        lambda: all(lag == 0 for lag in consumer_lag(deployment).values()),
        60,
        "every partition committed to its end, its final commit marker included",
    )
    wait_until(
        lambda: all(
            value == 0
            for name, value in worker.metrics().items()
            if name.startswith("stream_committed_lag{")
        ),
        30,
        "stream_committed_lag 0 on every partition",
    )
    assert worker.probe("/readyz") == 200
    assert "missing from the fetch" in first_run, "no marker met as a jump in the offsets"


def test_aborted_transactions_are_never_folded(deployment: Deployment, tmp_path: Path) -> None:
    """36 sessions' events in transactions of 1 to 30 records; about a third of them are
    first written and aborted, then written again and committed, and some aborted ones
    also hold events of sessions no committed transaction ever writes. Redis ends equal to
    `stream fold` of the committed logs, with no duplicate, fault or session of an aborted
    transaction, and every partition is committed to its end, past the aborted records
    and their markers."""
    paths = write_sessions(tmp_path / "logs", random.Random(41), "ab-", 36, (20, 50))
    phantoms = write_sessions(tmp_path / "aborted", random.Random(42), "phantom-", 6, (5, 10))
    expected = offline_fold(paths)
    total = event_count(paths)
    rng = random.Random(43)
    interleaved = _interleaved(paths, rng)
    phantom_lines = _interleaved(phantoms, rng)
    topic = input_topic(deployment)
    producer = _transactional_producer(deployment, "ab")
    worker = deployment.start_worker("ab")
    aborted = 0
    start = 0
    while start < len(interleaved):
        size = rng.randint(1, 30)
        chunk = interleaved[start : start + size]
        if rng.random() < 0.35:
            producer.begin_transaction()
            for session_id, line in chunk + phantom_lines[: rng.randint(0, 3)]:
                producer.produce(topic, key=session_id.encode(), value=line)
            assert producer.flush(30) == 0  # in the log: an abort only purges what waits
            producer.abort_transaction(30)
            aborted += 1
        producer.begin_transaction()
        for session_id, line in chunk:
            producer.produce(topic, key=session_id.encode(), value=line)
        producer.commit_transaction(30)
        start += size
    assert aborted >= 5
    deployment.wait_accounted(total)
    wait_until(
        lambda: all(lag == 0 for lag in consumer_lag(deployment).values()),
        60,
        "every partition committed to its end, past the aborted records and the markers",
    )
    assert deployment.stats() == offline_counts(paths) | {"dead_lettered": 0}
    for session_id, line in expected.items():
        assert deployment.redis_update(session_id) == line, session_id
    for path in phantoms:
        assert deployment.redis_update(path.stem) is None, path.stem
    assert worker.probe("/readyz") == 200


def _transactional_producer(deployment: Deployment, name: str) -> Producer:
    """A producer whose transactions are ready to begin, its id the deployment's + ``name``
    (the Java client's partitioner, as `stream produce` uses)."""
    producer = Producer(
        client_conf(deployment)
        | {
            "transactional.id": f"{deployment.name}-{name}",
            "partitioner": "murmur2_random",
            "linger.ms": 5,
            "log_level": 2,
        }
    )
    producer.init_transactions(30)
    return producer


def _interleaved(paths: list[Path], rng: random.Random) -> list[tuple[str, bytes]]:
    """The logs' event lines as written (packed rows stay packed, each log's session line
    left out), each log's in order, the logs interleaved at random."""
    queues = {path.stem: path.read_bytes().splitlines()[1:] for path in paths}
    interleaved: list[tuple[str, bytes]] = []
    while queues:
        session_id = rng.choice(sorted(queues))
        interleaved.append((session_id, queues[session_id].pop(0)))
        if not queues[session_id]:
            del queues[session_id]
    return interleaved


def _committed_past(deployment: Deployment, ends: dict[int, int]) -> None:
    wait_until(
        lambda: all(committed(deployment)[p] >= end for p, end in ends.items()),
        120,
        f"the committed offsets past the last records written {dict(ends)}",
    )
