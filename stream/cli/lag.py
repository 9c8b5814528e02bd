"""``stream lag``: the worker group's committed and end offsets, lag per input partition
and members; with ``--watch``, the read rate, the records remaining, an ETA and stalled
partitions. It only reads, so it may run beside the workers at any time.

The few helpers ``stream replay`` shares with it (the settings, the broker errors, a
broker that does not answer) are here, the command that only looks.
"""

import argparse
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from stream.cli.progress import Rate, duration, eta, interactive, progress, stdout_console
from stream.cli.reach import KAFKA_ENV, TOPICS_ENV, environment, no_kafka
from stream.config import ConfigError, Settings
from stream.ops.admin import admin as admin_client
from stream.ops.control import read_control
from stream.ops.lag import LagReport, Stalls, behind, caught_up_status, read_lag
from stream.ops.offsets import GroupState, PlanError
from stream.ops.probe import kafka_error_line

BROKER_ERRORS = (KafkaException, RuntimeError, TimeoutError, ValueError)


def register(commands: Any) -> None:
    lag = commands.add_parser(
        "lag",
        help="the worker group's committed and end offsets, lag per input partition, members",
        description="Show the worker group's committed and end offsets and lag per input"
        " partition, and the group's members; with --watch, refresh with the read rate,"
        " the records remaining and an ETA, and flag stalled partitions. Offsets and lag"
        " are records (a --segment N message holds up to N events). Exits 1 within seconds"
        " when Kafka cannot be reached.",
        epilog=environment(KAFKA_ENV, TOPICS_ENV),
    )
    lag.add_argument(
        "--watch", action="store_true", help="refresh: read rate, remaining records, ETA"
    )
    lag.add_argument(
        "--interval",
        type=float,
        default=2.0,
        metavar="SECONDS",
        help="with --watch: seconds between refreshes (default 2)",
    )
    lag.add_argument(
        "--until-caught-up",
        action="store_true",
        help="watch until the lag is 0 (exit 0); with --seconds, exit 1 if it is not by then",
    )
    lag.add_argument(
        "--seconds",
        type=float,
        help="with --watch: stop after this long (with --until-caught-up: the time limit)",
    )
    lag.add_argument(
        "--stall-after",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="with --watch: flag a partition 'stalled' when records wait and its committed"
        " offset has not moved for this long (default 60)",
    )
    lag.add_argument("--json", action="store_true", help="JSON (one object per refresh)")
    lag.set_defaults(run=run_lag)


def settings_or_exit() -> Settings:
    try:
        return Settings.from_env()
    except ConfigError as error:
        print(f"stream: configuration error: {error}", file=sys.stderr)
        raise SystemExit(2) from None


