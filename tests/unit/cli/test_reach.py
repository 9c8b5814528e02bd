"""A command that needs Kafka or Redis fails fast, naming the variable, when it cannot
reach them (a real closed port: nothing stands in for the network). "Fast" is the run's
timeout, a failure bound: a command that retried would sit out ``--seconds 60`` or
forever, and says "retrying"."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])  # closed again once the probe is


def _run(*argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "stream", *argv],
        env=dict(os.environ, **env),
        capture_output=True,
        text=True,
        timeout=30,
    )


@pytest.mark.parametrize("argv", [("watch",), ("watch", "some-session"), ("watch", "--json")])
def test_watch_without_redis_exits_non_zero_within_seconds_naming_redis_url(
    argv: tuple[str, ...],
) -> None:
    port = _closed_port()
    done = _run(*argv, "--seconds", "60", REDIS_URL=f"redis://127.0.0.1:{port}/0")
    assert done.returncode == 1
    assert f"cannot reach Redis at redis://127.0.0.1:{port}/0 (REDIS_URL)" in done.stderr
    assert "retrying" not in done.stderr


def test_compare_without_redis_exits_non_zero_naming_redis_url(tmp_path: Path) -> None:
    log = tmp_path / "s.jsonl"
    log.write_text("")
    port = _closed_port()
    done = _run("compare", str(log), REDIS_URL=f"redis://u:secret@127.0.0.1:{port}/0")
    assert done.returncode == 1
    assert "(REDIS_URL)" in done.stderr and "secret" not in done.stderr


def test_produce_without_kafka_exits_non_zero_naming_the_bootstrap_variable(
    tmp_path: Path,
) -> None:
    port = _closed_port()
    done = _run("produce", str(tmp_path), KAFKA_BOOTSTRAP_SERVERS=f"127.0.0.1:{port}")
    assert done.returncode == 1
    assert f"cannot reach Kafka at 127.0.0.1:{port} (KAFKA_BOOTSTRAP_SERVERS)" in done.stderr
