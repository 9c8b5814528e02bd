"""``stream replay``: move the worker group's input offsets and rebuild the table state
(``stream lag``, in ``lag.py``, watches the group work through what it then has to read).

``stream replay`` only acts while the group has no live members (the workers are
stopped): it prints the plan, then commits the new offsets; with ``--rebuild`` it also
writes the next generation and state epoch to the control topic and truncates the table's
changelog, so every worker drops its local state at start and refolds from the offsets.
``--rebuild`` and ``--to-latest`` discard what cannot be had back (the table state, the
records not yet read), so they ask for ``--yes`` (``--dry-run`` needs none), and the group
is looked at again right before the offsets are committed and before the changelog is
truncated: a worker that started since the plan stops the run there.
"""

import argparse
import sys
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from confluent_kafka.admin import AdminClient
from rich.table import Table

from stream.cli.lag import BROKER_ERRORS, broker_failed, number, settings_or_exit
from stream.cli.progress import progress, stdout_console
from stream.cli.reach import KAFKA_ENV, TOPICS_ENV, environment, no_kafka
from stream.config import Settings
from stream.ops.admin import admin as admin_client
from stream.ops.control import (
    Control,
    ControlError,
    read_control,
    write_control,
)
from stream.ops.offsets import (
    AtOffsets,
    AtTime,
    Earliest,
    GroupBusy,
    GroupState,
    Latest,
    PartitionPlan,
    PlanError,
    ResetPlan,
    Target,
    apply_reset,
    describe_group,
    ensure_no_members,
    offsets_for_time,
    plan_reset,
    snapshot,
)
from stream.ops.rebuild import (
    RebuildPlan,
    changelog_state,
    plan_generation,
    plan_rebuild,
    truncate_changelog,
)
from stream.ops.topics import changelog_topic, control_topic


def register(commands: Any) -> None:
    replay = commands.add_parser(
        "replay",
        help="reset the worker group's input offsets (workers stopped); --rebuild also"
        " discards the table state",
        description="Move the worker group's committed input offsets (refused while the"
        " group has live members), and/or move the rebuild generation. Offsets and counts"
        " are records (a --segment N message holds up to N events).",
        epilog=environment(KAFKA_ENV, TOPICS_ENV, "STREAM_GENERATION"),
    )
    where = replay.add_mutually_exclusive_group()
    where.add_argument("--to-earliest", action="store_true", help="the earliest retained record")
    where.add_argument(
        "--to-latest",
        action="store_true",
        help="the end: skip what is there (then `stream produce` a complete source)",
    )
    where.add_argument(
        "--to-datetime",
        metavar="ISO-8601",
        help="the first record at or after this instant, e.g. 2026-05-01T12:00:00Z",
    )
    where.add_argument(
        "--to-offset",
        nargs="+",
        metavar="PARTITION:OFFSET",
        help="these offsets; other partitions stay where they are",
    )
    replay.add_argument("--partitions", metavar="P,P,...", help="only these input partitions")
    replay.add_argument(
        "--rebuild",
        action="store_true",
        help="also discard the table state: truncate its changelog and bump the state epoch"
        " and the rebuild generation, so every worker drops its local copy and refolds",
    )
    replay.add_argument(
        "--new-generation",
        action="store_true",
        help="only move the rebuild generation (no target needed, state kept): workers"
        " publish with it from their next start, so re-produced sessions win in Redis",
    )
    replay.add_argument(
        "--generation",
        type=int,
        metavar="N",
        help="with --rebuild or --new-generation: this generation instead of the next one"
        " (above any in use; repeating it changes nothing)",
    )
    replay.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    replay.add_argument(
        "--yes",
        action="store_true",
        help="confirm --rebuild or --to-latest (they discard the table state / skip records);"
        " look first with --dry-run",
    )
    replay.add_argument(
        "--wait",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="wait up to this long for the group's members to leave",
    )
    replay.set_defaults(run=run_replay)


# -- arguments --------------------------------------------------------------------------


