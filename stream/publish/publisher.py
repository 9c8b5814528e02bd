"""The one publisher: a batch result out to Kafka (rows, updates, dead letters) and Redis.

The agent folds a batch once and hands the result here; only I/O is retried, never the
fold. Order of duty:

1. Kafka, delivery before ack: every record the batch produces — changelog rows, output
   updates (``output.record``: the payload and headers), dead letters — is confirmed by
   the broker before ``publish`` returns (and so before the batch's offsets can be acked
   and committed). A failed send is re-sent with backoff; the batch is held, never
   committed past.
2. Redis, a cache of the output topic: written in one round trip. A transient failure
   — Redis unreachable, or refusing writes for a while: out of memory (OOM), persistence
   failing (MISCONF), loading, a failover, its function library gone while the worker's
   user may not load it — hands the updates to a background writer
   (coalesced per session, newest version wins) and the batch goes on, so an outage never
   stalls consumption or drops the worker from its group. The queue is bounded in
   sessions and in bytes: past either bound batches are held until it is back under half
   of both. A permanent failure (bad password, WRONGTYPE, script error) raises
   ``PermanentRedisError`` and the worker stops with a clear message. Writes Redis
   rejects as older than what it holds (a slower or zombie worker, a generation that went
   backwards) are counted and reported, never silently dropped.
3. Re-seed: ``reseed`` republishes stored rows through the same guarded script (nothing
   older overwrites anything newer), used when partitions are assigned and when Redis
   comes back without the marker — i.e. empty, flushed or failed over to an empty replica.
   Sessions past their TTL (or, with a Redis TTL, idle past it) are never re-seeded.
4. Expiry: ``expire`` takes a sweep's result (``session.expiry``) out — the partition row
   first, then the tombstones on the changelog and the output topic, then the Redis drop.
"""

import asyncio
import logging
import math
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from itertools import islice
from typing import Any, Protocol

from redis import exceptions as rx

from stream.config import Settings
from stream.contract.errors import safe_text
from stream.output.record import SessionUpdate
from stream.publish.redis_sink import (
    DeadCount,
    PermanentRedisError,
    RedisSink,
    RetiredCount,
    is_transient,
    outage_kind,
)
from stream.session import codec
from stream.session.batch import PARTITION_KEY, BatchResult, DeadLetter
from stream.session.expiry import SweepResult
from stream.session.partition import PartitionRow

log = logging.getLogger("stream.publish")


class Outbox(Protocol):
    """The Kafka side, as the app provides it: each call returns the delivery future."""

    def write_row(self, key: bytes, row: bytes | None, partition: int) -> Awaitable[Any]: ...

    def send_update(
        self, key: bytes, payload: bytes | None, headers: list[tuple[str, bytes]]
    ) -> Awaitable[Any]: ...

    def send_dead_letter(self, letter: DeadLetter) -> Awaitable[Any]: ...

    async def left(self) -> None:
        """Until what was sent so far is on its way to the broker, not just queued."""


class Backoff:
    """Exponential backoff with a cap, reset on success: the one retry pacing we use."""

    def __init__(self, first: float = 0.1, cap: float = 5.0) -> None:
        self.first, self.cap, self.delay = first, cap, first

    async def wait(self) -> None:
        await asyncio.sleep(self.delay)
        self.delay = min(self.delay * 2, self.cap)

    def reset(self) -> None:
        self.delay = self.first


# What a queued update costs besides its payload and session id: the dict slot, the
# SessionUpdate, its tally tuple and ints, the bytes and str headers (about 300 bytes
# measured with tracemalloc on CPython 3.11), rounded up.
ENTRY_OVERHEAD = 320
CHUNK = 2000  # updates per round trip when the queue is written
REJECTED_LOG_INTERVAL = 10.0  # s: at most one line about rejected writes per interval

# How the log names an outage kind (redis_sink.outage_kind).
OUTAGES = {
    "connection": "unreachable",
    "timeout": "timed out",
    "oom": "out of memory (used memory > maxmemory; free memory, raise maxmemory, or set"
    " REDIS_TTL_SECONDS so idle sessions expire)",
    "misconf": "refusing writes: its persistence (RDB/AOF) is failing, see its log",
    "loading": "loading its dataset",
    "readonly": "read-only (a replica, or a failover in progress)",
    "masterdown": "a replica without its primary",
    "busy": "busy running a script",
    "cluster": "a cluster down or resharding",
    # Redis came back empty and the worker's user may not load its functions (note 005).
    "library": "lacks the worker's function library and the worker's user may not load it:"
    " waiting for the loader (the chart's loader sidecar, REDIS_LOADER_URL) or an admin"
    " to load it",
}


