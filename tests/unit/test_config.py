"""Settings from the environment (``stream.config``; the README's configuration table)."""

import ast
import dataclasses
import os
import re
import socket
from pathlib import Path
from typing import Any

import pytest

import stream.config
from stream.config import ConfigError, KafkaSecurity, Settings
from stream.environment import GROUPS, read, rows
from stream.output.layout import RedisLayout
from stream.redis_client import auth_options

ROOT = Path(stream.config.__file__).resolve().parents[1]


def field_of(name: str) -> str:
    """The Settings field a variable in the tables below sets: its name lowercased, without
    a STREAM_ or KAFKA_ prefix (STREAM_APP_ID -> app_id, REDIS_URL -> redis_url)."""
    return name.removeprefix("STREAM_").removeprefix("KAFKA_").lower()


# variable -> a value to set, which the field then holds as set ...
STRINGS: dict[str, str] = {
    "KAFKA_BOOTSTRAP_SERVERS": "k1:9092,k2:9092",
    "STREAM_APP_ID": "ctx-2",
    "STREAM_INPUT_TOPIC": "in",
    "STREAM_OUTPUT_TOPIC": "out",
    "STREAM_DLQ_TOPIC": "dead",
    "STREAM_STATE_DIR": "/var/lib/ctx",
    "REDIS_URL": "redis://r:6380/2",
    "REDIS_KEY_PREFIX": "t:",
    "REDIS_USERNAME": "svc",
    "REDIS_PASSWORD": "pw",
    "REDIS_LOADER_URL": "redis://loader:pw@r:6380/0",
    "STREAM_WORKER_ID": "w-1",
    "STREAM_GROUP_INSTANCE_ID": "context-stream-2",
    "STREAM_METRICS_BIND": "127.0.0.1",
    "STREAM_GATEWAY_BIND": "0.0.0.0",
}
# ... or parsed: variable -> (a value to set, what the field then holds)
PARSED: dict[str, tuple[str, Any]] = {
    "STREAM_GATEWAY_CORS_ORIGINS": (
        " https://a.example , ,https://b.example",
        ("https://a.example", "https://b.example"),
    ),
}
STRING_CASES = {name: (value, value) for name, value in STRINGS.items()} | PARSED
# variable -> minimum
INTEGERS: dict[str, int] = {
    "STREAM_PARTITIONS": 1,
    "STREAM_REPLICATION_FACTOR": 1,
    "REDIS_TTL_SECONDS": 0,
    "STREAM_GENERATION": 0,
    "STREAM_BATCH_MAX": 1,
    "STREAM_BATCH_SESSIONS": 0,
    "STREAM_STANDBY_REPLICAS": 0,
    "STREAM_MAX_MESSAGE_BYTES": 1024,
    "STREAM_MAX_INFLATED_BYTES": 1 << 16,
    "STREAM_MAX_BUFFERED_BYTES": 1 << 20,
    "STREAM_MAX_EVENT_BYTES": 1024,
    "STREAM_MAX_KEY_BYTES": 1,
    "STREAM_MAX_SEGMENT_EVENTS": 1,
    "STREAM_MAX_ERROR_CHARS": 80,
    "STREAM_MAX_SYSTEM_PROMPTS": 1,
    "STREAM_WEB_PORT": 1,
    "STREAM_METRICS_PORT": 0,
    "STREAM_GATEWAY_PORT": 0,
    "STREAM_REDIS_MAX_PENDING": 1,
    "STREAM_REDIS_MAX_PENDING_BYTES": 1 << 20,
    "STREAM_ROCKSDB_WRITE_BUFFER": 1 << 20,
    "STREAM_KEEP_RECORDS": 0,
}
FLOATS = {
    "STREAM_COMMIT_INTERVAL",
    "STREAM_SESSION_TIMEOUT",
    "STREAM_HEARTBEAT_INTERVAL",
    "STREAM_PRODUCER_LINGER",
    "STREAM_MAX_POLL_INTERVAL",
    "STREAM_FETCH_MAX_WAIT",
    "STREAM_REDIS_CHECK_INTERVAL",
    "STREAM_STALL_SECONDS",
}
FLAGS = {
    "STREAM_RESEED_ON_ASSIGN",
    "STREAM_WEB_ENABLED",
    "STREAM_RESETS",
    "REDIS_CLUSTER",
    "STREAM_CONSUMER_THREAD",
    "STREAM_STATIC_MEMBERSHIP",
    "STREAM_LEAVE_ON_STOP",
}
# Read with their own rules, tested below.
OTHERS = {
    "STREAM_LOG_FORMAT",
    "STREAM_ISOLATION_LEVEL",
    "REDIS_TLS_CAFILE",
    "KAFKA_SECURITY_PROTOCOL",
    "KAFKA_SASL_MECHANISM",
    "KAFKA_SASL_USERNAME",
    "KAFKA_SASL_PASSWORD",
    "KAFKA_SSL_CAFILE",
    "KAFKA_SSL_CERTFILE",
    "KAFKA_SSL_KEYFILE",
    "STREAM_SESSION_TTL",
    "STREAM_SWITCH_INTERVAL",
    "STREAM_LATENCY_BUDGET",
}
TESTED = set(STRINGS) | set(PARSED) | set(INTEGERS) | FLOATS | FLAGS | OTHERS


