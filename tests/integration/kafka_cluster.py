"""A local three-node Kafka cluster (``deploy/kafka.sh cluster-start``) to kill nodes of, and
the checks a run on it ends with beside ``verdict.verify``: every update on the output topic
is a state its session passed through, in order; Redis never moved a session backwards;
every topic the service uses is replicated to all nodes with ``min.insync.replicas=2``.

Used by ``test_cluster.py``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import orjson
from confluent_kafka.admin import AdminClient, ConfigResource

from tests.integration.harness import REPO, Deployment, wait_until

# Below 32768 (never handed out as an ephemeral port: a client reconnecting in a loop while a
# node is down cannot take its port), and apart from the demo's and the fault suite's.
CLUSTER_PORTS: Final = (23092, 23192, 23292)
MIN_ISR: Final = 2


@dataclass
class KafkaCluster:
    """Three combined broker+controller KRaft nodes; node ``n`` (1..3) on ``ports[n - 1]``."""

    data_dir: Path
    ports: tuple[int, ...] = CLUSTER_PORTS
    kills: list[str] = field(default_factory=list)  # what was killed, in order

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{port}" for port in self.ports)

    def _script(self, *args: str, timeout: float) -> str:
        done = subprocess.run(
            ["bash", str(REPO / "deploy" / "kafka.sh"), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if done.returncode:
            raise RuntimeError(f"kafka.sh {args[0]} failed:\n{done.stderr[-3000:]}")
        return done.stdout.strip()

    def start(self) -> str:
        """Start every node that is down (all of them the first time); returns the bootstrap
        list once every node lists all three."""
        ports = ",".join(map(str, self.ports))
        return self._script(
            "cluster-start",
            "--ports",
            ports,
            "--data-dir",
            str(self.data_dir),
            "--min-isr",
            str(MIN_ISR),
            "--timeout",
            "240",
            timeout=400,
        )

    def stop(self) -> None:
        self._script("cluster-stop", "--data-dir", str(self.data_dir), timeout=120)

    def admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 2})

    def pid(self, node: int) -> int:
        return int((self.data_dir / f"node-{node}" / "kafka.pid").read_text())

    def kill(self, node: int, why: str) -> None:
        """SIGKILL node ``node``: a crash, no controlled shutdown, no leadership moved first."""
        pid = self.pid(node)
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: not Path(f"/proc/{pid}").exists(), 30, f"node {node} to die")
        self.kills.append(f"node {node} ({why})")

    def leaders(self, topic: str) -> dict[int, int]:
        """Partition -> the node leading it (-1 while none does)."""
        found = self.admin().list_topics(topic, timeout=20).topics[topic]
        return {p: meta.leader for p, meta in found.partitions.items()}

    def busiest_leader(self, topic: str, skip: Iterable[int] = ()) -> int:
        """The node leading most of ``topic``'s partitions (none of ``skip``)."""
        counts = Counter(n for n in self.leaders(topic).values() if n > 0 and n not in skip)
        assert counts, f"no leader of {topic} outside {list(skip)}"
        return counts.most_common(1)[0][0]

    def active_controller(self) -> int:
        """The KRaft quorum's leader: the newest epoch any node's quorum-state file records."""
        best = (-1, -1)
        for node in range(1, len(self.ports) + 1):
            state = self.data_dir / f"node-{node}/kraft-logs/__cluster_metadata-0/quorum-state"
            try:
                found = json.loads(state.read_text())
            except (OSError, ValueError):
                continue
            best = max(best, (int(found["leaderEpoch"]), int(found["leaderId"])))
        assert best[1] > 0, "no node records a quorum leader"
        return best[1]

    def fully_replicated(self) -> bool:
        """Every partition of every topic has all three replicas in its ISR."""
        try:
            topics = self.admin().list_topics(timeout=10).topics
        except Exception:
            return False
        return all(
            len(p.isrs) == len(p.replicas) == len(self.ports)
            for t in topics.values()
            for p in t.partitions.values()
        )

    def wait_replicated(self, timeout: float = 120) -> None:
        wait_until(self.fully_replicated, timeout, "every partition's ISR to be full", every=0.5)


