"""The README's first command, `make demo` (deploy/demo.sh), end to end on free ports."""

import os
import socket
import subprocess
from pathlib import Path

import pytest

from tests.integration.harness import REPO

pytestmark = pytest.mark.integration


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _demo(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        ["bash", "deploy/demo.sh"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def test_the_demo_streams_the_examples_and_prints_updates(tmp_path: Path) -> None:
    kafka_port, redis_port = _free_port(), _free_port()
    env = dict(
        os.environ,
        DEMO_DIR=str(tmp_path / "demo"),
        DEMO_KAFKA_PORT=str(kafka_port),
        DEMO_REDIS_PORT=str(redis_port),
        STREAM_WEB_PORT=str(_free_port()),
        STREAM_METRICS_PORT=str(_free_port()),
        STREAM_GATEWAY_PORT=str(_free_port()),
        DEMO_RATE="20000",
        DEMO_SECONDS="3",
    )
    for name in ("STREAM_APP_ID", "STREAM_INPUT_TOPIC", "REDIS_KEY_PREFIX"):
        env.pop(name, None)
    done = _demo(env)
    # `stream watch` lines: the hand-made example's final update arrived through Redis.
    assert "example-system-prompts seq 15  ctx       692/131,072" in done.stdout
    assert "demo: stopping" in done.stderr
    assert "demo: the context meter page: http://127.0.0.1:" in done.stderr
    # What a second terminal needs for `stream lag` and friends, and a fresh start.
    exports = [line.strip() for line in done.stderr.splitlines() if "export " in line]
    assert exports[0] == (
        f"export KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:{kafka_port}"
        f" REDIS_URL=redis://127.0.0.1:{redis_port}/0"
    )
    assert "reusing the state of an earlier run" not in done.stderr

    again = _demo(env | {"DEMO_SECONDS": "1"})
    assert "demo: reusing the state of an earlier run in" in again.stderr
    assert f"rm -rf {tmp_path / 'demo'}" in again.stderr
