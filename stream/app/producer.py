"""The worker's producer: a batch's records out in one Kafka record batch per topic
partition (``BatchSender``), on aiokafka clients that back off while the broker is away
(``BackoffProducer``), and the ``Outbox`` the publisher writes a batch through.
"""

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import aiokafka  # type: ignore[import-untyped]
from faust.transport.drivers import aiokafka as faust_aiokafka

from stream.app.backoff import with_backoff
from stream.app.table import SessionTable
from stream.session.batch import DeadLetter

log = logging.getLogger("stream.producer")


class BackoffAIOKafkaProducer(aiokafka.AIOKafkaProducer):  # type: ignore[misc]
    """aiokafka's producer on a ``BackoffClient`` (its sender shares the client)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        with_backoff(self.client)


class BackoffProducer(faust_aiokafka.Producer):
    """Faust's aiokafka producer, building ``BackoffAIOKafkaProducer`` (not threaded: the
    worker runs with ``producer_threaded`` off, whose producer Faust builds elsewhere)."""

    @property
    def _producer_type(self) -> type[Any]:
        return BackoffAIOKafkaProducer


class BatchSender:
    """Records out in one Kafka batch per topic partition, not one Faust send each.

    Faust's ``send_soon`` queues every record on the producer buffer, which one task
    sends one at a time (and which makes the consumer wait whenever more than 100 are
    queued). Here a batch's records are collected as they are produced, grouped by topic
    partition, appended to aiokafka ``BatchBuilder``s and submitted with ``send_batch``:
    a few records' worth of Python per record, and each partition's records in as few
    produce requests as the broker allows. ``add`` returns the future of the record's
    delivery (shared by the records of one builder); the records go out on the next turn
    of the loop. The partition is the given one, else the producer's partitioner
    (murmur2 of the key, as ``send`` would pick).
    """

    def __init__(self, app: Any) -> None:
        self.app = app
        self._pending: list[tuple[str, int | None, bytes | None, bytes | None, Any, Any]] = []
        self._flushing: asyncio.Task[None] | None = None

    def add(
        self,
        topic: str,
        partition: int | None,
        key: bytes | None,
        value: bytes | None,  # None: a tombstone
        headers: list[tuple[str, bytes]] | None = None,
        on_sent: Callable[[int, int], None] | None = None,
    ) -> "asyncio.Future[Any]":
        """Queue one record. Once it is delivered, ``on_sent(partition, offset)`` runs (once
        per record batch, with the batch's highest offset among records that share it)."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending.append((topic, partition, key, value, headers, (future, on_sent)))
        if self._flushing is None or self._flushing.done():
            self._flushing = asyncio.ensure_future(self._flush())
        return future

    async def _flush(self) -> None:
        await asyncio.sleep(0)  # the rest of the batch's records join first
        pending, self._pending = self._pending, []
        try:
            await self._send(pending)
        except BaseException as error:
            for *_, (future, _) in pending:
                if not future.done():
                    future.set_exception(error)
            if not isinstance(error, Exception):
                raise

    async def _send(self, pending: list[Any]) -> None:
        producer = self.app.producer._ensure_producer()  # aiokafka's, on this loop
        groups: dict[tuple[str, int], list[Any]] = {}
        partitioners: dict[str, Callable[[bytes | None], int]] = {}
        for record in pending:
            topic, partition = record[0], record[1]
            if partition is None:
                pick = partitioners.get(topic)
                if pick is None:
                    pick = partitioners[topic] = await self._partitioner(producer, topic)
                partition = pick(record[2])
            groups.setdefault((topic, partition), []).append(record)
        for (topic, partition), records in groups.items():
            start = 0
            while start < len(records):
                batch = producer.create_batch()
                end = start
                while end < len(records):
                    _, _, key, value, headers, _ = records[end]
                    if batch.append(timestamp=None, key=key, value=value, headers=headers or []):
                        end += 1
                    else:
                        break
                if end == start:
                    size = len(records[start][3] or b"")
                    raise ValueError(f"a record of {size:,} bytes does not fit")
                batch.close()
                delivery = await producer.send_batch(batch, topic, partition=partition)
                delivery.add_done_callback(_resolver(records[start:end], partition))
                start = end

    @staticmethod
    async def _partitioner(producer: Any, topic: str) -> Callable[[bytes | None], int]:
        await producer.client._wait_on_metadata(topic)
        metadata = producer.client.cluster
        every = list(metadata.partitions_for_topic(topic))
        available = list(metadata.available_partitions_for_topic(topic))
        choose = producer._partitioner

        def pick(key: bytes | None) -> int:
            return int(choose(key, every, available))

        return pick


def _resolver(records: list[Any], partition: int) -> Callable[[Any], None]:
    def resolve(delivery: Any) -> None:
        error = delivery.exception() if not delivery.cancelled() else asyncio.CancelledError()
        base: int = 0 if error else delivery.result().offset
        last: dict[Callable[[int, int], None], int] = {}
        for index, (*_, (future, on_sent)) in enumerate(records):
            if future.done():
                continue
            if error is not None:
                future.set_exception(error)
                continue
            if on_sent is not None:
                last[on_sent] = base + index
            future.set_result(None)
        for on_sent, offset in last.items():  # once per builder: the highest offset
            on_sent(partition, offset)

    return resolve


class Outbox:
    """The Kafka side of publishing (``publish.Publisher``); every call returns its delivery.

    A row goes straight to its partition's RocksDB store (the partition of the input
    events it folds: docs/notes/002) and its changelog record, like the updates and dead
    letters, to one ``BatchSender``: a batch's records leave grouped by topic partition.
    This is what Faust's ``table[key] = row`` does, less its per-record producer buffer
    and the "current event" routing it needs a bound event for.
    """

    def __init__(self, sender: BatchSender, table: SessionTable, output: str, dead: str) -> None:
        self.sender, self.table, self.output, self.dead = sender, table, output, dead

    def write_row(self, key: bytes, row: bytes | None, partition: int) -> Awaitable[Any]:
        """A row into its partition's store and changelog; None deletes it (a tombstone
        there too, so a restore from the changelog drops it as well)."""
        if row is None:
            self.table.delete(key, partition)
        else:
            self.table.put(key, row, partition)
        return self.sender.add(
            self.table.changelog, partition, key, row, on_sent=self.table.persisted
        )

    def send_update(
        self, key: bytes, payload: bytes | None, headers: list[tuple[str, bytes]]
    ) -> Awaitable[Any]:
        """A session's update to the output topic; None: its tombstone (it expired)."""
        return self.sender.add(self.output, None, key, payload, headers)

    def send_dead_letter(self, letter: DeadLetter) -> Awaitable[Any]:
        log.warning(
            "dead-lettered %s[%d]@%d: %s",
            letter.topic,
            letter.partition,
            letter.offset,
            letter.reason,
        )
        return self.sender.add(self.dead, None, None, letter.value, letter.headers())


__all__ = ["BackoffAIOKafkaProducer", "BackoffProducer", "BatchSender", "Outbox"]
