"""``stream measure``: the positional X-ray of one session's surface."""

import argparse
import sys
from typing import Any

from stream.contract.errors import BadLine, ContractError, safe_text
from stream.contract.jsontext import dumps
from stream.contract.storage import ChunkRun
from stream.logs.reader import open_log
from stream.projections.positional import Surface
from stream.session.offline import events


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "measure",
        help="print each surface node and the totals (the positional X-ray)",
        description="Fold one session log positionally and print every surface node"
        " (seq, type, price, system) and the totals, at the end or just after event N."
        " Offline: reads no environment and needs no Kafka or Redis.",
    )
    parser.add_argument("path", metavar="PATH")
    parser.add_argument("--seq", type=int, metavar="N", help="stop just after event N")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    surface = Surface()
    at = None
    error = None
    from pathlib import Path

    log = open_log(Path(args.path))
    session = log.session_id
    for _, event in events(log.lines()):
        if isinstance(event, BadLine):
            print(f"stream measure: {log.where(event)}", file=sys.stderr)
            continue
        if isinstance(event, ChunkRun):  # passive deltas: no surface change
            if args.seq is not None and event.seq0 > args.seq:
                break
            last = event.seq0 + event.size - 1
            at = last if args.seq is None else min(last, args.seq)
            continue
        if args.seq is not None and event.seq > args.seq:
            break
        try:
            surface.fold(event)
        except (ContractError, RecursionError, ValueError, TypeError) as failure:
            error = {"seq": event.seq, "error": safe_text(str(failure))}
            break
        at = event.seq
    report: dict[str, Any] = {
        "sessionId": session,
        "seq": at,
        "nodes": [
            {"seq": n.seq, "type": n.type, "price": n.price, "system": n.system}
            for n in surface.nodes
        ],
        "surfaceTokens": surface.total,
        **surface.breakdown(),
    }
    if error is not None:
        report["error"] = error
    if args.json:
        sys.stdout.buffer.write(dumps(report) + b"\n")
    else:
        _print_table(report)
    return 0


def _print_table(report: dict[str, Any]) -> None:
    print(f"session {report['sessionId']}  after seq {report['seq']}")
    print(f"{'seq':>8}  {'price':>7}  sys  type")
    for node in report["nodes"]:
        mark = " * " if node["system"] else "   "
        print(f"{node['seq']:>8}  {node['price']:>7}  {mark}  {node['type']}")
    print(f"{len(report['nodes'])} nodes, surfaceTokens {report['surfaceTokens']}")
    print(
        f"systemTokens {report['systemTokens']}  toolsTokens {report['toolsTokens']}"
        f"  messageTokens {report['messageTokens']}"
    )
    if "error" in report:
        print(f"stopped at seq {report['error']['seq']}: {report['error']['error']}")
