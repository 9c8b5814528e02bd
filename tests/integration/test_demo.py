"""The README's first command, `make demo` (deploy/demo.sh), end to end on free ports:
a clean run is quiet (no Traceback, ERROR, `!!` or librdkafka warning), prints updates
only when their figures change, and ends with a verdict computed by `stream compare`;
on a terminal, an update line is never glued to a progress bar; a second run reuses the
first one's state; Ctrl-C (SIGINT) stops it with status 0."""

import fcntl
import os
import pty
import re
import signal
import socket
import struct
import subprocess
import termios
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


# What a terminal shows of rich's live progress bar: its description and its bar cells.
PROGRESS = re.compile(r"producing|━")
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _demo_on_a_terminal(env: dict[str, str]) -> str:
    """The demo's stdout and stderr on one pseudo-terminal, as a person sees them (any
    live display draws there): what it wrote, control sequences removed. Its stdin is not
    the terminal, so it runs without job control."""
    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 160, 0, 0))
    process = subprocess.Popen(
        ["bash", "deploy/demo.sh"],
        cwd=REPO,
        env=env | {"TERM": "xterm-256color"},
        stdin=subprocess.DEVNULL,
        stdout=terminal,
        stderr=terminal,
    )
    os.close(terminal)
    watchdog = threading.Timer(300, process.kill)
    watchdog.start()
    chunks = []
    try:
        while True:
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # EIO: every writer has closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        watchdog.cancel()
        os.close(controller)
    text = b"".join(chunks).decode(errors="replace")
    assert process.wait(timeout=10) == 0, text[-3000:]
    return ANSI.sub("", text).replace("\r\n", "\n")


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
        DEMO_RATE="4000",  # about 2 s of producing while updates print
        DEMO_SECONDS="3",
    )
    for name in ("STREAM_APP_ID", "STREAM_INPUT_TOPIC", "REDIS_KEY_PREFIX"):
        env.pop(name, None)
    shown = _demo_on_a_terminal(env)
    # `stream watch` lines: the hand-made example's final update arrived through Redis.
    assert "example-system-prompts seq 15  ctx       692/131,072" in shown
    # Updates and the producer's progress never share a line (they share the terminal).
    updates = _updates(shown)
    assert not [line for line in updates if PROGRESS.search(line)], shown
    # Only updates whose figures changed: no two lines of a session alike but for seq.
    figures = [re.sub(r"^\S+ (\S+) seq [\d,]+", r"\1", line) for line in updates]
    assert len(figures) == len(set(figures))
    # The closing verdict is computed (stream compare), then the demo stops.
    tail = shown.splitlines()[-3:]
    assert tail == [VERDICT, "demo: stopping", "demo: stopped"], tail
    assert "demo: the context meter page: http://127.0.0.1:" in shown
    worker_log = (tmp_path / "demo" / "worker.log").read_text()
    _quiet(shown, worker_log)
    # What a second terminal needs for `stream lag` and friends, and a fresh start.
    exports = [line.strip() for line in shown.splitlines() if "export " in line]
    assert exports[0] == (
        f"export KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:{kafka_port}"
        f" REDIS_URL=redis://127.0.0.1:{redis_port}/0"
    )
    assert "reusing the state of an earlier run" not in shown

    again = _demo(env | {"DEMO_SECONDS": "1", "DEMO_RATE": "20000"})
    assert "demo: reusing the state of an earlier run in" in again.stderr
    assert f"rm -rf {tmp_path / 'demo'}" in again.stderr
    assert again.stderr.splitlines()[-3] == VERDICT
    # Everything produced again is a duplicate: at most the re-seeded latest per session.
    assert len(_updates(again.stdout)) <= 4, again.stdout

    # Ctrl-C (SIGINT to the script) while it runs: the verdict again, then status 0.
    running = subprocess.Popen(
        ["bash", "deploy/demo.sh"],
        cwd=REPO,
        env={k: v for k, v in env.items() if k != "DEMO_SECONDS"} | {"DEMO_RATE": "20000"},
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