def variables_read() -> set[str]:
    """The variable names among the string constants of the modules that read them (their
    syntax tree, not their text)."""
    name = re.compile(r"(?:KAFKA|STREAM|REDIS)_[A-Z0-9_]+")
    return {
        node.value
        for module in ("config.py", "kafka_security.py")
        for node in ast.walk(ast.parse((ROOT / "stream" / module).read_text(encoding="utf-8")))
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and name.fullmatch(node.value)
    }


def test_every_variable_the_code_reads_is_tested_here() -> None:
    assert variables_read() == TESTED


def test_every_variable_is_in_the_readme_table() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    missing = sorted(name for name in variables_read() if f"`{name}`" not in readme)
    assert not missing


# --- defaults -----------------------------------------------------------------------------------


def test_an_empty_environment_gives_the_documented_defaults() -> None:
    settings = Settings.from_env({})
    assert settings.worker_id == f"{socket.gethostname()}-{os.getpid()}"
    assert dataclasses.replace(settings, worker_id="") == Settings()
    assert settings.dlq_topic == "dsh.session-events.dlq"
    assert settings.kafka == KafkaSecurity()
    assert (settings.partitions, settings.batch_max, settings.latency_budget) == (6, 10_000, 0.01)
    assert settings.batch_sessions == 100
    assert settings.redis_url == "redis://127.0.0.1:6379/0"
    assert (settings.reseed_on_assign, settings.web_enabled) == (True, False)
    assert settings.consumer_thread is False  # the consumer on the worker's loop (note 023)


@pytest.mark.parametrize(
    ("name", "default", "raw", "value", "refused"),
    [
        ("STREAM_FETCH_MAX_WAIT", 0.5, "0.2", 0.2, ("0", "-1", "31", "soon")),
        ("STREAM_LATENCY_BUDGET", 0.01, "0.005", 0.005, ("0", "-1", "1.5", "soon")),
        ("STREAM_SWITCH_INTERVAL", 0.0005, "0.005", 0.005, ("0", "-1", "0.5", "soon")),
    ],
)
def test_short_waits_are_short_by_default_and_bounded(
    name: str, default: float, raw: str, value: float, refused: tuple[str, ...]
) -> None:
    field = field_of(name)
    assert getattr(Settings.from_env({}), field) == default
    assert getattr(Settings.from_env({name: raw}), field) == value
    for bad in refused:
        with pytest.raises(ConfigError, match=name):
            Settings.from_env({name: bad})


@pytest.mark.parametrize(
    ("raw", "seconds"),
    [("7d", 7 * 86400), ("12h", 43200), ("90m", 5400), ("30s", 30), ("600", 600), ("0", 0)],
)
def test_the_session_ttl_is_a_duration(raw: str, seconds: int) -> None:
    settings = Settings.from_env({"STREAM_SESSION_TTL": raw})
    assert settings.session_ttl_seconds == seconds
    assert settings.limits.session_ttl == seconds * 1000


@pytest.mark.parametrize("raw", ["7w", "-1", "1.5d", "d", "7 d x"])
def test_a_session_ttl_that_is_not_a_duration_is_refused(raw: str) -> None:
    with pytest.raises(ConfigError, match="STREAM_SESSION_TTL"):
        Settings.from_env({"STREAM_SESSION_TTL": raw})