def service_topics(cluster: KafkaCluster, deployment: Deployment) -> list[str]:
    """Every topic the deployment's workers created or use (its own, its app's internal
    ones: changelog, the assignor's leader topic), and the group offsets topic."""
    topics = cluster.admin().list_topics(timeout=20).topics
    return sorted(t for t in topics if t.startswith(deployment.name) or t == "__consumer_offsets")


def replication_of(cluster: KafkaCluster, topics: list[str]) -> dict[str, tuple[int, str]]:
    """Topic -> (replicas of its partitions, fewest; its effective min.insync.replicas)."""
    client = cluster.admin()
    found = client.list_topics(timeout=20).topics
    resources = [ConfigResource(ConfigResource.Type.TOPIC, t) for t in topics]
    configs = {r.name: f.result() for r, f in client.describe_configs(resources).items()}
    return {
        t: (
            min(len(p.replicas) for p in found[t].partitions.values()),
            configs[t]["min.insync.replicas"].value,
        )
        for t in topics
    }


# --------------------------------------------------------------------------- every update


def every_event_lines(logs: Path) -> dict[str, list[dict[str, Any]]]:
    """Per session, the offline fold's line after each of its events (``stream fold
    --every-event``): the states the session passes through, in order."""
    done = subprocess.run(
        [sys.executable, "-m", "stream", "fold", "--every-event", str(logs)],
        cwd=REPO,
        capture_output=True,
        check=True,
    )
    lines: dict[str, list[dict[str, Any]]] = {}
    for raw in done.stdout.splitlines():
        line = orjson.loads(raw)
        lines.setdefault(line["sessionId"], []).append(line)
    return lines


@dataclass(frozen=True)
class Steps:
    """What the output topic's records came to against the states the sessions passed."""

    records: int
    sessions: int
    repeats: int  # records equal to the one before (a re-send): allowed, not backwards


def assert_every_update_a_step(deployment: Deployment, logs: Path) -> Steps:
    """Every record on the output topic is a state its session passed through (the offline
    fold after one of its events), each no earlier than the one before it, and the last is
    the session's final state. Nothing invented, nothing backwards, nothing missing at the
    end. (The test topics are far below a segment: compaction has removed nothing.)"""
    states = every_event_lines(logs)
    records = deployment.consume_all(f"{deployment.name}.context", timeout=300)
    at: dict[str, int] = {}
    last: dict[str, Any] = {}
    repeats = 0
    for record in records:  # per partition in offset order; a session lives in one partition
        session = record.key().decode("utf-8", "surrogatepass")
        assert record.value() is not None, f"a tombstone for {session!r} (no session expires)"
        update = orjson.loads(record.value())
        passed = states.get(session)
        assert passed is not None, f"an update of {session!r}, a session never produced"
        start = at.get(session, 0)
        step = next((i for i in range(start, len(passed)) if passed[i] == update), None)
        assert step is not None, (
            f"{session!r}: update seq {update.get('seq')} at offset {record.offset()} is not a"
            f" state the session passed through at or after its previous update"
            f" (seq {passed[start].get('seq')}): invented or backwards"
        )
        repeats += update == last.get(session)
        at[session], last[session] = step, update
    for session, passed in states.items():
        assert last.get(session) == passed[-1], f"{session!r}: the last update is not its end"
    return Steps(len(records), len(states), repeats)


@dataclass
class RedisSampler:
    """Reads every session's version in Redis over and over on a thread and notes any that
    moved backwards (a session's update must only ever go forward)."""

    deployment: Deployment
    sessions: list[str]
    seen: dict[str, tuple[int, ...]] = field(default_factory=dict)
    backwards: list[str] = field(default_factory=list)
    samples: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True, name="redis-sampler")
        self._thread.start()

    def _run(self) -> None:
        client = self.deployment.redis()
        prefix = self.deployment.prefix
        while not self._stop.is_set():
            pipe = client.pipeline(transaction=False)
            for session in self.sessions:
                pipe.hmget(f"{prefix}session:{session}", ["gen", "seq", "n", "v"])
            for session, row in zip(self.sessions, pipe.execute(), strict=True):
                if row[0] is None:
                    continue
                version = tuple(int(v or 0) for v in row)
                before = self.seen.get(session)
                if before is not None and version < before:
                    self.backwards.append(f"{session}: {before} -> {version}")
                self.seen[session] = version
            self.samples += 1
            time.sleep(0.1)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
