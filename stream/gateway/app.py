"""The gateway's HTTP surface (aiohttp): latest values, SSE streams, listings, the page.

| route | what |
|---|---|
| ``GET /sessions/{id}/context`` | the latest update JSON, byte for byte as stored (404: unknown) |
| ``GET /sessions/{id}/context/stream`` | SSE: the latest value at once, then every update |
| ``GET /sessions?prefix=&limit=`` | recently updated sessions: id, seq, percent, times |
| ``GET /healthz`` | 200 when Redis answers and the pattern subscription is live (open) |
| ``GET /``, ``GET /sessions/{id}`` | the page (``static/``; it needs no token, its requests do) |

Every request passes ``_guard`` first: the ``Host`` header must be an allowed host (so a
page on another site cannot reach a loopback gateway by DNS rebinding; 421 otherwise),
the query string is bounded (414), preflights are answered. With authentication on, the
data routes need a bearer token (``auth.py``) and serve only the sessions it grants
(checked on the decoded id the route then reads from Redis, so no encoding of an id can
differ from the one checked): a session outside the grant is answered exactly like an
unknown one (404), so a token cannot probe which sessions exist. Every response carries
the security headers (``SECURITY_HEADERS``) and ``Server: context-stream``, no versions;
the page's HTML carries them opened to ``STREAM_GATEWAY_EMBED_ORIGINS`` when that is set
(``page_headers``: those apps may frame or open it), which it also lists in its
``<meta name="context-stream-app-origins">`` (``page_html``).

CORS: origins from ``STREAM_GATEWAY_CORS_ORIGINS`` (``*`` for any) get
``Access-Control-Allow-Origin``; ``Access-Control-Allow-Credentials`` is never sent
(tokens travel in ``Authorization``, which needs no credentials mode).
"""

import asyncio
import html
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, Final

import orjson
from aiohttp import web
from redis.exceptions import RedisError

from stream.config import Settings
from stream.gateway import sse
from stream.gateway.auth import (
    EVERYTHING,
    Grant,
    InvalidToken,
    Listing,
    Verifier,
    key_source,
)
from stream.gateway.config import GatewayConfig
from stream.gateway.hub import Hub
from stream.gateway.meter import summary
from stream.gateway.metrics import METRICS, GatewayMetrics, served
from stream.gateway.state import HUB, STREAMS, StreamCounts
from stream.gateway.store import RedisStore, Store, Stored, connect

log = logging.getLogger(__name__)

STATIC = Path(__file__).resolve().parent / "static"
REALM: Final = "context-stream"
SERVER: Final = "context-stream"
CSP: Final = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self';"
    " connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors"
)
SECURITY_HEADERS: Final = {
    # The page's code and styles are files of its own origin; nothing inline, no frames.
    "Content-Security-Policy": f"{CSP} 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Opener-Policy": "same-origin",
}
# The page's placeholder for the app origins allowed to hand it a token (static/auth.js).
APP_ORIGINS_META: Final = '<meta name="context-stream-app-origins" content="">'

Options = GatewayConfig  # the name ``stream serve`` and the tests know

SETTINGS = web.AppKey("settings", Settings)
OPTIONS = web.AppKey("options", GatewayConfig)
STORE: web.AppKey[Store] = web.AppKey("store")
VERIFIER: web.AppKey[Verifier | None] = web.AppKey("verifier")
PAGES: web.AppKey[dict[str, bytes]] = web.AppKey("pages")
PAGE_HEADERS: web.AppKey[dict[str, str]] = web.AppKey("page_headers")

_UNAVAILABLE = {"error": "Redis is unavailable"}


def page_headers(embed_origins: tuple[str, ...]) -> dict[str, str]:
    """The security headers of the page's HTML: ``SECURITY_HEADERS``, opened to the app
    origins allowed to embed it (docs/gateway.md, "Embedding the page in an app")."""
    if not embed_origins:
        return dict(SECURITY_HEADERS)
    headers = {k: v for k, v in SECURITY_HEADERS.items() if k != "X-Frame-Options"}
    # Those origins only may frame it; X-Frame-Options cannot list origins (browsers
    # ignore it beside frame-ancestors anyway), so it goes.
    headers["Content-Security-Policy"] = f"{CSP} {' '.join(embed_origins)}"
    # An app that opens the page (window.open) keeps its handle on it only when the page
    # is unsafe-none: with same-origin, or same-origin-allow-popups (which only spares the
    # popups the page itself opens), a browser puts a page opened from another origin in a
    # new browsing-context group and its opener is gone. A response cannot ask which
    # origin opened it, so COOP goes on the page only, and only while origins are set;
    # the page takes messages from allowed origins only, whoever opened it.
    del headers["Cross-Origin-Opener-Policy"]
    return headers


