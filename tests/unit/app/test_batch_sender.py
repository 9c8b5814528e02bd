"""How a batch's records leave (stream.app.producer.BatchSender) without a broker: grouped
by topic partition in few record batches, each turn's deliveries resolved together, a
later turn submitted after the one before it."""

import asyncio
from dataclasses import dataclass
from typing import Any

import pytest

from stream.app import producer as app_producer


class FakeBuilder:
    def __init__(self, capacity: int) -> None:
        self.capacity, self.records, self.closed = capacity, [], False

    def append(self, *, timestamp: Any, key: Any, value: Any, headers: Any) -> Any:
        if self.closed or len(self.records) >= self.capacity:
            return None
        self.records.append((key, value, headers))
        return object()

    def close(self) -> None:
        self.closed = True


@dataclass
class Delivered:
    offset: int


class FakeProducer:
    def __init__(self, capacity: int = 3, fail: bool = False) -> None:
        self.capacity, self.fail = capacity, fail
        self.sent: list[tuple[str, int, list[Any]]] = []
        self.offsets: dict[tuple[str, int], int] = {}
        producer = self

        class Cluster:
            def partitions_for_topic(self, topic: str) -> set[int]:
                return {0, 1, 2}

            def available_partitions_for_topic(self, topic: str) -> set[int]:
                return {0, 1, 2}

        class Client:
            cluster = Cluster()

            async def _wait_on_metadata(self, topic: str) -> None:
                producer.metadata_waits += 1

        self.client, self.metadata_waits = Client(), 0

    def _partitioner(self, key: bytes | None, every: list[int], available: list[int]) -> int:
        return len(key or b"") % len(every)

    def create_batch(self) -> FakeBuilder:
        return FakeBuilder(self.capacity)

    async def send_batch(self, batch: FakeBuilder, topic: str, *, partition: int) -> Any:
        assert batch.closed
        self.sent.append((topic, partition, batch.records))
        delivery: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if self.fail:
            delivery.set_exception(RuntimeError("broker said no"))
        else:
            base = self.offsets.get((topic, partition), 0)
            self.offsets[(topic, partition)] = base + len(batch.records)
            delivery.set_result(Delivered(base))
        return delivery


class FakeProducerApp:
    def __init__(self, producer: FakeProducer) -> None:
        class FaustProducer:
            def _ensure_producer(self) -> FakeProducer:
                return producer

        self.producer = FaustProducer()


def test_records_leave_grouped_by_topic_partition_in_few_batches() -> None:
    producer = FakeProducer(capacity=3)
    persisted: list[tuple[int, int]] = []

    def persist(partition: int, offset: int) -> None:
        persisted.append((partition, offset))

    async def run() -> None:
        sender = app_producer.BatchSender(FakeProducerApp(producer))
        futures = [sender.add("rows", i % 2, b"k%d" % i, b"v", on_sent=persist) for i in range(8)]
        futures += [sender.add("out", None, b"x" * n, b"u", [("gen", b"1")]) for n in (1, 2, 4)]
        await asyncio.gather(*futures)

    asyncio.run(run())
    rows = [(p, len(r)) for t, p, r in producer.sent if t == "rows"]
    assert rows == [(0, 3), (0, 1), (1, 3), (1, 1)]  # 4 per partition, 3 per batch
    out = sorted((p, [k for k, _, _ in r]) for t, p, r in producer.sent if t == "out")
    assert out == [(1, [b"x", b"xxxx"]), (2, [b"xx"])]  # the producer's partitioner
    assert producer.metadata_waits == 1  # once per topic without a given partition
    # once per record batch, with its highest offset
    assert sorted(persisted) == [(0, 2), (0, 3), (1, 2), (1, 3)]


def test_a_failed_delivery_fails_every_record_of_it() -> None:
    producer = FakeProducer(fail=True)

    async def run() -> list[Any]:
        sender = app_producer.BatchSender(FakeProducerApp(producer))
        futures = [sender.add("rows", 0, b"k", b"v") for _ in range(2)]
        return await asyncio.gather(*futures, return_exceptions=True)

    outcomes = asyncio.run(run())
    assert all(isinstance(o, RuntimeError) for o in outcomes)


