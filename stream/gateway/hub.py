"""In-process fan-out: ONE Redis pattern subscription per gateway, any number of clients.

The hub ``PSUBSCRIBE``s to every session channel. A channel message carries only the
update JSON, not its generation, so for a session somebody watches the hub reads the
session's hash (``gen seq n v update``: one pipeline of HMGETs for the messages it has in
hand, never one per client), frames each message once with its version, and puts it on
the bounded queue of every client watching that session.

Redis publishes a session's updates only forward, in version order. A message the hash
still holds gets the hash's exact version. One the hash has already moved past (updates
faster than the hub's round trip) is still relayed, in order, when its place is certain:
the hash is in the generation the hub last knew and its seq lies between the last one
known and the hash's; its id then reads ``gen-seq-0-0`` (an id never equal to a stored
version, so resuming from it resends the current value). Otherwise (a rebuild in
between) it is skipped: the newer value follows on the channel.

An expiry message (``output.redis.expiry_message``: the worker expired the session and
deleted its hash) ends that session's streams with ``event: expired``.

Putting never waits: a client whose queue is full is dropped (its queue gets the end
marker and its stream is aborted), so one slow reader costs the others nothing.

In cluster mode (``REDIS_CLUSTER``) sharded channels have no patterns: the hub
``SSUBSCRIBE``s to the ``SHARDS`` feed channels instead (``RedisLayout.feed_channels``,
one per shard, on its slot's master), which carry every update and expiry of their
shard's sessions with the session id inside; the rest is the same.

On a Redis failure the hub reconnects with backoff (in cluster mode after reading the
cluster's slots again, so a failover's new masters are the ones subscribed to); once
subscribed again it re-reads the latest value of every watched session and dispatches it,
so clients catch up on what was published while it was away (clients skip versions they
already have).
"""

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from typing import Any, Final

import redis.asyncio as aioredis
from redis.exceptions import RedisClusterException, RedisError

from stream.gateway.sse import Ending, Frame, Version, frame, seq_of
from stream.gateway.store import Store, Stored
from stream.output.layout import SHARDS, RedisLayout
from stream.output.redis import expiry_of, session_id_in

log = logging.getLogger(__name__)

CLOSED: Final = None  # the end marker on a client's queue: dropped, or the gateway stops
BATCH: Final = 512  # channel messages taken in hand per round trip to the hashes

Item = Frame | Ending | None


class Subscription:
    """One client's view of one session: a bounded queue of frames."""

    __slots__ = ("dropped", "on_drop", "queue", "session_id")

    def __init__(self, session_id: str, size: int) -> None:
        self.session_id = session_id
        self.queue: asyncio.Queue[Item] = asyncio.Queue(size)
        self.dropped = False
        # Called when the hub drops this client: the handler aborts its connection, which
        # a write blocked on a reader that never reads would otherwise wait on forever.
        self.on_drop: Callable[[], None] | None = None

    def close(self, last: Item = CLOSED) -> None:
        """Empty the queue and leave only ``last`` (never blocks)."""
        while not self.queue.empty():
            self.queue.get_nowait()
        self.queue.put_nowait(last)


