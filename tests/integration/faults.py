"""Scenario helpers for the fault-injection suite: traffic with a ledger, and the workers
it runs against (the hostile cases: ``tests.integration.hostile``; the one verifier every
scenario ends with: ``tests.integration.verdict``; takeover timing:
``tests.integration.takeover``; a broker to bounce: ``tests.integration.broker``).

Ground truth is what was produced, never what the service reports. Every message handed
to Kafka is entered in a ``Ledger`` together with what the contract ("Validation", level
1) makes of it, decided by this module's own model of the rules and limits: its readable
parts (events, or packed chunk rows standing for several events) and its unreadable parts
(the whole message, or single elements of a segment). ``verify`` writes each session's
readable parts, in the order they were produced, to a dsh log, folds the logs offline
(``stream fold``), and demands that Redis, the output topic, the totals and the
dead-letter topic all agree with that, exactly.

``SOAK=1`` in the environment scales counts and durations up (``make soak``).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TypeVar

import orjson
from confluent_kafka import KafkaError, Message, Producer

from tests.generators.sessions import (
    _SessionBuilder,
    encode_json,
    generate_session,
    pack_records,
)
from tests.integration.harness import Deployment, Worker, wait_until

SOAK: Final = os.environ.get("SOAK", "") not in ("", "0")
T = TypeVar("T")


def scaled(bounded: T, soak: T) -> T:
    """The bounded (CI) figure, or the soak figure under ``SOAK=1``."""
    return soak if SOAK else bounded


def say(text: str) -> None:
    """A progress line (visible with ``pytest -s``), stamped so runs can be read back."""
    print(f"[faults {time.strftime('%H:%M:%S')}] {text}", flush=True)


# --------------------------------------------------------------------------- clients


def client_conf(deployment: Deployment) -> dict[str, Any]:
    """librdkafka settings reaching the deployment's broker (a secured one included)."""
    extra: dict[str, Any] = getattr(deployment, "client_conf", {}) or {}
    return {"bootstrap.servers": deployment.bootstrap} | extra


def input_topic(deployment: Deployment) -> str:
    return f"{deployment.name}.events"


def producer_for(deployment: Deployment, **extra: Any) -> Producer:
    """The Java client's partitioner (as ``stream produce``), idempotent, so per-key order
    in the topic is the order of ``produce`` calls, and patient enough to ride out a
    broker bounce without giving up on a message."""
    conf = client_conf(deployment) | {
        "partitioner": "murmur2_random",
        "enable.idempotence": True,
        "linger.ms": 5,
        "message.timeout.ms": 600_000,
        "queue.buffering.max.messages": 200_000,
        "message.max.bytes": 4_000_000,
        "log_level": 2,
    }
    return Producer(conf | extra)


# --------------------------------------------------------------------------- the model


@dataclass(frozen=True)
class Limits:
    """The worker's input limits (``STREAM_MAX_*``), as this suite sets and models them."""

    message_bytes: int = 1_000_000
    key_bytes: int = 1_024
    segment_events: int = 10_000

    def env(self) -> dict[str, str]:
        return {
            "STREAM_MAX_MESSAGE_BYTES": str(self.message_bytes),
            "STREAM_MAX_KEY_BYTES": str(self.key_bytes),
            "STREAM_MAX_SEGMENT_EVENTS": str(self.segment_events),
        }


DEFAULT_LIMITS: Final = Limits()


@dataclass(frozen=True, slots=True)
class Part:
    """One JSON value inside a message: its text, and the events it stands for when it is
    readable (1 for an event, n for a packed chunk row of n members, 0: unreadable)."""

    text: bytes
    events: int = 1
    alone: bool = False  # must travel as a message of its own (deep nesting)

    @property
    def readable(self) -> bool:
        return self.events > 0


@dataclass(slots=True)
class Outgoing:
    """One message to produce and what the contract makes of it."""

    key: bytes | None
    value: bytes
    session: str | None  # the session its readable parts fold into
    lines: list[bytes]  # readable parts, in order: what the session's log gets
    events: int  # events the readable parts stand for
    dead: list[int | None]  # unreadable: None = the whole message, else a segment index
    tag: str = ""  # what kind of case this is (for the report)


def _session_of(key: bytes | None, limits: Limits) -> str | None:
    if key is None or len(key) > limits.key_bytes:
        return None
    try:
        session = key.decode()
    except UnicodeDecodeError:
        return None
    return session or None


