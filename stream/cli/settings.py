"""The worker's environment, by group: what ``stream worker --help`` lists.

The names and meanings are here; every default shown is read from ``stream.config``'s
``Settings`` at the moment the help is drawn, so a changed default cannot leave the help
behind. ``tests/unit/cli/test_settings.py`` checks that every variable
``Settings.from_env`` reads is listed here, and that the README's configuration table
names the same variables.
"""

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from stream.config import Settings


@dataclass(frozen=True)
class Variable:
    name: str
    field: str | None  # the Settings attribute (dotted) whose default is shown
    meaning: str
    unit: str = ""
    shown: str | None = None  # a default that is not a plain value (derived, per host)


GROUPS: Final[tuple[tuple[str, tuple[Variable, ...]], ...]] = (
    (
        "Kafka",
        (
            Variable("KAFKA_BOOTSTRAP_SERVERS", "bootstrap_servers", "comma-separated host:port"),
            Variable(
                "KAFKA_SECURITY_PROTOCOL",
                "kafka.protocol",
                "PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL",
            ),
            Variable(
                "KAFKA_SASL_MECHANISM",
                "kafka.sasl_mechanism",
                "PLAIN, SCRAM-SHA-256, SCRAM-SHA-512",
            ),
            Variable("KAFKA_SASL_USERNAME", None, "SASL user"),
            Variable("KAFKA_SASL_PASSWORD", None, "SASL password (never logged)"),
            Variable("KAFKA_SSL_CAFILE", None, "CA bundle (unset: the system's public CAs)"),
            Variable("KAFKA_SSL_CERTFILE", None, "client certificate (mutual TLS only)"),
            Variable("KAFKA_SSL_KEYFILE", None, "client key (mutual TLS only)"),
        ),
    ),
    (
        "Topics and group",
        (
            Variable("STREAM_APP_ID", "app_id", "consumer group id and internal topic prefix"),
            Variable("STREAM_INPUT_TOPIC", "input_topic", "session events, key = session id"),
            Variable("STREAM_OUTPUT_TOPIC", "output_topic", "updates (compacted)"),
            Variable("STREAM_DLQ_TOPIC", None, "dead letters", shown="{STREAM_INPUT_TOPIC}.dlq"),
            Variable("STREAM_PARTITIONS", "partitions", "partitions of topics the worker creates"),
            Variable(
                "STREAM_REPLICATION_FACTOR",
                "replication_factor",
                "replicas of topics the worker creates",
            ),
        ),
    ),
    (
        "State",
        (
            Variable("STREAM_STATE_DIR", "state_dir", "RocksDB: one directory per worker process"),
            Variable(
                "STREAM_STANDBY_REPLICAS", "standby_replicas", "warm table copies on other workers"
            ),
            Variable("STREAM_GENERATION", "generation", "floor of the rebuild generation"),
            Variable("STREAM_WORKER_ID", None, "names this worker in logs", shown="host-pid"),
        ),
    ),
    (
        "Batches and the group",
        (
            Variable("STREAM_BATCH_MAX", "batch_max", "most events per batch"),
            Variable(
                "STREAM_BATCH_WITHIN", "batch_within", "how long an incomplete batch waits", "s"
            ),
            Variable(
                "STREAM_BATCH_SESSIONS",
                "batch_sessions",
                "sessions a batch's partitions hold together (0: all partitions)",
            ),
            Variable("STREAM_PRODUCER_LINGER", "producer_linger", "producer linger", "s"),
            Variable(
                "STREAM_ROCKSDB_WRITE_BUFFER",
                "rocksdb_write_buffer",
                "bytes per RocksDB memtable (two per partition)",
            ),
            Variable(
                "STREAM_KEEP_RECORDS", "keep_records", "decoded sessions kept in memory (~1.5 KB)"
            ),
            Variable(
                "STREAM_FETCH_MAX_WAIT", "fetch_max_wait", "longest fetch wait at the broker", "s"
            ),
            Variable("STREAM_COMMIT_INTERVAL", "commit_interval", "offset commit interval", "s"),
            Variable(
                "STREAM_SESSION_TIMEOUT",
                "session_timeout",
                "how soon the group notices a dead worker",
                "s",
            ),
            Variable(
                "STREAM_MAX_POLL_INTERVAL",
                "max_poll_interval",
                "longest time between polls before the group drops a member",
                "s",
            ),
        ),
    ),
    (
        "Limits (past one, input is dead-lettered or faults)",
        (
            Variable("STREAM_MAX_MESSAGE_BYTES", "max_message_bytes", "an input message"),
            Variable(
                "STREAM_MAX_INFLATED_BYTES",
                "max_inflated_bytes",
                "a compressed record batch, inflated",
            ),
            Variable(
                "STREAM_MAX_BUFFERED_BYTES",
                "max_buffered_bytes",
                "input waiting for a batch, in bytes",
            ),
            Variable("STREAM_MAX_EVENT_BYTES", "max_event_bytes", "one event, as compact JSON"),
            Variable("STREAM_MAX_KEY_BYTES", "max_key_bytes", "a session id"),
            Variable("STREAM_MAX_SEGMENT_EVENTS", "max_segment_events", "events in one segment"),
            Variable(
                "STREAM_MAX_SYSTEM_PROMPTS",
                "max_system_prompts",
                "retained system prompts per session",
            ),
            Variable("STREAM_MAX_ERROR_CHARS", "max_error_chars", "fault and dead-letter reasons"),
        ),
    ),
    (
        "Sessions",
        (
            Variable(
                "STREAM_RESETS",
                "resets",
                "take reset records (`stream produce --reset`) from the input topic",
            ),
            Variable(
                "STREAM_SESSION_TTL",
                "session_ttl_seconds",
                "idle time (event time) before a session expires; 7d, 12h, 90m; 0: never",
                "s",
            ),
            Variable(
                "STREAM_STALL_SECONDS",
                "stall_seconds",
                "a committed offset standing still this long while records wait: stalled",
                "s",
            ),
        ),
    ),
    (
        "Redis",
        (
            Variable(
                "REDIS_URL", "redis_url", "redis:// or rediss:// (TLS); a password is never logged"
            ),
            Variable("REDIS_USERNAME", None, "Redis AUTH user (ACL)"),
            Variable("REDIS_PASSWORD", None, "Redis AUTH password"),
            Variable("REDIS_TLS_CAFILE", None, "CA bundle (needs rediss://)"),
            Variable(
                "REDIS_LOADER_URL",
                None,
                "a user allowed FUNCTION LOAD",
                shown="REDIS_URL's user",
            ),
            Variable("REDIS_KEY_PREFIX", "redis_key_prefix", "prefix of every key and channel"),
            Variable(
                "REDIS_TTL_SECONDS",
                "redis_ttl_seconds",
                "expire idle sessions' keys (0: never)",
                "s",
            ),
            Variable("REDIS_CLUSTER", "redis_cluster", "REDIS_URL is a node of a Redis Cluster"),
            Variable(
                "STREAM_RESEED_ON_ASSIGN",
                "reseed_on_assign",
                "republish assigned partitions' rows to Redis after a rebalance",
            ),
            Variable(
                "STREAM_REDIS_CHECK_INTERVAL",
                "redis_check_interval",
                "how often the worker checks Redis still holds its data",
                "s",
            ),
            Variable(
                "STREAM_REDIS_MAX_PENDING",
                "redis_max_pending",
                "sessions queued while Redis is away before batches are held",
            ),
            Variable(
                "STREAM_REDIS_MAX_PENDING_BYTES",
                "redis_max_pending_bytes",
                "that queue's bytes before batches are held",
            ),
        ),
    ),
    (
        "Endpoints and logs",
        (
            Variable("STREAM_METRICS_PORT", "metrics_port", "/metrics, /livez, /readyz (0: off)"),
            Variable("STREAM_METRICS_BIND", "metrics_bind", "their listen address"),
            Variable("STREAM_LOG_FORMAT", "log_format", "text or json"),
            Variable("STREAM_WEB_ENABLED", "web_enabled", "Faust's own web server"),
            Variable("STREAM_WEB_PORT", "web_port", "its port (bound to 127.0.0.1)"),
            Variable("STREAM_GATEWAY_PORT", "gateway_port", "`stream serve`'s port"),
            Variable("STREAM_GATEWAY_BIND", "gateway_bind", "`stream serve`'s listen address"),
            Variable(
                "STREAM_GATEWAY_CORS_ORIGINS",
                "gateway_cors_origins",
                "origins allowed to call the gateway",
            ),
        ),
    ),
)


