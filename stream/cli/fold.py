"""``stream fold``: fold session logs offline and print the updates as JSON lines."""

import argparse
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from stream.cli.reach import LIMITS_ENV, environment
from stream.config import Settings
from stream.contract.jsontext import dumps
from stream.logs.reader import log_files, text_lines, where
from stream.session.offline import fold_text
from stream.session.processor import SessionRecord, Tally, update


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "fold",
        help="fold dsh session logs and print JSON lines",
        description="Fold dsh session logs (.jsonl or .jsonl.zstd; a directory means every"
        " log in it). Prints one line per session after its last event, or with"
        " --every-event one line per event in input order. Faults are data: exit 0."
        " Offline: needs no Kafka or Redis.",
        epilog=environment(LIMITS_ENV),
    )
    parser.add_argument("paths", nargs="+", metavar="PATH")
    parser.add_argument("--every-event", action="store_true", help="one line per event")
    parser.add_argument(
        "--counts", action="store_true", help="print the events by outcome on stderr at the end"
    )
    parser.set_defaults(run=run)


class _Silent:
    def advance(self, amount: int = 1) -> None:
        pass


@contextmanager
def _progress(paths: list[str]) -> Iterator[Any]:
    """The progress bar on a terminal; rich (~50 ms to import) only then."""
    environ = os.environ  # rich decides; without a terminal or these, it would say no
    if not (sys.stderr.isatty() or environ.get("FORCE_COLOR") or environ.get("TTY_COMPATIBLE")):
        yield _Silent()
        return
    from stream.cli.progress import progress

    with progress("folding", total=len(log_files(paths)), unit="logs") as bar:
        yield bar


def run(args: argparse.Namespace) -> int:
    out = sys.stdout.buffer
    folds = Settings.from_env().limits.folds  # the worker's limits: the same outcomes
    records: dict[str, SessionRecord] = {}
    with _progress(args.paths) as bar:
        for path in log_files(args.paths):
            with text_lines(path) as (session_id, lines):
                record = records.get(session_id)
                if record is None:
                    record = records[session_id] = SessionRecord.new(folds)
                for bad in fold_text(record, lines, args.every_event):
                    if bad is None:
                        out.write(dumps(update(session_id, record)) + b"\n")
                    else:
                        print(f"stream fold: {where(path, bad)}", file=sys.stderr)
            bar.advance(1)
    if not args.every_event:
        for session_id, record in records.items():
            if record.seen >= 0:
                out.write(dumps(update(session_id, record)) + b"\n")
    out.flush()
    if args.counts:
        total = Tally()
        for record in records.values():
            total.add(record.tally)
        print(
            f"stream fold: {len(records)} sessions, folded {total.folded}, duplicate"
            f" {total.duplicate}, faulted {total.faulted}",
            file=sys.stderr,
        )
    return 0
