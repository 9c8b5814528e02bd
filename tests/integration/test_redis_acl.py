"""The chart's Redis ACL rules (helm/context-stream/files/redis-acl.conf) on a real server.

A private redis-server gets the two users with exactly the file's rules, and the optional
loader its commented line. The worker's real write path (``RedisSink``: its function
library loaded by the loader and called, the partition markers) works as the worker user;
the gateway's real reads (``RedisStore``, the ``Hub``'s pattern subscription, ``stream
watch``'s channel subscription) work as the gateway user; and each is refused what it must
not do: the gateway every write, both anything outside the prefix, the worker any Lua of
its own (``EVAL``, ``SCRIPT LOAD``, ``FUNCTION LOAD``) and another database.
"""

import asyncio
import re
import secrets
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis

from stream.config import Settings
from stream.gateway.hub import Hub
from stream.gateway.sse import Frame
from stream.gateway.store import RedisStore, connect
from stream.output.record import SessionUpdate
from stream.publish.publisher import Publisher
from stream.publish.redis_sink import (
    FUNCTIONS,
    LIBRARY_NAME,
    DeadCount,
    PermanentRedisError,
    RedisSink,
)
from tests.integration.harness import RedisServer

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
ACL_FILE = REPO / "helm" / "context-stream" / "files" / "redis-acl.conf"
WORKER, GATEWAY, LOADER = "context-stream", "context-stream-gateway", "context-stream-loader"
PREFIX = "ctx:"  # the prefix the file is written for


def acl_rules() -> dict[str, list[str]]:
    """The file's ``user NAME RULES...`` lines, by user name."""
    users = {}
    for line in ACL_FILE.read_text().splitlines():
        if line.startswith("user "):
            _, name, *rules = line.split()
            users[name] = rules
    return users


def loader_rules() -> list[str]:
    """The optional loader's rules: the file's commented ``# user context-stream-loader``."""
    (line,) = [
        line for line in ACL_FILE.read_text().splitlines() if line.startswith(f"# user {LOADER} ")
    ]
    return line.split()[3:]


@dataclass(frozen=True)
class AclRedis:
    server: RedisServer
    passwords: dict[str, str] = field(repr=False)

    def url(self, user: str | None = None) -> str:
        """The server's URL, carrying ``user``'s credentials when given."""
        if user is None:
            return self.server.url
        return f"redis://{user}:{self.passwords[user]}@127.0.0.1:{self.server.port}/0"

    def client(self, user: str | None = None) -> "redis.Redis":
        return redis.Redis.from_url(self.url(user))

    def setuser(self, name: str, rules: list[str]) -> None:
        password = self.passwords.setdefault(name, secrets.token_hex(16))
        self.client().execute_command("ACL", "SETUSER", name, "reset", f">{password}", *rules)


@pytest.fixture(scope="module")
def acl_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AclRedis]:
    """A private redis-server (its default user stays the admin) with the file's users."""
    server = RedisServer(tmp_path_factory.mktemp("redis-acl"))
    server.start()
    try:
        created = AclRedis(server, {})
        for name, rules in acl_rules().items():
            created.setuser(name, rules)
        created.setuser(LOADER, loader_rules())
        yield created
    finally:
        server.stop()


def _worker_settings(acl: AclRedis, **changes: Any) -> Settings:
    # The credentials in REDIS_URL, one of the two ways the worker takes them.
    changes = {"redis_loader_url": acl.url(LOADER)} | changes
    return Settings(redis_url=acl.url(WORKER), redis_key_prefix=PREFIX, **changes)


def _gateway_settings(acl: AclRedis) -> Settings:
    # REDIS_USERNAME and REDIS_PASSWORD, as the chart passes them to the gateway.
    return Settings.from_env(
        {
            "REDIS_URL": acl.url(),
            "REDIS_USERNAME": GATEWAY,
            "REDIS_PASSWORD": acl.passwords[GATEWAY],
            "REDIS_KEY_PREFIX": PREFIX,
        }
    )


