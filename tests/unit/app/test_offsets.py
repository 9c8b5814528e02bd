"""The input offsets the bulk consumer accounts for (stream.app.offsets, through
stream.app.batching.BulkAcks and stream.app.fetch), without a broker: a commit never
passes an input offset that was neither acked nor confirmed empty; a record dropped
because a seek came first is fetched again even when the seek put the fetcher exactly
there, and nothing fetched during a seek is handed over; a jump in the offsets is fetched
again once before it counts as a hole (docs/notes/010, 024)."""

import asyncio
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from faust.transport.consumer import Consumer as FaustConsumer
from faust.types import TP

from stream.app import fetch, offsets
from stream.app.worker import assemble
from stream.config import Settings

TOPIC = "events-in"
TP0 = TP(TOPIC, 0)


def _bulk(topic: str) -> fetch.FetchSettings:
    """The consumer's settings with ``topic`` its input."""
    return fetch.FetchSettings(frozenset({topic}), None, None, "read_committed", False)


async def _unused(*args: Any) -> None:  # pragma: no cover - never called
    raise AssertionError(args)


@pytest.fixture(scope="module")
def consumer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    settings = Settings(state_dir=str(tmp_path_factory.mktemp("state")), input_topic=TOPIC)
    app = assemble(settings, 2).app
    yield app.transport.create_consumer(
        callback=_unused, on_partitions_revoked=_unused, on_partitions_assigned=_unused
    )


def _given(consumer: Any, tp: TP, acked: list[int], committed: int | None) -> None:
    consumer._acked[tp] = list(acked)
    consumer._acked_index[tp] = set(acked)
    consumer._committed_offset[tp] = committed
    consumer._gap.pop(tp, None)


def _expected(acked: set[int], empty: set[int], committed: int | None) -> int | None:
    """The model: from the committed offset (or the lowest acked, with none), the first
    offset neither acked nor confirmed empty."""
    base = committed if committed else min(acked)
    offset = base
    while offset in acked or offset in empty:
        offset += 1
    return offset if offset > base else None


def test_a_commit_reaches_the_first_offset_neither_acked_nor_confirmed_empty(
    consumer: Any,
) -> None:
    chance = random.Random(606)
    for case in range(600):
        acked = set(chance.sample(range(60), chance.randint(1, 40)))
        if case % 3 == 0:  # one run, the common case
            low = min(acked)
            acked = set(range(low, low + len(acked)))
        committed = chance.choice([None, 0, min(acked), min(acked) - 1, min(acked) + 2, 30])
        _given(consumer, TP0, chance.sample(sorted(acked), len(acked)), committed)
        empty: set[int] = set()
        for _ in range(chance.randint(0, 3)):  # holes the fetch confirmed (never acked)
            first = chance.randrange(60)
            span = set(range(first, first + chance.randint(1, 4))) - acked
            if span:
                first, last = min(span), max(span)
                span = set(range(first, last + 1))
                if not span & acked:
                    consumer._note_gap(TP0, first, last)
                    empty |= {o for o in span if committed is None or o >= committed}
        want = _expected(acked, empty, committed)
        assert consumer._new_offset(TP0) == want, (sorted(acked), committed, sorted(empty))
        reached = want if want is not None else (committed if committed else min(acked))
        left = sorted(o for o in acked if o >= reached)
        assert sorted(consumer._acked[TP0]) == left
        assert consumer._acked_index[TP0] == set(left)
        gaps = consumer._gap.get(TP0)
        assert not gaps or min(interval.begin for interval in gaps) >= reached


