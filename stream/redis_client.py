"""Every Redis client of the service is made here, the worker's, the gateway's and the
commands' alike.

``async_client`` makes the worker's and the loader's (asyncio) and the gateway's (asyncio,
a bounded blocking pool); ``sync_client`` the operator commands' (synchronous).

One place for what every client shares: the URL (``REDIS_URL``, or another user's URL
that carries its own credentials), the cluster branch (``REDIS_CLUSTER``: a client of the
whole cluster, ``REDIS_URL`` naming any node; docs/notes/014), AUTH and TLS
(``REDIS_USERNAME``, ``REDIS_PASSWORD``, ``REDIS_TLS_CAFILE``: ``auth_options``) and the
URL fit for logs (``redacted_url``). A caller passes only what is its own: its client name
(``CLIENT LIST`` tells operators whose connections they are), its timeouts, a pool bound.

redis-py is imported where a client is made: a command that never talks to Redis does not
pay for it.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import redis
    import redis.asyncio as aioredis
    from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
    from redis.cluster import RedisCluster

    from stream.config import Settings

# The long-running clients' (worker, loader, gateway): a connect gives up after 5 s, and a
# connection idle for 15 s is checked (PING) before it is used again.
CONNECT_TIMEOUT = 5.0
HEALTH_CHECK_INTERVAL = 15.0
POOL_TIMEOUT = 10.0  # a caller past a bounded pool waits this long for a connection


def auth_options(settings: Settings) -> dict[str, Any]:
    """Redis AUTH/TLS keyword arguments for ``from_url`` (sync and asyncio clients): only
    what is set."""
    options: dict[str, Any] = {}
    if settings.redis_username:
        options["username"] = settings.redis_username
    if settings.redis_password:
        options["password"] = settings.redis_password
    if settings.redis_tls_cafile:
        options["ssl_ca_certs"] = settings.redis_tls_cafile
    return options


def redacted_url(url: str) -> str:
    """A Redis URL fit for logs: any password replaced by ``***``."""
    url = re.sub(r"([?&]password=)[^&#]*", r"\1***", url)  # redis-py takes it there too
    head, sep, tail = url.rpartition("@")  # a raw '@' may be in the password
    if not sep:
        return url
    scheme, _, credentials = head.partition("://")
    user = credentials.split(":", 1)[0]
    return f"{scheme}://{user}:***@{tail}" if ":" in credentials else f"{scheme}://***@{tail}"


def client_options(
    settings: Settings,
    *,
    url: str = "",
    client_name: str | None = None,
    connect_timeout: float | None = None,
    reply_timeout: float | None = None,
    health_check_interval: float | None = None,
    keepalive: bool = False,
) -> tuple[str, dict[str, Any]]:
    """The URL a client connects to and its ``from_url`` keyword arguments (pure): only
    what is asked for, so redis-py's own defaults hold for the rest. ``url``: another
    user's URL instead of ``REDIS_URL`` (the loader's), which carries its own credentials:
    ``REDIS_USERNAME`` and ``REDIS_PASSWORD`` are the worker's, TLS stays."""
    options: dict[str, Any] = {}
    if health_check_interval is not None:
        options["health_check_interval"] = health_check_interval
    if connect_timeout is not None:
        options["socket_connect_timeout"] = connect_timeout
    if reply_timeout is not None:
        options["socket_timeout"] = reply_timeout
    if keepalive:
        options["socket_keepalive"] = True
    if client_name is not None:
        options["client_name"] = client_name
    auth = auth_options(settings)
    if url:
        auth.pop("username", None)
        auth.pop("password", None)
    return url or settings.redis_url, options | auth


def async_client(
    settings: Settings,
    *,
    client_name: str,
    url: str = "",
    connect_timeout: float = CONNECT_TIMEOUT,
    health_check_interval: float = HEALTH_CHECK_INTERVAL,
    keepalive: bool = False,
    max_connections: int | None = None,
) -> aioredis.Redis | AsyncRedisCluster:
    """An asyncio client of one server, or (``REDIS_CLUSTER``) of the cluster.

    ``max_connections``: a bound on each server's connections; past it a caller waits (up
    to ``POOL_TIMEOUT``) instead of failing or opening more (a blocking pool: a thousand
    gateway clients connecting at once queue for a few connections). Unset: redis-py's
    own pool."""
    import redis.asyncio as aioredis
    from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster

    target, options = client_options(
        settings,
        url=url,
        client_name=client_name,
        connect_timeout=connect_timeout,
        health_check_interval=health_check_interval,
        keepalive=keepalive,
    )
    if max_connections is not None:
        options["max_connections"] = max_connections
    if settings.redis_cluster:
        return AsyncRedisCluster.from_url(target, **options)
    if max_connections is None:
        return aioredis.Redis.from_url(target, **options)
    pool = aioredis.BlockingConnectionPool.from_url(target, timeout=POOL_TIMEOUT, **options)
    return aioredis.Redis(connection_pool=pool)


def sync_client(
    settings: Settings, *, connect_timeout: float | None = None, reply_timeout: float | None = None
) -> redis.Redis | RedisCluster:
    """A synchronous client (an operator command's) of one server or of the cluster; with
    no timeouts, redis-py's (none). Raises what redis-py raises when no node answers."""
    import redis

    target, options = client_options(
        settings, connect_timeout=connect_timeout, reply_timeout=reply_timeout
    )
    if settings.redis_cluster:
        from redis.cluster import RedisCluster

        return RedisCluster.from_url(target, **options)
    return redis.Redis.from_url(target, **options)
