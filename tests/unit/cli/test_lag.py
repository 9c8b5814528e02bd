"""``stream lag`` with a fake broker: the table, stalled partitions, and the exit status
of ``--until-caught-up``."""

import io
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from rich.console import Console

from stream.cli import lag as cli
from stream.cli import main
from stream.ops.control import Control
from stream.ops.lag import LagReport
from stream.ops.offsets import GroupState, Member, PartitionOffsets
from tests.waiting import FakeClock


def _report(taken_at: float, *parts: PartitionOffsets) -> LagReport:
    member = Member("m-1", "faust[/]", "/10.0.0.7", (0, 1))  # a client id is data, too
    return LagReport("g", "events", parts, GroupState("g", "STABLE", (member,)), taken_at)


def _fake(monkeypatch: pytest.MonkeyPatch, reports: Iterator[LagReport]) -> None:
    """``read_lag`` answers the next of ``reports``, then the last one again; the watch
    runs on a fake clock (its ``--interval`` pauses pass no real time)."""
    seen: list[LagReport] = []

    def read_lag(*_: Any) -> LagReport:
        for report in reports:
            seen.append(report)
            break
        return seen[-1]

    monkeypatch.setattr(cli, "no_kafka", lambda *_: False)
    monkeypatch.setattr(cli, "admin_client", lambda _: object())
    monkeypatch.setattr(cli, "read_lag", read_lag)
    monkeypatch.setattr(cli, "read_control", lambda *_: Control(generation=2, epoch=1))
    clock = FakeClock()
    monkeypatch.setattr(cli, "TICKS", cli.Ticks(now=clock, sleep=clock.sleep))


def _text(renderable: Any) -> str:
    out = io.StringIO()
    Console(file=out, width=140, color_system=None).print(renderable)
    return out.getvalue()


def test_the_table_shows_committed_end_lag_and_in_watch_mode_stalls() -> None:
    report = _report(0, PartitionOffsets(0, 0, 1500, 200), PartitionOffsets(1, 0, 9, 9))
    single = _text(cli.lag_table(report))
    assert "committed" in single and "1,500" in single and "1,300" in single
    assert "progress" not in single and "faust[/]@10.0.0.7" in single
    watched = _text(cli.lag_table(report, {0: 75}))
    row = next(line for line in watched.splitlines() if "1,300" in line)
    assert "stalled 1:15" in row and "1 stalled" in watched
    assert "faust[/]" in _text(cli.members_table(report.state))


def test_catch_up_names_stalled_partitions() -> None:
    stuck = PartitionOffsets(0, 0, 100, 10)
    catch_up = cli.CatchUp(_report(0, stuck), window=10, stall_after=60)
    catch_up.observe(_report(30, stuck))
    assert "stalled" not in catch_up.line()
    catch_up.observe(_report(60, stuck))
    assert catch_up.line().endswith("members 1  stalled 0")
    assert catch_up.as_json()["stalled"] == [{"partition": 0, "seconds": 60.0}]


def test_until_caught_up_exits_0_once_the_lag_is_0(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    reports = iter(
        [
            _report(0, PartitionOffsets(0, 0, 100, 10)),
            _report(1, PartitionOffsets(0, 0, 100, 60)),
            _report(2, PartitionOffsets(0, 0, 100, 100)),
        ]
    )
    _fake(monkeypatch, reports)
    assert main(["lag", "--until-caught-up", "--interval", "0.001"]) == 0  # implies --watch
    out = capsys.readouterr().out
    assert "lag 90" in out and "lag 0" in out and "read 90 records" in out


def test_until_caught_up_exits_1_at_the_time_limit_naming_what_is_behind(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    times = iter(range(0, 10_000, 30))  # each report 30 s after the last (--interval)
    stuck, moving = PartitionOffsets(0, 0, 100, 10), PartitionOffsets(1, 0, 50, 50)

    def reports() -> Iterator[LagReport]:
        for t in times:
            yield _report(t, stuck, moving)

    _fake(monkeypatch, reports())
    argv = ["lag", "--watch", "--until-caught-up", "--interval", "30", "--seconds", "100"]
    assert main([*argv, "--stall-after", "45"]) == 1
    captured = capsys.readouterr()
    assert "stalled 0" in captured.out
    assert "stream lag: not caught up after 120.0 s: lag 90" in captured.err  # 4 readings
    assert "partition 0: lag 90 (committed 10, end 100), stalled: no commit for" in captured.err
    assert "partition 1" not in captured.err


def test_watch_without_until_caught_up_exits_0_and_json_lists_stalls(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    times = iter(range(0, 10_000, 30))
    _fake(monkeypatch, (_report(t, PartitionOffsets(0, 0, 100, 10)) for t in times))
    argv = ["lag", "--watch", "--json", "--interval", "30", "--seconds", "100"]
    assert main([*argv, "--stall-after", "45"]) == 0
    lines = [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(lines) == 5  # readings at 0, 30, ..., 120 s on the fake clock
    assert lines[0]["stalled"] == [] and lines[-1]["stalled"][0]["partition"] == 0


def test_single_shot_and_bad_options(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _fake(monkeypatch, iter([_report(0, PartitionOffsets(0, 0, 100, 10))]))
    assert main(["lag"]) == 0
    out = capsys.readouterr().out
    assert "committed" in out and "90" in out and "generation 2, state epoch 1" in out
    assert main(["lag", "--watch", "--stall-after", "0"]) == 2
    assert main(["lag", "--watch", "--interval", "-1"]) == 2
    assert "must be > 0" in capsys.readouterr().err
