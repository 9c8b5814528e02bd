"""``stream replay``'s safety rails without a broker: ``--yes`` for what cannot be undone,
and the group looked at again right before each write."""

import argparse
from typing import Any

import pytest

from stream.cli import main
from stream.cli import replay as cli
from stream.config import Settings
from stream.ops.control import Control
from stream.ops.offsets import (
    Earliest,
    GroupBusy,
    GroupState,
    Latest,
    Member,
    PartitionOffsets,
    Target,
    plan_reset,
)
from stream.ops.rebuild import ChangelogPartition, RebuildPlan

WORKER = Member("m-1", "faust-0.15.3", "/10.0.0.7", (0, 1))


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    return parser.parse_args(["replay", *argv])


def _no_broker(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Fail the test if anything would talk to Kafka; returns the calls seen."""
    calls: list[str] = []

    def refuse(*_: Any, **__: Any) -> Any:
        calls.append("broker")
        raise AssertionError("a refused replay must not contact the broker")

    monkeypatch.setattr(cli, "admin_client", refuse)
    monkeypatch.setattr(cli, "no_kafka", refuse)
    return calls


@pytest.mark.parametrize(
    "argv",
    [
        ["--to-latest"],
        ["--to-earliest", "--rebuild"],
        ["--to-latest", "--rebuild", "--wait", "5"],
        ["--to-offset", "0:5", "--rebuild"],
    ],
)
def test_rebuild_and_to_latest_refuse_without_yes(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls = _no_broker(monkeypatch)
    assert main(["replay", *argv]) == 2
    err = capsys.readouterr().err
    assert "refusing without --yes" in err and "--dry-run" in err
    assert ("--rebuild discards the table state" in err) == ("--rebuild" in argv)
    assert ("--to-latest skips" in err) == ("--to-latest" in argv)
    assert calls == []


def test_what_needs_no_confirmation() -> None:
    for argv in (
        ["--to-latest", "--dry-run"],
        ["--to-earliest", "--rebuild", "--dry-run"],
        ["--to-latest", "--yes"],
        ["--to-earliest", "--rebuild", "--yes"],
        ["--to-earliest"],
        ["--to-datetime", "2026-05-01T12:00:00Z"],
        ["--new-generation"],
    ):
        assert cli.unconfirmed(_args(*argv)) is None, argv


# -- the second look at the group, right before each write ------------------------------


class Broker:
    """Records the writes ``_apply`` makes; the group gains a member after ``joins_after``
    looks (None: never)."""

    def __init__(self, joins_after: int | None) -> None:
        self.joins_after = joins_after
        self.looks = 0
        self.writes: list[str] = []

    def ensure_no_members(self, _admin: Any, group: str, topic: str | None = None) -> GroupState:
        self.looks += 1
        if self.joins_after is not None and self.looks > self.joins_after:
            raise GroupBusy(GroupState(group, "STABLE", (WORKER,)))
        return GroupState(group, "EMPTY", ())

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(cli, "ensure_no_members", self.ensure_no_members)
        monkeypatch.setattr(cli, "apply_reset", lambda *_: self.writes.append("offsets"))
        monkeypatch.setattr(cli, "write_control", lambda *_: self.writes.append("control"))
        monkeypatch.setattr(
            cli, "truncate_changelog", lambda *_, **__: self.writes.append("changelog")
        )


def _replay(target: Target, rebuild: bool) -> cli.Replay:
    offsets = [PartitionOffsets(0, 0, 100, 40), PartitionOffsets(1, 0, 50, 50)]
    plan = plan_reset(offsets, target, group="context-stream", topic="dsh.session-events")
    state = GroupState("context-stream", "EMPTY", ())
    if not rebuild:
        return cli.Replay(state, plan)
    changelog = (ChangelogPartition(0, 0, 10), ChangelogPartition(1, 0, 0))
    following = Control(generation=2, epoch=1)
    return cli.Replay(state, plan, rebuild=RebuildPlan(Control(1, 0), following, changelog))


def test_a_rebuild_with_the_group_still_empty_does_every_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    broker = Broker(joins_after=None)
    broker.install(monkeypatch)
    cli._apply(Settings(), object(), _replay(Earliest(), rebuild=True))  # type: ignore[arg-type]
    assert broker.writes == ["offsets", "control", "changelog"]
    assert broker.looks == 2  # before the commit and before the truncation


def test_a_member_that_joined_after_the_plan_stops_the_commit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    broker = Broker(joins_after=0)
    broker.install(monkeypatch)
    with pytest.raises(cli.Aborted, match="before moving the offsets") as raised:
        cli._apply(Settings(), object(), _replay(Latest(), rebuild=False))  # type: ignore[arg-type]
    assert broker.writes == []
    assert "nothing changed" in str(raised.value) and str(WORKER) in str(raised.value)


def test_a_member_that_joined_during_a_rebuild_stops_the_truncation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    broker = Broker(joins_after=1)
    broker.install(monkeypatch)
    with pytest.raises(cli.Aborted, match="before truncating the changelog") as raised:
        cli._apply(Settings(), object(), _replay(Earliest(), rebuild=True))  # type: ignore[arg-type]
    assert broker.writes == ["offsets", "control"]
    assert "run the same command again" in str(raised.value)


def test_run_replay_reports_an_abort_with_status_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    broker = Broker(joins_after=0)
    broker.install(monkeypatch)
    monkeypatch.setattr(cli, "no_kafka", lambda *_: False)
    monkeypatch.setattr(cli, "admin_client", lambda _: object())
    monkeypatch.setattr(cli, "_plan", lambda *_: _replay(Latest(), rebuild=False))
    assert main(["replay", "--to-latest", "--yes"]) == 1
    err = capsys.readouterr().err
    assert "stream replay: aborted: a member joined group context-stream after the plan" in err
    assert "faust-0.15.3 on 10.0.0.7 (member m-1)" in err
    assert broker.writes == []


def test_an_unreachable_broker_fails_at_once(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9")
    # The real probe, against a closed port: refused at once, said before any AdminClient.
    monkeypatch.setattr(cli, "admin_client", lambda _: pytest.fail("no AdminClient"))
    assert main(["replay", "--to-earliest"]) == 1
    assert main(["lag"]) == 1
    err = capsys.readouterr().err
    assert "stream replay: cannot reach Kafka at 127.0.0.1:9 (KAFKA_BOOTSTRAP_SERVERS)" in err
    assert "connection refused" in err
    assert "stream lag: cannot reach Kafka at 127.0.0.1:9" in err and "make demo" in err
