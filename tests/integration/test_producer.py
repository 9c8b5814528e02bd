"""``BatchSender.left`` against the real broker: after it returns, the records are in a
produce request on the wire, so a step that then holds the loop (the next batch's fold)
does not hold their round trip back."""

from __future__ import annotations

import asyncio
import time
import uuid
from types import SimpleNamespace
from typing import Any

import aiokafka  # type: ignore[import-untyped]
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined,unused-ignore]

from stream.app.producer import BatchSender
from stream.ops.admin import create_topic

HOLD = 1.0  # seconds the loop is held, as a long fold would


def appended_at(bootstrap: str, topic: str, offset: int) -> float:
    """The broker's append time (seconds) of the record at ``offset`` of partition 0."""

    async def read() -> float:
        consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        await consumer.start()
        try:
            tp = aiokafka.TopicPartition(topic, 0)
            consumer.assign([tp])
            consumer.seek(tp, offset)
            record = await asyncio.wait_for(consumer.getone(), 30)
            assert record.timestamp_type == 1  # LogAppendTime: stamped by the broker
            return float(record.timestamp) / 1000
        finally:
            await consumer.stop()

    return asyncio.run(read())


def held_send(bootstrap: str, topic: str, wait_left: bool) -> tuple[float, int]:
    """One record sent, the loop then held for ``HOLD`` s; the hold's start and the
    record's offset."""

    async def run() -> tuple[float, int]:
        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap)
        await producer.start()
        try:
            app: Any = SimpleNamespace(
                producer=SimpleNamespace(_producer=producer, _ensure_producer=lambda: producer)
            )
            sender = BatchSender(app)
            await sender.add(topic, 0, b"warm", b"up")  # connection and metadata first
            offsets: list[int] = []
            delivery = sender.add(topic, 0, b"k", b"v", on_sent=lambda _, o: offsets.append(o))
            if wait_left:
                assert await sender.left() < 32  # left within the bound
            else:
                await asyncio.sleep(0)
            held_from = time.time()
            time.sleep(HOLD)  # the loop is held
            await delivery
            return held_from, offsets[0]
        finally:
            await producer.stop()

    return asyncio.run(run())


def test_records_that_have_left_reach_the_broker_while_the_loop_is_held(
    kafka_bootstrap: str, kafka_admin: AdminClient
) -> None:
    topic = f"left-{uuid.uuid4().hex[:8]}"
    config = {"message.timestamp.type": "LogAppendTime"}
    create_topic(kafka_admin, NewTopic(topic, 1, 1, config=config), timeout=30)

    held_from, offset = held_send(kafka_bootstrap, topic, wait_left=True)
    appended = appended_at(kafka_bootstrap, topic, offset)
    assert appended < held_from + HOLD / 2, (appended - held_from, "appended after the hold")

    # Without it, one turn of the loop is not enough: the request leaves after the hold.
    held_from, offset = held_send(kafka_bootstrap, topic, wait_left=False)
    appended = appended_at(kafka_bootstrap, topic, offset)
    assert appended >= held_from + HOLD * 0.9, (appended - held_from, "appended during the hold")
