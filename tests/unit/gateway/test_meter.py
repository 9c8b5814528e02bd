"""The meter model: what a UI draws, as a pure function of one update."""

from typing import Any

import pytest

from stream.gateway.meter import Segment, bar_cells, meter, summary

EXAMPLE: dict[str, Any] = {
    "sessionId": "s1",
    "seq": 123,
    "contextPressure": {"contextWindow": 131072, "pressureTokens": 675, "projectedTokens": 692},
    "contextBreakdown": {"systemTokens": 21, "toolsTokens": 42, "messageTokens": 82},
    "tokenUsage": {
        "uncachedInputTokens": 487,
        "outputTokens": 47,
        "cacheReadTokens": 1432,
        "cacheWriteTokens": 380,
    },
    "faults": {"contextBreakdown": {"seq": 120, "error": "claim over the wrong range"}},
}


def test_the_ring_is_the_provider_figure() -> None:
    model = meter(EXAMPLE)
    assert (model.used, model.capacity, model.pressure) == (692, 131072, 675)
    assert model.percent == pytest.approx(100 * 692 / 131072)
    assert model.level == "ok"


def test_the_bar_takes_relative_proportions_of_the_heuristic_figures() -> None:
    model = meter(EXAMPLE)
    shares = {s.key: s.share for s in model.segments}
    assert shares == pytest.approx(
        {"systemTokens": 21 / 145, "toolsTokens": 42 / 145, "messageTokens": 82 / 145}
    )
    # The rows keep the heuristic figures as they are: never scaled to the provider's 692.
    assert [(r.label, r.tokens) for r in model.rows] == [
        ("system", 21),
        ("tools", 42),
        ("messages", 82),
    ]
    assert model.heuristic_total == 145 != model.used


def test_zero_width_segments_are_not_drawn_but_their_rows_stay() -> None:
    model = meter({**EXAMPLE, "contextBreakdown": {"systemTokens": 0, "toolsTokens": 5}})
    assert [s.key for s in model.segments] == ["toolsTokens"]
    assert [r.tokens for r in model.rows] == [0, 5, 0]
    assert model.segments[0].share == 1.0


def test_unknown_pressure_keys_give_no_percent() -> None:
    assert meter({"sessionId": "s", "seq": 0}).percent is None
    window_only = meter({"contextPressure": {"contextWindow": 1000}})
    assert window_only.percent is None and window_only.capacity == 1000
    no_window = meter({"contextPressure": {"pressureTokens": 5, "projectedTokens": 7}})
    assert no_window.percent is None and no_window.used == 7
    assert meter({"contextPressure": {"contextWindow": 0, "projectedTokens": 7}}).percent is None


@pytest.mark.parametrize(
    ("projected", "level"), [(0, "ok"), (69_999, "ok"), (70_000, "warn"), (90_000, "high")]
)
def test_levels(projected: int, level: str) -> None:
    update = {"contextPressure": {"contextWindow": 100_000, "projectedTokens": projected}}
    assert meter(update).level == level


def test_over_the_window_is_reported_as_is() -> None:
    update = {"contextPressure": {"contextWindow": 100, "projectedTokens": 150}}
    assert meter(update).percent == 150.0


def test_faults_and_usage() -> None:
    model = meter(EXAMPLE)
    assert [(f.projection, f.seq, f.error) for f in model.faults] == [
        ("contextBreakdown", 120, "claim over the wrong range")
    ]
    assert dict(model.usage) == {
        "input": 487,
        "output": 47,
        "cache read": 1432,
        "cache write": 380,
    }


def test_a_malformed_update_does_not_break_the_meter() -> None:
    model = meter(
        {
            "seq": "7",
            "contextPressure": [],
            "contextBreakdown": {"systemTokens": True, "toolsTokens": -3, "messageTokens": 2.5},
            "faults": {"x": "boom"},
        }
    )
    assert model.seq is None and model.percent is None
    assert model.segments == ()
    assert model.faults[0].error == "boom"


def _segments(*tokens: int) -> list[Segment]:
    total = sum(tokens)
    return [Segment(f"k{i}", f"l{i}", t, t / total) for i, t in enumerate(tokens)]


@pytest.mark.parametrize(
    ("tokens", "width", "cells"),
    [
        ((21, 42, 82), 48, [7, 14, 27]),
        ((1, 1, 1), 10, [3, 3, 4]),
        ((1, 10_000), 20, [1, 19]),  # a tiny non-zero segment stays visible
        ((5,), 7, [7]),
        ((1, 1, 1), 2, [1, 1, 0]),  # narrower than the segments: still exactly the width
    ],
)
def test_bar_cells_add_up_to_the_width(
    tokens: tuple[int, ...], width: int, cells: list[int]
) -> None:
    got = bar_cells(_segments(*tokens), width)
    assert sum(got) == width
    assert sorted(got) == sorted(cells)


def test_summary_row() -> None:
    assert summary(EXAMPLE, 1_700_000_000_000) == {
        "sessionId": "s1",
        "seq": 123,
        "percent": 0.53,
        "projectedTokens": 692,
        "contextWindow": 131072,
        "faults": 1,
        "updatedAt": 1_700_000_000_000,
        "time": None,
    }
    assert summary({**EXAMPLE, "time": 1_699_999_999_000}, 1)["time"] == 1_699_999_999_000
