"""Running the gateway: the command line of ``stream serve`` (also ``python -m
stream.gateway``), the checks before listening, the aiohttp server's limits.

Before it listens the gateway refuses (exit status 2, the reason on stderr) a
configuration that would serve every session to whoever reaches it: no keys and a
non-loopback bind address, unless ``STREAM_GATEWAY_AUTH=none`` says so on purpose. Keys
that cannot be read stop it the same way.

Slow and greedy clients: a request's line and headers must arrive within
``STREAM_GATEWAY_HEADER_TIMEOUT`` seconds of the connection opening (or of the previous
answer on a kept-alive one), and a process holds at most
``STREAM_GATEWAY_MAX_CONNECTIONS`` connections, and at most
``STREAM_GATEWAY_MAX_CONNECTIONS_PER_ADDRESS`` of one client address (``CappedSite``): one
more is answered 503 and closed before anything of it is read.

Logs never hold a token: the access log writes the path without its query string
(``?access_token=`` is how EventSource sends one), refused tokens are logged by reason.
"""

import argparse
import asyncio
import logging
import os
import resource
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

import aiohttp.web_response
from aiohttp import web
from aiohttp.abc import AbstractAccessLogger
from aiohttp.http_exceptions import HttpProcessingError

from stream.config import ConfigError, Settings
from stream.gateway.app import SERVER, build_app, verifier_of
from stream.gateway.config import GatewayConfig, bind_refusal, is_loopback
from stream.redis_client import redacted_url


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--port", type=int, help="listen port (default STREAM_GATEWAY_PORT, else 8080)"
    )
    parser.add_argument(
        "--bind", help="listen address (default STREAM_GATEWAY_BIND, else 127.0.0.1)"
    )
    parser.add_argument(
        "--heartbeat",
        type=float,
        default=15.0,
        metavar="S",
        help="seconds between SSE heartbeats on a quiet stream (default 15)",
    )
    parser.add_argument(
        "--queue-size",
        type=int,
        default=256,
        metavar="N",
        help="updates a client may lag behind before it is dropped (default 256)",
    )


class PathAccessLogger(AbstractAccessLogger):
    """One line per request with the path only: a query string may hold a token."""

    def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
        self.logger.info(
            '%s "%s %s" %s %s %.3fs',
            request.remote,
            request.method,
            request.path,
            response.status,
            response.body_length,
            time,
        )


class _NoRequestText(logging.Filter):
    """aiohttp logs a request it cannot parse as an ERROR with the parser's error, which
    may quote the request line (a token in its query string): keep one WARNING line
    without the quote, at most one a second with the count of the others, like refused
    tokens (a client sending garbage must not flood the log)."""

    def __init__(self) -> None:
        super().__init__()
        self.last = -float("inf")
        self.suppressed = 0

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if not isinstance(error, HttpProcessingError):
            return True
        now = time.monotonic()
        if now - self.last < 1.0:
            self.suppressed += 1
            return False
        more = f" ({self.suppressed} more since)" if self.suppressed else ""
        record.msg = f"{record.getMessage()}: {type(error).__name__} (status {error.code}){more}"
        record.args = None
        record.exc_info = None
        record.exc_text = None
        record.levelno, record.levelname = logging.WARNING, "WARNING"
        self.last, self.suppressed = now, 0
        return True


BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\nServer: " + SERVER.encode() + b"\r\n"
    b"Content-Length: 0\r\nRetry-After: 5\r\nConnection: close\r\n\r\n"
)


class _Counted(asyncio.Protocol):
    """Stands between a connection's transport and aiohttp's handler for it, so the site
    knows how many connections are open; past the cap the handler never sees one."""

    def __init__(self, site: "CappedSite", handler: Callable[[], asyncio.Protocol]) -> None:
        self.site = site
        self.make_handler = handler
        self.handler: asyncio.Protocol | None = None
        self.address = ""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # Decided here rather than when the protocol is made: asyncio makes the protocols
        # of a whole batch of accepted sockets before the first connection_made.
        peer = transport.get_extra_info("peername")
        self.address = str(peer[0]) if isinstance(peer, tuple) and peer else ""
        if not self.site.admit(self.address):
            # By duck type: uvloop's transports write but are no asyncio.WriteTransport.
            write = getattr(transport, "write", None)
            if write is not None:
                write(BUSY)
            transport.close()  # after the write is flushed
            return
        self.handler = self.make_handler()
        self.handler.connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.handler is not None:
            self.site.release(self.address)
            self.handler.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.handler is not None:
            self.handler.data_received(data)

    def eof_received(self) -> bool | None:
        return None if self.handler is None else self.handler.eof_received()

    def pause_writing(self) -> None:
        if self.handler is not None:
            self.handler.pause_writing()

    def resume_writing(self) -> None:
        if self.handler is not None:
            self.handler.resume_writing()