def test_the_record_at_the_committed_offset_holds_the_commit_until_it_is_acked(
    consumer: Any,
) -> None:
    """faust-streaming #606: Faust's own check lets the run start one past the committed
    offset, so the record there, still in flight or dropped by a seek, is committed over."""
    _given(consumer, TP0, [33, 34, 35], 32)
    assert FaustConsumer._new_offset(consumer, TP0) == 36  # Faust's: 32 is passed
    _given(consumer, TP0, [33, 34, 35], 32)
    assert consumer._new_offset(TP0) is None
    assert consumer._acked[TP0] == [33, 34, 35]  # kept for when 32 is acked
    consumer._acked[TP0].append(32)
    consumer._acked_index[TP0].add(32)
    assert consumer._new_offset(TP0) == 36
    assert not consumer._acked[TP0] and not consumer._acked_index[TP0]


def test_a_transaction_marker_at_the_committed_offset_is_passed_once_confirmed(
    consumer: Any,
) -> None:
    """After a seek to 10 the first record is 11 (10 is a commit marker): the jump from
    the read offset 9 is fetched twice, then noted, and the commit goes on past it. The
    record after a hole is not marked with it (Faust's ``_add_gap`` marks it)."""
    _given(consumer, TP0, [], 10)
    consumer._note_gap(TP0, 9 + 1, 11 - 1)
    assert consumer._new_offset(TP0) == 11  # past the marker, not past 11 (in flight)
    consumer._committed_offset[TP0] = 11  # what Faust's commit records
    consumer._acked[TP0].append(11)
    consumer._acked_index[TP0].add(11)
    assert consumer._new_offset(TP0) == 12
    assert not consumer._gap.get(TP0)


def test_a_hole_at_a_partitions_end_is_passed_with_nothing_acked(consumer: Any) -> None:
    """A transactional write ends in a commit marker: the partition's last offset holds no
    record and none follows it (``BulkConsumer._pass_empty_ends`` notes it). The commit
    reaches the end without a new ack, the partition listed for Faust's commit."""
    consumer._acked.pop(TP0, None)
    _given(consumer, TP0, [], 57)
    consumer._acked.pop(TP0)
    consumer._note_gap(TP0, 57, 57)
    assert TP0 in consumer._acked
    assert consumer._new_offset(TP0) == 58
    consumer._committed_offset[TP0] = 58
    assert consumer._new_offset(TP0) is None  # nothing more
    _given(consumer, TP0, [], None)  # never committed: nothing to start from
    consumer._note_gap(TP0, 57, 57)
    assert consumer._new_offset(TP0) is None


def test_a_hole_of_a_billion_offsets_is_passed_without_counting_them(consumer: Any) -> None:
    _given(consumer, TP0, [5, 1_000_000_006], 5)
    consumer._note_gap(TP0, 6, 1_000_000_005)  # e.g. records deleted by retention
    assert consumer._new_offset(TP0) == 1_000_000_007


def test_a_hole_below_the_committed_offset_is_clipped_to_it(consumer: Any) -> None:
    _given(consumer, TP0, [20], 20)
    consumer._note_gap(TP0, 3, 19)  # confirmed after a commit had already passed it
    assert consumer._new_offset(TP0) == 21
    _given(consumer, TP0, [20], 20)
    consumer._note_gap(TP0, 3, 9)
    assert not consumer._gap.get(TP0)  # all of it below the committed offset


def test_topics_outside_the_bulk_path_keep_fausts_way(consumer: Any) -> None:
    other = TP("sessions-changelog", 0)
    _given(consumer, other, [33, 34], 32)
    assert consumer._new_offset(other) == 35  # Faust's, as before


def test_a_seek_leaves_the_read_offset_on_the_offset_before_it() -> None:
    assert offsets.read_after_seek(32) == 31
    assert offsets.read_after_seek(1) == 0
    assert offsets.read_after_seek(0) is None  # nothing before it: from the beginning
    assert offsets.read_after_seek(None) is None


