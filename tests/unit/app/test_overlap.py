"""A worker behind folds the next batch while the last one waits for the broker and Redis
(``Committer.take``, ``Committer.commit``): the commit path on in-memory parts
(``tests.unit.app.memory``), the real fold, publisher, claims and metrics in between; no
Kafka, Faust or Redis, nothing patched."""

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from stream.app.commit import IN_FLIGHT, Flight
from stream.publish.redis_sink import PermanentRedisError
from stream.session.batch import PARTITION_KEY
from tests.unit.app.memory import Harness, batches, harness, turns
from tests.waiting import until


def one_after_the_other(tmp_path: Path) -> Harness:
    async def run() -> Harness:
        r = harness(tmp_path / "serial")
        for batch in batches((20, 20, 20)):
            gate = r.outbox.gate()
            gate.set_result(None)
            await r.committer.take(batch).acked
        return r

    return asyncio.run(run())


def test_the_next_batch_folds_while_the_last_waits_and_nothing_of_it_overtakes(
    tmp_path: Path,
) -> None:
    serial = one_after_the_other(tmp_path)

    async def run() -> Harness:
        r = harness(tmp_path / "overlap")
        first, second, third = batches((20, 20, 20))
        held = r.outbox.gate()
        a = r.committer.take(first)
        await a.stored
        b = r.committer.take(second, a)
        await turns()
        # The second batch is folded, on the rows the first put in the store, and its
        # rows stored and written to Redis after the first batch's (docs/notes/022); none
        # of its records leave before the first batch's are confirmed.
        assert r.folds == [0, 20]
        assert b.stored.done() and b.cached.done() and not b.delivered.done()
        assert {n for _, _, n in r.outbox.sent} == {0}
        assert len(r.sink.writes) == 2 and r.acked == []
        r.outbox.gate().set_result(None)  # what the second batch will be sent under
        held.set_result(None)
        await b.stored
        c = r.committer.take(third, b)
        await c.acked
        assert a.acked.done() and b.acked.done()
        return r

    overlapped = asyncio.run(run())
    assert overlapped.acked == serial.acked == [0, 20, 40]
    assert overlapped.sink.writes == serial.sink.writes  # the same updates, in order
    assert overlapped.table.rows == serial.table.rows
    assert [(k, key) for k, key, _ in overlapped.outbox.sent] == [
        (k, key) for k, key, _ in serial.outbox.sent
    ]
    assert any(key == PARTITION_KEY for _, key, _ in overlapped.outbox.sent)


def test_the_next_fold_waits_until_the_last_batch_s_records_have_left(tmp_path: Path) -> None:
    """A fold holds the loop: begun while the batch before it is still queued in the
    producer, it would hold that batch's produce request back until it ends."""

    async def run() -> None:
        r = harness(tmp_path)
        first, second = batches((20, 20))
        held = r.outbox.gate()
        a = r.committer.take(first)
        await a.stored
        r.outbox.leaving = asyncio.get_running_loop().create_future()
        b = r.committer.take(second, a)
        await turns()
        assert r.folds == [0]  # the first batch's records have not left yet
        r.outbox.leaving.set_result(None)
        await turns()
        assert r.folds == [0, 20]
        r.outbox.gate().set_result(None)
        held.set_result(None)
        await b.acked
        assert r.acked == [0, 20]

    asyncio.run(run())


def test_a_batch_that_fails_stops_the_one_folded_after_it(tmp_path: Path) -> None:
    async def run() -> Harness:
        r = harness(tmp_path)
        first, second = batches((20, 20))
        r.outbox.gate().set_result(None)
        r.sink.refuse = 1  # the first batch's write only
        a = r.committer.take(first)
        await a.stored
        b = r.committer.take(second, a)
        for flight in (a, b):
            with pytest.raises(PermanentRedisError):
                await flight.acked
        return r

    r = asyncio.run(run())
    assert r.acked == []  # neither batch is committed past
    assert r.sink.writes == []


def test_a_sweep_waits_for_the_batches_folded_not_for_one_waiting_to_fold(tmp_path: Path) -> None:
    """``landed`` under the lock: a batch folded and still waiting for the broker is waited
    for; one taken and not yet folded waits for the lock, so waiting for it would never end."""

    async def run() -> tuple[Harness, list[str]]:
        r = harness(tmp_path)
        first, second = batches((20, 20))
        held = r.outbox.gate()
        a = r.committer.take(first)
        await a.stored
        order: list[str] = []
        took = asyncio.Event()

        async def sweep() -> None:
            async with r.committer.lock:
                await took.wait()  # the second batch is taken while the sweep holds the lock
                await r.committer.landed()
                order.append("sweep")

        sweeping = asyncio.ensure_future(sweep())
        await turns()
        b = r.committer.take(second, a)  # waits for the lock the sweep holds
        took.set()
        await turns()
        assert order == []  # the first batch is not acked yet
        r.outbox.gate().set_result(None)
        held.set_result(None)
        await asyncio.wait_for(sweeping, 5)
        order.append(f"acked {r.acked}")
        await b.acked
        return r, order

    r, order = asyncio.run(run())
    assert order == ["sweep", "acked [0]"]
    assert r.acked == [0, 20]


def test_a_flight_forgets_the_batch_before_it_once_sent(tmp_path: Path) -> None:
    async def run() -> Flight:
        r = harness(tmp_path)
        first, second = batches((20, 20))
        r.outbox.gate().set_result(None)
        a = r.committer.take(first)
        b = r.committer.take(second, a)
        await b.acked
        return b

    assert asyncio.run(run()).before is None  # no chain of every batch ever taken


