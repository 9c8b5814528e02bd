"""Start-up probes: can this process use its Kafka and its Redis, and if not, why.

Every entry point (``stream worker``, ``stream serve``, the operator commands) asks once,
before it starts, and a failure is one line naming the variable to fix and the real
reason: a host that does not resolve, a refused port, a TLS handshake, a refused login,
a missing permission. Once a process runs, outages are ridden out as before; these probes
only keep a wrong setting from looking like an outage.

Kafka: librdkafka knows the cause long before a request times out (its error callback
reports ``_AUTHENTICATION``, ``_SSL``, ``_RESOLVE``, ``_TRANSPORT`` per broker within the
first connect), but a client without an ``error_cb`` logs it and reports only "Broker
transport failure" after its timeout. The probe collects those reports and stops as soon
as they settle the question (``settled``). The mapping from reports to a cause is pure
(``kafka_cause``, ``redis_cause``) and table-tested. Why probes, and the alternatives:
docs/notes/031-start-up-probes.md.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from stream.config import Settings
from stream.redis_client import redacted_url, sync_client

KAFKA_WAIT = 8.0  # seconds a probe waits for a broker before "no answer"
REDIS_WAIT = 3.0  # seconds a Redis connect or reply may take

SASL_VARIABLES = "KAFKA_SASL_USERNAME, KAFKA_SASL_PASSWORD"


@dataclass(frozen=True, slots=True)
class Cause:
    """Why a service cannot be used: where, which variables to look at, and the reason."""

    service: str  # "Kafka" or "Redis"
    where: str  # the address as configured (a Redis password redacted)
    variables: str  # what to fix, e.g. "KAFKA_SASL_USERNAME, KAFKA_SASL_PASSWORD"
    reason: str
    refused: bool = False  # the server answered and said no (credentials, permissions)
    # Nothing answered at a name that resolves (refused, timed out): a wrong port, or an
    # outage; ``group_has_run`` tells the worker which to take it for.
    silent: bool = False

    def line(self) -> str:
        verb = "use" if self.refused else "reach"
        return f"cannot {verb} {self.service} at {self.where} ({self.variables}): {self.reason}"


# --------------------------------------------------------------------------- Kafka, pure

# A librdkafka error report: the code's name (``_AUTHENTICATION``) and its text.
Report = tuple[str, str]

_BROKER_PREFIX = re.compile(r"^\S+/(?:bootstrap|\d+): ")
_AFTER = re.compile(r" \(after \d+ms in state [A-Z_]+[^)]*\)$")


def _clean(text: str) -> str:
    """A report's text without the broker name in front and the timing behind."""
    return _AFTER.sub("", _BROKER_PREFIX.sub("", text)).strip()


def settled(reports: Sequence[Report]) -> bool:
    """Whether the reports so far name a cause that waiting will not change: a login or
    TLS refusal (the same settings go to every broker), or every bootstrap server down
    with a reason (a DNS failure, a refused port)."""
    names = {name for name, _ in reports}
    if names & {"_AUTHENTICATION", "_SSL"}:
        return True
    return "_ALL_BROKERS_DOWN" in names and bool(names & {"_RESOLVE", "_TRANSPORT"})


def kafka_cause(reports: Sequence[Report], bootstrap: str, protocol: str, waited: float) -> Cause:
    """The one cause the reports of a failed probe point at, most specific first."""
    texts: dict[str, str] = {}
    for name, text in reports:
        if name != "_ALL_BROKERS_DOWN":
            texts.setdefault(name, _clean(text))
    plaintext_to_tls = any("connecting to a PLAINTEXT broker listener" in t for _, t in reports)

    def cause(variables: str, reason: str, refused: bool = False) -> Cause:
        return Cause("Kafka", bootstrap, variables, reason, refused)

    if "_AUTHENTICATION" in texts:
        text = texts["_AUTHENTICATION"]
        if "Unsupported SASL mechanism" in text:
            return cause("KAFKA_SASL_MECHANISM", text, True)
        return cause(SASL_VARIABLES, text, True)
    if plaintext_to_tls:
        return cause(
            "KAFKA_SECURITY_PROTOCOL",
            f"{protocol} (TLS) spoken to a plaintext listener: the broker closed the handshake",
        )
    if "_SSL" in texts:
        text = texts["_SSL"]
        if "certificate verify failed" in text:
            return cause(
                "KAFKA_SSL_CAFILE",
                "TLS handshake failed: the broker's certificate is not signed by a CA this"
                f" client trusts ({text.split(':', 1)[0]}: certificate verify failed)",
            )
        return cause("KAFKA_SSL_CAFILE, KAFKA_SSL_CERTFILE, KAFKA_SSL_KEYFILE", f"TLS: {text}")
    if "_RESOLVE" in texts:
        return cause("KAFKA_BOOTSTRAP_SERVERS", f"DNS lookup failed: {texts['_RESOLVE']}")
    if "_TRANSPORT" in texts:
        text = texts["_TRANSPORT"]
        if "Connection refused" in text:
            return cause("KAFKA_BOOTSTRAP_SERVERS", f"connection refused: {text}")
        return cause("KAFKA_BOOTSTRAP_SERVERS, KAFKA_SECURITY_PROTOCOL", text)
    hint = (
        ": a TLS listener spoken to in plaintext says nothing (KAFKA_SECURITY_PROTOCOL)"
        if protocol in ("PLAINTEXT", "SASL_PLAINTEXT")
        else ""
    )
    return cause(
        "KAFKA_BOOTSTRAP_SERVERS, KAFKA_SECURITY_PROTOCOL",
        f"no broker answered within {waited:.0f} s{hint}",
    )


