"""Committing a batch: the order that makes a commit safe, with the parts it is handed.

``Committer.commit`` states the order (seven steps); ``Committer.run`` takes the agent's
batches one after the other, overlapping a batch's fold with the last one's delivery when
the worker is a whole batch behind. Every part comes in through ``Parts``, so the commit
path runs without Kafka, Faust or Redis (``tests/unit/app/memory.py`` has in-memory parts)
exactly as it runs in the worker (``stream.app.worker`` hands it the real ones).
"""

import asyncio
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from stream.app import inflate
from stream.publish.publisher import Sending
from stream.session.batch import BatchResult, Message, fold_batch
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
    """The sessions table as the fold reads it."""

    @property
    def kept(self) -> Kept: ...
    def load(self, key: bytes, partition: int) -> bytes | None: ...


class BatchPublisher(Protocol):
    """Where a folded batch goes (``stream.publish.publisher.Publisher``)."""

    async def left(self) -> None: ...
    def stage(self, result: BatchResult) -> Sending: ...
    def dispatch(self, sending: Sending) -> None: ...
    async def cache(self, sending: Sending) -> None: ...


class Gate(Protocol):
    """The limits a batch is folded under (``stream.app.claims.Claims``: the reset
    ceiling follows the control topic)."""

    @property
    def limits(self) -> Limits: ...
    async def admit(self, messages: list[Message]) -> None: ...


@dataclass
class Parts:
    """What the commit path is handed."""

    table: Store
    publisher: Callable[[], BatchPublisher]  # built on the worker's loop, on first use
    ack: Callable[[list[Any]], None]  # the batch's offsets become committable
    stats: Any  # stream.ops.metrics.Metrics
    gate: Gate
    committed: Callable[[list[Message], BatchResult], None]  # after the ack's prerequisites
    fold: Callable[[Sequence[Message], Any, Limits, Recall | None], BatchResult] = fold_batch


@dataclass
class Flight:
    """A batch between its fold and its ack (``Committer.commit``)."""

    sent: "asyncio.Future[None]"  # its rows are in the store: the next batch may fold
    # (its records follow once the batch before it is confirmed: ``delivered``)
    delivered: "asyncio.Future[None]"  # the broker confirmed its records
    cached: "asyncio.Future[None]"  # its Redis write is done (or queued): the next may write
    after: "Flight | None"  # the batch before it, while this one has not sent
    done: "asyncio.Task[None]" = field(init=False)  # the commit, through the ack


