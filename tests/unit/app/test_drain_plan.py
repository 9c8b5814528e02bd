"""The drain loop's decisions (``stream.app.drain``) as tables: one row per case, and one
row per loss (or stall) the fetch path has had, named after it (docs/notes/010, 024,
025), each replayed through the decisions as the drain loop takes them."""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import pytest

from stream.app import drain
from stream.app.offsets import Holes

TOPIC = "events-in"


class TP(NamedTuple):
    topic: str
    partition: int


TP0 = TP(TOPIC, 0)
TP1 = TP(TOPIC, 1)
LOG = TP("sessions-changelog", 0)


@dataclass
class Record:
    offset: int
    generation_id: int = 1
    timestamp: float | None = None


# --- one record against the read offset -----------------------------------------------------


def _holes(*spans: tuple[Any, int, int], handed: dict[Any, int] | None = None) -> Holes:
    holes = Holes()
    for tp, last, following in spans:
        holes.spans[tp] = (last, following)
    holes.handed.update(handed or {})
    return holes


CHECKS = [
    # (read, offset, bulk, acks, spans fetched again, handed, step, spans left)
    pytest.param(None, 5, True, True, (), None, drain.TAKE, {}, id="nothing-read-yet"),
    pytest.param(10, 9, True, True, (), None, drain.SKIP, {}, id="already-read"),
    pytest.param(10, 10, True, True, (), None, drain.TAKE, {}, id="the-last-read-again"),
    pytest.param(10, 11, True, True, (), None, drain.TAKE, {}, id="the-next-record"),
    pytest.param(
        10,
        70,
        True,
        True,
        (),
        None,
        drain.Step(drain.Kind.FETCH_AGAIN, 10, 70),
        {TP0: (10, 70)},
        id="a-jump-first-seen-is-fetched-again",
    ),
    pytest.param(
        10,
        70,
        True,
        True,
        ((TP0, 10, 70),),
        None,
        drain.Step(drain.Kind.TAKE_PAST_HOLE, 11, 69),
        {},
        id="the-same-jump-again-is-a-hole",
    ),
    pytest.param(
        10,
        70,
        True,
        True,
        ((TP0, 10, 60),),
        None,
        drain.Step(drain.Kind.FETCH_AGAIN, 10, 70),
        {TP0: (10, 70)},
        id="a-different-jump-is-checked-afresh",
    ),
    pytest.param(
        10,
        70,
        False,
        True,
        (),
        None,
        drain.Step(drain.Kind.TAKE_PAST_GAP, 11, 70),
        {},
        id="another-topic-takes-fausts-gap",
    ),
    pytest.param(10, 70, True, False, (), None, drain.TAKE, {}, id="a-topic-without-acks"),
    pytest.param(
        10,
        11,
        True,
        True,
        ((TP0, 10, 70),),
        None,
        drain.Step(drain.Kind.TAKE, span=("refetched", 10, 70)),
        {},
        id="a-span-back-never-handed-over-is-a-loss-averted",
    ),
    pytest.param(
        10,
        11,
        True,
        True,
        ((TP0, 10, 70),),
        {TP0: 69},
        drain.Step(drain.Kind.TAKE, span=("redelivered", 10, 70)),
        {},
        id="a-span-back-handed-over-before-is-redelivered",
    ),
    pytest.param(
        9,
        10,
        True,
        True,
        ((TP0, 10, 70),),
        None,
        drain.TAKE,
        {TP0: (10, 70)},
        id="the-record-before-the-span-again-keeps-checking",
    ),
    pytest.param(
        10,
        11,
        True,
        True,
        ((TP1, 10, 70),),
        None,
        drain.TAKE,
        {TP1: (10, 70)},
        id="another-partitions-span-stays",
    ),
]


@pytest.mark.parametrize(
    ("read", "offset", "bulk", "acks", "spans", "handed", "step", "left"), CHECKS
)
def test_a_record_against_the_read_offset(
    read: int | None,
    offset: int,
    bulk: bool,
    acks: bool,
    spans: tuple[tuple[Any, int, int], ...],
    handed: dict[Any, int] | None,
    step: drain.Step,
    left: dict[Any, tuple[int, int]],
) -> None:
    holes = _holes(*spans, handed=handed)
    assert drain.check(TP0, read, offset, bulk, acks, holes) == step
    assert holes.spans == left


# --- a partition's part of a fetch -------------------------------------------------------------