def test_records_of_one_turn_share_their_delivery_and_submitted_ones_still_report() -> None:
    class SecondRefused(FakeProducer):
        async def send_batch(self, batch: FakeBuilder, topic: str, *, partition: int) -> Any:
            if self.sent:
                raise RuntimeError("accumulator full")
            return await super().send_batch(batch, topic, partition=partition)

    producer = SecondRefused(capacity=10)
    persisted: list[tuple[int, int]] = []

    def persist(partition: int, offset: int) -> None:
        persisted.append((partition, offset))

    async def run() -> list[Any]:
        sender = app_producer.BatchSender(FakeProducerApp(producer))
        futures = [sender.add("rows", i % 2, b"k%d" % i, b"v", on_sent=persist) for i in range(4)]
        assert all(f is futures[0] for f in futures)  # one delivery for one turn's records
        outcomes = await asyncio.gather(futures[0], return_exceptions=True)
        await asyncio.sleep(0)  # the submitted batch's callbacks
        later = sender.add("rows", 0, b"k", b"v")
        assert later is not futures[0]  # a new turn, a new delivery
        return outcomes

    (outcome,) = asyncio.run(run())
    assert isinstance(outcome, RuntimeError)  # the turn failed: its records are re-sent
    assert persisted == [(0, 1)]  # the record batch submitted before still reports


def test_a_turns_delivery_fails_only_once_every_record_batch_is_done() -> None:
    held: list[asyncio.Future[Any]] = []

    class FirstFailsSecondHeld(FakeProducer):
        async def send_batch(self, batch: FakeBuilder, topic: str, *, partition: int) -> Any:
            delivery: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            if not self.sent:
                delivery.set_exception(RuntimeError("not leader"))
            else:
                held.append(delivery)
            self.sent.append((topic, partition, batch.records))
            return delivery

    persisted: list[tuple[int, int]] = []

    async def run() -> None:
        sender = app_producer.BatchSender(FakeProducerApp(FirstFailsSecondHeld()))
        group = sender.add("rows", 0, b"a", b"v")
        sender.add("rows", 1, b"b", b"v", on_sent=lambda p, o: persisted.append((p, o)))
        for _ in range(5):
            await asyncio.sleep(0)
        assert held and not group.done()  # the other record batch is still in flight
        held[0].set_result(Delivered(7))
        with pytest.raises(RuntimeError, match="not leader"):
            await group

    asyncio.run(run())
    assert persisted == [(1, 7)]


def test_a_later_turn_is_submitted_after_the_one_before_it() -> None:
    gate = asyncio.Event()

    class FirstWaits(FakeProducer):
        calls = 0

        async def send_batch(self, batch: FakeBuilder, topic: str, *, partition: int) -> Any:
            self.calls += 1
            if self.calls == 1:
                await gate.wait()  # the accumulator is full: send_batch waits for room
            return await super().send_batch(batch, topic, partition=partition)

    producer = FirstWaits()

    async def run() -> None:
        sender = app_producer.BatchSender(FakeProducerApp(producer))
        first = sender.add("rows", 0, b"a", b"1")
        for _ in range(3):
            await asyncio.sleep(0)  # the first turn is in send_batch, waiting
        second = sender.add("rows", 0, b"a", b"2")
        for _ in range(3):
            await asyncio.sleep(0)
        gate.set()
        await asyncio.gather(first, second)

    asyncio.run(run())
    assert [records[0][1] for _, _, records in producer.sent] == [b"1", b"2"]


def test_a_record_that_fits_no_batch_fails_the_send_loudly() -> None:
    producer = FakeProducer(capacity=0)

    async def run() -> list[Any]:
        sender = app_producer.BatchSender(FakeProducerApp(producer))
        return await asyncio.gather(sender.add("rows", 0, b"k", b"v"), return_exceptions=True)

    (outcome,) = asyncio.run(run())
    assert isinstance(outcome, ValueError)
