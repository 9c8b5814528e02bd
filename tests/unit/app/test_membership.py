"""Static membership's leave (``stream.app.membership``): LeaveGroup v3 on the wire, the
broker's answer per member, and when a closing consumer sends it."""

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from stream.app.membership import (
    LeaveGroup,
    LeaveGroupRequest_v3,
    LeaveGroupResponse_v3,
    Left,
    leave_on_close,
    outcome,
)

UNKNOWN_MEMBER_ID = 25
FENCED_INSTANCE_ID = 82


def test_leave_group_v3_names_members_by_instance_id() -> None:
    request = LeaveGroup("ctx", [("m-1", "context-stream-2"), ("", "context-stream-3")])
    built = request.prepare({13: (0, 5)})  # the broker's range: the highest we have, v3
    assert isinstance(built, LeaveGroupRequest_v3)
    decoded = LeaveGroupRequest_v3.decode(built.encode())
    assert decoded.group == "ctx"
    assert decoded.members == [("m-1", "context-stream-2"), ("", "context-stream-3")]


def test_a_broker_without_v3_is_refused_not_sent_an_older_leave() -> None:
    with pytest.raises(NotImplementedError):
        LeaveGroup("ctx", [("m-1", "w")]).prepare({13: (0, 1)})


def _response(error: int, members: list[tuple[str, str, int]]) -> Any:
    return LeaveGroupResponse_v3.decode(LeaveGroupResponse_v3(0, error, members).encode())


@pytest.mark.parametrize(
    ("error", "members", "expected"),
    [
        (0, [("m", "w-1", 0)], [Left("w-1", None)]),
        (
            0,
            [("", "w-1", 0), ("", "w-2", UNKNOWN_MEMBER_ID)],
            [Left("w-1", None), Left("w-2", "UnknownMemberIdError")],
        ),
        (FENCED_INSTANCE_ID, [("m", "w-1", 0)], [Left("w-1", "FencedInstanceIdError")]),
        (UNKNOWN_MEMBER_ID, [], [Left("", "UnknownMemberIdError")]),
    ],
)
def test_the_answer_per_member(
    error: int, members: list[tuple[str, str, int]], expected: list[Left]
) -> None:
    assert outcome(_response(error, members)) == expected


class FakeCoordinator:
    """The parts of aiokafka's GroupCoordinator a static member's leave touches."""

    def __init__(self, instance_id: str | None, generation: int = 3, closing: bool = True) -> None:
        self._group_instance_id = instance_id
        self._closing = SimpleNamespace(done=lambda: closing)  # set once close() began
        self.group_id = "ctx"
        self.member_id = "w-1-abc"
        self.generation = generation
        self.sent: list[Any] = []
        self.dynamic_leaves = 0

    async def _send_req(self, request: Any) -> Any:
        self.sent.append(request)
        return _response(0, [(m, i, 0) for m, i in request.members])

    async def _maybe_leave_group(self) -> None:  # aiokafka's: nothing for a static member
        self.dynamic_leaves += 1
        self.reset_generation()

    def reset_generation(self) -> None:
        self.generation = -1


def _closing(coordinator: FakeCoordinator, leaving: bool) -> None:
    leave_on_close(SimpleNamespace(_coordinator=coordinator), lambda: leaving)
    asyncio.run(coordinator._maybe_leave_group())


def test_a_static_member_told_to_leave_sends_its_instance_id() -> None:
    coordinator = FakeCoordinator("w-1")
    _closing(coordinator, leaving=True)
    assert [(r.group, r.members) for r in coordinator.sent] == [("ctx", [("w-1-abc", "w-1")])]
    assert coordinator.generation == -1 and coordinator.dynamic_leaves == 0


def test_a_static_member_not_told_to_leave_sends_nothing() -> None:
    coordinator = FakeCoordinator("w-1")
    _closing(coordinator, leaving=False)
    assert coordinator.sent == [] and coordinator.dynamic_leaves == 1


def test_a_member_that_never_joined_sends_nothing() -> None:
    coordinator = FakeCoordinator("w-1", generation=-1)
    _closing(coordinator, leaving=True)
    assert coordinator.sent == []


def test_a_static_member_idle_past_max_poll_interval_keeps_its_place() -> None:
    """aiokafka's heartbeat calls the same leave when the fetcher sat idle too long (a
    worker held up by a Redis outage): a static member must not leave then."""
    coordinator = FakeCoordinator("w-1", closing=False)
    _closing(coordinator, leaving=True)
    assert coordinator.sent == [] and coordinator.dynamic_leaves == 1


def test_a_dynamic_member_keeps_aiokafka_s_own_leave() -> None:
    coordinator = FakeCoordinator(None)
    _closing(coordinator, leaving=True)
    assert coordinator.sent == [] and coordinator.dynamic_leaves == 1