def test_sessions_expire_after_seven_days_by_default() -> None:
    assert Settings.from_env({}).limits.session_ttl == 7 * 86400 * 1000


def test_from_env_reads_os_environ_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STREAM_APP_ID", "from-os")
    assert Settings.from_env().app_id == "from-os"


def test_the_dead_letter_topic_follows_the_input_topic_unless_set() -> None:
    assert Settings.from_env({"STREAM_INPUT_TOPIC": "in"}).dlq_topic == "in.dlq"
    env = {"STREAM_INPUT_TOPIC": "in", "STREAM_DLQ_TOPIC": "dead"}
    assert Settings.from_env(env).dlq_topic == "dead"


# --- every variable -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(STRING_CASES))
def test_string_variables(name: str) -> None:
    value, expected = STRING_CASES[name]
    assert getattr(Settings.from_env({name: value}), field_of(name)) == expected


@pytest.mark.parametrize("name", sorted(INTEGERS))
def test_integer_variables(name: str) -> None:
    field, minimum = field_of(name), INTEGERS[name]
    assert getattr(Settings.from_env({name: str(minimum + 7)}), field) == minimum + 7
    assert getattr(Settings.from_env({name: str(minimum)}), field) == minimum
    default = getattr(Settings(), field)
    assert getattr(Settings.from_env({name: ""}), field) == default  # empty: the default
    with pytest.raises(ConfigError, match=f"^{name} must be an integer, got 'many'$"):
        Settings.from_env({name: "many"})
    with pytest.raises(ConfigError, match=f"^{name} must be an integer, got '1.5'$"):
        Settings.from_env({name: "1.5"})
    with pytest.raises(ConfigError, match=f"^{name} must be at least {minimum}, got "):
        Settings.from_env({name: str(minimum - 1)})


@pytest.mark.parametrize("name", sorted(FLOATS))
def test_number_variables(name: str) -> None:
    field = field_of(name)
    assert getattr(Settings.from_env({name: "0.25"}), field) == 0.25
    assert getattr(Settings.from_env({name: "3"}), field) == 3.0
    assert getattr(Settings.from_env({name: ""}), field) == getattr(Settings(), field)
    with pytest.raises(ConfigError, match=f"^{name} must be a number, got 'soon'$"):
        Settings.from_env({name: "soon"})


@pytest.mark.parametrize("name", sorted(FLAGS))
@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("1", True),
        ("true", True),
        ("YES", True),
        ("On", True),
        ("0", False),
        ("false", False),
        ("No", False),
        ("OFF", False),
    ],
)
def test_flags(name: str, value: str, expected: bool) -> None:
    assert getattr(Settings.from_env({name: value}), field_of(name)) is expected


@pytest.mark.parametrize("name", sorted(FLAGS))
def test_a_flag_that_is_neither_names_the_variable(name: str) -> None:
    field = field_of(name)
    assert getattr(Settings.from_env({name: ""}), field) is getattr(Settings(), field)
    with pytest.raises(ConfigError, match=f"^{name} must be 1/0, true/false, yes/no or on/off"):
        Settings.from_env({name: "maybe"})


def test_a_worker_named_in_the_environment_is_a_static_member_by_that_name() -> None:
    assert Settings.from_env({}).instance_id is None  # host-pid: new on every start
    assert Settings.from_env({"STREAM_WORKER_ID": "cs-1"}).instance_id == "cs-1"
    named = {"STREAM_WORKER_ID": "cs-1", "STREAM_GROUP_INSTANCE_ID": "blue-1"}
    assert Settings.from_env(named).instance_id == "blue-1"
    assert Settings.from_env({"STREAM_GROUP_INSTANCE_ID": "blue-1"}).instance_id == "blue-1"
    off = {"STREAM_WORKER_ID": "cs-1", "STREAM_STATIC_MEMBERSHIP": "0"}
    assert Settings.from_env(off).instance_id is None
    assert Settings().leave_on_stop is True  # a scale-down's partitions move at once


