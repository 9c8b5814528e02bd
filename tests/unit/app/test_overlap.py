"""A worker behind folds the next batch while the last one waits for the broker and Redis
(``Worker.take``, ``Worker.commit``): without a broker or Redis, an outbox and a sink that
answer when the test says, the real fold, publisher and metrics in between."""

import asyncio
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from stream.app import worker as app_worker
from stream.app.table import KeptRecords
from stream.app.worker import Flight, Worker
from stream.config import Settings
from stream.publish.publisher import Publisher
from stream.publish.redis_sink import PermanentRedisError
from stream.session.batch import PARTITION_KEY
from tests.generators.sessions import encode_json, generate_session

TOPIC = "events-in"


@dataclass
class Record:
    """A fetched record as the agent hands it to ``commit`` (Faust's message)."""

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

    def __init__(self) -> None:
        self.rows: dict[tuple[int, bytes], bytes] = {}
        self.kept = KeptRecords(1000)

    def load(self, key: bytes, partition: int) -> bytes | None:
        return self.rows.get((partition, key))


class Outbox:
    """The Kafka side: every record logged as it is sent; a batch's deliveries resolve
    when the test resolves the gate they were sent under."""

    def __init__(self, table: Table) -> None:
        self.table = table
        self.sent: list[tuple[str, bytes | None, int]] = []  # (kind, key, batch number)
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
        return self.gates[-1]

    def write_row(self, key: bytes, row: bytes | None, partition: int) -> "asyncio.Future[None]":
        assert row is not None
        self.table.rows[(partition, key)] = row
        return self._sent("row", key)

    def send_update(
        self, key: bytes, payload: bytes | None, headers: list[tuple[str, bytes]]
    ) -> "asyncio.Future[None]":
        return self._sent("update", key)

    def send_dead_letter(self, letter: Any) -> "asyncio.Future[None]":
        return self._sent("dead", None)


class Sink:
    """Redis: each write logged (the sessions' accounted events), answered at once; the
    next ``refuse`` writes are refused permanently."""

    def __init__(self) -> None:
        self.writes: list[list[tuple[str, int]]] = []
        self.refuse = 0

    async def write(self, updates: list[Any], *args: Any, **kwargs: Any) -> list[int]:
        await asyncio.sleep(0)
        if self.refuse:
            self.refuse -= 1
            raise PermanentRedisError("NOPERM refused")
        self.writes.append([(u.session_id, u.version[2]) for u in updates])
        return [1] * len(updates)


@dataclass
class Rig:
    worker: Worker
    table: Table
    outbox: Outbox
    sink: Sink
    acked: list[int]  # the first offset of each batch acked, in order
    folds: list[int]  # the first offset of each batch folded, in order


def rig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Rig:
    settings = Settings(state_dir=str(tmp_path), input_topic=TOPIC)
    worker = Worker(settings, 2)
    table = Table()
    outbox = Outbox(table)
    sink = Sink()
    worker.table = table  # type: ignore[assignment]
    worker._publisher = Publisher(settings, outbox, sink)  # type: ignore[arg-type]
    acked: list[int] = []
    folds: list[int] = []
    monkeypatch.setattr(app_worker.batching, "ack", lambda batch, _: acked.append(batch[0].offset))
    fold = app_worker.fold_batch

    def counted(messages: Any, *args: Any) -> Any:
        folds.append(messages[0].offset)
        return fold(messages, *args)

    monkeypatch.setattr(app_worker, "fold_batch", counted)
    return Rig(worker, table, outbox, sink, acked, folds)


def batches(sizes: tuple[int, ...]) -> list[list[Record]]:
    """Two sessions' events in batches of ``sizes``: each batch folds on the rows of the
    one before it."""
    rng = random.Random(7)
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
    for _ in range(n):
        await asyncio.sleep(0)


