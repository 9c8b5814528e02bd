"""Committing a batch: the order that makes a commit safe, with the parts it is handed.

``Committer.commit`` states the order, step by step, and its code carries the same
numbers; the committer writes the sessions table itself (the rows and their changelog
records), the publisher builds and sends what a batch publishes (output records, dead
letters, the Redis write). ``Committer.run`` takes the agent's batches one after the
other, overlapping a batch's fold with the last one's delivery. Every part comes in
through ``Parts``, so the commit path runs without Kafka, Faust or Redis
(``tests/unit/app/memory.py`` has in-memory parts) exactly as it runs in the worker
(``stream.app.worker`` hands it the real ones).
"""

import asyncio
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from stream.app import inflate
from stream.publish.kafka import confirmed
from stream.publish.publisher import Sending
from stream.session.batch import PARTITION_KEY, BatchResult, Message, fold_batch
from stream.session.expiry import SweepResult
from stream.session.limits import Limits
from stream.session.results import Recall, SessionChange

log = logging.getLogger("stream.worker")

# Batches taken and not yet acked, at most: how far Redis may run ahead of the broker's
# confirmations (each batch's records wait for the one before it to be confirmed). A
# worker a whole batch behind keeps two, as before: batches are then large, and the
# collector's threshold counts on the events in hand (runtime.worker_young).
IN_FLIGHT = 4
IN_FLIGHT_BEHIND = 2


class Kept(Protocol):
    """Records kept after their rows were written (``stream.app.table.KeptRecords``)."""

    def recall(self, key: bytes, partition: int, row: bytes) -> Any: ...
    def remember(self, sessions: list[SessionChange]) -> None: ...


class Store(Protocol):
    """The sessions table as the fold reads it and the commit writes it
    (``stream.app.table.SessionTable``)."""

    @property
    def kept(self) -> Kept: ...
    def load(self, key: bytes, partition: int) -> bytes | None: ...
    def put(self, key: bytes, row: bytes, partition: int) -> None: ...
    def delete(self, key: bytes, partition: int) -> None: ...


class Changelog(Protocol):
    """Where a stored row's changelog record goes (``stream.app.producer.Outbox``)."""

    def send_row(self, key: bytes, row: bytes | None, partition: int) -> Awaitable[Any]: ...


class BatchPublisher(Protocol):
    """What a folded batch publishes (``stream.publish.publisher.Publisher``)."""

    async def left(self) -> None: ...
    def build(self, result: BatchResult) -> Sending: ...
    def send(self, sending: Sending) -> list[Awaitable[Any]]: ...
    async def cache(self, sending: Sending) -> None: ...
    async def drop(self, sweep: SweepResult) -> bool: ...
    def tombstones(self, sweep: SweepResult) -> list[Awaitable[Any]]: ...


class Gate(Protocol):
    """The limits a batch is folded under (``stream.app.claims.Claims``: the reset
    ceiling follows the control topic)."""

    @property
    def limits(self) -> Limits: ...
    async def admit(self, messages: list[Message]) -> None: ...


@dataclass
class Parts:
    """What the commit path is handed."""

    table: Store  # read by the fold, the rows written by the commit (step 2)
    changelog: Changelog  # the rows' changelog records (step 4)
    publisher: Callable[[], BatchPublisher]  # built on the worker's loop, on first use
    ack: Callable[[list[Any]], None]  # the batch's offsets become committable
    stats: Any  # stream.ops.metrics.Metrics
    gate: Gate
    committed: Callable[[list[Message], BatchResult], None]  # after the ack's prerequisites
    fold: Callable[[Sequence[Message], Any, Limits, Recall | None], BatchResult] = fold_batch


@dataclass
class Flight:
    """A batch between its fold and its ack (``Committer.commit``)."""

    stored: "asyncio.Future[None]"  # its rows are in the store: the next batch may fold
    # (its records follow once the batch before it is confirmed: ``delivered``)
    delivered: "asyncio.Future[None]"  # the broker confirmed its records
    cached: "asyncio.Future[None]"  # its Redis write is done (or queued): the next may write
    before: "Flight | None"  # the batch before it, while this one's rows are not stored
    acked: "asyncio.Task[None]" = field(init=False)  # the commit, done once acked