def test_log_format_is_a_choice() -> None:
    assert Settings.from_env({"STREAM_LOG_FORMAT": "JSON"}).log_format == "json"
    assert Settings.from_env({"STREAM_LOG_FORMAT": ""}).log_format == "text"
    with pytest.raises(ConfigError, match=r"^STREAM_LOG_FORMAT must be one of text, json"):
        Settings.from_env({"STREAM_LOG_FORMAT": "xml"})


def test_the_input_is_read_committed_unless_told_otherwise() -> None:
    assert Settings().isolation_level == "read_committed"
    uncommitted = Settings.from_env({"STREAM_ISOLATION_LEVEL": "READ_UNCOMMITTED"})
    assert uncommitted.isolation_level == "read_uncommitted"
    assert Settings.from_env({"STREAM_ISOLATION_LEVEL": ""}).isolation_level == "read_committed"
    with pytest.raises(ConfigError, match=r"^STREAM_ISOLATION_LEVEL must be one of read_comm"):
        Settings.from_env({"STREAM_ISOLATION_LEVEL": "committed"})


# --- Kafka security -----------------------------------------------------------------------------


def test_kafka_security_variables() -> None:
    env = {
        "KAFKA_SECURITY_PROTOCOL": "sasl_ssl",
        "KAFKA_SASL_MECHANISM": "scram-sha-512",
        "KAFKA_SASL_USERNAME": "svc",
        "KAFKA_SASL_PASSWORD": "pa55",
        "KAFKA_SSL_CAFILE": "/ca.pem",
        "KAFKA_SSL_CERTFILE": "/cert.pem",
        "KAFKA_SSL_KEYFILE": "/key.pem",
        "KAFKA_BOOTSTRAP_SERVERS": "k:9093",
    }
    settings = Settings.from_env(env)
    kafka = settings.kafka
    assert kafka == KafkaSecurity(
        "SASL_SSL", "SCRAM-SHA-512", "svc", "pa55", "/ca.pem", "/cert.pem", "/key.pem"
    )
    assert kafka.uses_ssl and kafka.uses_sasl
    assert settings.librdkafka() == {
        "bootstrap.servers": "k:9093",
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": "svc",
        "sasl.password": "pa55",
        "ssl.ca.location": "/ca.pem",
        "ssl.certificate.location": "/cert.pem",
        "ssl.key.location": "/key.pem",
    }


def test_plaintext_sends_no_credentials_to_librdkafka() -> None:
    settings = Settings.from_env({"KAFKA_SASL_USERNAME": "svc", "KAFKA_SASL_PASSWORD": "pw"})
    assert settings.librdkafka() == {
        "bootstrap.servers": "127.0.0.1:9092",
        "security.protocol": "PLAINTEXT",
    }
    assert not settings.kafka.uses_ssl and not settings.kafka.uses_sasl


def test_an_unknown_protocol_names_the_variable() -> None:
    with pytest.raises(ConfigError, match=r"^KAFKA_SECURITY_PROTOCOL: unknown protocol 'TLS'"):
        Settings.from_env({"KAFKA_SECURITY_PROTOCOL": "tls"})


@pytest.mark.parametrize("protocol", ["SASL_PLAINTEXT", "SASL_SSL"])
@pytest.mark.parametrize(
    "credentials", [{}, {"KAFKA_SASL_USERNAME": "svc"}, {"KAFKA_SASL_PASSWORD": "pw"}]
)
def test_sasl_needs_both_credentials(protocol: str, credentials: dict[str, str]) -> None:
    env = {"KAFKA_SECURITY_PROTOCOL": protocol, **credentials}
    with pytest.raises(ConfigError, match="needs KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD"):
        Settings.from_env(env)


def test_ssl_without_sasl_needs_no_credentials() -> None:
    settings = Settings.from_env({"KAFKA_SECURITY_PROTOCOL": "SSL", "KAFKA_SSL_CAFILE": "/ca"})
    assert settings.librdkafka()["ssl.ca.location"] == "/ca"
    assert "sasl.username" not in settings.librdkafka()


# --- Redis --------------------------------------------------------------------------------------


def test_redis_tls_cafile_needs_a_rediss_url() -> None:
    for url in (None, "redis://r:6379/0"):
        env = {"REDIS_TLS_CAFILE": "/ca.pem"} | ({} if url is None else {"REDIS_URL": url})
        with pytest.raises(ConfigError, match=r"^REDIS_TLS_CAFILE needs a rediss:// REDIS_URL"):
            Settings.from_env(env)
    settings = Settings.from_env({"REDIS_TLS_CAFILE": "/ca.pem", "REDIS_URL": "rediss://r/0"})
    assert settings.redis_tls_cafile == "/ca.pem"