class CappedSite(web.BaseSite):
    """``web.TCPSite`` with caps on open connections, in all and per client address (0:
    none). aiohttp has no such setting: its server makes a handler for every connection
    it accepts, so the count is kept here, around the handler aiohttp makes, with
    asyncio's public protocol API."""

    def __init__(
        self,
        runner: web.BaseRunner,
        host: str,
        port: int,
        *,
        cap: int,
        per_address: int = 0,
        backlog: int = 128,
    ) -> None:
        super().__init__(runner, backlog=backlog)
        # Kept here, not read back from BaseSite's private slots.
        self.runner, self.backlog = runner, backlog
        self.host, self.port, self.cap, self.per_address = host, port, cap, per_address
        self.open = 0
        self.addresses: dict[str, int] = {}
        self.refused = 0
        self._said = -float("inf")

    @property
    def name(self) -> str:
        return f"http://{self.host}:{self.port}"

    def admit(self, address: str) -> bool:
        held = self.addresses.get(address, 0)
        if self.cap and self.open >= self.cap:
            limit = f"{self.open} connections open (STREAM_GATEWAY_MAX_CONNECTIONS)"
        elif self.per_address and held >= self.per_address:
            limit = f"{held} connections from {address} (..._MAX_CONNECTIONS_PER_ADDRESS)"
        else:
            self.open += 1
            self.addresses[address] = held + 1
            return True
        self.refused += 1
        now = time.monotonic()
        if now - self._said >= 60:  # a flood must not flood the log
            logging.getLogger(__name__).warning(
                "gateway: %s: refusing more (%d refused so far)", limit, self.refused
            )
            self._said = now
        return False

    def release(self, address: str) -> None:
        self.open -= 1
        left = self.addresses.get(address, 1) - 1
        if left > 0:
            self.addresses[address] = left
        else:
            self.addresses.pop(address, None)

    async def start(self) -> None:
        await super().start()
        server = self.runner.server
        assert server is not None
        # BaseSite's slot for the listening server (aiohttp 3.14.5, pinned): its stop()
        # closes it and the runner's addresses read it (stream.app.internals lists it).
        self._server = await asyncio.get_running_loop().create_server(
            lambda: _Counted(self, server), self.host, self.port, backlog=self.backlog
        )


def listening_line(settings: Settings, host: str, port: int, auth: str | None = None) -> str:
    """What the gateway prints once listening (``make demo`` reads the URL from it).

    Redis shows as ``REDIS_URL`` with any password replaced by ``***``: the line lands in
    terminals and log files."""
    shown = f"[{host}]" if ":" in host else host
    return (
        f"stream serve: http://{shown}:{port}/ (Redis {redacted_url(settings.redis_url)},"
        f" prefix {settings.redis_key_prefix!r}{'' if auth is None else f', auth {auth}'})"
    )


