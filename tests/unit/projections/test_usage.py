"""tokenUsage (contract: "tokenUsage"): running totals of provider usage samples."""

from typing import Any

import pytest

from stream.contract.errors import ContractError
from stream.projections.usage import TOKEN_USAGE

from ..builders import (
    assistant,
    ev,
    fold,
    meter,
    noop,
    replace,
    text_chunk,
    usage,
    usage_chunk,
    user,
)

U = TOKEN_USAGE


def totals(uncached: int, output: int, read: int = 0, write: int = 0) -> dict[str, int]:
    return {
        "uncachedInputTokens": uncached,
        "outputTokens": output,
        "cacheReadTokens": read,
        "cacheWriteTokens": write,
    }


def test_key_and_initial_view() -> None:
    assert U.key == "tokenUsage"
    assert U.view(U.init()) == totals(0, 0)


@pytest.mark.parametrize(
    ("events", "expected"),
    [
        ([usage_chunk(0, usage(10, 2, 3, 4))], totals(10, 2, 3, 4)),
        ([assistant(0, "x", usage=usage(10, 2), turn=0, step=0)], totals(10, 2)),
        ([assistant(0, usage=usage(10, 2), turn=0, step=0)], totals(10, 2)),  # usage-only step
        # chunk then final message of the same (turn, step): the message replaces the chunk
        (
            [
                usage_chunk(0, usage(10, 2), turn=1, step=0),
                assistant(1, "x", usage=usage(12, 5, 1), turn=1, step=0),
            ],
            totals(12, 5, 1),
        ),
        # a new step adds
        (
            [
                usage_chunk(0, usage(10, 2), turn=1, step=0),
                usage_chunk(1, usage(20, 3), turn=1, step=1),
            ],
            totals(30, 5),
        ),
        # a new turn adds
        (
            [
                usage_chunk(0, usage(10, 2), turn=1, step=0),
                usage_chunk(1, usage(20, 3), turn=2, step=0),
            ],
            totals(30, 5),
        ),
        # identical repeat: no change
        (
            [
                usage_chunk(0, usage(10, 2), turn=1, step=0),
                assistant(1, "x", usage=usage(10, 2), turn=1, step=0),
            ],
            totals(10, 2),
        ),
        # replace, then a new step, then the new step's final message replaces only it
        (
            [
                usage_chunk(0, usage(10, 2), turn=0, step=0),
                assistant(1, "x", usage=usage(11, 2), turn=0, step=0),
                usage_chunk(2, usage(5, 1, 100), turn=0, step=1),
                assistant(3, "y", usage=usage(6, 1, 100, 7), turn=0, step=1),
            ],
            totals(17, 3, 100, 7),
        ),
        # only the previous sample is replaced: returning to an older step adds again
        (
            [
                usage_chunk(0, usage(10), turn=0, step=0),
                usage_chunk(1, usage(20), turn=0, step=1),
                usage_chunk(2, usage(30), turn=0, step=0),
            ],
            totals(60, 0),
        ),
        # a replacement may lower the totals (the final figure is what counts)
        (
            [
                usage_chunk(0, usage(100, 9), turn=0, step=0),
                usage_chunk(1, usage(40, 1), turn=0, step=0),
            ],
            totals(40, 1),
        ),
        # events without usage are ignored
        (
            [
                user(0, "abcd"),
                text_chunk(1),
                assistant(2, "x"),
                noop(3),
                meter(4, 0, 0, 9),
                user(5, "x", op=replace(0, 0)),
            ],
            totals(0, 0),
        ),
    ],
)
def test_totals(events: list[Any], expected: dict[str, int]) -> None:
    assert U.view(fold(U, events)) == expected


def test_identical_repeat_returns_the_same_state() -> None:
    state = fold(U, [usage_chunk(0, usage(10, 2), turn=1, step=0)])
    assert U.apply(state, usage_chunk(1, usage(10, 2), turn=1, step=0)) is state
    assert U.apply(state, assistant(1, "x", usage=usage(10, 2), turn=1, step=0)) is state


def test_missing_cache_buckets_equal_explicit_zeros() -> None:
    state = fold(U, [usage_chunk(0, usage(10, 2), turn=1, step=0)])
    explicit = {
        "inputTokens": 10,
        "outputTokens": 2,
        "cacheReadTokens": 0,
        "cacheWriteTokens": None,
    }
    assert U.apply(state, usage_chunk(1, explicit, turn=1, step=0)) is state


@pytest.mark.parametrize(
    "event",
    [
        usage_chunk(0, None),
        assistant(0, "x", usage=None),
        usage_chunk(0, {"inputTokens": -1, "outputTokens": 0}),
        usage_chunk(0, {"inputTokens": 1, "outputTokens": 2.5}),
        usage_chunk(0, {"inputTokens": 1, "outputTokens": True}),
        usage_chunk(0, {"inputTokens": 1, "outputTokens": 0, "cacheReadTokens": "3"}),
        usage_chunk(0, {"outputTokens": 0}),
        ev("assistant/chunk", 0, {"chunk": None}),
        ev("assistant/chunk", 0, None),
        ev("turn/start", 0, {}, time="yesterday"),
    ],
)
def test_malformed_events_are_contract_errors(event: Any) -> None:
    with pytest.raises(ContractError):
        U.apply(U.init(), event)


def test_surface_errors_are_not_usage_errors() -> None:
    # a malformed surfaceOp is an error for the surface projections only
    event = ev("assistant/message", 0, {"message": {"content": []}, "usage": usage(5, 1)})
    assert event.surface_error is not None
    assert U.view(U.apply(U.init(), event)) == totals(5, 1)


def test_codec_round_trip() -> None:
    state = fold(U, [usage_chunk(0, usage(10, 2, 3, 4), turn=3, step=1)])
    assert U.decode(U.encode(state)) == state
    assert U.decode(U.encode(U.init())) == U.init()
    no_ids = fold(U, [ev("assistant/chunk", 0, {"chunk": {"type": "usage", "usage": usage(1)}})])
    assert U.decode(U.encode(no_ids)) == no_ids