def test_empty_credentials_count_as_unset() -> None:
    env = {"REDIS_USERNAME": "", "REDIS_PASSWORD": "", "KAFKA_SSL_CAFILE": ""}
    settings = Settings.from_env(env)
    assert auth_options(settings) == {}
    assert settings.kafka.ssl_cafile is None


def test_the_redis_layout_uses_the_key_prefix() -> None:
    layout = Settings.from_env({"REDIS_KEY_PREFIX": "t:"}).redis_layout
    assert layout == RedisLayout("t:")
    assert layout.session_key("s") == "t:session:s"


# --- secrets ------------------------------------------------------------------------------------

SECRET_ENV = {
    "REDIS_URL": "rediss://svc:url-s3cret@redis:6380/0",
    "REDIS_PASSWORD": "hunter2",
    "KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
    "KAFKA_SASL_USERNAME": "svc",
    "KAFKA_SASL_PASSWORD": "pa55word",
}


def test_no_password_in_repr() -> None:
    text = repr(Settings.from_env(SECRET_ENV))
    for secret in ("url-s3cret", "hunter2", "pa55word"):
        assert secret not in text
    assert "svc" in text  # user names are not secrets


def test_redis_cluster_gives_the_sharded_layout_and_needs_a_prefix_without_braces() -> None:
    settings = Settings.from_env({"REDIS_CLUSTER": "1", "REDIS_KEY_PREFIX": "t:"})
    assert settings.redis_cluster and settings.redis_layout == RedisLayout("t:", cluster=True)
    assert not Settings.from_env({}).redis_layout.cluster
    for prefix in ("{t}:", "t}:"):
        with pytest.raises(ConfigError, match=r"^REDIS_KEY_PREFIX must hold no"):
            Settings.from_env({"REDIS_CLUSTER": "1", "REDIS_KEY_PREFIX": prefix})
    assert Settings.from_env({"REDIS_KEY_PREFIX": "{t}:"}).redis_key_prefix == "{t}:"


# --- the table ----------------------------------------------------------------------------------


def test_every_field_but_the_kafka_security_is_a_row_of_the_table() -> None:
    unset = {f.name for f in dataclasses.fields(Settings)} - {name for name, _ in rows(Settings)}
    assert unset == {"kafka"}
    assert {f.name for f in dataclasses.fields(KafkaSecurity)} == {
        name for name, _ in rows(KafkaSecurity)
    }
    read_here = {row.env for _, row in (*rows(Settings), *rows(KafkaSecurity))}
    assert read_here == TESTED
    assert {row.group for _, row in (*rows(Settings), *rows(KafkaSecurity))} <= set(GROUPS)


def test_an_empty_address_or_path_is_taken_as_given_and_other_empty_values_as_unset() -> None:
    kept = [row.env for _, row in (*rows(Settings), *rows(KafkaSecurity)) if row.keep_empty]
    assert sorted(kept) == [
        "KAFKA_BOOTSTRAP_SERVERS",
        "KAFKA_SASL_MECHANISM",
        "KAFKA_SECURITY_PROTOCOL",
        "REDIS_KEY_PREFIX",
        "REDIS_LOADER_URL",
        "REDIS_URL",
        "STREAM_GATEWAY_BIND",
        "STREAM_METRICS_BIND",
        "STREAM_STATE_DIR",
    ]
    assert Settings.from_env({"STREAM_STATE_DIR": "", "STREAM_APP_ID": ""}).state_dir == ""
    assert Settings.from_env({"STREAM_APP_ID": ""}).app_id == "context-stream"
    with pytest.raises(ConfigError, match=r"^KAFKA_SECURITY_PROTOCOL: unknown protocol ''"):
        Settings.from_env({"KAFKA_SECURITY_PROTOCOL": ""})


def test_read_leaves_out_what_is_unset() -> None:
    assert read(Settings, {}) == {}
    assert read(Settings, {"STREAM_BATCH_MAX": "7", "STREAM_APP_ID": ""}) == {"batch_max": 7}