def number(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def broker_failed(command: str, settings: Settings, error: BaseException) -> None:
    """A request that failed after the probe passed: an authorization refusal names the
    principal and the resource, anything else is said as librdkafka says it."""
    print(f"stream {command}: {kafka_error_line(error, settings)}", file=sys.stderr)


def lag_table(report: LagReport, stalled: Mapping[int, float] | None = None) -> Table:
    """The lag per partition from the group's committed offsets; with ``stalled`` (watch
    mode) a ``progress`` column flags the partitions whose commits do not move."""
    owner = {p: m for m in report.state.members for p in m.partitions}
    table = Table(
        title=f"group {report.group} ({report.state.state.lower()}) on {report.topic}",
        title_justify="left",
        show_footer=True,
    )
    table.add_column("partition", "total", justify="right")
    table.add_column("committed", justify="right")
    table.add_column("end", f"{report.end:,}", justify="right")
    table.add_column("lag", f"{report.lag:,}", justify="right")
    table.add_column("member")
    if stalled is not None:
        table.add_column("progress", f"{len(stalled)} stalled" if stalled else "")
    for p in report.partitions:
        member = owner.get(p.partition)
        cells: list[RenderableType] = [
            str(p.partition),
            number(p.committed),
            number(p.high),
            number(p.lag),
            # Text: a client id or host is never read as rich markup.
            Text(f"{member.client_id}@{member.host.lstrip('/')}" if member else ""),
        ]
        if stalled is not None:
            seconds = stalled.get(p.partition)
            cells.append(
                Text("") if seconds is None else Text(f"stalled {duration(seconds)}", style="red")
            )
        table.add_row(*cells)
    return table


def members_table(state: GroupState) -> Table | str:
    if not state.members:
        return f"no live members (group {state.state.lower()})"
    table = Table(title="members", title_justify="left")
    for name in ("client id", "host", "input partitions", "member id"):
        table.add_column(name)
    for m in state.members:
        table.add_row(
            *map(Text, (m.client_id, m.host.lstrip("/"), ",".join(map(str, m.partitions)))),
            Text(m.member_id),
        )
    return table


def run_lag(args: argparse.Namespace) -> int:
    if args.interval <= 0 or args.stall_after <= 0:
        print("stream lag: --interval and --stall-after must be > 0", file=sys.stderr)
        return 2
    settings = settings_or_exit()
    if no_kafka("lag", settings, (settings.input_topic,)):
        return 1
    admin = admin_client(settings)
    try:
        if args.watch or args.until_caught_up:
            return _watch(args, settings, admin)
        report = read_lag(settings, admin)
        control = read_control(settings)
    except PlanError as error:
        print(f"stream lag: {error}", file=sys.stderr)
        return 2
    except BROKER_ERRORS as error:
        broker_failed("lag", settings, error)
        return 1
    generation = control.worker_generation(settings.generation)
    if args.json:
        extra = {"generation": generation, "epoch": control.epoch}
        print(orjson.dumps(report.as_json() | extra).decode())
        return 0
    out = stdout_console()
    out.print(lag_table(report))
    out.print(members_table(report.state))
    out.print(
        f"generation {generation}, state epoch {control.epoch}"
        + (
            f" (last written {control.written_at} by {control.written_by})"
            if control.written_at
            else ""
        ),
        highlight=False,
    )
    return 0


class CatchUp:
    """Read rate, arrival rate, ETA and stalled partitions from successive lag reports."""

    def __init__(self, first: LagReport, window: float, stall_after: float = 60.0) -> None:
        self.first = first
        self.reads, self.arrivals = Rate(window), Rate(window)
        self.stalls = Stalls(stall_after)
        self.peak = 0.0
        self.observe(first)

    def observe(self, report: LagReport) -> None:
        self.last = report
        self.reads.add(report.taken_at, report.position)
        self.arrivals.add(report.taken_at, report.end)
        self.stalls.observe(report)
        self.peak = max(self.peak, self.reads.per_second or 0.0)

    @property
    def stalled(self) -> dict[int, float]:
        return self.stalls.stalled()

    @property
    def read(self) -> int:
        return self.last.position - self.first.position

    @property
    def eta(self) -> float | None:
        """At the net rate: records read minus records arriving."""
        reads, arrivals = self.reads.per_second, self.arrivals.per_second
        net = None if reads is None else reads - (arrivals or 0.0)
        return eta(self.last.lag, net)

    def line(self) -> str:
        rate, stalled = self.reads.per_second, self.stalled
        return (
            f"lag {self.last.lag:,}  read {self.read:,}"
            f"  at {0 if rate is None else rate:,.0f} records/s"
            f" (arriving {self.arrivals.per_second or 0:,.0f}/s)"
            f"  ETA {duration(self.eta)}  members {len(self.last.state.members)}"
            + (f"  stalled {','.join(map(str, sorted(stalled)))}" if stalled else "")
        )

    def as_json(self) -> dict[str, Any]:
        return self.last.as_json() | {
            "read": self.read,
            "rate": self.reads.per_second,
            "arrivalRate": self.arrivals.per_second,
            "etaSeconds": self.eta,
            "stalled": [
                {"partition": p, "seconds": round(s, 1)} for p, s in sorted(self.stalled.items())
            ],
        }


@dataclass(frozen=True)
class Ticks:
    """The watch's clock (for ``--seconds``) and its pause between readings."""

    now: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep


# What ``_watch`` runs on; a test puts a fake clock here, whose sleep passes no real time.
TICKS = Ticks()


def _watch(args: argparse.Namespace, settings: Settings, admin: AdminClient) -> int:
    ticks = TICKS
    started = ticks.now()
    catch_up = CatchUp(
        read_lag(settings, admin), window=max(10.0, 5 * args.interval), stall_after=args.stall_after
    )

    def finished() -> bool:
        if args.until_caught_up and catch_up.last.lag == 0:
            return True
        return args.seconds is not None and ticks.now() - started >= args.seconds

    def tick() -> None:
        ticks.sleep(args.interval)
        catch_up.observe(read_lag(settings, admin))

    err = Console(stderr=True)
    if interactive(err) and not args.json:

        def board() -> RenderableType:
            return Group(lag_table(catch_up.last, catch_up.stalled), Text(catch_up.line()))

        total = catch_up.first.lag
        with progress("catching up", total=total, unit="records", above=board) as bar:
            while not finished():
                tick()
                bar.update(completed=catch_up.read, total=catch_up.read + catch_up.last.lag)
    else:
        while True:
            if args.json:
                print(orjson.dumps(catch_up.as_json()).decode(), flush=True)
            else:
                print(f"{time.strftime('%H:%M:%S')} {catch_up.line()}", flush=True)
            if finished():
                break
            tick()
    elapsed = catch_up.last.taken_at - catch_up.first.taken_at
    average = catch_up.read / elapsed if elapsed > 0 else 0.0
    summary = (
        f"read {catch_up.read:,} records in {elapsed:.1f} s"
        f" (average {average:,.0f} records/s, peak {catch_up.peak:,.0f} records/s),"
        f" lag {catch_up.last.lag:,}"
    )
    print(summary, file=sys.stderr if args.json else sys.stdout, flush=True)
    if not args.until_caught_up:
        return 0
    status = caught_up_status(catch_up.last)
    if status:
        print(
            f"stream lag: not caught up after {elapsed:.1f} s: lag {catch_up.last.lag:,}",
            file=sys.stderr,
        )
        for line in behind(catch_up.last, catch_up.stalled):
            print(f"  {line}", file=sys.stderr)
    return status
