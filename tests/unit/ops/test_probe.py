"""The start-up probes' cause mapping: librdkafka's error reports and redis-py's errors,
as they really read (copied from runs against a SASL_SSL broker and an ACL'd Redis), to
one line naming the variable to fix and the reason."""

import pytest

from stream.config import Settings
from stream.ops.probe import authorization, kafka_cause, redis_cause, settled

BOOT = "127.0.0.1:9094"
AUTH = (
    "_AUTHENTICATION",
    "sasl_ssl://127.0.0.1:9094/bootstrap: SASL authentication error: Authentication failed"
    " during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512"
    " (after 417ms in state AUTH_REQ)",
)
MECHANISM = (
    "_AUTHENTICATION",
    "sasl_ssl://127.0.0.1:9094/bootstrap: SASL PLAIN mechanism handshake failed: Broker:"
    " Unsupported SASL mechanism: broker's supported mechanisms: SCRAM-SHA-512,SCRAM-SHA-256"
    " (after 302ms in state AUTH_HANDSHAKE)",
)
CERTIFICATE = (
    "_SSL",
    "sasl_ssl://127.0.0.1:9094/bootstrap: SSL handshake failed: error:0A000086:SSL"
    " routines::certificate verify failed: broker certificate could not be verified, verify"
    " that ssl.ca.location is correctly configured (after 23ms in state SSL_HANDSHAKE)",
)
TLS_TO_PLAINTEXT = (
    "_TRANSPORT",
    "sasl_ssl://127.0.0.1:9092/bootstrap: SSL handshake failed: Disconnected: SSL connection"
    " closed by peer: connecting to a PLAINTEXT broker listener? (after 10ms in state"
    " SSL_HANDSHAKE)",
)
RESOLVE = (
    "_RESOLVE",
    "nohost.invalid:9092/bootstrap: Failed to resolve 'nohost.invalid:9092': Name or service"
    " not known (after 1ms in state CONNECT)",
)
REFUSED = (
    "_TRANSPORT",
    "127.0.0.1:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed: Connection refused (after 0ms"
    " in state CONNECT)",
)
DOWN = ("_ALL_BROKERS_DOWN", "1/1 brokers are down")


@pytest.mark.parametrize(
    ("reports", "variables", "reason"),
    [
        ([AUTH, DOWN], "KAFKA_SASL_USERNAME, KAFKA_SASL_PASSWORD", "invalid credentials"),
        ([MECHANISM, DOWN], "KAFKA_SASL_MECHANISM", "Unsupported SASL mechanism"),
        ([CERTIFICATE, DOWN], "KAFKA_SSL_CAFILE", "certificate verify failed"),
        ([TLS_TO_PLAINTEXT, DOWN], "KAFKA_SECURITY_PROTOCOL", "plaintext listener"),
        ([RESOLVE, DOWN], "KAFKA_BOOTSTRAP_SERVERS", "DNS lookup failed"),
        ([REFUSED, DOWN], "KAFKA_BOOTSTRAP_SERVERS", "connection refused"),
        # A refused port beside a name that does not resolve: the DNS failure is the news.
        ([REFUSED, RESOLVE, DOWN], "KAFKA_BOOTSTRAP_SERVERS", "DNS lookup failed"),
        ([DOWN], "KAFKA_BOOTSTRAP_SERVERS, KAFKA_SECURITY_PROTOCOL", "no broker answered"),
    ],
)
def test_each_kafka_failure_names_its_variable_and_reason(
    reports: list[tuple[str, str]], variables: str, reason: str
) -> None:
    cause = kafka_cause(reports, BOOT, "SASL_SSL", 8.0)
    assert cause.variables == variables
    assert reason in cause.reason
    line = cause.line()
    assert line.startswith("cannot ") and f"Kafka at {BOOT} ({variables}): " in line
    assert "/bootstrap:" not in line and "after " not in line  # librdkafka's noise is cut


def test_a_login_refusal_is_use_and_an_address_is_reach() -> None:
    assert kafka_cause([AUTH], BOOT, "SASL_SSL", 8).line().startswith("cannot use Kafka")
    assert kafka_cause([REFUSED], BOOT, "SASL_SSL", 8).line().startswith("cannot reach Kafka")


def test_the_probe_stops_as_soon_as_waiting_cannot_help() -> None:
    assert settled([AUTH])  # the same login goes to every broker
    assert settled([CERTIFICATE])
    assert settled([REFUSED, DOWN]) and settled([RESOLVE, DOWN])
    assert not settled([REFUSED])  # another bootstrap server may still answer
    assert not settled([DOWN])  # nothing said why: wait for the broker or the deadline


