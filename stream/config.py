"""Service configuration, read once from the environment (documented in the README).

One frozen value: the Faust app, the confluent-kafka tools and the Redis sink all read
their settings from here, so a variable means the same thing everywhere.
"""

import os
import socket
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


class ConfigError(ValueError):
    """A setting that cannot be used; the message names the variable."""


def _int(env: Mapping[str, str], name: str, default: int, minimum: int = 0) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise ConfigError(f"{name} must be at least {minimum}, got {value}")
    return value


def _float(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        return float(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a number, got {raw!r}") from None


@dataclass(frozen=True)
class KafkaSecurity:
    protocol: str = "PLAINTEXT"  # PLAINTEXT | SSL | SASL_PLAINTEXT | SASL_SSL
    sasl_mechanism: str = "PLAIN"  # PLAIN | SCRAM-SHA-256 | SCRAM-SHA-512
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None

    @property
    def uses_ssl(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    def ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=self.ssl_cafile)
        if self.ssl_certfile:
            context.load_cert_chain(self.ssl_certfile, self.ssl_keyfile)
        return context

    def librdkafka(self) -> dict[str, Any]:
        """The same settings in confluent-kafka (librdkafka) terms."""
        conf: dict[str, Any] = {"security.protocol": self.protocol}
        if self.uses_sasl:
            conf |= {
                "sasl.mechanisms": self.sasl_mechanism,
                "sasl.username": self.sasl_username or "",
                "sasl.password": self.sasl_password or "",
            }
        for key, value in (
            ("ssl.ca.location", self.ssl_cafile),
            ("ssl.certificate.location", self.ssl_certfile),
            ("ssl.key.location", self.ssl_keyfile),
        ):
            if value:
                conf[key] = value
        return conf


@dataclass(frozen=True)
class Settings:
    bootstrap_servers: str = "127.0.0.1:9092"
    app_id: str = "context-stream"
    input_topic: str = "dsh.session-events"
    output_topic: str = "dsh.session-context"
    dlq_topic: str = "dsh.session-events.dlq"
    partitions: int = 6
    replication_factor: int = 1
    state_dir: str = ".state"
    redis_url: str = "redis://127.0.0.1:6379/0"
    redis_key_prefix: str = "ctx:"
    redis_ttl_seconds: int = 0  # 0: keep idle sessions forever
    redis_tls_cafile: str | None = None
    redis_username: str | None = None
    redis_password: str | None = field(default=None, repr=False)
    generation: int = 1  # bump when rebuilding state, so rebuilt updates win in Redis
    worker_id: str = ""  # names this worker's stats; default host-pid
    commit_interval: float = 2.8
    session_timeout: float = 30.0  # how soon the group notices a dead worker
    batch_max: int = 2000
    batch_within: float = 0.05
    web_port: int = 6066
    web_enabled: bool = False  # Faust's own web server; off so workers can share a host
    kafka: KafkaSecurity = field(default_factory=KafkaSecurity)

    @property
    def redis_stats_key(self) -> str:
        """Hash of event counts (folded, duplicate, faulted, dead_lettered), all workers."""
        return f"{self.redis_key_prefix}stats"

    @property
    def redis_worker_stats_key(self) -> str:
        """The same counts for this worker alone."""
        return f"{self.redis_key_prefix}stats:{self.worker_id}"

    def session_key(self, session_id: str) -> str:
        """Redis key holding a session's latest update; also its pub/sub channel."""
        return f"{self.redis_key_prefix}session:{session_id}"

    def librdkafka(self) -> dict[str, Any]:
        return {"bootstrap.servers": self.bootstrap_servers} | self.kafka.librdkafka()

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "Settings":
        env = os.environ if env is None else env
        protocol = env.get("KAFKA_SECURITY_PROTOCOL", "PLAINTEXT").upper()
        if protocol not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
            raise ConfigError(f"KAFKA_SECURITY_PROTOCOL: unknown protocol {protocol!r}")
        security = KafkaSecurity(
            protocol=protocol,
            sasl_mechanism=env.get("KAFKA_SASL_MECHANISM", "PLAIN").upper(),
            sasl_username=env.get("KAFKA_SASL_USERNAME") or None,
            sasl_password=env.get("KAFKA_SASL_PASSWORD") or None,
            ssl_cafile=env.get("KAFKA_SSL_CAFILE") or None,
            ssl_certfile=env.get("KAFKA_SSL_CERTFILE") or None,
            ssl_keyfile=env.get("KAFKA_SSL_KEYFILE") or None,
        )
        if security.uses_sasl and not (security.sasl_username and security.sasl_password):
            raise ConfigError(f"{protocol} needs KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD")
        app_id = env.get("STREAM_APP_ID", cls.app_id)
        input_topic = env.get("STREAM_INPUT_TOPIC", cls.input_topic)
        return cls(
            bootstrap_servers=env.get("KAFKA_BOOTSTRAP_SERVERS", cls.bootstrap_servers),
            app_id=app_id,
            input_topic=input_topic,
            output_topic=env.get("STREAM_OUTPUT_TOPIC", cls.output_topic),
            dlq_topic=env.get("STREAM_DLQ_TOPIC", f"{input_topic}.dlq"),
            partitions=_int(env, "STREAM_PARTITIONS", cls.partitions, 1),
            replication_factor=_int(env, "STREAM_REPLICATION_FACTOR", 1, 1),
            state_dir=env.get("STREAM_STATE_DIR", cls.state_dir),
            redis_url=env.get("REDIS_URL", cls.redis_url),
            redis_key_prefix=env.get("REDIS_KEY_PREFIX", cls.redis_key_prefix),
            redis_ttl_seconds=_int(env, "REDIS_TTL_SECONDS", 0),
            redis_tls_cafile=env.get("REDIS_TLS_CAFILE") or None,
            redis_username=env.get("REDIS_USERNAME") or None,
            redis_password=env.get("REDIS_PASSWORD") or None,
            generation=_int(env, "STREAM_GENERATION", cls.generation),
            worker_id=env.get("STREAM_WORKER_ID") or f"{socket.gethostname()}-{os.getpid()}",
            commit_interval=_float(env, "STREAM_COMMIT_INTERVAL", cls.commit_interval),
            session_timeout=_float(env, "STREAM_SESSION_TIMEOUT", cls.session_timeout),
            batch_max=_int(env, "STREAM_BATCH_MAX", cls.batch_max, 1),
            batch_within=_float(env, "STREAM_BATCH_WITHIN", cls.batch_within),
            web_port=_int(env, "STREAM_WEB_PORT", cls.web_port, 1),
            web_enabled=env.get("STREAM_WEB_ENABLED", "0") not in ("0", "false", "no", ""),
            kafka=security,
        )
