"""What the service benchmarks share: a broker and Redis, workers, counters, corpora."""

import os
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import orjson
import redis
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined,unused-ignore]
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

from benchmarks.corpus import write_corpus
from stream.contract.jsontext import dumps
from stream.ops.admin import create_topic
from stream.ops.produce import segments

REPO = Path(__file__).resolve().parents[1]
# Where workers run from: another checkout (its stream/ package) to measure a before/after.
WORKER_TREE = Path(os.environ.get("BENCH_WORKER_TREE") or REPO)
CLOCK_TICK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _script(*args: str) -> str:
    done = subprocess.run(["bash", *args], cwd=REPO, capture_output=True, text=True, check=True)
    return done.stdout.strip()


@dataclass
class Infra:
    bootstrap: str
    redis_url: str
    started: bool = False  # the broker and Redis are this run's own (``infrastructure``)

    def redis(self) -> "redis.Redis":
        return redis.Redis.from_url(self.redis_url)

    def admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.bootstrap})

    def create_topic(self, name: str, partitions: int) -> None:
        admin = self.admin()  # kept alive until the result is in
        create_topic(admin, NewTopic(name, partitions, 1), timeout=30)

    def end_offsets(self, topic: str) -> int:
        """Sum of the topic's high watermarks (0 if it does not exist)."""
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "bench-watermarks"})
        try:
            metadata = consumer.list_topics(topic, timeout=10).topics.get(topic)
            if metadata is None or metadata.error is not None:
                return 0
            return sum(
                consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in metadata.partitions
            )
        finally:
            consumer.close()

    def alter_configs(self, kind: str, name: str, configs: dict[str, str]) -> None:
        """Set ``configs`` on a topic or a broker (``kind`` "topic" or "broker"; a broker's
        name is its node id), leaving its other settings alone."""
        entries = [
            ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
            for key, value in configs.items()
        ]
        resource = ConfigResource(kind, name, incremental_configs=entries)
        admin = self.admin()
        admin.incremental_alter_configs([resource], request_timeout=30)[resource].result()

    def broker_id(self) -> str:
        brokers = self.admin().list_topics(timeout=10).brokers
        return str(min(brokers))

    def log_dirs(self) -> list[Path]:
        """The broker's log directories, read from the ``server.properties`` on its command
        line (deploy/kafka.sh's brokers); empty when the broker is not a local process."""
        pid = listening_pid(int(self.bootstrap.split(",")[0].rsplit(":", 1)[1]))
        if pid is None:
            return []
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return []
        for arg in argv:
            if arg.endswith(b"server.properties"):
                for line in Path(arg.decode()).read_text().splitlines():
                    if line.startswith(("log.dirs=", "log.dir=")):
                        return [Path(d) for d in line.split("=", 1)[1].split(",")]
        return []

    def topic_bytes(self, topic: str) -> int:
        """Bytes of the topic's segment files (``*.log``) on the broker's disk: what
        retention and compaction leave (indexes, preallocated, are not counted)."""
        total = 0
        for root in self.log_dirs():
            for partition in root.glob(f"{topic}-*"):
                if not partition.name.removeprefix(f"{topic}-").isdigit():
                    continue
                for segment in partition.glob("*.log"):
                    with suppress(OSError):  # a segment the cleaner swapped meanwhile
                        total += segment.stat().st_size
        return total

    def server_pids(self) -> dict[str, int]:
        """The broker's and Redis' process ids (for their CPU), where they can be found."""
        found = {}
        broker = listening_pid(int(self.bootstrap.split(",")[0].rsplit(":", 1)[1]))
        if broker:
            found["broker"] = broker
        found["redis"] = int(self.redis().info("server")["process_id"])
        return found

    def redis_counters(self) -> dict[str, int]:
        """Commands Redis executed (scripts' inner calls included), EVALSHA calls and the
        microseconds Redis spent in them."""
        client = self.redis()
        info = client.info("commandstats")
        calls = {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in info.items()}
        usec = {name.removeprefix("cmdstat_"): int(v["usec"]) for name, v in info.items()}
        stats = client.info("stats")
        return {
            "commands": int(stats["total_commands_processed"]),
            # the sink's Lua calls: FCALL of its function library (EVALSHA before it)
            "evalsha": sum(calls.get(c, 0) for c in ("fcall", "evalsha", "eval")),
            # Redis' own time in scripts (inner calls and waiting for a core included).
            "script_usec": sum(usec.get(c, 0) for c in ("fcall", "evalsha", "eval")),
            "publish": calls.get("publish", 0),
            "all_calls": sum(calls.values()),
        }


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process, all its threads (0 if it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICK


@dataclass(frozen=True)
class Placement:
    """Which cores the worker under test runs on, and which the rest (this process and
    its load, the broker, Redis, the subscriber): a core of its own, as a deployed worker
    has, instead of the share the load generator leaves it (docs/notes/016)."""

    worker: frozenset[int]
    rest: frozenset[int]

    def describe(self) -> str:
        return (
            f"worker on core {_cores(self.worker)} alone; load, broker, Redis and subscriber"
            f" on {_cores(self.rest)}"
        )


def _cores(cores: frozenset[int]) -> str:
    return ",".join(map(str, sorted(cores)))


def own_core() -> Placement | None:
    """The last core this process may use for the worker, the others for the rest; None
    on one core (or where affinity cannot be set)."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        return None
    return Placement(frozenset(cores[-1:]), frozenset(cores[:-1]))


def pin(pid: int, cores: frozenset[int]) -> None:
    """Every thread of ``pid`` onto ``cores``; threads it starts later inherit it."""
    with suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with suppress(OSError):  # a thread that ended meanwhile
                os.sched_setaffinity(int(task.name), cores)


@contextmanager
def placed(infra: "Infra", placement: Placement | None) -> Iterator[None]:
    """This process (and so what it starts from now on) on ``placement.rest`` until the
    block ends, with the broker and Redis when they are this run's own (someone else's
    are left where they run); a worker takes ``placement.worker`` itself
    (``WorkerProcess.cores``). Nothing moves when ``placement`` is None."""
    if placement is None:
        yield
        return
    everyone = frozenset(os.sched_getaffinity(0))
    pids = [os.getpid(), *(infra.server_pids().values() if infra.started else ())]
    for pid in pids:
        pin(pid, placement.rest)
    try:
        yield
    finally:
        for pid in pids:
            pin(pid, everyone)


def idle_seconds(cores: frozenset[int] | None = None) -> float:
    """Idle CPU seconds so far of ``cores``, or of the whole machine (``/proc/stat``)."""
    wanted = {f"cpu{c}" for c in cores} if cores is not None else {"cpu"}
    total = 0
    with open("/proc/stat") as stat:
        for line in stat:
            fields = line.split()
            if fields and fields[0] in wanted:
                total += int(fields[4]) + int(fields[5])  # idle, iowait
    return total / CLOCK_TICK


def rss_bytes(pid: int) -> int:
    """Resident memory of a process (0 if it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def dir_bytes(path: Path) -> int:
    """Bytes of every file under ``path`` (0 if it does not exist)."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            with suppress(OSError):  # a file compacted away mid-walk
                total += os.stat(os.path.join(root, name)).st_size
    return total


def listening_pid(port: int) -> int | None:
    """The process listening on a local TCP port (to read the broker's CPU)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            if parts[3] == "0A" and int(parts[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(parts[9])
    if not inodes:
        return None
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            for fd in (proc / "fd").iterdir():
                link = os.readlink(fd)
                if link.startswith("socket:[") and link[8:-1] in inodes:
                    return int(proc.name)
        except OSError:
            continue
    return None


@contextmanager
def infrastructure(work: Path) -> Iterator[Infra]:
    """A private broker and Redis (deploy/*.sh), unless KAFKA_BOOTSTRAP_SERVERS and
    REDIS_URL name running ones."""
    bootstrap, redis_url = os.environ.get("KAFKA_BOOTSTRAP_SERVERS"), os.environ.get("REDIS_URL")
    stops: list[tuple[str, ...]] = []
    try:
        if not bootstrap or not redis_url:
            bootstrap = _script(
                "deploy/kafka.sh",
                "start",
                "--port",
                str(free_port()),
                "--controller-port",
                str(free_port()),
                "--data-dir",
                str(work / "kafka"),
            )
            stops.append(("deploy/kafka.sh", "stop", "--data-dir", str(work / "kafka")))
            redis_url = _script(
                "deploy/redis.sh", "start", "--port", str(free_port()), "--dir", str(work / "redis")
            )
            stops.append(("deploy/redis.sh", "stop", "--dir", str(work / "redis")))
        yield Infra(bootstrap, redis_url, started=bool(stops))
    finally:
        for stop in stops:
            subprocess.run(["bash", *stop], cwd=REPO, capture_output=True)


@dataclass
class Scenario:
    """One isolated service instance: app id, topics, Redis prefix."""

    infra: Infra
    work: Path
    partitions: int = 6
    input_topic: str = ""
    extra: dict[str, str] = field(default_factory=dict)
    name: str = field(default_factory=lambda: f"bench-{uuid.uuid4().hex[:8]}")

    def __post_init__(self) -> None:
        self.input_topic = self.input_topic or f"{self.name}.events"

    @property
    def prefix(self) -> str:
        return f"{self.name}:"

    @property
    def output_topic(self) -> str:
        return f"{self.name}.context"

    @property
    def changelog_topic(self) -> str:
        return f"{self.name}-sessions-changelog"

    def env(self, **overrides: str) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            KAFKA_BOOTSTRAP_SERVERS=self.infra.bootstrap,
            REDIS_URL=self.infra.redis_url,
            STREAM_APP_ID=self.name,
            STREAM_INPUT_TOPIC=self.input_topic,
            STREAM_OUTPUT_TOPIC=self.output_topic,
            STREAM_DLQ_TOPIC=f"{self.name}.dlq",
            STREAM_PARTITIONS=str(self.partitions),
            REDIS_KEY_PREFIX=self.prefix,
            STREAM_WEB_ENABLED="0",
            # The corpora span years of event time in one topic: with the default TTL
            # sessions would expire mid-bench. benchmarks.lifecycle sets its own.
            STREAM_SESSION_TTL="0",
        )
        env.update(self.extra)
        env.update(overrides)
        return env

    def accounted(self) -> int:
        raw = self.infra.redis().hgetall(f"{self.prefix}stats")
        return sum(int(v) for k, v in raw.items() if k != b"expired")  # events, not sessions

    def wait_accounted(self, total: int, timeout: float) -> float:
        """Seconds until Redis accounts for ``total`` events; raises on timeout."""
        began = time.monotonic()
        while self.accounted() < total:
            if time.monotonic() - began > timeout:
                raise TimeoutError(f"{self.accounted()} of {total} events accounted")
            time.sleep(0.05)
        return time.monotonic() - began


@dataclass
class WorkerProcess:
    scenario: Scenario
    tag: str
    probe: bool = False
    process: subprocess.Popen[bytes] | None = None
    metrics_port: int = field(default_factory=free_port)
    starts: int = 0  # starts that reached "Ready"
    cores: frozenset[int] | None = None  # where it runs (``Placement.worker``); None: anywhere

    @property
    def log_path(self) -> Path:
        return self.scenario.work / f"{self.scenario.name}-{self.tag}.log"

    @property
    def state_dir(self) -> Path:
        return self.scenario.work / f"state-{self.scenario.name}-{self.tag}"

    @property
    def probe_path(self) -> Path:
        return self.scenario.work / f"{self.scenario.name}-{self.tag}.requests.json"

    def start(self, timeout: float = 180, **env: str) -> None:
        self.launch(**env)
        self.wait_ready(timeout)

    def launch(self, **env: str) -> None:
        command = [sys.executable, "-m", "benchmarks.probe" if self.probe else "stream"]
        if not self.probe:
            command.append("worker")
        environment = self.scenario.env(
            STREAM_STATE_DIR=str(self.state_dir),
            STREAM_WORKER_ID=self.tag,
            STREAM_METRICS_PORT=str(self.metrics_port),
            STREAM_METRICS_BIND="127.0.0.1",
            BENCH_PROBE_FILE=str(self.probe_path),
            **env,
        )
        output: IO[bytes] = self.log_path.open("ab")
        environment["PYTHONPATH"] = os.pathsep.join([str(WORKER_TREE), str(REPO)])
        self.process = subprocess.Popen(
            command, env=environment, cwd=WORKER_TREE, stdout=output, stderr=subprocess.STDOUT
        )
        self._place()  # one thread yet: those it starts inherit the cores

    def _place(self) -> None:
        if self.cores is not None and self.process is not None:
            pin(self.process.pid, self.cores)

    def wait_ready(self, timeout: float = 180) -> None:
        """Until this start's "Ready" (the log is appended to across restarts)."""
        assert self.process is not None
        deadline = time.monotonic() + timeout
        while self.log_path.read_text(errors="replace").count("Worker]: Ready") <= self.starts:
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(self.tail())
            time.sleep(0.1)
        self.starts += 1
        self._place()  # again: a thread started before the first pin took effect

    def ready(self) -> bool:
        """``/readyz`` answers 200: the assignment is recovered and Redis answers."""
        try:
            url = f"http://127.0.0.1:{self.metrics_port}/readyz"
            with urllib.request.urlopen(url, timeout=5) as page:
                return bool(page.status == 200)
        except OSError:
            return False

    def wait_readyz(self, timeout: float = 600) -> float:
        """Seconds until ``/readyz`` is 200; raises if the worker exits or the time is out."""
        assert self.process is not None
        began = time.monotonic()
        while not self.ready():
            if self.process.poll() is not None or time.monotonic() - began > timeout:
                raise RuntimeError(self.tail())
            time.sleep(0.05)
        return time.monotonic() - began

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:]

    def cpu_seconds(self) -> float:
        """User + system CPU of the worker process, all its threads."""
        assert self.process is not None
        return cpu_seconds(self.process.pid)

    def rss_bytes(self) -> int:
        assert self.process is not None
        return rss_bytes(self.process.pid)

    def requests(self) -> dict[str, int]:
        try:
            counts: dict[str, int] = orjson.loads(self.probe_path.read_bytes())
            return counts
        except (OSError, orjson.JSONDecodeError):
            return {}

    def metric(self, name: str) -> float:
        return self.metrics().get(name, 0.0)

    def metrics(self) -> dict[str, float]:
        """Every sample of the metrics page, by name with its labels (empty when the page
        does not answer)."""
        found = {}
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5
            ) as page:
                for line in page.read().decode().splitlines():
                    if line and not line.startswith("#"):
                        name, value = line.rsplit(" ", 1)
                        found[name] = float(value)
        except OSError:
            pass
        return found

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


