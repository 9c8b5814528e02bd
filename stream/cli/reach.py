"""Fail fast, naming the variable: a command that needs Kafka or Redis checks it can reach
them before it starts, so a shell without the service's settings gets an answer in
seconds (and a non-zero status) instead of a client retrying for ever."""

import sys
from typing import Any

from stream.config import Settings

# The help's closing lines: what each kind of command reads from the environment.
KAFKA_ENV = (
    "KAFKA_BOOTSTRAP_SERVERS (default 127.0.0.1:9092) and KAFKA_SECURITY_PROTOCOL,"
    " KAFKA_SASL_*, KAFKA_SSL_* for a secured cluster"
)
REDIS_ENV = (
    "REDIS_URL (default redis://127.0.0.1:6379/0), REDIS_USERNAME, REDIS_PASSWORD,"
    " REDIS_TLS_CAFILE, REDIS_KEY_PREFIX (ctx:), REDIS_CLUSTER"
)
TOPICS_ENV = "STREAM_APP_ID, STREAM_INPUT_TOPIC, STREAM_OUTPUT_TOPIC"
LIMITS_ENV = "the worker's limits (STREAM_MAX_*, STREAM_RESETS, STREAM_SESSION_TTL)"
HINT = "`make demo` prints the export line for its own"


def environment(*parts: str) -> str:
    """An epilog naming the environment a command reads."""
    return "environment: " + "; ".join(parts) + "."


def no_kafka(command: str, settings: Settings) -> bool:
    """Print why and return True when no bootstrap server accepts a connection."""
    from stream.ops.lag import unreachable

    why = unreachable(settings.bootstrap_servers)
    if why is None:
        return False
    print(
        f"stream {command}: cannot reach Kafka at {settings.bootstrap_servers}"
        f" (KAFKA_BOOTSTRAP_SERVERS): {why}. Set it to the service's brokers; {HINT}",
        file=sys.stderr,
    )
    return True


def redis_client(settings: Settings, timeout: float = 3.0) -> Any:
    """A synchronous client (standalone or cluster) whose connects and replies give up
    after ``timeout`` seconds; raises what redis-py raises when no node answers."""
    import redis

    options = settings.redis_options() | {
        "socket_connect_timeout": timeout,
        "socket_timeout": timeout,
    }
    if settings.redis_cluster:
        from redis.cluster import RedisCluster

        return RedisCluster.from_url(settings.redis_url, **options)
    return redis.Redis.from_url(settings.redis_url, **options)


def connect_redis(command: str, settings: Settings) -> Any:
    """A client that answered PING, or ``None`` after saying why (naming REDIS_URL)."""
    import redis

    try:
        client = redis_client(settings)
        client.ping()
    except (redis.RedisError, OSError) as error:
        print(
            f"stream {command}: cannot reach Redis at {settings.redis_url_redacted}"
            f" (REDIS_URL): {str(error).rstrip('.')}. Set it to the service's Redis; {HINT}",
            file=sys.stderr,
        )
        return None
    return client