def garbage(key: bytes | None, value: bytes, tag: str = "garbage") -> Outgoing:
    """A message unreadable as a whole (one dead letter, no segment index)."""
    return Outgoing(key, value, None, [], 0, [None], tag)


def single(key: bytes | None, part: Part, limits: Limits, tag: str = "") -> Outgoing:
    """A message holding one JSON object (never a JSON array: that is a segment)."""
    session = _session_of(key, limits)
    if session is None or len(part.text) > limits.message_bytes or not part.readable:
        return garbage(key, part.text, tag or "garbage")
    return Outgoing(key, part.text, session, [part.text], part.events, [], tag)


def segment(key: bytes | None, parts: Sequence[Part], limits: Limits, tag: str = "") -> Outgoing:
    """A message holding a JSON array of parts (contract: a segment)."""
    value = b"[" + b",".join(p.text for p in parts) + b"]"
    session = _session_of(key, limits)
    if (
        session is None
        or len(value) > limits.message_bytes
        or not parts
        or len(parts) > limits.segment_events
    ):
        return garbage(key, value, tag or "garbage")
    lines = [p.text for p in parts if p.readable]
    dead: list[int | None] = [i for i, p in enumerate(parts) if not p.readable]
    events = sum(p.events for p in parts if p.readable)
    return Outgoing(key, value, session if lines else None, lines, events, dead, tag)


def text_of(value: Any) -> bytes:
    """Compact JSON text of a (generated) value: raw number literals verbatim, lone
    surrogates escaped, as the generator writes logs."""
    return encode_json(value).encode()


# --------------------------------------------------------------------------- the ledger


@dataclass
class Ledger:
    """Everything produced for one deployment, with what it must come to."""

    topic: str
    logs: dict[str, list[bytes]] = field(default_factory=dict)
    events: int = 0  # readable events produced
    unreadable: int = 0  # unreadable messages and segment elements produced
    messages: int = 0
    delivered: int = 0
    failed: list[str] = field(default_factory=list)
    dead_expected: set[tuple[int, int, int | None]] = field(default_factory=set)
    partition_of: dict[str, int] = field(default_factory=dict)
    session_events: dict[str, int] = field(default_factory=dict)
    tags: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def total(self) -> int:
        """What the service's totals must add up to: every event, every unreadable part."""
        return self.events + self.unreadable

    def enter(self, out: Outgoing) -> Callable[[KafkaError | None, Message], None]:
        """Record a message about to be produced; returns its delivery callback."""
        with self._lock:
            self.messages += 1
            if out.session is not None:
                self.logs.setdefault(out.session, []).extend(out.lines)
                self.session_events[out.session] = (
                    self.session_events.get(out.session, 0) + out.events
                )
            self.events += out.events
            self.unreadable += len(out.dead)
            if out.tag:
                self.tags[out.tag] = self.tags.get(out.tag, 0) + 1

        def delivered(error: KafkaError | None, message: Message) -> None:
            with self._lock:
                if error is not None:
                    self.failed.append(str(error))
                    return
                self.delivered += 1
                for index in out.dead:
                    self.dead_expected.add((message.partition(), message.offset(), index))
                if out.session is not None:
                    self.partition_of[out.session] = message.partition()

        return delivered

    def write_logs(self, directory: Path) -> list[Path]:
        """One dsh log per session: a header naming it, then its readable parts in order."""
        directory.mkdir(parents=True, exist_ok=True)
        paths = []
        with self._lock:
            logs = {session: list(lines) for session, lines in self.logs.items()}
        for n, (session, lines) in enumerate(sorted(logs.items())):
            path = directory / f"s{n:06d}.jsonl"
            header = orjson.dumps({"type": "session", "id": session})
            path.write_bytes(b"\n".join([header, *lines]) + b"\n")
            paths.append(path)
        return paths


def produce(
    producer: Producer, topic: str, ledger: Ledger, out: Outgoing, timeout: float = 300
) -> None:
    """Enter ``out`` in the ledger and hand it to the producer (waiting for queue room)."""
    callback = ledger.enter(out)
    deadline = time.monotonic() + timeout
    while True:
        try:
            producer.produce(topic, key=out.key, value=out.value, on_delivery=callback)
            break
        except BufferError:
            if time.monotonic() > deadline:
                raise
            producer.poll(0.1)
    producer.poll(0)


