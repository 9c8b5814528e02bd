"""The one Redis client factory (``stream.redis_client``): the cluster branch, AUTH/TLS,
the timeouts and names each caller passes, checked on the clients redis-py builds (no
connection is opened: a client connects on its first command) or, for a cluster, whose
client connects as it is built, on what ``from_url`` is handed."""

from typing import Any

import pytest
import redis
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster

from stream.config import Settings
from stream.gateway.store import connect as gateway_connect
from stream.publish.redis_sink import connect as worker_connect
from stream.redis_client import (
    auth_options,
    client_options,
    redacted_url,
    sync_client,
)

TLS = {
    "REDIS_URL": "rediss://r:6380/0",
    "REDIS_USERNAME": "svc",
    "REDIS_PASSWORD": "pw",
    "REDIS_TLS_CAFILE": "/ca.pem",
}


def _kwargs(client: Any) -> dict[str, Any]:
    return dict(client.connection_pool.connection_kwargs)


def _recorded(monkeypatch: pytest.MonkeyPatch, cls: type) -> list[tuple[str, dict[str, Any]]]:
    calls: list[tuple[str, dict[str, Any]]] = []

    def from_url(url: str, **kwargs: Any) -> str:
        calls.append((url, kwargs))
        return "cluster client"

    monkeypatch.setattr(cls, "from_url", from_url)
    return calls


def test_redis_options_carry_only_what_is_set() -> None:
    assert auth_options(Settings.from_env({})) == {}
    env = {
        "REDIS_URL": "rediss://r:6380/0",
        "REDIS_USERNAME": "svc",
        "REDIS_PASSWORD": "pw",
        "REDIS_TLS_CAFILE": "/ca.pem",
    }
    assert auth_options(Settings.from_env(env)) == {
        "username": "svc",
        "password": "pw",
        "ssl_ca_certs": "/ca.pem",
    }
    assert auth_options(Settings.from_env({"REDIS_PASSWORD": "pw"})) == {"password": "pw"}


@pytest.mark.parametrize(
    ("url", "redacted"),
    [
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
        ("redis://svc:s3cret@r:6379/0", "redis://svc:***@r:6379/0"),
        ("rediss://:s3cret@r:6380/1", "rediss://:***@r:6380/1"),
        ("redis://s3cret@r/0", "redis://***@r/0"),  # a bare token is hidden too
        ("redis://svc:p%40ss%3Aw0rd@r/0", "redis://svc:***@r/0"),  # encoded @ and :
        ("redis://r/0?password=s3cret&db=1", "redis://r/0?password=***&db=1"),  # redis-py's
    ],
)
def test_redis_url_redacted_hides_the_password(url: str, redacted: str) -> None:
    settings = Settings.from_env({"REDIS_URL": url})
    assert redacted_url(settings.redis_url) == redacted
    assert settings.redis_url == url  # the real URL is still what clients connect with


def test_a_raw_at_sign_in_the_password_stays_hidden() -> None:
    settings = Settings.from_env({"REDIS_URL": "redis://svc:p@ss-tail@r:6379/0"})
    assert "ss-tail" not in redacted_url(settings.redis_url)


def test_only_what_a_caller_asks_for_is_passed() -> None:
    settings = Settings.from_env({})
    assert client_options(settings) == ("redis://127.0.0.1:6379/0", {})
    target, options = client_options(
        Settings.from_env(TLS),
        client_name="me",
        connect_timeout=1.0,
        reply_timeout=2.0,
        health_check_interval=3.0,
        keepalive=True,
    )
    assert target == "rediss://r:6380/0"
    assert options == {
        "client_name": "me",
        "socket_connect_timeout": 1.0,
        "socket_timeout": 2.0,
        "health_check_interval": 3.0,
        "socket_keepalive": True,
        "username": "svc",
        "password": "pw",
        "ssl_ca_certs": "/ca.pem",
    }


def test_another_user_s_url_brings_its_own_credentials_and_keeps_tls() -> None:
    target, options = client_options(Settings.from_env(TLS), url="rediss://loader:lpw@r:6380/0")
    assert target == "rediss://loader:lpw@r:6380/0"
    assert options == {"ssl_ca_certs": "/ca.pem"}


