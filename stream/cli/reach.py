"""Fail fast, naming the variable: a command that needs Kafka or Redis checks it can reach
them before it starts, so a shell without the service's settings gets an answer in
seconds (and a non-zero status) instead of a client retrying for ever."""

import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from stream.config import Settings

if TYPE_CHECKING:
    from stream.ops.probe import Cause

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
HINT = "Run it with the service's settings (`make demo` prints the export line for its own)"
# The Redis user each operator command needs (helm/context-stream/files/redis-acl.conf).
READER = "the gateway's Redis user (reads only: context-stream-gateway)"
WRITER = "the worker's Redis user (FCALL: context-stream)"


def environment(*parts: str) -> str:
    """An epilog naming the environment a command reads."""
    return "environment: " + "; ".join(parts) + "."


def no_kafka(command: str, settings: Settings, topics: Iterable[str] = ()) -> bool:
    """Print why and return True when Kafka cannot be used with these settings (no broker
    answers, TLS or the login fails, ``topics`` may not be described): one line naming
    the variable and librdkafka's own reason, within seconds (``stream.ops.probe``)."""
    from stream.ops.probe import probe_kafka

    cause = probe_kafka(settings, topics)
    if cause is None:
        return False
    print(_said(command, cause), file=sys.stderr)
    return True


def connect_redis(command: str, settings: Settings) -> Any:
    """A client that answered PING, or ``None`` after saying why in one line (the variable
    and the reason: DNS, refused, TLS, the login, a permission)."""
    from stream.ops.probe import connect_redis as connect

    client, cause = connect(settings)
    if cause is not None:
        print(_said(command, cause), file=sys.stderr)
    return client


def _said(command: str, cause: "Cause") -> str:
    # A refusal names what to fix; an address nobody answers at is most often a shell
    # without the service's settings.
    return f"stream {command}: {cause.line()}" + ("" if cause.refused else f". {HINT}")


def redis_refused(command: str, settings: Settings, error: Exception, user: str) -> None:
    """A Redis error after the connect (a permission the user lacks), said in one line
    with the Redis user the command should run as (docs/deploy.md, "Redis users")."""
    from stream.ops.probe import redis_cause

    cause = redis_cause(type(error).__name__, str(error), settings)
    print(f"stream {command}: {cause.line()}; it runs as {user}", file=sys.stderr)