def parse_instant(text: str) -> int:
    """Epoch milliseconds of an ISO-8601 instant; a UTC offset is required (a bare local
    time would mean different instants on different hosts)."""
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise PlanError(f"--to-datetime: not an ISO-8601 date-time: {text!r}") from None
    if when.tzinfo is None:
        raise PlanError(f"--to-datetime: give a UTC offset, e.g. {text}Z or {text}+02:00")
    return int(when.timestamp() * 1000)


def parse_offsets(items: list[str]) -> AtOffsets:
    pairs = []
    for item in items:
        partition, _, offset = item.partition(":")
        try:
            pair = (int(partition), int(offset))
        except ValueError:
            raise PlanError(f"--to-offset: expected PARTITION:OFFSET, got {item!r}") from None
        if min(pair) < 0:
            raise PlanError(f"--to-offset: negative partition or offset in {item!r}")
        pairs.append(pair)
    return AtOffsets(tuple(pairs))


def parse_partitions(text: str | None) -> frozenset[int] | None:
    if text is None:
        return None
    try:
        chosen = frozenset(int(p) for p in text.split(",") if p.strip())
    except ValueError:
        raise PlanError(f"--partitions: expected P,P,..., got {text!r}") from None
    if not chosen:
        raise PlanError("--partitions: no partition given")
    return chosen


def _target(args: argparse.Namespace) -> Target | None:
    if args.to_earliest:
        return Earliest()
    if args.to_latest:
        return Latest()
    if args.to_datetime is not None:
        return AtTime(parse_instant(args.to_datetime))
    if args.to_offset is not None:
        return parse_offsets(args.to_offset)
    if args.rebuild or not args.new_generation:
        raise PlanError("give a target: --to-earliest, --to-latest, --to-datetime or --to-offset")
    if args.partitions is not None:
        raise PlanError("--partitions needs a target")
    return None


# -- stream replay -------------------------------------------------------------------------


def unconfirmed(args: argparse.Namespace) -> str | None:
    """Why this run needs ``--yes`` and lacks it (``None``: it may go ahead).

    ``--rebuild`` discards the table state and ``--to-latest`` skips every record not yet
    read: neither can be undone by another replay, so both are confirmed explicitly."""
    if args.dry_run or args.yes:
        return None
    what = []
    if args.rebuild:
        what.append("--rebuild discards the table state (every session is folded afresh)")
    if args.to_latest:
        what.append("--to-latest skips every record the group has not read yet")
    if not what:
        return None
    return (
        f"refusing without --yes: {'; '.join(what)}. Look at the plan with --dry-run,"
        " then run the same command with --yes"
    )


def _wait_for_empty(
    admin: AdminClient, settings: Settings, seconds: float, quiet: bool
) -> GroupState:
    deadline = time.monotonic() + seconds
    while True:
        state = describe_group(admin, settings.app_id, settings.input_topic)
        if not state.members or time.monotonic() >= deadline:
            return state
        if not quiet:
            print(
                f"stream replay: waiting for {len(state.members)} member(s) to leave",
                file=sys.stderr,
            )
            quiet = True
        time.sleep(1.0)


def plan_table(plan: ResetPlan) -> Table:
    table = Table(
        title=f"replay of group {plan.group} on {plan.topic} to {plan.target}",
        title_justify="left",
        show_footer=True,
    )
    table.add_column("partition", "total", justify="right")
    table.add_column("committed", justify="right")
    table.add_column("earliest", justify="right")
    table.add_column("end", justify="right")
    table.add_column("target", justify="right")
    table.add_column("re-read", f"{plan.rereads:,}", justify="right")
    table.add_column("skipped", f"{plan.skips:,}", justify="right")
    table.add_column("to read", f"{plan.backlog:,}", justify="right")
    table.add_column("note")
    for p in plan.partitions:
        table.add_row(
            str(p.partition),
            number(p.committed),
            number(p.low),
            number(p.high),
            number(p.target) + ("" if p.changes else " (=)"),
            number(p.rereads),
            number(p.skips),
            number(p.backlog),
            p.note,
        )
    return table


