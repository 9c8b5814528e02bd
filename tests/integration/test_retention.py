"""A session whose beginning fell out of the input topic's retention is rebuilt from its
logs: `stream produce --reset` ends exact, not with a gap fault."""

import random
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from stream.config import Settings
from stream.ops.admin import ensure_topics
from tests.integration.harness import (
    Deployment,
    event_count,
    offline_fold,
    wait_until,
    write_sessions,
)

pytestmark = [
    pytest.mark.integration,
    # The repair below takes reset records: off by default (docs/operations.md).
    pytest.mark.deployment_options(partitions=2, extra_env={"STREAM_RESETS": "1"}),
]


def _delete_first_half(deployment: Deployment, topic: str) -> None:
    """What retention does: the oldest records are gone, the offsets stay."""
    consumer = Consumer({"bootstrap.servers": deployment.bootstrap, "group.id": "probe"})
    cut = []
    for partition in range(deployment.partitions):
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        if high > low:
            cut.append(TopicPartition(topic, partition, (low + high) // 2))
    consumer.close()
    admin = AdminClient({"bootstrap.servers": deployment.bootstrap})
    for future in admin.delete_records(cut).values():
        future.result(30)


def test_sessions_past_retention_are_rebuilt_exactly_from_their_logs(
    deployment: Deployment, tmp_path: Path
) -> None:
    paths = write_sessions(tmp_path / "logs", random.Random(71), "old", 4, (60, 120))
    expected = offline_fold(paths)
    total = event_count(paths)
    ensure_topics(Settings.from_env(deployment.env()))
    deployment.stream("produce", *map(str, paths))
    topic = f"{deployment.name}.events"
    _delete_first_half(deployment, topic)
    # A worker with no state starts from the earliest retained offset: gap faults, loudly.
    deployment.start_worker()

    def gapped() -> list[str]:
        return [
            s
            for s in expected
            if "gap: expected seq 0" in str((deployment.redis_update(s) or {}).get("faults"))
        ]

    wait_until(lambda: bool(gapped()), 60, "a loud gap fault")
    # The documented repair: produce the logs again under a new generation.
    deployment.stream("produce", "--reset", *map(str, paths))
    wait_until(
        lambda: all(deployment.redis_update(s) == line for s, line in expected.items()),
        60,
        "every session rebuilt exactly",
    )
    output = deployment.latest_output()
    assert all(output[s] == line for s, line in expected.items())
    # The totals count every event ever taken: every event of every log folded once by
    # the new lives, and the first lives' events (the retained half) stay counted.
    wait_until(lambda: deployment.stats()["folded"] >= total, 30, "the totals")
    assert deployment.accounted() > total
    assert all(
        deployment.redis().hget(f"{deployment.prefix}session:{s}", "gen") == b"2" for s in expected
    )
