"""The worker against a real Kafka broker, real RocksDB and a real redis-server.

Every test compares with the offline fold (`stream fold`), which the oracle tests tie to
the reference implementation: the service must publish exactly what the fold prints.
"""

import random
import shutil
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined,unused-ignore]

from stream.contract.jsontext import dumps
from stream.ops.admin import create_topic
from tests.integration.faults import assigned
from tests.integration.harness import (
    EXAMPLE_LOG,
    Deployment,
    RedisServer,
    event_count,
    log_events,
    offline_fold,
    wait_until,
    write_sessions,
)

pytestmark = pytest.mark.integration


def _corpus(directory: Path, sessions: int = 12, seed: int = 11) -> list[Path]:
    """Generated nasty sessions, a metered-compaction example with system prompts, and one
    session with a contract violation (a claim over the wrong range)."""
    paths = write_sessions(directory, random.Random(seed), f"gen-{seed}-", sessions, (30, 250))
    shutil.copy(EXAMPLE_LOG, directory)
    paths.append(directory / EXAMPLE_LOG.name)
    faulty = directory / "faulty.jsonl"
    faulty.write_text("\n".join(orjson.dumps(e).decode() for e in _faulty_session()) + "\n")
    paths.append(faulty)
    return paths


def _faulty_session() -> list[dict[str, Any]]:
    def user(seq: int, text: str, op: Any = "append") -> dict[str, Any]:
        return {
            "type": "user/message",
            "seq": seq,
            "time": seq,
            "surfaceOp": op,
            "data": {"role": "user", "content": [{"type": "text", "text": text}]},
        }

    return [
        {"type": "session", "id": "faulty"},
        user(0, "first"),
        user(1, "second"),
        {
            "type": "compaction/summary",
            "seq": 2,
            "time": 2,
            "data": {"shadowedRange": {"start": 0, "end": 0}, "shadowedTokenCount": 6},
        },
        user(3, "summary", {"op": "replace", "start": 0, "end": 1}),
        user(4, "after the fault"),
        {
            "type": "assistant/message",
            "seq": 5,
            "time": 5,
            "surfaceOp": "append",
            "data": {
                "turn": 0,
                "step": 0,
                "message": {"role": "assistant", "content": []},
                "usage": {"inputTokens": 10, "outputTokens": 2},
            },
        },
    ]


def _java_placement_producer(deployment: Deployment) -> Producer:
    return Producer({"bootstrap.servers": deployment.bootstrap, "partitioner": "murmur2_random"})


def _assert_exact(deployment: Deployment, expected: dict[str, dict[str, Any]]) -> None:
    for session_id, line in expected.items():
        assert deployment.redis_update(session_id) == line, session_id
    output = deployment.latest_output()
    for session_id, line in expected.items():
        assert output.get(session_id) == line, session_id


def test_worker_publishes_exactly_the_offline_fold(deployment: Deployment, tmp_path: Path) -> None:
    paths = _corpus(tmp_path / "logs")
    expected = offline_fold(paths)
    assert "faults" in expected["faulty"] and set(expected["faulty"]["faults"]) == {
        "contextPressure",
        "contextBreakdown",
    }
    deployment.start_worker()
    deployment.stream("produce", *map(str, paths))
    total = event_count(paths)
    deployment.wait_accounted(total)
    stats = deployment.stats()
    assert stats["dead_lettered"] == 0 and stats["duplicate"] == 0
    assert stats["folded"] + stats["faulted"] == total
    _assert_exact(deployment, expected)


def test_segments_and_single_events_give_identical_results(
    kafka_bootstrap: str, redis_url: str, tmp_path: Path
) -> None:
    paths = _corpus(tmp_path / "logs", sessions=6, seed=5)
    expected = offline_fold(paths)
    total = event_count(paths)
    results = []
    for segment in ("1", "7"):
        deployment = Deployment(kafka_bootstrap, redis_url, tmp_path / f"seg{segment}")
        deployment.workdir.mkdir()
        try:
            deployment.start_worker()
            deployment.stream("produce", "--segment", segment, *map(str, paths))
            deployment.wait_accounted(total)
            results.append({sid: deployment.redis_update(sid) for sid in expected})
        finally:
            deployment.stop_all()
    assert results[0] == results[1] == expected


