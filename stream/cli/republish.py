"""``stream republish``: re-seed Redis from the compacted output topic, on demand."""

import argparse
import sys
from typing import Any

from stream.cli.progress import progress
from stream.cli.reach import (
    KAFKA_ENV,
    REDIS_ENV,
    WRITER,
    connect_redis,
    environment,
    no_kafka,
    redis_refused,
)
from stream.config import Settings


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "republish",
        help="re-seed Redis from the output topic (a new Redis, a new prefix, an evicted cache)",
        description="Read every session's latest update from the compacted output topic and"
        " write it to Redis through the guarded script: nothing older overwrites anything"
        " newer, so it is safe while workers run. Exits 1 within seconds when Kafka or Redis"
        " cannot be reached.",
        epilog=environment(KAFKA_ENV, REDIS_ENV, "STREAM_OUTPUT_TOPIC", f"it runs as {WRITER}"),
    )
    parser.add_argument("--session", metavar="ID", help="only this session")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import redis

    from stream.ops.republish import republish

    settings = Settings.from_env()
    if no_kafka("republish", settings):
        return 1
    reached = connect_redis("republish", settings)
    if reached is None:
        return 1
    reached.close()
    with (
        progress("reading the output topic", unit="records") as reading,
        progress("writing Redis", unit="sessions") as writing,
    ):
        try:
            report = republish(settings, args.session, reading.advance, writing.advance)
        except RuntimeError as error:
            print(f"stream republish: {error}", file=sys.stderr)
            return 1
        except redis.RedisError as error:  # a permission the user lacks: one line, no trace
            redis_refused("republish", settings, error, WRITER)
            return 1
    print(
        f"republished {report.sessions:,} sessions from {report.records:,} records in"
        f" {report.seconds:.2f} s: {report.written:,} written, {report.unchanged:,} already"
        f" current, {report.older:,} older than Redis, {report.skipped:,} records skipped",
        file=sys.stderr,
    )
    if args.session and not report.sessions:
        print(f"stream republish: no update for session {args.session!r}", file=sys.stderr)
        return 1
    return 0
