"""The gateway's settings, from the environment (docs/gateway.md has the table).

The shared ``Settings`` keep what the gateway has in common with the rest of the service
(Redis, its port, bind address and CORS origins); everything only the gateway reads is
here, in one frozen value: authentication, the allowed ``Host`` names, the limits.

Safe by default: with no keys the gateway serves only on loopback (``bind_refusal``), and
a browser on another site cannot reach a loopback gateway through DNS rebinding because
the ``Host`` header must be one of ``allowed_hosts``.

``embed_origins`` are the app origins that may frame or open the page and hand it a
token (docs/gateway.md, "Embedding the page in an app"): each one exactly as a browser
writes an origin, checked here so that no value can reach the page's headers unchecked.
"""

import ipaddress
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Final
from urllib.parse import urlsplit

from stream.config import ConfigError, Settings
from stream.environment import GATEWAY, integer, read, seconds, setting
from stream.gateway.store import SCAN

AUTH_MODES: Final = ("jwt", "none")
LOOPBACK_HOSTS: Final = ("localhost", "127.0.0.1", "[::1]")
EMBED_ORIGINS: Final = "STREAM_GATEWAY_EMBED_ORIGINS"
DEFAULT_PORTS: Final = {"http": 80, "https": 443}
_LABEL: Final = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")


def _names(raw: str, name: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(n.strip().lower() for n in raw.split(",") if n.strip()))


def _auth_mode(raw: str, name: str) -> str:
    if raw.lower() not in AUTH_MODES:
        raise ConfigError(f"{name} must be jwt or none, got {raw!r}")
    return raw.lower()


def _gateway(env: str, default: Any, *args: Any, **row: Any) -> Any:
    """A row of the gateway's group; its values are read stripped (blank: unset)."""
    return setting(env, default, *args, group=GATEWAY, strip=True, **row)


def web_origin(raw: str) -> str:
    """``raw`` as a browser serialises an origin (``scheme://host[:port]``, lower case, no
    default port): what ``MessageEvent.origin`` holds and a CSP source matches exactly.
    Raises ConfigError naming what is wrong."""
    text = raw.strip()

    def refuse(why: str) -> ConfigError:
        return ConfigError(
            f"{EMBED_ORIGINS}: {text!r} is not an origin (scheme://host[:port], e.g."
            f" https://app.example.com; comma-separated): {why}"
        )

    if "*" in text:
        raise refuse("no wildcards: list each origin")
    if not text.isascii() or any(c.isspace() for c in text):
        raise refuse("spaces or non-ASCII characters (write an IDN in its xn-- form)")
    parts = urlsplit(text)
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not text[len(scheme) :].startswith("://"):
        raise refuse("the scheme must be http:// or https://")
    if text.lower() != f"{scheme}://{parts.netloc.lower()}":
        raise refuse("an origin has no path, query or fragment (not even a trailing /)")
    if "@" in parts.netloc:
        raise refuse("no user name or password")
    host = parts.hostname or ""
    if host.startswith("[") or ":" in host:
        # CSP source expressions (frame-ancestors) cannot name an IPv6 address.
        raise refuse("IPv6 addresses cannot be named in a CSP: use a host name")
    try:
        port = parts.port
    except ValueError:
        raise refuse("the port must be a number from 1 to 65535") from None
    if port == 0:
        raise refuse("the port must be a number from 1 to 65535")
    if not all(_LABEL.fullmatch(label) for label in host.split(".")):
        raise refuse(f"{host!r} is not a host name or IPv4 address")
    shown = "" if port is None or port == DEFAULT_PORTS[scheme] else f":{port}"
    return f"{scheme}://{host}{shown}"


