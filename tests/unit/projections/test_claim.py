"""The shadow-price claim, shared by contextPressure and contextBreakdown.

Contract: "The shadow-price claim".
"""

from typing import Any

import pytest

from stream.contract.errors import ContractError
from stream.contract.events import Replace
from stream.projections.breakdown import CONTEXT_BREAKDOWN
from stream.projections.claim import Claim, check_claim, surface_delta, surface_price
from stream.projections.pressure import CONTEXT_PRESSURE

from ..builders import (
    assistant,
    context,
    ev,
    fold,
    header,
    meter,
    noop,
    replace,
    system,
    text_chunk,
    tool_result,
    usage,
    usage_chunk,
    user,
)

SURFACE_PROJECTIONS = [CONTEXT_PRESSURE, CONTEXT_BREAKDOWN]


def surface_of(projection: Any, state: Any) -> int:
    """The running surface total both surface projections keep."""
    del projection
    return int(state.surface)


# --- the rule table ---------------------------------------------------------------------------

ABCD = 9  # user "abcd"


@pytest.mark.parametrize(
    ("claim", "event", "delta"),
    [
        (None, user(5, "abcd"), ABCD),  # append: delta = p
        (Claim(1, 3, 40), user(5, "abcd"), ABCD),  # an append ignores (expires) a claim
        (Claim(1, 3, 40), user(5, "abcd", op=replace(1, 3)), ABCD - 40),  # p - claim.tokens
        (Claim(1, 3, 40), user(5, "abcd", op=replace(1, 3, v3=True)), ABCD - 40),
        (Claim(2, 2, 3), user(5, "abcd", op=replace(2, 2)), ABCD - 3),  # may grow the total
        (None, user(5, "abcd", op=replace(1, 3)), 0),  # no claim: neutral (docs/notes/009)
        (None, assistant(5, op=replace(1, 1)), 0),
        (Claim(1, 1, 7), assistant(5, op=replace(1, 1)), -7),  # usage-only step prices 0
    ],
)
def test_surface_delta(claim: Claim | None, event: Any, delta: int) -> None:
    assert surface_delta(claim, event, surface_price(event)) == delta


@pytest.mark.parametrize(
    ("claim", "op", "message"),
    [
        (
            Claim(1, 3, 40),
            replace(1, 4),
            "over range 1-4 has no adjacent shadow price (armed claim covers 1-3)",
        ),
        (Claim(1, 3, 40), replace(0, 3), "(armed claim covers 1-3)"),
        (Claim(1, 3, 40), replace(3, 1), "over range 3-1"),
        (
            Claim(7, 7, 2),
            replace(8, 8, v3=True),
            "replace at seq 9 over range 8-8 has no adjacent shadow price (armed claim covers 7-7)",
        ),
    ],
)
def test_claim_over_another_range_is_an_error(claim: Claim, op: Any, message: str) -> None:
    event = user(9, "abcd", op=op)
    with pytest.raises(ContractError) as raised:
        surface_delta(claim, event, surface_price(event))
    assert message in str(raised.value)


def test_check_claim_message_is_exact() -> None:
    with pytest.raises(ContractError) as raised:
        check_claim(2, 5, Replace(3, 5), 11)
    assert str(raised.value) == (
        "replace at seq 11 over range 3-5 has no adjacent shadow price (armed claim covers 2-5)"
    )


# --- through both surface projections ---------------------------------------------------------

PREFIX = [user(0, "abcd"), user(1, "abcd" * 3), assistant(2, "abcd" * 5)]  # 9 + 11 + 13 = 33


@pytest.mark.parametrize("projection", SURFACE_PROJECTIONS, ids=lambda p: p.key)
@pytest.mark.parametrize("kind", ["compaction/summary", "compaction/prune"])
@pytest.mark.parametrize("v3", [False, True])
def test_metered_replace_applies_the_claim(projection: Any, kind: str, v3: bool) -> None:
    state = fold(
        projection,
        [
            *PREFIX,
            meter(3, 1, 2, 24, kind=kind, shadowed=[1, 2]),
            user(4, "abcd", op=replace(1, 2, v3)),
        ],
    )
    assert surface_of(projection, state) == 33 - 24 + 9
    assert state.claim is None  # consumed


