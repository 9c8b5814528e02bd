"""Redis: the latest update per session, published on the session's channel, and totals.

Lua functions of one Redis Functions library (``publish.library``: ``LIBRARY``, run with
``FCALL``) write atomically and only forward (keys in ``output.layout``, fields, messages
and result codes in ``output.redis``):

- a session update (``output.record.SessionUpdate``) is stored and published only if its
  version ``(gen, seq, n, v)`` is not older than the stored one (``n``: events the session
  has accounted for, ``v``: the view version; ``SessionUpdate.version``), so a slow or
  zombie worker cannot move a UI backwards; an identical version is a no-op (re-seeds and
  redelivered batches publish nothing twice). The session's tally is kept beside it, and
  the stats hash moves by the difference: totals are the sum of what the state holds,
  exact under redelivery, re-seeds and restarts, never double-counted.
- a partition's dead-letter count is kept the same way.

The sink also keeps the re-seed markers (``unmarked``, ``mark``: a field per input
partition, set by its owner after a re-seed) and reads a session's stored version for
reports (``stored_version``).

With ``REDIS_CLUSTER`` the same functions run on the sharded layout (``output.layout``,
note 014): a session's keys and its shard's totals share one hash slot, the channel
messages go out with ``SPUBLISH`` (a sharded channel lives on its slot's master) to the
session's channel and to its shard's feed, and a batch's pipeline is split by redis-py
into one pipeline per master, sent concurrently.

Errors are sorted (``outage_kind``): a connection that fails is transient (the caller
retries), and so is a server that answers but refuses writes for a while — out of memory
(``OOM``: ``maxmemory`` reached under ``noeviction``), persistence failing (``MISCONF``),
loading its dataset (``LOADING``), a replica or a failover (``READONLY``, ``MASTERDOWN``),
a script running (``BUSY``), and Redis lacking the function library while this user may
not load it (``LibraryMissing``: the loader, or an admin, loads it). Everything else Redis
answers with (bad password, WRONGTYPE on a foreign key, a script error, a
``REDIS_LOADER_URL`` whose user may not load) is permanent and must stop the worker loudly
rather than loop.

The library's name carries a hash of its code (``LIBRARY_NAME``), and so do its functions'
names: a worker calls exactly the code it was built with, and during a rolling upgrade old
and new workers each find their own version loaded side by side. Redis lacking it (first
use, a restart that came back empty) answers "Function not found"; the sink then loads it
(``FUNCTION LOAD REPLACE``, on every master of a cluster) as ``REDIS_LOADER_URL``'s user, or
as its own when unset, and runs the batch again (note 005). When its own user may not load
it, the sink reports an outage (``LibraryMissing``) until someone else has:
``stream.publish.loader`` keeps it loaded (the chart's loader sidecar).
"""

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import redis.asyncio as aioredis
from redis import exceptions as rx
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster

from stream.config import Settings
from stream.output.record import SessionUpdate
from stream.output.redis import (
    VERSION_FIELDS,
    expiry_message,
    partition_field,
    tally_text,
)
from stream.publish.library import (
    CALLBACKS,
    DEAD_WRITE,
    FUNCTIONS,
    LIBRARY,
    LIBRARY_NAME,
    RETIRED_WRITE,
    SESSION_DROP,
    SESSION_DROP_SHARDED,
    SESSIONS_WRITE,
    SESSIONS_WRITE_SHARDED,
    library,
)
from stream.redis_client import async_client

_NO_FUNCTION = "Function not found"  # Redis' answer to FCALL of a function it lacks

# Error codes of replies that refuse writes for a while (the server is there, and will
# take them again), and the kind of outage each one is. redis-py gives some their own
# class; others (MISCONF, BUSY) arrive as a plain ResponseError with the code in front,
# or inside a script error ("... -OOM command not allowed ...").
REFUSALS = {
    "OOM": "oom",
    "MISCONF": "misconf",
    "LOADING": "loading",
    "READONLY": "readonly",
    "MASTERDOWN": "masterdown",
    "BUSY": "busy",
    "TRYAGAIN": "cluster",
    "CLUSTERDOWN": "cluster",
}
_REFUSAL = re.compile(r"(?:^|: |\s-)(" + "|".join(REFUSALS) + r")\b")
_PIPELINE = "of pipeline caused error: "  # redis-py's prefix to a pipeline's first error
_UNREACHABLE = "cannot be connected"  # redis-py: "Redis Cluster cannot be connected. ..."


def _update_time(payload: bytes) -> int | None:
    """The update's ``time`` (its latest event time), for a re-seeded ``recent`` entry."""
    try:
        time = orjson.loads(payload).get("time")
    except (orjson.JSONDecodeError, AttributeError):
        return None
    return time if type(time) is int else None


