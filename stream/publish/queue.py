"""The Redis side of the publisher: a write now, or, while Redis is away, a queue that a
background writer works off.

A transient failure — Redis unreachable, or refusing writes for a while: out of memory
(OOM), persistence failing (MISCONF), loading, a failover, its function library gone while
the worker's user may not load it — hands the updates to the background writer (coalesced
per session, newest version wins: ``merge``) and the batch goes on, so an outage never
stalls consumption or drops the worker from its group. The queue is bounded in sessions and
in bytes (``entry_bytes``): past either bound batches are held until it is back under half
of both. A permanent failure (bad password, WRONGTYPE, script error) raises
``PermanentRedisError`` and calls ``on_permanent``: the worker stops with a clear message.
Writes Redis rejects as older than what it holds (a slower or zombie worker, a generation
that went backwards) are counted and reported, never silently dropped.
"""

import asyncio
import logging
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from itertools import islice

from stream.contract.errors import safe_text
from stream.output.record import SessionUpdate
from stream.output.redis import OLDER
from stream.publish.kafka import Backoff
from stream.publish.redis_sink import (
    DeadCount,
    PermanentRedisError,
    RedisSink,
    RetiredCount,
    is_transient,
    outage_kind,
)

log = logging.getLogger("stream.publish")

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


def now_ms() -> int:
    return int(time.time() * 1000)


def monotonic() -> float:
    """The clock that paces the rejected-writes report (a test moves it)."""
    return time.monotonic()


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


class RedisQueue:
    """Writes to Redis through ``sink``, or queues while it is away (see the module)."""

    def __init__(
        self,
        sink: RedisSink,
        max_pending: int,
        max_pending_bytes: int,
        state: RedisState | None = None,
        on_permanent: Callable[[BaseException], None] | None = None,
    ) -> None:
        self.sink = sink
        self.max_pending = max_pending  # sessions queued before batches are held
        self.max_pending_bytes = max_pending_bytes  # their entry_bytes before they are
        self.state = state if state is not None else RedisState()
        self.on_permanent = on_permanent
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

    async def write(
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
                    await self._rejected([u for u, r in rejected if r == OLDER and not u.gone])
                return True
        if not self._room.is_set():
            await self._room.wait()  # bounded memory: hold batches until under low water
        return False

    async def flush(self, timeout: float) -> bool:
        """Wait for queued Redis writes (at shutdown); False if they are still pending."""
        try:
            await asyncio.wait_for(self._drained.wait(), timeout)
            return True
        except TimeoutError:
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
                merged = merge(held, u, live)
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
        """Count live writes Redis rejected as older than what it holds (``OLDER``) and
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
        try:
            found = await asyncio.wait_for(self.sink.stored_version(session_id), 1.0)
        except Exception:
            return "unknown"
        return f"({', '.join(str(v) for v in found)})"

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
                    if r == OLDER and not u.gone and (live is None or live[i])
                ]
            )
        if state.retrying:
            log.info("redis is back; queued updates written")
        state.retrying = False
        state.reason = ""
        self._outages.clear()
        self._room.set()
        self._drained.set()


def merge(held: SessionUpdate, u: SessionUpdate, live: bool) -> SessionUpdate | None:
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
