"""``stream.cli.progress`` and the replay/lag command helpers (no broker, no terminal)."""

import io

import pytest
from rich.console import Console

from stream.cli.lag import CatchUp
from stream.cli.progress import Rate, duration, eta, progress
from stream.cli.replay import parse_instant, parse_offsets, parse_partitions, plan_table
from stream.ops.lag import LagReport
from stream.ops.offsets import (
    AtOffsets,
    Earliest,
    GroupState,
    PartitionOffsets,
    PlanError,
    plan_reset,
)


def test_rate_over_a_sliding_window() -> None:
    rate = Rate(window=10)
    assert rate.per_second is None
    rate.add(0, 0)
    rate.add(5, 500)
    assert rate.per_second == 100
    rate.add(20, 2500)  # the window drops t=0, keeps t=5 as the anchor
    assert rate.per_second == 2000 / 15
    rate.add(22, 2700)
    assert rate.per_second == 2200 / 17  # t=5 is still the last sample before 22-10
    rate.add(31, 3600)
    assert rate.per_second == 1100 / 11  # now t=20 is


def test_eta_and_duration() -> None:
    assert eta(0, None) == 0.0
    assert eta(100, None) is None and eta(100, -5) is None
    assert eta(1000, 100) == 10
    assert [duration(s) for s in (None, 9.6, 62, 3723)] == ["-", "0:10", "1:02", "1:02:03"]


def test_progress_is_silent_off_a_terminal() -> None:
    out = io.StringIO()
    with progress("x", total=3, console=Console(file=out)) as bar:
        bar.advance(2)
        bar.update(completed=3, status="done")
    assert out.getvalue() == ""


def test_progress_draws_count_and_rate_on_a_terminal() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120)
    with progress(
        "producing", total=10, unit="events", console=console, above=lambda: "TOP"
    ) as bar:
        bar.advance(4)
        bar.update(completed=10, status="ok")
    text = out.getvalue()
    assert "producing" in text and "10/10 events" in text and "TOP" in text and "ok" in text


def test_argument_parsers() -> None:
    assert parse_instant("2026-01-01T00:00:00Z") == 1_767_225_600_000
    assert parse_instant("2026-01-01T02:00:00+02:00") == 1_767_225_600_000
    with pytest.raises(PlanError, match="UTC offset"):
        parse_instant("2026-01-01T00:00:00")
    with pytest.raises(PlanError, match="ISO-8601"):
        parse_instant("yesterday")
    assert parse_offsets(["0:10", "3:0"]) == AtOffsets(((0, 10), (3, 0)))
    for bad in (["0"], ["a:1"], ["0:-1"]):
        with pytest.raises(PlanError):
            parse_offsets(bad)
    assert parse_partitions(None) is None
    assert parse_partitions("0,3") == {0, 3}
    for bad in ("", "0,x"):
        with pytest.raises(PlanError):
            parse_partitions(bad)


def test_plan_table_shows_every_figure() -> None:
    plan = plan_reset(
        [PartitionOffsets(0, 0, 1200, 1200), PartitionOffsets(1, 0, 10, 0)],
        Earliest(),
        group="g",
        topic="events",
    )
    out = io.StringIO()
    Console(file=out, width=120).print(plan_table(plan))
    text = out.getvalue()
    assert "replay of group g on events to earliest" in text
    assert "1,200" in text and "0 (=)" in text


def _report(at: float, position: int, end: int) -> LagReport:
    part = PartitionOffsets(0, 0, end, position)
    return LagReport("g", "events", (part,), GroupState("g", "STABLE", ()), at)


def test_catch_up_rate_and_eta_account_for_arrivals() -> None:
    catch_up = CatchUp(_report(0, 0, 1000), window=10)
    catch_up.observe(_report(2, 400, 1100))  # read 200/s, arriving 50/s, lag 700
    assert catch_up.read == 400 and catch_up.reads.per_second == 200
    assert catch_up.eta == 700 / 150
    assert "lag 700" in catch_up.line() and "ETA 0:05" in catch_up.line()
    assert catch_up.as_json()["etaSeconds"] == 700 / 150
