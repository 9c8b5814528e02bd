"""Topic administration with confluent-kafka: create what the service needs, idempotently."""

import time

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined,unused-ignore]

from stream.config import Settings


def admin(settings: Settings) -> AdminClient:
    # librdkafka logs every failed connect attempt (20 a second); the caller reports the
    # failure once, with the address, when the request times out.
    return AdminClient(settings.librdkafka() | {"log_level": 2})


def ensure_topics(settings: Settings, timeout: float = 20.0) -> int:
    """Create the input, output (compacted) and dead-letter topics when missing.

    Returns the input topic's partition count: the state table must have exactly as many
    partitions (co-partitioning), whatever ``STREAM_PARTITIONS`` says.
    """
    client = admin(settings)
    wanted = {
        settings.input_topic: {},
        settings.output_topic: {"cleanup.policy": "compact"},
        settings.dlq_topic: {},
    }
    existing = client.list_topics(timeout=timeout).topics
    missing = [
        NewTopic(name, settings.partitions, settings.replication_factor, config=config)
        for name, config in wanted.items()
        if name not in existing
    ]
    if missing:
        for name, future in client.create_topics(missing, request_timeout=timeout).items():
            try:
                future.result()
            except KafkaException as error:
                if error.args[0].code() != 36:  # TOPIC_ALREADY_EXISTS: a racing worker won
                    raise RuntimeError(f"cannot create topic {name}: {error}") from None
    return partition_count(client, settings.input_topic, timeout)


def create_topic(client: AdminClient, topic: NewTopic, timeout: float = 20.0) -> int:
    """Create ``topic`` and return its partition count once the broker knows it."""
    client.create_topics([topic], request_timeout=timeout)[topic.topic].result()
    return partition_count(client, topic.topic, timeout)


def partition_count(client: AdminClient, topic: str, timeout: float = 20.0) -> int:
    """The topic's partition count, once the broker we ask knows the topic.

    A created topic's future resolves when the controller has it; the broker answering
    metadata may still say UNKNOWN_TOPIC_OR_PART with no partitions for a moment (KRaft
    propagates metadata asynchronously). Reading the count then would give 0.
    """
    deadline = time.monotonic() + timeout
    while True:
        left = max(deadline - time.monotonic(), 0.1)
        found = client.list_topics(topic, timeout=left).topics.get(topic)
        if found is not None and found.error is None and found.partitions:
            return len(found.partitions)
        if time.monotonic() >= deadline:
            problem = found.error if found is not None else "absent"
            raise RuntimeError(f"topic {topic} has no partitions after {timeout:.0f} s: {problem}")
        time.sleep(0.1)
