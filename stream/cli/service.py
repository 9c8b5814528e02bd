"""``stream worker`` and ``stream produce``: the service and its feeder."""

import argparse
import sys
import textwrap
from typing import Any

from stream.cli.reach import KAFKA_ENV, environment, no_kafka
from stream.cli.settings import epilog
from stream.config import Settings
from stream.runtime import json_logging
from stream.session.input import MAX_GENERATION

EXIT_REDIS_REFUSED = 3  # as the worker's EXIT_STOPPED: Redis said no, a restart will not help


def register(commands: Any) -> None:
    worker = commands.add_parser(
        "worker",
        help="run the Faust worker (configured from the environment, see README)",
        # Raw: the settings' layout stays; the description is wrapped here instead.
        description=textwrap.fill(
            "Run one consumer-group worker: fold the input topic's session events, keep each"
            " session's row in RocksDB (backed by a changelog topic), publish every change to"
            " the output topic and to Redis. Everything but the log level comes from the"
            " environment below; SIGTERM finishes the batch, waits for delivery, commits.",
            width=88,
        ),
        epilog=epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    worker.add_argument("--loglevel", default="info", help="debug, info, warning, error")
    worker.set_defaults(run=run_worker)

    produce = commands.add_parser(
        "produce",
        help="publish dsh session logs to the input topic, keyed by session id, in order",
        description="Publish dsh session logs (.jsonl, .jsonl.zstd, directories) to the input"
        " topic, keyed by session id, in order, with librdkafka's murmur2_random partitioner"
        " (Java clients' placement): for backfills, demos and load. Exits 1 within seconds"
        " when Kafka cannot be reached.",
        epilog=environment(KAFKA_ENV, "STREAM_INPUT_TOPIC, STREAM_APP_ID (its control topic)"),
    )
    produce.add_argument("paths", nargs="+", metavar="PATH")
    produce.add_argument(
        "--segment",
        type=int,
        default=1,
        metavar="N",
        help="pack up to N consecutive events of a session per message",
    )
    produce.add_argument("--rate", type=float, metavar="R", help="at most R events per second")
    produce.add_argument("--topic", help="override STREAM_INPUT_TOPIC")
    produce.add_argument(
        "--reset",
        action="store_true",
        help="start each session over under a new generation (claimed from the control"
        " topic): rebuilds sessions whose beginning fell out of the input topic's retention",
    )
    produce.add_argument(
        "--reset-generation",
        type=int,
        metavar="G",
        help="like --reset, under generation G (above any used before)",
    )
    produce.set_defaults(run=run_produce)


def run_worker(args: argparse.Namespace) -> int:
    from stream.ops.probe import authorization, group_has_run, probe_kafka, probe_redis

    settings = Settings.from_env()
    logging_config = json_logging(args.loglevel.upper()) if settings.log_format == "json" else None
    # Before Faust: a wrong setting is one line naming it and the real reason, within
    # seconds, not a client retrying for ever. Once running, outages are ridden out.
    cause = probe_kafka(settings, (settings.input_topic,)) or probe_redis(settings)
    if cause is not None and cause.silent and group_has_run(settings):
        # Redis silent for a group that has run: an outage (a worker restarted while Redis
        # is down must still take its partitions), not a setting. Said once, ridden out.
        print(
            f"stream worker: {cause.line()}; group {settings.app_id} has run before, so this"
            " is taken for an outage: consuming on, Redis writes queued until it answers",
            file=sys.stderr,
        )
    elif cause is not None:
        print(f"stream worker: {cause.line()}", file=sys.stderr)
        # A Redis refusal is the permanent Redis error of a running worker (status 3).
        return EXIT_REDIS_REFUSED if cause.service == "Redis" and cause.refused else 1
    from stream.app import run  # Faust, only once the probes passed

    try:
        return run.run(settings, args.loglevel, logging_config)
    except run.SetupError as error:
        said = authorization(str(error), settings) or str(error)
        print(f"stream worker: cannot start: {said}", file=sys.stderr)
        return run.EXIT_SETUP


def run_produce(args: argparse.Namespace) -> int:
    from stream.ops.produce import await_producer_id, produce

    if args.segment < 1:
        print("stream produce: --segment must be at least 1", file=sys.stderr)
        return 2
    settings = Settings.from_env()
    if no_kafka("produce", settings, (args.topic or settings.input_topic,)):
        return 1
    if args.reset_generation is not None and not 1 <= args.reset_generation <= MAX_GENERATION:
        print(f"stream produce: --reset-generation must be in 1..{MAX_GENERATION}", file=sys.stderr)
        return 2
    reset = args.reset_generation
    if args.reset and reset is None:
        from stream.ops.control import claim_generation

        reset = claim_generation(settings)
        print(f"stream produce: resetting sessions under generation {reset}", file=sys.stderr)
    from stream.cli.progress import progress

    await_producer_id(settings)
    with progress("producing", unit="events") as bar:
        report = produce(
            settings, args.paths, args.segment, args.rate, args.topic, bar.advance, reset=reset
        )
    for line in report.skipped:
        print(f"stream produce: skipped {line}", file=sys.stderr)
    missing = [error for error in report.errors if "UNKNOWN_TOPIC_OR_PART" in error]
    for error in report.errors:
        if error not in missing:
            print(f"stream produce: delivery failed: {error}", file=sys.stderr)
    if missing:
        print(
            f"stream produce: topic {args.topic or settings.input_topic} does not exist and the"
            " broker does not create topics: create the service's topics with"
            " `stream topics --create` (as an admin principal)",
            file=sys.stderr,
        )
    rate = report.events / report.seconds if report.seconds else 0.0
    print(
        f"produced {report.events} events in {report.messages} messages"
        f" in {report.seconds:.2f} s ({rate:,.0f} events/s), {report.failed} failed",
        file=sys.stderr,
    )
    return 1 if report.failed else 0
