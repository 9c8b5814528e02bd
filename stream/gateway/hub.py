"""In-process fan-out: ONE Redis pattern subscription per gateway, any number of clients.

The hub ``PSUBSCRIBE``s to every session channel, frames each update once, and puts it
on the bounded queue of every client watching that session. Putting never waits: a
client whose queue is full is dropped (its queue gets the end marker and its stream is
aborted), so one slow reader costs the others nothing.

On a Redis failure the hub reconnects with backoff; once subscribed again it re-reads
the latest value of every watched session and dispatches it, so clients catch up on
what was published while it was away (clients skip seqs they already have).
"""

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from typing import Final

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from stream.gateway.sse import Frame, frame
from stream.gateway.store import Store
from stream.output.layout import RedisLayout

log = logging.getLogger(__name__)

CLOSED: Final = None  # the end marker on a client's queue: dropped, or the gateway stops


class Subscription:
    """One client's view of one session: a bounded queue of frames."""

    __slots__ = ("dropped", "on_drop", "queue", "session_id")

    def __init__(self, session_id: str, size: int) -> None:
        self.session_id = session_id
        self.queue: asyncio.Queue[Frame | None] = asyncio.Queue(size)
        self.dropped = False
        # Called when the hub drops this client: the handler aborts its connection, which
        # a write blocked on a reader that never reads would otherwise wait on forever.
        self.on_drop: Callable[[], None] | None = None

    def close(self) -> None:
        """Empty the queue and leave only the end marker (never blocks)."""
        while not self.queue.empty():
            self.queue.get_nowait()
        self.queue.put_nowait(CLOSED)


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
        self.delivered = 0  # frames queued to clients
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

    @property
    def client_count(self) -> int:
        return sum(len(s) for s in self.clients.values())

    def dispatch(self, session_id: str, payload: bytes) -> None:
        """Queue one update for every client of its session; never waits."""
        watching = self.clients.get(session_id)
        if not watching:
            return
        framed = frame(payload)
        if framed is None:
            log.warning("gateway: ignoring a message without a seq on session %r", session_id)
            return
        for subscription in tuple(watching):
            try:
                subscription.queue.put_nowait(framed)
                self.delivered += 1
            except asyncio.QueueFull:
                self._drop(subscription)

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
        while True:
            pubsub = self.client.pubsub()
            try:
                await pubsub.psubscribe(self.layout.session_pattern)
                await self._confirmed(pubsub)
                self.ready.set()
                delay = 0.1
                log.info("gateway: subscribed to %s", self.layout.session_pattern)
                await self._resync(list(self.clients))
                await self._pump(pubsub)
            except (RedisError, OSError) as error:
                log.warning("gateway: Redis subscription lost (%s); retry in %.1f s", error, delay)
            except Exception:  # a bug must not leave the gateway silently deaf: log, go on
                log.exception("gateway: subscription loop failed; retrying in %.1f s", delay)
            finally:
                self.ready.clear()
                with contextlib.suppress(Exception):
                    await pubsub.aclose()  # type: ignore[no-untyped-call]
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

    async def _resync(self, session_ids: Iterable[str]) -> None:
        ids = list(session_ids)
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            for session_id, payload in zip(chunk, await self.store.latest_many(chunk), strict=True):
                if payload is not None:
                    self.dispatch(session_id, payload)

    async def _pump(self, pubsub: aioredis.client.PubSub) -> None:
        session_id_of = self.layout.session_id_of
        while True:
            message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
            if message is None or message["type"] != "pmessage":
                continue
            channel = message["channel"]
            name = channel.decode(errors="replace") if isinstance(channel, bytes) else channel
            session_id = session_id_of(name)
            if session_id is not None:
                self.dispatch(session_id, message["data"])
