"""``stream watch`` drawing: a pure function of the update, checked on recorded text."""

from typing import Any

from rich.console import Console, RenderableType
from rich.text import Text

from stream.cli.watch import (
    BAR_WIDTH,
    SEGMENT_STYLE,
    describe,
    render_meter,
    render_sessions,
    ring_glyph,
)
from tests.unit.gateway.test_meter import EXAMPLE


def _text(renderable: RenderableType, width: int = 100) -> str:
    console = Console(width=width, record=True, color_system=None, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(renderable)
    return console.export_text()


def _bar_line(update: dict[str, Any]) -> Text:
    """The bar as drawn: the Text whose characters are all bar cells."""
    group = render_meter(update).renderable
    for part in group.renderables:  # type: ignore[attr-defined]
        if isinstance(part, Text) and set(part.plain) <= {"━", "─"} and part.plain:
            return part
    raise AssertionError("no bar")


def test_the_meter_shows_ring_headline_rows_usage_and_faults() -> None:
    text = _text(render_meter(EXAMPLE))
    assert "s1" in text and "seq 123" in text
    assert "◔ 0.5%   ~692 / 131,072 tokens" in text  # ring, percent, headline
    assert "provider's last prompt 675, +17 since" in text
    assert "~21 system" in text and "~42 tools" in text and "~82 messages" in text
    assert "input   output   cache read   cache write" in text
    assert "487     47       1,432        380" in text
    assert "⚠ FAULT contextBreakdown at seq 120: claim over the wrong range" in text
    assert "FAULTED" in text


def test_the_bar_is_segmented_by_relative_heuristic_proportions() -> None:
    bar = _bar_line(EXAMPLE)
    assert len(bar.plain) == BAR_WIDTH
    widths = {str(span.style): span.end - span.start for span in bar.spans}
    assert widths == {
        SEGMENT_STYLE["systemTokens"]: 8,
        SEGMENT_STYLE["toolsTokens"]: 16,
        SEGMENT_STYLE["messageTokens"]: 32,
    }


def test_zero_width_segments_are_not_drawn() -> None:
    update = {
        **EXAMPLE,
        "contextBreakdown": {"systemTokens": 0, "toolsTokens": 0, "messageTokens": 9},
    }
    bar = _bar_line(update)
    assert [str(span.style) for span in bar.spans] == [SEGMENT_STYLE["messageTokens"]]
    assert "~0 system" in _text(render_meter(update))  # the row stays, as ~0


def test_before_any_provider_sample() -> None:
    text = _text(render_meter({"sessionId": "fresh", "seq": 0}))
    assert "○ —   — / — tokens" in text
    assert "no provider sample yet · window not reported yet" in text
    assert "FAULT" not in text


def test_ring_glyphs() -> None:
    assert [ring_glyph(p) for p in (None, 0, 0.5, 25, 26, 50, 75, 76, 100, 140)] == list(
        "○○◔◔◑◑◕●●●"
    )


def test_the_sessions_table() -> None:
    high = {
        "sessionId": "busy",
        "seq": 9,
        "contextPressure": {"contextWindow": 1000, "projectedTokens": 950},
        "faults": {"tokenUsage": {"seq": 3, "error": "x"}},
    }
    text = _text(render_sessions([(high, 58_000), (EXAMPLE, 0)], now_ms=60_000))
    lines = [line for line in text.splitlines() if "busy" in line or "s1" in line]
    assert "●" in lines[0] and "95.0%" in lines[0] and "~950 / 1,000" in lines[0]
    assert "2s ago" in lines[0] and "tokenUsage" in lines[0]
    assert "0.5%" in lines[1] and "1m ago" in lines[1] and "contextBreakdown" in lines[1]
    assert "no updates yet" in _text(render_sessions([], now_ms=0))


def test_describe_is_the_one_line_form() -> None:
    line = describe(EXAMPLE)
    assert line.startswith("s1 seq 123  ctx       692/131,072 ( 0.5%)  ~sys 21 ~tools 42 ~msgs 82")
    assert line.endswith("FAULT contextBreakdown@120: claim over the wrong range")
