"""Sessions end: expiry by event time through the real broker, RocksDB and redis-server
(contract: "Session expiry"; docs/operations.md, "Session expiry")."""

import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import Producer

from stream.config import Settings
from stream.ops.admin import ensure_topics
from stream.session import codec
from stream.session.batch import Limits, Message, fold_batch
from stream.session.partition import PartitionRow
from stream.testing import events as build
from tests.integration.harness import Deployment, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.deployment_options(partitions=1)]

DAY = 86_400_000
T0 = 1_700_000_000_000
TTL = {"STREAM_SESSION_TTL": "1d"}


def user(seq: int, time: int) -> dict[str, Any]:
    return build.user_message(seq, build.texts(f"m{seq}"), time=time)


class Sender:
    """Records to the input topic, kept so a pure fold can say what to expect."""

    def __init__(self, deployment: Deployment) -> None:
        ensure_topics(Settings.from_env(deployment.env()))
        self.topic = f"{deployment.name}.events"
        self.producer = Producer({"bootstrap.servers": deployment.bootstrap})
        self.sent: list[tuple[bytes, bytes]] = []

    def send(self, session: str, *events: dict[str, Any]) -> None:
        value = orjson.dumps(list(events))
        self.producer.produce(self.topic, value, session.encode())
        self.sent.append((session.encode(), value))

    def flush(self) -> None:
        assert self.producer.flush(30) == 0

    def expected(self) -> dict[str, dict[str, Any]]:
        """The pure fold of everything sent, one partition, the same TTL: each session's
        update, less those past their TTL at the end (the sweep takes them)."""
        rows: dict[bytes, bytes] = {}
        messages = [Message(k, v, self.topic, 0, n) for n, (k, v) in enumerate(self.sent)]
        limits = replace(Limits(), session_ttl=DAY)
        latest: dict[str, dict[str, Any]] = {}
        for message in messages:
            result = fold_batch([message], lambda key, _: rows.get(key), limits)
            for change in result.sessions:
                rows[change.key] = change.row
                latest[change.session_id] = change.update
            for part in result.partitions:
                rows[b"\xff"] = part.row
        clock = PartitionRow.decode(rows[b"\xff"])
        for key, row in rows.items():
            if key != b"\xff" and clock.expired_record(codec.decode(row), DAY):
                latest.pop(key.decode())
        return latest

    @property
    def events(self) -> int:
        return sum(len(orjson.loads(v)) for _, v in self.sent)


def _last_record(deployment: Deployment, topic: str, key: bytes) -> Any:
    found = [m for m in deployment.consume_all(topic) if m.key() == key]
    return found[-1].value() if found else b"missing"


def _expired(worker: Any) -> float:
    return sum(
        v for k, v in worker.metrics().items() if k.startswith("stream_sessions_expired_total")
    )


def test_an_expired_session_is_gone_everywhere_and_what_follows_is_exact(
    deployment: Deployment, tmp_path: Path
) -> None:
    sender = Sender(deployment)
    worker = deployment.start_worker(**TTL)
    client = deployment.redis()
    prefix = deployment.prefix
    sender.send("a", user(0, T0), user(1, T0 + 1), user(2, T0 + 2))
    sender.send("b", user(0, T0 + 3))
    sender.flush()
    wait_until(lambda: deployment.redis_update("b") is not None, 60, "a and b published")
    heard: list[bytes] = []
    pubsub = client.pubsub()
    pubsub.subscribe(f"{prefix}session:a")
    pubsub.get_message(timeout=5)  # the subscribe confirmation

    def listen() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not heard:
            message = pubsub.get_message(ignore_subscribe_messages=True, timeout=1)
            if message is not None:
                heard.append(message["data"])

    listener = threading.Thread(target=listen, daemon=True)
    listener.start()
    # Two sessions two days on: the partition's stream time passes a's and b's TTL.
    sender.send("c", user(0, T0 + 2 * DAY), user(1, T0 + 2 * DAY + 1))
    sender.send("d", user(0, T0 + 2 * DAY + 2))
    sender.flush()
    key_a = f"{prefix}session:a"
    wait_until(lambda: not client.exists(key_a), 60, "a dropped from Redis")
    listener.join(60)
    assert orjson.loads(heard[0]) == {"sessionId": "a", "expired": True}
    assert client.hget(f"{prefix}tallies", "a") is None
    assert client.zscore(f"{prefix}recent", "a") is None
    stats = deployment.stats()
    assert stats["folded"] == sender.events == 7  # every event ever taken, a's and b's too
    assert int(client.hget(f"{prefix}stats", "expired") or 0) == 2
    wait_until(lambda: _expired(worker) == 2, 30, "the expiry counter")
    # Tombstones on the output topic and in the changelog.
    assert _last_record(deployment, f"{deployment.name}.context", b"a") is None
    changelog = f"{deployment.name}-sessions-changelog"
    assert _last_record(deployment, changelog, b"a") is None
    # A late event of a: never folded onto a blank state as if nothing came before.
    sender.send("a", user(3, T0 + 2 * DAY + 3))
    # b starts over at seq 0: exact.
    sender.send("b", user(0, T0 + 2 * DAY + 4), user(1, T0 + 2 * DAY + 5))
    sender.flush()
    wait_until(lambda: deployment.accounted() >= 10, 60, "the late events")
    late = deployment.redis_update("a")
    assert late is not None and "gap: expected seq 0, got 3" in str(late["faults"])
    expected = sender.expected()
    for session in "abcd":
        assert deployment.redis_update(session) == expected[session], session
    assert deployment.latest_output() == expected
    assert deployment.stats()["folded"] + deployment.stats()["faulted"] == sender.events

    # A replay of the same input from the earliest offset: the same outcomes.
    replayed = Deployment(
        deployment.bootstrap,
        deployment.redis_url,
        tmp_path / "replay",
        partitions=1,
        extra_env={"STREAM_INPUT_TOPIC": sender.topic, **TTL},
    )
    (tmp_path / "replay").mkdir()
    try:
        replayed.start_worker()
        wait_until(lambda: replayed.accounted() >= sender.events, 60, "the replay")
        for session in "abcd":
            assert replayed.redis_update(session) == expected[session], session
    finally:
        replayed.stop_all()


def test_a_restart_on_an_empty_state_dir_in_the_middle_of_a_sweep_loses_nothing(
    deployment: Deployment,
) -> None:
    sender = Sender(deployment)
    many = 30_000
    for n in range(many):
        sender.send(f"s{n}", user(0, T0 + n), user(1, T0 + n + 1))
    sender.flush()
    first = deployment.start_worker(**TTL)
    wait_until(lambda: deployment.accounted() >= 2 * many, 180, "the sessions")
    sender.send("late-1", user(0, T0 + 3 * DAY))
    sender.send("late-2", user(0, T0 + 3 * DAY))
    sender.flush()
    wait_until(lambda: _expired(first) > 0, 60, "the sweep under way")
    first.kill()
    gone_before = int(deployment.redis().hget(f"{deployment.prefix}stats", "expired") or 0)
    assert gone_before < many, "the sweep ended before the kill: nothing tested"
    # A replacement with an empty state dir: it restores from the changelog and goes on.
    deployment.start_worker(tag="fresh", **TTL)
    client = deployment.redis()
    prefix = deployment.prefix
    wait_until(lambda: client.hlen(f"{prefix}tallies") == 2, 180, "only the live sessions in Redis")
    assert int(client.hget(f"{prefix}stats", "expired") or 0) == many
    assert deployment.stats()["folded"] == sender.events
    assert sorted(deployment.latest_output()) == ["late-1", "late-2"]
