"""Live latency: sessions paced at a fixed rate, every update timed from its event's produce.

The load: ``sessions`` concurrent sessions, one event per message, round-robin (message k
goes to session k mod S, its next event), paced at ``rate`` messages/s for ``seconds``.
Each produce call's wall time is kept per (session, seq). A separate process subscribed
to every session channel (``PSUBSCRIBE {prefix}session:*``, raw RESP so it stays cheap)
stamps each update on arrival; an update's latency is its arrival minus the produce time
of the event whose ``seq`` it carries: produce to Redis, broker and worker included.

The floor (``Relay``): what the fastest plain Python service on this machine does with the
same load, timed the same way. A librdkafka consumer hands each event, unchanged, to Redis
(``SET`` and ``PUBLISH`` on the session's channel, one pipeline per poll): one fetch and one
Redis round trip per update, no fold, no store, no output records. The worker's latency is
read against it as well as against the broker's produce-ack.

The held-out subscriber (``subscribe-parsed``, the live bench's ``--traffic heldout``):
a plain redis-py ``pubsub`` that parses each update's JSON with orjson before stamping
it, as a reader of the updates would, rather than scanning the raw frames.

    python -m benchmarks.live subscribe REDIS_URL PATTERN OUT   # the subscriber process
    python -m benchmarks.live subscribe-parsed REDIS_URL PATTERN OUT
    python -m benchmarks.live relay BOOTSTRAP TOPIC REDIS_URL PREFIX   # the floor's relay
"""

import os
import re
import select
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from confluent_kafka import Producer

from benchmarks.infra import REPO, cpu_seconds
from stream.contract.jsontext import dumps

SEQ = re.compile(rb'"seq":(\d+)')


# --- the subscriber process -----------------------------------------------------------------


def subscribe(url: str, pattern: str, out: Path) -> None:
    """Write ``<session> <seq> <arrival>`` per update to ``out`` until SIGTERM."""
    parsed = urlparse(url)
    sock = socket.create_connection((parsed.hostname or "127.0.0.1", parsed.port or 6379))
    raw = pattern.encode()
    sock.sendall(b"*2\r\n$10\r\nPSUBSCRIBE\r\n$%d\r\n%s\r\n" % (len(raw), raw))
    head = len(pattern) - 1  # channel = prefix + session id; the pattern ends in '*'
    sink = out.open("wb", buffering=1 << 16)
    buffer = b""
    while True:  # until Redis confirms (``psubscribe``, the pattern, ``:1``): from then on
        at = buffer.find(b"psubscribe")  # every update comes
        end = buffer.find(b":1\r\n", at) if at >= 0 else -1
        if end >= 0:
            break
        chunk = sock.recv(1 << 16)
        if not chunk:
            raise ConnectionError("Redis closed the subscriber's connection")
        buffer += chunk
    buffer = buffer[end + 4 :]
    _ready()
    stopping = until_sigterm()
    sock.settimeout(0.2)
    last_flush = time.monotonic()
    while not stopping():
        try:
            chunk = sock.recv(1 << 20)
        except TimeoutError:
            chunk = b""
        now = time.time()
        if chunk:
            buffer += chunk
            buffer = _parse(buffer, head, now, sink)
        if time.monotonic() - last_flush > 0.2:
            sink.flush()
            last_flush = time.monotonic()
    sink.close()


def _parse(buffer: bytes, head: int, now: float, sink: Any) -> bytes:
    """Consume complete ``pmessage`` frames from ``buffer``; return the rest."""
    pos = 0
    size = len(buffer)
    while pos < size:
        if buffer[pos : pos + 1] != b"*":
            line_end = buffer.find(b"\r\n", pos)
            if line_end < 0:
                break
            pos = line_end + 2
            continue
        line_end = buffer.find(b"\r\n", pos)
        if line_end < 0:
            break
        count = int(buffer[pos + 1 : line_end])
        cursor = line_end + 2
        parts: list[bytes] = []
        complete = True
        for _ in range(count):
            end = buffer.find(b"\r\n", cursor)
            if end < 0:
                complete = False
                break
            if buffer[cursor : cursor + 1] == b":":
                parts.append(buffer[cursor + 1 : end])
                cursor = end + 2
                continue
            length = int(buffer[cursor + 1 : end])
            start = end + 2
            if start + length + 2 > size:
                complete = False
                break
            parts.append(buffer[start : start + length])
            cursor = start + length + 2
        if not complete:
            break
        pos = cursor
        if len(parts) == 4 and parts[0] == b"pmessage":
            found = SEQ.search(parts[3])
            if found:
                sink.write(b"%s %s %.6f\n" % (parts[2][head:], found.group(1), now))
    return buffer[pos:]


