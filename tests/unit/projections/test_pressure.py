"""contextPressure: window, provider sample, and projected occupancy.

Contract: "contextPressure".
"""

from typing import Any

import pytest

from stream.contract.errors import ContractError
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
    tool_result,
    usage,
    usage_chunk,
    user,
)

P = CONTEXT_PRESSURE


def view(events: list[Any]) -> dict[str, int]:
    return P.view(fold(P, events))


def test_key_and_initial_view() -> None:
    assert P.key == "contextPressure"
    assert P.view(P.init()) == {}


# --- contextWindow ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("events", "expected"),
    [
        ([context(0, 128_000)], {"contextWindow": 128_000}),
        ([context(0, 128_000), context(1, 64_000)], {"contextWindow": 64_000}),
        ([context(0, 128_000), context(1)], {}),  # absent field removes it
        ([context(0)], {}),
        ([context(0, 128_000), noop(1), user(2, "abcd")], {"contextWindow": 128_000}),
    ],
)
def test_context_window(events: list[Any], expected: dict[str, int]) -> None:
    assert view(events) == expected


@pytest.mark.parametrize("window", [0, -1, 1.5, True, "128000", None, [128_000]])
def test_malformed_context_window(window: Any) -> None:
    with pytest.raises(ContractError, match="contextWindow must be a positive integer"):
        P.apply(P.init(), context(0, window))


# --- samples and projection -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("events", "expected"),
    [
        # no sample: no pressureTokens, no projectedTokens (absent, not null)
        ([user(0, "abcd")], {}),
        # pressure = input + cacheRead + cacheWrite (output excluded)
        ([usage_chunk(0, usage(100, 50, 20, 5))], {"pressureTokens": 125, "projectedTokens": 125}),
        ([usage_chunk(0, usage(100, 50))], {"pressureTokens": 100, "projectedTokens": 100}),
        # surface movement after the sample moves the projection
        (
            [usage_chunk(0, usage(100)), user(1, "abcd")],
            {"pressureTokens": 100, "projectedTokens": 109},
        ),
        # movement before the sample does not
        (
            [user(0, "abcd"), usage_chunk(1, usage(100))],
            {"pressureTokens": 100, "projectedTokens": 100},
        ),
        # the sample is stamped before the event's own delta: an assistant/message with
        # usage anchors against the surface its own request saw
        (
            [user(0, "abcd"), assistant(1, "abcd", usage=usage(100))],
            {"pressureTokens": 100, "projectedTokens": 109},
        ),
        # the latest sample wins and re-anchors
        (
            [usage_chunk(0, usage(100)), user(1, "abcd"), usage_chunk(2, usage(300, 1, 1, 1))],
            {"pressureTokens": 302, "projectedTokens": 302},
        ),
        # a usage-only step (empty content) is a sample and adds nothing
        (
            [user(0, "abcd"), assistant(1, usage=usage(40))],
            {"pressureTokens": 40, "projectedTokens": 40},
        ),
        # everything together
        (
            [
                context(0, 1000),
                user(1, "abcd"),
                usage_chunk(2, usage(500, 7, 0, 0)),
                tool_result(3, "abcd"),
            ],
            {"contextWindow": 1000, "pressureTokens": 500, "projectedTokens": 513},
        ),
    ],
)
def test_view(events: list[Any], expected: dict[str, int]) -> None:
    result = view(events)
    assert result == expected
    assert None not in result.values()


def test_metered_replace_shrinks_the_projection() -> None:
    events = [
        user(0, "abcd" * 10),  # 14
        user(1, "abcd" * 10),  # 14
        usage_chunk(2, usage(1000)),
        meter(3, 0, 1, 28),
        user(4, "abcd", op=replace(0, 1)),  # 9 - 28 = -19
    ]
    assert view(events) == {"pressureTokens": 1000, "projectedTokens": 981}


def test_projection_is_floored_at_zero() -> None:
    events = [
        user(0, "abcd" * 10),
        usage_chunk(1, usage(5)),
        meter(2, 0, 0, 14),
        user(3, "abcd", op=replace(0, 0)),  # -5
        meter(4, 3, 3, 100),  # over-claim: producer says the node cost 100
        user(5, "", op=replace(3, 3)),
    ]
    state = fold(P, events)
    assert state.pressure == 5
    assert P.view(state) == {"pressureTokens": 5, "projectedTokens": 0}


def test_unpriced_replacement_holds_the_projection_still() -> None:
    # docs/notes/009: contextPressure holds still across an unpriced replacement
    before = fold(P, [user(0, "abcd" * 10), usage_chunk(1, usage(300))])
    after = fold(P, [user(2, "a", op=replace(0, 0))], before)
    assert P.view(after) == P.view(before) == {"pressureTokens": 300, "projectedTokens": 300}


def test_unmetered_system_prompt_rewrite_is_neutral_here() -> None:
    before = fold(P, [system(0, "You are terse."), usage_chunk(1, usage(50))])
    after = fold(P, [system(2, "You are very, very terse indeed.", op=replace(0, 0))], before)
    assert after.surface == before.surface == 8
    assert P.view(after) == {"pressureTokens": 50, "projectedTokens": 50}


def test_header_and_unknown_events_change_nothing() -> None:
    state = fold(P, [user(0, "abcd"), usage_chunk(1, usage(10))])
    for event in [
        header(2, "system prompt", [{"name": "t"}]),
        noop(3),
        ev("x/y", 4, {"usage": usage(99)}),
    ]:
        assert P.apply(state, event) is state


def test_unchanged_state_is_the_same_object() -> None:
    state = fold(P, [context(0, 100), usage_chunk(1, usage(10))])
    assert P.apply(state, context(2, 100)) is state
    assert P.apply(state, usage_chunk(3, usage(10))) is state


# --- malformed input --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "event",
    [
        usage_chunk(0, None),
        usage_chunk(0, {"inputTokens": -1, "outputTokens": 0}),
        usage_chunk(0, {"inputTokens": 1.5, "outputTokens": 0}),
        usage_chunk(0, {"inputTokens": False, "outputTokens": 0}),
        assistant(0, "x", usage=None),
        ev("user/message", 0, {"content": []}),  # no surfaceOp
        ev("request/context", 0, {"contextWindow": 5}, "append"),  # surfaceOp on non-surface
        ev("some/unknown", 0, {}, "append"),
        ev("user/message", 0, {"content": []}, {"op": "replace", "start": 0}),
        ev("user/message", 0, {"content": "abcd"}, "append"),  # content not a list
        ev("user/message", 0, {"content": [{"type": "text", "text": 5}]}, "append"),
        ev(
            "compaction/summary",
            0,
            {"shadowedRange": {"start": 0, "end": 0}, "shadowedTokenCount": -1},
        ),
        ev("compaction/prune", 0, {"shadowedRange": {"start": 0, "end": 0}}),
        ev(
            "compaction/prune",
            0,
            {"shadowedRange": {"start": 0, "end": 0}, "shadowedTokenCount": 1},
            "append",
        ),
        ev("request/context", 0, None),  # data not an object
    ],
)
def test_malformed_events_are_contract_errors(event: Any) -> None:
    with pytest.raises(ContractError):
        P.apply(P.init(), event)


def test_codec_round_trip() -> None:
    state = fold(
        P, [context(0, 1000), user(1, "abcd"), usage_chunk(2, usage(5)), meter(3, 1, 1, 9)]
    )
    assert P.decode(P.encode(state)) == state
    assert P.decode(P.encode(P.init())) == P.init()
