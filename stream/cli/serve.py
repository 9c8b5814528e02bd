"""``stream serve``: the gateway for UI backends (HTTP, SSE and the page), see README and
docs/gateway.md. The serving path itself is ``stream.gateway.server`` (also runnable as
``python -m stream.gateway``): start-up checks, limits and the path-only access log."""

from typing import Any

from stream.cli.reach import REDIS_ENV, environment
from stream.gateway.server import add_arguments, listening_line, run

__all__ = ["listening_line", "register", "run"]


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "serve",
        help="serve the latest updates over HTTP + SSE, and the context meter page",
        description="Serve the latest update of each session (GET /sessions/{id}/context),"
        " its updates as Server-Sent Events (/context/stream), the recently updated sessions"
        " (/sessions) and the live context-meter page (/), all read from Redis. Without JWT"
        " keys it serves only on loopback. docs/gateway.md has every setting.",
        epilog=environment(
            REDIS_ENV,
            "STREAM_GATEWAY_PORT (8080), STREAM_GATEWAY_BIND (127.0.0.1),"
            " STREAM_GATEWAY_AUTH, STREAM_GATEWAY_JWT_* and the other STREAM_GATEWAY_*",
        ),
    )
    add_arguments(parser)
    parser.set_defaults(run=run)