def principal(settings: Settings) -> str:
    """Who the broker's ACLs see: the SASL user, else the TLS client or ANONYMOUS."""
    kafka = settings.kafka
    if kafka.uses_sasl:
        return f"User:{kafka.sasl_username} (KAFKA_SASL_USERNAME)"
    if kafka.ssl_certfile:
        return "the client certificate's subject (KAFKA_SSL_CERTFILE)"
    return "User:ANONYMOUS"


_AUTHORIZATION = re.compile(
    r"(?:(TOPIC|GROUP|CLUSTER|TRANSACTIONAL_ID)_)?AUTHORIZATION_FAILED", re.IGNORECASE
)


def authorization(text: str, settings: Settings) -> str | None:
    """A broker's authorization refusal in ``text``, said with the principal whose ACLs
    lack it; ``None`` when ``text`` is not one."""
    found = _AUTHORIZATION.search(text.replace(" ", "_"))
    if found is None:
        return None
    kind = f" ({found.group(1).lower().replace('_', ' ')})" if found.group(1) else ""
    return (
        f"not authorized{kind}: {text.rstrip('.')}; {principal(settings)} lacks the ACL"
        ' (docs/deploy.md, "Kafka ACLs")'
    )


def kafka_error_line(error: BaseException, settings: Settings) -> str:
    """One line for an error of a Kafka request after the probe passed: an authorization
    refusal names the principal, anything else is said as it is."""
    text = str(error.args[0].str() if _is_kafka_error(error) else error)
    return authorization(text, settings) or f"Kafka at {settings.bootstrap_servers}: {text}"


def _is_kafka_error(error: BaseException) -> bool:
    return bool(error.args) and hasattr(error.args[0], "str") and hasattr(error.args[0], "code")


# --------------------------------------------------------------------------- Kafka, probe


def probe_kafka(
    settings: Settings, topics: Iterable[str] = (), wait: float = KAFKA_WAIT
) -> Cause | None:
    """``None`` once a broker answered metadata as these settings' principal (and may
    describe ``topics``: a missing topic is fine, an unauthorized one is not), else the
    cause, within ``wait`` seconds."""
    from confluent_kafka import KafkaError, KafkaException, TopicCollection
    from confluent_kafka.admin import AdminClient  # type: ignore[attr-defined,unused-ignore]

    reports: list[Report] = []
    client = AdminClient(
        settings.librdkafka()
        | {
            "log_level": 0,  # the reports come through error_cb; said once, below
            "error_cb": lambda error: reports.append((error.name(), error.str())),
        }
    )
    began = time.monotonic()
    while True:
        left = wait - (time.monotonic() - began)
        try:
            client.list_topics(timeout=max(0.1, min(0.5, left)))
            break
        except KafkaException:
            client.poll(0)  # serves error_cb
            if settled(reports) or left <= 0.5:
                return kafka_cause(
                    reports, settings.bootstrap_servers, settings.kafka.protocol, wait
                )
    # DescribeTopics, not a metadata request naming the topic: on a broker that creates
    # topics on demand, that request would create a missing input topic with the broker's
    # default partition count before the worker creates it with STREAM_PARTITIONS.
    wanted = list(topics)
    if not wanted:
        return None
    left = max(1.0, wait - (time.monotonic() - began))
    described = client.describe_topics(TopicCollection(wanted), request_timeout=left)
    for topic, future in described.items():
        try:
            future.result()
        except KafkaException as error:
            if error.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                continue  # missing: the caller creates it or says so
            if error.args[0].code() != KafkaError.TOPIC_AUTHORIZATION_FAILED:
                return Cause("Kafka", settings.bootstrap_servers, "KAFKA_*", str(error))
            return Cause(
                "Kafka",
                settings.bootstrap_servers,
                "the broker's ACLs",
                f"{principal(settings)} may not describe topic {topic}"
                ' (TOPIC_AUTHORIZATION_FAILED); docs/deploy.md, "Kafka ACLs"',
                refused=True,
            )
    return None


# --------------------------------------------------------------------------- Redis


def redis_credentials(settings: Settings) -> str:
    """The variables that hold the Redis credentials in use."""
    if settings.redis_username or settings.redis_password:
        return "REDIS_USERNAME, REDIS_PASSWORD"
    return "REDIS_URL" if "@" in settings.redis_url else "REDIS_USERNAME, REDIS_PASSWORD"


