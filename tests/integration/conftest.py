"""Session fixtures for the integration tests: a real single-node Kafka (KRaft) and a real
redis-server, each started on free ports in a temporary directory via deploy/*.sh and stopped
when the session ends.

The first run assembles Kafka from Maven Central (needs `mvn` and network, ~20 s); later runs
use the cache in ${CONTEXT_STREAM_CACHE:-~/.cache/context-stream} and start in a few seconds.
"""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
DEPLOY = REPO_ROOT / "deploy"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "integration: needs a real Kafka broker and redis-server")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Conftest hooks see every collected item, so restrict the marker to this directory.
    for item in items:
        if item.path.is_relative_to(HERE):
            item.add_marker(pytest.mark.integration)


def _free_ports(count: int) -> list[int]:
    """Ports the OS considers free right now (all held open together, so they are distinct)."""
    with ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in socks]


def _run(*args: str | Path, timeout: float) -> str:
    """Runs a deploy script; returns its stdout (stripped), or raises with its stderr."""
    argv = [str(a) for a in args]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        raise RuntimeError(f"{' '.join(argv)} timed out after {timeout:.0f}s") from exc
    if done.returncode != 0:
        raise RuntimeError(
            f"{' '.join(argv)} failed with exit code {done.returncode}:\n{done.stderr[-4000:]}"
        )
    return done.stdout.strip()


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`127.0.0.1:<port>` of a fresh single-node broker (auto-create on, 1 partition default)."""
    data_dir = tmp_path_factory.mktemp("kafka")
    port, controller_port = _free_ports(2)
    script = DEPLOY / "kafka.sh"
    # Generous timeout: a cold cache first downloads the Kafka jars with Maven.
    bootstrap = _run(
        script,
        "start",
        "--port",
        str(port),
        "--controller-port",
        str(controller_port),
        "--data-dir",
        str(data_dir),
        timeout=900,
    )
    try:
        yield bootstrap
    finally:
        _run(script, "stop", "--data-dir", str(data_dir), timeout=120)


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`redis://127.0.0.1:<port>/0` of a private, non-persistent redis-server."""
    data_dir = tmp_path_factory.mktemp("redis")
    (port,) = _free_ports(1)
    script = DEPLOY / "redis.sh"
    url = _run(script, "start", "--port", str(port), "--dir", str(data_dir), timeout=300)
    try:
        yield url
    finally:
        _run(script, "stop", "--dir", str(data_dir), timeout=60)


@pytest.fixture(scope="session")
def kafka_admin(kafka_bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": kafka_bootstrap})
