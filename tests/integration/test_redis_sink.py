"""The Redis sink against a real redis-server: guarded writes, channel, totals, errors."""

import asyncio
import uuid
from dataclasses import replace
from typing import Any

import orjson
import pytest
import redis

from stream.config import Settings
from stream.publish.redis_sink import DeadCount, PermanentRedisError, RedisSink, SessionUpdate

pytestmark = pytest.mark.integration


def _settings(redis_url: str, **changes: object) -> Settings:
    base = Settings(redis_url=redis_url, redis_key_prefix=f"t{uuid.uuid4().hex[:6]}:")
    return replace(base, **changes)  # type: ignore[arg-type]


def _update(seq: int, marker: str, tally: tuple[int, int, int] = (1, 0, 0), gen: int = 1) -> Any:
    payload = orjson.dumps({"sessionId": "s", "seq": seq, "marker": marker})
    return SessionUpdate("s", gen, seq, tally, payload)


def _write(
    settings: Settings, *updates: SessionUpdate, dead: tuple[DeadCount, ...] = ()
) -> list[int]:
    async def go() -> list[int]:
        sink = RedisSink(settings)
        try:
            return await sink.write(list(updates), list(dead), now_ms=1)
        finally:
            await sink.close()

    return asyncio.run(go())


def _client(settings: Settings) -> "redis.Redis":
    return redis.Redis.from_url(settings.redis_url)


def _stored(settings: Settings) -> dict[str, object]:
    raw = _client(settings).hget(settings.redis_layout.session_key("s"), "update")
    assert raw is not None
    return orjson.loads(raw)  # type: ignore[no-any-return]


def _stats(settings: Settings) -> dict[str, int]:
    raw = _client(settings).hgetall(settings.redis_layout.stats_key)
    return {k.decode(): int(v) for k, v in raw.items()}


def test_a_write_never_replaces_a_newer_one(redis_url: str) -> None:
    settings = _settings(redis_url)
    assert _write(settings, _update(5, "five")) == [1]
    assert _write(settings, _update(3, "three")) == [0]
    assert _stored(settings)["marker"] == "five"
    assert _write(settings, _update(5, "again")) == [2]  # identical version: a no-op
    assert _stored(settings)["marker"] == "five"
    assert _write(settings, _update(5, "more", (1, 1, 0))) == [1]  # more accounted: newer
    newer_gen = replace(settings, generation=2)
    assert _write(newer_gen, _update(1, "rebuilt", gen=2)) == [1]
    assert _stored(settings)["marker"] == "rebuilt"
    assert _write(settings, _update(9, "zombie")) == [0]  # an older generation never wins


def test_totals_are_the_sum_of_the_latest_tallies(redis_url: str) -> None:
    settings = _settings(redis_url)
    _write(settings, _update(1, "a", (2, 0, 0)))
    _write(settings, _update(1, "a", (2, 0, 0)))  # redelivered: nothing counted twice
    _write(settings, _update(3, "b", (3, 1, 1)))
    dead = DeadCount("in", 0, 1, 2)
    _write(settings, dead=(dead, dead))
    _write(settings, dead=(DeadCount("in", 0, 1, 1),))  # older count: ignored
    assert _stats(settings) == {"folded": 3, "duplicate": 1, "faulted": 1, "dead_lettered": 2}
    _write(settings, _update(0, "rebuilt", (1, 0, 0), gen=2))  # a rebuild restarts the count
    assert _stats(settings)["folded"] == 1


def test_an_update_is_published_on_the_session_channel(redis_url: str) -> None:
    settings = _settings(redis_url)
    pubsub = _client(settings).pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
    pubsub.subscribe(settings.redis_layout.session_key("s"))
    _write(settings, _update(1, "one"))
    _write(settings, _update(1, "one"))  # a no-op publishes nothing
    messages = []
    for _ in range(20):
        message = pubsub.get_message(timeout=0.1)
        if message:
            messages.append(orjson.loads(message["data"]))
    assert [m["marker"] for m in messages] == ["one"]


def test_ttl_and_recent_index(redis_url: str) -> None:
    settings = _settings(redis_url, redis_ttl_seconds=60)
    _write(settings, _update(1, "x"))
    client = _client(settings)
    assert 0 < client.ttl(settings.redis_layout.session_key("s")) <= 60
    assert client.zrange(settings.redis_layout.recent_key, 0, -1) == [b"s"]


def test_a_foreign_key_is_a_permanent_error(redis_url: str) -> None:
    settings = _settings(redis_url)
    _client(settings).set(settings.redis_layout.session_key("s"), "not a hash")
    with pytest.raises(PermanentRedisError, match="WRONGTYPE"):
        _write(settings, _update(1, "x"))


def test_a_rebuilt_view_of_the_same_seq_wins_and_an_older_build_does_not(redis_url: str) -> None:
    settings = _settings(redis_url)
    body = orjson.dumps({"sessionId": "s", "seq": 4, "marker": "v8"})
    assert _write(settings, SessionUpdate("s", 1, 4, (5, 0, 0), body, 8)) == [1]
    rebuilt = orjson.dumps({"sessionId": "s", "seq": 4, "marker": "v9"})
    assert _write(settings, SessionUpdate("s", 1, 4, (5, 0, 0), rebuilt, 9)) == [1]
    assert _write(settings, SessionUpdate("s", 1, 4, (5, 0, 0), body, 8)) == [0]  # a zombie
    assert _stored(settings)["marker"] == "v9"