def test_unreadable_messages_are_dead_lettered_and_counts_add_up(
    deployment: Deployment, tmp_path: Path
) -> None:
    paths = _corpus(tmp_path / "logs", sessions=3, seed=3)
    expected = offline_fold(paths)
    deployment.start_worker()
    deployment.stream("produce", *map(str, paths))
    producer = Producer(
        {"bootstrap.servers": deployment.bootstrap, "partitioner": "murmur2_random"}
    )
    topic = f"{deployment.name}.events"
    bad = [
        (b"garbage", b"{not json"),
        (None, orjson.dumps({"type": "user/message", "seq": 0, "time": 0, "data": {}})),
        (b"garbage", orjson.dumps({"type": "turn/start", "seq": -1, "time": 0, "data": {}})),
        (b"garbage", b"[]"),
        (
            b"mixed",
            orjson.dumps(
                [
                    {"type": "turn/start", "seq": 0, "time": 0, "data": {}},
                    "not an event",
                    {"type": "turn/end", "seq": 1, "time": 1, "data": {}},
                ]
            ),
        ),
    ]
    for key, value in bad:
        producer.produce(topic, key=key, value=value)
    producer.flush(10)
    produced = event_count(paths) + 4 + 3  # four bad messages; a three-element segment
    deployment.wait_accounted(produced)
    stats = deployment.stats()
    assert stats["dead_lettered"] == 5
    assert (
        stats["folded"] + stats["duplicate"] + stats["faulted"] + stats["dead_lettered"] == produced
    )
    letters = deployment.consume_all(f"{deployment.name}.dlq")
    assert len(letters) == 5
    for letter in letters:
        headers = dict(letter.headers())
        assert headers["reason"] and headers["source-topic"] == topic.encode()
        assert int(headers["source-partition"]) >= 0 and int(headers["source-offset"]) >= 0
    reasons = sorted(dict(letter.headers())["reason"].decode() for letter in letters)
    assert any("not JSON" in r for r in reasons) and any("session key" in r for r in reasons)
    assert any("seq" in r for r in reasons) and any("empty segment" in r for r in reasons)
    assert deployment.redis_update("mixed")["seq"] == 1  # the good elements still folded
    _assert_exact(deployment, expected)


def test_a_crash_before_commit_counts_nothing_twice(deployment: Deployment, tmp_path: Path) -> None:
    paths = _corpus(tmp_path / "logs", sessions=6, seed=9)
    expected = offline_fold(paths)
    total = event_count(paths)
    # Commits only every 10 minutes: everything this worker folds is uncommitted.
    first = deployment.start_worker(STREAM_COMMIT_INTERVAL="600")
    deployment.stream("produce", *map(str, paths))
    deployment.wait_accounted(total)
    before = deployment.stats()
    wait_until(lambda: first.counted() == before, 30, "the counters to reach Redis's totals")
    messages = first.metrics()["stream_batch_messages_count"]
    first.kill()  # SIGKILL: no flush, no commit
    first.restart(STREAM_COMMIT_INTERVAL="2.8")
    # Everything is redelivered; the rows know they accounted for it already.
    wait_until(
        lambda: first.metrics().get("stream_redelivered_messages_total", 0) >= messages,
        120,
        "the redelivery",
    )
    assert deployment.stats() == before
    assert sum(before.values()) == total
    _assert_exact(deployment, expected)


def test_sigterm_finishes_the_batch_and_commits(deployment: Deployment, tmp_path: Path) -> None:
    paths = _corpus(tmp_path / "logs", sessions=4, seed=13)
    total = event_count(paths)
    first = deployment.start_worker()
    deployment.stream("produce", *map(str, paths))
    deployment.wait_accounted(total)
    assert first.terminate() == 0
    first.restart()
    deployment.stream("produce", str(EXAMPLE_LOG))
    deployment.wait_accounted(total + 16)
    assert deployment.stats()["duplicate"] == 16  # only the re-produced example
    assert first.metrics().get("stream_redelivered_messages_total", 0) == 0