def entry_bytes(u: SessionUpdate) -> int:
    """The memory a queued update is estimated to hold."""
    return len(u.payload) + len(u.session_id) + ENTRY_OVERHEAD


@dataclass
class RedisState:
    """What the Redis side is doing, for metrics and readiness."""

    retrying: bool = False
    pending: int = 0  # sessions queued for Redis
    pending_bytes: int = 0  # their estimated memory (entry_bytes)
    last_error: str = ""  # the last failure's text (kept after Redis is back)
    reason: str = ""  # the current outage's kind (redis_sink.outage_kind); "" when none
    rejected: int = 0  # live session writes Redis refused as older than what it holds
    reseeds: int = 0
    reseeded_sessions: int = 0

    @property
    def oom(self) -> bool:
        """True while the current outage is Redis out of memory."""
        return self.retrying and self.reason == "oom"


@dataclass
class Publisher:
    settings: Settings
    outbox: Outbox
    sink: RedisSink
    max_pending: int = 0  # sessions queued before batches are held; 0: from settings
    max_pending_bytes: int = 0  # their entry_bytes before batches are held; 0: settings
    state: RedisState = field(default_factory=RedisState)
    on_permanent: Callable[[BaseException], None] | None = None
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])

    def __post_init__(self) -> None:
        if self.max_pending <= 0:
            self.max_pending = self.settings.redis_max_pending
        if self.max_pending_bytes <= 0:
            self.max_pending_bytes = self.settings.redis_max_pending_bytes
        self._pending: dict[str, SessionUpdate] = {}
        self._bytes = 0  # sum of entry_bytes over _pending, kept as entries come and go
        self._reseeded: set[str] = set()  # queued entries that came from a re-seed
        self._dead: dict[tuple[str, int], DeadCount] = {}
        self._retired: dict[tuple[str, int], RetiredCount] = {}
        self._drained = asyncio.Event()
        self._drained.set()
        self._room = asyncio.Event()  # set: the queue is under its low-water mark
        self._room.set()
        self._writer: asyncio.Task[None] | None = None
        self._outages: set[str] = set()  # outage kinds logged since Redis was last fine
        self._unreported = 0  # rejected writes since the last line about them
        self._reported_at = -math.inf

    @property
    def generation(self) -> int:
        return self.settings.generation

    # -- one batch -------------------------------------------------------------------
    def records(self, result: BatchResult) -> list[SessionUpdate]:
        """The output record of every session the batch changed, one each."""
        gen = self.generation
        return [SessionUpdate.from_change(c, gen) for c in result.sessions]

    async def publish(self, result: BatchResult) -> None:
        """``send`` then ``cache``: the batch out to Kafka, confirmed, then to Redis."""
        updates = self.records(result)
        await self.send(result, updates)
        await self.cache(result, updates)

    async def cache(self, result: BatchResult, updates: list[SessionUpdate]) -> None:
        """The batch's updates and dead-letter counts to Redis, in one round trip (queued
        while Redis is away)."""
        gen, topic = self.generation, self.settings.input_topic
        # Every batch writes its partitions' rows (the stream time); a count of 0 moves
        # nothing in Redis, so only partitions with dead letters are sent.
        dead = [
            DeadCount(topic, p.partition, gen, p.dead_lettered)
            for p in result.partitions
            if p.dead_lettered
        ]
        await self.write_redis(updates, dead)

    def retired_count(self, partition: int, row: PartitionRow) -> RetiredCount:
        t = row.retired
        tally = (t.folded, t.duplicate, t.faulted)
        return RetiredCount(
            self.settings.input_topic, partition, self.generation, tally, row.expired
        )

    async def expire(self, sweep: SweepResult) -> bool:
        """A sweep's sessions out of every store, in the order that survives a crash at
        any point: the partition row (the retired figure and the cursor) first, then the
        Redis drop, then each session's changelog and output tombstones, all confirmed.

        Redis goes before the tombstones because only the rows can bring a drop back: a
        worker that dies after the tombstones but before the drop would leave the
        sessions in Redis for good (the next owner restores no row to sweep again),
        whereas a death before the tombstones leaves the rows, which the next owner finds
        due and sweeps again (counted nothing twice: the cursor). For the same reason,
        when Redis is away (the drop only queued) no tombstone is written: returns False,
        and the caller files the sessions again for a later sweep."""
        if not sweep.expired:
            return True
        outbox = self.outbox
        retired = []
        if sweep.row:  # empty: every session was counted by an earlier sweep already
            await _confirmed(
                lambda: [outbox.write_row(PARTITION_KEY, sweep.row, sweep.partition)],
                "expiry partition row",
            )
            retired.append(self.retired_count(sweep.partition, PartitionRow.decode(sweep.row)))
        drops = [SessionUpdate.from_expired(e, self.generation) for e in sweep.expired]
        if not await self.write_redis(drops, [], retired=retired):
            return False

        def records() -> list[Awaitable[Any]]:
            futures = []
            for e in sweep.expired:
                futures.append(outbox.write_row(e.key, None, sweep.partition))
                futures.append(outbox.send_update(e.key, None, []))
            return futures

        await _confirmed(records, "expiry records")
        return True

    def send(self, result: BatchResult, updates: Sequence[SessionUpdate]) -> Awaitable[None]:
        """Every record of the batch: per session its row and its output record
        (``updates``, one per ``result.sessions``), the partition rows, the dead letters.
        The rows are in the store and the records on their way when this returns (no
        await in between); await the result for the broker's confirmation of every one."""

        def records() -> list[Awaitable[Any]]:
            futures: list[Awaitable[Any]] = []
            outbox = self.outbox
            for change, u in zip(result.sessions, updates, strict=True):
                futures.append(outbox.write_row(change.key, change.row, change.partition))
                if u.replaces is not None:  # an expired life: its tombstone first
                    futures.append(outbox.send_update(change.key, None, []))
                futures.append(outbox.send_update(change.key, u.payload, u.headers()))
            for part in result.partitions:
                futures.append(outbox.write_row(PARTITION_KEY, part.row, part.partition))
            for letter in result.dead_letters:
                futures.append(outbox.send_dead_letter(letter))
            return futures

        return _confirmed(records, "records of a batch", records())

    async def left(self) -> None:
        """Until the records sent so far are on their way to the broker: a step that then
        holds the loop (the next batch's fold) no longer holds back their round trip."""
        await self.outbox.left()

    # -- Redis -----------------------------------------------------------------------
    async def write_redis(
        self,
        updates: list[SessionUpdate],
        dead: list[DeadCount],
        *,
        live: bool = True,
        retired: Sequence[RetiredCount] = (),
    ) -> bool:
        """Write to Redis, or queue when it is away. ``live``: updates of a batch just
        folded; False for a re-seed, whose rows may be overtaken by live updates meanwhile
        (so Redis rejecting one as older is expected and not counted). Returns whether
        they were written now (False: queued)."""
        if self._pending or self._dead or self._retired:  # an outage is being worked off
            self._queue(updates, dead, live, retired)
        else:
            try:
                results = await self.sink.write(updates, dead, now_ms(), retired, seeded=not live)
            except PermanentRedisError as error:
                self._permanent(error)
                raise
            except Exception as error:
                if not is_transient(error):
                    self._permanent(error)
                    raise PermanentRedisError(str(error)) from error
                self._queue(updates, dead, live, retired)
                self._note(error)
            else:
                if live:
                    rejected = zip(updates, results, strict=False)
                    await self._rejected([u for u, r in rejected if r == 0 and not u.gone])
                return True
        if not self._room.is_set():
            await self._room.wait()  # bounded memory: hold batches until under low water
        return False

    def _queue(
        self,
        updates: Iterable[SessionUpdate],
        dead: Iterable[DeadCount],
        live: bool = True,
        retired: Iterable[RetiredCount] = (),
    ) -> None:
        pending, reseeded = self._pending, self._reseeded
        size = self._bytes
        for u in updates:
            held = pending.get(u.session_id)
            if held is not None:
                merged = _merge(held, u, live)
                if merged is None:
                    continue
                u = merged
                size += len(u.payload) - len(held.payload)
            else:
                size += entry_bytes(u)
            pending[u.session_id] = u
            if live:
                reseeded.discard(u.session_id)
            else:
                reseeded.add(u.session_id)
        for d in dead:
            key = (d.topic, d.partition)
            held_dead = self._dead.get(key)
            if held_dead is None or (d.gen, d.count) >= (held_dead.gen, held_dead.count):
                self._dead[key] = d
        for r in retired:
            key = (r.topic, r.partition)
            held_retired = self._retired.get(key)
            if held_retired is None or (r.gen, r.expired) >= (
                held_retired.gen,
                held_retired.expired,
            ):
                self._retired[key] = r
        self._bytes = size
        self.state.pending = len(pending)
        self.state.pending_bytes = size
        if len(pending) > self.max_pending or size > self.max_pending_bytes:
            self._room.clear()  # past a bound: batches wait for the low-water mark
        if pending or self._dead or self._retired:
            self._drained.clear()
            if self._writer is None or self._writer.done():
                self._writer = asyncio.ensure_future(self._drain())

    def _low_water(self) -> bool:
        """Under half of both bounds: held batches may go on."""
        return (
            len(self._pending) <= self.max_pending // 2
            and self._bytes <= self.max_pending_bytes // 2
        )

    def _note(self, error: BaseException) -> None:
        kind = outage_kind(error) or "error"
        text = safe_text(str(error), 300)
        if kind not in self._outages:  # once per kind and outage, with the reason
            self._outages.add(kind)
            log.warning(
                "redis %s (%s); updates queue until it takes writes again",
                OUTAGES.get(kind, "failed"),
                text,
            )
        self.state.retrying = True
        self.state.reason = kind
        self.state.last_error = text

    def _permanent(self, error: BaseException) -> None:
        self.state.last_error = safe_text(str(error), 300)
        log.error("redis refused permanently: %s", error)
        if self.on_permanent is not None:
            self.on_permanent(error)

    async def _rejected(self, rejected: Sequence[SessionUpdate]) -> None:
        """Count live writes Redis rejected as older than what it holds (result 0) and
        report them: at most one line per REJECTED_LOG_INTERVAL, with one example."""
        if not rejected:
            return
        self.state.rejected += len(rejected)
        self._unreported += len(rejected)
        now = monotonic()
        if now - self._reported_at < REJECTED_LOG_INTERVAL:
            return
        self._reported_at = now
        example = rejected[0]
        stored = await self._stored_version(example.session_id)
        log.warning(
            "redis holds newer versions than %d session writes since the last report (%d in"
            " all): a slower or zombie worker, or a generation that went backwards"
            " (STREAM_GENERATION); e.g. session %s: (gen, seq, n, v) %s, stored %s",
            self._unreported,
            self.state.rejected,
            safe_text(example.session_id, 200),
            example.version,
            stored,
        )
        self._unreported = 0

    async def _stored_version(self, session_id: str) -> str:
        """The version Redis holds for a session, for the report (best effort)."""
        key = self.sink.layout.session_key(session_id)
        try:
            found = await asyncio.wait_for(
                self.sink.client.hmget(key, ["gen", "seq", "n", "v"]), 1.0
            )
        except Exception:
            return "unknown"
        values = [v.decode() if isinstance(v, bytes) else str(v) for v in found]
        return f"({', '.join(values)})"

    async def _drain(self) -> None:
        backoff = Backoff(0.1, 5.0)
        pending, reseeded, state = self._pending, self._reseeded, self.state
        while pending or self._dead or self._retired:
            chunk = list(islice(pending.values(), CHUNK))
            dead = list(self._dead.values())
            retired = list(self._retired.values())
            live = [u.session_id not in reseeded for u in chunk] if reseeded else None
            try:
                # The queue mixes live and re-seeded entries: each is written as live
                # (a re-seed's recent entry then gets the write's time: rare, harmless).
                results = await self.sink.write(chunk, dead, now_ms(), retired)
            except Exception as error:
                if not is_transient(error) or isinstance(error, PermanentRedisError):
                    self._permanent(error)
                    return
                self._note(error)
                await backoff.wait()
                continue
            backoff.reset()
            size = self._bytes
            for u in chunk:
                if pending.get(u.session_id) is u:
                    del pending[u.session_id]
                    reseeded.discard(u.session_id)
                    size -= entry_bytes(u)
            for d in dead:
                if self._dead.get((d.topic, d.partition)) is d:
                    del self._dead[(d.topic, d.partition)]
            for r in retired:
                if self._retired.get((r.topic, r.partition)) is r:
                    del self._retired[(r.topic, r.partition)]
            self._bytes = size
            state.pending = len(pending)
            state.pending_bytes = size
            if not self._room.is_set() and self._low_water():
                self._room.set()
            await self._rejected(
                [
                    u
                    for i, (u, r) in enumerate(zip(chunk, results, strict=False))
                    if r == 0 and not u.gone and (live is None or live[i])
                ]
            )
        if state.retrying:
            log.info("redis is back; queued updates written")
        state.retrying = False
        state.reason = ""
        self._outages.clear()
        self._room.set()
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
        One field per partition, so every owner notices its own, whoever checks first; in
        cluster mode one marker hash per slot group (``RedisLayout.marker_keys``), so a
        master that lost its data is noticed even though the others kept theirs."""
        if not partitions:
            return []
        fields = [self._marker_field(p) for p in partitions]
        client = self.sink.client
        keys = self.sink.layout.marker_keys
        if len(keys) == 1:
            found = [await client.hmget(keys[0], fields)]
        else:
            pipe = client.pipeline(transaction=False)
            for key in keys:
                pipe.hmget(key, fields)
            found = await pipe.execute()
        return [p for i, p in enumerate(partitions) if any(f[i] is None for f in found)]

    async def mark(self, partitions: list[int]) -> None:
        """Record that Redis holds these partitions' sessions (after a re-seed)."""
        if partitions:
            value = f"{self.generation}:{self.run_id}"
            mapping: dict[Any, Any] = {self._marker_field(p): value for p in partitions}
            client = self.sink.client
            keys = self.sink.layout.marker_keys
            if len(keys) == 1:
                await client.hset(keys[0], mapping=mapping)
                return
            pipe = client.pipeline(transaction=False)
            for key in keys:
                pipe.hset(key, mapping=mapping)
            await pipe.execute()

    def _marker_field(self, partition: int) -> str:
        return f"{self.settings.input_topic}:{partition}"

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
            if len(batch) >= CHUNK:
                await self.write_redis(batch, dead, live=False)
                sent += len(batch)
                batch, dead = [], []
                await asyncio.sleep(0)  # let live batches and heartbeats through
        await self.write_redis(batch, dead, live=False, retired=retired)
        sent += len(batch)
        self.state.reseeded_sessions += sent
        return sent


