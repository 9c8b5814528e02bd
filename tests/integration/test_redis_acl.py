"""The chart's Redis ACL rules (helm/context-stream/files/redis-acl.conf) on a real server.

A private redis-server gets the three users with exactly the file's rules. The worker's
real write path (``RedisSink``: its function library loaded by the loader and called, the
partition markers) works as the worker user; the gateway's real reads (``RedisStore``, the
``Hub``'s pattern subscription, ``stream watch``'s channel subscription) work as the
gateway user; the loader (``python -m stream.publish.loader``, a real process) reloads the
library after ``FUNCTION FLUSH`` while the worker's writes wait as an outage; and each is
refused what it must not do: the gateway every write, both anything outside the prefix,
the worker any Lua of its own (``EVAL``, ``SCRIPT LOAD``, ``FUNCTION LOAD``) and another
database, the loader everything but loading.
"""

import asyncio
import logging
import os
import re
import secrets
import signal
import subprocess
import sys
import time
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
from stream.redis_client import sync_client
from tests.integration.harness import RedisServer, count_writes
from tests.waiting import until, wait_until

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


def test_the_file_holds_the_three_users() -> None:
    users = acl_rules()
    assert set(users) == {WORKER, GATEWAY, LOADER}
    for rules in users.values():
        assert rules[:4] == ["on", "resetkeys", "resetchannels", "-@all"], "deny by default"
    for rules in (users[WORKER], users[GATEWAY]):
        assert [r for r in rules if r[0] in "~&%"] == [f"~{PREFIX}*", f"&{PREFIX}session:*"]
    scripting = [r for r in users[WORKER] if re.search(r"eval|script|function|fcall|@", r)]
    assert scripting == ["-@all", "+fcall"], "the worker calls functions, nothing more"
    assert not [r for r in (*users[WORKER], *users[GATEWAY]) if "select" in r]
    loader = users[LOADER]
    assert not [r for r in loader if r[0] in "~&%"], "the loader touches no key or channel"
    assert [r for r in loader if re.search(r"eval|script|function|fcall|@", r)] == [
        "-@all",
        "+function|load",
        "+function|list",
    ]


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


