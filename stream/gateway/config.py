"""The gateway's settings, from the environment (docs/gateway.md has the table).

The shared ``Settings`` keep what the gateway has in common with the rest of the service
(Redis, its port, bind address and CORS origins); everything only the gateway reads is
here, in one frozen value: authentication, the allowed ``Host`` names, the limits.

Safe by default: with no keys the gateway serves only on loopback (``bind_refusal``), and
a browser on another site cannot reach a loopback gateway through DNS rebinding because
the ``Host`` header must be one of ``allowed_hosts``.
"""

import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

from stream.config import ConfigError, Settings
from stream.gateway.store import SCAN

AUTH_MODES: Final = ("jwt", "none")
LOOPBACK_HOSTS: Final = ("localhost", "127.0.0.1", "[::1]")


def _text(env: Mapping[str, str], name: str) -> str | None:
    raw = env.get(name, "").strip()
    return raw or None


def _int(env: Mapping[str, str], name: str, default: int, minimum: int = 0) -> int:
    raw = _text(env, name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise ConfigError(f"{name} must be at least {minimum}, got {value}")
    return value


def _seconds(env: Mapping[str, str], name: str, default: float, minimum: float = 0.0) -> float:
    raw = _text(env, name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a number of seconds, got {raw!r}") from None
    if not minimum <= value < float("inf"):  # also refuses NaN
        raise ConfigError(f"{name} must be at least {minimum:g}, got {raw!r}")
    return value


def _names(raw: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(n.strip().lower() for n in raw.split(",") if n.strip()))


def host_name(address: str) -> str:
    """An address as it appears in a ``Host`` header without its port (IPv6 in brackets)."""
    address = address.strip().lower()
    if ":" in address and not address.startswith("["):
        return f"[{address}]"
    return address


def is_loopback(bind: str) -> bool:
    if bind.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(bind.strip().strip("[]")).is_loopback
    except ValueError:
        return False  # a host name other than localhost: it may resolve anywhere


def default_allowed_hosts(bind: str) -> tuple[str, ...]:
    """Loopback names, plus the bind address when it is one particular address."""
    extra: tuple[str, ...] = ()
    if bind.strip() not in ("", "0.0.0.0", "::", "[::]"):
        extra = (host_name(bind),)
    return tuple(dict.fromkeys((*LOOPBACK_HOSTS, *extra)))


@dataclass(frozen=True)
class GatewayConfig:
    """What one gateway process runs with. Defaults: the loopback gateway of ``make demo``."""

    # The stream loop.
    heartbeat: float = 15.0  # seconds between SSE comment lines on a quiet stream
    queue_size: int = 256  # frames a client may lag behind before it is dropped
    ready_timeout: float = 5.0  # how long a new stream waits for the subscription
    retry_ms: int = 1000  # EventSource reconnect delay after a stream ends
    expired_retry_ms: int = 3_600_000  # the last ``retry:`` after ``event: expired``
    cors_origins: tuple[str, ...] = ()
    # Authentication (``auth.py``): ``jwt`` needs ``jwt_keys``.
    auth: str = "none"
    auth_explicit: bool = False  # STREAM_GATEWAY_AUTH was set (``none`` on purpose)
    jwt_keys: str | None = None  # a JWKS file, a PEM public key or certificate, an https URL
    jwt_audience: str | None = None
    jwt_issuer: str | None = None
    jwt_claim: str = "sessions"
    jwt_leeway: float = 30.0
    jwt_max_lifetime: float = 86_400.0  # longest ``exp - iat`` accepted (0: no cap)
    # Requests.
    allowed_hosts: tuple[str, ...] = LOOPBACK_HOSTS
    max_query_bytes: int = 2048  # longer query strings: 414
    max_line_bytes: int = 8190  # the request line and each header line (aiohttp's parser)
    max_field_bytes: int = 8190  # one header's value: room for a large JWT
    header_timeout: float = 15.0  # a request's line and headers must arrive within this
    max_connections: int = 4096  # open connections per process; more: 503 (0: no cap)
    max_connections_per_address: int = 1024  # of one client address; more: 503 (0: no cap)
    # Streams.
    max_streams_per_subject: int = 64  # concurrent streams of one token subject (0: no cap)
    max_streams_per_address: int = 512  # concurrent streams of one client address (0: no cap)
    stream_idle_seconds: float = 60.0  # a write blocked this long (client reads nothing): closed
    # Listings: what one ``GET /sessions`` may cost Redis.
    list_scan: int = SCAN  # recent-set entries a listing looks at (one ZREVRANGE)
    list_limit: int = 500  # most rows one listing returns (one pipeline of HGETs)
    # Prometheus: /metrics on this port of STREAM_METRICS_BIND (0: off), never the public one.
    metrics_port: int = 0

    @property
    def auth_on(self) -> bool:
        return self.auth == "jwt"

    @classmethod
    def from_env(
        cls, settings: Settings, env: Mapping[str, str] | None = None, **changes: Any
    ) -> "GatewayConfig":
        """Read the environment; ``changes`` (the command line's) win. Raises ConfigError."""
        env = os.environ if env is None else env
        keys = _text(env, "STREAM_GATEWAY_JWT_KEYS")
        mode = _text(env, "STREAM_GATEWAY_AUTH")
        if mode is not None and mode.lower() not in AUTH_MODES:
            raise ConfigError(f"STREAM_GATEWAY_AUTH must be jwt or none, got {mode!r}")
        auth = mode.lower() if mode else ("jwt" if keys else "none")
        if auth == "jwt" and keys is None:
            raise ConfigError(
                "STREAM_GATEWAY_AUTH=jwt needs STREAM_GATEWAY_JWT_KEYS (a JWKS file,"
                " a PEM public key, or an https:// JWKS URL)"
            )
        if keys is not None and keys.startswith("http://"):
            raise ConfigError("STREAM_GATEWAY_JWT_KEYS: a JWKS URL must be https://")
        claim = _text(env, "STREAM_GATEWAY_JWT_CLAIM") or cls.jwt_claim
        hosts = _text(env, "STREAM_GATEWAY_ALLOWED_HOSTS")
        bind = changes.pop("bind", None) or settings.gateway_bind
        config = cls(
            cors_origins=settings.gateway_cors_origins,
            auth=auth,
            auth_explicit=mode is not None,
            jwt_keys=keys,
            jwt_audience=_text(env, "STREAM_GATEWAY_JWT_AUDIENCE"),
            jwt_issuer=_text(env, "STREAM_GATEWAY_JWT_ISSUER"),
            jwt_claim=claim,
            jwt_leeway=_seconds(env, "STREAM_GATEWAY_JWT_LEEWAY", cls.jwt_leeway),
            jwt_max_lifetime=_seconds(env, "STREAM_GATEWAY_JWT_MAX_LIFETIME", cls.jwt_max_lifetime),
            allowed_hosts=_names(hosts) if hosts else default_allowed_hosts(bind),
            max_query_bytes=_int(env, "STREAM_GATEWAY_MAX_QUERY_BYTES", cls.max_query_bytes, 256),
            max_field_bytes=_int(env, "STREAM_GATEWAY_MAX_HEADER_BYTES", cls.max_field_bytes, 1024),
            header_timeout=_seconds(
                env, "STREAM_GATEWAY_HEADER_TIMEOUT", cls.header_timeout, minimum=0.1
            ),
            max_connections=_int(env, "STREAM_GATEWAY_MAX_CONNECTIONS", cls.max_connections),
            max_connections_per_address=_int(
                env,
                "STREAM_GATEWAY_MAX_CONNECTIONS_PER_ADDRESS",
                cls.max_connections_per_address,
            ),
            max_streams_per_subject=_int(
                env, "STREAM_GATEWAY_MAX_STREAMS_PER_SUBJECT", cls.max_streams_per_subject
            ),
            max_streams_per_address=_int(
                env, "STREAM_GATEWAY_MAX_STREAMS_PER_ADDRESS", cls.max_streams_per_address
            ),
            stream_idle_seconds=_seconds(
                env, "STREAM_GATEWAY_STREAM_IDLE_SECONDS", cls.stream_idle_seconds
            ),
            list_scan=_int(env, "STREAM_GATEWAY_LIST_SCAN", cls.list_scan, 1),
            metrics_port=_int(env, "STREAM_GATEWAY_METRICS_PORT", cls.metrics_port),
        )
        return replace(config, **changes)

    @classmethod
    def from_settings(cls, settings: Settings, **changes: Any) -> "GatewayConfig":
        """``from_env`` with the process environment (what ``stream serve`` calls)."""
        return cls.from_env(settings, None, **changes)


def bind_refusal(config: GatewayConfig, bind: str) -> str | None:
    """Why the gateway must not start on ``bind``, or ``None``: without keys it serves
    loopback only, unless ``STREAM_GATEWAY_AUTH=none`` says so on purpose."""
    if config.auth_on or is_loopback(bind) or config.auth_explicit:
        return None
    return (
        f"refusing to serve {bind} without authentication: set STREAM_GATEWAY_JWT_KEYS"
        " (a JWKS file, a PEM public key or an https:// JWKS URL), bind a loopback"
        " address, or set STREAM_GATEWAY_AUTH=none to serve every session to anyone who"
        " can reach it"
    )
