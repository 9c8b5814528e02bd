"""``stream leave``: static members that are not coming back leave the group now.

A worker is a static member of its group (note 027): when it stops without leaving (a
crash, a lost node, or a SIGTERM with ``STREAM_LEAVE_ON_STOP=0``), the group keeps its
partitions for it until the session timeout. This removes such members at once (KIP-345's
admin removal), so their partitions move within seconds.
"""

import argparse
import asyncio
import sys
from typing import Any

from stream.cli.reach import KAFKA_ENV, environment, no_kafka
from stream.config import Settings


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "leave",
        help="remove static members that are gone or not coming back (scale-down, lost node)",
        description="Remove the group's static members named by their instance ids (the pod"
        " names: context-stream-2 ...) at once, instead of after the session timeout, so"
        " their partitions move to the other workers within seconds. For a scale-down with"
        " STREAM_LEAVE_ON_STOP=0, or a worker whose node is gone. A worker still running"
        " under that id rejoins (one more rebalance). Exits 1 when a member could not be"
        " removed (UnknownMemberIdError: not a member, already gone).",
        epilog=environment(KAFKA_ENV, "STREAM_APP_ID (the group)"),
    )
    parser.add_argument("instance_ids", nargs="+", metavar="INSTANCE_ID")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from stream.app.membership import remove

    settings = Settings.from_env()
    if no_kafka("leave", settings):
        return 1
    left = asyncio.run(remove(settings, args.instance_ids))
    for member in left:
        outcome = "left" if member.error is None else f"not removed: {member.error}"
        print(f"{member.instance_id or settings.app_id}: {outcome}", file=sys.stderr)
    return 0 if left and all(m.error is None for m in left) else 1
