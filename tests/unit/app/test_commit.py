"""The order of a commit's steps across its parts (``Committer.commit``): the committer
writes the batch's rows and their changelog records itself, the publisher sends what the
batch publishes, and nothing is acked before the broker and Redis took it all; a batch
whose publishing fails is never acked. On in-memory parts (``tests.unit.app.memory``),
whose ``journal`` records every effect in the order it happened."""

import asyncio
from pathlib import Path
from typing import Any

import pytest
from redis import exceptions as rx

from stream.session.batch import PARTITION_KEY
from tests.unit.app.memory import batches, harness, named, turns
from tests.unit.publish.test_publisher import swept_one


def test_the_committer_stores_the_rows_then_sends_every_record_and_acks_after_both(
    tmp_path: Path,
) -> None:
    async def run() -> None:
        r = harness(tmp_path)
        (batch,) = batches((20,))

        held = r.outbox.gate()
        flight = r.committer.take(batch)
        await turns()
        assert r.committed == [] and r.acked == []  # the broker has not confirmed yet
        held.set_result(None)
        await flight.acked
        (result,) = r.committed
        sessions = [named(c.key) for c in result.sessions]
        rows = [*sessions, *(named(PARTITION_KEY) for _ in result.partitions)]
        assert len(sessions) == 2 and rows[-1] == "partition"
        assert r.journal == [
            *(f"stored {key}" for key in rows),  # 2: the rows, before anything leaves
            *(f"sent row {key}" for key in rows),  # 4: their changelog records, first
            *(f"sent update {key}" for key in sessions),  # then the publisher's records
            "redis",  # 3: started before 4, done while the records wait for the broker
            "acked 0",  # 6: after the delivery (5) and the Redis write
        ]

    asyncio.run(run())


def test_a_batch_after_another_stores_its_rows_before_the_first_is_confirmed(
    tmp_path: Path,
) -> None:
    """The next batch folds on the rows the one before it stored, while that one waits for
    the broker; its own records leave only once that batch's are confirmed."""

    async def run() -> tuple[list[str], list[str]]:
        r = harness(tmp_path)
        first, second = batches((20, 20))
        held = r.outbox.gate()
        a = r.committer.take(first)
        await a.stored
        b = r.committer.take(second, a)
        await b.cached
        waiting = list(r.journal)
        r.outbox.gate().set_result(None)  # what the second batch goes out under
        held.set_result(None)
        await b.acked
        return waiting, r.journal[len(waiting) :]

    waiting, landed = asyncio.run(run())

    def count(journal: list[str], what: str) -> int:
        return sum(e.startswith(what) for e in journal)

    # Before the first batch is confirmed: both batches' rows stored and in Redis, and
    # only the first batch's records sent.
    assert count(waiting, "stored") == 6 and count(waiting, "redis") == 2
    assert count(waiting, "sent row") == 3 and count(waiting, "acked") == 0
    # Once it is: the second batch's records, nothing stored again, the acks in order.
    assert count(landed, "stored") == 0 and count(landed, "sent row") == 3
    assert landed[-2:] == ["acked 0", "acked 20"]


def test_a_batch_whose_publishing_fails_is_not_acked(tmp_path: Path) -> None:
    """The publisher raising while it sends the batch's records (step 4): the batch's
    rows are stored (a crash there leaves the same: the next owner refolds them), its
    Redis write is abandoned before it ran, and its offsets are never acked."""

    async def run() -> None:
        r = harness(tmp_path)
        (batch,) = batches((20,))
        r.outbox.gate().set_result(None)

        def refused(*args: object) -> None:
            raise RuntimeError("the producer is closed")

        r.outbox.send_update = refused  # type: ignore[assignment,method-assign]
        flight = r.committer.take(batch)
        with pytest.raises(RuntimeError, match="closed"):
            await flight.acked
        await turns()
        assert r.acked == [] and r.committed == []
        assert r.sink.writes == [] and "redis" not in r.journal
        assert [e for e in r.journal if e.startswith("stored")]  # step 2 happened
        for future in (flight.delivered, flight.cached):
            assert isinstance(future.exception(), RuntimeError)

    asyncio.run(run())


def test_a_batch_whose_records_are_never_confirmed_is_never_acked(tmp_path: Path) -> None:
    async def run() -> None:
        r = harness(tmp_path)
        (batch,) = batches((20,))
        r.outbox.gate()  # never resolved: the broker does not answer
        flight = r.committer.take(batch)
        await flight.cached
        await turns(100)
        assert not flight.delivered.done() and r.acked == [] and r.committed == []
        flight.acked.cancel()
        with pytest.raises(asyncio.CancelledError):
            await flight.acked
        assert r.acked == []

    asyncio.run(run())


# --- a sweep (``Committer.sweep``): the order that survives a crash ------------------------------
def _swept_into(r: Any) -> Any:
    """A sweep of one session (``old``), its rows in the harness's table."""
    swept = swept_one()
    for change in swept.expired:
        r.table.rows[(swept.partition, change.key)] = b"its row"
    return swept


def test_a_sweep_stores_the_partition_row_then_drops_from_redis_then_sends_tombstones(
    tmp_path: Path,
) -> None:
    """Only the rows can bring a lost drop back: a worker that died after the tombstones
    but before the drop would leave the session in Redis for good."""

    async def run() -> bool:
        r = harness(tmp_path)
        r.outbox.gate().set_result(None)
        swept = _swept_into(r)
        async with r.committer.lock:
            removed = await r.committer.sweep(swept)
        assert r.journal == [
            "stored partition",  # 1: the partition row (its cursor) ...
            "sent row partition",  # ... and its changelog record, confirmed
            "redis",  # 2: the drop
            "deleted old",  # 3: the row out of the store,
            "sent row old",  # its changelog tombstone
            "sent update old",  # and its output tombstone
        ]
        assert (swept.partition, b"old") not in r.table.rows
        return removed

    assert asyncio.run(run()) is True


def test_a_sweep_while_redis_is_away_leaves_the_rows_and_sends_no_tombstone(
    tmp_path: Path,
) -> None:
    async def run() -> bool:
        r = harness(tmp_path)
        r.outbox.gate().set_result(None)
        swept = _swept_into(r)
        r.sink.fail = rx.ConnectionError("refused")
        async with r.committer.lock:
            removed = await r.committer.sweep(swept)
        assert r.journal == ["stored partition", "sent row partition"]
        assert (swept.partition, b"old") in r.table.rows  # a later sweep finds it again
        return removed

    assert asyncio.run(run()) is False
