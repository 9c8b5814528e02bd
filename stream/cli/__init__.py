"""The ``stream`` command: the service and the operator's offline tools."""

import argparse
import sys
from collections.abc import Callable, Sequence

from stream import __version__, native
from stream.config import ConfigError
from stream.logs.reader import LogError
from stream.runtime import tune_gc

Command = Callable[[argparse.Namespace], int]


def _parser() -> argparse.ArgumentParser:
    from stream.cli import fold, measure, replay, republish, serve, service, verify, watch

    parser = argparse.ArgumentParser(
        prog="stream",
        description="Fold dsh session events into context projections.",
    )
    parser.add_argument(
        "--version", action="version", version=f"stream {__version__}; {native.status()}"
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in (fold, measure, verify, service, watch, serve, replay, republish):
        module.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    run: Command = args.run
    tune_gc()
    try:
        return run(args)
    except ConfigError as error:
        print(f"stream {args.command}: configuration error: {error}", file=sys.stderr)
        return 2
    except LogError as error:
        print(f"stream {args.command}: {error}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `stream fold ... | head` is normal use
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        return 130