def run(args: argparse.Namespace) -> int:
    try:
        settings = Settings.from_env()
        bind = args.bind or settings.gateway_bind
        config = GatewayConfig.from_settings(
            settings, bind=bind, heartbeat=args.heartbeat, queue_size=args.queue_size
        )
    except ConfigError as error:
        print(f"stream: configuration error: {error}", file=sys.stderr)
        return 2
    if args.heartbeat <= 0 or args.queue_size < 1:
        print("stream serve: --heartbeat must be > 0 and --queue-size >= 1", file=sys.stderr)
        return 2
    from redis.asyncio.connection import parse_url

    try:
        parse_url(settings.redis_url)
    except ValueError as error:
        print(f"stream: configuration error: REDIS_URL: {error}", file=sys.stderr)
        return 2
    port = settings.gateway_port if args.port is None else args.port
    if not 0 <= port <= 65535:
        print(f"stream serve: port {port} is out of range (0-65535)", file=sys.stderr)
        return 2
    refusal = bind_refusal(config, bind)
    if refusal is not None:
        print(f"stream serve: {refusal}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # Off unless asked for (one line per SSE client when it ends); paths only, never queries.
    access = os.environ.get("STREAM_GATEWAY_ACCESS_LOG", "") in ("1", "true", "yes")
    logging.getLogger("aiohttp.access").setLevel(logging.INFO if access else logging.WARNING)
    logging.getLogger("aiohttp.server").addFilter(_NoRequestText())
    try:
        verifier = verifier_of(config)
    except ValueError as error:
        print(f"stream: configuration error: STREAM_GATEWAY_JWT_KEYS: {error}", file=sys.stderr)
        return 2
    if not config.auth_on and not is_loopback(bind):
        logging.getLogger(__name__).warning(
            "gateway: STREAM_GATEWAY_AUTH=none on %s: every session is readable by anyone"
            " who reaches it",
            bind,
        )
    from stream.ops.probe import probe_redis

    # A wrong REDIS_URL or login is one line and exit 1 now, not a gateway that listens
    # and answers 503 to everyone; once serving, a Redis outage is ridden out.
    cause = probe_redis(settings)
    if cause is not None:
        print(f"stream serve: {cause.line()}", file=sys.stderr)
        return 1
    try:
        asyncio.run(_serve(settings, config, bind, port, verifier))
    except OSError as error:
        print(f"stream serve: cannot listen on {bind}:{port}: {error}", file=sys.stderr)
        return 1
    return 0


def handler_options(config: GatewayConfig) -> dict[str, Any]:
    """aiohttp's own knobs for each connection (``AppRunner``'s ``handler_args``)."""
    return {
        # A client that disconnects ends its SSE handler (and frees its subscription) at
        # once instead of at its next write.
        "handler_cancellation": True,
        "access_log_class": PathAccessLogger,
        "max_line_size": config.max_line_bytes,
        "max_field_size": config.max_field_bytes,
        # aiohttp has no separate header-read timeout, but its keep-alive timer is one:
        # it starts when a connection opens and again after each answer, and closes the
        # connection if no whole request (line and headers) has arrived when it fires,
        # however many bytes of one have (a half-sent request), while it never touches a
        # request being answered (an SSE stream). tests/unit/gateway/test_limits.py holds
        # aiohttp to that.
        "keepalive_timeout": config.header_timeout,
    }


def _fd_headroom(cap: int) -> None:
    """Raise the open-file limit to what ``cap`` connections need, when the hard limit
    allows; say so when it does not (accept() would fail below the cap)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = cap + 256  # Redis connections, the listening socket, files served
    if not cap or soft == resource.RLIM_INFINITY or soft >= wanted:
        return
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    if target < wanted:
        logging.getLogger(__name__).warning(
            "gateway: the open-file limit (%d) is below STREAM_GATEWAY_MAX_CONNECTIONS (%d)"
            " + 256: connections past it fail to be accepted",
            target,
            cap,
        )


async def _serve(
    settings: Settings, config: GatewayConfig, bind: str, port: int, verifier: Any
) -> None:
    # aiohttp's own answers to requests it cannot parse (400, 431) are made without the
    # application's signals; without this they would name its version in Server.
    aiohttp.web_response.SERVER_SOFTWARE = SERVER  # type: ignore[attr-defined]
    app = build_app(settings, config, verifier=verifier)
    _fd_headroom(config.max_connections)
    runner = web.AppRunner(app, shutdown_timeout=5, **handler_options(config))
    await runner.setup()
    try:
        # backlog: bursts of reconnecting clients.
        site = CappedSite(
            runner,
            bind,
            port,
            cap=config.max_connections,
            per_address=config.max_connections_per_address,
            backlog=1024,
        )
        await site.start()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        host, actual = runner.addresses[0][:2]
        auth = "jwt" if config.auth_on else "none"
        print(listening_line(settings, host, actual, auth), file=sys.stderr, flush=True)
        await stop.wait()
    finally:
        await runner.cleanup()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m stream.gateway",
        description="serve the latest updates over HTTP + SSE, and the context meter page",
    )
    add_arguments(parser)
    return run(parser.parse_args(argv))
