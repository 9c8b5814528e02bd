"""``stream serve``: the gateway for UI backends (HTTP, SSE and the page), see README and
docs/gateway.md. The serving path itself is ``stream.gateway.server`` (also runnable as
``python -m stream.gateway``): start-up checks, limits and the path-only access log."""

from typing import Any

from stream.gateway.server import add_arguments, listening_line, run

__all__ = ["listening_line", "register", "run"]


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "serve",
        help="serve the latest updates over HTTP + SSE, and the context meter page",
    )
    add_arguments(parser)
    parser.set_defaults(run=run)
