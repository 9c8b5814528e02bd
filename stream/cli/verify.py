"""``stream verify``: the breakdown checked against the positional fold, as a tool.

Folds every log twice — through the O(1) projections and through the positional X-ray —
and reports where ``contextBreakdown`` agrees with the breakdown the full surface
implies, what kinds of replacement the logs hold, and the bytes each approach retains.
"""

import argparse
import sys
from dataclasses import dataclass, field
from typing import Any

import orjson

from stream.cli.progress import progress
from stream.cli.reach import LIMITS_ENV, environment
from stream.config import Settings
from stream.contract.errors import BadLine, ContractError
from stream.contract.events import METERING_TYPES, Event, Replace
from stream.contract.jsontext import dumps
from stream.contract.storage import ChunkRun
from stream.logs.reader import log_files, read_logs
from stream.projections.base import Projection
from stream.projections.breakdown import CONTEXT_BREAKDOWN
from stream.projections.positional import Surface
from stream.session import codec
from stream.session.offline import events
from stream.session.processor import PROJECTIONS, SessionRecord, process, process_run

_BREAKDOWN = CONTEXT_BREAKDOWN.key


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "verify",
        help="check the O(1) breakdown against the positional fold, event by event",
        description="Fold every log twice, through the O(1) projections and through the"
        " positional X-ray, and report where contextBreakdown agrees with the breakdown the"
        " full surface implies, the kinds of replacement the logs hold, faults, and the"
        " bytes each approach retains. Offline: needs no Kafka or Redis.",
        epilog=environment(LIMITS_ENV),
    )
    parser.add_argument("paths", nargs="+", metavar="PATH")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.set_defaults(run=run)


@dataclass
class Report:
    sessions: int = 0
    events: int = 0
    unreadable: int = 0
    compared: int = 0
    agreed: int = 0
    metered_replacements: int = 0
    system_prompt_rewrites: int = 0
    other_replacements: int = 0
    projection_faults: int = 0
    positional_errors: int = 0
    projection_state_bytes: int = 0
    per_node_checkpoint_bytes: int = 0
    max_retained_prompts: int = 0
    first_disagreements: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class _Session:
    record: SessionRecord = field(default_factory=SessionRecord.new)
    surface: Surface = field(default_factory=Surface)
    surface_failed: bool = False
    previous: Event | None = None


def _classify(report: Report, event: Event, previous: Event | None) -> None:
    op = event.op
    if not isinstance(op, Replace):
        return
    if event.type == "system/message":
        report.system_prompt_rewrites += 1
        return
    if previous is not None and previous.type in METERING_TYPES:
        shadowed = previous.data.get("shadowedRange")
        if type(shadowed) is dict and (shadowed.get("start"), shadowed.get("end")) == (
            op.start,
            op.end,
        ):
            report.metered_replacements += 1
            return
    report.other_replacements += 1


def _check(
    report: Report,
    sessions: dict[str, "_Session"],
    session_id: str,
    event: Any,
    folds: tuple[Projection, ...] = PROJECTIONS,
) -> None:
    """One event through both folds, compared."""
    if isinstance(event, BadLine):
        report.unreadable += 1
        return
    state = sessions.get(session_id)
    if state is None:
        state = sessions[session_id] = _Session(SessionRecord.new(folds))
    if isinstance(event, ChunkRun):  # passive deltas: views cannot move within the run
        count = event.size
        state.previous = None
        process_run(state.record, event.seq0, count)
    else:
        count = 1
        _classify(report, event, state.previous)
        state.previous = event
        process(state.record, event)
    report.events += count
    if not isinstance(event, ChunkRun) and not state.surface_failed:
        try:
            state.surface.fold(event)
        except (ContractError, RecursionError, ValueError, TypeError):
            state.surface_failed = True
            report.positional_errors += 1
    slot = state.record.slots[_BREAKDOWN]
    if slot.fault is None and not state.surface_failed:
        report.compared += count
        ours = CONTEXT_BREAKDOWN.view(slot.state)
        positional = state.surface.breakdown()
        if ours == positional:
            report.agreed += count
        elif len(report.first_disagreements) < 10:
            seq = event.seq0 if isinstance(event, ChunkRun) else event.seq
            report.first_disagreements.append(
                {
                    "sessionId": session_id,
                    "seq": seq,
                    "projection": ours,
                    "positional": positional,
                }
            )


def run(args: argparse.Namespace) -> int:
    report = Report()
    total_files = len(log_files(args.paths))
    sessions: dict[str, _Session] = {}
    folds = Settings.from_env().limits.folds  # the worker's limits, as `stream fold`
    with progress("verifying", total=total_files, unit="logs") as bar:
        for log in read_logs(args.paths):
            for _, event in events(log.lines()):
                _check(report, sessions, log.session_id, event, folds)
            bar.advance(1)
    for state in sessions.values():
        report.sessions += 1
        report.projection_faults += sum(s.fault is not None for s in state.record)
        report.projection_state_bytes += len(codec.encode(state.record))
        report.per_node_checkpoint_bytes += len(orjson.dumps(state.surface.checkpoint()))
        report.max_retained_prompts = max(
            report.max_retained_prompts, len(state.record.slots[_BREAKDOWN].state.prompts)
        )
    if args.json:
        sys.stdout.buffer.write(dumps(report.__dict__) + b"\n")
    else:
        _print(report)
    return 0


def _print(report: Report) -> None:
    print(
        f"sessions {report.sessions}, events {report.events}, unreadable lines {report.unreadable}"
    )
    print(
        f"breakdown agrees with the positional fold after {report.agreed} of"
        f" {report.compared} events compared"
        + ("" if report.agreed == report.compared else "  <-- DISAGREEMENT")
    )
    print(
        f"replacements: metered {report.metered_replacements}, system-prompt rewrites"
        f" {report.system_prompt_rewrites}, other (unmetered) {report.other_replacements}"
    )
    print(f"faults: projections {report.projection_faults}, positional {report.positional_errors}")
    print(
        f"retained state: projection rows {report.projection_state_bytes} B vs per-node"
        f" checkpoint {report.per_node_checkpoint_bytes} B; at most"
        f" {report.max_retained_prompts} retained system prompts in one session"
    )
    for item in report.first_disagreements:
        print(
            f"  {item['sessionId']} seq {item['seq']}: {item['projection']} != {item['positional']}"
        )