def page_html(template: str, embed_origins: tuple[str, ...]) -> bytes:
    """The page's HTML with its allowed app origins filled in (escaped; no inline script,
    so the CSP stays strict)."""
    if APP_ORIGINS_META not in template:
        raise ValueError(f"the page has no {APP_ORIGINS_META} to fill")
    listed = html.escape(" ".join(embed_origins), quote=True)
    return template.replace(
        APP_ORIGINS_META, APP_ORIGINS_META.replace('""', f'"{listed}"')
    ).encode()


class _Page(web.Response):
    """The page's HTML: its security headers are the page's (``page_headers``)."""


def _json(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        body=orjson.dumps(body),
        status=status,
        content_type="application/json",
        headers={"Cache-Control": "no-store", **(headers or {})},
    )


def _unknown(session_id: str) -> web.Response:
    # Also the answer for a session outside the token's grant: existence does not leak.
    return _json({"error": "unknown session", "sessionId": session_id}, 404)


# -- requests: host, size, preflight ---------------------------------------------------
def host_allowed(host: str | None, allowed: tuple[str, ...]) -> bool:
    """Whether a ``Host`` header names this gateway: ``allowed`` holds names (port-less,
    IPv6 in brackets), ``.example.com`` for it and its subdomains, or ``*``."""
    if not host:
        return False
    host = host.strip().lower()
    name = host[: host.index("]") + 1] if host.startswith("[") and "]" in host else host
    if not name.startswith("["):
        name = name.partition(":")[0]
    name = name.rstrip(".")
    for entry in allowed:
        if entry == "*" or entry == name:
            return True
        if entry.startswith(".") and (name.endswith(entry) or name == entry[1:]):
            return True
    return False


