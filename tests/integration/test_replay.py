"""``stream replay`` and ``stream lag`` against a real broker, real workers and Redis.

Every figure ``stream lag`` prints is checked against offsets read independently with a
confluent-kafka Consumer; every replayed or rebuilt Redis state against the offline fold.
"""

import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from stream.config import Settings
from stream.ops.control import Control, read_control
from tests.integration.harness import (
    EXAMPLE_LOG,
    REPO,
    Deployment,
    event_count,
    offline_fold,
    wait_until,
    write_sessions,
)

pytestmark = pytest.mark.integration


def _logs(directory: Path, sessions: int, seed: int) -> list[Path]:
    """Generated sessions and the example log (read in place)."""
    rng = random.Random(seed)
    return [*write_sessions(directory, rng, f"replay-{seed}-", sessions, (30, 150)), EXAMPLE_LOG]


def _stream(deployment: Deployment, *args: str) -> subprocess.CompletedProcess[str]:
    """`stream ARGS` with the deployment's environment; any exit code."""
    return subprocess.run(
        [sys.executable, "-m", "stream", *args],
        env=deployment.env(),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _settings(deployment: Deployment) -> Settings:
    return Settings.from_env(deployment.env())


def _broker_view(deployment: Deployment, topic: str) -> dict[int, tuple[int, int, int | None]]:
    """(earliest, end, the worker group's committed offset) per partition, read with a
    plain Consumer: watermarks and OffsetFetch, not the AdminClient calls `stream` uses."""
    consumer = Consumer(
        {
            "bootstrap.servers": deployment.bootstrap,
            "group.id": deployment.name,  # committed() reads the group's offsets, never joins
            "enable.auto.commit": False,
        }
    )
    try:
        partitions = sorted(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
        committed = consumer.committed([TopicPartition(topic, p) for p in partitions], timeout=10)
        view = {}
        for tp in committed:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, tp.partition), 10)
            view[tp.partition] = (low, high, tp.offset if tp.offset >= 0 else None)
        return view
    finally:
        consumer.close()


def _input(deployment: Deployment) -> str:
    return f"{deployment.name}.events"


def _assert_redis_is(deployment: Deployment, expected: dict[str, dict[str, Any]]) -> None:
    for session_id, line in expected.items():
        assert deployment.redis_update(session_id) == line, session_id


def _flush_redis(deployment: Deployment) -> None:
    client = deployment.redis()
    keys = list(client.scan_iter(f"{deployment.prefix}*"))
    if keys:
        client.delete(*keys)


def test_replay_to_earliest_plans_moves_once_and_republishes_the_same_state(
    deployment: Deployment, tmp_path: Path
) -> None:
    paths = _logs(tmp_path / "logs", sessions=6, seed=41)
    expected, total = offline_fold(paths), event_count(paths)
    worker = deployment.start_worker()
    deployment.stream("produce", *map(str, paths))
    deployment.wait_accounted(total)
    _assert_redis_is(deployment, expected)
    assert worker.terminate() == 0
    topic = _input(deployment)
    before = _broker_view(deployment, topic)
    assert all(committed == high for low, high, committed in before.values() if high)

    dry = _stream(deployment, "replay", "--to-earliest", "--dry-run", "--wait", "20")
    assert dry.returncode == 0, dry.stderr
    assert "dry run: nothing changed" in dry.stdout
    assert f"{sum(high for _, high, _ in before.values()):,}" in dry.stdout  # records re-read
    assert _broker_view(deployment, topic) == before

    first = _stream(deployment, "replay", "--to-earliest", "--wait", "20")
    assert first.returncode == 0, first.stderr
    assert "moved" in first.stdout
    moved = _broker_view(deployment, topic)
    assert all(committed == low for low, _, committed in moved.values())

    second = _stream(deployment, "replay", "--to-earliest")
    assert second.returncode == 0, second.stderr
    assert "nothing to change" in second.stdout
    assert _broker_view(deployment, topic) == moved

    accounted = deployment.stats()
    worker.restart()
    # Everything is read again (lag back to 0 means read and committed); the rows already
    # account for all of it, so nothing is folded twice and Redis ends where it was.
    wait_until(lambda: _lag(deployment) == 0, 90, "the replay to be read and committed")
    after = deployment.stats()
    assert (after["folded"], after["faulted"]) == (accounted["folded"], accounted["faulted"])
    _assert_redis_is(deployment, expected)


def _lag(deployment: Deployment) -> int:
    done = _stream(deployment, "lag", "--json")
    assert done.returncode == 0, done.stderr
    lag: int = orjson.loads(done.stdout)["lag"]
    return lag