def one_after_the_other(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Rig:
    async def run() -> Rig:
        r = rig(tmp_path / "serial", monkeypatch)
        for batch in batches((20, 20, 20)):
            gate = r.outbox.gate()
            gate.set_result(None)
            await r.worker.take(batch).done
        return r

    return asyncio.run(run())


def test_the_next_batch_folds_while_the_last_waits_and_nothing_of_it_overtakes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    serial = one_after_the_other(tmp_path, monkeypatch)

    async def run() -> Rig:
        r = rig(tmp_path / "overlap", monkeypatch)
        first, second, third = batches((20, 20, 20))
        held = r.outbox.gate()
        a = r.worker.take(first)
        await a.sent
        b = r.worker.take(second, a)
        await turns()
        # The second batch is folded, on the rows the first put in the store; none of its
        # records leave before the first batch's are confirmed, and Redis waits too.
        assert r.folds == [0, 20]
        assert not b.sent.done()
        assert {n for _, _, n in r.outbox.sent} == {0}
        assert r.sink.writes == [] and r.acked == []
        r.outbox.gate().set_result(None)  # what the second batch will be sent under
        held.set_result(None)
        await b.sent
        c = r.worker.take(third, b)
        await c.done
        assert a.done.done() and b.done.done()
        return r

    overlapped = asyncio.run(run())
    assert overlapped.acked == serial.acked == [0, 20, 40]
    assert overlapped.sink.writes == serial.sink.writes  # the same updates, in order
    assert overlapped.table.rows == serial.table.rows
    assert [(k, key) for k, key, _ in overlapped.outbox.sent] == [
        (k, key) for k, key, _ in serial.outbox.sent
    ]
    assert any(key == PARTITION_KEY for _, key, _ in overlapped.outbox.sent)


def test_the_next_fold_waits_until_the_last_batch_s_records_have_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fold holds the loop: begun while the batch before it is still queued in the
    producer, it would hold that batch's produce request back until it ends."""

    async def run() -> None:
        r = rig(tmp_path, monkeypatch)
        first, second = batches((20, 20))
        held = r.outbox.gate()
        a = r.worker.take(first)
        await a.sent
        r.outbox.leaving = asyncio.get_running_loop().create_future()
        b = r.worker.take(second, a)
        await turns()
        assert r.folds == [0]  # the first batch's records have not left yet
        r.outbox.leaving.set_result(None)
        await turns()
        assert r.folds == [0, 20]
        r.outbox.gate().set_result(None)
        held.set_result(None)
        await b.done
        assert r.acked == [0, 20]

    asyncio.run(run())


def test_a_batch_that_fails_stops_the_one_folded_after_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def run() -> Rig:
        r = rig(tmp_path, monkeypatch)
        first, second = batches((20, 20))
        r.outbox.gate().set_result(None)
        r.sink.refuse = 1  # the first batch's write only
        a = r.worker.take(first)
        await a.sent
        b = r.worker.take(second, a)
        for flight in (a, b):
            with pytest.raises(PermanentRedisError):
                await flight.done
        return r

    r = asyncio.run(run())
    assert r.acked == []  # neither batch is committed past
    assert r.sink.writes == []


def test_a_sweep_waits_for_the_batches_folded_not_for_one_waiting_to_fold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``_landed`` under the lock: a batch folded and still waiting for the broker is waited
    for; one taken and not yet folded waits for the lock, so waiting for it would never end."""

    async def run() -> tuple[Rig, list[str]]:
        r = rig(tmp_path, monkeypatch)
        first, second = batches((20, 20))
        held = r.outbox.gate()
        a = r.worker.take(first)
        await a.sent
        order: list[str] = []
        took = asyncio.Event()

        async def sweep() -> None:
            async with r.worker.lock:
                await took.wait()  # the second batch is taken while the sweep holds the lock
                await r.worker._landed()
                order.append("sweep")

        sweeping = asyncio.ensure_future(sweep())
        await turns()
        b = r.worker.take(second, a)  # waits for the lock the sweep holds
        took.set()
        await turns()
        assert order == []  # the first batch is not acked yet
        r.outbox.gate().set_result(None)
        held.set_result(None)
        await asyncio.wait_for(sweeping, 5)
        order.append(f"acked {r.acked}")
        await b.done
        return r, order

    r, order = asyncio.run(run())
    assert order == ["sweep", "acked [0]"]
    assert r.acked == [0, 20]


def test_a_flight_forgets_the_batch_before_it_once_sent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def run() -> Flight:
        r = rig(tmp_path, monkeypatch)
        first, second = batches((20, 20))
        r.outbox.gate().set_result(None)
        a = r.worker.take(first)
        b = r.worker.take(second, a)
        await b.done
        return b

    assert asyncio.run(run()).after is None  # no chain of every batch ever taken
