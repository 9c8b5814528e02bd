"""``stream``'s command table: a named command imports only its own module."""

import argparse
import importlib
import subprocess
import sys

from stream import cli


def _registered(module: str) -> set[str]:
    commands = argparse.ArgumentParser().add_subparsers()
    importlib.import_module(f"stream.cli.{module}").register(commands)
    return set(commands.choices)


def test_every_command_maps_to_the_module_that_registers_it() -> None:
    for module in cli.MODULES:
        assert {c for c, m in cli.COMMANDS.items() if m == module} == _registered(module)
    assert set(cli.COMMANDS.values()) == set(cli.MODULES)


def test_a_named_command_parses_as_with_every_command_registered() -> None:
    argv = ["fold", "--every-event", "a.jsonl"]
    args = cli._parser(argv).parse_args(argv)
    assert args.command == "fold" and args.every_event and args.paths == ["a.jsonl"]
    full = cli._parser(["--help"])
    sub = next(a for a in full._actions if isinstance(a, argparse._SubParsersAction))
    assert list(sub.choices) == list(cli.COMMANDS)


def test_fold_does_not_import_the_service_edges() -> None:
    probe = (
        "import sys; from stream import cli; cli._parser(['fold', 'x']);"
        " print(sorted(m for m in ('aiohttp', 'redis', 'faust', 'rich') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