def variables() -> Iterator[Variable]:
    for _, group in GROUPS:
        yield from group


def _value(value: Any) -> str:
    if value is None or value == "" or value == ():
        return "unset"
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, tuple):
        return ",".join(str(item) for item in value)
    return str(value)


def default_text(variable: Variable, defaults: Settings | None = None) -> str:
    """The default as the environment would spell it, read from ``Settings``."""
    if variable.shown is not None:
        return variable.shown
    if variable.field is None:
        return "unset"
    value: Any = defaults or Settings()
    for part in variable.field.split("."):
        value = getattr(value, part, None)
    text = _value(value)
    return f"{text} {variable.unit}" if variable.unit and text != "unset" else text


def epilog(width: int = 100) -> str:
    """The settings by group, each with its default: ``stream worker --help``'s tail."""
    defaults = Settings()
    lines = ['environment (defaults in brackets; README, "Configuration", says more):']
    for title, group in GROUPS:
        lines.append(f"  {title}:")
        for variable in group:
            head = f"    {variable.name} [{default_text(variable, defaults)}]"
            lines.append(f"{head}  {variable.meaning}" if len(head) < width // 2 else head)
            if len(head) >= width // 2:
                lines.append(f"        {variable.meaning}")
    return "\n".join(lines)


class Recorder(Mapping[str, str]):
    """An empty environment that remembers every name looked up in it."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def __getitem__(self, name: str) -> str:
        self.names.append(name)
        raise KeyError(name)

    def get(self, name: str, default: Any = None) -> Any:
        self.names.append(name)
        return default

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


def read_by_worker() -> list[str]:
    """The variables ``Settings.from_env`` reads, in the order it reads them."""
    recorder = Recorder()
    Settings.from_env(recorder)
    return list(dict.fromkeys(recorder.names))
