"""An in-memory ``Store`` and an unstarted ``Hub``: the gateway without a Redis server."""

from collections.abc import Callable, Sequence
from typing import Any

import orjson
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError

from stream.gateway.hub import Hub
from stream.gateway.sse import Version
from stream.gateway.store import Stored
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


def stored(session_id: str, seq: int, gen: int = 0, n: int | None = None, **extra: Any) -> Stored:
    return Stored((gen, seq, seq if n is None else n, 0), update(session_id, seq, **extra))


class FakeStore:
    def __init__(self) -> None:
        self.values: dict[str, bytes] = {}
        self.versions: dict[str, Version] = {}
        self.updated: dict[str, int] = {}
        self.down = False
        self.reads: list[list[str]] = []  # the session ids of each current() call
        self.latest_reads: list[str] = []  # the session ids latest_taken() was asked for
        self.listings = 0  # recent() calls

    def put(
        self, session_id: str, payload: bytes, updated_ms: int = 0, version: Version | None = None
    ) -> None:
        self.values[session_id] = payload
        self.updated[session_id] = updated_ms
        seq = orjson.loads(payload).get("seq", 0)
        self.versions[session_id] = version or (0, seq, seq, 0)

    def put_stored(self, session_id: str, value: Stored, updated_ms: int = 0) -> None:
        self.put(session_id, value.update, updated_ms, value.version)

    def delete(self, session_id: str) -> None:
        for table in (self.values, self.versions, self.updated):
            table.pop(session_id, None)

    def _check(self) -> None:
        if self.down:
            raise RedisConnectionError("down")

    async def latest_taken(self, session_id: str) -> tuple[bytes | None, int | None]:
        self._check()
        self.latest_reads.append(session_id)
        return self.values.get(session_id), self.updated.get(session_id) or None

    async def latest_many(self, session_ids: Sequence[str]) -> list[bytes | None]:
        self._check()
        return [self.values.get(i) for i in session_ids]

    async def current(self, session_ids: Sequence[str]) -> list[Stored | None]:
        self._check()
        self.reads.append(list(session_ids))
        return [
            Stored(self.versions[i], self.values[i]) if i in self.values else None
            for i in session_ids
        ]

    async def recent(
        self,
        prefix: str,
        limit: int,
        scan: int = 1000,
        allows: Callable[[str], bool] | None = None,
    ) -> list[tuple[str, int, bytes]]:
        self._check()
        self.listings += 1
        ordered = sorted(self.updated.items(), key=lambda item: item[1], reverse=True)[:scan]
        found = [
            (i, ms, self.values[i])
            for i, ms in ordered
            if i.startswith(prefix) and (allows is None or allows(i))
        ]
        return found[:limit]

    async def ping(self) -> bool:
        self._check()
        return True


def hub(store: FakeStore, queue_size: int = 8) -> Hub:
    """A hub whose subscription never starts: tests feed it with ``dispatch``."""
    created = Hub(aioredis.Redis(), RedisLayout("t:"), store, queue_size)
    created.ready.set()
    return created
