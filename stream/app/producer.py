"""The worker's producer: a batch's records out in one Kafka record batch per topic
partition (``BatchSender``), on aiokafka clients that back off while the broker is away
(``BackoffProducer``), and the ``Outbox`` a batch's records leave through.
"""

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import aiokafka  # type: ignore[import-untyped]

from stream.app.backoff import with_backoff
from stream.app.deadletters import DeadLetterLog
from stream.app.declare import FencedProducer
from stream.app.table import SessionTable
from stream.output.headers import dead_letter_headers
from stream.session.batch import DeadLetter

log = logging.getLogger("stream.producer")

Sent = Callable[[int, int], None]  # on_sent(partition, offset)


class BackoffAIOKafkaProducer(aiokafka.AIOKafkaProducer):  # type: ignore[misc]
    """aiokafka's producer on a ``BackoffClient`` (its sender shares the client)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        with_backoff(self.client)


class BackoffProducer(FencedProducer):
    """Faust's aiokafka producer, building ``BackoffAIOKafkaProducer`` (not threaded: the
    worker runs with ``producer_threaded`` off, whose producer Faust builds elsewhere), its
    topic declarations fenced (``stream.app.declare``)."""

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
    produce requests as the broker allows. The records added in one turn of the loop
    leave together on the next and share one future, their delivery: it fails if any of
    them failed (callers re-send them all), so a batch awaits a handful of futures, not
    one per record. The partition is the given one, else the producer's partitioner
    (murmur2 of the key, as ``send`` would pick), remembered per key: a session's key
    comes back every batch.
    """

    # Keys whose partition is remembered per topic; past it the memory starts over.
    REMEMBERED = 200_000

    def __init__(self, app: Any) -> None:
        self.app = app
        self._queued: list[tuple[str, int | None, bytes | None, bytes | None, Any, Any]] = []
        self._delivery: asyncio.Future[None] | None = None  # the pending records' delivery
        self._partition_counts: dict[str, tuple[int, dict[bytes, int]]] = {}
        self._flushing: asyncio.Task[None] | None = None
        self._sending = asyncio.Lock()  # one flush submits at a time: records stay in order

    def add(
        self,
        topic: str,
        partition: int | None,
        key: bytes | None,
        value: bytes | None,  # None: a tombstone
        headers: list[tuple[str, bytes]] | None = None,
        on_sent: Callable[[int, int], None] | None = None,
    ) -> "asyncio.Future[None]":
        """Queue one record; returns the delivery of the records queued with it. Once a
        record is delivered, ``on_sent(partition, offset)`` runs (once per record batch,
        with the batch's highest offset among records that share it)."""
        group = self._delivery
        if group is None:
            group = self._delivery = asyncio.get_running_loop().create_future()
            self._flushing = asyncio.ensure_future(self._flush_group(group))
        self._queued.append((topic, partition, key, value, headers, on_sent))
        return group

    async def left(self, turns: int = 32) -> int:
        """Until the records added so far are in a produce request on its way to the
        broker, or ``turns`` turns of the loop have passed; returns the turns taken.

        aiokafka's sender takes record batches from its accumulator a few turns after
        ``send_batch`` and writes their request on the turn after. A step that holds the
        loop before then (the next batch's fold: tens of milliseconds) holds the request
        back with it, and the broker's round trip only starts when the step ends
        (docs/notes/016). Records still queued behind a request in flight to the same
        broker wait for its response: that is what the bound is for."""
        for turn in range(1, turns + 1):
            flushing = self._flushing
            taken = (flushing is None or flushing.done()) and not self._undrained()
            await asyncio.sleep(0)  # once taken, the request's task writes it on this turn
            if taken:
                return turn
        return turns

    def _undrained(self) -> bool:
        """Whether aiokafka's accumulator holds record batches no request has taken.
        Its internals, read softly: ``left`` only paces the next fold, so a renamed
        attribute must cost the overlap (tests/integration/test_producer.py), never a
        batch."""
        producer = getattr(self.app.producer, "_producer", None)  # None until started
        accumulator = getattr(producer, "_message_accumulator", None)
        return bool(getattr(accumulator, "_batches", None))

    async def _flush_group(self, group: "asyncio.Future[None]") -> None:
        await asyncio.sleep(0)  # the rest of the batch's records join first
        pending, self._queued, self._delivery = self._queued, [], None
        deliveries: list[tuple[asyncio.Future[Any], list[tuple[Sent, int, int]]]] = []
        try:
            async with self._sending:
                await self._send_records(pending, deliveries)
        except BaseException as error:
            # What was submitted before the error still reports its offsets.
            _settle(group, deliveries, error)
            if not isinstance(error, Exception):
                raise
            return
        _settle(group, deliveries)

    async def _send_records(
        self,
        pending: list[Any],
        deliveries: list[tuple["asyncio.Future[Any]", list[tuple[Sent, int, int]]]],
    ) -> None:
        """Every record into record batches, submitted; each batch's delivery joins
        ``deliveries`` with the ``on_sent`` callbacks it answers for."""
        producer = self.app.producer._ensure_producer()  # aiokafka's, on this loop
        groups: dict[tuple[str, int], list[Any]] = {}
        topics: dict[str, tuple[list[int], list[int]]] = {}  # looked up once a flush
        for record in pending:
            topic, partition = record[0], record[1]
            if partition is None:
                partition = await self._partition_of(producer, topic, record[2], topics)
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
                deliveries.append((delivery, _callbacks(records[start:end], partition)))
                start = end

    async def _partition_of(
        self,
        producer: Any,
        topic: str,
        key: bytes | None,
        topics: dict[str, tuple[list[int], list[int]]],
    ) -> int:
        """The producer's partitioner's choice for ``key`` (remembered unless None)."""
        known = self._partition_counts.get(topic)
        if key is not None and known is not None:
            found = known[1].get(key)
            if found is not None:
                return found
        if topic not in topics:
            await producer.client._wait_on_metadata(topic)
            metadata = producer.client.cluster
            topics[topic] = (
                list(metadata.partitions_for_topic(topic)),  # as aiokafka's send does
                list(metadata.available_partitions_for_topic(topic)),
            )
        every, available = topics[topic]
        chosen = int(producer._partitioner(key, every, available))
        if key is not None:
            if known is None or known[0] != len(every) or len(known[1]) >= self.REMEMBERED:
                known = self._partition_counts[topic] = (len(every), {})
            known[1][key] = chosen
        return chosen