def _loader_env(acl: AclRedis, user: str, **extra: str) -> dict[str, str]:
    """The loader's environment as the chart's sidecar gets it: REDIS_URL without
    credentials, REDIS_USERNAME and REDIS_PASSWORD of the loader's user."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REDIS_", "STREAM_"))}
    env |= {"REDIS_URL": acl.url(), "REDIS_USERNAME": user, "REDIS_KEY_PREFIX": PREFIX}
    env |= {"REDIS_PASSWORD": acl.passwords.get(user, "wrong"), "STREAM_LOADER_INTERVAL": "0.2"}
    return env | extra


def _loader(acl: AclRedis, user: str = LOADER, **extra: str) -> "subprocess.Popen[str]":
    return subprocess.Popen(
        [sys.executable, "-m", "stream.publish.loader"],
        env=_loader_env(acl, user, **extra),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=REPO,
    )


def _libraries(admin: "redis.Redis") -> list[bytes]:
    return [entry[1] for entry in admin.function_list()]


def test_redis_without_the_library_is_an_outage_until_the_loader_reloads_it(
    acl_redis: AclRedis, caplog: pytest.LogCaptureFixture
) -> None:
    """Redis came back empty and the worker's user may not load its library: the worker's
    write path queues and retries (an outage: not ready, one warning naming the loader,
    never a permanent error), the loader (a real process, as its own user) loads the library
    within its interval, and the queued updates are written; a second flush heals alike."""
    admin = acl_redis.client()
    admin.function_flush()
    settings = _worker_settings(acl_redis, redis_loader_url="")
    layout = settings.redis_layout
    permanent: list[BaseException] = []
    caplog.set_level(logging.INFO, "stream.publish")

    async def go() -> str:
        sink = RedisSink(settings)
        attempts = count_writes(sink)
        publisher = Publisher(settings, _NoKafka(), sink, on_permanent=permanent.append)
        loader = None
        try:
            assert (
                await publisher.write_redis([_update("o1", 1)], [DeadCount("loader-in", 0, 1, 1)])
                is False
            )
            assert publisher.state.retrying and publisher.state.reason == "library"
            tried = len(attempts)
            await until(lambda: len(attempts) >= tried + 3, 30, "three retries by the writer")
            assert await publisher.write_redis([_update("o1", 2), _update("o2", 1)], []) is False
            assert publisher.state.pending == 2 and _libraries(admin) == []
            loader = _loader(acl_redis)
            assert await publisher.flush(30), "the queue was not written after the reload"
            assert not publisher.state.retrying and publisher.state.reason == ""
            assert _libraries(admin) == [LIBRARY_NAME.encode()]
            # Redis empties again: the same outage, healed by the same loader (held still
            # meanwhile, so that it cannot reload before the worker has noticed).
            loader.send_signal(signal.SIGSTOP)
            admin.function_flush()
            assert await publisher.write_redis([_update("o2", 2)], []) is False
            assert publisher.state.reason == "library"
            loader.send_signal(signal.SIGCONT)
            assert await publisher.flush(30)
            assert await sink.write([_update("o3", 1)], now_ms=9) == [1]
        finally:
            await sink.close()
            if loader is not None:
                loader.send_signal(signal.SIGTERM)
        assert loader.wait(30) == 0, "the loader stops cleanly on SIGTERM"
        assert loader.stdout is not None
        return loader.stdout.read()

    loader_log = asyncio.run(go())
    assert permanent == []
    assert admin.hget(layout.session_key("o1"), "update") == _update("o1", 2).payload
    assert admin.hget(layout.session_key("o2"), "update") == _update("o2", 2).payload
    assert admin.hget(layout.session_key("o3"), "update") == _update("o3", 1).payload
    assert admin.hget(layout.dead_key, "loader-in:0") == b"1 1"
    assert loader_log.count(f"loaded the function library {LIBRARY_NAME}") == 2, loader_log
    waits = [r.getMessage() for r in caplog.records if "function library" in r.getMessage()]
    assert len(waits) == 2, waits  # once per outage, not once per retry
    assert all("REDIS_LOADER_URL" in w and "loader sidecar" in w for w in waits)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    # Written at the wall clock: out of "recent", which other tests read with small times.
    admin.zrem(layout.recent_key, "o1", "o2", "o3")


@pytest.mark.parametrize(
    ("user", "extra", "status", "says"),
    [
        (WORKER, {}, 3, "give it +function|load and +function|list"),  # no FUNCTION rights
        ("nobody", {}, 3, "check its password"),  # a user Redis does not know
        (LOADER, {"STREAM_LOADER_INTERVAL": "soon"}, 2, "STREAM_LOADER_INTERVAL must be"),
    ],
    ids=["worker-user", "wrong-password", "bad-interval"],
)
def test_the_loader_exits_on_a_bad_configuration(
    acl_redis: AclRedis, user: str, extra: dict[str, str], status: int, says: str
) -> None:
    loader = _loader(acl_redis, user, **extra)
    try:
        assert loader.wait(30) == status
    finally:
        loader.kill()
    assert loader.stdout is not None
    assert says in loader.stdout.read()


def test_the_loader_waits_out_a_redis_that_is_away(acl_redis: AclRedis, tmp_path: Path) -> None:
    """Redis unreachable is no bad configuration: the loader keeps checking, says so once."""
    env = _loader_env(acl_redis, LOADER)
    env["REDIS_URL"] = f"redis://127.0.0.1:{acl_redis.server.port + 1}/0"  # nobody listens
    output = tmp_path / "loader.log"
    with output.open("w") as out:
        loader = subprocess.Popen(
            [sys.executable, "-m", "stream.publish.loader"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=REPO,
        )
    try:
        wait_until(
            lambda: "loader: redis connection" in output.read_text() or loader.poll() is not None,
            30,
            "the loader to say Redis is away",
        )
        # A negative check: time passes on purpose (five of its 0.2 s intervals), and the
        # loader neither exits nor says it again.
        time.sleep(1.0)
        assert loader.poll() is None, "the loader exited while Redis was away"
        loader.send_signal(signal.SIGTERM)
        assert loader.wait(30) == 0
    finally:
        loader.kill()
    text = output.read_text()
    assert text.count("loader: redis connection") == 1, text


def test_the_loader_only_loads(acl_redis: AclRedis) -> None:
    client = acl_redis.client(LOADER)
    assert client.function_list(library="none") == []  # what it checks with
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
            payload, taken = await store.latest_taken("g1")
            assert (payload, taken) == (_update("g1", 1).payload, 7)  # now_ms above
            assert await store.latest_taken("unknown") == (None, None)
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
    client = sync_client(gateway)
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