def redis_user(settings: Settings) -> str:
    if settings.redis_username:
        return settings.redis_username
    head, sep, _ = settings.redis_url.rpartition("@")
    user = head.partition("://")[2].split(":", 1)[0] if sep else ""
    return user or "default"


# How getaddrinfo's failures read (glibc, musl, macOS).
_DNS = ("name or service not known", "temporary failure in name", "nodename nor servname")


def redis_cause(kind: str, message: str, settings: Settings) -> Cause:
    """The cause of a failed Redis connect or PING: ``kind`` is the exception's class
    name, ``message`` its text."""
    where = redacted_url(settings.redis_url)
    text = message.rstrip(".")
    lowered = text.lower()

    def cause(variables: str, reason: str, refused: bool = False) -> Cause:
        return Cause("Redis", where, variables, reason, refused)

    if kind == "NoPermissionError" or "noperm" in lowered:
        return cause(
            "REDIS_USERNAME",
            f"user {redis_user(settings)!r} lacks a permission this command needs: {text}",
            True,
        )
    if (
        "noauth" in lowered
        or "authentication required" in lowered
        or "already authenticated" in lowered
    ):
        return cause(
            redis_credentials(settings), f"Redis wants a login and none was given: {text}", True
        )
    if kind.startswith("Authentication") or "wrongpass" in lowered or "invalid username" in lowered:
        return cause(redis_credentials(settings), f"login refused: {text}", True)
    if "certificate verify failed" in lowered:
        return cause("REDIS_TLS_CAFILE", f"TLS handshake failed: {text}")
    if any(
        s in lowered
        for s in ("name or service not known", "temporary failure in name", "nodename nor servname")
    ):
        return cause("REDIS_URL", f"DNS lookup failed: {text}")
    if "connection refused" in lowered:
        return Cause("Redis", where, "REDIS_URL", f"connection refused: {text}", silent=True)
    if "ssl" in lowered or "wrong version number" in lowered:
        return cause("REDIS_URL, REDIS_TLS_CAFILE", f"TLS: {text} (rediss:// needs a TLS port)")
    tls = settings.redis_url.startswith("rediss://")
    if kind == "TimeoutError" or "timeout" in lowered or "timed out" in lowered:
        hint = " (rediss:// to a plaintext port?)" if tls else ""
        reason = f"no answer within {REDIS_WAIT:.0f} s: {text}{hint}"
        return Cause("Redis", where, "REDIS_URL", reason, silent=True)
    if not tls and ("closed by server" in lowered or "reset by peer" in lowered):
        return cause("REDIS_URL", f"{text} (a TLS port? it needs rediss://)")
    return cause("REDIS_URL", text)


def redis_client(settings: Settings, timeout: float = REDIS_WAIT) -> Any:
    """A synchronous client (standalone or cluster) whose connects and replies give up
    after ``timeout`` seconds; raises what redis-py raises when no node answers."""
    return sync_client(settings, connect_timeout=timeout, reply_timeout=timeout)


def connect_redis(settings: Settings) -> tuple[Any, Cause | None]:
    """A client that answered PING, or the cause it did not (the client is then None)."""
    import redis
    from redis.exceptions import RedisClusterException

    try:
        client = redis_client(settings)
        client.ping()
    except (redis.RedisError, RedisClusterException, OSError) as error:
        return None, redis_cause(type(error).__name__, str(error), settings)
    return client, None


def group_has_run(settings: Settings, timeout: float = 5.0) -> bool:
    """Whether the worker group has committed an input offset: the service has run with
    some Redis before. A worker starting then with its Redis silent takes it for an
    outage and rides it out (Redis is a cache, README); on a first start it is far more
    likely a wrong ``REDIS_URL`` (docs/notes/031). ``False`` when it cannot tell."""
    from confluent_kafka import KafkaException

    from stream.ops.admin import admin
    from stream.ops.offsets import PlanError, committed_offsets, partitions_of

    client = admin(settings)
    deadline = time.monotonic() + timeout
    while True:
        try:
            partitions = partitions_of(client, settings.input_topic, timeout)
            found = committed_offsets(
                client, settings.app_id, settings.input_topic, partitions, timeout
            )
            break
        except KafkaException as error:
            # A coordinator still loading (a fresh or restarted broker) answers in a moment.
            if not error.args[0].retriable() or time.monotonic() > deadline:
                return False
            time.sleep(0.3)
        except (PlanError, RuntimeError):
            return False
    return any(offset is not None and offset >= 0 for offset in found.values())


def probe_redis(settings: Settings) -> Cause | None:
    client, cause = connect_redis(settings)
    if client is not None:
        client.close()
    return cause


__all__ = [
    "Cause",
    "authorization",
    "connect_redis",
    "group_has_run",
    "kafka_cause",
    "kafka_error_line",
    "principal",
    "probe_kafka",
    "probe_redis",
    "redis_cause",
    "redis_client",
    "settled",
]