def rebuild_lines(settings: Settings, plan: RebuildPlan) -> list[str]:
    current, following = plan.current, plan.next
    lines = []
    if following is None:
        lines.append(
            f"rebuild: already in place (generation {current.generation},"
            f" epoch {current.epoch} in {control_topic(settings)})"
        )
    else:
        lines.append(
            f"rebuild: {control_topic(settings)} generation {current.generation} ->"
            f" {following.generation}, state epoch {current.epoch} -> {following.epoch}"
            " (every worker drops its local table state at start)"
        )
    held = ", ".join(f"{p.partition}: {p.low:,}..{p.high:,}" for p in plan.changelog if p.records)
    lines.append(
        f"rebuild: truncate {changelog_topic(settings)} ({held})"
        if held
        else f"rebuild: {changelog_topic(settings)} holds nothing in these partitions"
    )
    return lines


@dataclass(frozen=True, slots=True)
class Replay:
    """Everything ``stream replay`` is about to do, planned before anything is written."""

    state: GroupState
    plan: ResetPlan | None  # None: no target (a generation bump alone)
    rebuild: RebuildPlan | None = None
    generation: Control | None = None  # a generation-only bump to write
    current: Control | None = None  # the control record it bumps

    @property
    def moving(self) -> tuple[PartitionPlan, ...]:
        return self.plan.changes if self.plan else ()

    @property
    def writes(self) -> bool:
        rebuilds = self.rebuild is not None and self.rebuild.next is not None
        return bool(self.moving) or rebuilds or self.generation is not None


def _plan(args: argparse.Namespace, settings: Settings, admin: AdminClient) -> Replay:
    target, only = _target(args), parse_partitions(args.partitions)
    if args.generation is not None and not (args.rebuild or args.new_generation):
        raise PlanError("--generation goes with --rebuild or --new-generation")
    group, topic = settings.app_id, settings.input_topic
    state = _wait_for_empty(admin, settings, args.wait if target else 0.0, quiet=False)
    if target is None:
        current = read_control(settings)
        bump = plan_generation(current, settings.generation, args.generation)
        return Replay(state, None, generation=bump, current=current)
    offsets = snapshot(admin, group, topic)
    times = None
    if isinstance(target, AtTime):
        chosen = sorted(only) if only else [p.partition for p in offsets]
        times = offsets_for_time(settings, topic, chosen, target.ms)
    plan = plan_reset(offsets, target, group=group, topic=topic, only=only, times=times)
    if args.rebuild:
        selected = [p.partition for p in plan.partitions]
        rebuild = plan_rebuild(
            read_control(settings),
            plan,
            changelog_state(settings, admin, selected),
            settings.generation,
            args.generation,
        )
        return Replay(state, plan, rebuild=rebuild)
    if args.new_generation:
        current = read_control(settings)
        bump = plan_generation(current, settings.generation, args.generation)
        return Replay(state, plan, generation=bump, current=current)
    return Replay(state, plan)


class Aborted(RuntimeError):
    """A member joined the group after the plan: stopped before a write."""


