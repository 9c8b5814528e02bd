"""The one publisher: what a batch publishes, out to Kafka (updates, dead letters) and Redis.

The worker folds a batch once, writes its rows itself (``stream.app.commit``: the store
and the changelog are the committer's) and hands the result here; only I/O is retried,
never the fold. Its duties, each in a module of its own:

1. Kafka (``publish.kafka``): ``send`` puts a batch's output updates (``output.record``:
   the payload and headers) and dead letters on their way and returns their deliveries;
   the committer sends them in one sending with the rows' changelog records and waits
   until the broker confirmed every one (``publish.kafka.confirmed``, re-sent with
   backoff) before the batch's offsets can be acked and committed.
2. Redis, a cache of the output topic (``cache``, through ``publish.queue``): written in
   one round trip, or, while Redis is away, queued for a background writer, so an outage
   never stalls consumption; a permanent failure stops the worker loudly.
3. Re-seed: ``reseed`` republishes stored rows through the same guarded function (nothing
   older overwrites anything newer), used when partitions are assigned and when Redis
   comes back without the marker (``unmarked``, ``mark``: kept by ``publish.redis_sink``)
   — i.e. empty, flushed or failed over to an empty replica. Sessions past their TTL (or,
   with a Redis TTL, idle past it) are never re-seeded.
4. Expiry: a sweep's result (``session.expiry``) leaves through ``drop`` (Redis) and
   ``tombstones`` (the output topic), in the order the committer gives them
   (``stream.app.commit.Committer.sweep``: the rows are the committer's there too).

The worker's order per batch is ``build`` (the updates), the rows into the store (the
committer's), ``cache`` (to Redis) and, once the batch before it is confirmed, the records
(the rows' changelog records, then ``send``), the Redis write running while the records
wait and fly; the ack once both are done (``stream.app.commit``; note 022).
"""

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from stream.config import Settings
from stream.output.record import SessionUpdate
from stream.output.redis import marker_value
from stream.publish.kafka import Outbox
from stream.publish.queue import RedisQueue, RedisState
from stream.publish.redis_sink import DeadCount, PermanentRedisError, RedisSink, RetiredCount
from stream.session import codec
from stream.session.batch import PARTITION_KEY, BatchResult
from stream.session.expiry import SweepResult
from stream.session.partition import PartitionRow

RESEED_CHUNK = 2000  # stored rows per Redis write of a re-seed