def test_a_record_dropped_at_the_offset_a_seek_put_the_fetcher_is_fetched_again(
    tmp_path: Path,
) -> None:
    """The loss a rolling restart showed: seeking every partition to its committed offset
    (32) while the drain loop had just taken record 32, fetched from there; it was dropped
    as fetched during the seek. With Faust's read offset (32) it looked read already and
    was never fetched again; the next record, 33, then looked like the one after it."""
    bulk = object.__new__(fetch.BulkConsumer)
    seeks: list[tuple[Any, int]] = []
    infos: list[tuple[Any, ...]] = []

    async def seek_to_committed() -> dict[Any, int]:
        return {TP0: 32, TP("sessions-changelog", 0): 7}

    async def seek(tp: Any, offset: int) -> None:
        seeks.append((tp, offset))

    class Log:
        def info(self, *args: Any) -> None:
            infos.append(args)

    bulk.__dict__.update(
        seek_to_committed=seek_to_committed,
        _seek=seek,
        log=Log(),
        _read_offset={},
        _committed_offset={},
        fetch=_bulk(TOPIC),
    )

    async def go() -> None:
        await bulk.perform_seek()
        assert bulk._read_offset == {TP0: 31, TP("sessions-changelog", 0): 7}
        assert bulk._committed_offset[TP0] == 32
        bulk._holes.dropped[TP0] = 32  # taken during the seek, from where it put the fetcher
        await bulk._fetch_dropped_again()
        assert seeks == [(TP0, 31)]  # 31 again (a redelivery), then 32 onwards
        assert bulk._read_offset[TP0] == 31
        assert "dropped during a seek" in infos[-1][0]

    asyncio.run(go())


def test_an_empty_end_of_a_partition_is_fetched_again_once_then_passed() -> None:
    """Partition 0 ends in a commit marker (offset 10): the record read last is 9 and the
    fetcher stands at the end, 11, with nothing brought. It is fetched again from 9 once;
    standing at 11 again, 10 is noted as holding no record and the commit reaches 11, and
    the partition counts as read to its end (before, it was fetched again every other
    second for good). Partition 1's fetcher is still behind its end: records are still to come."""
    from collections import defaultdict

    from intervaltree import IntervalTree

    tp1 = TP(TOPIC, 1)
    bulk = object.__new__(fetch.BulkConsumer)
    seeks: list[tuple[Any, int]] = []
    ends = {TP0: 11, tp1: 30}
    positions = {TP0: 11, tp1: 25}

    async def seek(tp: Any, offset: int) -> None:
        seeks.append((tp, offset))

    async def position(tp: Any) -> int:
        return positions[tp]

    class Log:
        def info(self, *args: Any) -> None:
            pass

    bulk.__dict__.update(
        assignment=lambda: {TP0, tp1, TP("sessions-changelog", 0)},
        highwater=ends.__getitem__,
        position=position,
        _seek=seek,
        log=Log(),
        _read_offset={TP0: 9, tp1: 20},
        _committed_offset={TP0: 10, tp1: 21},
        _acked=defaultdict(list),
        _acked_index=defaultdict(set),
        _gap=defaultdict(IntervalTree),
        fetch=_bulk(TOPIC),
        transport=type("T", (), {"bulk_topics": frozenset({TOPIC})})(),  # BulkAcks reads it
    )
    bulk_topics = frozenset({TOPIC})

    async def go() -> None:
        await bulk._pass_empty_ends(bulk_topics, {})
        assert seeks == [(TP0, 9)] and not bulk._gap  # once: fetched again from 9
        await bulk._pass_empty_ends(bulk_topics, {})
        assert seeks == [(TP0, 9)]  # at most once a second
        bulk._ends_checked = 0.0
        await bulk._pass_empty_ends(bulk_topics, {TP0: []})
        assert not bulk._gap  # partition 0 was in that fetch: not checked
        bulk._ends_checked = 0.0
        await bulk._pass_empty_ends(bulk_topics, {})
        assert seeks == [(TP0, 9)]  # the same end again: confirmed, no more fetching
        assert bulk._new_offset(TP0) == 11
        assert bulk._new_offset(tp1) is None
        assert bulk._read_offset[TP0] == 10  # read to the end: the next record is 11
        bulk._committed_offset[TP0] = 11
        for _ in range(3):  # and never checked again while nothing follows it
            bulk._ends_checked = 0.0
            await bulk._pass_empty_ends(bulk_topics, {})
        assert seeks == [(TP0, 9)] and not bulk._gap.get(TP0)

    asyncio.run(go())