class Committer:
    """The commit path of one worker."""

    def __init__(self, parts: Parts) -> None:
        self.parts = parts
        self.lock = asyncio.Lock()  # a batch and a sweep step never interleave
        self.last: Flight | None = None  # the batch taken last (``take``)

    def take(self, batch: list[Any], after: Flight | None = None) -> Flight:
        """``commit`` of ``batch`` as a task; ``after``: the batch before it, still landing
        (its delivery and its Redis write then overlap this batch's fold)."""
        loop = asyncio.get_running_loop()
        flight = Flight(loop.create_future(), loop.create_future(), loop.create_future(), after)
        flight.done = asyncio.ensure_future(self.commit(batch, flight))
        self.last = flight
        return flight

    async def commit(self, batch: list[Any], flight: Flight) -> None:
        """One batch, in the order that makes a commit safe:

        1. fold: every message once through the pure core (``session.batch.fold_batch``),
           which cannot raise for what a message holds;
        2. rows: each touched session's row into its partition's store (the next batch
           may fold on them);
        3. Redis: the updates in one round trip, guarded (queued while Redis is away),
           without waiting for the broker: a reader sees an update as soon as it is
           folded, and the guard and the deterministic fold keep that safe
           (docs/notes/022);
        4. records: each row's changelog record, one coalesced update per touched session
           to the output topic, the dead letters with their reasons;
        5. delivery: wait until the broker confirmed every record of 4 (re-sent with
           backoff; the batch is held, never committed past);
        6. offsets: once both 3 and 5 are done, the batch's events acked, so Faust's next
           commit may pass them.

        With ``flight.after``, the batch before it, this one is folded while that one
        waits for the broker or Redis (``run``). The fold reads what that batch put in
        the store; this batch's Redis write follows that batch's, its records follow once
        that batch's are confirmed (a re-send of those must never overtake these), and
        its ack once that batch is acked. ``flight`` says when this batch's rows are in
        (the next batch may fold), when it is delivered and when it is in Redis.

        The agent's concurrency stays 1, so a commit never passes a message still being
        folded either (faust-streaming #606).
        """
        try:
            await self._in_order(batch, flight)
        except BaseException as error:
            for future in (flight.sent, flight.delivered, flight.cached):  # and the next
                if not future.done():
                    future.set_exception(error)
                    future.exception()  # retrieved: the task's own error is the one raised
            raise

    async def _in_order(self, batch: list[Any], flight: Flight) -> None:
        parts = self.parts
        stats = parts.stats
        after = flight.after
        cpu = time.thread_time  # the loop's thread: how much of a step was work, not waiting
        stamp = batch[len(batch) // 2].timestamp  # the middle record's (stream_record_age)
        stats.observe_age("taken", stamp)
        if after is not None:
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
            try:  # no await before the rows go in (stage): see observe_rows
                stats.observe_rows(result)
            except Exception:
                log.exception("census of a batch not moved")
            sending = publisher.stage(result)  # 2
            table.kept.remember(result.sessions)  # the next batch's fold recalls them
            flight.sent.set_result(None)
            flight.after = None  # what ``landed`` follows only while a batch has not sent
            writing = asyncio.ensure_future(self._redis_write(sending, flight, after, stamp))  # 3
        try:  # out of the lock: the next batch may fold meanwhile (a sweep waits: ``landed``)
            if after is not None:
                await after.delivered
            publisher.dispatch(sending)  # 4
        except BaseException:
            _abandon(writing)
            raise
        sent = cpu()
        stats.observe_age("sent", stamp)
        await asyncio.gather(self._delivered(sending, flight, stamp), writing)
        stats.publish_seconds.observe(time.perf_counter() - publishing)
        landed = cpu()
        if after is not None:
            await after.done  # acked in order
        parts.committed(messages, result)
        try:  # the batch is delivered: nothing in the metrics may keep it from its ack
            stats.observe_batch(messages, result, batch[-1].timestamp)
            if after is None:
                stats.observe_loop_cpu(folded - started, sent - folded, landed - sent)
            else:  # its waits overlapped other batches' work: only its own steps count
                stats.observe_loop_cpu(folded - started, sent - folded, None)
        except Exception:
            log.exception("metrics of a batch not recorded")
        parts.ack(batch)  # 7
        stats.observe_age("acked", stamp)

    async def _delivered(self, sending: Sending, flight: Flight, stamp: float | None) -> None:
        assert sending.confirmed is not None  # dispatched
        await sending.confirmed  # 5
        self.parts.stats.observe_age("delivered", stamp)
        if not flight.delivered.done():  # done: the batch failed meanwhile (Redis)
            flight.delivered.set_result(None)

    async def _redis_write(
        self, sending: Sending, flight: Flight, after: Flight | None, stamp: float | None
    ) -> None:
        if after is not None:
            await after.cached  # Redis writes in batch order
        stats = self.parts.stats
        with stats.redis_seconds.time():
            await self.parts.publisher().cache(sending)  # 3
        stats.observe_age("cached", stamp)
        if not flight.cached.done():  # done: the batch failed meanwhile (its delivery)
            flight.cached.set_result(None)

    async def landed(self) -> None:
        """With the lock held: wait until every batch folded so far is acked (its waits
        may still run while the next batch is folded). A batch taken and not yet folded
        waits for the lock, and so for the holder's work to be done first."""
        flight = self.last
        while flight is not None and not flight.sent.done():
            flight = flight.after
        if flight is not None and not flight.done.done():
            await asyncio.shield(flight.done)  # each batch is acked after the one before

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
                while flying and flying[0].done.done():
                    flying.popleft().done.result()  # what a batch raised stops the agent here
                last = flying[-1] if flying else None
                flight = self.take(batch, last)
                flying.append(flight)
                await asyncio.shield(flight.sent if behind else flight.cached)
                while len(flying) >= (IN_FLIGHT_BEHIND if behind else IN_FLIGHT):
                    await asyncio.shield(flying[0].done)
                    flying.popleft().done.result()
            await self.landed()
        except asyncio.CancelledError:
            # Shutdown (SIGTERM): finish the batches in hand and ack them, so the final
            # commit covers them instead of leaving them to be redelivered.
            last = self.last
            if last is not None:
                await asyncio.wait_for(last.done, 30)
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