def subscribe_parsed(url: str, pattern: str, out: Path) -> None:
    """``subscribe``'s output, through redis-py's ``pubsub`` and each update parsed with
    orjson (its ``seq``), until SIGTERM."""
    import orjson
    import redis

    client = redis.Redis.from_url(url)
    pubsub = client.pubsub()  # type: ignore[no-untyped-call]
    pubsub.psubscribe(pattern)
    while True:  # the psubscribe confirmation: from then on every update comes
        message = pubsub.get_message(timeout=5.0)
        if message is not None and message["type"] == "psubscribe":
            break
    head = len(pattern) - 1
    sink = out.open("wb", buffering=1 << 16)
    _ready()
    stopping = until_sigterm()
    last_flush = time.monotonic()
    while not stopping():
        message = pubsub.get_message(timeout=0.2)
        if message is not None and message["type"] == "pmessage":
            now = time.time()
            update = orjson.loads(message["data"])
            seq = update.get("seq") if type(update) is dict else None
            if seq is not None:  # an expiry carries none
                sink.write(b"%s %d %.6f\n" % (message["channel"][head:], seq, now))
        if time.monotonic() - last_flush > 0.2:
            sink.flush()
            last_flush = time.monotonic()
    sink.close()


def until_sigterm() -> Callable[[], bool]:
    """Whether this process has been sent SIGTERM (how the bench stops its children)."""
    stopped: list[bool] = []
    signal.signal(signal.SIGTERM, lambda *_: stopped.append(True))
    return lambda: bool(stopped)


def _ready() -> None:
    """Tell the bench this process is ready (``Child.spawn`` waits for the line)."""
    sys.stdout.write("ready\n")
    sys.stdout.flush()


class Child:
    """A ``python -m benchmarks.live`` process of this bench (the subscriber, the relay),
    or of another module and interpreter (the Quix peer), stopped with SIGTERM."""

    process: subprocess.Popen[bytes] | None = None

    def spawn(
        self,
        *args: str,
        timeout: float = 60.0,
        python: str = sys.executable,
        module: str = "benchmarks.live",
    ) -> None:
        """Start it with ``args`` and wait until it says it is ready: subscribed, or
        assigned with every partition's end resolved, so the load's first event counts."""
        self.process = process = subprocess.Popen(
            [python, "-m", module, *args],
            cwd=REPO,
            env=dict(os.environ),
            stdout=subprocess.PIPE,
        )
        assert process.stdout is not None
        ready, _, _ = select.select([process.stdout], [], [], timeout)
        line = process.stdout.readline() if ready else b""
        if line.strip() != b"ready":
            self.stop()
            raise RuntimeError(f"{module} {args[0]} not ready within {timeout:.0f} s")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)

    def cpu_seconds(self) -> float:
        """User + system CPU of the process so far, all its threads (0 if not running)."""
        return cpu_seconds(self.process.pid) if self.process is not None else 0.0


@dataclass
class Subscriber(Child):
    redis_url: str
    pattern: str
    out: Path
    parsed: bool = False  # ``subscribe_parsed``: redis-py and orjson, as a reader would

    def start(self) -> None:
        mode = "subscribe-parsed" if self.parsed else "subscribe"
        self.spawn(mode, self.redis_url, self.pattern, str(self.out))

    def arrivals(self) -> list[tuple[bytes, int, float]]:
        found = []
        try:
            text = self.out.read_bytes()
        except OSError:
            return []
        for line in text.splitlines():
            parts = line.split(b" ")
            if len(parts) == 3:
                found.append((parts[0], int(parts[1]), float(parts[2])))
        return found


# --- the floor: a plain consumer relaying to Redis ------------------------------------------


def relay(bootstrap: str, topic: str, url: str, prefix: str) -> None:
    """Each event of ``topic`` to Redis as it arrives (``SET {prefix}floor:{key}`` and
    ``PUBLISH {prefix}session:{key}``), until SIGTERM. Every partition is assigned at its
    end: no group, so nothing waits for a rebalance."""
    import redis
    from confluent_kafka import Consumer, TopicPartition

    stopping = until_sigterm()
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{prefix}floor",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 50,  # the floor: each poll answered soon, whatever it costs
        }
    )
    partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
    # Each partition from its end as it is now, an offset rather than OFFSET_END: every
    # event the load produces once this is ready is relayed.
    ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), 30)[1] for p in partitions}
    consumer.assign([TopicPartition(topic, p, end) for p, end in ends.items()])
    client = redis.Redis.from_url(url)
    client.ping()
    _ready()
    floor, channel = f"{prefix}floor:".encode(), f"{prefix}session:".encode()
    while not stopping():
        # The first waits; the rest are what has arrived (``consume`` alone would wait
        # for all 10,000 or its timeout).
        first = consumer.poll(0.2)
        if first is None:
            continue
        messages = [first, *consumer.consume(10_000, 0)]
        pipe = client.pipeline(transaction=False)
        for message in messages:
            key, value = message.key(), message.value()
            if message.error() is None and key is not None and value is not None:
                pipe.set(floor + key, value)
                pipe.publish(channel + key, value)
        pipe.execute()
    consumer.close()


@dataclass
class Relay(Child):
    """The floor's relay process (``relay``)."""

    bootstrap: str
    topic: str
    redis_url: str
    prefix: str

    def start(self) -> None:
        self.spawn("relay", self.bootstrap, self.topic, self.redis_url, self.prefix)


