"""The service on a three-broker Kafka cluster (``deploy/kafka.sh cluster-start``) with
``STREAM_REPLICATION_FACTOR=3`` and ``min.insync.replicas=2`` on every topic: brokers
SIGKILLed mid-stream (the one leading most input partitions, brought back, then another)
and a controller failover; workers rolled one by one under traffic as a StatefulSet rolls.

Each run ends with ``verdict.verify`` (exact sessions, exact counts, every partition's
committed offset at its end, the dead letters exact), and beside it: every record on the
output topic is a state its session passed through, never an earlier one than the record
before it; Redis never moved a session backwards; and every topic the service created or
uses has 3 replicas and ``min.insync.replicas=2``. The cluster's nodes listen on fixed
ports below the ephemeral range (``kafka_cluster.CLUSTER_PORTS``); ``SOAK=1`` scales up.
"""

from __future__ import annotations

import random
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.faults import (
    Feeder,
    Ledger,
    alive,
    assert_alive,
    assigned,
    input_topic,
    say,
    scaled,
    session_traffic,
    wait_assignment,
)
from tests.integration.harness import Deployment, Worker, wait_until
from tests.integration.kafka_cluster import (
    CLUSTER_PORTS,
    MIN_ISR,
    KafkaCluster,
    RedisSampler,
    Steps,
    assert_every_update_a_step,
    replication_of,
    service_topics,
)
from tests.integration.verdict import Verdict, verify, wait_committed

pytestmark = pytest.mark.integration


def _free(port: int) -> bool:
    """Nothing listens on ``port`` (connections of a run just ended, in TIME_WAIT, do not
    count: the brokers bind with SO_REUSEADDR too)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@pytest.fixture(scope="module")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """Three KRaft nodes for the module's tests (about 15 s to start)."""
    busy = [p for port in CLUSTER_PORTS for p in (port, port + 1) if not _free(p)]
    assert not busy, f"the cluster's fixed ports {busy} are taken"
    cluster = KafkaCluster(tmp_path_factory.mktemp("kafka-cluster"))
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def deployments() -> Iterator[list[Deployment]]:
    created: list[Deployment] = []
    yield created
    for deployment in created:
        deployment.stop_all()


def _deployment(
    created: list[Deployment],
    cluster: KafkaCluster,
    redis_url: str,
    workdir: Path,
    partitions: int,
    **env: str,
) -> Deployment:
    workdir.mkdir(parents=True, exist_ok=True)
    deployment = Deployment(
        cluster.bootstrap,
        redis_url,
        workdir,
        partitions=partitions,
        extra_env={"STREAM_REPLICATION_FACTOR": "3", "STREAM_COMMIT_INTERVAL": "0.5", **env},
    )
    created.append(deployment)
    return deployment


def _sessions(messages: list[object]) -> list[str]:
    return sorted({s for m in messages if (s := getattr(m, "session", None)) is not None})


def _replicated_everywhere(cluster: KafkaCluster, deployment: Deployment) -> list[str]:
    """Every topic the service created or uses: 3 replicas, min.insync.replicas 2."""
    topics = service_topics(cluster, deployment)
    found = replication_of(cluster, topics)
    # Input, output, dead letters, the table's changelog, the assignor's leader topic.
    assert len([t for t in topics if t.startswith(deployment.name)]) >= 5, topics
    wrong = {t: r for t, r in found.items() if r != (3, str(MIN_ISR))}
    assert not wrong, f"topics not at RF 3 / min.insync.replicas {MIN_ISR}: {wrong}"
    return topics


def _exact(
    deployment: Deployment, ledger: Ledger, workdir: Path, sampler: RedisSampler
) -> tuple[Verdict, Steps]:
    verdict = verify(deployment, ledger, workdir)
    sampler.stop()
    steps = assert_every_update_a_step(deployment, workdir / f"ledger-{deployment.name}")
    assert not sampler.backwards, sampler.backwards[:5]
    assert sampler.samples > 20 and len(sampler.seen) == len(ledger.logs)
    return verdict, steps