def _callbacks(records: list[Any], partition: int) -> list[tuple[Sent, int, int]]:
    """Per ``on_sent`` callback of a record batch: its partition and the index of its
    last record there."""
    last: dict[Sent, int] = {}
    for index, record in enumerate(records):
        if record[5] is not None:
            last[record[5]] = index
    return [(on_sent, partition, index) for on_sent, index in last.items()]


def _settle(
    group: "asyncio.Future[None]",
    deliveries: list[tuple["asyncio.Future[Any]", list[tuple[Sent, int, int]]]],
    error: BaseException | None = None,
) -> None:
    """Resolve ``group`` once every delivery is done: failed with ``error`` or the first
    failure if there was one (the caller re-sends only then, as with a future per
    record). Each delivered record batch runs its ``on_sent`` callbacks with its
    offsets."""
    left = len(deliveries)
    failure: list[BaseException | None] = [error]

    def finish() -> None:
        if not group.done():
            if failure[0] is None:
                group.set_result(None)
            else:
                group.set_exception(failure[0])

    def done(delivery: "asyncio.Future[Any]", callbacks: list[tuple[Sent, int, int]]) -> None:
        nonlocal left
        left -= 1
        failed = delivery.exception() if not delivery.cancelled() else asyncio.CancelledError()
        if failed is None:
            base = delivery.result().offset
            for on_sent, partition, index in callbacks:
                on_sent(partition, base + index)
        elif failure[0] is None:
            failure[0] = failed
        if not left:
            finish()

    if not deliveries:
        finish()
    for delivery, callbacks in deliveries:
        delivery.add_done_callback(functools.partial(done, callbacks=callbacks))


class Outbox:
    """The Kafka side of a commit; every send returns its delivery. A batch's rows'
    changelog records are the committer's (``stream.app.commit``: it stores the rows
    itself, a sweep's too), its updates and dead letters the publisher's
    (``publish.Publisher``).

    A row's changelog record goes to the partition of its store (the partition of the
    input events it folds: docs/notes/002) and, like the updates and dead letters, to one
    ``BatchSender``: a batch's records leave grouped by topic partition. This is what
    Faust's ``table[key] = row`` does, less its per-record producer buffer and the
    "current event" routing it needs a bound event for.
    """

    def __init__(
        self,
        sender: BatchSender,
        table: SessionTable,
        output: str,
        dead: str,
        letters: DeadLetterLog | None = None,
    ) -> None:
        self.sender, self.table, self.output, self.dead = sender, table, output, dead
        self.letters = DeadLetterLog(log) if letters is None else letters

    def send_row(self, key: bytes, row: bytes | None, partition: int) -> Awaitable[Any]:
        return self.sender.add(
            self.table.changelog, partition, key, row, on_sent=self.table.persisted
        )

    def send_update(
        self, key: bytes, payload: bytes | None, headers: list[tuple[str, bytes]]
    ) -> Awaitable[Any]:
        """A session's update to the output topic; None: its tombstone (it expired)."""
        return self.sender.add(self.output, None, key, payload, headers)

    def send_dead_letter(self, letter: DeadLetter) -> Awaitable[Any]:
        self.letters.note(letter)  # the log is bounded; the topic gets every letter
        return self.sender.add(self.dead, None, None, letter.value, dead_letter_headers(letter))

    async def left(self) -> None:
        await self.sender.left()


__all__ = ["BackoffAIOKafkaProducer", "BackoffProducer", "BatchSender", "Outbox"]
