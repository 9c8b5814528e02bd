"""The one publisher: a batch result out to Kafka (rows, updates, dead letters) and Redis.

The agent folds a batch once and hands the result here; only I/O is retried, never the
fold. Order of duty:

1. Kafka, delivery before ack: every record the batch produces — changelog rows, output
   updates, dead letters — is confirmed by the broker before ``publish`` returns (and so
   before the batch's offsets can be acked and committed). A failed send is re-sent with
   backoff; the batch is held, never committed past.
2. Redis, a cache of the output topic: written in one round trip. A transient failure
   hands the updates to a background writer (coalesced per session, newest version wins)
   and the batch goes on, so an outage never stalls consumption or drops the worker from
   its group; a permanent failure (bad password, WRONGTYPE, script error) raises
   ``PermanentRedisError`` and the worker stops with a clear message.
3. Re-seed: ``reseed`` republishes stored rows through the same guarded script (nothing
   older overwrites anything newer), used when partitions are assigned and when Redis
   comes back without the marker — i.e. empty, flushed or failed over to an empty replica.
"""

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

import orjson
from redis import exceptions as rx

from stream.config import Settings
from stream.contract.errors import safe_text
from stream.publish.redis_sink import (
    DeadCount,
    PermanentRedisError,
    RedisSink,
    SessionUpdate,
    is_transient,
)
from stream.session import codec
from stream.session.batch import PARTITION_KEY, BatchResult, DeadLetter
from stream.session.processor import update, view_version

log = logging.getLogger("stream.publish")

M = TypeVar("M")
M_contra = TypeVar("M_contra", contravariant=True)


class Outbox(Protocol[M_contra]):
    """The Kafka side, as the app provides it: each call returns the delivery future."""

    def write_row(self, key: bytes, row: bytes, handle: M_contra) -> Awaitable[Any]: ...

    def send_update(
        self, key: bytes, payload: bytes, headers: list[tuple[str, bytes]]
    ) -> Awaitable[Any]: ...

    def send_dead_letter(self, letter: DeadLetter) -> Awaitable[Any]: ...


class Backoff:
    """Exponential backoff with a cap, reset on success: the one retry pacing we use."""

    def __init__(self, first: float = 0.1, cap: float = 5.0) -> None:
        self.first, self.cap, self.delay = first, cap, first

    async def wait(self) -> None:
        await asyncio.sleep(self.delay)
        self.delay = min(self.delay * 2, self.cap)

    def reset(self) -> None:
        self.delay = self.first


def update_headers(gen: int, tally: tuple[int, int, int], v: int) -> list[tuple[str, bytes]]:
    """What a reader of the output topic needs to re-seed Redis exactly."""
    return [
        ("gen", str(gen).encode()),
        ("tally", " ".join(map(str, tally)).encode()),
        ("v", str(v).encode()),
    ]


@dataclass
class RedisState:
    """What the Redis side is doing, for metrics and readiness."""

    retrying: bool = False
    pending: int = 0
    last_error: str = ""
    reseeds: int = 0
    reseeded_sessions: int = 0


