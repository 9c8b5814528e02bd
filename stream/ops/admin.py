"""Topic administration with confluent-kafka: create what the service needs, idempotently."""

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
    metadata = client.list_topics(settings.input_topic, timeout=timeout)
    return len(metadata.topics[settings.input_topic].partitions)
