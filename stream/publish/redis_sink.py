"""Redis: the latest update per session, published on the session's channel.

Key (and channel) ``{REDIS_KEY_PREFIX}session:{sessionId}`` is a hash:
``update`` (the JSON update), ``gen`` (rebuild generation) and ``seq``. A Lua script
writes and publishes atomically, and only if ``(gen, seq)`` is not older than what is
stored: a slow or zombie worker cannot move a UI backwards. One pipeline per batch.
"""

from collections.abc import Iterable
from typing import Any

import redis.asyncio as aioredis

from stream.config import Settings

# KEYS[1]: session key (= channel). ARGV: gen, seq, update JSON, ttl seconds (0: none).
GUARDED_WRITE = """
local stored = redis.call('HMGET', KEYS[1], 'gen', 'seq')
if stored[1] then
  local gen, new_gen = tonumber(stored[1]), tonumber(ARGV[1])
  if new_gen < gen or (new_gen == gen and tonumber(ARGV[2]) < tonumber(stored[2])) then
    return 0
  end
end
redis.call('HSET', KEYS[1], 'gen', ARGV[1], 'seq', ARGV[2], 'update', ARGV[3])
if tonumber(ARGV[4]) > 0 then redis.call('EXPIRE', KEYS[1], ARGV[4]) end
redis.call('PUBLISH', KEYS[1], ARGV[3])
return 1
"""


def connect(settings: Settings) -> "aioredis.Redis":
    options: dict[str, Any] = {}
    if settings.redis_username:
        options["username"] = settings.redis_username
    if settings.redis_password:
        options["password"] = settings.redis_password
    if settings.redis_tls_cafile:
        options["ssl_ca_certs"] = settings.redis_tls_cafile
    return aioredis.Redis.from_url(settings.redis_url, **options)


class RedisSink:
    def __init__(self, settings: Settings, client: "aioredis.Redis | None" = None) -> None:
        self.settings = settings
        self.client = client or connect(settings)
        self.script = self.client.register_script(GUARDED_WRITE)

    async def publish(
        self, updates: Iterable[tuple[str, int, bytes]], counts: dict[str, int]
    ) -> int:
        """Write ``(session id, seq, update JSON)`` guarded; add ``counts`` to the stats.

        Returns how many writes the guard accepted.
        """
        settings = self.settings
        # MULTI/EXEC: a retried batch never half-counts (the guarded writes are idempotent).
        pipe = self.client.pipeline(transaction=True)
        written = 0
        for session_id, seq, payload in updates:
            await self.script(
                keys=[settings.session_key(session_id)],
                args=[settings.generation, seq, payload, settings.redis_ttl_seconds],
                client=pipe,
            )
            written += 1
        for name, value in counts.items():
            if value:
                pipe.hincrby(settings.redis_stats_key, name, value)
                pipe.hincrby(settings.redis_worker_stats_key, name, value)
        if not written and not any(counts.values()):
            return 0
        results = await pipe.execute()
        return sum(1 for r in results[:written] if r == 1)

    async def close(self) -> None:
        await self.client.aclose()
