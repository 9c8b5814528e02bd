"""The gateway's settings from the environment, and when it must refuse to start."""

import re

import pytest

from stream.config import ConfigError, Settings
from stream.gateway.config import (
    GatewayConfig,
    bind_refusal,
    default_allowed_hosts,
    is_loopback,
    web_origin,
)

SETTINGS = Settings()


def test_defaults_are_the_loopback_gateway_without_authentication() -> None:
    config = GatewayConfig.from_env(SETTINGS, {})
    assert config.auth == "none" and not config.auth_explicit and not config.auth_on
    assert config.allowed_hosts == ("localhost", "127.0.0.1", "[::1]")
    assert config.jwt_claim == "sessions" and config.jwt_leeway == 30.0
    assert (config.max_streams_per_subject, config.max_streams_per_address) == (64, 512)
    assert 0 < config.header_timeout <= 30 and config.max_connections == 4096
    assert config.max_connections_per_address == 1024
    assert config.jwt_max_lifetime == 86_400


def test_keys_turn_authentication_on() -> None:
    env = {
        "STREAM_GATEWAY_JWT_KEYS": "/keys/jwks.json",
        "STREAM_GATEWAY_JWT_AUDIENCE": "ctx",
        "STREAM_GATEWAY_JWT_ISSUER": "https://idp",
        "STREAM_GATEWAY_JWT_CLAIM": "ctx_sessions",
        "STREAM_GATEWAY_JWT_LEEWAY": "5",
        "STREAM_GATEWAY_ALLOWED_HOSTS": "ctx.example.com, .internal ,CTX.example.com",
        "STREAM_GATEWAY_MAX_STREAMS_PER_SUBJECT": "3",
        "STREAM_GATEWAY_MAX_STREAMS_PER_ADDRESS": "0",
        "STREAM_GATEWAY_STREAM_IDLE_SECONDS": "7.5",
        "STREAM_GATEWAY_LIST_SCAN": "200",
        "STREAM_GATEWAY_MAX_QUERY_BYTES": "4096",
        "STREAM_GATEWAY_HEADER_TIMEOUT": "2.5",
        "STREAM_GATEWAY_MAX_CONNECTIONS": "100",
        "STREAM_GATEWAY_MAX_CONNECTIONS_PER_ADDRESS": "0",
        "STREAM_GATEWAY_JWT_MAX_LIFETIME": "3600",
    }
    config = GatewayConfig.from_env(SETTINGS, env)
    assert config.auth_on and config.jwt_keys == "/keys/jwks.json"
    assert (config.jwt_audience, config.jwt_issuer) == ("ctx", "https://idp")
    assert (config.jwt_claim, config.jwt_leeway) == ("ctx_sessions", 5.0)
    assert config.allowed_hosts == ("ctx.example.com", ".internal")
    assert (config.max_streams_per_subject, config.max_streams_per_address) == (3, 0)
    assert (config.stream_idle_seconds, config.list_scan, config.max_query_bytes) == (
        7.5,
        200,
        4096,
    )
    assert (config.header_timeout, config.max_connections, config.jwt_max_lifetime) == (
        2.5,
        100,
        3600.0,
    )
    assert config.max_connections_per_address == 0
    off = GatewayConfig.from_env(SETTINGS, env | {"STREAM_GATEWAY_AUTH": "none"})
    assert not off.auth_on and off.auth_explicit


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"STREAM_GATEWAY_AUTH": "jwt"}, "needs STREAM_GATEWAY_JWT_KEYS"),
        ({"STREAM_GATEWAY_AUTH": "basic"}, "jwt or none"),
        ({"STREAM_GATEWAY_JWT_KEYS": "http://idp/jwks"}, "https"),
        ({"STREAM_GATEWAY_JWT_LEEWAY": "-1"}, "at least 0"),
        ({"STREAM_GATEWAY_JWT_LEEWAY": "nan"}, "at least 0"),
        ({"STREAM_GATEWAY_MAX_STREAMS_PER_SUBJECT": "x"}, "integer"),
        ({"STREAM_GATEWAY_LIST_SCAN": "0"}, "at least 1"),
        ({"STREAM_GATEWAY_HEADER_TIMEOUT": "0"}, "at least 0.1"),  # 0 would mean never
        ({"STREAM_GATEWAY_HEADER_TIMEOUT": "inf"}, "at least 0.1"),
        ({"STREAM_GATEWAY_MAX_CONNECTIONS": "-1"}, "at least 0"),
        ({"STREAM_GATEWAY_JWT_MAX_LIFETIME": "a day"}, "seconds"),
    ],
)
def test_bad_settings_are_configuration_errors(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        GatewayConfig.from_env(SETTINGS, env)


def test_the_bind_address_is_an_allowed_host() -> None:
    assert default_allowed_hosts("10.0.0.7")[-1] == "10.0.0.7"
    assert default_allowed_hosts("fd00::7")[-1] == "[fd00::7]"
    assert default_allowed_hosts("0.0.0.0") == ("localhost", "127.0.0.1", "[::1]")
    config = GatewayConfig.from_env(SETTINGS, {}, bind="192.168.1.5")
    assert "192.168.1.5" in config.allowed_hosts


@pytest.mark.parametrize(
    ("bind", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.3.4.5", True),
        ("::1", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("10.1.2.3", False),
        ("gateway.internal", False),
    ],
)
def test_loopback(bind: str, loopback: bool) -> None:
    assert is_loopback(bind) is loopback


def test_without_keys_only_loopback_unless_none_is_explicit() -> None:
    implicit = GatewayConfig.from_env(SETTINGS, {})
    assert bind_refusal(implicit, "127.0.0.1") is None
    refusal = bind_refusal(implicit, "0.0.0.0")
    assert refusal is not None and "STREAM_GATEWAY_JWT_KEYS" in refusal
    assert "STREAM_GATEWAY_AUTH=none" in refusal
    explicit = GatewayConfig.from_env(SETTINGS, {"STREAM_GATEWAY_AUTH": "none"})
    assert bind_refusal(explicit, "0.0.0.0") is None
    keyed = GatewayConfig.from_env(SETTINGS, {"STREAM_GATEWAY_JWT_KEYS": "/k"})
    assert bind_refusal(keyed, "0.0.0.0") is None


def test_embed_origins_are_read_as_a_browser_writes_an_origin() -> None:
    assert GatewayConfig.from_env(SETTINGS, {}).embed_origins == ()  # today's page
    env = {
        "STREAM_GATEWAY_EMBED_ORIGINS": (
            " https://App.Example.com:443, http://127.0.0.1:8081,,HTTPS://app.example.com"
            " , http://intranet:80"
        )
    }
    config = GatewayConfig.from_env(SETTINGS, env)
    assert config.embed_origins == (
        "https://app.example.com",
        "http://127.0.0.1:8081",
        "http://intranet",
    )


@pytest.mark.parametrize(
    ("origin", "message"),
    [
        ("*", "no wildcards"),
        ("https://*.example.com", "no wildcards"),
        ("app.example.com", "http:// or https://"),
        ("null", "http:// or https://"),
        ("file:///etc", "http:// or https://"),
        ("https:/app.example.com", "http:// or https://"),
        ("https://app.example.com/", "no path"),
        ("https://app.example.com/embed", "no path"),
        ("https://app.example.com?x", "no path"),
        ("https://app.example.com#", "no path"),
        ("https://user@app.example.com", "no user name"),
        ("https://app.example.com:0", "1 to 65535"),
        ("https://app.example.com:70000", "1 to 65535"),
        ("https://app.example.com:http", "1 to 65535"),
        ("http://[::1]:8080", "IPv6"),
        ("https://app.example.com https://b.example.com", "spaces"),
        ("https://app;example.com", "not a host name"),
        ("https://app'.example.com", "not a host name"),
        ("https://-app.example.com", "not a host name"),
        ("https://app..example.com", "not a host name"),
        ("https://bücher.example", "xn--"),
    ],
)
def test_bad_embed_origins_stop_the_gateway_naming_the_fault(origin: str, message: str) -> None:
    env = {"STREAM_GATEWAY_EMBED_ORIGINS": f"https://ok.example.com,{origin}"}
    with pytest.raises(ConfigError, match=re.escape(message)) as refused:
        GatewayConfig.from_env(SETTINGS, env)
    assert "STREAM_GATEWAY_EMBED_ORIGINS" in str(refused.value)
    assert repr(origin.strip()) in str(refused.value)


def test_a_config_built_in_code_holds_canonical_origins_only() -> None:
    assert web_origin("https://app.example.com") == "https://app.example.com"
    with pytest.raises(
        ConfigError,
        match=re.escape("write 'https://APP.example.com:443' as 'https://app.example.com'"),
    ):
        GatewayConfig(embed_origins=("https://APP.example.com:443",))
    with pytest.raises(ConfigError, match="no path"):
        GatewayConfig(embed_origins=("https://app.example.com/",))


def test_gateway_values_are_read_stripped_and_a_blank_one_is_unset() -> None:
    config = GatewayConfig.from_env(
        SETTINGS,
        {
            "STREAM_GATEWAY_LIST_SCAN": " 200 ",
            "STREAM_GATEWAY_JWT_CLAIM": "   ",
            "STREAM_GATEWAY_AUTH": " NONE ",
            "STREAM_GATEWAY_JWT_AUDIENCE": " ctx ",
        },
    )
    assert (config.list_scan, config.jwt_claim, config.jwt_audience) == (200, "sessions", "ctx")
    assert config.auth == "none" and config.auth_explicit
    with pytest.raises(
        ConfigError, match=r"^STREAM_GATEWAY_LIST_SCAN must be an integer, got 'x'$"
    ):
        GatewayConfig.from_env(SETTINGS, {"STREAM_GATEWAY_LIST_SCAN": " x "})
    with pytest.raises(
        ConfigError, match=r"^STREAM_GATEWAY_AUTH must be jwt or none, got 'Basic'$"
    ):
        GatewayConfig.from_env(SETTINGS, {"STREAM_GATEWAY_AUTH": " Basic "})
