"""Starting a worker: the one sequence from settings to the process' exit status.

``stream worker`` (``stream.cli.service``) calls ``run``; nothing outside ``stream.app``
imports Faust.
"""

import sys
from typing import Any

import faust
from confluent_kafka import KafkaException

from stream.app.worker import Worker, assemble
from stream.config import Settings
from stream.ops import control
from stream.ops.admin import ensure_topics

EXIT_SETUP = 1  # topics or local state could not be prepared
EXIT_STOPPED = 3  # the worker stopped for a reason it reported (``Metrics.fatal``)


class SetupError(RuntimeError):
    """What keeps a worker from starting (the broker, the control topic, local state)."""


def prepare(settings: Settings) -> Worker:
    """Steps 1-3 of ``run``: everything before Faust runs. Raises ``SetupError``."""
    try:
        # 1. The topics exist: the input's partition count sizes the table.
        partitions = ensure_topics(settings)
        # 2. Local state a rebuild discarded is dropped, and the control record's
        #    generation (the highest claimed) is the one the worker publishes with.
        settings, problems = control.worker_settings(settings)
    except (KafkaException, RuntimeError) as error:
        raise SetupError(str(error)) from error
    # 3. The worker: its parts built in order (``assemble``), wired to Faust.
    return assemble(settings, partitions, problems)


def run(settings: Settings, loglevel: str, logging_config: dict[str, Any] | None = None) -> int:
    """Start a worker on ``settings`` and run it until it stops; its exit status.

    1-3. ``prepare``: topics, local state and generation, the worker (``SetupError``:
         the caller reports it, exit 1);
    4.   Faust's worker runs the app (signals, logging, its services) until a signal or a
         fatal error stops it;
    5.   the exit status: ``EXIT_STOPPED`` when the worker stopped for a reason it
         reported (a permanent Redis error, …), otherwise Faust's.
    """
    worker = prepare(settings)
    options: dict[str, Any] = {}
    if logging_config is not None:
        options["logging_config"] = logging_config
    runner = faust.Worker(worker.app, loglevel=loglevel.upper(), quiet=True, **options)
    try:
        runner.execute_from_commandline()
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else 1
    else:
        code = 0
    if worker.stats.fatal:
        print(f"stream worker: stopped: {worker.stats.fatal}", file=sys.stderr)
        return EXIT_STOPPED
    return code


__all__ = ["EXIT_SETUP", "EXIT_STOPPED", "SetupError", "prepare", "run"]