@pytest.mark.parametrize("projection", SURFACE_PROJECTIONS, ids=lambda p: p.key)
@pytest.mark.parametrize(
    "between",
    [
        noop(4),
        noop(4, "compaction/started"),
        header(4, "sys"),
        context(4, 1000),
        text_chunk(4),
        usage_chunk(4, usage(10)),
        user(4, "x"),  # an append
        ev("some/unknown", 4, {"anything": [1]}),
    ],
    ids=lambda e: e.type,
)
def test_any_other_event_expires_the_claim(projection: Any, between: Any) -> None:
    state = fold(projection, [*PREFIX, meter(3, 1, 2, 24, shadowed=[1, 2]), between])
    assert state.claim is None
    before = surface_of(projection, state)
    state = projection.apply(state, user(5, "abcd", op=replace(1, 2)))
    assert surface_of(projection, state) == before  # expired: neutral, not an error


@pytest.mark.parametrize("projection", SURFACE_PROJECTIONS, ids=lambda p: p.key)
def test_another_metering_event_replaces_the_claim(projection: Any) -> None:
    state = fold(
        projection, [*PREFIX, meter(3, 0, 0, 9, shadowed=[0]), meter(4, 1, 2, 24, shadowed=[1, 2])]
    )
    assert (state.claim.start, state.claim.end, state.claim.tokens) == (1, 2, 24)
    with pytest.raises(ContractError, match=r"armed claim covers 1-2"):
        projection.apply(state, user(5, "abcd", op=replace(0, 0)))
    state = projection.apply(state, user(5, "abcd", op=replace(1, 2)))
    assert surface_of(projection, state) == 33 - 24 + 9


@pytest.mark.parametrize("projection", SURFACE_PROJECTIONS, ids=lambda p: p.key)
def test_claim_over_another_range_errors_through_the_projection(projection: Any) -> None:
    state = fold(projection, [*PREFIX, meter(3, 1, 2, 24, shadowed=[1, 2])])
    with pytest.raises(ContractError) as raised:
        projection.apply(state, tool_result(4, "abcd", op=replace(0, 2)))
    assert "replace at seq 4 over range 0-2 has no adjacent shadow price" in str(raised.value)
    assert "(armed claim covers 1-2)" in str(raised.value)


@pytest.mark.parametrize("projection", SURFACE_PROJECTIONS, ids=lambda p: p.key)
def test_never_armed_replace_is_neutral(projection: Any) -> None:
    state = fold(projection, [*PREFIX, user(3, "abcd" * 100, op=replace(0, 2))])
    assert surface_of(projection, state) == 33


@pytest.mark.parametrize("projection", SURFACE_PROJECTIONS, ids=lambda p: p.key)
def test_system_prompt_counts_in_the_surface(projection: Any) -> None:
    state = fold(projection, [system(0, "You are terse."), user(1, "abcd")])
    assert surface_of(projection, state) == 8 + 9


def test_surface_price_of_malformed_surface_event() -> None:
    with pytest.raises(ContractError, match="has no surfaceOp"):
        surface_price(ev("user/message", 3, {"content": []}))


def test_surface_price_is_each_events_own_when_events_alternate() -> None:
    # Both surface projections price the same event one after the other, and the second
    # takes the first's price; any other event is priced afresh.
    short, long, prompt = user(1, "abcd"), user(2, "abcd" * 10), system(3, "You are terse.")
    prices = [surface_price(e) for e in (short, short, long, short, prompt, prompt)]
    assert prices == [9, 9, 18, 9, 8, 8]
    with pytest.raises(ContractError, match="has no surfaceOp"):
        surface_price(ev("user/message", 4, {"content": []}))
    assert surface_price(prompt) == 8
