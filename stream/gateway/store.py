"""Reads of what the worker published: a session's latest update, the recent sessions.

Key names come from ``RedisLayout`` only. ``Store`` is the narrow interface the HTTP
handlers and the hub use, so they can be unit-tested without a Redis server (and a Redis
Cluster client can take ``RedisStore``'s place: every call names its keys).

What a call costs Redis, at most: ``latest`` one HGET; ``current`` one pipeline of HMGETs
(the hub batches the channel messages it has in hand); ``recent`` one ZREVRANGE of at
most ``scan`` entries and one pipeline of at most ``limit`` HGETs. In cluster mode
(``REDIS_CLUSTER``) a pipeline is one per master, sent concurrently, and ``recent`` reads
each shard's set (one pipeline of ``SHARDS`` ZREVRANGEs of at most ``scan`` entries) and
merges them.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

import redis.asyncio as aioredis

from stream.config import Settings
from stream.gateway.sse import Version, seq_of
from stream.output.layout import RedisLayout, newest
from stream.output.redis import HASH_FIELDS, UPDATE_FIELD
from stream.redis_client import async_client

SCAN = 1000  # recent-set entries one listing looks at (STREAM_GATEWAY_LIST_SCAN)


@dataclass(frozen=True, slots=True)
class Stored:
    """A session's hash: its update JSON and the version it was written at."""

    version: Version
    update: bytes


def _number(value: object) -> int | None:
    if isinstance(value, bytes) and value.isdigit():
        return int(value)
    return None


def stored(values: Sequence[object]) -> Stored | None:
    """``HMGET gen seq n v update`` as a ``Stored``; ``None`` when there is no update.
    A hash written without the version fields (by hand, an older writer) orders as
    generation 0 at the update's own seq."""
    gen, seq, n, v, update = values
    if not isinstance(update, bytes):
        return None
    number = _number(seq)
    if number is None:
        number = seq_of(update) or 0
    return Stored((_number(gen) or 0, number, _number(n) or 0, _number(v) or 0), update)


def connect(settings: Settings, max_connections: int = 32) -> "aioredis.Redis":
    """The gateway's client (``stream.redis_client``): at most ``max_connections`` per
    server, a caller past them waiting instead of opening more, and TCP keepalive on its
    long-lived subscription."""
    client = async_client(
        settings,
        client_name="stream-gateway",
        keepalive=True,
        max_connections=max_connections,
    )
    return cast("aioredis.Redis", client)  # a cluster's: the same commands, named by their keys


def _bytes(value: object) -> bytes | None:
    # The client is made without decode_responses: values arrive as bytes (or None).
    return value if isinstance(value, bytes) else None


class Store(Protocol):
    async def latest_taken(self, session_id: str) -> tuple[bytes | None, int | None]:
        """The session's latest update JSON as stored (``None``: an unknown session) and
        when Redis took it (epoch ms, its score in the recent set: what a listing calls
        ``updatedAt``; ``None`` once the set has dropped it), in one round trip."""

    async def latest_many(self, session_ids: Sequence[str]) -> list[bytes | None]: ...

    async def current(self, session_ids: Sequence[str]) -> list[Stored | None]:
        """Each session's update and version (``None``: unknown), in one round trip."""

    async def recent(
        self,
        prefix: str,
        limit: int,
        scan: int = SCAN,
        allows: Callable[[str], bool] | None = None,
    ) -> list[tuple[str, int, bytes]]:
        """``(session id, updated epoch ms, update JSON)``, most recently updated first, of
        sessions whose id starts with ``prefix`` (and that ``allows`` lets through), among
        the ``scan`` most recently updated ones."""

    async def ping(self) -> bool: ...


class RedisStore:
    def __init__(self, client: "aioredis.Redis", layout: RedisLayout) -> None:
        self.client = client
        self.layout = layout

    async def latest_taken(self, session_id: str) -> tuple[bytes | None, int | None]:
        key, _, _, recent_key = self.layout.session_keys(session_id)  # one slot in a cluster
        pipe = self.client.pipeline(transaction=False)
        pipe.hget(key, UPDATE_FIELD)
        pipe.zscore(recent_key, session_id)
        update, score = await pipe.execute()
        return _bytes(update), None if score is None else int(score)

    async def latest_many(self, session_ids: Sequence[str]) -> list[bytes | None]:
        if not session_ids:
            return []
        pipe = self.client.pipeline(transaction=False)
        for session_id in session_ids:
            pipe.hget(self.layout.session_key(session_id), UPDATE_FIELD)
        return [_bytes(value) for value in await pipe.execute()]

    async def current(self, session_ids: Sequence[str]) -> list[Stored | None]:
        if not session_ids:
            return []
        pipe = self.client.pipeline(transaction=False)
        for session_id in session_ids:
            pipe.hmget(self.layout.session_key(session_id), HASH_FIELDS)
        return [stored(values) for values in await pipe.execute()]

    async def recent(
        self,
        prefix: str,
        limit: int,
        scan: int = SCAN,
        allows: Callable[[str], bool] | None = None,
    ) -> list[tuple[str, int, bytes]]:
        if limit < 1:
            return []
        everything = not prefix and allows is None
        # Without a filter the first ``limit`` entries are the answer; with one, look at
        # the ``scan`` newest and no further (a bounded cost, documented).
        count = min(limit, scan) if everything else scan
        keys = self.layout.recent_keys
        if len(keys) == 1:
            page: list[Any] = await self.client.zrevrange(keys[0], 0, count - 1, withscores=True)
        else:
            pipe = self.client.pipeline(transaction=False)
            for key in keys:
                pipe.zrevrange(key, 0, count - 1, withscores=True)
            pages: list[Any] = await pipe.execute()
            page = newest(pages, count)
        wanted: list[tuple[str, int]] = []
        for raw, score in page:
            session_id = raw.decode(errors="replace")
            if everything or (
                session_id.startswith(prefix) and (allows is None or allows(session_id))
            ):
                wanted.append((session_id, int(score)))
                if len(wanted) == limit:
                    break
        if not wanted:
            return []
        values = await self.latest_many([session_id for session_id, _ in wanted])
        # A session whose hash expired (REDIS_TTL_SECONDS) may linger in the set: skip it.
        return [
            (session_id, score, value)
            for (session_id, score), value in zip(wanted, values, strict=True)
            if value is not None
        ]

    async def ping(self) -> bool:
        return bool(await self.client.ping())
