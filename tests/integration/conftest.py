"""Fixtures for the integration tests.

Session-wide: a real single-node Kafka (KRaft) and a real redis-server, each started on free
ports in a temporary directory via deploy/*.sh and stopped when the session ends.

The first run assembles Kafka from Maven Central (needs `mvn` and network, ~20 s); later runs
use the cache in ${CONTEXT_STREAM_CACHE:-~/.cache/context-stream} and start in a few seconds.

On top of them: `deployment`, a fresh isolated service instance for one test, and for the
gateway's modules `live_deployment` (with a worker running), `gateway` and `feeder`, shared by
a module's tests.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from tests.integration.gateway_harness import Feeder, Gateway
from tests.integration.harness import Deployment, free_ports

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
DEPLOY = REPO_ROOT / "deploy"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "integration: needs a real Kafka broker and redis-server")
    config.addinivalue_line(
        "markers",
        "deployment_options(**options): keyword arguments of the `deployment` fixture's"
        " Deployment (e.g. partitions=2)",
    )
    config.addinivalue_line(
        "markers", "gateway_args(*args): command-line arguments of the `gateway` fixture's server"
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Conftest hooks see every collected item, so restrict the marker to this directory.
    for item in items:
        if item.path.is_relative_to(HERE):
            item.add_marker(pytest.mark.integration)


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
    port, controller_port = free_ports(2)
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
    (port,) = free_ports(1)
    script = DEPLOY / "redis.sh"
    url = _run(script, "start", "--port", str(port), "--dir", str(data_dir), timeout=300)
    try:
        yield url
    finally:
        _run(script, "stop", "--dir", str(data_dir), timeout=60)


@pytest.fixture(scope="session")
def kafka_admin(kafka_bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": kafka_bootstrap})


@pytest.fixture
def deployment(
    kafka_bootstrap: str, redis_url: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Deployment]:
    """A fresh deployment in the test's tmp_path, no worker started; the workers it started
    are killed after the test. A `deployment_options` marker sets its options."""
    marker = request.node.get_closest_marker("deployment_options")
    created = Deployment(kafka_bootstrap, redis_url, tmp_path, **(marker.kwargs if marker else {}))
    yield created
    created.stop_all()


@pytest.fixture(scope="module")
def live_deployment(
    kafka_bootstrap: str,
    redis_url: str,
    tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest,
) -> Iterator[Deployment]:
    """One deployment with a worker running, for the whole module (a worker takes seconds to
    join its group): every test uses its own session ids."""
    name = request.module.__name__.rpartition(".")[2].removeprefix("test_")
    created = Deployment(kafka_bootstrap, redis_url, tmp_path_factory.mktemp(name))
    created.start_worker()
    yield created
    created.stop_all()


@pytest.fixture(scope="module")
def gateway(live_deployment: Deployment, request: pytest.FixtureRequest) -> Iterator[Gateway]:
    """`stream serve` on the live deployment, for the whole module, with the arguments of the
    module's `gateway_args` marker."""
    marker = request.node.get_closest_marker("gateway_args")
    started = Gateway.start(live_deployment, *(marker.args if marker else ()))
    yield started
    started.stop()


@pytest.fixture(scope="module")
def feeder(live_deployment: Deployment) -> Iterator[Feeder]:
    """A producer of example log lines into the live deployment's input topic."""
    created = Feeder(live_deployment)
    yield created
    created.close()