def test_two_workers_split_the_partitions_and_stay_exact(
    deployment: Deployment, tmp_path: Path
) -> None:
    paths = _corpus(tmp_path / "logs", sessions=16, seed=21)
    expected = offline_fold(paths)
    total = event_count(paths)
    a = deployment.start_worker("a")
    b = deployment.start_worker("b")
    # Produce only once b has joined: a owning all four partitions would fold everything.
    wait_until(
        lambda: _split(assigned(a), assigned(b), deployment.partitions),
        120,
        f"a and b to split the {deployment.partitions} partitions",
        every=0.5,
    )
    deployment.stream("produce", *map(str, paths))
    deployment.wait_accounted(total)
    folded = deployment.stats()["folded"]
    wait_until(
        lambda: a.counted()["folded"] + b.counted()["folded"] == folded,
        30,
        f"the two workers' counters to add up to {folded} folded",
    )
    assert a.counted()["folded"] > 0 and b.counted()["folded"] > 0
    _assert_exact(deployment, expected)


def _split(a: list[int], b: list[int], partitions: int) -> bool:
    """Both workers own partitions, and together every one exactly once."""
    return bool(a) and bool(b) and sorted(a + b) == list(range(partitions))


def test_rows_live_in_the_changelog_partition_of_their_input_partition(
    deployment: Deployment, tmp_path: Path
) -> None:
    """librdkafka's default partitioner (consistent_random: CRC32) places keys differently
    from the Java client's murmur2; the state row must follow the input partition anyway."""
    paths = _corpus(tmp_path / "logs", sessions=10, seed=17)
    expected = offline_fold(paths)
    deployment.start_worker()
    producer = Producer({"bootstrap.servers": deployment.bootstrap})  # default partitioner
    topic = f"{deployment.name}.events"
    for session_id, event in log_events(paths):
        producer.produce(topic, key=session_id.encode(), value=dumps(event))
        producer.poll(0)
    producer.flush(30)
    deployment.wait_accounted(event_count(paths))
    _assert_exact(deployment, expected)
    input_partitions = {m.key(): m.partition() for m in deployment.consume_all(topic)}
    changelog = deployment.consume_all(f"{deployment.name}-sessions-changelog")
    assert changelog
    moved = {
        m.key()
        for m in changelog
        if m.key() in input_partitions and input_partitions[m.key()] != m.partition()
    }
    assert not moved
    assert len(set(input_partitions.values())) > 1
    # Not vacuous: the Java client's murmur2 would have placed some of these keys elsewhere.
    probe = f"{deployment.name}.probe"
    admin = AdminClient({"bootstrap.servers": deployment.bootstrap})
    create_topic(admin, NewTopic(probe, deployment.partitions, 1), timeout=30)
    java = _java_placement_producer(deployment)
    for key in input_partitions:
        java.produce(probe, key=key, value=b"")
    java.flush(10)
    java_partitions = {m.key(): m.partition() for m in deployment.consume_all(probe)}
    assert any(java_partitions[k] != p for k, p in input_partitions.items())


def test_offsets_past_retention_become_loud_gap_faults(
    deployment: Deployment, tmp_path: Path
) -> None:
    def user(seq: int) -> dict[str, Any]:
        return {
            "type": "user/message",
            "seq": seq,
            "time": seq,
            "surfaceOp": "append",
            "data": {"role": "user", "content": [{"type": "text", "text": f"m{seq}"}]},
        }

    topic = f"{deployment.name}.events"
    producer = Producer(
        {"bootstrap.servers": deployment.bootstrap, "partitioner": "murmur2_random"}
    )
    worker = deployment.start_worker()
    for seq in range(50):
        producer.produce(topic, key=b"retained", value=orjson.dumps(user(seq)))
    producer.flush(10)
    deployment.wait_accounted(50)
    assert worker.terminate() == 0
    for seq in range(50, 100):
        producer.produce(topic, key=b"retained", value=orjson.dumps(user(seq)))
    producer.flush(10)
    # Retention deletes what the group has not consumed yet: events 50..74 are gone.
    partition = next(m.partition() for m in deployment.consume_all(topic))
    admin = AdminClient({"bootstrap.servers": deployment.bootstrap})
    for future in admin.delete_records([TopicPartition(topic, partition, 75)]).values():
        future.result(30)
    deployment.start_worker()
    deployment.wait_accounted(100 - 25)
    update = deployment.redis_update("retained")
    assert update is not None and update["seq"] == 99
    for name in ("contextPressure", "contextBreakdown", "tokenUsage"):
        assert update["faults"][name] == {"seq": 75, "error": "gap: expected seq 50, got 75"}