ROUTES = [
    # (tp, records, stale, flow, generation now, active, buffered, route)
    pytest.param(TP0, [1], False, True, 1, None, set(), drain.Route.BULK, id="input"),
    pytest.param(LOG, [1], False, True, 1, None, set(), drain.Route.RESTORE, id="changelog"),
    pytest.param(LOG, [], False, True, 1, None, set(), drain.Route.FAUST, id="empty-changelog"),
    pytest.param(TP("leader", 0), [1], False, True, 1, None, set(), drain.Route.FAUST, id="other"),
    pytest.param(TP0, [1], True, True, 1, None, set(), drain.Route.DROP_REST, id="after-stale"),
    pytest.param(TP0, [1], False, False, 1, None, set(), drain.Route.DROP_REST, id="flow-stopped"),
    pytest.param(TP0, [1], False, True, 2, None, set(), drain.Route.DROP_REST, id="rebalanced"),
    pytest.param(TP0, [1], False, True, 1, {TP1}, set(), drain.Route.SKIP, id="not-active"),
    pytest.param(TP0, [1], False, True, 1, {TP0}, set(), drain.Route.BULK, id="active"),
    pytest.param(TP0, [1], False, True, 1, {TP1}, {TP0}, drain.Route.BULK, id="buffered"),
]


@pytest.mark.parametrize(
    ("tp", "records", "stale", "flow", "now", "active", "buffered", "way"), ROUTES
)
def test_a_partitions_part_of_a_fetch(
    tp: TP,
    records: list[int],
    stale: bool,
    flow: bool,
    now: int,
    active: set[Any] | None,
    buffered: set[Any],
    way: drain.Route,
) -> None:
    assert (
        drain.route(
            tp,
            records,
            stale=stale,
            flow_active=flow,
            generation=1,
            generation_now=now,
            active=active,
            buffered=buffered,
            changelogs={LOG.topic},
            bulk_topics={TOPIC},
        )
        is way
    )


def test_the_input_parts_of_a_fetch_dropped_with_its_rest() -> None:
    records = {TP0: [Record(3)], LOG: [Record(1)], TP1: []}
    assert drain.dropped_too(records, {TOPIC}) == [(TP0, [Record(3)]), (TP1, [])]


# --- seeks and rebalances racing the drain loop -------------------------------------------------


@pytest.mark.parametrize(
    ("seeking", "epoch_now", "epoch", "moved"),
    [
        pytest.param(0, 4, 4, False, id="no-seek"),
        pytest.param(0, 5, 4, True, id="a-seek-began-since"),
        pytest.param(1, 4, 4, True, id="a-seek-to-committed-under-way"),
    ],
)
def test_what_a_seek_makes_stale(seeking: int, epoch_now: int, epoch: int, moved: bool) -> None:
    assert drain.seek_moved(seeking, epoch_now, epoch) is moved


@pytest.mark.parametrize(
    ("moved", "suspended", "dropped"),
    [(False, False, False), (True, False, True), (False, True, True), (True, True, True)],
)
def test_a_jump_is_fetched_again_unless_a_seek_or_a_rebalance_came_first(
    moved: bool, suspended: bool, dropped: bool
) -> None:
    assert drain.dropped_by_seek(moved, suspended) is dropped


@pytest.mark.parametrize(
    ("first", "read", "again"),
    [
        pytest.param(32, 31, "again", id="from-the-read-offset"),
        pytest.param(32, 20, "again", id="from-further-back"),
        pytest.param(32, 32, None, id="read-since"),
        pytest.param(32, 40, None, id="read-past-them"),
        pytest.param(32, None, "beginning", id="nothing-read-since-the-seek"),
    ],
)
def test_records_dropped_for_a_seek_are_fetched_again(
    first: int, read: int | None, again: str | None
) -> None:
    assert drain.refetch_dropped(first, read) == again


@pytest.mark.parametrize(
    ("generations", "kept", "cut"),
    [
        pytest.param([1, 1, 1], [0, 1, 2], False, id="all-current"),
        pytest.param([1, 1, 2], [0, 1], True, id="a-rebalance-while-built"),
        pytest.param([2, 2], [], True, id="all-older"),
    ],
)
def test_a_hand_over_keeps_the_current_generation(
    generations: list[int], kept: list[int], cut: bool
) -> None:
    messages = [Record(offset, generation) for offset, generation in enumerate(generations)]
    current, was_cut = drain.current(messages, 1)
    assert [m.offset for m in current] == kept and was_cut is cut