def _update(session: str, seq: int) -> SessionUpdate:
    payload = orjson.dumps({"sessionId": session, "seq": seq})
    return SessionUpdate(session, 1, seq, (seq, 0, 0), payload)


class _NoKafka:
    """The publisher's Kafka side, unused: only its Redis calls run here."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"no Kafka in this test ({name})")


def test_the_file_holds_both_users() -> None:
    users = acl_rules()
    assert set(users) == {WORKER, GATEWAY}
    for rules in users.values():
        assert rules[:4] == ["on", "resetkeys", "resetchannels", "-@all"], "deny by default"
        assert [r for r in rules if r[0] in "~&%"] == [f"~{PREFIX}*", f"&{PREFIX}session:*"]
    scripting = [r for r in users[WORKER] if re.search(r"eval|script|function|fcall|@", r)]
    assert scripting == ["-@all", "+fcall"], "the worker calls functions, nothing more"
    assert not [r for r in (*users[WORKER], *users[GATEWAY]) if "select" in r]
    loader = loader_rules()
    assert loader[:4] == ["on", "resetkeys", "resetchannels", "-@all"]
    assert not [r for r in loader if r[0] in "~&%"], "the loader touches no key or channel"


def test_the_worker_writes_as_its_user(acl_redis: AclRedis) -> None:
    admin = acl_redis.client()
    admin.function_flush()  # the sink must have its library loaded (by the loader user)
    settings = _worker_settings(acl_redis, redis_ttl_seconds=3600, input_topic="in")
    layout = settings.redis_layout

    async def go() -> None:
        sink = RedisSink(settings)
        publisher = Publisher(settings, _NoKafka(), sink)
        try:
            assert await sink.ping()
            dead = [DeadCount("in", 0, 1, 2)]
            assert await sink.write([_update("w1", 1), _update("w2", 1)], dead, now_ms=5) == [1, 1]
            assert await sink.write([_update("w1", 2), _update("w2", 1)], now_ms=6) == [1, 2]
            assert await publisher.unmarked([0, 1]) == [0, 1]
            await publisher.mark([0])
            assert await publisher.unmarked([0, 1]) == [1]
        finally:
            await sink.close()

    asyncio.run(go())
    assert [lib[1] for lib in admin.function_list()] == [LIBRARY_NAME.encode()]
    assert admin.hget(layout.session_key("w1"), "update") == _update("w1", 2).payload
    assert 0 < admin.ttl(layout.session_key("w1")) <= 3600
    assert admin.zrange(layout.recent_key, 0, -1) == [b"w2", b"w1"]
    stats = {k.decode(): int(v) for k, v in admin.hgetall(layout.stats_key).items()}
    assert stats == {"folded": 3, "dead_lettered": 2}


def test_every_command_in_the_worker_scripts_is_allowed(acl_redis: AclRedis) -> None:
    """Redis checks each ``redis.call`` against the script's caller: a command a script
    starts calling must be added to the worker's rules (this lists them all)."""
    called = set()
    for path in (REPO / "stream").rglob("*.py"):
        called |= {c.lower() for c in re.findall(r"redis\.call\('(\w+)'", path.read_text())}
    assert {"hset", "publish", "zadd"} <= called, "no scripts found in stream/"
    admin = acl_redis.client()
    for command in sorted(called):
        info = admin.execute_command("COMMAND", "INFO", command)[command]
        arity = abs(int(info["arity"]))  # the command's name counts; negative: at least
        args = [f"{PREFIX}session:s"] * (arity - 1)  # a key and a channel inside the prefix
        reply = admin.execute_command("ACL", "DRYRUN", WORKER, command, *args)
        assert reply == b"OK", f"{command}: {reply!r}"