class Publisher:
    """A batch's records out to Kafka and Redis; the worker's one way out (see the module)."""

    def __init__(
        self,
        settings: Settings,
        outbox: Outbox,
        sink: RedisSink,
        max_pending: int = 0,  # sessions queued before batches are held; 0: from settings
        max_pending_bytes: int = 0,  # their entry_bytes before batches are held; 0: settings
        state: RedisState | None = None,
        on_permanent: Callable[[BaseException], None] | None = None,
        run_id: str | None = None,
    ) -> None:
        self.settings = settings
        self.outbox = outbox
        self.sink = sink
        self.run_id = run_id or uuid.uuid4().hex[:12]
        self.queue = RedisQueue(
            sink,
            max_pending if max_pending > 0 else settings.redis_max_pending,
            max_pending_bytes if max_pending_bytes > 0 else settings.redis_max_pending_bytes,
            state,
            on_permanent,
        )

    @property
    def generation(self) -> int:
        return self.settings.generation

    @property
    def state(self) -> RedisState:
        return self.queue.state

    @property
    def on_permanent(self) -> Callable[[BaseException], None] | None:
        """Called with a permanent Redis error before it is raised (the worker stops)."""
        return self.queue.on_permanent

    @on_permanent.setter
    def on_permanent(self, callback: Callable[[BaseException], None] | None) -> None:
        self.queue.on_permanent = callback

    @property
    def max_pending(self) -> int:
        return self.queue.max_pending

    @property
    def max_pending_bytes(self) -> int:
        return self.queue.max_pending_bytes

    # -- one batch -------------------------------------------------------------------
    def build(self, result: BatchResult) -> "Sending":
        """A folded batch's updates, built (no I/O): ``cache`` and ``send`` take them."""
        gen = self.generation
        return Sending(result, [SessionUpdate.from_change(c, gen) for c in result.sessions])

    def send(self, sending: "Sending") -> list[Awaitable[Any]]:
        """A built batch's records, on their way when this returns: per session its
        output record (an expired life's tombstone first), then the dead letters. Returns
        their deliveries; the caller awaits them, and calls again to re-send them all
        (``publish.kafka.confirmed``)."""
        result, updates = sending.result, sending.updates
        outbox = self.outbox
        futures: list[Awaitable[Any]] = []
        for change, u in zip(result.sessions, updates, strict=True):
            if u.replaces is not None:  # an expired life: its tombstone first
                futures.append(outbox.send_update(change.key, None, []))
            futures.append(outbox.send_update(change.key, u.payload, u.headers()))
        for letter in result.dead_letters:
            futures.append(outbox.send_dead_letter(letter))
        return futures

    async def left(self) -> None:
        """Until the records sent so far are on their way to the broker: a step that then
        holds the loop (the next batch's fold) no longer holds back their round trip."""
        await self.outbox.left()

    async def cache(self, sending: "Sending") -> None:
        """A built batch's updates and dead-letter counts to Redis, in one round trip
        (queued while Redis is away), while its records are in flight."""
        result, updates = sending.result, sending.updates
        gen, topic = self.generation, self.settings.input_topic
        # Every batch writes its partitions' rows (the stream time); a count of 0 moves
        # nothing in Redis, so only partitions with dead letters are sent.
        dead = [
            DeadCount(topic, p.partition, gen, p.dead_lettered)
            for p in result.partitions
            if p.dead_lettered
        ]
        await self.queue.write(updates, dead)

    # -- expiry ----------------------------------------------------------------------
    def retired_count(self, partition: int, row: PartitionRow) -> RetiredCount:
        return RetiredCount(
            self.settings.input_topic,
            partition,
            self.generation,
            row.retired.as_tuple(),
            row.expired,
        )

    async def drop(self, sweep: SweepResult) -> bool:
        """A sweep's sessions out of Redis, with the partition's retired figure (when the
        sweep wrote a partition row); returns whether they were written now (False: only
        queued while Redis is away). The committer orders this between the rows and the
        tombstones (``stream.app.commit.Committer.sweep``)."""
        retired = []
        if sweep.row:  # empty: every session was counted by an earlier sweep already
            retired.append(self.retired_count(sweep.partition, PartitionRow.decode(sweep.row)))
        drops = [SessionUpdate.from_expired(e, self.generation) for e in sweep.expired]
        return await self.queue.write(drops, [], retired=retired)

    def tombstones(self, sweep: SweepResult) -> list[Awaitable[Any]]:
        """Each swept session's tombstone on the output topic; their deliveries."""
        outbox = self.outbox
        return [outbox.send_update(e.key, None, []) for e in sweep.expired]

    # -- Redis -----------------------------------------------------------------------
    async def write_redis(
        self,
        updates: list[SessionUpdate],
        dead: list[DeadCount],
        *,
        live: bool = True,
        retired: Sequence[RetiredCount] = (),
    ) -> bool:
        """Write to Redis, or queue while it is away (``RedisQueue.write``); returns
        whether they were written now (False: queued)."""
        return await self.queue.write(updates, dead, live=live, retired=retired)

    async def flush(self, timeout: float) -> bool:
        """Wait for queued Redis writes (at shutdown); False if they are still pending."""
        return await self.queue.flush(timeout)

    # -- re-seed ---------------------------------------------------------------------
    async def unmarked(self, partitions: list[int]) -> list[int]:
        """The partitions whose marker is gone from Redis (``RedisSink.unmarked``): what
        this worker published for them is lost."""
        return await self.sink.unmarked(self.settings.input_topic, partitions)

    async def mark(self, partitions: list[int]) -> None:
        """Record that Redis holds these partitions' sessions (after a re-seed)."""
        value = marker_value(self.generation, self.run_id)
        await self.sink.mark(self.settings.input_topic, partitions, value)

    async def reseed(
        self,
        rows: Iterable[tuple[bytes, bytes]],
        topic_partition: int,
        clock: PartitionRow | None = None,
    ) -> int:
        """Republish every stored row of one partition (guarded: never moves a session
        backwards, and an identical version writes nothing), less the sessions past their
        TTL at ``clock`` (the partition row) and, with a Redis TTL, those idle past it.
        Returns sessions sent."""
        gen = self.generation
        settings = self.settings
        limits = settings.limits
        folds = limits.folds  # the worker's: rows decode as they were folded
        redis_ttl = settings.redis_ttl_seconds * 1000
        clock = clock or PartitionRow()
        batch: list[SessionUpdate] = []
        dead: list[DeadCount] = []
        retired: list[RetiredCount] = []
        sent = 0
        for key, row in rows:
            if key == PARTITION_KEY:
                stored = PartitionRow.parse(row)
                if stored is None:
                    continue
                if stored.dead:
                    dead.append(DeadCount(settings.input_topic, topic_partition, gen, stored.dead))
                if stored.expired:
                    retired.append(self.retired_count(topic_partition, stored))
                continue
            try:
                record = codec.decode(row, folds)
                if clock.expired_record(record, limits.session_ttl):
                    continue  # expired: the sweep drops it, the re-seed never brings it back
                touched = clock.touched(record)
                idle = None if clock.now is None or touched is None else clock.now - touched
                if redis_ttl and idle is not None and idle > redis_ttl:
                    continue  # Redis let it go already: not brought back either
                batch.append(SessionUpdate.from_record(key.decode(), record, gen))
            except (UnicodeDecodeError, codec.RowError):
                continue  # the next event of that session reports the bad row loudly
            if len(batch) >= RESEED_CHUNK:
                await self.queue.write(batch, dead, live=False)
                sent += len(batch)
                batch, dead = [], []
                await asyncio.sleep(0)  # let live batches and heartbeats through
        await self.queue.write(batch, dead, live=False, retired=retired)
        sent += len(batch)
        self.state.reseeded_sessions += sent
        return sent


@dataclass
class Sending:
    """A batch's updates (``Publisher.build``), for ``send`` (Kafka) and ``cache`` (Redis)."""

    result: BatchResult
    updates: list[SessionUpdate]


__all__ = ["Outbox", "PermanentRedisError", "Publisher", "RedisState", "Sending"]
