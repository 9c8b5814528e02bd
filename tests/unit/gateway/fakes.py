"""An in-memory ``Store`` and an unstarted ``Hub``: the gateway without a Redis server."""

from collections.abc import Sequence
from typing import Any

import orjson
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError

from stream.gateway.hub import Hub
from stream.output.layout import RedisLayout


def update(session_id: str, seq: int, **extra: Any) -> bytes:
    body = {
        "sessionId": session_id,
        "seq": seq,
        "contextPressure": {"contextWindow": 1000, "pressureTokens": seq, "projectedTokens": seq},
        "contextBreakdown": {"systemTokens": 1, "toolsTokens": 2, "messageTokens": seq},
        "tokenUsage": {"uncachedInputTokens": seq},
    }
    return orjson.dumps(body | extra)


class FakeStore:
    def __init__(self) -> None:
        self.values: dict[str, bytes] = {}
        self.updated: dict[str, int] = {}
        self.down = False

    def put(self, session_id: str, payload: bytes, updated_ms: int = 0) -> None:
        self.values[session_id] = payload
        self.updated[session_id] = updated_ms

    def _check(self) -> None:
        if self.down:
            raise RedisConnectionError("down")

    async def latest(self, session_id: str) -> bytes | None:
        self._check()
        return self.values.get(session_id)

    async def latest_many(self, session_ids: Sequence[str]) -> list[bytes | None]:
        self._check()
        return [self.values.get(i) for i in session_ids]

    async def recent(self, prefix: str, limit: int) -> list[tuple[str, int, bytes]]:
        self._check()
        ordered = sorted(self.updated.items(), key=lambda item: item[1], reverse=True)
        return [(i, ms, self.values[i]) for i, ms in ordered if i.startswith(prefix)][:limit]

    async def ping(self) -> bool:
        self._check()
        return True


def hub(store: FakeStore, queue_size: int = 8) -> Hub:
    """A hub whose subscription never starts: tests feed it with ``dispatch``."""
    created = Hub(aioredis.Redis(), RedisLayout("t:"), store, queue_size)
    created.ready.set()
    return created