class PermanentRedisError(RuntimeError):
    """Redis refused in a way retrying cannot fix; the message says what to change."""


class LibraryMissing(RuntimeError):
    """Redis lacks the function library and the sink's own user may not load it: an outage
    that ends when the loader (``stream.publish.loader``) or an admin loads it."""


def _server_text(error: rx.ResponseError) -> str:
    """What the server answered, only: a pipeline's annotation quotes the command, whose
    arguments (session ids, payloads) are data and must not decide anything."""
    text = str(error.args[0]) if error.args else ""
    return text.rpartition(_PIPELINE)[2].lstrip("('\" ")


def outage_kind(error: BaseException) -> str | None:
    """The kind of outage an error is ("connection", "timeout", "oom", "misconf",
    "loading", "readonly", "masterdown", "busy", "cluster"), or None when no retry fixes
    it (a bad password, WRONGTYPE, a script error, a bug); "library" for
    ``LibraryMissing``."""
    if isinstance(error, LibraryMissing):
        return "library"
    if isinstance(error, rx.AuthenticationError | rx.AuthorizationError):
        return None  # subclasses of ConnectionError/ResponseError, but no retry helps
    if isinstance(error, rx.OutOfMemoryError):
        return "oom"
    if isinstance(error, rx.BusyLoadingError):
        return "loading"
    if isinstance(error, rx.ReadOnlyError):
        return "readonly"
    if isinstance(error, rx.MasterDownError):
        return "masterdown"
    if isinstance(error, rx.TryAgainError | rx.ClusterDownError | rx.SlotNotCoveredError):
        return "cluster"
    if isinstance(error, rx.ClusterError) or (
        isinstance(error, rx.RedisClusterException) and _UNREACHABLE in str(error)
    ):
        # redis-py's own: retries exhausted while slots moved; no node reachable.
        return "cluster"
    if isinstance(error, rx.TimeoutError | TimeoutError):
        return "timeout"
    if isinstance(error, rx.ConnectionError | OSError):
        return "connection"
    if isinstance(error, rx.ResponseError):
        code = getattr(error, "status_code", None)
        if code in REFUSALS:
            return REFUSALS[code]
        found = _REFUSAL.search(_server_text(error))
        if found:
            return REFUSALS[found.group(1)]
    return None


def is_transient(error: BaseException) -> bool:
    return outage_kind(error) is not None


@dataclass(frozen=True, slots=True)
class DeadCount:
    topic: str
    partition: int
    gen: int
    count: int


@dataclass(frozen=True, slots=True)
class RetiredCount:
    """A partition's retired figure (``session.partition.PartitionRow``)."""

    topic: str
    partition: int
    gen: int
    tally: tuple[int, int, int]
    expired: int


Client = aioredis.Redis | AsyncRedisCluster

# Updates per SESSIONS_WRITE call: a call runs alone on its server, so a batch of
# thousands goes in a few calls of a few milliseconds each, not one long one.
WRITE_CHUNK = 500


def connect(settings: Settings, client_name: str = "stream-worker", url: str = "") -> Client:
    """The worker's (or the loader's) asyncio client, of one server or of a cluster
    (``stream.redis_client``). ``url``: another user's URL instead (the loader's), which
    carries its own credentials (``REDIS_USERNAME`` and ``REDIS_PASSWORD`` are the
    worker's)."""
    return async_client(settings, client_name=client_name, url=url)


async def load_library(client: Client) -> None:
    """``FUNCTION LOAD REPLACE`` the library (a cluster client sends it to every master)."""
    await client.function_load(LIBRARY, replace=True)


async def lacking_library(client: Client) -> list[str]:
    """The servers that lack this code's library (``FUNCTION LIST LIBRARYNAME``): of a
    cluster every master asked on its own, so one that came back empty is named."""
    if isinstance(client, AsyncRedisCluster):
        await client.initialize()
        lacking = []
        for node in client.get_primaries():
            found = await client.execute_command(
                "FUNCTION LIST", "LIBRARYNAME", LIBRARY_NAME, target_nodes=node
            )
            if isinstance(found, dict):  # redis-py's per-node answer
                found = next(iter(found.values()), [])
            if not found:
                lacking.append(node.name)
        return lacking
    return [] if await client.function_list(library=LIBRARY_NAME) else ["redis"]


