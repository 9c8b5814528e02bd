"""The ``stream`` command: the service and the operator's offline tools."""

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence

from stream import __version__, native
from stream.config import ConfigError
from stream.logs.reader import LogError
from stream.runtime import tune_gc

Command = Callable[[argparse.Namespace], int]


# The module that registers each command, in help order. Only the named command's module
# is imported when the command line names one: `stream serve` alone pulls in aiohttp and
# redis (~0.3 s), which `stream fold` on a small log would otherwise spend mostly on.
MODULES = (
    "fold",
    "measure",
    "verify",
    "service",
    "watch",
    "compare",
    "serve",
    "replay",
    "lag",
    "republish",
    "leave",
    "topics",
)
COMMANDS = {
    "fold": "fold",
    "measure": "measure",
    "verify": "verify",
    "worker": "service",
    "produce": "service",
    "watch": "watch",
    "compare": "compare",
    "serve": "serve",
    "replay": "replay",
    "lag": "lag",
    "republish": "republish",
    "leave": "leave",
    "topics": "topics",
}


def _parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="stream",
        description="Fold dsh session events into context projections.",
    )
    parser.add_argument(
        "--version", action="version", version=f"stream {__version__}; {native.status()}"
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    words = list(sys.argv[1:] if argv is None else argv)
    first = words[0] if words else None
    # Options before the command (--help, --version) or no known command: every command.
    names = [COMMANDS[first]] if first in COMMANDS else MODULES
    for name in names:
        importlib.import_module(f"stream.cli.{name}").register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser(argv).parse_args(argv)
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