class Hub:
    def __init__(
        self,
        client: "aioredis.Redis",
        layout: RedisLayout,
        store: Store,
        queue_size: int = 256,
        retry_max: float = 5.0,
    ) -> None:
        self.client = client
        self.layout = layout
        self.store = store
        self.queue_size = queue_size
        self.retry_max = retry_max
        self.ready = asyncio.Event()  # set while the pattern subscription is confirmed live
        self.clients: dict[str, set[Subscription]] = {}
        # Per watched session the newest version known: dispatched, or read by a handler.
        self.known: dict[str, Version] = {}
        self.delivered = 0  # frames queued to clients
        self.reads = 0  # round trips to the hashes (each one pipeline of HMGETs)
        self.expired = 0  # sessions whose streams an expiry message ended
        self.dropped = 0  # clients dropped for being slow
        self.reconnects = 0
        self._task: asyncio.Task[None] | None = None

    # -- clients -----------------------------------------------------------------------
    def subscribe(self, session_id: str) -> Subscription:
        subscription = Subscription(session_id, self.queue_size)
        self.clients.setdefault(session_id, set()).add(subscription)
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        watching = self.clients.get(subscription.session_id)
        if watching is not None:
            watching.discard(subscription)
            if not watching:
                del self.clients[subscription.session_id]
                self.known.pop(subscription.session_id, None)

    @property
    def client_count(self) -> int:
        return sum(len(s) for s in self.clients.values())

    def observe(self, session_id: str, version: Version) -> None:
        """A version of a watched session read elsewhere (a new stream's first read)."""
        if session_id in self.clients:
            self.known[session_id] = max(version, self.known.get(session_id, version))

    def dispatch(self, session_id: str, value: Stored) -> None:
        """Queue an update for every client watching its session; never waits. Clients
        skip versions they already have (a resync may repeat one)."""
        watching = self.clients.get(session_id)
        if not watching:
            return
        self.known[session_id] = max(value.version, self.known.get(session_id, value.version))
        framed = frame(value.version, value.update)
        for subscription in tuple(watching):
            try:
                subscription.queue.put_nowait(framed)
                self.delivered += 1
            except asyncio.QueueFull:
                self._drop(subscription)

    def expire(self, session_id: str, payload: bytes) -> None:
        """End every stream of an expired session with ``event: expired``."""
        watching = self.clients.pop(session_id, None)
        self.known.pop(session_id, None)
        if not watching:
            return
        self.expired += 1
        for subscription in watching:
            subscription.close(Ending(payload))

    def _drop(self, subscription: Subscription) -> None:
        self.unsubscribe(subscription)
        subscription.dropped = True
        subscription.close()
        self.dropped += 1
        if subscription.on_drop is not None:
            subscription.on_drop()

    def close_all(self) -> None:
        """End every client's stream (shutdown)."""
        for watching in list(self.clients.values()):
            for subscription in tuple(watching):
                self.unsubscribe(subscription)
                subscription.close()

    # -- the subscription --------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="gateway-hub")

    async def stop(self) -> None:
        self.close_all()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def wait_ready(self, timeout: float) -> bool:
        try:
            async with asyncio.timeout(timeout):
                await self.ready.wait()
        except TimeoutError:
            return False
        return True

    async def _run(self) -> None:
        delay = 0.1
        cluster = self.layout.cluster
        while True:
            pubsub: Any = self.client.pubsub()
            try:
                if cluster:
                    await self._sharded(pubsub)
                else:
                    await pubsub.psubscribe(self.layout.session_pattern)
                    await self._confirmed(pubsub)
                self.ready.set()
                delay = 0.1
                if cluster:
                    log.info("gateway: subscribed to the %d shard feeds", SHARDS)
                else:
                    log.info("gateway: subscribed to %s", self.layout.session_pattern)
                await self._resync(list(self.clients))
                await self._pump(pubsub)
            except (RedisError, RedisClusterException, OSError) as error:
                log.warning("gateway: Redis subscription lost (%s); retry in %.1f s", error, delay)
            except Exception:  # a bug must not leave the gateway silently deaf: log, go on
                log.exception("gateway: subscription loop failed; retrying in %.1f s", delay)
            finally:
                self.ready.clear()
                with contextlib.suppress(Exception):
                    await pubsub.aclose()
            self.reconnects += 1
            await asyncio.sleep(delay)
            delay = min(delay * 2, self.retry_max)

    async def _confirmed(self, pubsub: aioredis.client.PubSub) -> None:
        # Clients read the current value after subscribing; that only closes the gap if
        # Redis has registered the pattern first, so wait for its confirmation.
        while True:
            message = await pubsub.get_message(timeout=5.0)
            if message is None:
                raise RedisError("no PSUBSCRIBE confirmation within 5 s")
            if message["type"] == "psubscribe":
                return

    async def _sharded(self, pubsub: Any) -> None:
        """Cluster mode: ``SSUBSCRIBE`` every shard's feed, confirmed (see ``_confirmed``)."""
        cluster: Any = self.client
        if self.reconnects:  # a master may have failed over: read the slots again
            await cluster.nodes_manager.initialize()
        else:
            await cluster.initialize()  # the slot map, before channels are routed by it
        feeds = self.layout.feed_channels
        await pubsub.ssubscribe(*feeds)
        waiting = set(feeds)
        async with asyncio.timeout(5.0):
            while waiting:
                message = await pubsub.get_sharded_message(timeout=0.5)
                if message is not None and message["type"] == "ssubscribe":
                    channel = message["channel"]
                    waiting.discard(channel.decode() if isinstance(channel, bytes) else channel)

    async def _resync(self, session_ids: Iterable[str]) -> None:
        ids = list(session_ids)
        for start in range(0, len(ids), BATCH):
            chunk = ids[start : start + BATCH]
            self.reads += 1
            for session_id, current in zip(chunk, await self.store.current(chunk), strict=True):
                if current is not None:
                    self.dispatch(session_id, current)

    def version_of(self, session_id: str, payload: bytes, current: Stored) -> Version | None:
        """The version of a channel message, given the hash read after it arrived."""
        if payload == current.update:
            return current.version
        known = self.known.get(session_id)
        seq = seq_of(payload)
        if known is None or seq is None or known[0] != current.version[0]:
            return None  # no anchor, not an update, or a new generation in between
        derived = (current.version[0], seq, 0, 0)
        return derived if known < derived < current.version else None

    async def handle(self, messages: list[tuple[str, bytes]]) -> None:
        """Channel messages in arrival order: expiries at once, updates framed with their
        versions after one read of their sessions' hashes (a gone hash: nothing; its
        expiry follows)."""
        watched = [(i, data) for i, data in messages if i in self.clients]
        if not watched:
            return
        updated = list(dict.fromkeys(i for i, data in watched if not expiry_of(data)))
        current: dict[str, Stored | None] = {}
        if updated:
            self.reads += 1
            current = dict(zip(updated, await self.store.current(updated), strict=True))
        for session_id, data in watched:
            if session_id not in self.clients:
                continue
            if expiry_of(data):
                self.expire(session_id, data)
                continue
            value = current.get(session_id)
            if value is None:
                continue  # the hash is gone (expired, deleted): nothing to relay
            version = self.version_of(session_id, data, value)
            if version is not None:
                self.dispatch(session_id, Stored(version, data))

    async def _pump(self, pubsub: Any) -> None:
        session_id_of = self.layout.session_id_of
        get = pubsub.get_sharded_message if self.layout.cluster else pubsub.get_message
        while True:
            message = await get(ignore_subscribe_messages=True, timeout=1.0)
            batch: list[tuple[str, bytes]] = []
            while message is not None:  # take what has arrived, up to BATCH, without waiting
                taken = _taken(message, session_id_of)
                if taken is not None:
                    batch.append(taken)
                if len(batch) >= BATCH:
                    break
                message = await get(ignore_subscribe_messages=True, timeout=0)
            if batch:
                await self.handle(batch)


def _taken(
    message: dict[str, Any], session_id_of: Callable[[str], str | None]
) -> tuple[str, bytes] | None:
    kind = message["type"]
    if kind not in ("pmessage", "smessage"):
        return None
    data = message["data"]
    if not isinstance(data, bytes):
        return None
    channel = message["channel"]
    name = channel.decode(errors="replace") if isinstance(channel, bytes) else channel
    session_id = session_id_of(name)
    if session_id is None and kind == "smessage":
        session_id = session_id_in(data)  # a shard's feed: the id is in the message
    if session_id is None:
        return None
    return session_id, data