def corpus_sessions(work: Path, sessions: int, turns: int, seed: int = 7) -> dict[str, list[Any]]:
    """The benchmark corpus as raw events per session, in log order (packed rows expanded)."""
    paths = write_corpus(work, sessions, turns, seed)
    found: dict[str, list[Any]] = {}
    for session_id, events in segments([str(p) for p in paths], 1):
        found.setdefault(session_id, []).extend(events)
    return found


def produce_waiting(producer: Producer, topic: str, key: bytes, value: bytes) -> None:
    """``producer.produce``, waiting (polling for deliveries) while its queue is full."""
    while True:
        try:
            producer.produce(topic, key=key, value=value)
            return
        except BufferError:
            producer.poll(0.05)


def produce_backlog(
    infra: Infra, topic: str, sessions: dict[str, list[Any]], segment: int
) -> tuple[int, int]:
    """Every session's events in order, ``segment`` per message, sessions interleaved
    message by message. Returns (messages, events)."""
    producer = Producer(
        {
            "bootstrap.servers": infra.bootstrap,
            "partitioner": "murmur2_random",
            "enable.idempotence": True,
            "linger.ms": 20,
            "compression.type": "lz4",
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    chunks = {
        sid.encode(): [events[i : i + segment] for i in range(0, len(events), segment)]
        for sid, events in sessions.items()
    }
    messages = events_count = 0
    depth = max(len(c) for c in chunks.values())
    for i in range(depth):
        for key, parts in chunks.items():
            if i >= len(parts):
                continue
            part = parts[i]
            value = dumps(part[0]) if segment == 1 else dumps(part)
            produce_waiting(producer, topic, key, value)
            messages += 1
            events_count += len(part)
        producer.poll(0)
    if producer.flush(120):
        raise RuntimeError("backlog not delivered")
    return messages, events_count
