"""Reads of what the worker published: a session's latest update, the recent sessions.

Key names come from ``RedisLayout`` only. ``Store`` is the narrow interface the HTTP
handlers use, so they can be unit-tested without a Redis server.
"""

from collections.abc import Sequence
from typing import Any, Protocol

import redis.asyncio as aioredis

from stream.config import Settings
from stream.output.layout import RedisLayout

# Listing with a prefix filter walks the recent set newest first, this many ids per
# round trip, and gives up after SCAN_LIMIT ids (a bounded cost per request).
PAGE = 256
SCAN_LIMIT = 10_000


def connection_options(settings: Settings) -> dict[str, Any]:
    """Redis AUTH/TLS keyword arguments for ``from_url`` (sync and asyncio clients)."""
    return settings.redis_options()


def connect(settings: Settings, max_connections: int = 32) -> "aioredis.Redis":
    # A blocking pool: a thousand clients connecting at once queue for a few connections
    # instead of opening a thousand.
    pool = aioredis.BlockingConnectionPool.from_url(
        settings.redis_url,
        max_connections=max_connections,
        timeout=10,
        socket_connect_timeout=5,
        socket_keepalive=True,
        health_check_interval=15,
        client_name="stream-gateway",  # tells operators (CLIENT LIST) whose connections these are
        **connection_options(settings),
    )
    return aioredis.Redis(connection_pool=pool)


def _bytes(value: object) -> bytes | None:
    # The client is made without decode_responses: values arrive as bytes (or None).
    return value if isinstance(value, bytes) else None


class Store(Protocol):
    async def latest(self, session_id: str) -> bytes | None:
        """The session's latest update JSON as stored, or ``None`` for an unknown session."""

    async def latest_many(self, session_ids: Sequence[str]) -> list[bytes | None]: ...

    async def recent(self, prefix: str, limit: int) -> list[tuple[str, int, bytes]]:
        """``(session id, updated epoch ms, update JSON)``, most recently updated first."""

    async def ping(self) -> bool: ...


class RedisStore:
    def __init__(self, client: "aioredis.Redis", layout: RedisLayout) -> None:
        self.client = client
        self.layout = layout

    async def latest(self, session_id: str) -> bytes | None:
        return _bytes(await self.client.hget(self.layout.session_key(session_id), "update"))

    async def latest_many(self, session_ids: Sequence[str]) -> list[bytes | None]:
        if not session_ids:
            return []
        pipe = self.client.pipeline(transaction=False)
        for session_id in session_ids:
            pipe.hget(self.layout.session_key(session_id), "update")
        return [_bytes(value) for value in await pipe.execute()]

    async def recent(self, prefix: str, limit: int) -> list[tuple[str, int, bytes]]:
        found: list[tuple[str, int, bytes]] = []
        start = 0
        while len(found) < limit and start < SCAN_LIMIT:
            # Without a filter one page of exactly what is asked for is enough.
            count = limit - len(found) if not prefix else PAGE
            page: list[Any] = await self.client.zrevrange(
                self.layout.recent_key, start, start + count - 1, withscores=True
            )
            start += count
            wanted = [
                (session_id, score)
                for session_id, score in ((raw.decode(errors="replace"), s) for raw, s in page)
                if session_id.startswith(prefix)
            ]
            # A session whose hash expired (REDIS_TTL_SECONDS) may linger in the set: skip it.
            values = await self.latest_many([i for i, _ in wanted])
            for (session_id, score), value in zip(wanted, values, strict=True):
                if value is not None and len(found) < limit:
                    found.append((session_id, int(score), value))
            if len(page) < count:
                break
        return found

    async def ping(self) -> bool:
        return bool(await self.client.ping())