@dataclass
class Publisher(Generic[M]):
    settings: Settings
    outbox: Outbox[M]
    sink: RedisSink
    max_pending: int = 500_000  # sessions awaiting Redis before batches are held
    state: RedisState = field(default_factory=RedisState)
    on_permanent: Callable[[BaseException], None] | None = None
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])

    def __post_init__(self) -> None:
        self._pending: dict[str, SessionUpdate] = {}
        self._dead: dict[tuple[str, int], DeadCount] = {}
        self._drained = asyncio.Event()
        self._drained.set()
        self._writer: asyncio.Task[None] | None = None

    @property
    def generation(self) -> int:
        return self.settings.generation

    # -- one batch -------------------------------------------------------------------
    async def publish(self, result: BatchResult[M]) -> None:
        await self._deliver(result)
        gen = self.generation
        updates = [
            SessionUpdate(
                c.session_id,
                max(gen, c.gen),
                c.update["seq"],
                (c.tally.folded, c.tally.duplicate, c.tally.faulted),
                orjson.dumps(c.update),
                c.view_version,
            )
            for c in result.sessions
        ]
        topic = self.settings.input_topic
        dead = [DeadCount(topic, p.partition, gen, p.dead_lettered) for p in result.partitions]
        await self.write_redis(updates, dead)

    async def _deliver(self, result: BatchResult[M]) -> None:
        backoff = Backoff(0.2, 10.0)
        gen = self.generation
        while True:
            futures: list[Awaitable[Any]] = []
            outbox = self.outbox
            for change in result.sessions:
                futures.append(outbox.write_row(change.key, change.row, change.handle))
                tally = (change.tally.folded, change.tally.duplicate, change.tally.faulted)
                futures.append(
                    outbox.send_update(
                        change.key,
                        orjson.dumps(change.update),
                        update_headers(max(gen, change.gen), tally, change.view_version),
                    )
                )
            for part in result.partitions:
                futures.append(outbox.write_row(PARTITION_KEY, part.row, part.handle))
            for letter in result.dead_letters:
                futures.append(outbox.send_dead_letter(letter))
            outcomes = await asyncio.gather(*futures, return_exceptions=True)
            failed = [o for o in outcomes if isinstance(o, BaseException)]
            if not failed:
                return
            log.warning(
                "%d of %d records of a batch not delivered (%s); re-sending in %.1f s",
                len(failed),
                len(futures),
                safe_text(repr(failed[0]), 300),
                backoff.delay,
            )
            await backoff.wait()

    # -- Redis -----------------------------------------------------------------------
    async def write_redis(self, updates: list[SessionUpdate], dead: list[DeadCount]) -> None:
        if self._pending or self._dead:  # an outage is being worked off: queue behind it
            self._queue(updates, dead)
            if len(self._pending) > self.max_pending:
                await self._drained.wait()  # bounded memory: hold batches until it drains
            return
        try:
            await self.sink.write(updates, dead, now_ms())
        except PermanentRedisError as error:
            self._permanent(error)
            raise
        except Exception as error:
            if not is_transient(error):
                self._permanent(error)
                raise PermanentRedisError(str(error)) from error
            self._queue(updates, dead)
            self._note(error)

    def _queue(self, updates: Iterable[SessionUpdate], dead: Iterable[DeadCount]) -> None:
        pending = self._pending
        for u in updates:
            held = pending.get(u.session_id)
            if held is None or u.version >= held.version:
                pending[u.session_id] = u
        for d in dead:
            key = (d.topic, d.partition)
            held_dead = self._dead.get(key)
            if held_dead is None or (d.gen, d.count) >= (held_dead.gen, held_dead.count):
                self._dead[key] = d
        self.state.pending = len(pending)
        if pending or self._dead:
            self._drained.clear()
            if self._writer is None or self._writer.done():
                self._writer = asyncio.ensure_future(self._drain())

    def _note(self, error: BaseException) -> None:
        if not self.state.retrying:
            log.warning("redis unavailable (%s); updates queue until it is back", error)
        self.state.retrying = True
        self.state.last_error = safe_text(str(error), 300)

    def _permanent(self, error: BaseException) -> None:
        self.state.last_error = safe_text(str(error), 300)
        log.error("redis refused permanently: %s", error)
        if self.on_permanent is not None:
            self.on_permanent(error)

    async def _drain(self) -> None:
        backoff = Backoff(0.1, 5.0)
        while self._pending or self._dead:
            chunk = list(self._pending.values())[:2000]
            dead = list(self._dead.values())
            try:
                await self.sink.write(chunk, dead, now_ms())
            except Exception as error:
                if not is_transient(error) or isinstance(error, PermanentRedisError):
                    self._permanent(error)
                    return
                self._note(error)
                await backoff.wait()
                continue
            backoff.reset()
            for u in chunk:
                if self._pending.get(u.session_id) is u:
                    del self._pending[u.session_id]
            for d in dead:
                if self._dead.get((d.topic, d.partition)) is d:
                    del self._dead[(d.topic, d.partition)]
            self.state.pending = len(self._pending)
        if self.state.retrying:
            log.info("redis is back; queued updates written")
        self.state.retrying = False
        self._drained.set()

    async def flush(self, timeout: float) -> bool:
        """Wait for queued Redis writes (at shutdown); False if they are still pending."""
        try:
            await asyncio.wait_for(self._drained.wait(), timeout)
            return True
        except TimeoutError:
            return False

    # -- re-seed ---------------------------------------------------------------------
    async def unmarked(self, partitions: list[int]) -> list[int]:
        """The partitions whose marker is gone from Redis: what this worker published for
        them is lost (Redis restarted empty, was flushed, failed over to an empty replica).
        One field per partition, so every owner notices its own, whoever checks first."""
        if not partitions:
            return []
        fields = [self._marker_field(p) for p in partitions]
        found = await self.sink.client.hmget(self.sink.layout.marker_key, fields)
        return [p for p, value in zip(partitions, found, strict=True) if value is None]

    async def mark(self, partitions: list[int]) -> None:
        """Record that Redis holds these partitions' sessions (after a re-seed)."""
        if partitions:
            value = f"{self.generation}:{self.run_id}"
            mapping: dict[Any, Any] = {self._marker_field(p): value for p in partitions}
            await self.sink.client.hset(self.sink.layout.marker_key, mapping=mapping)

    def _marker_field(self, partition: int) -> str:
        return f"{self.settings.input_topic}:{partition}"

    async def reseed(self, rows: Iterable[tuple[bytes, bytes]], topic_partition: int) -> int:
        """Republish every stored row of one partition (guarded: never moves a session
        backwards, and an identical version writes nothing). Returns sessions sent."""
        gen = self.generation
        batch: list[SessionUpdate] = []
        dead: list[DeadCount] = []
        sent = 0
        for key, row in rows:
            if key == PARTITION_KEY:
                try:
                    count = int(orjson.loads(row)[0])
                except (orjson.JSONDecodeError, TypeError, ValueError, IndexError):
                    continue
                dead.append(DeadCount(self.settings.input_topic, topic_partition, gen, count))
                continue
            try:
                session_id = key.decode()
                record = codec.decode(row)
            except (UnicodeDecodeError, codec.RowError):
                continue  # the next event of that session reports the bad row loudly
            t = record.tally
            body = update(session_id, record)
            batch.append(
                SessionUpdate(
                    session_id,
                    max(gen, record.gen),
                    body["seq"],
                    (t.folded, t.duplicate, t.faulted),
                    orjson.dumps(body),
                    view_version(record),
                )
            )
            if len(batch) >= 2000:
                await self.write_redis(batch, dead)
                sent += len(batch)
                batch, dead = [], []
                await asyncio.sleep(0)  # let live batches and heartbeats through
        await self.write_redis(batch, dead)
        sent += len(batch)
        self.state.reseeded_sessions += sent
        return sent


def now_ms() -> int:
    return int(time.time() * 1000)


__all__ = [
    "Backoff",
    "Outbox",
    "PermanentRedisError",
    "Publisher",
    "RedisState",
    "rx",
]