@dataclass
class QuixApp(Child):
    """The Quix Streams peer (``benchmarks.peers live-quix``), run by ``python``: the
    peers' venv (``benchmarks.peers.peers_python``)."""

    python: str
    bootstrap: str
    topic: str
    redis_url: str
    prefix: str
    state_dir: Path

    def start(self) -> None:
        self.spawn(
            "live-quix",
            *("--bootstrap", self.bootstrap, "--topic", self.topic, "--redis", self.redis_url),
            *("--prefix", self.prefix, "--state-dir", str(self.state_dir)),
            python=self.python,
            module="benchmarks.peers",
            timeout=120,
        )


# --- the load ---------------------------------------------------------------------------------


@dataclass
class Load:
    """Round-robin over sessions, each replaying its corpus events in order."""

    bootstrap: str
    topic: str
    sessions: list[tuple[bytes, list[Any]]]  # (key, raw events)
    linger_ms: float = 5.0  # librdkafka's default
    cursor: list[int] = field(default_factory=list)
    produced_at: dict[tuple[bytes, int], float] = field(default_factory=dict)
    # The broker's own produce acknowledgement per message (librdkafka's time from
    # ``produce()`` to the ack, linger included): the floor an update's latency is read
    # against, taken in the same run on the same machine.
    acks: list[float] = field(default_factory=list)
    next_session: int = 0
    total: int = 0

    def __post_init__(self) -> None:
        self.cursor = [0] * len(self.sessions)
        self.producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "partitioner": "murmur2_random",
                "enable.idempotence": True,
                "linger.ms": self.linger_ms,
                "queue.buffering.max.messages": 1_000_000,
                "on_delivery": self._delivered,
            }
        )
        # Encoded ahead of time: the pacing loop only produces. Sessions replaying the same
        # log share its encoding.
        shared: dict[int, list[tuple[bytes, int]]] = {}
        for _, events in self.sessions:
            if id(events) not in shared:
                shared[id(events)] = [(dumps(e), int(e["seq"])) for e in events]
        self.encoded = [shared[id(events)] for _, events in self.sessions]

    def renew(self, keys: list[bytes]) -> None:
        """Unseen sessions from now on: ``keys`` replay the same logs from their first
        event (the held-out traffic's fresh sessions at every step)."""
        self.sessions = [
            (key, events) for key, (_, events) in zip(keys, self.sessions, strict=True)
        ]
        self.cursor = [0] * len(self.sessions)
        self.next_session = 0

    def _delivered(self, error: Any, message: Any) -> None:
        took = message.latency()
        if error is None and took is not None:
            self.acks.append(took)

    def run(self, rate: float, seconds: float) -> tuple[int, float]:
        """Produce at ``rate`` messages/s for ``seconds``; returns (messages, seconds taken)."""
        produce = self.producer.produce
        poll = self.producer.poll
        topic = self.topic
        keys = [key for key, _ in self.sessions]
        count = len(self.sessions)
        wanted = int(rate * seconds)
        sent = 0
        began = time.perf_counter()
        while sent < wanted:
            due = min(wanted, int((time.perf_counter() - began) * rate) + 1)
            while sent < due:
                i = self.next_session
                self.next_session = (i + 1) % count
                c = self.cursor[i]
                if c >= len(self.encoded[i]):
                    raise RuntimeError("corpus exhausted: more turns per session needed")
                value, seq = self.encoded[i][c]
                self.cursor[i] = c + 1
                self.produced_at[(keys[i], seq)] = time.time()
                produce(topic, key=keys[i], value=value)
                sent += 1
            poll(0)
            ahead = sent / rate - (time.perf_counter() - began)
            if ahead > 0:
                time.sleep(min(ahead, 0.002))
        self.producer.flush(30)
        self.total += sent
        return sent, time.perf_counter() - began


def latencies(
    arrivals: list[tuple[bytes, int, float]], produced_at: dict[tuple[bytes, int], float]
) -> list[float]:
    out = []
    for key, seq, at in arrivals:
        sent = produced_at.get((key, seq))
        if sent is not None:
            out.append(at - sent)
    return out


def summary(values: list[float]) -> dict[str, float]:
    if not values:
        return {"p50": float("nan"), "p99": float("nan"), "max": float("nan"), "n": 0}
    ordered = sorted(values)
    return {
        "p50": statistics.median(ordered),
        "p99": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))],
        "max": ordered[-1],
        "n": len(ordered),
    }


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "subscribe":
        subscribe(sys.argv[2], sys.argv[3], Path(sys.argv[4]))
        return
    if len(sys.argv) == 5 and sys.argv[1] == "subscribe-parsed":
        subscribe_parsed(sys.argv[2], sys.argv[3], Path(sys.argv[4]))
        return
    if len(sys.argv) == 6 and sys.argv[1] == "relay":
        relay(*sys.argv[2:6])
        return
    raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
