"""The Redis sink against a real redis-server: guarded writes, channel, totals, errors, and
the publisher through Redis out of memory (queued, retried, drained exactly)."""

import asyncio
import uuid
from collections.abc import Awaitable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis

from stream.config import Settings
from stream.ops.metrics import Metrics
from stream.output.record import SessionUpdate
from stream.publish.publisher import Publisher
from stream.publish.redis_sink import LIBRARY_NAME, DeadCount, PermanentRedisError, RedisSink
from stream.session.batch import DeadLetter
from tests.integration.harness import RedisServer, count_writes
from tests.waiting import until

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


def _libraries(client: "redis.Redis") -> list[str]:
    """The names of the function libraries Redis holds (RESP2: each a flat field list)."""
    return [
        dict(zip(lib[::2], lib[1::2], strict=True))[b"library_name"].decode()
        for lib in client.function_list()
    ]


def test_a_batch_is_one_fcall_and_a_lost_library_is_loaded_again(redis_url: str) -> None:
    settings = _settings(redis_url)
    client = _client(settings)

    def calls(command: str) -> int:
        found = client.info("commandstats").get(f"cmdstat_{command}")
        return int(found["calls"]) if found else 0

    async def go() -> None:
        sink = RedisSink(settings)
        try:
            client.function_flush()  # a Redis without the library: the sink loads it
            assert await sink.write([_update(1, "a")], now_ms=1) == [1]
            assert _libraries(client) == [LIBRARY_NAME]
            client.config_resetstat()
            assert await sink.write([_update(2, "b")], now_ms=2) == [1]
            # one call, nothing asked or loaded ahead of the batch
            assert (calls("fcall"), calls("function|list"), calls("function|load")) == (1, 0, 0)
            client.function_flush()  # a restart that came back empty
            assert await sink.write([_update(3, "c")], now_ms=3) == [1]
            assert (calls("fcall"), calls("function|load")) == (3, 1)  # refused, load, again
        finally:
            await sink.close()

    asyncio.run(go())
    assert _stored(settings)["marker"] == "c"


def test_a_library_this_user_may_not_load_stops_the_write(redis_url: str) -> None:
    """A worker whose users may not load the library it lacks stops and says what to do."""
    admin = redis.Redis.from_url(redis_url)
    admin.acl_setuser(
        "no-loader", enabled=True, passwords=["+pw"], commands=["+@all", "-function"], keys=["*"]
    )
    admin.function_flush()
    host = redis_url.split("//", 1)[1]
    settings = _settings(redis_url, redis_loader_url=f"redis://no-loader:pw@{host}")
    try:
        with pytest.raises(PermanentRedisError, match="REDIS_LOADER_URL's user may not load"):
            _write(settings, _update(1, "a"))
        assert _libraries(admin) == []
        assert _write(_settings(redis_url), _update(1, "a")) == [1]  # its own user may
    finally:
        admin.acl_deluser("no-loader")


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


# --- Redis out of memory: an outage the worker-side publisher queues through ------------------


class _NoKafka:
    """The publisher's Kafka side, unused here: only ``write_redis`` is exercised."""

    def write_row(self, key: bytes, row: bytes, partition: int) -> Awaitable[Any]:
        raise AssertionError("no Kafka in this test")

    store_row = send_row = write_row

    def send_update(
        self, key: bytes, payload: bytes, headers: list[tuple[str, bytes]]
    ) -> Awaitable[Any]:
        raise AssertionError("no Kafka in this test")

    def send_dead_letter(self, letter: DeadLetter) -> Awaitable[Any]:
        raise AssertionError("no Kafka in this test")