class Committer:
    """The commit path of one worker."""

    def __init__(self, parts: Parts) -> None:
        self.parts = parts
        self.lock = asyncio.Lock()  # a batch and a sweep step never interleave
        self.last: Flight | None = None  # the batch taken last (``take``)

    def take(self, batch: list[Any], before: Flight | None = None) -> Flight:
        """``commit`` of ``batch`` as a task; ``before``: the batch before it, still landing
        (its delivery and its Redis write then overlap this batch's fold)."""
        loop = asyncio.get_running_loop()
        flight = Flight(loop.create_future(), loop.create_future(), loop.create_future(), before)
        flight.acked = asyncio.ensure_future(self.commit(batch, flight))
        self.last = flight
        return flight

    async def commit(self, batch: list[Any], flight: Flight) -> None:
        """One batch, in the order that makes a commit safe (the code marks each step):

        1. fold: every message once through the pure core (``session.batch.fold_batch``),
           which cannot raise for what a message holds;
        2. rows: each touched session's row and each partition's row into its
           partition's store, written here (the next batch may fold on them); the
           batch's updates are built just before (``Publisher.build``, no I/O);
        3. Redis: the updates' write started, one round trip, guarded (queued while Redis
           is away), without waiting for the broker: a reader sees an update as soon as it
           is folded, and the guard and the deterministic fold keep that safe
           (docs/notes/022);
        4. records: the rows' changelog records (written here), then what the publisher
           sends (``Publisher.send``): one coalesced update per touched session to the
           output topic, the dead letters with their reasons; one sending, re-sent whole
           until confirmed (``publish.kafka.confirmed``);
        5. delivery: wait until the broker confirmed every record of 4 (re-sent with
           backoff; the batch is held, never committed past) and the write of 3 is done;
        6. offsets: the batch's events acked, so Faust's next commit may pass them.

        With ``flight.before``, the batch before it, this one is folded while that one
        waits for the broker or Redis (``run``). The fold reads what that batch put in
        the store; this batch's Redis write follows that batch's, its records follow once
        that batch's are confirmed (a re-send of those must never overtake these), and
        its ack once that batch is acked. ``flight`` says when this batch's rows are
        stored (the next batch may fold), when it is delivered and when it is in Redis.

        The agent's concurrency stays 1, so a commit never passes a message still being
        folded either (faust-streaming #606).
        """
        try:
            await self._in_order(batch, flight)
        except BaseException as error:
            for future in (flight.stored, flight.delivered, flight.cached):  # and the next
                if not future.done():
                    future.set_exception(error)
                    future.exception()  # retrieved: the task's own error is the one raised
            raise

    async def _in_order(self, batch: list[Any], flight: Flight) -> None:
        parts = self.parts
        stats = parts.stats
        before = flight.before
        cpu = time.thread_time  # the loop's thread: how much of a step was work, not waiting
        stamp = batch[len(batch) // 2].timestamp  # the middle record's (stream_record_age)
        stats.observe_age("taken", stamp)
        if before is not None:
            # The batch before it is sent: its records leave before this fold holds the
            # loop, so their round trip runs alongside the fold instead of after it.
            await parts.publisher().left()
        async with self.lock:
            messages = to_messages(batch)
            await parts.gate.admit(messages)
            started = cpu()
            with stats.fold_seconds.time():
                table = parts.table
                result = parts.fold(messages, table.load, parts.gate.limits, table.kept.recall)  # 1
            folded = cpu()
            stats.observe_age("folded", stamp)
            publisher = parts.publisher()
            publishing = time.perf_counter()
            try:  # no await before the rows go in: see observe_rows
                stats.observe_rows(result)
            except Exception:
                log.exception("census of a batch not moved")
            sending = publisher.build(result)  # its updates: no I/O, before the rows go in
            self._store(result)  # 2
            table.kept.remember(result.sessions)  # the next batch's fold recalls them
            flight.stored.set_result(None)
            flight.before = None  # what ``landed`` follows only while rows are not stored
            writing = asyncio.ensure_future(self._redis_write(sending, flight, before, stamp))  # 3
        try:  # out of the lock: the next batch may fold meanwhile (a sweep waits: ``landed``)
            if before is not None:
                await before.delivered
            confirmation = self._send(result, sending, publisher)  # 4
        except BaseException:
            _abandon(writing)
            raise
        dispatched = cpu()
        stats.observe_age("sent", stamp)
        await asyncio.gather(self._delivered(confirmation, flight, stamp), writing)  # 5
        stats.publish_seconds.observe(time.perf_counter() - publishing)
        landed = cpu()
        if before is not None:
            await before.acked  # acked in order
        parts.committed(messages, result)
        try:  # the batch is delivered: nothing in the metrics may keep it from its ack
            stats.observe_batch(messages, result, batch[-1].timestamp)
            if before is None:
                stats.observe_loop_cpu(folded - started, dispatched - folded, landed - dispatched)
            else:  # its waits overlapped other batches' work: only its own steps count
                stats.observe_loop_cpu(folded - started, dispatched - folded, None)
        except Exception:
            log.exception("metrics of a batch not recorded")
        parts.ack(batch)  # 6
        stats.observe_age("acked", stamp)

    def _store(self, result: BatchResult) -> None:
        """Step 2's write: the batch's rows into their partitions' stores, once (a
        re-sending of step 4 stores nothing: a later batch may have stored newer rows)."""
        put = self.parts.table.put
        for change in result.sessions:
            put(change.key, change.row, change.partition)
        for part in result.partitions:
            put(PARTITION_KEY, part.row, part.partition)

    def _send(
        self, result: BatchResult, sending: Sending, publisher: BatchPublisher
    ) -> Awaitable[None]:
        """Step 4: every record of the batch on its way when this returns; the returned
        confirmation re-sends them all until the broker confirmed every one. The rows'
        changelog records go first, then the publisher's; within each topic partition
        they keep the order they always had (rows by session, then the partitions')."""
        changelog = self.parts.changelog

        def records() -> list[Awaitable[Any]]:
            futures = [changelog.send_row(c.key, c.row, c.partition) for c in result.sessions]
            for part in result.partitions:
                futures.append(changelog.send_row(PARTITION_KEY, part.row, part.partition))
            futures.extend(publisher.send(sending))
            return futures

        return confirmed(records, "records of a batch", records())

    async def _delivered(
        self, confirmation: Awaitable[None], flight: Flight, stamp: float | None
    ) -> None:
        await confirmation
        self.parts.stats.observe_age("delivered", stamp)
        if not flight.delivered.done():  # done: the batch failed meanwhile (Redis)
            flight.delivered.set_result(None)

    async def _redis_write(
        self, sending: Sending, flight: Flight, before: Flight | None, stamp: float | None
    ) -> None:
        if before is not None:
            await before.cached  # Redis writes in batch order
        stats = self.parts.stats
        with stats.redis_seconds.time():
            await self.parts.publisher().cache(sending)
        stats.observe_age("cached", stamp)
        if not flight.cached.done():  # done: the batch failed meanwhile (its delivery)
            flight.cached.set_result(None)

    async def sweep(self, sweep: SweepResult) -> bool:
        """A sweep's sessions out of every store, in the order that survives a crash at
        any point (the code marks each step); called with the lock held, between batches
        (``stream.app.expiry``):

        1. the partition row (the retired figure and the sweep's cursor) into its store
           and its changelog, confirmed: a sweep repeated after a crash counts nothing
           twice;
        2. Redis: the sessions dropped (``Publisher.drop``); while Redis is away the drop
           is only queued and nothing more happens: returns False, the sessions' rows
           stay and a later sweep finds them due again;
        3. tombstones: each session's row out of its store, its changelog tombstone and
           its output tombstone (``Publisher.tombstones``), confirmed.

        Redis goes before the tombstones because only the rows can bring a drop back: a
        worker that died after the tombstones but before the drop would leave the
        sessions in Redis for good (the next owner restores no row to sweep again),
        whereas one that dies before the tombstones leaves the rows, which the next
        owner finds due and sweeps again (counted once: the cursor)."""
        if not sweep.expired:
            return True
        table, changelog = self.parts.table, self.parts.changelog
        publisher = self.parts.publisher()
        partition = sweep.partition
        if sweep.row:  # empty: every session was counted by an earlier sweep already
            table.put(PARTITION_KEY, sweep.row, partition)  # 1
            row = sweep.row
            await confirmed(
                lambda: [changelog.send_row(PARTITION_KEY, row, partition)],
                "expiry partition row",
            )
        if not await publisher.drop(sweep):  # 2
            return False
        for expired in sweep.expired:  # 3
            table.delete(expired.key, partition)

        def records() -> list[Awaitable[Any]]:
            futures = [changelog.send_row(e.key, None, partition) for e in sweep.expired]
            futures.extend(publisher.tombstones(sweep))
            return futures

        await confirmed(records, "expiry records")
        return True

    async def landed(self) -> None:
        """With the lock held: wait until every batch folded so far is acked (its waits
        may still run while the next batch is folded). A batch taken and not yet folded
        waits for the lock, and so for the holder's work to be done first."""
        flight = self.last
        while flight is not None and not flight.stored.done():
            flight = flight.before
        if flight is not None and not flight.acked.done():
            await asyncio.shield(flight.acked)  # each batch is acked after the one before

    async def run(self, batches: AsyncIterator[Any], batch_max: int) -> None:
        """Each batch committed in turn, up to ``IN_FLIGHT`` of them unacked. A worker a
        whole batch (``batch_max``) behind folds the next batch as soon as the last one's
        rows are stored, so it spends its core on folding instead of waiting (``commit``;
        note 016; ``IN_FLIGHT_BEHIND``); otherwise the next batch is taken once the last
        one is in Redis, while its records are still waiting for the broker: a broker
        slow to confirm holds the offsets, not the updates (note 022)."""
        flying: deque[Flight] = deque()
        try:
            async for batch in batches:
                behind = getattr(batch, "behind", 0) >= batch_max
                while flying and flying[0].acked.done():
                    flying.popleft().acked.result()  # what a batch raised stops the agent here
                last = flying[-1] if flying else None
                flight = self.take(batch, last)
                flying.append(flight)
                await asyncio.shield(flight.stored if behind else flight.cached)
                while len(flying) >= (IN_FLIGHT_BEHIND if behind else IN_FLIGHT):
                    await asyncio.shield(flying[0].acked)
                    flying.popleft().acked.result()
            await self.landed()
        except asyncio.CancelledError:
            # Shutdown (SIGTERM): finish the batches in hand and ack them, so the final
            # commit covers them instead of leaving them to be redelivered.
            last = self.last
            if last is not None:
                await asyncio.wait_for(last.acked, 30)
            raise


def _abandon(task: "asyncio.Future[None]") -> None:
    """A batch's Redis write, no longer awaited: the batch failed before its records left
    (the batch before it failed). Cancelled if still waiting, its outcome retrieved."""
    if not task.done():
        task.cancel()
    else:
        task.cancelled() or task.exception()


def to_messages(batch: list[Any]) -> list[Message]:
    """The core's messages of a batch of Faust's (a batch the fetch could not inflate
    within bounds carries its reason: ``inflate.Unread``)."""
    return [
        Message(m.key, m.value, m.topic, m.partition, m.offset, _headers(m.headers))
        if type(m.value) is not inflate.Unread
        else _unread(m)
        for m in batch
    ]


def _unread(m: Any) -> Message:
    value: inflate.Unread = m.value
    return Message(
        m.key, bytes(value), m.topic, m.partition, m.offset, (), value.reason, value.records
    )


def _headers(raw: Any) -> list[tuple[str, bytes | None]]:
    """Record headers as (name, value) pairs, whichever shape Faust hands them in."""
    if not raw:
        return []
    items = raw.items() if isinstance(raw, dict) else raw
    return [(str(name), value) for name, value in items]


__all__ = ["Committer", "Flight", "Parts", "to_messages"]