class Feeder(threading.Thread):
    """Produces a list of messages at a steady rate in the background while a scenario
    injects its faults; ``finish`` waits until every message is confirmed."""

    def __init__(
        self,
        deployment: Deployment,
        ledger: Ledger,
        messages: Sequence[Outgoing],
        seconds: float,
    ) -> None:
        super().__init__(daemon=True, name="feeder")
        self.producer = producer_for(deployment)
        self.topic = input_topic(deployment)
        self.ledger = ledger
        self.messages = messages
        self.seconds = max(seconds, 0.001)
        self.sent = 0
        self.error: BaseException | None = None
        self.stopping = threading.Event()

    def run(self) -> None:
        try:
            started = time.monotonic()
            per_message = self.seconds / max(len(self.messages), 1)
            for n, out in enumerate(self.messages):
                if self.stopping.is_set():
                    return
                produce(self.producer, self.topic, self.ledger, out)
                self.sent += 1
                while (ahead := started + n * per_message - time.monotonic()) > 0:
                    self.producer.poll(min(ahead, 0.5))
            while self.producer.flush(1.0) and not self.stopping.is_set():
                pass
        except BaseException as error:  # surfaced by ``finish``
            self.error = error

    def finish(self, timeout: float = 600) -> None:
        self.join(timeout)
        assert not self.is_alive(), f"the feeder did not finish in {timeout:.0f} s"
        if self.error is not None:
            raise self.error
        assert self.producer.flush(timeout) == 0, "messages still undelivered"
        assert not self.ledger.failed, f"delivery failed: {self.ledger.failed[:3]}"
        assert self.ledger.delivered == self.ledger.messages


def produce_now(deployment: Deployment, ledger: Ledger, messages: Iterable[Outgoing]) -> None:
    """Produce and confirm every message (no pacing)."""
    producer = producer_for(deployment)
    topic = input_topic(deployment)
    for out in messages:
        produce(producer, topic, ledger, out)
    assert producer.flush(300) == 0, "messages still undelivered"
    assert not ledger.failed, f"delivery failed: {ledger.failed[:3]}"


# Until the worker survives a backlog past Faust's stream buffer (see
# test_faults.py::test_a_backlog_past_the_stream_buffer_is_consumed, xfail), scenarios
# about other faults produce in steps that keep the backlog below it.
BACKLOG_STEP: Final = 2000


def produce_in_steps(
    deployment: Deployment,
    ledger: Ledger,
    messages: Sequence[Outgoing],
    step: int = BACKLOG_STEP,
    timeout: float = 300,
) -> None:
    """Produce ``step`` messages at a time, each step once the workers have accounted for
    everything before it (failing at once if a worker dies)."""
    live = [w for w in deployment.workers if alive(w)]
    for start in range(0, len(messages), step):
        produce_now(deployment, ledger, messages[start : start + step])
        wait_live(
            live,
            lambda: deployment.accounted() >= ledger.total,
            timeout,
            f"{ledger.total} events and unreadable parts accounted for",
        )


# --------------------------------------------------------------------------- good traffic


_GARBAGE_ELEMENTS: Final[tuple[bytes, ...]] = (
    b'"not an event"',
    b"42",
    b"null",
    b"true",
    b"[]",
    b"[1,[2,[3]]]",
    b'{"seq":-1,"type":"turn/start","time":0,"data":{}}',
    b'{"type":"turn/start","time":0,"data":{}}',
    b'{"seq":"3","type":"turn/start","time":0,"data":{}}',
    b'{"seq":1.5,"type":"turn/start","time":0,"data":{}}',
    b'{"seq":true,"type":"turn/start","time":0,"data":{}}',
    b'{"seq":9007199254740992,"type":"turn/start","time":0,"data":{}}',
    b'{"seq":1e400,"type":"turn/start","time":0,"data":{}}',
    b'{"type":"session","id":"not-a-header-here"}',
    b'{"type":"text-chunks","seq0":0,"time0":0,"data":{}}',
    b'{"type":"tool-call-chunks","seq0":-4,"time0":0,"data":{"dt":[],"args":[]}}',
    b'{"type":"reasoning-chunks","seq0":3,"time0":0,'
    b'"data":{"turn":0,"step":0,"index":0,"dt":[1],"texts":["a","b","c"]}}',
)