@pytest.fixture
def full_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A private redis-server (the shared one keeps its memory): ``noeviction``, as a
    cache holding only what the output topic holds should be configured."""
    server = RedisServer(tmp_path / "redis")
    server.start()
    try:
        redis.Redis.from_url(server.url).config_set("maxmemory-policy", "noeviction")
        yield server
    finally:
        server.stop()


def _fill(client: "redis.Redis") -> int:
    """Lower maxmemory to just above what is used and fill it: writes are refused (OOM).
    Then the limit is pinned under what is used: at the very edge, the buffers a refused
    command frees would let the next write through now and then."""
    used = int(client.info("memory")["used_memory"])
    client.config_set("maxmemory", used + 1024 * 1024)
    filler = b"f" * 512
    for i in range(100_000):
        try:
            client.set(f"filler:{i}", filler)
        except redis.exceptions.OutOfMemoryError:
            used = int(client.info("memory")["used_memory"])
            client.config_set("maxmemory", used - 256 * 1024)
            return i
    raise AssertionError("maxmemory never reached")


def test_redis_out_of_memory_queues_reports_retrying_and_drains_exactly(
    full_redis: RedisServer,
) -> None:
    settings = _settings(full_redis.url)
    layout = settings.redis_layout
    client = redis.Redis.from_url(full_redis.url)
    seen: list[BaseException] = []

    def update(session: str, seq: int, gen: int = 1) -> SessionUpdate:
        payload = orjson.dumps({"sessionId": session, "seq": seq, "gen": gen})
        return SessionUpdate(session, gen, seq, (seq + 1, 0, 0), payload)

    async def scenario() -> None:
        sink = RedisSink(settings)
        attempts = count_writes(sink)
        publisher = Publisher(settings, _NoKafka(), sink, on_permanent=seen.append)
        metrics = Metrics.create(settings)
        metrics.redis, metrics.recovered = publisher.state, True
        sessions = [f"s{i:03}" for i in range(100)]
        await publisher.write_redis([update(s, 0) for s in sessions], [])  # room: written
        other = RedisSink(replace(settings, generation=2))  # a newer generation, elsewhere
        assert await other.write([update("s099", 0, gen=2)], now_ms=1) == [1]
        await other.close()
        assert _fill(client) > 0

        with pytest.raises(redis.exceptions.OutOfMemoryError):  # transient, not permanent
            await sink.write([update("s000", 1)], now_ms=1)
        for seq in (1, 2, 3):  # three batches while Redis is full: queued, coalesced
            await publisher.write_redis([update(s, seq) for s in sessions], [])
        tried = len(attempts)
        await until(lambda: len(attempts) >= tried + 3, 30, "three retries by the writer")
        state = publisher.state
        assert seen == []  # no permanent error: the worker would have exited
        assert state.retrying and state.oom and state.reason == "oom"
        assert "maxmemory" in state.last_error
        assert state.pending == 100 and state.pending_bytes > 100 * len(update("s000", 3).payload)
        metrics.refresh_live()
        sample = metrics.registry.get_sample_value
        assert sample("stream_redis_oom") == 1 and sample("stream_redis_retrying") == 1
        assert sample("stream_redis_pending_bytes") == state.pending_bytes
        assert metrics.not_ready() == ["redis refuses writes (oom): updates queued"]  # 503
        assert client.hget(layout.session_key("s000"), "update") == update("s000", 0).payload

        client.config_set("maxmemory", 0)  # memory raised: writes resume
        assert await publisher.flush(15.0)
        assert not state.retrying and not state.oom and state.reason == ""
        assert state.pending == 0 and state.pending_bytes == 0
        assert seen == []
        assert state.rejected == 1  # s099: the newer generation's value stays
        metrics.refresh_live()
        assert sample("stream_redis_oom") == 0 and sample("stream_redis_rejected_writes_total") == 1
        await sink.close()

    asyncio.run(scenario())
    for i in range(99):
        stored = client.hgetall(layout.session_key(f"s{i:03}"))
        assert stored[b"update"] == orjson.dumps({"sessionId": f"s{i:03}", "seq": 3, "gen": 1})
        assert (stored[b"gen"], stored[b"seq"], stored[b"n"]) == (b"1", b"3", b"4")
    assert orjson.loads(client.hget(layout.session_key("s099"), "update") or b"")["gen"] == 2
    # totals: 99 sessions at 4 events and s099 at 1, each counted once
    assert _stats(settings) == {"folded": 99 * 4 + 1}


def test_an_expired_session_is_dropped_and_its_events_stay_in_the_totals(redis_url: str) -> None:
    from stream.publish.redis_sink import RetiredCount

    settings = _settings(redis_url)
    layout = settings.redis_layout
    client = _client(settings)
    assert _write(settings, _update(7, "old life", (3, 0, 1))) == [1]
    pubsub = client.pubsub()
    pubsub.subscribe(layout.session_key("s"))
    pubsub.get_message(timeout=5)
    # A drop of an older life than the one stored keeps it (a newer life wrote first).
    older = replace(_update(5, ""), payload=b"", replaces=(1, 5, 4, 0), gone=True)
    assert _write(settings, older) == [0]
    assert client.exists(layout.session_key("s"))
    gone = replace(older, replaces=(1, 7, 4, 0))
    retired = RetiredCount("events", 0, 1, (3, 0, 1), 1)

    async def drop() -> list[int]:
        sink = RedisSink(settings)
        try:
            return await sink.write([gone], [], 1, [retired])
        finally:
            await sink.close()

    assert asyncio.run(drop()) == [1]
    assert not client.exists(layout.session_key("s"))
    assert client.hget(layout.tallies_key, "s") is None
    assert client.zscore(layout.recent_key, "s") is None
    message = pubsub.get_message(ignore_subscribe_messages=True, timeout=5)
    assert message is not None and orjson.loads(message["data"]) == {
        "sessionId": "s",
        "expired": True,
    }
    assert _stats(settings) == {"folded": 3, "faulted": 1, "expired": 1}
    assert asyncio.run(drop()) == [1]  # again (a retry): nothing moves twice
    assert _stats(settings) == {"folded": 3, "faulted": 1, "expired": 1}
    # The next life starts at a lower seq and is taken: the old one was dropped first.
    new_life = replace(_update(0, "new life", (1, 0, 0)), replaces=(1, 7, 4, 0))
    assert _write(settings, new_life) == [1]
    assert _stored(settings)["marker"] == "new life"
    assert _stats(settings) == {"folded": 4, "faulted": 1, "expired": 1}
