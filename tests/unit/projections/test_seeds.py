"""The design notes' scenarios, end to end across the projections: unpriced replacements
(docs/notes/009), retained system prompts (007) and the plan/commit surface fold (008)."""

from typing import Any

import pytest

from stream.contract.errors import ContractError
from stream.projections.breakdown import CONTEXT_BREAKDOWN
from stream.projections.positional import Surface
from stream.projections.pressure import CONTEXT_PRESSURE
from stream.session import codec
from stream.session.processor import SessionRecord, process, views

from ..builders import fold, meter, noop, replace, system, tool_result, usage, usage_chunk, user

# --- docs/notes/009: unpriced surface replacements fold neutrally -----------------------------

HISTORY = [user(0, "abcd" * 10), tool_result(1, "abcd" * 20), user(2, "abcd")]  # 18 + 32 + 9


@pytest.mark.parametrize("projection", [CONTEXT_PRESSURE, CONTEXT_BREAKDOWN], ids=lambda p: p.key)
def test_a_replacement_without_a_metering_event_is_neutral(projection: Any) -> None:
    state = fold(projection, [*HISTORY, user(3, "summary", op=replace(0, 1))])
    assert state.surface == 18 + 32 + 9  # the compacted-away span stays counted


@pytest.mark.parametrize("projection", [CONTEXT_PRESSURE, CONTEXT_BREAKDOWN], ids=lambda p: p.key)
def test_a_claim_expired_by_an_intervening_event_folds_like_no_claim(projection: Any) -> None:
    state = fold(
        projection, [*HISTORY, meter(3, 0, 1, 50), noop(4), user(5, "summary", op=replace(0, 1))]
    )
    assert state.surface == 18 + 32 + 9


@pytest.mark.parametrize("projection", [CONTEXT_PRESSURE, CONTEXT_BREAKDOWN], ids=lambda p: p.key)
def test_an_adjacent_claim_over_another_range_is_still_an_error(projection: Any) -> None:
    state = fold(projection, [*HISTORY, meter(3, 0, 1, 50)])
    with pytest.raises(ContractError, match="has no adjacent shadow price"):
        projection.apply(state, user(4, "summary", op=replace(0, 2)))


@pytest.mark.parametrize("projection", [CONTEXT_PRESSURE, CONTEXT_BREAKDOWN], ids=lambda p: p.key)
def test_a_claim_over_the_replaced_range_prices_it_exactly(projection: Any) -> None:
    state = fold(projection, [*HISTORY, meter(3, 0, 1, 50), user(4, "summary", op=replace(0, 1))])
    assert state.surface == 18 + 32 + 9 - 50 + 10


def test_pressure_overestimates_an_unpriced_replacement_only_until_the_next_sample() -> None:
    events = [*HISTORY, usage_chunk(3, usage(1000)), user(4, "summary", op=replace(0, 1))]
    state = fold(CONTEXT_PRESSURE, events)
    assert CONTEXT_PRESSURE.view(state) == {"pressureTokens": 1000, "projectedTokens": 1000}
    state = CONTEXT_PRESSURE.apply(state, usage_chunk(5, usage(600), step=1))
    assert CONTEXT_PRESSURE.view(state) == {"pressureTokens": 600, "projectedTokens": 600}


# --- docs/notes/007: contextBreakdown retains only system prompts -----------------------------


def test_retained_prompts_stay_a_few_integers_in_a_long_tool_heavy_run() -> None:
    events: list[Any] = []
    for k in range(5):
        events.append(system(len(events), f"System prompt number {k}."))
        events.extend(tool_result(len(events), "output " * 10) for _ in range(400))
    record = SessionRecord.new()
    surface = Surface()
    for event in events:
        process(record, event)
        surface.fold(event)
    assert views(record)["contextBreakdown"] == surface.breakdown()
    state = record.slots["contextBreakdown"].state
    assert len(state.prompts) == 5
    assert len(surface.checkpoint()) == 2005  # what a per-node (version 5) state kept
    assert len(codec.encode(record)) < 300  # version 6 keeps a handful of integers


def test_shadowed_seqs_decide_which_prompts_leave_without_locating_the_range() -> None:
    # shadowedSeqs is authoritative: the fold never looks up non-system endpoints
    events = [
        system(0, "You are terse."),
        user(1, "abcd"),
        system(2, "Be brief."),
        user(3, "abcd"),
        meter(4, 1, 3, 9 + 7 + 9, shadowed=[1, 2, 3]),
        user(5, "summary", op=replace(1, 3)),
    ]
    state = fold(CONTEXT_BREAKDOWN, events)
    assert state.prompts == ((0, 8),)
    assert CONTEXT_BREAKDOWN.view(state) == {
        "systemTokens": 8,
        "toolsTokens": 0,
        "messageTokens": 10,
    }


def test_a_system_message_in_place_of_a_range_is_rejected_metered_or_not() -> None:
    state = fold(CONTEXT_BREAKDOWN, [system(0, "a"), user(1, "b"), user(2, "c")])
    with pytest.raises(ContractError):
        CONTEXT_BREAKDOWN.apply(state, system(3, "new", op=replace(1, 2)))
    state = CONTEXT_BREAKDOWN.apply(state, meter(3, 1, 2, 18, shadowed=[1, 2]))
    with pytest.raises(ContractError):
        CONTEXT_BREAKDOWN.apply(state, system(4, "new", op=replace(1, 2)))


# --- docs/notes/008: plan/commit --------------------------------------------------------------


def test_a_failed_event_commits_nothing_however_often_it_is_retried() -> None:
    surface = Surface()
    for event in HISTORY:
        surface.fold(event)
    snapshot = (list(surface.nodes), surface.total)
    bad = user(3, "x", op=replace(1, 7))  # valid price, unresolvable range
    for _ in range(3):
        with pytest.raises(ContractError):
            surface.fold(bad)
        assert (surface.nodes, surface.total) == snapshot
    surface.fold(user(3, "x", op=replace(1, 2)))
    assert [n.seq for n in surface.nodes] == [0, 3]
