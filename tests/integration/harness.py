"""Run real `stream worker` processes and read what they produced, for the integration tests."""

import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import orjson
import redis
from confluent_kafka import Consumer, TopicPartition

from tests.generators.sessions import generate_session, write_session_jsonl
from tests.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
EXAMPLE_LOG = REPO / "examples" / "example-system-prompts.jsonl"  # system prompts, metered


def free_ports(count: int) -> list[int]:
    """Ports the OS considers free right now (all held open together, so they are distinct)."""
    with ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in socks]


def free_port() -> int:
    (port,) = free_ports(1)
    return port


def port_is_free(port: int) -> bool:
    """Whether ``port`` can be bound on 127.0.0.1 right now (a fixed port a server is
    about to take)."""
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def http_get(url: str, timeout: float) -> tuple[int, bytes]:
    """(status, body) of a GET; an error status comes with its body, no answer is (0, b"")."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return int(response.status), bytes(response.read())
    except urllib.error.HTTPError as error:
        return int(error.code), bytes(error.read())
    except OSError:
        return 0, b""


def count_writes(sink: Any) -> list[None]:
    """One entry per write a ``RedisSink`` is asked for (the background writer's retries
    too): what a test waits on instead of sleeping through retries."""
    attempts: list[None] = []
    write = sink.write

    async def counted(*args: Any, **kwargs: Any) -> Any:
        attempts.append(None)
        return await write(*args, **kwargs)

    sink.write = counted
    return attempts


@dataclass
class Deployment:
    """One isolated service instance: its own app id, topics, Redis prefix and state dirs."""

    bootstrap: str
    redis_url: str
    workdir: Path
    partitions: int = 4
    extra_env: dict[str, str] = field(default_factory=dict)
    name: str = field(default_factory=lambda: f"it-{uuid.uuid4().hex[:8]}")
    workers: list["Worker"] = field(default_factory=list)

    # How long the test's own Kafka readers wait for metadata and watermarks, in seconds.
    reader_wait: ClassVar[float] = 10

    @property
    def prefix(self) -> str:
        return f"{self.name}:"

    def env(self, **overrides: str) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            KAFKA_BOOTSTRAP_SERVERS=self.bootstrap,
            REDIS_URL=self.redis_url,
            STREAM_APP_ID=self.name,
            STREAM_INPUT_TOPIC=f"{self.name}.events",
            STREAM_OUTPUT_TOPIC=f"{self.name}.context",
            STREAM_DLQ_TOPIC=f"{self.name}.dlq",
            STREAM_PARTITIONS=str(self.partitions),
            REDIS_KEY_PREFIX=self.prefix,
            STREAM_WEB_ENABLED="0",
            STREAM_SESSION_TIMEOUT="8",
            # The generated corpora span years of event time in one topic: sessions
            # would expire under the default TTL. Expiry's own tests set it.
            STREAM_SESSION_TTL="0",
        )
        env.update(self.extra_env)
        env.update(overrides)
        return env

    def stream(self, *args: str, **env: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [sys.executable, "-m", "stream", *args],
            env=self.env(**env),
            cwd=REPO,
            capture_output=True,
            check=True,
            timeout=300,
        )

    def start_worker(self, tag: str = "w", **env: str) -> "Worker":
        worker = Worker(self, f"{tag}{len(self.workers)}", env)
        self.workers.append(worker)
        worker.start()
        return worker

    def stop_all(self) -> None:
        for worker in self.workers:
            worker.kill()

    # -- reading results -------------------------------------------------------------
    def redis(self) -> "redis.Redis":
        return redis.Redis.from_url(self.redis_url)

    def stats(self) -> dict[str, int]:
        raw = self.redis().hgetall(f"{self.prefix}stats")
        counts = {k.decode(): int(v) for k, v in raw.items()}
        return {n: counts.get(n, 0) for n in ("folded", "duplicate", "faulted", "dead_lettered")}

    def accounted(self) -> int:
        return sum(self.stats().values())

    def wait_accounted(self, total: int, timeout: float = 120) -> None:
        wait_until(
            lambda: self.accounted() >= total,
            timeout,
            f"{total} events accounted for (have {self.accounted()})",
        )

    def redis_update(self, session_id: str) -> dict[str, Any] | None:
        raw = self.redis().hget(f"{self.prefix}session:{session_id}", "update")
        return None if raw is None else orjson.loads(raw)

    def reader_conf(self) -> dict[str, Any]:
        """The librdkafka settings of the test's own Kafka readers: how to reach the broker."""
        return {"bootstrap.servers": self.bootstrap}

    def consume_all(self, topic: str, timeout: float = 20) -> list[Any]:
        """Every record of a topic, from the beginning to its current end."""
        consumer = Consumer(
            self.reader_conf()
            | {"group.id": f"reader-{uuid.uuid4().hex}", "enable.auto.commit": False}
        )
        wait = self.reader_wait
        try:
            metadata = consumer.list_topics(topic, timeout=wait).topics[topic]
            ends = {}
            for p in metadata.partitions:
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=wait)
                if high > low:
                    ends[p] = high
            consumer.assign([TopicPartition(topic, p, 0) for p in ends])
            records: list[Any] = []
            positions = dict.fromkeys(ends, 0)
            deadline = time.monotonic() + timeout
            while any(positions[p] < ends[p] for p in ends) and time.monotonic() < deadline:
                message = consumer.poll(0.5)
                if message is None or message.error():
                    continue
                records.append(message)
                positions[message.partition()] = message.offset() + 1
            return records
        finally:
            consumer.close()

    def latest_output(self) -> dict[str, dict[str, Any]]:
        latest: dict[str, dict[str, Any]] = {}
        for message in self.consume_all(f"{self.name}.context"):
            if message.value() is None:  # a tombstone: the session expired
                latest.pop(message.key().decode(), None)
                continue
            latest[message.key().decode()] = orjson.loads(message.value())
        return latest