def test_a_missing_script_command_stops_the_write(acl_redis: AclRedis) -> None:
    """The check above is not idle: without one of the functions' commands the sink's write
    fails permanently (the worker would stop), it does not silently skip the call."""
    rules = [r for r in acl_rules()[WORKER] if r != "+zremrangebyrank"]
    assert len(rules) == len(acl_rules()[WORKER]) - 1
    acl_redis.setuser("worker-without-zremrangebyrank", rules)
    url = acl_redis.url("worker-without-zremrangebyrank")

    async def go() -> None:
        loader = acl_redis.url(LOADER)
        sink = RedisSink(Settings(redis_url=url, redis_key_prefix=PREFIX, redis_loader_url=loader))
        try:
            with pytest.raises(PermanentRedisError, match=r"can.t run this command"):
                await sink.write([_update("m1", 1)], now_ms=1)
        finally:
            await sink.close()

    asyncio.run(go())


def test_without_a_loader_the_worker_stops_and_says_how_to_load(acl_redis: AclRedis) -> None:
    """The worker's own user may not load its library: with no REDIS_LOADER_URL and no
    library in Redis, the write fails permanently, naming both remedies; once an admin has
    loaded it (the way the message says), the worker writes as its own user."""
    admin = acl_redis.client()
    admin.function_flush()
    settings = _worker_settings(acl_redis, redis_loader_url="")

    async def write() -> list[int]:
        sink = RedisSink(settings)
        try:
            return await sink.write([_update("n1", 1)], now_ms=1)
        finally:
            await sink.close()

    with pytest.raises(PermanentRedisError) as refused:
        asyncio.run(write())
    message = str(refused.value)
    assert "the worker's Redis user may not load it" in message and "'function|load'" in message
    assert "REDIS_LOADER_URL" in message and "FUNCTION LOAD REPLACE" in message
    assert admin.function_list() == []
    library = subprocess.run(
        [sys.executable, "-m", "stream.publish.redis_sink"],
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout
    loaded = subprocess.run(
        ["redis-cli", "-p", str(acl_redis.server.port), "-x", "FUNCTION", "LOAD", "REPLACE"],
        input=library,
        capture_output=True,
        check=True,
        timeout=30,
    )
    assert loaded.stdout.decode().strip() == LIBRARY_NAME
    assert asyncio.run(write()) == [1]


def test_the_loader_only_loads(acl_redis: AclRedis) -> None:
    client = acl_redis.client(LOADER)
    for command in [
        ("FCALL", FUNCTIONS["dead_write"], "2", f"{PREFIX}dead", f"{PREFIX}stats", "f", "1", "1"),
        ("EVAL", "return 1", "0"),
        ("HGET", f"{PREFIX}session:x", "update"),
        ("FUNCTION", "DELETE", LIBRARY_NAME),
        ("SELECT", "1"),
    ]:
        with pytest.raises(redis.exceptions.NoPermissionError):
            client.execute_command(*command)


def test_the_gateway_reads_as_its_user(acl_redis: AclRedis) -> None:
    worker = _worker_settings(acl_redis)
    gateway = _gateway_settings(acl_redis)
    layout = gateway.redis_layout

    async def go() -> None:
        sink = RedisSink(worker)
        client = connect(gateway)
        store = RedisStore(client, layout)
        hub = Hub(client, layout, store)
        hub.start()
        try:
            assert await sink.write([_update("g1", 1), _update("g2", 3)], now_ms=7) == [1, 1]
            assert await store.ping()
            assert await store.latest("g1") == _update("g1", 1).payload
            assert await store.latest("unknown") is None
            recent = await store.recent("g", 10)
            assert [(i, v) for i, _, v in recent] == [
                ("g2", _update("g2", 3).payload),
                ("g1", _update("g1", 1).payload),
            ]
            assert await hub.wait_ready(10), "the pattern subscription was refused"
            watching = hub.subscribe("g1")
            assert await sink.write([_update("g1", 2)], now_ms=8) == [1]
            framed = await asyncio.wait_for(watching.queue.get(), 10)
            assert isinstance(framed, Frame) and framed.seq == 2
        finally:
            await hub.stop()
            await client.aclose()
            await sink.close()

    asyncio.run(go())

    # `stream watch`: one session's channel, its hash and the recent set.
    client = redis.Redis.from_url(gateway.redis_url, **gateway.redis_options())
    pubsub = client.pubsub()
    pubsub.subscribe(layout.session_key("g1"))
    confirmed = pubsub.get_message(timeout=5)
    assert confirmed is not None and confirmed["type"] == "subscribe"
    pubsub.close()
    assert client.hgetall(layout.session_key("g2"))[b"seq"] == b"3"
    assert client.zrevrange(layout.recent_key, 0, 0) == [b"g1"]


REFUSED: list[tuple[str, ...]] = [
    ("HSET", f"{PREFIX}session:g1", "update", "{}"),
    ("DEL", f"{PREFIX}session:g1"),
    ("EXPIRE", f"{PREFIX}session:g1", "1"),
    ("ZADD", f"{PREFIX}recent", "1", "x"),
    ("PUBLISH", f"{PREFIX}session:g1", "{}"),
    ("EVAL", "return 1", "0"),
    ("EVALSHA", "0" * 40, "0"),
    ("SCRIPT", "LOAD", "return 1"),
    ("FUNCTION", "LOAD", "#!lua name=x\nredis.register_function('x', function() end)"),
    ("FCALL", FUNCTIONS["dead_write"], "2", f"{PREFIX}dead", f"{PREFIX}stats", "f", "1", "1"),
    ("FCALL_RO", FUNCTIONS["dead_write"], "0"),
    ("SELECT", "1"),
    ("FLUSHALL",),
    ("FLUSHDB",),
    ("CONFIG", "GET", "*"),
    ("CONFIG", "SET", "maxmemory", "1"),
    ("KEYS", "*"),
    ("SCAN", "0"),
    ("RANDOMKEY",),
    ("INFO",),
    ("ACL", "LIST"),
    ("HGET", "other:session:g1", "update"),  # a read outside the prefix
    ("SUBSCRIBE", "other:session:g1"),
]


@pytest.mark.parametrize("command", REFUSED, ids=lambda c: " ".join(c[:2]))
def test_the_gateway_is_refused(acl_redis: AclRedis, command: tuple[str, ...]) -> None:
    client = acl_redis.client(GATEWAY)
    with pytest.raises(redis.exceptions.NoPermissionError):
        client.execute_command(*command)


@pytest.mark.parametrize(
    "command",
    [
        ("HSET", "other:session:w1", "update", "{}"),
        ("HGET", "other:session:w1", "update"),
        ("PUBLISH", "other:session:w1", "{}"),
        ("PUBLISH", f"{PREFIX}recent", "{}"),
        # Lua of its own: the finding's `while true do end`, every way in (BUSY for all)
        ("EVAL", "while true do end", "0"),
        ("EVAL_RO", "while true do end", "0"),
        ("EVALSHA", "0" * 40, "0"),
        ("SCRIPT", "LOAD", "while true do end"),
        ("SCRIPT", "KILL"),
        ("SCRIPT", "FLUSH"),
        (
            "FUNCTION",
            "LOAD",
            "#!lua name=spin\nredis.register_function('spin', function() while true do end end)",
        ),
        ("FUNCTION", "DELETE", LIBRARY_NAME),
        ("FUNCTION", "FLUSH"),
        ("FUNCTION", "KILL"),
        ("FCALL_RO", FUNCTIONS["dead_write"], "0"),
        ("SELECT", "1"),  # the prefix in another database
        ("FLUSHALL",),
        ("CONFIG", "SET", "maxmemory", "1"),
        ("KEYS", "*"),
        ("SCAN", "0"),
        ("INFO",),
        ("ACL", "LIST"),
    ],
    ids=lambda c: " ".join(c[:2]),
)
def test_the_worker_is_refused(acl_redis: AclRedis, command: tuple[str, ...]) -> None:
    client = acl_redis.client(WORKER)
    with pytest.raises(redis.exceptions.NoPermissionError):
        client.execute_command(*command)
    assert acl_redis.client().ping(), "nothing left running on the server"
