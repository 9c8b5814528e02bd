"""``stream watch`` drawing: a pure function of the update, checked on recorded text."""

import argparse
import io
import re
from typing import Any

import orjson
import pytest
from rich.console import Console, RenderableType
from rich.text import Text

from stream.cli import main, watch
from stream.cli.watch import (
    BAR_WIDTH,
    SEGMENT_STYLE,
    Changes,
    _print_line,
    describe,
    json_line,
    printable,
    render_meter,
    render_sessions,
    render_waiting,
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


# -- hostile input: ids and texts from Redis are data, never markup or terminal controls --

HOSTILE_IDS = [
    "x[/]",
    "[bold red]red[/bold red]",
    "[link=https://evil.example]click[/link]",
    "esc\x1b[2J\x1b]0;title\x07",
    "line\nbreak\rreturn",
    "nul\x00byte\x7fdel",
    "csi\x9b31m",
    "rtl\u202eexe.txt",
    "lone\ud800surrogate",
]


def _raw(renderable: RenderableType) -> str:
    """What reaches a colour terminal, styling escapes included."""
    out = io.StringIO()
    Console(file=out, width=100, force_terminal=True, color_system="truecolor").print(renderable)
    return out.getvalue()


def _hostile(session_id: str) -> dict[str, Any]:
    return {
        **EXAMPLE,
        "sessionId": session_id,
        "faults": {session_id: {"seq": 7, "error": f"bad {session_id}"}},
    }


@pytest.mark.parametrize("session_id", HOSTILE_IDS)
def test_a_hostile_session_id_renders_as_inert_text(session_id: str) -> None:
    shown = printable(session_id)
    for renderable in (
        render_meter(_hostile(session_id)),
        render_sessions([(_hostile(session_id), 0)], now_ms=0),
        render_waiting(session_id),
    ):
        text = _text(renderable, width=200)  # rendering raised before: x[/] is bad markup
        assert shown in text  # every character shown, the markup-like parts as typed
        raw = _raw(renderable)
        # No control character of the id reaches the terminal: the only ESCs are rich's
        # own SGR colour codes, and those are all of the form ESC [ ... m.
        assert not re.search("[\x00-\x08\x0b-\x1a\x1c-\x1f\x7f-\x9f\u202e\ud800-\udfff]", raw)
        assert re.sub("\x1b\\[[0-9;]*m", "", raw).count("\x1b") == 0
    assert "\n" not in shown and "\x1b" not in shown


def test_markup_in_an_id_adds_no_style() -> None:
    title = render_meter(_hostile("[bold red]red[/bold red]")).title
    assert isinstance(title, Text)
    assert title.plain.startswith("[bold red]red[/bold red]  seq 123")
    assert [str(span.style) for span in title.spans] == ["bold"]  # ours, over the whole id
    table = render_sessions([(_hostile("[link=https://evil.example]x[/link]"), 0)], now_ms=0)
    cell = next(iter(table.columns[1].cells))
    assert isinstance(cell, Text) and cell.plain == "[link=https://evil.example]x[/link]"
    assert "evil.example" not in "".join(str(s.style) for s in cell.spans)


def test_printable_shows_controls_as_escapes() -> None:
    assert printable("a\x1b[31mb\x00c\nd\te\x9bf\u202eg\ud800") == (
        "a\\x1b[31mb\\x00c\\nd\\te\\x9bf\\u202eg\\ud800"
    )
    assert printable("plain ünïcode 日本 🙂") == "plain ünïcode 日本 🙂"
    assert printable(42) == "42"


def test_the_line_form_of_a_hostile_or_malformed_update() -> None:
    update = {
        "sessionId": "id\x1b[2J\n",
        "seq": "\x1b[31m",  # not a number: shown as unknown
        "contextPressure": {"projectedTokens": "many", "contextWindow": [1]},
        "contextBreakdown": "nope",
        "tokenUsage": {"outputTokens": 5},
        "faults": {"p\x1b": {"seq": 1, "error": "e\x00\n"}, "q": "not an object"},
    }
    line = describe(update)
    assert line.startswith("id\\x1b[2J\\n seq —  ctx no sample yet  ~sys 0 ~tools 0 ~msgs 0")
    assert "out 5" in line and "FAULT p\\x1b@1: e\\x00\\n" in line and "FAULT q@—" in line
    assert not re.search("[\x00-\x1f]", line)


def test_json_lines_keep_the_value_and_escape_what_json_allows_raw() -> None:
    payload = orjson.dumps({"sessionId": "a\x9b31m\u2028\u202eb", "seq": 1}).decode()
    assert "\x9b" in payload  # orjson leaves C1 and U+2028 raw
    line = json_line(payload)
    assert orjson.loads(line) == orjson.loads(payload)
    assert not re.search("[\x7f-\x9f\u2028\u202e]", line)


def test_print_line_writes_safe_text(capsys: pytest.CaptureFixture[str]) -> None:
    update = {**EXAMPLE, "sessionId": "s\x1b[2J"}
    payload = orjson.dumps(update)
    _print_line(argparse.Namespace(json=False), payload, update)
    _print_line(argparse.Namespace(json=True), payload, update)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and "\x1b" not in lines[0] and "s\\x1b[2J seq 123" in lines[0]
    assert orjson.loads(lines[1]) == update  # JSON escapes control characters itself


def test_changed_skips_a_later_seq_with_the_same_figures() -> None:
    changes = Changes()
    first = EXAMPLE | {"seq": 10, "time": 1}
    assert changes.new("s", first)
    assert not changes.new("s", first | {"seq": 11, "time": 2})  # same figures, later seq
    moved = first | {"tokenUsage": {**first["tokenUsage"], "outputTokens": 1}}
    assert changes.new("s", moved)
    assert changes.new("other", first)  # per session
    changes.forget("s")  # expired: its next life prints from the start
    assert changes.new("s", moved)


def test_changed_is_bounded_and_forgets_the_stalest_first() -> None:
    changes = Changes(limit=2)
    for session in ("a", "b", "c"):
        assert changes.new(session, EXAMPLE)
    assert list(changes.shown) == ["b", "c"]
    assert changes.new("a", EXAMPLE)  # forgotten: printed again, never missed
    assert not changes.new("c", EXAMPLE)


@pytest.mark.parametrize("session", [None, "s1"])
def test_ctrl_c_ends_a_watch_with_status_0(
    monkeypatch: pytest.MonkeyPatch, session: str | None
) -> None:
    """Ctrl-C is how a watch ends, the table's and a session's alike: not a failure."""

    class Reached:
        def close(self) -> None:
            pass

    def interrupted(*args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(watch, "connect_redis", lambda command, settings: Reached())
    monkeypatch.setattr(watch, "_watch_all", interrupted)
    monkeypatch.setattr(watch, "_watch_session", interrupted)
    assert main(["watch", *([session] if session else []), "--lines"]) == 0
