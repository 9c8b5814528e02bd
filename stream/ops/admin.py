"""Topic administration with confluent-kafka: create what the service needs, idempotently."""

import time

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined,unused-ignore]

from stream.config import Settings
from stream.ops.topics import create_missing, specs


def admin(settings: Settings) -> AdminClient:
    # librdkafka logs every failed connect attempt (20 a second); the caller reports the
    # failure once, with the address, when the request times out.
    return AdminClient(settings.librdkafka() | {"log_level": 2})


def ensure_topics(settings: Settings, timeout: float = 20.0) -> int:
    """Create the input, output (compacted) and dead-letter topics when missing, as their
    specs say (``stream.ops.topics``, the one home of the topics' settings).

    Returns the input topic's partition count: the state table must have exactly as many
    partitions (co-partitioning), whatever ``STREAM_PARTITIONS`` says.
    """
    client = admin(settings)
    existing = client.list_topics(timeout=timeout).topics
    create_missing(
        client,
        [
            spec
            for spec in specs(settings)
            if spec.role in ("input", "output", "dlq") and spec.name not in existing
        ],
        timeout,
    )
    return partition_count(client, settings.input_topic, timeout)


def await_group_coordinator(settings: Settings, timeout: float = 30.0) -> None:
    """Return once the worker's group (``STREAM_APP_ID``) has a coordinator that answers.

    A fresh cluster creates ``__consumer_offsets`` on the first group request and answers
    "not available" meanwhile; Faust's client would log that as an ERROR on a clean first
    start. Past ``timeout`` Faust's own retries take over. Raises ``RuntimeError`` when the
    principal may not use the group (it needs READ on it).

    Asked as an offset fetch by a consumer that never joins, not with the admin client's
    describe_consumer_groups: that one can abort the process on an assertion inside
    librdkafka (confluentinc/librdkafka#4605), seen here against a three-node cluster.
    """
    consumer = Consumer(
        settings.librdkafka()
        | {"group.id": settings.app_id, "enable.auto.commit": False, "log_level": 0}
    )
    try:
        consumer.committed([TopicPartition(settings.input_topic, 0)], timeout=timeout)
    except KafkaException as error:
        if error.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED:
            raise RuntimeError(
                f"the consumer group {settings.app_id} (STREAM_APP_ID) is not authorized for"
                " this principal: it needs READ on the group"
            ) from None
        # Anything else (a timeout): Faust's consumer meets it and says what it is.
    finally:
        consumer.close()


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