def test_a_seek_to_committed_leaves_read_offsets_and_moves_fresh_input_to_its_beginning() -> None:
    tp2, tp3 = TP(TOPIC, 2), TP(TOPIC, 3)
    plan = drain.after_seek_to_committed(
        {TP0: 32, TP1: None, tp2: 0, tp3: -1001, LOG: 7, TP("leader", 0): -1001}, {TOPIC}
    )
    assert plan.read == {
        TP0: 31,  # the offset before: records dropped from 32 come again (note 024)
        TP1: None,
        tp2: None,
        tp3: None,
        LOG: 7,  # Faust's
        TP("leader", 0): None,
    }
    assert plan.committed == {TP0: 32, tp2: None, tp3: -1001, LOG: 7, TP("leader", 0): -1001}
    assert plan.fresh == [TP1, tp2]


# --- an input partition's end with no record ---------------------------------------------------


@pytest.mark.parametrize(
    ("now", "checked", "seeking", "dropped", "due"),
    [
        pytest.param(10.0, 8.5, False, False, True, id="a-second-since"),
        pytest.param(10.0, 9.5, False, False, False, id="within-a-second"),
        pytest.param(10.0, 0.0, True, False, False, id="a-seek-under-way"),
        pytest.param(10.0, 0.0, False, True, False, id="dropped-records-wait"),
    ],
)
def test_when_the_ends_are_checked(
    now: float, checked: float, seeking: bool, dropped: bool, due: bool
) -> None:
    assert drain.ends_due(now, checked, seeking, dropped) is due


@pytest.mark.parametrize(
    ("last", "high", "worth"),
    [(9, 11, True), (9, 10, False), (None, 11, False), (9, None, False), (10, 11, False)],
)
def test_which_ends_are_worth_checking(last: int | None, high: int | None, worth: bool) -> None:
    assert drain.end_worth_checking(last, high) is worth


@pytest.mark.parametrize(
    ("position", "read_now", "span", "end"),
    [
        pytest.param(11, 9, None, drain.End.FETCH_AGAIN, id="first-sight"),
        pytest.param(11, 9, (9, 11), drain.End.PASSED, id="the-same-end-again"),
        pytest.param(10, 9, None, drain.End.NOTHING, id="records-still-to-come"),
        pytest.param(11, 10, None, drain.End.NOTHING, id="taken-meanwhile"),
    ],
)
def test_an_empty_end(
    position: int, read_now: int, span: tuple[int, int] | None, end: drain.End
) -> None:
    holes = _holes(*([(TP0, *span)] if span else []))
    assert drain.empty_end(TP0, 9, 11, position, read_now, holes) is end


@dataclass
class Schema:
    key_type: Any = bytes
    value_type: Any = bytes
    key_serializer: str | None = "raw"
    value_serializer: str | None = "raw"


@pytest.mark.parametrize(
    ("schema", "raw"),
    [
        pytest.param(Schema(), True, id="raw-bytes"),
        pytest.param(Schema(key_serializer=None, value_serializer=None), True, id="bytes"),
        pytest.param(Schema(value_type=dict), False, id="a-model"),
        pytest.param(Schema(value_serializer="json"), False, id="json"),
        pytest.param(None, False, id="no-schema"),
    ],
)
def test_which_channels_take_a_list(schema: Schema | None, raw: bool) -> None:
    channel = type("Channel", (), {"schema": schema})()
    assert drain.is_raw(channel) is raw


def test_the_ages_of_a_hand_over() -> None:
    parts = [
        (TP0, [Record(1, timestamp=90.0), Record(2, timestamp=95.0), Record(3)]),
        (TP1, []),
        (LOG, [Record(4)]),  # no timestamp: no age
        (TP("x", 0), [Record(5, timestamp=101.0)]),  # the clocks disagree: not below 0
    ]
    assert drain.record_ages(100.0, parts) == [5.0, 0.0]


# --- every loss (and stall) the fetch path has had, replayed -------------------------------------


def _a_jump_was_committed_past_as_a_gap() -> None:
    """Note 010: a worker that took over a partition committed past 59 records it never
    saw: a rebalance had dropped them, and Faust counts any jump as a gap. A jump is now
    fetched again before it counts."""
    step = drain.check(TP0, 40, 100, True, True, Holes())
    assert step == drain.Step(drain.Kind.FETCH_AGAIN, 40, 100)


def _a_partition_without_a_committed_offset_stayed_where_it_was() -> None:
    """519c3b8: a seek to the committed offsets left an input partition with none where
    the fetcher was; records fetched and dropped since never came again, and nothing
    held the commit."""
    plan = drain.after_seek_to_committed({TP0: None, TP1: 5}, {TOPIC})
    assert plan.fresh == [TP0]
    assert drain.refetch_dropped(3, plan.read[TP0]) == "beginning"


