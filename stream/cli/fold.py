"""``stream fold``: fold session logs offline and print the updates as JSON lines."""

import argparse
import sys
from typing import Any

from stream.contract.jsontext import dumps
from stream.logs.reader import BadLine
from stream.logs.replay import fold
from stream.session.processor import SessionRecord, update


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "fold",
        help="fold dsh session logs and print JSON lines",
        description="Fold dsh session logs (.jsonl or .jsonl.zstd; a directory means every"
        " log in it). Prints one line per session after its last event, or with"
        " --every-event one line per event in input order. Faults are data: exit 0.",
    )
    parser.add_argument("paths", nargs="+", metavar="PATH")
    parser.add_argument("--every-event", action="store_true", help="one line per event")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    out = sys.stdout.buffer
    records: dict[str, SessionRecord] = {}
    last_seq: dict[str, int] = {}
    for item in fold(args.paths, records):
        if isinstance(item, BadLine):
            print(f"stream fold: {item}", file=sys.stderr)
            continue
        session_id, seqs = item
        if args.every_event:
            line = update(session_id, 0, records[session_id])
            for seq in seqs:
                line["seq"] = seq
                out.write(dumps(line) + b"\n")
        else:
            last_seq[session_id] = seqs[-1]
    for session_id, seq in last_seq.items():
        out.write(dumps(update(session_id, seq, records[session_id])) + b"\n")
    out.flush()
    return 0
