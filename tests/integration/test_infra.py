"""Smoke test of the local infrastructure: the broker and redis-server from conftest work."""

from __future__ import annotations

import time
import uuid
from collections import defaultdict

import redis
from confluent_kafka import Consumer, KafkaError, Message, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from stream.ops.admin import create_topic


def test_kafka_roundtrip_through_a_3_partition_topic(
    kafka_bootstrap: str, kafka_admin: AdminClient
) -> None:
    topic = f"infra-smoke-{uuid.uuid4().hex[:8]}"
    assert create_topic(kafka_admin, NewTopic(topic, num_partitions=3), timeout=30) == 3

    produced: dict[str, int] = {}  # value -> partition

    def delivered(err: KafkaError | None, msg: Message) -> None:
        assert err is None, err
        produced[msg.value().decode()] = msg.partition()

    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
    sent = [(f"key-{i % 4}", f"value-{i}") for i in range(10)]
    for key, value in sent:
        producer.produce(topic, key=key, value=value, on_delivery=delivered)
    assert producer.flush(30) == 0
    assert len(produced) == 10

    consumer = Consumer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "group.id": f"{topic}-group",
            "auto.offset.reset": "earliest",
        }
    )
    received: list[tuple[str, str, int]] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 60
        while len(received) < 10 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            received.append((msg.key().decode(), msg.value().decode(), msg.partition()))
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()

    assert sorted((k, v) for k, v, _ in received) == sorted(sent)
    # Same key -> same partition, and per-key order is preserved.
    by_key: dict[str, list[str]] = defaultdict(list)
    for key, value, partition in received:
        assert partition == produced[value]
        by_key[key].append(value)
    for key, values in by_key.items():
        assert values == [v for k, v in sent if k == key]
        assert len({produced[v] for v in values}) == 1


def test_redis_set_get_and_pubsub(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    key = f"infra-smoke:{uuid.uuid4().hex[:8]}"
    assert client.set(key, "hello")
    assert client.get(key) == b"hello"

    pubsub = client.pubsub()
    try:
        pubsub.subscribe(key)
        confirm = pubsub.get_message(timeout=5)
        assert confirm is not None and confirm["type"] == "subscribe"
        assert client.publish(key, "ping") == 1
        message = pubsub.get_message(ignore_subscribe_messages=True, timeout=5)
        assert message is not None and message["data"] == b"ping"
    finally:
        pubsub.close()
        client.close()