def _records_dropped_after_the_seek_took_effect_never_came_back() -> None:
    """e9bca5a: records dropped as fetched during a seek, fetched from where the seek had
    put the fetcher: nothing brought them again, and a quiet partition stalled."""
    assert drain.seek_moved(1, 4, 4)  # fetched while the seek runs: dropped
    assert drain.refetch_dropped(75, 74) == "again"


def _a_seek_left_the_read_offset_at_its_own_offset() -> None:
    """Note 024, steps 1-3: a rebalance sought partition 1 to 32; record 32, fetched during
    the seek, was dropped; Faust's read offset, 32, made it look read already, so it was
    never fetched again."""
    read = drain.after_seek_to_committed({TP0: 32}, {TOPIC}).read[TP0]
    assert drain.refetch_dropped(32, read) == "again"


def _the_record_after_the_seeks_offset_looked_like_the_next() -> None:
    """Note 024, step 4: the next fetch began at 33, which looked like the record after
    32 to the jump check."""
    read = drain.after_seek_to_committed({TP0: 32}, {TOPIC}).read[TP0]
    step = drain.check(TP0, read, 33, True, True, Holes())
    assert step.kind is drain.Kind.FETCH_AGAIN


def _a_gap_took_in_the_record_after_the_hole() -> None:
    """Note 024, rule 2: Faust's ``_add_gap`` counted the record after a hole as accounted
    for while it was still to be processed; the hole noted now ends before it."""
    holes = _holes((TP0, 10, 13))
    step = drain.check(TP0, 10, 13, True, True, holes)
    assert (step.kind, step.first, step.last) == (drain.Kind.TAKE_PAST_HOLE, 11, 12)


def _a_partition_ending_in_a_marker_was_never_committed_to_its_end() -> None:
    """Note 024, rule 3: no record follows a transaction's final commit marker, so no
    jump showed it and the commit stopped one short of the end for good."""
    holes = Holes()
    assert drain.end_worth_checking(9, 11)
    assert drain.empty_end(TP0, 9, 11, 11, 9, holes) is drain.End.FETCH_AGAIN
    assert drain.empty_end(TP0, 9, 11, 11, 9, holes) is drain.End.PASSED
    assert drain.passed_end(9, 11)[:2] == (10, 10)


def _a_jump_from_offset_0_went_unseen() -> None:
    """Note 025: Faust tests the read offset for truth, so after the record at offset 0 a
    jump to 2 was never checked, and a marker at 1 held the commit at 1 for good."""
    step = drain.check(TP0, 0, 2, True, True, Holes())
    assert step == drain.Step(drain.Kind.FETCH_AGAIN, 0, 2)


def _an_end_marker_was_fetched_again_every_two_seconds() -> None:
    """Note 025: once an empty end was passed, the read offset stayed at the last record,
    so the next check met the same end as new, for good."""
    read = drain.passed_end(9, 11)[2]
    assert not drain.end_worth_checking(read, 11)


def _records_fetched_during_a_seek_to_committed_were_handed_over() -> None:
    """A fetch taken while a seek to the committed offsets runs comes from where the
    fetcher was (past a span recovery skipped): handed over, it set a read offset past
    the records the seek brings back."""
    assert drain.seek_moved(seeking=1, epoch_now=7, epoch=7)
    assert drain.seek_moved(seeking=0, epoch_now=8, epoch=7)  # and once it ended


LOSSES: list[Callable[[], None]] = [
    _a_jump_was_committed_past_as_a_gap,
    _a_partition_without_a_committed_offset_stayed_where_it_was,
    _records_dropped_after_the_seek_took_effect_never_came_back,
    _a_seek_left_the_read_offset_at_its_own_offset,
    _the_record_after_the_seeks_offset_looked_like_the_next,
    _a_gap_took_in_the_record_after_the_hole,
    _a_partition_ending_in_a_marker_was_never_committed_to_its_end,
    _a_jump_from_offset_0_went_unseen,
    _an_end_marker_was_fetched_again_every_two_seconds,
    _records_fetched_during_a_seek_to_committed_were_handed_over,
]


@pytest.mark.parametrize("replay", [pytest.param(f, id=f.__name__.strip("_")) for f in LOSSES])
def test_every_past_loss_is_a_row(replay: Callable[[], None]) -> None:
    replay()
