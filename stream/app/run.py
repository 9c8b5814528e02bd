"""Starting a worker: the one sequence from settings to the process' exit status.

``stream worker`` (``stream.cli.service``) calls ``run``; ``faust -A stream.app.entry``
builds through ``prepare``. Both end in ``assemble``, the one way a worker is built.
Nothing outside ``stream.app`` imports Faust.
"""

from typing import Any

import faust
from confluent_kafka import KafkaException

from stream.app.declare import TopicRefused
from stream.app.worker import Worker, assemble
from stream.config import Settings
from stream.ops import control
from stream.ops.admin import await_group_coordinator, ensure_topics

EXIT_SETUP = 1  # topics or local state could not be prepared


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
        # The group's coordinator answers (a fresh cluster's first group request waits
        # for __consumer_offsets): a clean first start logs no ERROR.
        await_group_coordinator(settings)
    except (KafkaException, RuntimeError) as error:
        raise SetupError(str(error)) from error
    # 3. The worker: its parts built in order (``assemble``), wired to Faust.
    return assemble(settings, partitions, problems)


def run(settings: Settings, loglevel: str, logging_config: dict[str, Any] | None = None) -> int:
    """Start a worker on ``settings`` and run it until it stops; its exit status.

    1-3. ``prepare``: topics, local state and generation, the worker (``SetupError``:
         the caller reports it, exit 1);
    4.   Faust's worker runs the app (signals, logging, its services) until a signal
         stops it; the exit status is Faust's. A permanent error (a Redis refusal) ends
         the process from inside with ``worker.EXIT_STOPPED`` instead: the failing batch
         must not be acked, and a graceful stop would wait for it forever. A topic Faust
         needs that is missing and may not be created (``declare.TopicRefused``) stops
         Faust as it starts: ``SetupError`` with its one line.
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
        # mode turns what stopped Faust into SystemExit(1), raised while handling it.
        if isinstance(done.__context__, TopicRefused):
            raise SetupError(str(done.__context__)) from None
    else:
        code = 0
    return code


__all__ = ["EXIT_SETUP", "SetupError", "prepare", "run"]
