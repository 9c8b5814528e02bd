"""The Redis sink against a real redis-server: guarded writes, channel, TTL, stats."""

import asyncio
import uuid
from dataclasses import replace

import orjson
import pytest
import redis

from stream.config import Settings
from stream.publish.redis_sink import RedisSink

pytestmark = pytest.mark.integration


def _settings(redis_url: str, **changes: object) -> Settings:
    base = Settings(redis_url=redis_url, redis_key_prefix=f"t{uuid.uuid4().hex[:6]}:")
    return replace(base, **changes)  # type: ignore[arg-type]


def _write(settings: Settings, seq: int, marker: str) -> int:
    async def go() -> int:
        sink = RedisSink(settings)
        try:
            payload = orjson.dumps({"sessionId": "s", "seq": seq, "marker": marker})
            return await sink.publish([("s", seq, payload)], {"folded": 1})
        finally:
            await sink.close()

    return asyncio.run(go())


def _stored(settings: Settings) -> dict[str, object]:
    raw = redis.Redis.from_url(settings.redis_url).hget(settings.session_key("s"), "update")
    assert raw is not None
    return orjson.loads(raw)  # type: ignore[no-any-return]


def test_a_write_never_replaces_a_newer_one(redis_url: str) -> None:
    settings = _settings(redis_url, generation=1)
    assert _write(settings, 10, "first") == 1
    assert _write(settings, 9, "stale worker") == 0  # older seq: refused
    assert _stored(settings)["marker"] == "first"
    assert _write(settings, 10, "replay") == 1  # same (gen, seq): same fold, accepted
    assert _write(replace(settings, generation=0), 50, "zombie of an old generation") == 0
    assert _write(replace(settings, generation=2), 3, "rebuild") == 1  # newer generation wins
    assert _stored(settings)["marker"] == "rebuild"


def test_updates_are_published_on_the_sessions_channel(redis_url: str) -> None:
    settings = _settings(redis_url)
    client = redis.Redis.from_url(redis_url)
    pubsub = client.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(settings.session_key("s"))
    pubsub.get_message(timeout=1)
    _write(settings, 1, "hello")
    message = None
    for _ in range(20):
        message = pubsub.get_message(timeout=0.25)
        if message:
            break
    assert message is not None and orjson.loads(message["data"])["marker"] == "hello"


def test_ttl_and_stats(redis_url: str) -> None:
    settings = _settings(redis_url, redis_ttl_seconds=60, worker_id="w9")
    _write(settings, 1, "x")
    _write(settings, 2, "y")
    client = redis.Redis.from_url(redis_url)
    assert 0 < client.ttl(settings.session_key("s")) <= 60
    assert client.hget(settings.redis_stats_key, "folded") == b"2"
    assert client.hget(settings.redis_worker_stats_key, "folded") == b"2"