def web_origins(raw: str) -> tuple[str, ...]:
    """A comma-separated list of origins, each as ``web_origin`` writes it, once."""
    return tuple(dict.fromkeys(web_origin(o) for o in raw.split(",") if o.strip()))


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
    """What one gateway process runs with. Defaults: the loopback gateway of ``make demo``.

    The fields set from the environment are rows of the settings table (group Gateway,
    ``stream.environment``); ``from_env`` adds what follows from several of them."""

    # The stream loop.
    heartbeat: float = 15.0  # seconds between SSE comment lines on a quiet stream
    queue_size: int = 256  # frames a client may lag behind before it is dropped
    ready_timeout: float = 5.0  # how long a new stream waits for the subscription
    retry_ms: int = 1000  # EventSource reconnect delay after a stream ends
    expired_retry_ms: int = 3_600_000  # the last ``retry:`` after ``event: expired``
    cors_origins: tuple[str, ...] = ()  # Settings.gateway_cors_origins
    # App origins that may frame or open the page and hand it a token (``web_origin``
    # form); empty: only the page's own origin, and nothing may frame it.
    embed_origins: tuple[str, ...] = _gateway(
        EMBED_ORIGINS,
        (),
        lambda raw, name: web_origins(raw),
        help="app origins that may frame or open the page and hand it a token",
    )
    # Authentication (``auth.py``): ``jwt`` needs ``jwt_keys``; unset, ``jwt`` with keys.
    auth: str = _gateway(
        "STREAM_GATEWAY_AUTH",
        "none",
        _auth_mode,
        help="jwt or none (none explicitly: serve without tokens, on any address)",
        shown="jwt with keys, else none",
    )
    auth_explicit: bool = False  # STREAM_GATEWAY_AUTH was set (``none`` on purpose)
    jwt_keys: str | None = _gateway(
        "STREAM_GATEWAY_JWT_KEYS",
        None,
        help="JWKS file, JWK file, PEM public key or certificate, or https:// JWKS URL",
    )
    jwks_interval: float = _gateway(
        "STREAM_GATEWAY_JWKS_INTERVAL",
        30.0,
        seconds(1.0),
        help="an https JWKS is fetched for unknown kids at most this often, all clients together",
        unit="s",
    )
    jwt_audience: str | None = _gateway(
        "STREAM_GATEWAY_JWT_AUDIENCE", None, help="required aud when set"
    )
    jwt_issuer: str | None = _gateway(
        "STREAM_GATEWAY_JWT_ISSUER", None, help="required iss when set"
    )
    jwt_claim: str = _gateway(
        "STREAM_GATEWAY_JWT_CLAIM", "sessions", help="the claim holding the grant's entries"
    )
    jwt_leeway: float = _gateway(
        "STREAM_GATEWAY_JWT_LEEWAY",
        30.0,
        seconds(),
        help="clock leeway for exp, nbf, iat",
        unit="s",
    )
    jwt_max_lifetime: float = _gateway(
        "STREAM_GATEWAY_JWT_MAX_LIFETIME",
        86_400.0,
        seconds(),
        help="longest exp - iat accepted (0: no cap)",
        unit="s",
    )
    # Requests.
    allowed_hosts: tuple[str, ...] = _gateway(  # unset: loopback and the bind address
        "STREAM_GATEWAY_ALLOWED_HOSTS",
        LOOPBACK_HOSTS,
        _names,
        help="Host names served (421 else)",
        shown="localhost,127.0.0.1,[::1] + bind address",
    )
    max_query_bytes: int = _gateway(
        "STREAM_GATEWAY_MAX_QUERY_BYTES",
        2048,
        integer(256),
        help="longest query string (414 beyond)",
    )
    max_line_bytes: int = 8190  # the request line and each header line (aiohttp's parser)
    max_field_bytes: int = _gateway(  # room for a large JWT
        "STREAM_GATEWAY_MAX_HEADER_BYTES",
        8190,
        integer(1024),
        help="longest header value",
    )
    header_timeout: float = _gateway(
        "STREAM_GATEWAY_HEADER_TIMEOUT",
        15.0,
        seconds(0.1),
        help="a request's line and headers must arrive within this",
        unit="s",
    )
    max_connections: int = _gateway(
        "STREAM_GATEWAY_MAX_CONNECTIONS",
        4096,
        integer(),
        help="open connections per process; more: 503 (0: no cap)",
    )
    max_connections_per_address: int = _gateway(
        "STREAM_GATEWAY_MAX_CONNECTIONS_PER_ADDRESS",
        1024,
        integer(),
        help="open connections of one client address; more: 503 (0: no cap)",
    )
    # Streams.
    max_streams_per_subject: int = _gateway(
        "STREAM_GATEWAY_MAX_STREAMS_PER_SUBJECT",
        64,
        integer(),
        help="concurrent streams of one token subject (0: no cap)",
    )
    max_streams_per_address: int = _gateway(
        "STREAM_GATEWAY_MAX_STREAMS_PER_ADDRESS",
        512,
        integer(),
        help="concurrent streams of one client address (0: no cap)",
    )
    stream_idle_seconds: float = _gateway(
        "STREAM_GATEWAY_STREAM_IDLE_SECONDS",
        60.0,
        seconds(),
        help="a write blocked this long (client reads nothing): closed",
        unit="s",
    )
    # Listings: what one ``GET /sessions`` may cost Redis.
    list_scan: int = _gateway(  # one ZREVRANGE
        "STREAM_GATEWAY_LIST_SCAN",
        SCAN,
        integer(1),
        help="recent-set entries one listing looks at",
    )
    list_limit: int = 500  # most rows one listing returns (one pipeline of HGETs)
    # Prometheus: /metrics on this port of STREAM_METRICS_BIND, never the public one.
    metrics_port: int = _gateway(
        "STREAM_GATEWAY_METRICS_PORT",
        0,
        integer(),
        help="Prometheus /metrics on this port of STREAM_METRICS_BIND (0: off)",
    )

    def __post_init__(self) -> None:
        # They go into response headers and the page: refuse any not in canonical form.
        for origin in self.embed_origins:
            if web_origin(origin) != origin:
                raise ConfigError(f"{EMBED_ORIGINS}: write {origin!r} as {web_origin(origin)!r}")

    @property
    def auth_on(self) -> bool:
        return self.auth == "jwt"

    @classmethod
    def from_env(
        cls, settings: Settings, env: Mapping[str, str] | None = None, **changes: Any
    ) -> "GatewayConfig":
        """Read the environment; ``changes`` (the command line's) win. Raises ConfigError."""
        env = os.environ if env is None else env
        values = read(cls, env)
        keys = values.get("jwt_keys")
        explicit = "auth" in values
        auth = values.setdefault("auth", "jwt" if keys else "none")
        if auth == "jwt" and keys is None:
            raise ConfigError(
                "STREAM_GATEWAY_AUTH=jwt needs STREAM_GATEWAY_JWT_KEYS (a JWKS file,"
                " a PEM public key, or an https:// JWKS URL)"
            )
        if keys is not None and keys.startswith("http://"):
            raise ConfigError("STREAM_GATEWAY_JWT_KEYS: a JWKS URL must be https://")
        bind = changes.pop("bind", None) or settings.gateway_bind
        values.setdefault("allowed_hosts", default_allowed_hosts(bind))
        config = cls(cors_origins=settings.gateway_cors_origins, auth_explicit=explicit, **values)
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