_GARBAGE_MESSAGES: Final[tuple[bytes, ...]] = (
    b"{not json",
    b"",
    b"nul",
    b"[1,2",
    b'{"seq":NaN}',
    b'{"seq":Infinity,"type":"turn/start","time":0,"data":{}}',
    b"\xff\xfe\x00{",
    b'"\xed\xa0\x80"',  # a lone surrogate as raw bytes: not UTF-8, so not JSON
    b'{"seq":0,"type":"turn/start","time":0,"data":{"x":"\xed\xb0\x80"}}',
    b'{"seq":0,"type":"turn/start","time":0,"data":{}} trailing',
    b"42",
    b'"a string"',
    b"null",
    b"false",
    b'{"type":"turn/start","time":0,"data":{}}',
    b'{"seq":-1,"type":"turn/start","time":0,"data":{}}',
    b'{"seq":"0","type":"turn/start","time":0,"data":{}}',
    b'{"seq":1e400,"type":"turn/start","time":0,"data":{}}',
    b'{"seq":18446744073709551617,"type":"turn/start","time":0,"data":{}}',
    b'{"type":"session","id":"a-header-mid-stream"}',
    b'{"type":"text-chunks","seq0":0,"time0":0,"data":{"turn":0}}',
    b"[]",  # an empty segment
)


def garbage_message(rng: random.Random, key: bytes | None) -> Outgoing:
    """An unreadable message (as a whole) for ``key``."""
    return garbage(key, rng.choice(_GARBAGE_MESSAGES), "garbage")


def garbage_part(rng: random.Random) -> Part:
    """A segment element that is JSON but not an event."""
    return Part(rng.choice(_GARBAGE_ELEMENTS), 0)


def session_parts(
    rng: random.Random, session: str, events: int, pack: bool = True, clean: bool = False
) -> list[Part]:
    """A generated session (nasty but valid) as parts: events, and packed chunk rows.

    The generator plants a claim-range mismatch (a fault) in some sessions; ``clean``
    sessions are built without it, so they must come out of any fold fault-free."""
    if clean:
        builder = _SessionBuilder(rng, events, v3_ops=False)
        builder.mismatch_budget = 0  # no planted fault
        generated = builder.build()
    else:
        generated = generate_session(rng, session, events)
    records = pack_records(generated, rng) if pack else list(generated)
    parts = []
    for record in records:
        if isinstance(record, dict) and record.get("type") in _ROW_TYPES:
            data = record["data"]
            members = data.get("texts", data.get("args", []))
            parts.append(Part(text_of(record), len(members)))
        else:
            parts.append(Part(text_of(record), 1))
    return parts


_ROW_TYPES: Final = ("text-chunks", "reasoning-chunks", "tool-call-chunks")


def chunked(
    rng: random.Random,
    key: bytes,
    parts: Sequence[Part],
    limits: Limits,
    segment_max: int,
    garbage_rate: float = 0.0,
) -> list[Outgoing]:
    """A session's parts as messages: single events and segments of up to
    ``segment_max`` parts, some with an unreadable element slipped in."""
    out: list[Outgoing] = []
    i = 0
    while i < len(parts):
        size = rng.randint(1, segment_max)
        group = list(parts[i : i + size])
        i += size
        if garbage_rate and rng.random() < garbage_rate:
            group.insert(rng.randint(0, len(group)), garbage_part(rng))
        if len(group) == 1 and group[0].readable and rng.random() < 0.7:
            out.append(single(key, group[0], limits, "event"))
        else:
            out.append(segment(key, group, limits, "segment"))
    return out


def interleave(rng: random.Random, queues: Sequence[Sequence[Outgoing]]) -> list[Outgoing]:
    """Merge per-key message queues in a random order, keeping each queue's own order."""
    cursors = [0] * len(queues)
    live = [i for i, q in enumerate(queues) if q]
    merged: list[Outgoing] = []
    while live:
        pick = rng.randrange(len(live))
        q = live[pick]
        merged.append(queues[q][cursors[q]])
        cursors[q] += 1
        if cursors[q] == len(queues[q]):
            live[pick] = live[-1]
            live.pop()
    return merged


