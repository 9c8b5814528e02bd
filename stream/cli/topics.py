"""``stream topics``: check the cluster's topics against the service's specs
(``stream.ops.topics``) and, with ``--create``, make the missing ones (an admin's
principal: it needs CREATE). Exit 0 when nothing breaks the service (warnings are
printed), 1 on a difference that does or when Kafka cannot be used."""

import argparse
import sys
from typing import Any

from stream.cli.reach import KAFKA_ENV, environment, no_kafka
from stream.config import Settings

TOPICS_READ = (
    "STREAM_APP_ID, STREAM_INPUT_TOPIC, STREAM_OUTPUT_TOPIC, STREAM_DLQ_TOPIC,"
    " STREAM_PARTITIONS, STREAM_REPLICATION_FACTOR, STREAM_SESSION_TTL"
)


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "topics",
        help="check the service's topics (partitions, cleanup policy, retention,"
        " replication); --create makes the missing ones",
        description="Check every topic the service needs (input, output, dead letters, the"
        " control topic, the table's changelog, Faust's leader topic) against its spec and"
        " print what differs: partitions, cleanup.policy, retention, replication. Exits 1 on"
        " a difference that breaks the service. --create first creates what is missing with"
        " the documented settings (run it as an admin principal: it needs CREATE).",
        epilog=environment(KAFKA_ENV, TOPICS_READ),
    )
    parser.add_argument(
        "--create", action="store_true", help="create the missing topics, then check"
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from stream.ops.admin import admin as admin_client
    from stream.ops.probe import kafka_error_line
    from stream.ops.topics import create_missing, differences, specs, survey

    settings = Settings.from_env()
    if no_kafka("topics", settings):
        return 1
    admin = admin_client(settings)
    try:
        wanted = specs(settings)
        found = survey(admin, [spec.name for spec in wanted])
        given = found[settings.input_topic]
        # The changelog follows an existing input's partition count.
        wanted = specs(settings, given.partitions if given else None)
        if args.create:
            missing = [spec for spec in wanted if found[spec.name] is None]
            for name in create_missing(admin, missing):
                print(f"created {name}")
            if missing:
                found = survey(admin, [spec.name for spec in wanted])
    except Exception as error:  # KafkaException, RuntimeError: one line, never a trace
        print(f"stream topics: {kafka_error_line(error, settings)}", file=sys.stderr)
        return 1
    given = found[settings.input_topic]
    breaks = 0
    for spec in wanted:
        have = found[spec.name]
        problems = differences(spec, have, given.partitions if given else None)
        if have is not None:
            config = "".join(
                f", {k}={v}"
                for k, v in sorted(have.config.items())
                if k in spec.config or k in spec.at_least_ms
            )
            print(
                f"{'ok' if not problems else '--'} {spec.name} ({spec.role}):"
                f" {have.partitions} partition(s), replication {have.replication}{config}"
            )
        for problem in problems:
            print(f"   {problem.line()}")
        breaks += sum(problem.breaks for problem in problems)
    if breaks:
        print(
            f"stream topics: {breaks} difference(s) break the service"
            + ("" if args.create else "; `stream topics --create` makes missing topics"),
            file=sys.stderr,
        )
        return 1
    return 0
