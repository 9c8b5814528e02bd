"""The README's first command, `make demo` (deploy/demo.sh), end to end on free ports:
a clean run is quiet (no Traceback, ERROR, `!!` or librdkafka warning), prints updates
only when their figures change, and ends with a verdict computed by `stream compare`;
a second run reuses the first one's state; Ctrl-C (SIGINT) stops it with status 0."""

import os
import re
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests.integration.harness import REPO

pytestmark = pytest.mark.integration

VERDICT = "Redis agrees with the offline fold: 4/4 sessions, 7,898 events folded"
# What a newcomer reads as trouble: a traceback, an ERROR, setuptools' banner, librdkafka.
ALARMING = re.compile(r"Traceback|ERROR|!!|^%\d\|", re.MULTILINE)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _free_pair() -> int:
    """A free port whose next one is free too (the demo's Kafka controller takes it)."""
    while True:
        port = _free_port()
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port


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


def _quiet(*texts: str) -> None:
    for text in texts:
        assert ALARMING.search(text) is None, ALARMING.search(text)


def _updates(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if " seq " in line]


def test_the_demo_streams_the_examples_and_prints_updates(tmp_path: Path) -> None:
    kafka_port, redis_port = _free_pair(), _free_port()
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
    # Only updates whose figures changed: no two lines of a session alike but for seq.
    figures = [re.sub(r"^\S+ (\S+) seq [\d,]+", r"\1", line) for line in _updates(done.stdout)]
    assert len(figures) == len(set(figures))
    # The closing verdict is computed (stream compare), then the demo stops.
    tail = done.stderr.splitlines()[-3:]
    assert tail == [VERDICT, "demo: stopping", "demo: stopped"], tail
    assert "demo: the context meter page: http://127.0.0.1:" in done.stderr
    worker_log = (tmp_path / "demo" / "worker.log").read_text()
    _quiet(done.stdout, done.stderr, worker_log)
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
    assert again.stderr.splitlines()[-3] == VERDICT
    # Everything produced again is a duplicate: at most the re-seeded latest per session.
    assert len(_updates(again.stdout)) <= 4, again.stdout

    # Ctrl-C (SIGINT to the script) while it runs: the verdict again, then status 0.
    running = subprocess.Popen(
        ["bash", "deploy/demo.sh"],
        cwd=REPO,
        env={k: v for k, v in env.items() if k != "DEMO_SECONDS"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        # A shell ignores for good a signal ignored when it starts, and a suite started in
        # the background of a script without job control inherits SIGINT ignored: the
        # demo would never see the Ctrl-C. A terminal's Ctrl-C is what is tested.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert running.stderr is not None
    seen = []
    deadline = time.monotonic() + 240
    for line in running.stderr:
        seen.append(line)
        if line.startswith("demo: running; Ctrl-C to stop") or time.monotonic() > deadline:
            break
    running.send_signal(signal.SIGINT)
    watchdog = threading.Timer(120, running.kill)  # a demo that never stops fails, not hangs
    watchdog.start()
    try:
        rest = running.stderr.read()
    finally:
        watchdog.cancel()
    assert running.wait(timeout=10) == 0, "".join(seen) + rest
    assert rest.splitlines()[-3:] == [VERDICT, "demo: stopping", "demo: stopped"], rest