def test_two_leader_kills_and_a_controller_failover_lose_nothing(
    kafka_cluster: KafkaCluster,
    redis_url: str,
    tmp_path: Path,
    deployments: list[Deployment],
) -> None:
    """Unseen traffic through the cluster at RF 3 while: the node leading most input
    partitions is SIGKILLed, down until its leaderships have moved to the others and a
    while longer, then brought back; then the node leading most of them among the others;
    then the active controller (the KRaft quorum's leader). Before each kill the ISRs are
    full again. The worker never restarts; every session, every
    intermediate update, every count and every committed offset comes out exact."""
    cluster = kafka_cluster
    rng = random.Random(4141)
    deployment = _deployment(deployments, cluster, redis_url, tmp_path, 4)
    topic = input_topic(deployment)
    ledger = Ledger(topic)
    messages = session_traffic(rng, "rf3", scaled(30, 300), (60, 200), garbage_rate=0.02)
    worker = deployment.start_worker("c")
    sampler = RedisSampler(deployment, _sessions(messages))
    sampler.start()
    feeder = Feeder(deployment, ledger, messages, seconds=scaled(90, 600))
    feeder.start()
    started = time.monotonic()
    downs: list[float] = []
    failovers: list[float] = []
    try:
        wait_committed(deployment)
        killed: list[int] = []
        faults = [
            ("leader of most input partitions", lambda: cluster.busiest_leader(topic)),
            ("leader of most input partitions", lambda: cluster.busiest_leader(topic, killed)),
            ("active controller", cluster.active_controller),
        ]
        for why, pick in faults:
            cluster.wait_replicated()
            node = pick()
            leading = sorted(p for p, n in cluster.leaders(topic).items() if n == node)
            down = time.monotonic()
            cluster.kill(node, f"{why}, leading input partitions {leading}")
            killed.append(node)
            # The controller fences the dead node once its heartbeats stop (9 s) and moves
            # its leaderships to the two left; traffic goes on against them a while.
            wait_until(
                lambda node=node: node not in cluster.leaders(topic).values(),
                60,
                f"the input partitions' leadership to leave node {node}",
            )
            failovers.append(time.monotonic() - down)
            time.sleep(rng.uniform(2, 4))
            assert_alive(worker)
            cluster.start()  # brings back the node that is down, same data and port
            downs.append(time.monotonic() - down)
            say(
                f"cluster: killed {cluster.kills[-1]}; leaders moved after"
                f" {failovers[-1]:.1f} s, node back after {downs[-1]:.1f} s"
            )
        feeder.finish()
        verdict, steps = _exact(deployment, ledger, tmp_path, sampler)
    finally:
        feeder.stopping.set()
        sampler.stop()
    topics = _replicated_everywhere(cluster, deployment)
    assert_alive(worker)
    assert worker.starts == 1, "the worker restarted"
    assert len(cluster.kills) >= 3 and len(set(killed)) >= 2, cluster.kills
    rebalances = worker.metrics().get("stream_rebalances_total")
    say(
        f"cluster: 3 brokers, RF 3, min.insync.replicas {MIN_ISR} on {len(topics)} topics;"
        f" {len(downs)} SIGKILLs ({', '.join(cluster.kills[-3:])}), leaderships moved in"
        f" {', '.join(f'{s:.1f}' for s in failovers)} s; {time.monotonic() - started:.0f} s"
        f" in all; {verdict.line()}; output topic:"
        f" {steps.records} updates of {steps.sessions} sessions, each a state passed"
        f" through in order ({steps.repeats} re-sent); Redis: {sampler.samples} samples,"
        f" nothing backwards; worker rebalances {rebalances}"
    )


def _roll(worker: Worker, live: list[Worker], partitions: int) -> float:
    """What a StatefulSet does to one pod: SIGTERM, wait for the exit, start it again (same
    state directory), wait until it is ready and the group has settled. Seconds taken."""
    began = time.monotonic()
    code = worker.terminate(timeout=120)
    assert code == 0, f"{worker.worker_id} exited {code}:\n{worker.log()[-3000:]}"
    worker.restart()
    wait_until(lambda: worker.probe("/readyz") == 200, 120, f"{worker.worker_id} ready")
    wait_assignment(live, partitions)
    return time.monotonic() - began


def test_a_rolling_restart_under_traffic_loses_nothing(
    kafka_cluster: KafkaCluster,
    redis_url: str,
    tmp_path: Path,
    deployments: list[Deployment],
) -> None:
    """Two workers with a standby replica each, on the cluster, under steady traffic:
    each is restarted in turn the way a StatefulSet rolls. Nothing lost or counted twice,
    no update backwards on the topic or in Redis. (The full bench, three workers and
    scaling 1 -> 3 -> 1 with latency figures: ``python -m benchmarks.rolling``.)"""
    cluster = kafka_cluster
    rng = random.Random(4242)
    deployment = _deployment(
        deployments, cluster, redis_url, tmp_path, 4, STREAM_STANDBY_REPLICAS="1"
    )
    ledger = Ledger(input_topic(deployment))
    messages = session_traffic(rng, "roll", scaled(24, 200), (60, 200), garbage_rate=0.02)
    workers = [deployment.start_worker("r"), deployment.start_worker("r")]
    wait_assignment(workers, 4)
    sampler = RedisSampler(deployment, _sessions(messages))
    sampler.start()
    feeder = Feeder(deployment, ledger, messages, seconds=scaled(45, 400))
    feeder.start()
    rolls: list[float] = []
    try:
        wait_committed(deployment)
        for worker in workers:
            rolls.append(_roll(worker, workers, 4))
        feeder.finish()
        verdict, steps = _exact(deployment, ledger, tmp_path, sampler)
    finally:
        feeder.stopping.set()
        sampler.stop()
    for worker in workers:
        assert alive(worker) and worker.starts == 2
    assert sorted(p for w in workers for p in assigned(w)) == [0, 1, 2, 3]
    say(
        f"rolling restart: 2 workers rolled in {', '.join(f'{s:.1f}' for s in rolls)} s;"
        f" {verdict.line()}; output topic: {steps.records} updates in order"
        f" ({steps.repeats} re-sent); Redis: nothing backwards in {sampler.samples} samples"
    )
