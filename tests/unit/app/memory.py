"""The commit path in memory: a source of records, a table, a broker and a Redis that
answer when the test says, and the real core, publisher, claims and metrics in between
(``stream.app.commit.Parts``). No Kafka, Faust or Redis runs, and nothing is patched.
Every effect also goes to one ``journal`` (rows stored, records sent, Redis writes, acks),
so a test can check the order of a commit's steps across the parts."""

import asyncio
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stream.app.claims import Claims
from stream.app.commit import Committer, Parts
from stream.app.table import KeptRecords
from stream.config import Settings
from stream.ops.metrics import Metrics
from stream.publish.publisher import Publisher
from stream.publish.redis_sink import PermanentRedisError
from stream.session.batch import PARTITION_KEY, BatchResult, Message, fold_batch
from tests.generators.sessions import encode_json, generate_session

TOPIC = "events-in"


def named(key: bytes | None) -> str:
    """A key as the journal names it: a session's id, ``partition`` (its partition's row)
    or ``-`` (none: a dead letter)."""
    if key is None:
        return "-"
    return "partition" if key == PARTITION_KEY else key.decode()


@dataclass
class Record:
    """A fetched record as the agent hands it to the commit path (Faust's message)."""

    key: bytes
    value: bytes
    partition: int
    offset: int
    topic: str = TOPIC
    headers: list[tuple[str, bytes]] = field(default_factory=list)
    timestamp: float = 0.0


class Table:
    """The sessions table: rows by (partition, key), kept records as the worker keeps them."""

    changelog = "changelog"

    def __init__(self, journal: list[str] | None = None) -> None:
        self.rows: dict[tuple[int, bytes], bytes] = {}
        self.kept = KeptRecords(1000)
        self.journal: list[str] = [] if journal is None else journal

    def load(self, key: bytes, partition: int) -> bytes | None:
        return self.rows.get((partition, key))

    def put(self, key: bytes, row: bytes, partition: int) -> None:
        self.journal.append(f"stored {named(key)}")
        self.rows[(partition, key)] = row

    def delete(self, key: bytes, partition: int) -> None:
        self.journal.append(f"deleted {named(key)}")
        self.rows.pop((partition, key), None)


class Outbox:
    """The Kafka side: every record logged as it is sent; a batch's deliveries resolve
    when the test resolves the gate they were sent under."""

    def __init__(self, table: Table) -> None:
        self.table = table
        self.journal = table.journal
        self.sent: list[tuple[str, bytes | None, int]] = []  # (kind, key, gate number)
        self.gates: list[asyncio.Future[None]] = []
        self.leaving: asyncio.Future[None] | None = None  # set: records sent stay queued

    async def left(self) -> None:
        if self.leaving is not None:
            await self.leaving

    def gate(self) -> "asyncio.Future[None]":
        self.gates.append(asyncio.get_running_loop().create_future())
        return self.gates[-1]

    def _sent(self, kind: str, key: bytes | None) -> "asyncio.Future[None]":
        self.sent.append((kind, key, len(self.gates) - 1))
        self.journal.append(f"sent {kind} {named(key)}")
        return self.gates[-1]

    def send_row(self, key: bytes, row: bytes | None, partition: int) -> "asyncio.Future[None]":
        return self._sent("row", key)

    def send_update(
        self, key: bytes, payload: bytes | None, headers: list[tuple[str, bytes]]
    ) -> "asyncio.Future[None]":
        return self._sent("update", key)

    def send_dead_letter(self, letter: Any) -> "asyncio.Future[None]":
        return self._sent("dead", None)


class Sink:
    """Redis: each write logged (the sessions' accounted events), answered at once (or
    once ``holding`` resolves, when set); the next ``refuse`` writes are refused
    permanently."""

    def __init__(self, journal: list[str] | None = None) -> None:
        self.writes: list[list[tuple[str, int]]] = []
        self.refuse = 0
        self.fail: BaseException | None = None  # raised by every write while set (an outage)
        self.holding: asyncio.Future[None] | None = None
        self.journal: list[str] = [] if journal is None else journal

    async def write(self, updates: list[Any], *args: Any, **kwargs: Any) -> list[int]:
        await asyncio.sleep(0)
        if self.holding is not None:
            await self.holding
        if self.fail is not None:
            raise self.fail
        if self.refuse:
            self.refuse -= 1
            raise PermanentRedisError("NOPERM refused")
        self.writes.append([(u.session_id, u.version[2]) for u in updates])
        self.journal.append("redis")
        return [1] * len(updates)


@dataclass
class Harness:
    """A commit path on in-memory parts, and what happened to its batches."""

    committer: Committer
    table: Table
    outbox: Outbox
    sink: Sink
    acked: list[int] = field(default_factory=list)  # each acked batch's first offset
    folds: list[int] = field(default_factory=list)  # each folded batch's first offset
    committed: list[BatchResult] = field(default_factory=list)
    journal: list[str] = field(default_factory=list)  # every part's effects, in order


def harness(state_dir: Path, settings: Settings | None = None) -> Harness:
    """The commit path as the worker assembles it, on in-memory parts."""
    settings = settings or Settings(state_dir=str(state_dir), input_topic=TOPIC)
    journal: list[str] = []
    table = Table(journal)
    outbox = Outbox(table)
    sink = Sink(journal)
    publisher = Publisher(settings, outbox, sink)  # type: ignore[arg-type]
    stats = Metrics.create(settings)
    run: Harness

    def fold(messages: Any, *args: Any) -> BatchResult:
        run.folds.append(messages[0].offset)
        return fold_batch(messages, *args)

    def committed(messages: list[Message], result: BatchResult) -> None:
        run.committed.append(result)

    def ack(batch: list[Record]) -> None:
        journal.append(f"acked {batch[0].offset}")
        run.acked.append(batch[0].offset)

    parts = Parts(
        table=table,
        changelog=outbox,
        publisher=lambda: publisher,
        ack=ack,
        stats=stats,
        gate=Claims(settings, stats),
        committed=committed,
        fold=fold,
    )
    run = Harness(Committer(parts), table, outbox, sink, journal=journal)
    return run


def batches(sizes: tuple[int, ...], seed: int = 7) -> list[list[Record]]:
    """Two sessions' events in batches of ``sizes``: each batch folds on the rows of the
    one before it."""
    rng = random.Random(seed)
    logs = {
        f"s{i}".encode(): [encode_json(e).encode() for e in generate_session(rng, f"s{i}", 30)]
        for i in range(2)
    }
    records = [
        Record(key, log[n], 0, 2 * n + i)
        for n in range(30)
        for i, (key, log) in enumerate(logs.items())
    ]
    out, start = [], 0
    for size in sizes:
        out.append(records[start : start + size])
        start += size
    return out


async def turns(n: int = 20) -> None:
    """Let the loop run ``n`` times: whatever can go on without the test does."""
    for _ in range(n):
        await asyncio.sleep(0)