def test_a_plaintext_client_at_a_tls_listener_hears_nothing_and_is_told_so() -> None:
    cause = kafka_cause([DOWN], BOOT, "PLAINTEXT", 8.0)
    assert "no broker answered within 8 s" in cause.reason
    assert "KAFKA_SECURITY_PROTOCOL" in cause.reason


SASL = Settings.from_env(
    {
        "KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "KAFKA_SASL_USERNAME": "stream-worker",
        "KAFKA_SASL_PASSWORD": "pw",
    }
)


@pytest.mark.parametrize(
    "text",
    [
        "cannot read ctx-control: GROUP_AUTHORIZATION_FAILED",
        "cannot create topic t: Broker: Topic authorization failed",
        "cannot create topic t: Authorization failed.",
    ],
)
def test_an_authorization_refusal_names_the_principal(text: str) -> None:
    said = authorization(text, SASL)
    assert said is not None and said.startswith("not authorized")
    assert "User:stream-worker (KAFKA_SASL_USERNAME)" in said and text.rstrip(".") in said
    assert authorization("Broker: Leader not available", SASL) is None


def _redis(**env: str) -> Settings:
    return Settings.from_env(env)


@pytest.mark.parametrize(
    ("kind", "message", "env", "variables", "reason"),
    [
        (
            "ConnectionError",
            "Error 111 connecting to 127.0.0.1:1. Connection refused.",
            {"REDIS_URL": "redis://127.0.0.1:1/0"},
            "REDIS_URL",
            "connection refused",
        ),
        (
            "ConnectionError",
            "Error -2 connecting to nohost.invalid:6379. Name or service not known.",
            {"REDIS_URL": "redis://nohost.invalid:6379/0"},
            "REDIS_URL",
            "DNS lookup failed",
        ),
        (
            "AuthenticationError",
            "invalid username-password pair or user is disabled.",
            {"REDIS_USERNAME": "u", "REDIS_PASSWORD": "p"},
            "REDIS_USERNAME, REDIS_PASSWORD",
            "login refused",
        ),
        (
            "AuthenticationError",
            "invalid username-password pair or user is disabled.",
            {"REDIS_URL": "redis://u:secret@127.0.0.1:6379/0"},
            "REDIS_URL",
            "login refused",
        ),
        (
            "AuthenticationError",
            "HELLO must be called with the client already authenticated, otherwise ...",
            {},
            "REDIS_USERNAME, REDIS_PASSWORD",
            "wants a login",
        ),
        (
            "NoPermissionError",
            "this user has no permissions to run the 'hgetall' command",
            {"REDIS_USERNAME": "context-stream", "REDIS_PASSWORD": "p"},
            "REDIS_USERNAME",
            "user 'context-stream' lacks a permission",
        ),
        (
            "ConnectionError",
            "Error 1 connecting to 127.0.0.1:6380. [SSL: CERTIFICATE_VERIFY_FAILED] certificate"
            " verify failed: self-signed certificate in certificate chain (_ssl.c:1006).",
            {"REDIS_URL": "rediss://127.0.0.1:6380/0"},
            "REDIS_TLS_CAFILE",
            "TLS handshake failed",
        ),
        (
            "TimeoutError",
            "Timeout connecting to server",
            {"REDIS_URL": "rediss://127.0.0.1:6379/0"},
            "REDIS_URL",
            "rediss:// to a plaintext port?",
        ),
        (
            "ConnectionError",
            "Error while reading from 127.0.0.1:6380 : (104, 'Connection reset by peer')",
            {"REDIS_URL": "redis://127.0.0.1:6380/0"},
            "REDIS_URL",
            "it needs rediss://",
        ),
    ],
)
def test_each_redis_failure_names_its_variable_and_reason(
    kind: str, message: str, env: dict[str, str], variables: str, reason: str
) -> None:
    cause = redis_cause(kind, message, _redis(**env))
    assert (cause.service, cause.variables) == ("Redis", variables)
    assert reason in cause.reason
    assert "secret" not in cause.line()  # the URL is shown redacted


@pytest.mark.parametrize(
    ("kind", "message", "silent"),
    [
        ("ConnectionError", "Error 111 connecting to 127.0.0.1:1. Connection refused.", True),
        ("TimeoutError", "Timeout connecting to server", True),
        (
            "ConnectionError",
            "Error -2 connecting to x.invalid:6379. Name or service not known.",
            False,
        ),
        ("AuthenticationError", "invalid username-password pair or user is disabled.", False),
    ],
)
def test_only_a_silent_redis_may_be_an_outage(kind: str, message: str, silent: bool) -> None:
    """Refused or unanswered at a name that resolves: a wrong port or an outage (the worker
    asks whether its group has run). A name that does not resolve or a refused login is a
    setting, whatever the group did."""
    assert redis_cause(kind, message, _redis()).silent is silent
