"""Service configuration, read once from the environment (documented in the README).

One frozen value: the Faust app, the confluent-kafka tools and the Redis sink all read
their settings from here, so a variable means the same thing everywhere.
"""

import os
import re
import socket
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from stream.output.layout import RedisLayout
from stream.session.limits import Limits


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


def _bounded(value: float, name: str, low: float, high: float) -> float:
    if not low <= value <= high:
        raise ConfigError(f"{name} must be between {low:g} and {high:g}, got {value:g}")
    return value


_DURATION = re.compile(r"([0-9]+)([smhd]?)")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def duration(raw: str, name: str) -> int:
    """Seconds in ``7d``, ``12h``, ``90m``, ``30s`` or plain seconds."""
    found = _DURATION.fullmatch(raw.strip().lower())
    if found is None:
        raise ConfigError(f"{name} must be a duration like 7d, 12h, 90m or seconds, got {raw!r}")
    return int(found.group(1)) * _UNITS[found.group(2)]


def _duration(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    return default if raw is None or raw == "" else duration(raw, name)


def _flag(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    if raw.lower() in ("1", "true", "yes", "on"):
        return True
    if raw.lower() in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{name} must be 1/0, true/false, yes/no or on/off, got {raw!r}")


def _choice(env: Mapping[str, str], name: str, default: str, allowed: tuple[str, ...]) -> str:
    value = (env.get(name) or default).lower()
    if value not in allowed:
        raise ConfigError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
    return value


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
    redis_url: str = field(default="redis://127.0.0.1:6379/0", repr=False)  # may embed a password
    redis_key_prefix: str = "ctx:"
    redis_ttl_seconds: int = 0  # 0: keep idle sessions forever
    redis_cluster: bool = False  # a Redis Cluster: the sharded layout (output.layout)
    redis_tls_cafile: str | None = None
    redis_username: str | None = None
    redis_password: str | None = field(default=None, repr=False)
    # Who loads the worker's Redis function library (FUNCTION LOAD); "": REDIS_URL's user.
    redis_loader_url: str = field(default="", repr=False)  # may embed a password
    generation: int = 1  # bump when rebuilding state, so rebuilt updates win in Redis
    worker_id: str = ""  # names this worker's stats; default host-pid
    commit_interval: float = 2.8
    session_timeout: float = 30.0  # how soon the group notices a dead worker
    batch_max: int = 10_000  # a batch grows with the backlog up to this (note 016)
    batch_within: float = 0.0  # s: 0 takes what has arrived (latency first; note 011)
    # A batch takes whole partitions, longest waiting first, while they hold at most this
    # many sessions together (at least one partition; all of them when a whole batch is
    # waiting); the rest take the next turn. 0: every partition each batch (note 016).
    batch_sessions: int = 100
    producer_linger: float = 0.005  # s: records of a batch leave in few requests
    max_poll_interval: float = 3600.0  # s: a held batch must not drop the worker from its group
    # s: the longest a fetch may wait at the broker for new records (Faust's 1.5 s put a busy
    # worker seconds behind: aiokafka's one fetch in flight held its busy partitions; note 016)
    fetch_max_wait: float = 0.05
    rocksdb_write_buffer: int = 8 << 20  # bytes per memtable, two per partition's RocksDB
    # Sessions whose decoded record stays in memory after their row is written, so their
    # next batch skips decoding it (about 1.5 KB each; 0: none; note 016).
    keep_records: int = 20_000
    standby_replicas: int = 0  # warm copies of each table partition on other workers
    reseed_on_assign: bool = True  # republish assigned partitions' rows to Redis (guarded)
    redis_check_interval: float = 5.0  # s between checks that Redis still holds our data
    # Updates queued while Redis is away, before batches are held: sessions, and their
    # estimated bytes (payloads + ~320 B each). 256 MiB: the chart requests 512 MiB for a
    # worker's steady state and limits it to 1 GiB; the queue takes at most a quarter of
    # the limit, leaving the rest for the held batch, allocator slack and estimate error.
    redis_max_pending: int = 500_000
    redis_max_pending_bytes: int = 256 * 1024 * 1024
    max_message_bytes: int = 1_000_000
    # A compressed record batch from the input is inflated up to this many bytes; past it
    # its records are dead-lettered unread (stream.app.inflate). One fetch inflates at most
    # this much per partition (plus the batch that crosses it).
    max_inflated_bytes: int = 4_000_000
    # Input handed to the agent and not yet in a batch, in bytes (beside the record count
    # the queue holds): what bounds the worker's memory when every record is large.
    max_buffered_bytes: int = 32 * 1024 * 1024
    max_event_bytes: int = 1_000_000  # one event of a segment, as compact JSON
    max_key_bytes: int = 1_024
    max_segment_events: int = 10_000
    max_error_chars: int = 500
    max_system_prompts: int = 1_000
    # Reset records (`stream produce --reset`) taken from the input topic, and then only for
    # a generation claimed on the control topic; off (the default): no producer to the
    # input topic can start a session over (docs/operations.md, "Resets").
    resets: bool = False
    # s a partition's committed offset may stand still while records wait before the
    # worker reports it stalled (metric, /readyz).
    stall_seconds: float = 60.0
    # Sessions idle this long in event time expire everywhere (contract: "Session
    # expiry"); 0 keeps them for good. 7 days: the input topic's default retention, past
    # which a session could not be replayed from offsets anyway.
    session_ttl_seconds: int = 7 * 86400
    web_port: int = 6066
    web_enabled: bool = False  # Faust's own web server; off so workers can share a host
    metrics_port: int = 9102  # /metrics, /livez, /readyz; 0 turns the endpoint off
    metrics_bind: str = "0.0.0.0"  # probes and Prometheus scrape from outside the pod
    log_format: str = "text"  # text | json (one object per line)
    gateway_port: int = 8080
    gateway_bind: str = "127.0.0.1"
    gateway_cors_origins: tuple[str, ...] = ()
    kafka: KafkaSecurity = field(default_factory=KafkaSecurity)

    @property
    def redis_url_redacted(self) -> str:
        """``REDIS_URL`` fit for logs: any password replaced by ``***``."""
        url = re.sub(r"([?&]password=)[^&#]*", r"\1***", self.redis_url)  # redis-py takes it too
        head, sep, tail = url.rpartition("@")  # a raw '@' may be in the password
        if not sep:
            return url
        scheme, _, credentials = head.partition("://")
        user = credentials.split(":", 1)[0]
        return f"{scheme}://{user}:***@{tail}" if ":" in credentials else f"{scheme}://***@{tail}"

    def redis_options(self) -> dict[str, Any]:
        """Redis AUTH/TLS keyword arguments for ``from_url`` (sync and asyncio clients):
        the one place every Redis client of the service gets them from."""
        options: dict[str, Any] = {}
        if self.redis_username:
            options["username"] = self.redis_username
        if self.redis_password:
            options["password"] = self.redis_password
        if self.redis_tls_cafile:
            options["ssl_ca_certs"] = self.redis_tls_cafile
        return options

    @property
    def redis_layout(self) -> RedisLayout:
        return RedisLayout(self.redis_key_prefix, cluster=self.redis_cluster)

    @property
    def limits(self) -> Limits:
        """The bounds every fold runs under, the worker's and the offline tools' alike."""
        return Limits(
            message_bytes=self.max_message_bytes,
            event_bytes=self.max_event_bytes,
            key_bytes=self.max_key_bytes,
            segment_events=self.max_segment_events,
            error_chars=self.max_error_chars,
            dead_letter_bytes=min(self.max_message_bytes, 900_000),
            resets=self.resets,
            reset_ceiling=self.generation,
            system_prompts=self.max_system_prompts,
            session_ttl=self.session_ttl_seconds * 1000,
        )

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
        if env.get("REDIS_TLS_CAFILE") and not env.get("REDIS_URL", "").startswith("rediss://"):
            raise ConfigError("REDIS_TLS_CAFILE needs a rediss:// REDIS_URL (TLS)")
        cluster = _flag(env, "REDIS_CLUSTER", False)
        prefix = env.get("REDIS_KEY_PREFIX", cls.redis_key_prefix)
        if cluster and ("{" in prefix or "}" in prefix):
            raise ConfigError("REDIS_KEY_PREFIX must hold no '{' or '}' with REDIS_CLUSTER")
        app_id = env.get("STREAM_APP_ID") or cls.app_id
        input_topic = env.get("STREAM_INPUT_TOPIC") or cls.input_topic
        return cls(
            bootstrap_servers=env.get("KAFKA_BOOTSTRAP_SERVERS", cls.bootstrap_servers),
            app_id=app_id,
            input_topic=input_topic,
            output_topic=env.get("STREAM_OUTPUT_TOPIC") or cls.output_topic,
            dlq_topic=env.get("STREAM_DLQ_TOPIC") or f"{input_topic}.dlq",
            partitions=_int(env, "STREAM_PARTITIONS", cls.partitions, 1),
            replication_factor=_int(env, "STREAM_REPLICATION_FACTOR", 1, 1),
            state_dir=env.get("STREAM_STATE_DIR", cls.state_dir),
            redis_url=env.get("REDIS_URL", cls.redis_url),
            redis_key_prefix=prefix,
            redis_ttl_seconds=_int(env, "REDIS_TTL_SECONDS", 0),
            redis_cluster=cluster,
            redis_tls_cafile=env.get("REDIS_TLS_CAFILE") or None,
            redis_username=env.get("REDIS_USERNAME") or None,
            redis_password=env.get("REDIS_PASSWORD") or None,
            redis_loader_url=env.get("REDIS_LOADER_URL", ""),
            generation=_int(env, "STREAM_GENERATION", cls.generation),
            worker_id=env.get("STREAM_WORKER_ID") or f"{socket.gethostname()}-{os.getpid()}",
            commit_interval=_float(env, "STREAM_COMMIT_INTERVAL", cls.commit_interval),
            session_timeout=_float(env, "STREAM_SESSION_TIMEOUT", cls.session_timeout),
            batch_max=_int(env, "STREAM_BATCH_MAX", cls.batch_max, 1),
            batch_within=_float(env, "STREAM_BATCH_WITHIN", cls.batch_within),
            batch_sessions=_int(env, "STREAM_BATCH_SESSIONS", cls.batch_sessions, 0),
            producer_linger=_float(env, "STREAM_PRODUCER_LINGER", cls.producer_linger),
            max_poll_interval=_float(env, "STREAM_MAX_POLL_INTERVAL", cls.max_poll_interval),
            rocksdb_write_buffer=_int(
                env, "STREAM_ROCKSDB_WRITE_BUFFER", cls.rocksdb_write_buffer, 1 << 20
            ),
            keep_records=_int(env, "STREAM_KEEP_RECORDS", cls.keep_records, 0),
            fetch_max_wait=_bounded(
                _float(env, "STREAM_FETCH_MAX_WAIT", cls.fetch_max_wait),
                "STREAM_FETCH_MAX_WAIT",
                0.001,
                30.0,
            ),
            standby_replicas=_int(env, "STREAM_STANDBY_REPLICAS", cls.standby_replicas),
            reseed_on_assign=_flag(env, "STREAM_RESEED_ON_ASSIGN", cls.reseed_on_assign),
            redis_check_interval=_float(
                env, "STREAM_REDIS_CHECK_INTERVAL", cls.redis_check_interval
            ),
            redis_max_pending=_int(env, "STREAM_REDIS_MAX_PENDING", cls.redis_max_pending, 1),
            redis_max_pending_bytes=_int(
                env, "STREAM_REDIS_MAX_PENDING_BYTES", cls.redis_max_pending_bytes, 1 << 20
            ),
            max_message_bytes=_int(env, "STREAM_MAX_MESSAGE_BYTES", cls.max_message_bytes, 1024),
            max_inflated_bytes=_int(
                env, "STREAM_MAX_INFLATED_BYTES", cls.max_inflated_bytes, 1 << 16
            ),
            max_buffered_bytes=_int(
                env, "STREAM_MAX_BUFFERED_BYTES", cls.max_buffered_bytes, 1 << 20
            ),
            max_event_bytes=_int(env, "STREAM_MAX_EVENT_BYTES", cls.max_event_bytes, 1024),
            max_key_bytes=_int(env, "STREAM_MAX_KEY_BYTES", cls.max_key_bytes, 1),
            max_segment_events=_int(env, "STREAM_MAX_SEGMENT_EVENTS", cls.max_segment_events, 1),
            max_error_chars=_int(env, "STREAM_MAX_ERROR_CHARS", cls.max_error_chars, 80),
            max_system_prompts=_int(env, "STREAM_MAX_SYSTEM_PROMPTS", cls.max_system_prompts, 1),
            resets=_flag(env, "STREAM_RESETS", cls.resets),
            stall_seconds=_float(env, "STREAM_STALL_SECONDS", cls.stall_seconds),
            session_ttl_seconds=_duration(env, "STREAM_SESSION_TTL", cls.session_ttl_seconds),
            web_port=_int(env, "STREAM_WEB_PORT", cls.web_port, 1),
            web_enabled=_flag(env, "STREAM_WEB_ENABLED", False),
            metrics_port=_int(env, "STREAM_METRICS_PORT", cls.metrics_port),
            metrics_bind=env.get("STREAM_METRICS_BIND", cls.metrics_bind),
            log_format=_choice(env, "STREAM_LOG_FORMAT", cls.log_format, ("text", "json")),
            gateway_port=_int(env, "STREAM_GATEWAY_PORT", cls.gateway_port),
            gateway_bind=env.get("STREAM_GATEWAY_BIND", cls.gateway_bind),
            gateway_cors_origins=tuple(
                o.strip()
                for o in env.get("STREAM_GATEWAY_CORS_ORIGINS", "").split(",")
                if o.strip()
            ),
            kafka=security,
        )