@dataclass
class Worker:
    deployment: Deployment
    worker_id: str
    env: dict[str, str]
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0  # how many times this worker became ready (the log is appended)
    metrics_port: int = 0
    module: str = "stream"  # what `python -m` runs: a test may run a changed build

    def page(self, path: str) -> tuple[int, bytes]:
        """(status, body) of one of the worker's pages: ``/metrics``, ``/livez``, ``/readyz``
        ((0, b"") when nothing answers)."""
        return http_get(f"http://127.0.0.1:{self.metrics_port}{path}", timeout=5)

    def metrics(self) -> dict[str, float]:
        """The worker's Prometheus samples, ``name{labels}`` -> value (empty if down)."""
        status, body = self.page("/metrics")
        if status != 200:
            return {}
        samples = {}
        for line in body.decode().splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                samples[name] = float(value)
        return samples

    def counted(self) -> dict[str, float]:
        """The worker's ``stream_events_total`` by outcome. A batch is counted here once
        the broker confirmed its records, which may be after Redis shows its totals: wait
        for these rather than read them when ``wait_accounted`` returns."""
        samples = self.metrics()
        return {
            outcome: samples.get(f'stream_events_total{{outcome="{outcome}"}}', 0.0)
            for outcome in ("folded", "duplicate", "faulted", "dead_lettered")
        }

    def probe(self, path: str) -> int:
        """HTTP status of ``/livez`` or ``/readyz`` (0 when nothing answers)."""
        return self.page(path)[0]

    @property
    def log_path(self) -> Path:
        return self.deployment.workdir / f"{self.worker_id}.log"

    def start(self) -> None:
        state = self.deployment.workdir / f"state-{self.worker_id}"
        if not self.metrics_port:
            self.metrics_port = free_port()
        env = self.deployment.env(
            STREAM_STATE_DIR=str(state),
            STREAM_WORKER_ID=self.worker_id,
            STREAM_METRICS_PORT=str(self.metrics_port),
            STREAM_METRICS_BIND="127.0.0.1",
            **self.env,
        )
        self.log_file = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", self.module, "worker"],
            env=env,
            cwd=REPO,
            stdout=self.log_file,
            stderr=subprocess.STDOUT,
        )
        wait_until(self._ready, 120, f"worker {self.worker_id} to be ready")
        self.starts += 1

    def restart(self, **env: str) -> None:
        """Start again with the same id and state directory (its local RocksDB)."""
        self.env = {**self.env, **env}
        self.start()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def _ready(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise AssertionError(f"worker exited early:\n{self.log()[-3000:]}")
        return self.log().count("Worker]: Ready") > self.starts

    def terminate(self, timeout: float = 60) -> int:
        """SIGTERM: the worker finishes its batch, flushes and commits."""
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(timeout)
        self.log_file.close()
        return code

    def kill(self) -> None:
        """SIGKILL: a crash, nothing flushed or committed."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
            self.log_file.close()


def write_sessions(
    directory: Path, rng: random.Random, prefix: str, count: int, lengths: tuple[int, int]
) -> list[Path]:
    """``count`` generated session logs ``<prefix><i>.jsonl`` in ``directory``, each under the
    session id ``<prefix><i>``, their event counts drawn from ``lengths`` (inclusive)."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in (f"{prefix}{i}" for i in range(count)):
        path = directory / f"{name}.jsonl"
        write_session_jsonl(path, name, generate_session(rng, name, rng.randint(*lengths)))
        paths.append(path)
    return paths


def event_count(paths: Iterable[Path]) -> int:
    """How many events the logs hold, packed rows expanded (what the worker accounts for)."""
    return sum(1 for _ in log_events(paths))


def log_events(paths: Iterable[Path]) -> Iterator[tuple[str, Any]]:
    """(session id, raw event) for every event of the logs, packed rows expanded."""
    from stream.contract.errors import BadLine
    from stream.contract.storage import ChunkRun
    from stream.logs.reader import read_logs

    for log in read_logs([str(p) for p in paths]):
        for _, item in log.lines():
            if type(item) is BadLine:
                continue
            for event in item.events() if type(item) is ChunkRun else [item]:
                yield log.session_id, event


@dataclass
class RedisServer:
    """A private redis-server on a fixed port, to stop and start again (empty: it keeps
    nothing on disk) — what a restart without persistence or a failover looks like."""

    workdir: Path
    port: int = field(default_factory=free_port)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        subprocess.run(
            [
                "bash",
                str(REPO / "deploy" / "redis.sh"),
                "start",
                "--port",
                str(self.port),
                "--dir",
                str(self.workdir),
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )

    def stop(self) -> None:
        subprocess.run(
            ["bash", str(REPO / "deploy" / "redis.sh"), "stop", "--dir", str(self.workdir)],
            check=False,
            capture_output=True,
            timeout=60,
        )


def offline_fold(paths: Iterable[Path]) -> dict[str, dict[str, Any]]:
    """What `stream fold` prints for these logs, by session id."""
    result = subprocess.run(
        [sys.executable, "-m", "stream", "fold", *map(str, paths)],
        cwd=REPO,
        capture_output=True,
        check=True,
    )
    lines = [orjson.loads(line) for line in result.stdout.splitlines()]
    return {line["sessionId"]: line for line in lines}