async def _confirmed(
    records: Callable[[], list[Awaitable[Any]]],
    what: str,
    sent: list[Awaitable[Any]] | None = None,
) -> None:
    """Send ``records()`` until the broker confirms every one, re-sending all with backoff
    (the caller is held meanwhile, never committed past). Records sent together share
    their delivery (``Outbox``), awaited once. ``sent``: the first sending's deliveries,
    when the caller has sent them already."""
    backoff = Backoff(0.2, 10.0)
    while True:
        futures = records() if sent is None else sent
        sent = None
        deliveries = list(dict.fromkeys(futures))
        outcomes = await asyncio.gather(*deliveries, return_exceptions=True)
        failed = [o for o in outcomes if isinstance(o, BaseException)]
        if not failed:
            return
        log.warning(
            "%d %s not all delivered (%s); re-sending in %.1f s",
            len(futures),
            what,
            safe_text(repr(failed[0]), 300),
            backoff.delay,
        )
        await backoff.wait()


def _merge(held: SessionUpdate, u: SessionUpdate, live: bool) -> SessionUpdate | None:
    """What stays queued for a session that already has an entry (None: keep ``held``).

    The worker is the one writer of its partitions, so a live entry is newer than what
    it follows, even at a lower version (a new life after the session expired); the drop
    of an expired life it needs first is kept with it. A re-seeded row never replaces a
    live entry that is newer, nor brings back a life that was dropped."""
    if live:
        if u.replaces is None and held.replaces is not None:
            return replace(u, replaces=held.replaces)
        if u.replaces is None and u.version < held.version:
            return None  # an older version from this worker: a generation went backwards
        return u
    if held.gone or (held.replaces is not None and u.version <= held.replaces):
        return None
    if u.version < held.version:
        return None
    return replace(u, replaces=held.replaces) if held.replaces is not None else u


def now_ms() -> int:
    return int(time.time() * 1000)


def monotonic() -> float:
    """The clock that paces the rejected-writes report (a test moves it)."""
    return time.monotonic()


__all__ = [
    "Backoff",
    "Outbox",
    "PermanentRedisError",
    "Publisher",
    "RedisState",
    "rx",
]
