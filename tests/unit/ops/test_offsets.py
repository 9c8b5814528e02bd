"""``plan_reset``: each partition's target and what moving there means (pure, no broker)."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stream.ops.offsets import (
    AtOffsets,
    AtTime,
    Earliest,
    Latest,
    PartitionOffsets,
    PlanError,
    Target,
    plan_reset,
)

TOPIC, GROUP = "events", "app"
# partition: (low, high, committed)
OFFSETS = [
    PartitionOffsets(0, 0, 100, 100),  # caught up
    PartitionOffsets(1, 20, 50, None),  # never committed: resumes at 20
    PartitionOffsets(2, 30, 90, 10),  # committed fell out of retention: resumes at 30
    PartitionOffsets(3, 0, 0, None),  # empty
]


def plan(target: Target, **kwargs: object) -> dict[int, tuple[int, int, int, int, str]]:
    found = plan_reset(OFFSETS, target, group=GROUP, topic=TOPIC, **kwargs)  # type: ignore[arg-type]
    return {
        p.partition: (p.target, p.rereads, p.skips, p.backlog, p.note) for p in found.partitions
    }


def test_position_is_where_the_group_resumes() -> None:
    assert [p.position for p in OFFSETS] == [100, 20, 30, 0]
    assert [p.lag for p in OFFSETS] == [0, 30, 60, 0]


def test_to_earliest_rereads_what_was_read() -> None:
    assert plan(Earliest()) == {
        0: (0, 100, 0, 100, ""),
        1: (20, 0, 0, 30, ""),
        2: (30, 0, 0, 60, ""),
        3: (0, 0, 0, 0, ""),
    }


def test_to_latest_skips_the_backlog() -> None:
    assert plan(Latest()) == {
        0: (100, 0, 0, 0, ""),
        1: (50, 0, 30, 0, ""),
        2: (90, 0, 60, 0, ""),
        3: (0, 0, 0, 0, ""),
    }


def test_partitions_limit_the_reset() -> None:
    assert set(plan(Earliest(), only={0, 2})) == {0, 2}


def test_explicit_offsets_are_clamped_to_what_is_retained() -> None:
    found = plan(AtOffsets(((0, 40), (1, 5), (2, 500))))
    assert found[0] == (40, 60, 0, 60, "")
    assert found[1] == (20, 0, 0, 30, "5 not retained: earliest")
    assert found[2] == (90, 0, 60, 0, "500 past the end: end")
    assert 3 not in found  # partitions not named stay where they are


def test_times_resolve_to_the_broker_answer_or_the_end() -> None:
    found = plan(AtTime(1_700_000_000_000), times={0: 60, 1: None, 2: 31, 3: None})
    assert found[0][0] == 60 and found[2][0] == 31
    assert found[1] == (50, 0, 30, 0, "no record at or after the time: end")


@pytest.mark.parametrize(
    ("target", "kwargs", "message"),
    [
        (Earliest(), {"only": {7}}, "no partition 7"),
        (AtOffsets(((9, 0),)), {}, "no partition 9"),
        (AtOffsets(((1, 0),)), {"only": {0}}, "not --partitions"),
        (AtOffsets(((1, 0), (1, 3))), {}, "two offsets"),
        (AtTime(0), {}, "no offset-for-time answer"),
        (AtTime(0), {"times": {0: 1}}, "no offset-for-time answer for partition 1"),
    ],
)
def test_impossible_requests_are_refused(
    target: Target, kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(PlanError, match=message):
        plan(target, **kwargs)


def test_a_plan_applied_has_nothing_left_to_change() -> None:
    first = plan_reset(OFFSETS, Earliest(), group=GROUP, topic=TOPIC)
    assert [p.partition for p in first.changes] == [0, 1, 2, 3]  # 1, 3: store an explicit commit
    assert (first.rereads, first.skips, first.backlog) == (100, 0, 190)
    applied = [PartitionOffsets(p.partition, p.low, p.high, p.target) for p in first.partitions]
    again = plan_reset(applied, Earliest(), group=GROUP, topic=TOPIC)
    assert again.changes == () and again.rereads == 0
    assert again.targets() == first.targets()


@st.composite
def partitions(draw: st.DrawFn) -> list[PartitionOffsets]:
    found = []
    for partition in range(draw(st.integers(1, 5))):
        low = draw(st.integers(0, 1000))
        high = draw(st.integers(low, low + 1000))
        committed = draw(st.none() | st.integers(0, high + 50))
        found.append(PartitionOffsets(partition, low, high, committed))
    return found


targets = st.one_of(
    st.just(Earliest()),
    st.just(Latest()),
    st.lists(
        st.tuples(st.integers(0, 4), st.integers(0, 2500)), max_size=5, unique_by=lambda t: t[0]
    ).map(lambda pairs: AtOffsets(tuple(pairs))),
)


@given(partitions(), targets)
def test_targets_stay_retained_and_replanning_is_idempotent(
    current: list[PartitionOffsets], target: Target
) -> None:
    if isinstance(target, AtOffsets):
        target = AtOffsets(tuple((p, o) for p, o in target.offsets if p < len(current)))
    found = plan_reset(current, target, group=GROUP, topic=TOPIC)
    for p in found.partitions:
        assert p.low <= p.target <= p.high
        assert p.rereads - p.skips == p.position - p.target
        assert p.backlog == p.high - p.target
    applied = {p.partition: p.target for p in found.partitions}
    after = [
        PartitionOffsets(c.partition, c.low, c.high, applied.get(c.partition, c.committed))
        for c in current
    ]
    assert plan_reset(after, target, group=GROUP, topic=TOPIC).changes == ()
