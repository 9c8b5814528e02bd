"""``LagReport`` arithmetic and its JSON, stalls and the exit status (no broker)."""

from stream.ops.lag import LagReport, Stalls, behind, caught_up_status
from stream.ops.offsets import GroupState, Member, PartitionOffsets


def report(*parts: PartitionOffsets, members: tuple[Member, ...] = ()) -> LagReport:
    return LagReport("g", "events", parts, GroupState("g", "STABLE", members), 0.0)


def test_lag_sums_partitions_from_where_the_group_resumes() -> None:
    found = report(
        PartitionOffsets(0, 0, 100, 60),
        PartitionOffsets(1, 50, 80, None),
        PartitionOffsets(2, 5, 5, 5),
    )
    assert (found.lag, found.position, found.end) == (40 + 30, 60 + 50 + 5, 185)


def test_json_names_members_and_offsets() -> None:
    member = Member("m-1", "faust-0.15.3", "/10.0.0.7", (0, 1))
    found = report(PartitionOffsets(0, 0, 10, None), members=(member,)).as_json()
    assert found["partitions"] == [
        {"partition": 0, "earliest": 0, "committed": None, "end": 10, "lag": 10}
    ]
    assert found["members"] == [
        {"memberId": "m-1", "clientId": "faust-0.15.3", "host": "/10.0.0.7", "partitions": [0, 1]}
    ]
    assert str(member) == "faust-0.15.3 on 10.0.0.7 (member m-1)"


# -- watching: stalled partitions, what is left, the exit status --------------------------


def at(taken_at: float, *parts: PartitionOffsets) -> LagReport:
    return LagReport("g", "events", parts, GroupState("g", "STABLE", ()), taken_at)


def test_a_partition_whose_commit_does_not_move_while_records_wait_is_stalled() -> None:
    stalls = Stalls(after=60)
    stalls.observe(at(0, PartitionOffsets(0, 0, 100, 10), PartitionOffsets(1, 0, 50, 50)))
    stalls.observe(at(30, PartitionOffsets(0, 0, 100, 10), PartitionOffsets(1, 0, 50, 50)))
    assert stalls.stalled() == {} and stalls.waiting() == {0: 30}
    stalls.observe(at(61, PartitionOffsets(0, 0, 120, 10), PartitionOffsets(1, 0, 50, 50)))
    assert stalls.stalled() == {0: 61}  # partition 1 is at its end: never stalled
    stalls.observe(at(70, PartitionOffsets(0, 0, 120, 11), PartitionOffsets(1, 0, 50, 50)))
    assert stalls.stalled() == {}  # one commit restarts its clock


def test_the_clock_starts_when_records_start_to_wait() -> None:
    stalls = Stalls(after=60)
    stalls.observe(at(0, PartitionOffsets(0, 0, 10, 10)))
    stalls.observe(at(100, PartitionOffsets(0, 0, 10, 10)))  # idle at lag 0 for 100 s
    stalls.observe(at(102, PartitionOffsets(0, 0, 11, 10)))  # a record arrives
    assert stalls.stalled() == {}
    stalls.observe(at(161, PartitionOffsets(0, 0, 11, 10)))
    assert stalls.stalled() == {0: 61}


def test_a_partition_never_committed_stalls_too() -> None:
    stalls = Stalls(after=5)
    stalls.observe(at(0, PartitionOffsets(0, 3, 10, None)))
    stalls.observe(at(5, PartitionOffsets(0, 3, 10, None)))
    assert stalls.stalled() == {0: 5}


def test_behind_and_the_exit_status() -> None:
    done = at(0, PartitionOffsets(0, 0, 10, 10))
    assert caught_up_status(done) == 0 and behind(done) == []
    left = at(0, PartitionOffsets(0, 0, 10, 10), PartitionOffsets(1, 0, 1500, 200),
              PartitionOffsets(2, 4, 9, None))  # fmt: skip
    assert caught_up_status(left) == 1
    assert behind(left, {1: 75.2}) == [
        "partition 1: lag 1,300 (committed 200, end 1,500), stalled: no commit for 75 s",
        "partition 2: lag 5 (committed -, end 9)",
    ]