@web.middleware
async def _guard(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    options = request.app[OPTIONS]
    # Probes (kubelet sends the pod IP as Host) reach /healthz by any name; it tells
    # nothing about sessions.
    if request.path != "/healthz" and not host_allowed(
        request.headers.get("Host"), options.allowed_hosts
    ):
        return _json({"error": "this host name is not served here (allowed hosts)"}, 421)
    if len(request.query_string) > options.max_query_bytes:
        return _json({"error": f"query string over {options.max_query_bytes} bytes"}, 414)
    if request.method == "OPTIONS" and "Access-Control-Request-Method" in request.headers:
        return _preflight(request)
    return await handler(request)


def _preflight(request: web.Request) -> web.Response:
    # Allow-Origin is added by _cors, like on every other response.
    requested = request.headers.get("Access-Control-Request-Headers", "")
    return web.Response(
        status=204,
        headers={
            "Access-Control-Allow-Methods": "GET, OPTIONS",
            "Access-Control-Allow-Headers": requested or "Authorization, Last-Event-ID",
            "Access-Control-Max-Age": "600",
        },
    )


# -- authentication --------------------------------------------------------------------
class _RefusalLog:
    """Logs refused tokens (the reason and where from, never the token) at most once a
    second, so a client hammering with bad tokens cannot flood the log."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.last = 0.0
        self.suppressed = 0
        self.clock = clock

    def note(self, request: web.Request, reason: str) -> None:
        now = self.clock()
        if now - self.last < 1.0:
            self.suppressed += 1
            return
        more = f" ({self.suppressed} more refused since)" if self.suppressed else ""
        reason = reason if len(reason) <= 300 else f"{reason[:297]}..."
        log.warning(
            "gateway: token refused from %s on %s: %s%s", request.remote, request.path, reason, more
        )
        self.last, self.suppressed = now, 0


_refusals = _RefusalLog()


def _challenge(status: int, error: str | None = None, description: str = "") -> web.Response:
    # RFC 6750 §3: no error code when no token was sent; invalid_request/invalid_token else.
    value = f'Bearer realm="{REALM}"'
    if error is not None:
        value += f', error="{error}"'
        if description:
            value += f', error_description="{description}"'
    body = {"error": error or "authentication required"}
    if description:
        body["description"] = description
    return _json(body, status, {"WWW-Authenticate": value})


class Refused(Exception):
    def __init__(self, response: web.Response) -> None:
        self.response = response


async def _grant(request: web.Request, *, query_token: bool = False) -> Grant:
    """What the request may read; raises Refused with the 400/401 answer."""
    verifier = request.app[VERIFIER]
    if verifier is None:
        return EVERYTHING
    header = request.headers.get("Authorization")
    # EventSource cannot send headers: the stream route also takes ?access_token=
    # (RFC 6750 §2.3); never logged (the access log writes the path only).
    query = request.query.get("access_token") if query_token else None
    if header is not None and query is not None:
        raise Refused(_challenge(400, "invalid_request", "one token, in one place"))
    if header is not None:
        scheme, _, token = header.strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise Refused(_challenge(400, "invalid_request", "expected Authorization: Bearer"))
    elif query:
        token = query
    else:
        raise Refused(_challenge(401))
    try:
        return await verifier.verify(token)
    except InvalidToken as error:
        _refusals.note(request, str(error))
        raise Refused(_challenge(401, "invalid_token", error.description)) from None


def _authenticated(
    handler: Callable[[web.Request, Grant], Awaitable[web.StreamResponse]],
    query_token: bool = False,
) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    async def wrapped(request: web.Request) -> web.StreamResponse:
        try:
            grant = await _grant(request, query_token=query_token)
        except Refused as refused:
            response = refused.response
            challenge = response.headers.get("WWW-Authenticate", "")
            request.app[METRICS].refused(response.status, challenge)
            return response
        return await handler(request, grant)

    return wrapped


# -- routes ----------------------------------------------------------------------------
async def context(request: web.Request, grant: Grant) -> web.Response:
    session_id = request.match_info["id"]
    if not grant.allows(session_id):
        return _unknown(session_id)
    try:
        payload, taken = await request.app[STORE].latest_taken(session_id)
    except (RedisError, OSError):
        return _json(_UNAVAILABLE, 503)
    if payload is None:
        return _unknown(session_id)
    response = web.Response(
        body=payload, content_type="application/json", headers={"Cache-Control": "no-store"}
    )
    if taken is not None:
        # When Redis took it, as the listing's updatedAt: the page's "updated … ago" means
        # that on both pages. Last-Modified is a header every CORS client may read.
        response.last_modified = taken // 1000  # whole seconds, never later than it was
    return response


class _Writer:
    """Writes to one SSE response; a write the client does not take within ``idle``
    seconds (it reads nothing: the socket buffers are full) aborts the connection."""

    def __init__(self, request: web.Request, response: web.StreamResponse, idle: float) -> None:
        self.request = request
        self.response = response
        self.idle = idle or None
        self.stalled = False

    async def __call__(self, data: bytes) -> None:
        try:
            async with asyncio.timeout(self.idle):
                await self.response.write(data)
        except TimeoutError:
            self.stalled = True
            if self.request.transport is not None:
                self.request.transport.abort()
            raise ConnectionAbortedError("the client read nothing") from None


async def context_stream(request: web.Request, grant: Grant) -> web.StreamResponse:
    hub, options = request.app[HUB], request.app[OPTIONS]
    session_id = request.match_info["id"]
    if not grant.allows(session_id):
        return _unknown(session_id)
    # EventSource resends the last id as a header; the query parameter serves clients
    # that cannot set headers on their first connection.
    resume = sse.last_event_id(
        request.headers.get("Last-Event-ID") or request.query.get("lastEventId")
    )
    counts = request.app[STREAMS]
    address = request.remote or ""
    refusal = counts.acquire(grant.subject, address)
    if refusal is not None:
        return _json({"error": refusal}, 429, {"Retry-After": "10"})
    try:
        if not await hub.wait_ready(options.ready_timeout):
            return _json(_UNAVAILABLE, 503)
        return await _stream(request, grant, session_id, resume)
    finally:
        counts.release(grant.subject, address)


async def _stream(
    request: web.Request, grant: Grant, session_id: str, resume: sse.Resume | None
) -> web.StreamResponse:
    hub, store, options = request.app[HUB], request.app[STORE], request.app[OPTIONS]
    subscription = hub.subscribe(session_id)
    try:
        # Read the current value only after subscribing: an update landing in between is
        # then both read and queued, and the version check below sends it once.
        try:
            current: Stored | None = (await store.current([session_id]))[0]
        except (RedisError, OSError):
            return _json(_UNAVAILABLE, 503)
        if current is not None:
            hub.observe(session_id, current.version)  # anchors the hub's next messages
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-store",
                "X-Accel-Buffering": "no",  # proxies (nginx) must not buffer the stream
            }
        )
        await response.prepare(request)
        transport = request.transport
        if transport is not None:
            subscription.on_drop = transport.abort
        write = _Writer(request, response, options.stream_idle_seconds)
        loop = asyncio.get_running_loop()
        # The token's end (exp + leeway) as a loop time: the stream ends there. Now is the
        # verifier's clock, the one the grant was checked on (a test's fake one).
        verifier = request.app[VERIFIER]
        now = time.time() if verifier is None else verifier.clock()
        deadline = None if grant.expires is None else loop.time() + grant.expires - now
        try:
            await write(sse.retry(options.retry_ms))
            last: sse.Version | None = None
            if current is not None:
                # Redis never moves backwards: a version other than the client's is newer.
                if resume is None or not resume.has(current.version):
                    await write(sse.frame(current.version, current.update).data)
                last = current.version
            heartbeat = sse.comment("heartbeat")
            queue = subscription.queue
            while True:
                wait = options.heartbeat
                if deadline is not None:
                    wait = min(wait, deadline - loop.time())
                try:
                    async with asyncio.timeout(max(wait, 0)):
                        item = await queue.get()
                except TimeoutError:
                    if deadline is not None and loop.time() >= deadline:
                        await write(sse.named("reauthenticate", b'{"reason":"the token expired"}'))
                        break
                    await write(heartbeat)
                    continue
                if item is None:  # dropped as too slow, or the gateway is stopping
                    break
                if isinstance(item, sse.Ending):  # the session expired: end, don't come back
                    await write(sse.named("expired", item.data))
                    await write(sse.retry(options.expired_retry_ms))
                    break
                if last is not None and item.version <= last:
                    continue  # already sent: the read above, a repair republish, a resync
                await write(item.data)
                last = item.version
        except (ConnectionResetError, ConnectionAbortedError):
            pass  # the client went away (or was dropped and its connection aborted)
        return response
    finally:
        hub.unsubscribe(subscription)


async def sessions(request: web.Request, grant: Grant) -> web.Response:
    options = request.app[OPTIONS]
    prefix = request.query.get("prefix", "")
    try:
        limit = int(request.query.get("limit", "50"))
    except ValueError:
        return _json({"error": "limit must be an integer"}, 400)
    limit = max(1, min(limit, options.list_limit))
    listing = grant.listing(prefix)
    if listing is Listing.NOTHING:
        return _json({"sessions": [], "scanned": 0})
    allows = None if listing is Listing.ALL else grant.allows
    try:
        # Only what the grant covers, among the list_scan most recent sessions.
        rows = await request.app[STORE].recent(prefix, limit, options.list_scan, allows)
    except (RedisError, OSError):
        return _json(_UNAVAILABLE, 503)
    listed = []
    for session_id, updated_ms, payload in rows:
        try:
            update = orjson.loads(payload)
        except orjson.JSONDecodeError:
            continue
        if isinstance(update, dict):
            listed.append(summary(update, updated_ms) | {"sessionId": session_id})
    return _json({"sessions": listed, "scanned": options.list_scan})


async def healthz(request: web.Request) -> web.Response:
    hub = request.app[HUB]
    try:
        async with asyncio.timeout(2):
            redis_ok = await request.app[STORE].ping()
    except (RedisError, OSError, TimeoutError):
        redis_ok = False
    subscribed = hub.ready.is_set()
    body = {
        "redis": redis_ok,
        "subscribed": subscribed,
        "clients": hub.client_count,
        "dropped": hub.dropped,
        "refused": request.app[STREAMS].refused,
    }
    return _json(body, 200 if redis_ok and subscribed else 503)


def _page(name: str) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def serve(request: web.Request) -> web.Response:
        # no-cache: browsers revalidate (no build step, no hashed file names).
        return _Page(
            body=request.app[PAGES][name],
            content_type="text/html",
            charset="utf-8",
            headers={"Cache-Control": "no-cache"},
        )

    return serve


index_page = _page("index.html")
session_page = _page("session.html")


# -- every response --------------------------------------------------------------------
async def _headers(request: web.Request, response: web.StreamResponse) -> None:
    headers = response.headers
    headers["Server"] = SERVER
    security = request.app[PAGE_HEADERS] if isinstance(response, _Page) else SECURITY_HEADERS
    for name, value in security.items():
        headers.setdefault(name, value)
    # No build step, no hashed file names: make browsers revalidate the page's files.
    if request.path.startswith("/static/") or isinstance(response, web.FileResponse):
        headers.setdefault("Cache-Control", "no-cache")
    origins = request.app[OPTIONS].cors_origins
    origin = request.headers.get("Origin")
    if not origin or not origins:
        return
    if "*" in origins:
        headers["Access-Control-Allow-Origin"] = "*"  # never with Allow-Credentials
    elif origin in origins:
        headers["Access-Control-Allow-Origin"] = origin
        headers.add("Vary", "Origin")
    else:
        return
    headers["Access-Control-Expose-Headers"] = "WWW-Authenticate"


async def _close_streams(app: web.Application) -> None:
    # Open SSE streams would hold shutdown for its whole timeout; end them (EventSource
    # clients reconnect, with Last-Event-ID, to whichever gateway comes up).
    app[HUB].close_all()


async def _redis(app: web.Application) -> AsyncIterator[None]:
    settings, options = app[SETTINGS], app[OPTIONS]
    client = connect(settings)
    store = RedisStore(client, settings.redis_layout)
    hub = Hub(client, settings.redis_layout, store, options.queue_size)
    app[STORE] = store
    app[HUB] = hub
    hub.start()
    try:
        yield
    finally:
        await hub.stop()
        await client.aclose()


def verifier_of(options: GatewayConfig) -> Verifier | None:
    """The token verifier ``options`` ask for (``None``: authentication off). Raises
    ValueError when the keys cannot be read."""
    if not options.auth_on:
        return None
    if options.jwt_keys is None:
        raise ValueError("STREAM_GATEWAY_AUTH=jwt needs STREAM_GATEWAY_JWT_KEYS")
    return Verifier(options, key_source(options.jwt_keys, options.jwks_interval))


def build_app(
    settings: Settings,
    options: GatewayConfig | None = None,
    *,
    store: Store | None = None,
    hub: Hub | None = None,
    verifier: Verifier | None = None,
) -> web.Application:
    """The application; ``store`` and ``hub`` replace the Redis-backed ones (tests), and
    ``verifier`` the one the options' keys make."""
    app = web.Application(middlewares=[_guard])
    options = options or GatewayConfig.from_settings(settings)
    app[SETTINGS] = settings
    app[OPTIONS] = options
    app[VERIFIER] = verifier if verifier is not None else verifier_of(options)
    app[STREAMS] = StreamCounts(options.max_streams_per_subject, options.max_streams_per_address)
    app[METRICS] = GatewayMetrics(app)
    app[PAGES] = {
        name: page_html((STATIC / name).read_text(encoding="utf-8"), options.embed_origins)
        for name in ("index.html", "session.html")
    }
    app[PAGE_HEADERS] = page_headers(options.embed_origins)
    app.cleanup_ctx.append(served(settings.metrics_bind, options.metrics_port))
    if store is None or hub is None:
        app.cleanup_ctx.append(_redis)
    else:
        app[STORE] = store
        app[HUB] = hub
    app.router.add_get("/", index_page)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/sessions", _authenticated(sessions))
    app.router.add_get("/sessions/{id}", session_page)
    app.router.add_get("/sessions/{id}/context", _authenticated(context))
    app.router.add_get(
        "/sessions/{id}/context/stream",
        _authenticated(context_stream, query_token=True),
        allow_head=False,
    )
    app.router.add_static("/static/", STATIC)
    app.on_response_prepare.append(_headers)
    app.on_shutdown.append(_close_streams)
    return app