def test_the_worker_s_client_of_one_server() -> None:
    client = worker_connect(Settings.from_env({"REDIS_URL": "redis://svc:pw@r:6379/2"}))
    assert type(client) is aioredis.Redis
    assert type(client.connection_pool) is aioredis.ConnectionPool
    kwargs = _kwargs(client)
    assert kwargs["host"] == "r" and kwargs["port"] == 6379 and kwargs["db"] == 2
    assert kwargs["client_name"] == "stream-worker"
    assert kwargs["socket_connect_timeout"] == 5 and kwargs["health_check_interval"] == 15
    assert kwargs["username"] == "svc" and kwargs["password"] == "pw"
    assert "socket_keepalive" not in kwargs and "socket_timeout" not in kwargs


def test_the_loader_s_client_connects_as_its_own_user_over_tls() -> None:
    settings = Settings.from_env(TLS)
    client = worker_connect(settings, "stream-loader", "rediss://loader:lpw@r:6380/0")
    kwargs = _kwargs(client)
    assert kwargs["client_name"] == "stream-loader"
    assert kwargs["username"] == "loader" and kwargs["password"] == "lpw"
    assert kwargs["ssl_ca_certs"] == "/ca.pem"
    assert client.connection_pool.connection_class is aioredis.SSLConnection


def test_the_gateway_s_client_waits_on_a_bounded_pool() -> None:
    client = gateway_connect(Settings.from_env({}), max_connections=7)
    pool = client.connection_pool
    assert type(pool) is aioredis.BlockingConnectionPool
    assert pool.max_connections == 7 and pool.timeout == 10
    kwargs = _kwargs(client)
    assert kwargs["client_name"] == "stream-gateway" and kwargs["socket_keepalive"] is True
    assert kwargs["socket_connect_timeout"] == 5 and kwargs["health_check_interval"] == 15


def test_a_cluster_gets_a_cluster_client_with_the_same_values(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = _recorded(monkeypatch, AsyncRedisCluster)
    settings = Settings.from_env(TLS | {"REDIS_CLUSTER": "1"})
    assert gateway_connect(settings, max_connections=9) == "cluster client"
    assert worker_connect(settings) == "cluster client"
    gateway, worker = calls
    assert gateway == (
        "rediss://r:6380/0",
        {
            "client_name": "stream-gateway",
            "socket_connect_timeout": 5.0,
            "health_check_interval": 15.0,
            "socket_keepalive": True,
            "max_connections": 9,  # per node; no pool wait: the cluster client has its own
            "username": "svc",
            "password": "pw",
            "ssl_ca_certs": "/ca.pem",
        },
    )
    assert worker[1]["client_name"] == "stream-worker" and "max_connections" not in worker[1]


def test_a_command_s_client_takes_its_timeouts_and_no_name() -> None:
    client = sync_client(
        Settings.from_env({"REDIS_PASSWORD": "pw"}), connect_timeout=2.0, reply_timeout=3.0
    )
    assert type(client) is redis.Redis
    kwargs = _kwargs(client)
    assert kwargs["socket_connect_timeout"] == 2.0 and kwargs["socket_timeout"] == 3.0
    assert kwargs["password"] == "pw"
    assert "client_name" not in kwargs and "health_check_interval" not in kwargs
    plain = _kwargs(sync_client(Settings.from_env({})))  # `stream watch`: redis-py's defaults
    assert "socket_timeout" not in plain and "socket_connect_timeout" not in plain


def test_a_command_s_cluster_client(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _recorded(monkeypatch, RedisCluster)
    settings = Settings.from_env({"REDIS_CLUSTER": "1", "REDIS_URL": "redis://n1:7000/0"})
    assert sync_client(settings, connect_timeout=1.5, reply_timeout=1.5) == "cluster client"
    assert calls == [("redis://n1:7000/0", {"socket_connect_timeout": 1.5, "socket_timeout": 1.5})]