class RedisSink:
    """Writes batches of updates and dead-letter counts, one round trip per batch."""

    def __init__(self, settings: Settings, client: Client | None = None) -> None:
        self.settings = settings
        self.layout = settings.redis_layout
        self.client: Client = client or connect(settings)
        sharded = "_sharded" if self.layout.cluster else ""
        self.session_function = FUNCTIONS[f"sessions_write{sharded}"]
        self.drop_function = FUNCTIONS[f"session_drop{sharded}"]
        self.dead_function = FUNCTIONS["dead_write"]
        self.retired_function = FUNCTIONS["retired_write"]
        self._refused = ""  # why the sink's own user may not load the library, once known

    async def write(
        self,
        updates: Iterable[SessionUpdate],
        dead: Iterable[DeadCount] = (),
        now_ms: int = 0,
        retired: Iterable[RetiredCount] = (),
        seeded: bool = False,
    ) -> list[int]:
        """Write guarded; returns per update ``output.redis.WRITTEN``, ``UNCHANGED`` (already
        there) or ``OLDER``.
        An update that ``replaces`` an expired life drops it first; one that is ``gone``
        only drops (its result is the drop's: ``WRITTEN`` dropped, ``OLDER`` Redis holds a
        newer life).
        ``seeded``: a re-seed, which files a session in ``recent`` only when absent, at
        its own time, so a rebalance never makes old sessions look recent.

        Raises ``PermanentRedisError`` for errors no retry fixes; transient errors
        propagate as they are (``is_transient``) for the caller's retry.
        """
        layout = self.layout
        cluster = layout.cluster
        calls: list[tuple[str, list[Any], list[Any]]] = []  # (function, keys, args)
        # Per update: the call whose result answers for it, and where in that result
        # (-1: the result is the call's own, a drop's).
        positions: list[tuple[int, int]] = []
        groups: dict[int, list[tuple[int, SessionUpdate]]] = {}  # writes by slot group
        ttl = self.settings.redis_ttl_seconds
        for index, u in enumerate(updates):
            positions.append((-1, -1))
            if u.replaces is not None:  # its drop runs first: its call precedes the writes
                keys: list[Any] = list(layout.session_keys(u.session_id))
                feed = [layout.feed_of(u.session_id)] if cluster else []
                drop_args = [*u.replaces, u.session_id, expiry_message(u.session_id), *feed]
                calls.append((self.drop_function, keys, drop_args))
                if u.gone:
                    positions[index] = (len(calls) - 1, -1)
                    continue
            shard = layout.shard_of(u.session_id) if cluster else 0
            groups.setdefault(shard, []).append((index, u))
        for members in groups.values():
            for start in range(0, len(members), WRITE_CHUNK):
                chunk = members[start : start + WRITE_CHUNK]
                first = chunk[0][1].session_id
                _, tallies, stats_key, recent = layout.session_keys(first)
                keys = [tallies, stats_key, recent]
                args: list[Any] = [ttl, "NX" if seeded else ""]
                if cluster:
                    args.append(layout.feed_of(first))
                for at, (index, u) in enumerate(chunk):
                    score = now_ms
                    if seeded:
                        time = _update_time(u.payload)
                        score = time if time is not None else now_ms
                    keys.append(layout.session_key(u.session_id))
                    folded, duplicate, faulted = u.tally
                    args += [
                        f"{u.gen} {u.seq} {folded + duplicate + faulted} {u.view_version} "
                        f"{score} {folded} {duplicate} {faulted}",
                        u.payload,
                        u.session_id,
                    ]
                    positions[index] = (len(calls), at)
                calls.append((self.session_function, keys, args))
        stats = layout.partition_stats_key
        for r in retired:
            field = partition_field(r.topic, r.partition)
            calls.append(
                (
                    self.retired_function,
                    [layout.retired_key, stats],
                    [field, r.gen, tally_text(r.tally), r.expired],
                )
            )
        for d in dead:
            field = partition_field(d.topic, d.partition)
            calls.append((self.dead_function, [layout.dead_key, stats], [field, d.gen, d.count]))
        if not calls:
            return []
        try:
            try:
                results = await self._execute(calls)
            except rx.ResponseError as error:
                if not _server_text(error).startswith(_NO_FUNCTION):
                    raise
                # Redis without this library (first use, a restart that came back empty,
                # FUNCTION FLUSH): load it, run the batch again (every function is
                # idempotent, and per slot the order is kept).
                await self._load_library()
                results = await self._execute(calls)
        except PermanentRedisError:
            raise
        except Exception as error:
            if is_transient(error):
                raise
            raise PermanentRedisError(f"Redis refused the write: {error}") from error
        return [int(results[call] if at < 0 else results[call][at]) for call, at in positions]

    async def _execute(self, calls: list[tuple[str, list[Any], list[Any]]]) -> list[Any]:
        """One pipeline of ``FCALL``s (a cluster client splits it per master, sent
        concurrently, each in order). In a cluster each call names its node (the master of
        its first key's slot; every key of a call shares it): redis-py would otherwise ask
        the server for an FCALL's keys (``COMMAND GETKEYS``), a round trip per call. A
        MOVED call is sent again routed by redis-py itself."""
        client = self.client
        pipe = client.pipeline(transaction=False)
        if isinstance(client, AsyncRedisCluster):
            await client.initialize()  # the slot map; a no-op once known
            for function, keys, args in calls:
                node = client.get_node_from_key(keys[0])
                pipe.execute_command("FCALL", function, len(keys), *keys, *args, target_nodes=node)
        else:
            for function, keys, args in calls:
                pipe.execute_command("FCALL", function, len(keys), *keys, *args)
        return list(await pipe.execute(raise_on_error=True))

    async def _load_library(self) -> None:
        """``FUNCTION LOAD REPLACE`` the library (``load_library``) as ``REDIS_LOADER_URL``'s
        user, or the sink's own when unset. ``REDIS_LOADER_URL``'s user refused: permanent
        (a bad configuration). The sink's own refused: ``LibraryMissing``, an outage until the
        loader or an admin loads it (asked once: a refusal is an ACL LOG entry each time)."""
        loader_url = self.settings.redis_loader_url
        if not loader_url and self._refused:
            raise LibraryMissing(self._refused)
        loader = connect(self.settings, "stream-loader", loader_url) if loader_url else self.client
        try:
            await load_library(loader)
        except rx.NoPermissionError as error:
            if loader_url:
                raise PermanentRedisError(
                    f"Redis lacks the function library {LIBRARY_NAME} and REDIS_LOADER_URL's"
                    f" user may not load it ({error}): give that user +function|load"
                    " (helm/context-stream/files/redis-acl.conf, context-stream-loader)"
                ) from error
            self._refused = (
                f"{LIBRARY_NAME} missing, {error}; loaded by python -m stream.publish.loader"
                " (the chart's loader sidecar) or an admin: python -m stream.publish.redis_sink"
                " | redis-cli -x FUNCTION LOAD REPLACE"
            )
            raise LibraryMissing(self._refused) from error
        finally:
            if loader is not self.client:
                await loader.aclose()

    # -- re-seed markers and reads -----------------------------------------------------
    async def unmarked(self, topic: str, partitions: Sequence[int]) -> list[int]:
        """The partitions whose marker is gone from Redis: what their owner published is
        lost (Redis restarted empty, was flushed, failed over to an empty replica). One
        field per partition, so every owner notices its own, whoever checks first; in
        cluster mode one marker hash per slot group (``RedisLayout.marker_keys``), so a
        master that lost its data is noticed even though the others kept theirs."""
        if not partitions:
            return []
        fields = [partition_field(topic, p) for p in partitions]
        client = self.client
        keys = self.layout.marker_keys
        if len(keys) == 1:
            found = [await client.hmget(keys[0], fields)]
        else:
            pipe = client.pipeline(transaction=False)
            for key in keys:
                pipe.hmget(key, fields)
            found = await pipe.execute()
        return [p for i, p in enumerate(partitions) if any(f[i] is None for f in found)]

    async def mark(self, topic: str, partitions: Sequence[int], value: str) -> None:
        """Record that Redis holds these partitions' sessions (after a re-seed): ``value``
        says who (``output.redis.marker_value``)."""
        if not partitions:
            return
        mapping: dict[Any, Any] = {partition_field(topic, p): value for p in partitions}
        client = self.client
        keys = self.layout.marker_keys
        if len(keys) == 1:
            await client.hset(keys[0], mapping=mapping)
            return
        pipe = client.pipeline(transaction=False)
        for key in keys:
            pipe.hset(key, mapping=mapping)
        await pipe.execute()

    async def stored_version(self, session_id: str) -> list[str | None]:
        """The version Redis holds for a session (``output.redis.VERSION_FIELDS``), as
        text; ``None`` for a field it lacks."""
        key = self.layout.session_key(session_id)
        found = await self.client.hmget(key, list(VERSION_FIELDS))
        return [
            None if v is None else v.decode() if isinstance(v, bytes) else str(v) for v in found
        ]

    async def ping(self) -> bool:
        try:
            return bool(await self.client.ping())
        except Exception:
            return False

    async def close(self) -> None:
        await self.client.aclose()


__all__ = [  # the library's names, used from here before it had a module of its own
    "CALLBACKS",
    "DEAD_WRITE",
    "FUNCTIONS",
    "LIBRARY",
    "LIBRARY_NAME",
    "RETIRED_WRITE",
    "SESSIONS_WRITE",
    "SESSIONS_WRITE_SHARDED",
    "SESSION_DROP",
    "SESSION_DROP_SHARDED",
    "Client",
    "DeadCount",
    "LibraryMissing",
    "PermanentRedisError",
    "RedisSink",
    "RetiredCount",
    "connect",
    "expiry_message",
    "is_transient",
    "lacking_library",
    "library",
    "load_library",
    "outage_kind",
]


if __name__ == "__main__":
    # The library for an admin to load by hand: ... | redis-cli -x FUNCTION LOAD REPLACE
    print(LIBRARY, end="")
