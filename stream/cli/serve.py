"""``stream serve``: the gateway for UI backends (HTTP, SSE and the page), see README."""

import argparse
import asyncio
import logging
import signal
import sys
from typing import Any

from stream.config import ConfigError, Settings


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "serve",
        help="serve the latest updates over HTTP + SSE, and the context meter page",
    )
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
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    try:
        settings = Settings.from_env()
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
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)  # one line per SSE client
    port = settings.gateway_port if args.port is None else args.port
    bind = args.bind or settings.gateway_bind
    if not 0 <= port <= 65535:
        print(f"stream serve: port {port} is out of range (0-65535)", file=sys.stderr)
        return 2
    try:
        asyncio.run(_serve(settings, bind, port, args.heartbeat, args.queue_size))
    except OSError as error:
        print(f"stream serve: cannot listen on {bind}:{port}: {error}", file=sys.stderr)
        return 1
    return 0


def listening_line(settings: Settings, host: str, port: int) -> str:
    """What ``stream serve`` prints once listening (``make demo`` reads the URL from it).

    Redis shows as ``REDIS_URL`` with any password replaced by ``***``: the line lands in
    terminals and log files."""
    shown = f"[{host}]" if ":" in host else host
    return (
        f"stream serve: http://{shown}:{port}/ (Redis {settings.redis_url_redacted},"
        f" prefix {settings.redis_key_prefix!r})"
    )


async def _serve(settings: Settings, bind: str, port: int, heartbeat: float, size: int) -> None:
    from aiohttp import web

    from stream.gateway.app import Options, build_app

    options = Options.from_settings(settings, heartbeat=heartbeat, queue_size=size)
    # handler_cancellation: a client that disconnects ends its SSE handler (and frees its
    # subscription) at once instead of at its next write.
    runner = web.AppRunner(
        build_app(settings, options), shutdown_timeout=5, handler_cancellation=True
    )
    await runner.setup()
    try:
        site = web.TCPSite(runner, bind, port, backlog=1024)  # bursts of reconnecting clients
        await site.start()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        host, actual = runner.addresses[0][:2]
        print(listening_line(settings, host, actual), file=sys.stderr, flush=True)
        await stop.wait()
    finally:
        await runner.cleanup()