def test_nothing_fetched_before_or_during_a_seek_to_committed_is_handed_over() -> None:
    """Table recovery skips an input partition's records as not yet active (the fetcher
    moves past them), then seeks every partition to its committed offset. A fetch taken
    while that seek is under way comes from where the fetcher was: handing it over would
    fold later records first and set a read offset past those the seek brings back."""
    bulk = object.__new__(fetch.BulkConsumer)
    seeking = asyncio.Event()
    release = asyncio.Event()

    async def seek_to_committed() -> dict[Any, int]:
        seeking.set()
        await release.wait()
        return {}

    bulk.__dict__.update(
        seek_to_committed=seek_to_committed,
        _read_offset={},
        _committed_offset={},
        fetch=_bulk("events"),
    )

    async def go() -> None:
        before = bulk._seek_epoch
        assert not bulk._seek_moved(before)
        seek = asyncio.ensure_future(bulk.perform_seek())
        await seeking.wait()
        during = bulk._seek_epoch  # a fetch whose epoch is read while the seek runs
        assert bulk._seek_moved(before) and bulk._seek_moved(during)
        release.set()
        await seek
        assert bulk._seek_moved(before) and bulk._seek_moved(during)
        assert not bulk._seek_moved(bulk._seek_epoch)  # what is fetched after it goes

    asyncio.run(go())


# --- holes: a jump in the offsets fetched again before it counts -------------------------------


def test_a_jump_in_offsets_is_fetched_again_before_it_counts_as_a_gap() -> None:
    holes, tp = offsets.Holes(), ("events", 1)
    assert not holes.confirmed(tp, 10, 70)  # first sight: fetch from 10 again
    assert holes.confirmed(tp, 10, 70)  # the same jump again: a real hole (Faust's gap)
    assert not holes.spans


def test_records_that_come_back_are_taken_and_the_averted_loss_is_told() -> None:
    holes, tp = offsets.Holes(), ("events", 1)
    assert not holes.confirmed(tp, 10, 70)
    assert holes.taken(tp, 10) is None  # the record before the span, again: still checking
    assert holes.spans
    assert holes.taken(tp, 11) == ("refetched", 10, 70)  # came back, never handed over
    assert holes.refetched == 1 and not holes.spans
    assert not holes.confirmed(tp, 69, 71)  # a later jump is checked afresh


def test_another_partition_or_a_different_jump_is_checked_on_its_own() -> None:
    holes = offsets.Holes()
    assert not holes.confirmed(("events", 0), 5, 9)
    assert not holes.confirmed(("events", 1), 5, 9)
    assert not holes.confirmed(("events", 0), 5, 8)  # not the jump fetched again
    assert holes.confirmed(("events", 0), 5, 8)
    assert holes.confirmed(("events", 1), 5, 9)


def test_a_span_handed_over_before_a_seek_moved_the_read_offset_back_is_redelivered() -> None:
    holes, tp = offsets.Holes(), ("events", 0)
    holes.handed[tp] = 238  # taken, then perform_seek set the read offset back to 217
    assert not holes.confirmed(tp, 217, 239)
    assert holes.taken(tp, 218) == ("redelivered", 217, 239)
    assert holes.refetched == 0


def test_records_dropped_for_a_seek_are_noted_from_their_first_offset() -> None:
    @dataclass
    class Record:
        offset: int

    holes = offsets.Holes()
    holes.drop([(("events", 0), [Record(75), Record(76)]), (("events", 1), [])])
    holes.drop([(("events", 0), [Record(80)])])  # later ones of the same partition
    assert holes.dropped == {("events", 0): 75}  # fetched again from the read offset
