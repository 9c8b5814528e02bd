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


def test_the_demo_streams_the_examples_and_prints_updates(tmp_path: Path) -> None:
    env = dict(
        os.environ,
        DEMO_DIR=str(tmp_path / "demo"),
        DEMO_KAFKA_PORT=str(_free_port()),
        DEMO_REDIS_PORT=str(_free_port()),
        STREAM_WEB_PORT=str(_free_port()),
        STREAM_METRICS_PORT=str(_free_port()),
        STREAM_GATEWAY_PORT=str(_free_port()),
        DEMO_RATE="20000",
        DEMO_SECONDS="3",
    )
    done = subprocess.run(
        ["bash", "deploy/demo.sh"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    # `stream watch` lines: the hand-made example's final update arrived through Redis.
    assert "example-system-prompts seq 15  ctx       692/131,072" in done.stdout
    assert "demo: stopping" in done.stderr
    assert "demo: the context meter page: http://127.0.0.1:" in done.stderr
