"""The gateway's HTTP surface (aiohttp): latest values, SSE streams, listings, the page.

| route | what |
|---|---|
| ``GET /sessions/{id}/context`` | the latest update JSON, byte for byte as stored (404: unknown) |
| ``GET /sessions/{id}/context/stream`` | SSE: the latest value at once, then every update |
| ``GET /sessions?prefix=&limit=`` | recently updated sessions: id, seq, percent, updated time |
| ``GET /healthz`` | 200 when Redis answers and the pattern subscription is live |
| ``GET /``, ``GET /sessions/{id}`` | the page (``static/``) |

CORS: origins from ``STREAM_GATEWAY_CORS_ORIGINS`` (``*`` for any) get
``Access-Control-Allow-Origin`` on every response, preflights included.
"""

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web
from redis.exceptions import RedisError

from stream.config import Settings
from stream.gateway import sse
from stream.gateway.hub import Hub
from stream.gateway.meter import summary
from stream.gateway.store import RedisStore, Store, connect

log = logging.getLogger(__name__)

STATIC = Path(__file__).resolve().parent / "static"
MAX_LIMIT = 500


@dataclass(frozen=True)
class Options:
    heartbeat: float = 15.0  # seconds between SSE comment lines on a quiet stream
    queue_size: int = 256  # frames a client may lag behind before it is dropped
    cors_origins: tuple[str, ...] = ()
    ready_timeout: float = 5.0  # how long a new stream waits for the subscription
    retry_ms: int = 1000  # EventSource reconnect delay after a stream ends

    @classmethod
    def from_settings(cls, settings: Settings, **changes: Any) -> "Options":
        return cls(cors_origins=settings.gateway_cors_origins, **changes)


SETTINGS = web.AppKey("settings", Settings)
OPTIONS = web.AppKey("options", Options)
HUB = web.AppKey("hub", Hub)
STORE: web.AppKey[Store] = web.AppKey("store")

_UNAVAILABLE = {"error": "Redis is unavailable"}


def _json(body: Any, status: int = 200) -> web.Response:
    return web.Response(
        body=orjson.dumps(body),
        status=status,
        content_type="application/json",
        headers={"Cache-Control": "no-store"},
    )


async def context(request: web.Request) -> web.Response:
    session_id = request.match_info["id"]
    try:
        payload = await request.app[STORE].latest(session_id)
    except (RedisError, OSError):
        return _json(_UNAVAILABLE, 503)
    if payload is None:
        return _json({"error": "unknown session", "sessionId": session_id}, 404)
    return web.Response(
        body=payload, content_type="application/json", headers={"Cache-Control": "no-store"}
    )


async def context_stream(request: web.Request) -> web.StreamResponse:
    hub, store, options = request.app[HUB], request.app[STORE], request.app[OPTIONS]
    session_id = request.match_info["id"]
    # EventSource resends the last id as a header; the query parameter serves clients
    # that cannot set headers on their first connection.
    last = sse.last_event_id(
        request.headers.get("Last-Event-ID") or request.query.get("lastEventId")
    )
    if not await hub.wait_ready(options.ready_timeout):
        return _json(_UNAVAILABLE, 503)
    subscription = hub.subscribe(session_id)
    try:
        # Read the current value only after subscribing: an update landing in between is
        # then both read and queued, and the seq check below sends it once.
        try:
            current = await store.latest(session_id)
        except (RedisError, OSError):
            return _json(_UNAVAILABLE, 503)
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-cache",
                "X-Accel-Buffering": "no",  # proxies (nginx) must not buffer the stream
            }
        )
        await response.prepare(request)
        transport = request.transport
        if transport is not None:
            subscription.on_drop = transport.abort
        try:
            await response.write(sse.retry(options.retry_ms))
            framed = None if current is None else sse.frame(current)
            if framed is not None and (last is None or framed.seq > last):
                await response.write(framed.data)
                last = framed.seq
            heartbeat = sse.comment("heartbeat")
            queue = subscription.queue
            while True:
                try:
                    async with asyncio.timeout(options.heartbeat):
                        item = await queue.get()
                except TimeoutError:
                    await response.write(heartbeat)
                    continue
                if item is None:  # dropped as too slow, or the gateway is stopping
                    break
                if last is not None and item.seq <= last:
                    continue  # already sent: the read above, a repair republish, a resync
                await response.write(item.data)
                last = item.seq
        except (ConnectionResetError, ConnectionAbortedError):
            pass  # the client went away (or was dropped and its connection aborted)
        return response
    finally:
        hub.unsubscribe(subscription)


async def sessions(request: web.Request) -> web.Response:
    prefix = request.query.get("prefix", "")
    try:
        limit = int(request.query.get("limit", "50"))
    except ValueError:
        return _json({"error": "limit must be an integer"}, 400)
    limit = max(1, min(limit, MAX_LIMIT))
    try:
        rows = await request.app[STORE].recent(prefix, limit)
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
    return _json({"sessions": listed})


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
    }
    return _json(body, 200 if redis_ok and subscribed else 503)


async def index_page(request: web.Request) -> web.FileResponse:
    return web.FileResponse(STATIC / "index.html")


async def session_page(request: web.Request) -> web.FileResponse:
    return web.FileResponse(STATIC / "session.html")


async def preflight(request: web.Request) -> web.Response:
    # The origin check and Allow-Origin happen in _cors, like every other response.
    requested = request.headers.get("Access-Control-Request-Headers", "")
    return web.Response(
        status=204,
        headers={
            "Access-Control-Allow-Methods": "GET, OPTIONS",
            "Access-Control-Allow-Headers": requested or "Last-Event-ID, Cache-Control",
            "Access-Control-Max-Age": "600",
        },
    )


async def _cors(request: web.Request, response: web.StreamResponse) -> None:
    origins = request.app[OPTIONS].cors_origins
    origin = request.headers.get("Origin")
    if not origin or not origins:
        return
    if "*" in origins:
        response.headers["Access-Control-Allow-Origin"] = "*"
    elif origin in origins:
        response.headers["Access-Control-Allow-Origin"] = origin
        response.headers.add("Vary", "Origin")


async def _no_cache_static(request: web.Request, response: web.StreamResponse) -> None:
    # No build step, no hashed file names: make browsers revalidate the page's files.
    if request.path.startswith("/static/") or isinstance(response, web.FileResponse):
        response.headers.setdefault("Cache-Control", "no-cache")


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


def build_app(
    settings: Settings,
    options: Options | None = None,
    *,
    store: Store | None = None,
    hub: Hub | None = None,
) -> web.Application:
    """The application; ``store`` and ``hub`` replace the Redis-backed ones (tests)."""
    app = web.Application()
    app[SETTINGS] = settings
    app[OPTIONS] = options or Options.from_settings(settings)
    if store is None or hub is None:
        app.cleanup_ctx.append(_redis)
    else:
        app[STORE] = store
        app[HUB] = hub
    app.router.add_get("/", index_page)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/sessions", sessions)
    app.router.add_get("/sessions/{id}", session_page)
    app.router.add_get("/sessions/{id}/context", context)
    app.router.add_get("/sessions/{id}/context/stream", context_stream, allow_head=False)
    app.router.add_static("/static/", STATIC)
    app.router.add_route("OPTIONS", "/{tail:.*}", preflight)
    app.on_response_prepare.append(_cors)
    app.on_response_prepare.append(_no_cache_static)
    app.on_shutdown.append(_close_streams)
    return app