def test_redis_is_written_while_the_records_are_in_flight_and_the_ack_waits_for_both(
    tmp_path: Path,
) -> None:
    """An update reaches Redis one broker round trip sooner (docs/notes/022); the batch's
    offsets are acked only once its records are confirmed and its Redis write is done."""

    async def run() -> None:
        r = harness(tmp_path)
        (first,) = batches((20,))
        held = r.outbox.gate()
        a = r.committer.take(first)
        await turns()
        assert len(r.sink.writes) == 1  # written before the broker confirmed the records
        assert a.cached.done() and not a.delivered.done() and r.acked == []
        held.set_result(None)
        await a.acked
        assert r.acked == [0]

    asyncio.run(run())


def test_a_redis_write_still_under_way_holds_the_ack_and_the_next_batch_s_write(
    tmp_path: Path,
) -> None:
    async def run() -> None:
        r = harness(tmp_path)
        first, second = batches((20, 20))
        r.outbox.gate().set_result(None)  # the broker confirms at once
        r.sink.holding = asyncio.get_running_loop().create_future()
        a = r.committer.take(first)
        await a.stored
        b = r.committer.take(second, a)
        await b.stored
        await turns()
        assert a.delivered.done() and b.delivered.done()
        assert r.acked == [] and r.sink.writes == []  # both wait for the first write
        r.sink.holding.set_result(None)
        await b.acked
        assert r.acked == [0, 20]
        earlier, later = (dict(w) for w in r.sink.writes)  # in batch order
        assert earlier.keys() == later.keys()
        assert all(earlier[s] < later[s] for s in earlier)

    asyncio.run(run())


def test_a_failed_delivery_is_re_sent_and_the_batch_acked_only_once_it_is_confirmed(
    tmp_path: Path,
) -> None:
    """Redis took the batch's updates while its records were in flight; the broker then
    refused them. The records are sent again (Redis is not written twice: the write was
    done), and the offsets wait for the confirmation of the second sending."""

    async def run() -> None:
        r = harness(tmp_path)
        (first,) = batches((20,))
        refused = r.outbox.gate()
        a = r.committer.take(first)
        await turns()
        assert len(r.sink.writes) == 1
        again = r.outbox.gate()  # what the re-sending goes out under
        refused.set_exception(ConnectionError("broker gone"))
        # Sent again after the re-send's backoff (0.2 s)
        await until(lambda: {n for _, _, n in r.outbox.sent} == {0, 1}, what="the re-send")
        assert r.acked == [] and not a.delivered.done()
        again.set_result(None)
        await a.acked
        assert r.acked == [0] and len(r.sink.writes) == 1

    asyncio.run(run())


async def _source(items: list[Any]) -> AsyncIterator[Any]:
    for item in items:
        yield item


def test_a_broker_slow_to_confirm_holds_the_offsets_not_the_updates(tmp_path: Path) -> None:
    """``run``: the next batch is taken once the last one is in Redis, up to ``IN_FLIGHT``
    unacked; the records wait for the broker in batch order, and so do the acks."""
    serial = one_after_the_other(tmp_path)

    async def run() -> Harness:
        r = harness(tmp_path / "slow")
        held = r.outbox.gate()
        running = asyncio.ensure_future(r.committer.run(_source(batches((10,) * 6)), 10_000))
        await turns(200)
        # As many batches as may be in flight reached Redis; none was acked, and only the
        # first batch's records left.
        assert len(r.sink.writes) == IN_FLIGHT and r.acked == []
        assert r.folds == [0, 10, 20, 30]
        first = {key for kind, key, _ in r.outbox.sent}
        assert len(first) <= 3  # the first batch's two sessions and its partition row
        r.outbox.gate().set_result(None)  # what the later batches go out under
        held.set_result(None)
        await asyncio.wait_for(running, 5)
        return r

    slow = asyncio.run(run())
    assert slow.acked == [0, 10, 20, 30, 40, 50]
    # Six batches of ten carry the same updates as three of twenty, in the same order.
    final = {}
    for write in slow.sink.writes:
        final.update(dict(write))
    assert final == {s: n for write in serial.sink.writes for s, n in write}
    assert slow.table.rows == serial.table.rows


def test_a_re_sending_leaves_newer_rows_in_the_store(tmp_path: Path) -> None:
    """A batch's records are re-sent after the next batch stored its rows: the store keeps
    the newer rows (a re-sending sends records, it stores nothing)."""
    serial = one_after_the_other(tmp_path)

    async def run() -> Harness:
        r = harness(tmp_path / "resent")
        first, second, third = batches((20, 20, 20))
        refused = r.outbox.gate()
        a = r.committer.take(first)
        await a.cached
        b = r.committer.take(second, a)
        await b.cached  # its rows are stored, its records wait for the first batch's
        again = r.outbox.gate()
        refused.set_exception(ConnectionError("broker gone"))
        # The first batch's records sent again after the re-send's backoff (0.2 s); the
        # second's wait for their confirmation, so nothing else goes out under ``again``.
        await until(lambda: any(n == 1 for _, _, n in r.outbox.sent), what="the re-send")
        again.set_result(None)
        await b.acked
        c = r.committer.take(third, None)
        await c.acked
        return r

    resent = asyncio.run(run())
    assert resent.acked == [0, 20, 40]
    assert resent.table.rows == serial.table.rows
