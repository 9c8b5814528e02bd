"""Every command's ``--help`` teaches: a description, and the environment it reads."""

import argparse
import subprocess
import sys

import pytest

from stream import cli

COMMANDS = list(cli.COMMANDS)


def _sub(name: str) -> argparse.ArgumentParser:
    parser = cli._parser([name])
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    sub: argparse.ArgumentParser = action.choices[name]
    return sub


@pytest.mark.parametrize("name", COMMANDS)
def test_every_command_opens_with_a_description_and_names_its_environment(name: str) -> None:
    sub = _sub(name)
    assert sub.description and len(sub.description) > 60
    text = sub.format_help()
    if name != "measure":  # reads no environment, and says so
        assert "environment" in (sub.epilog or "")
    else:
        assert "reads no environment" in sub.description
    for action in sub._actions:  # every option explains itself
        if action.option_strings and action.help != argparse.SUPPRESS:
            assert action.help, f"{name} {action.option_strings} has no help line"
    assert text.startswith("usage: stream ")


@pytest.mark.parametrize(
    ("name", "names"),
    [
        ("worker", ("KAFKA_BOOTSTRAP_SERVERS", "REDIS_URL", "STREAM_BATCH_MAX")),
        ("produce", ("KAFKA_BOOTSTRAP_SERVERS", "STREAM_INPUT_TOPIC")),
        ("watch", ("REDIS_URL", "REDIS_KEY_PREFIX")),
        ("lag", ("KAFKA_BOOTSTRAP_SERVERS", "STREAM_APP_ID")),
        ("replay", ("KAFKA_BOOTSTRAP_SERVERS",)),
        ("serve", ("REDIS_URL", "STREAM_GATEWAY_PORT")),
        ("republish", ("KAFKA_BOOTSTRAP_SERVERS", "REDIS_URL")),
        ("compare", ("REDIS_URL",)),
    ],
)
def test_the_services_help_names_the_addresses_it_needs(name: str, names: tuple[str, ...]) -> None:
    text = _sub(name).format_help()
    for variable in names:
        assert variable in text


def test_worker_help_from_the_command_line_lists_settings_by_group_with_defaults() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "stream", "worker", "--help"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "  Kafka:\n    KAFKA_BOOTSTRAP_SERVERS [127.0.0.1:9092]" in done.stdout
    assert "REDIS_URL [redis://127.0.0.1:6379/0]" in done.stdout
    assert "STREAM_SESSION_TTL [604800 s]" in done.stdout