def session_traffic(
    rng: random.Random,
    prefix: str,
    sessions: int,
    events: tuple[int, int],
    *,
    segment_max: int = 6,
    garbage_rate: float = 0.02,
    limits: Limits = DEFAULT_LIMITS,
) -> list[Outgoing]:
    """Generated sessions (nasty but valid), as interleaved single events, segments and
    packed chunk rows, with a few unreadable messages and elements mixed in."""
    queues: list[list[Outgoing]] = []
    keys = []
    for i in range(sessions):
        session = f"{prefix}-{i}" if i % 7 else f"{prefix} ✓\u2028ü-{i}"
        key = session.encode()
        keys.append(key)
        parts = session_parts(rng, session, rng.randint(*events))
        queues.append(chunked(rng, key, parts, limits, segment_max, garbage_rate))
    junk = [
        garbage_message(rng, rng.choice([*keys, None, b""]))
        for _ in range(int(garbage_rate * sum(len(q) for q in queues)))
    ]
    return interleave(rng, [*queues, *[[j] for j in junk]])


def ticks(key: bytes, first: int, count: int, limits: Limits = DEFAULT_LIMITS) -> list[Outgoing]:
    """``count`` passive events of one session from seq ``first`` (a heartbeat)."""
    return [
        single(
            key,
            Part(orjson.dumps({"type": "turn/start", "seq": s, "time": s, "data": {"turn": s}})),
            limits,
            "tick",
        )
        for s in range(first, first + count)
    ]


# --------------------------------------------------------------------------- workers


def readyz(worker: Worker) -> dict[str, Any]:
    """The worker's ``/readyz`` body (``{}`` when nothing answers)."""
    try:
        with urllib.request.urlopen(
            f"http://127.0.0.1:{worker.metrics_port}/readyz", timeout=5
        ) as page:
            body: dict[str, Any] = json.loads(page.read())
            return body
    except urllib.error.HTTPError as error:
        body = json.loads(error.read() or b"{}")
        return body
    except OSError:
        return {}


def assigned(worker: Worker) -> list[int]:
    return list(readyz(worker).get("partitions", []))


def alive(worker: Worker) -> bool:
    return worker.process is not None and worker.process.poll() is None


def assert_alive(worker: Worker) -> None:
    if alive(worker):
        return
    assert worker.process is not None
    log = worker.log()
    crash = log.find("Traceback")
    first = log[max(0, crash - 300) : crash + 2500] if crash >= 0 else ""
    raise AssertionError(
        f"worker {worker.worker_id} died (exit {worker.process.returncode});"
        f" first traceback:\n{first}\n...\nlast lines:\n{log[-1500:]}"
    )


def wait_live(
    workers: Sequence[Worker],
    check: Callable[[], bool],
    timeout: float,
    what: str,
    every: float = 0.5,
) -> None:
    """``wait_until``, failing at once (with its log) when one of ``workers`` dies."""

    def done() -> bool:
        for worker in workers:
            assert_alive(worker)
        return check()

    wait_until(done, timeout, what, every)


def cpu_seconds(worker: Worker) -> float:
    """CPU time (user + system, all threads) the worker process has used so far."""
    assert worker.process is not None
    fields = Path(f"/proc/{worker.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def log_lines(worker: Worker) -> int:
    with worker.log_path.open("rb") as log:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: log.read(1 << 20), b""))


@dataclass(frozen=True)
class Outage:
    """What a worker did while something it depends on was down."""

    seconds: float
    cpu_seconds: float
    log_lines: int

    @property
    def cores(self) -> float:
        return self.cpu_seconds / self.seconds

    @property
    def lines_per_second(self) -> float:
        return self.log_lines / self.seconds

    def line(self) -> str:
        return (
            f"{self.seconds:.1f} s: {self.cores:.0%} of a core,"
            f" {self.log_lines} log lines ({self.lines_per_second:,.0f}/s)"
        )


def wipe_state(worker: Worker) -> None:
    """Empty the worker's state directory (as on a new host)."""
    shutil.rmtree(worker.deployment.workdir / f"state-{worker.worker_id}", ignore_errors=True)


def wait_assignment(workers: Sequence[Worker], partitions: int, timeout: float = 120) -> None:
    """Until the live workers' assignments cover every input partition exactly once."""

    def settled() -> bool:
        owned = [p for w in workers if alive(w) for p in assigned(w)]
        return sorted(owned) == list(range(partitions))

    wait_until(settled, timeout, "every partition to be owned by exactly one worker", every=0.5)