def run_replay(args: argparse.Namespace) -> int:
    refusal = unconfirmed(args)
    if refusal is not None:
        print(f"stream replay: {refusal}", file=sys.stderr)
        return 2
    settings = settings_or_exit()
    out = stdout_console()
    if no_kafka("replay", settings, (settings.input_topic,)):
        return 1
    admin = admin_client(settings)
    try:
        replay = _plan(args, settings, admin)
    except (PlanError, ControlError) as error:
        print(f"stream replay: {error}", file=sys.stderr)
        return 2
    except BROKER_ERRORS as error:
        broker_failed("replay", settings, error)
        return 1
    plan, rebuild = replay.plan, replay.rebuild
    if plan is not None:
        out.print(plan_table(plan))
    for line in rebuild_lines(settings, rebuild) if rebuild else []:
        out.print(line, highlight=False)
    if rebuild and plan and not isinstance(plan.target, Earliest | Latest):
        out.print(
            "warning: a rebuild from a mid-point faults every session that began before it"
            " (gap); rebuild --to-earliest, or --to-latest and `stream produce` the logs",
            highlight=False,
        )
    if replay.current is not None:
        bump, was = replay.generation, replay.current.generation
        out.print(
            f"generation: {control_topic(settings)} already at {was}"
            if bump is None
            else f"generation: {control_topic(settings)} generation {was} -> {bump.generation}"
            " (workers publish with it from their next start)",
            highlight=False,
        )
    # A generation bump alone may go ahead with workers running: they take it at restart.
    if replay.state.members and plan is not None:
        print(f"stream replay: refusing: {GroupBusy(replay.state)}", file=sys.stderr)
        return 1
    if not replay.writes:
        out.print("nothing to change: already in place", highlight=False)
        return 0
    if args.dry_run:
        out.print(
            "dry run: nothing changed"
            + (
                f" ({len(replay.moving)} partition(s) would move, {plan.rereads:,} records re-read)"
                if plan
                else ""
            ),
            highlight=False,
        )
        return 0
    try:
        _apply(settings, admin, replay)
    except Aborted as error:
        print(f"stream replay: aborted: {error}", file=sys.stderr)
        return 1
    except BROKER_ERRORS as error:
        print(f"stream replay: failed, run it again to finish: {error}", file=sys.stderr)
        return 1
    if plan is not None:
        out.print(
            f"moved {len(replay.moving)} partition(s) of group {plan.group}; the workers read"
            f" {plan.backlog:,} records from there ({plan.rereads:,} again)",
            highlight=False,
        )
    if rebuild and rebuild.next:
        out.print(
            f"rebuild: generation {rebuild.next.generation}, epoch {rebuild.next.epoch} written;"
            f" changelog truncated ({rebuild.dropped:,} offsets)",
            highlight=False,
        )
    if replay.generation:
        out.print(f"generation {replay.generation.generation} written", highlight=False)
    return 0


def _still_empty(settings: Settings, admin: AdminClient, before: str, done: str) -> None:
    """The group once more, right before a write: a worker may have started since the plan
    (or during ``--wait``). Raises ``Aborted`` naming the members, what was already done
    and how to finish."""
    try:
        ensure_no_members(admin, settings.app_id, settings.input_topic)
    except GroupBusy as busy:
        raise Aborted(
            f"a member joined group {busy.group.group} after the plan; stopped {before}"
            f" ({done}): {'; '.join(map(str, busy.group.members))}."
            " Stop the workers and run the same command again"
        ) from None


def _apply(settings: Settings, admin: AdminClient, replay: Replay) -> None:
    """Offsets first: the broker refuses them if a worker joined since we looked, before
    anything is discarded. Then the control record, then the changelog: were it truncated
    first and the record lost, a rerun would see an empty changelog and skip the epoch.

    The group is looked at again just before the offsets are committed and just before the
    changelog is truncated, so a worker that started meanwhile stops the run with a clear
    message (the broker's own refusal covers only the commit)."""
    rebuild = replay.rebuild if replay.rebuild and replay.rebuild.next else None
    steps = 2 + (len(rebuild.changelog) if rebuild else 0)
    with progress("replay", total=steps, unit="steps", transient=True) as bar:
        if replay.plan is not None:  # a generation bump alone may go ahead with workers
            _still_empty(settings, admin, "before moving the offsets", "nothing changed")
            apply_reset(admin, replay.plan)
        bar.advance()
        record = rebuild.next if rebuild else replay.generation
        if record is not None:
            write_control(settings, record)
        bar.advance()
        if rebuild and any(p.records for p in rebuild.changelog):
            _still_empty(
                settings,
                admin,
                "before truncating the changelog",
                "the offsets were moved and the control record written; a rerun finishes"
                " the rebuild one generation further",
            )
        if rebuild:
            truncate_changelog(settings, admin, rebuild.changelog, on_done=lambda _: bar.advance())
