"""``stream worker`` and ``stream produce``: the service and its feeder."""

import argparse
import sys
from typing import Any

from stream.config import ConfigError, Settings


def register(commands: Any) -> None:
    worker = commands.add_parser(
        "worker",
        help="run the Faust worker (configured from the environment, see README)",
    )
    worker.add_argument("--loglevel", default="info", help="debug, info, warning, error")
    worker.set_defaults(run=run_worker)

    produce = commands.add_parser(
        "produce",
        help="publish dsh session logs to the input topic, keyed by session id, in order",
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
    produce.set_defaults(run=run_produce)


def _settings() -> Settings:
    try:
        return Settings.from_env()
    except ConfigError as error:
        print(f"stream: configuration error: {error}", file=sys.stderr)
        raise SystemExit(2) from None


def run_worker(args: argparse.Namespace) -> int:
    import faust
    from confluent_kafka import KafkaException

    from stream.app.service import build_app
    from stream.ops.admin import ensure_topics

    settings = _settings()
    try:
        partitions = ensure_topics(settings)
    except (KafkaException, RuntimeError) as error:
        print(
            f"stream worker: cannot prepare topics on {settings.bootstrap_servers}: {error}",
            file=sys.stderr,
        )
        return 1
    app = build_app(settings, partitions)
    worker = faust.Worker(app, loglevel=args.loglevel.upper(), quiet=True)
    worker.execute_from_commandline()
    return 0


def run_produce(args: argparse.Namespace) -> int:
    from stream.ops.produce import produce

    if args.segment < 1:
        print("stream produce: --segment must be at least 1", file=sys.stderr)
        return 2
    settings = _settings()
    report = produce(settings, args.paths, args.segment, args.rate, args.topic)
    rate = report.events / report.seconds if report.seconds else 0.0
    print(
        f"produced {report.events} events in {report.messages} messages"
        f" in {report.seconds:.2f} s ({rate:,.0f} events/s), {report.failed} failed",
        file=sys.stderr,
    )
    return 1 if report.failed else 0