def test_rebuild_restores_every_session_after_redis_and_local_state_are_lost(
    deployment: Deployment, tmp_path: Path
) -> None:
    paths = _logs(tmp_path / "logs", sessions=6, seed=43)
    expected, total = offline_fold(paths), event_count(paths)
    worker = deployment.start_worker()
    deployment.stream("produce", *map(str, paths))
    deployment.wait_accounted(total)
    assert worker.terminate() == 0
    _flush_redis(deployment)
    # A file inside the worker's local RocksDB copy: the rebuild must make it go away.
    state = deployment.workdir / f"state-{worker.worker_id}"
    tables = sorted(state.glob("v*/tables/sessions-*.db"))
    assert tables
    (tables[0] / "planted").write_text("stale")

    unconfirmed = _stream(deployment, "replay", "--to-earliest", "--rebuild")
    assert unconfirmed.returncode == 2 and "--yes" in unconfirmed.stderr
    done = _stream(deployment, "replay", "--to-earliest", "--rebuild", "--wait", "20", "--yes")
    assert done.returncode == 0, done.stderr
    control = read_control(_settings(deployment))
    assert (control.generation, control.epoch) == (2, 1)
    changelog = f"{deployment.name}-sessions-changelog"
    assert all(low == high for low, high, _ in _broker_view(deployment, changelog).values())

    again = _stream(deployment, "replay", "--to-earliest", "--rebuild", "--yes")
    assert again.returncode == 0, again.stderr
    assert "already in place" in again.stdout and "nothing to change" in again.stdout
    assert read_control(_settings(deployment)) == control  # not even rewritten

    worker.restart()
    assert "dropped local table state" in worker.log()
    assert not (tables[0] / "planted").exists()
    assert (state / "epoch").read_text().strip() == "1"
    deployment.wait_accounted(total, timeout=90)
    stats = deployment.stats()
    # Folded afresh, not recognised as already applied: the state really was discarded.
    assert stats["duplicate"] == 0 and stats["folded"] + stats["faulted"] == total
    _assert_redis_is(deployment, expected)


def test_replay_refuses_live_members_and_lag_equals_the_brokers_figures(
    deployment: Deployment, tmp_path: Path, kafka_admin: AdminClient
) -> None:
    paths = _logs(tmp_path / "logs", sessions=4, seed=47)
    total = event_count(paths)
    worker = deployment.start_worker()
    deployment.stream("produce", *map(str, paths[:2]))
    deployment.wait_accounted(event_count(paths[:2]))
    topic = _input(deployment)

    def settled() -> bool:  # the worker commits on its interval: wait for it
        return all(
            high == 0 or c == high for _, high, c in _broker_view(deployment, topic).values()
        )

    wait_until(settled, 60, "the worker's commits")
    before = _broker_view(deployment, topic)

    refused = _stream(deployment, "replay", "--to-earliest")
    assert refused.returncode == 1
    group = kafka_admin.describe_consumer_groups([deployment.name])[deployment.name].result()
    assert len(group.members) == 1
    member = group.members[0]
    assert "refusing" in refused.stderr
    assert member.client_id in refused.stderr and member.member_id in refused.stderr
    assert member.host.lstrip("/") in refused.stderr
    assert _broker_view(deployment, topic) == before

    live = orjson.loads(_stream(deployment, "lag", "--json").stdout)
    assert [m["memberId"] for m in live["members"]] == [member.member_id]
    assert live["members"][0]["partitions"] == sorted(before)

    assert worker.terminate() == 0
    deployment.stream("produce", *map(str, paths[2:]))  # a backlog nobody reads yet
    view = _broker_view(deployment, topic)
    report = _stream(deployment, "lag", "--json")
    assert report.returncode == 0, report.stderr
    figures = orjson.loads(report.stdout)
    assert figures["members"] == [] and figures["state"] == "EMPTY"
    for row in figures["partitions"]:
        low, high, committed = view[row["partition"]]
        assert (row["earliest"], row["end"], row["committed"]) == (low, high, committed)
        assert row["lag"] == high - (committed if committed is not None else low)
    lag = sum(row["lag"] for row in figures["partitions"])
    assert figures["lag"] == lag == total - event_count(paths[:2])

    table = _stream(deployment, "lag")
    assert table.returncode == 0 and f"{lag:,}" in table.stdout
    assert "no live members" in table.stdout
    watched = _stream(deployment, "lag", "--watch", "--interval", "0.2", "--seconds", "0.5")
    assert watched.returncode == 0, watched.stderr
    assert f"lag {lag:,}" in watched.stdout and "records/s" in watched.stdout


def test_workers_publish_with_the_rebuild_generation(
    deployment: Deployment, tmp_path: Path
) -> None:
    paths = [EXAMPLE_LOG]
    worker = deployment.start_worker()
    deployment.stream("produce", *map(str, paths))
    deployment.wait_accounted(event_count(paths))
    assert worker.terminate() == 0
    done = _stream(deployment, "replay", "--to-earliest", "--rebuild", "--wait", "20", "--yes")
    assert done.returncode == 0, done.stderr
    control: Control = read_control(_settings(deployment))
    worker.restart()
    wait_until(lambda: _lag(deployment) == 0, 60, "the rebuild to be read and committed")
    stored = deployment.redis().hget(f"{deployment.prefix}session:example-system-prompts", "gen")
    assert stored is not None and int(stored) == control.generation == 2
