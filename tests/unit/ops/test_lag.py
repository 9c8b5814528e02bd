"""``LagReport`` arithmetic and its JSON (no broker)."""

from stream.ops.lag import LagReport
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
