"""The positional surface fold, the ``measure()`` X-ray (contract: "The positional X-ray")."""

import pytest

from stream.contract.errors import ContractError
from stream.projections.positional import Node, Surface

from ..builders import assistant, ev, header, replace, system, tool_result, usage, user

TERSE = "You are terse."  # 8


def folded(*events: object) -> Surface:
    surface = Surface()
    for event in events:
        surface.fold(event)  # type: ignore[arg-type]
    return surface


def test_appends_keep_surface_order() -> None:
    surface = folded(system(0, TERSE), user(1, "abcd"), assistant(2, "abcd"), tool_result(3, "a"))
    assert [(n.seq, n.price, n.system) for n in surface.nodes] == [
        (0, 8, True),
        (1, 9, False),
        (2, 9, False),
        (3, 13, False),
    ]
    assert surface.total == 8 + 9 + 9 + 13


def test_replace_splices_the_range_by_seq() -> None:
    surface = folded(
        user(0, "a"),
        user(1, "abcd" * 3),
        user(2, "abcd" * 5),
        user(3, "a"),
        user(4, "abcd", op=replace(1, 2)),
    )
    assert [n.seq for n in surface.nodes] == [0, 4, 3]
    assert surface.total == 9 + 9 + 9


def test_replace_of_a_replacement_node() -> None:
    surface = folded(
        user(0, "a"),
        user(1, "b"),
        user(2, "ab", op=replace(0, 1)),
        user(3, "abcd" * 2, op=replace(2, 2, v3=True)),
    )
    assert [n.seq for n in surface.nodes] == [3]
    assert surface.total == 10


@pytest.mark.parametrize("op", [replace(5, 5), replace(0, 9), replace(2, 1), replace(9, 0)])
def test_unknown_range_is_an_error_and_changes_nothing(op: dict[str, int]) -> None:
    surface = folded(user(0, "a"), user(1, "b"), user(2, "c"))
    nodes, total = list(surface.nodes), surface.total
    for _ in range(3):  # the same error every time; nothing committed (plan/commit)
        with pytest.raises(ContractError, match="not a range of current surface nodes"):
            surface.fold(user(3, "x", op=op))
        assert surface.nodes == nodes
        assert surface.total == total


def test_pricing_error_commits_nothing() -> None:
    surface = folded(user(0, "a"))
    bad = ev("user/message", 1, {"content": "not a list"}, replace(0, 0))
    for _ in range(2):
        with pytest.raises(ContractError):
            surface.fold(bad)
        assert surface.nodes == [Node(0, "user/message", 9)]


def test_plan_is_pure() -> None:
    surface = folded(user(0, "a"), user(1, "b"))
    plan = surface.plan(user(2, "abcd", op=replace(0, 1)))
    assert plan is not None
    assert [n.seq for n in surface.nodes] == [0, 1]
    surface.commit(plan)
    assert [n.seq for n in surface.nodes] == [2]


def test_breakdown() -> None:
    surface = folded(header(0, "abcd" * 10, [{"name": "t"}]), user(1, "abcd"))
    # [{"name":"t"}] is 14 chars: 4 + 4
    assert surface.breakdown() == {"systemTokens": 14, "toolsTokens": 8, "messageTokens": 9}
    surface.fold(system(2, TERSE))
    surface.fold(system(3, ""))
    assert surface.breakdown() == {"systemTokens": 8, "toolsTokens": 8, "messageTokens": 9}


def test_usage_only_step_is_a_zero_price_node() -> None:
    surface = folded(user(0, "a"), assistant(1, usage=usage(5)))
    assert surface.total == 9


def test_checkpoint_grows_with_the_surface() -> None:
    surface = folded(*[user(i, "a") for i in range(50)])
    assert len(surface.checkpoint()) == 50