def test_a_new_worker_restores_rows_from_the_changelog(
    deployment: Deployment, tmp_path: Path
) -> None:
    """A worker with an empty state directory rebuilds every row from the changelog (as
    after a rebalance to a new host), then continues each session exactly."""
    paths = _corpus(tmp_path / "logs", sessions=6, seed=23)
    first_half = [p for i, p in enumerate(paths) if i % 2 == 0]
    expected = offline_fold(paths)
    first = deployment.start_worker()
    deployment.stream("produce", *map(str, first_half))
    deployment.wait_accounted(event_count(first_half))
    assert first.terminate() == 0
    deployment.start_worker("fresh")  # another state directory: nothing local
    deployment.stream("produce", *map(str, paths))  # everything again, plus the rest
    deployment.wait_accounted(event_count(first_half) + event_count(paths))
    stats = deployment.stats()
    assert stats["duplicate"] == event_count(first_half)
    _assert_exact(deployment, expected)


def test_a_redis_outage_neither_stalls_nor_loses_and_redis_comes_back_exact(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Redis stopped mid-run for longer than the max poll interval and started again
    empty: the worker keeps consuming (output topic, rows), stays in its group, reports
    not-ready, and when Redis is back re-seeds it: every session and the totals exact."""
    server = RedisServer(tmp_path / "redis")
    server.start()
    deployment = Deployment(kafka_bootstrap, server.url, tmp_path)
    try:
        paths = _corpus(tmp_path / "logs", sessions=6, seed=29)
        first, second = paths[:3], paths[3:]
        expected = offline_fold(paths)
        worker = deployment.start_worker(
            STREAM_MAX_POLL_INTERVAL="8", STREAM_REDIS_CHECK_INTERVAL="1"
        )
        deployment.stream("produce", *map(str, first))
        deployment.wait_accounted(event_count(first))
        server.stop()
        deployment.stream("produce", *map(str, second))
        # Consumption goes on: the output topic gets every session's final update.
        wait_until(
            lambda: {k: v for k, v in deployment.latest_output().items()} == expected,
            120,
            "the output topic to catch up during the outage",
        )
        wait_until(lambda: worker.probe("/readyz") == 503, 30, "readiness to drop")
        assert worker.metrics()["stream_redis_retrying"] == 1
        time.sleep(10)  # past the max poll interval: still a member, still consuming
        server.start()  # empty
        deployment.wait_accounted(event_count(paths), timeout=60)
        _assert_exact(deployment, expected)
        assert deployment.accounted() == event_count(paths)
        wait_until(lambda: worker.probe("/readyz") == 200, 30, "readiness to return")
        assert "leaving group" not in worker.log().lower()
    finally:
        deployment.stop_all()
        server.stop()


def test_a_permanent_redis_error_stops_the_worker_loudly(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    import redis as redis_client

    server = RedisServer(tmp_path / "redis")
    server.start()
    deployment = Deployment(kafka_bootstrap, server.url, tmp_path)
    try:
        worker = deployment.start_worker()
        admin = redis_client.Redis.from_url(server.url)
        admin.config_set("requirepass", "changed")
        admin.client_kill_filter(_type="normal", skipme=True)  # connections re-authenticate
        deployment.stream("produce", *map(str, _corpus(tmp_path / "logs", sessions=1, seed=3)))
        assert worker.process is not None
        code = worker.process.wait(60)
        assert code == 3
        assert "stopped: Redis refused" in worker.log()
    finally:
        deployment.stop_all()
        server.stop()
