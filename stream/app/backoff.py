"""While the broker is away: aiokafka's clients wait between metadata attempts instead of
spinning (``BackoffClient``), and aiokafka's repeated log lines are rate-limited
(``RepeatFilter``). The consumer (``stream.app.fetch``) and the producer
(``stream.app.producer``) both build on these.
"""

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from aiokafka.client import AIOKafkaClient  # type: ignore[import-untyped]

from stream.app.internals import AIOKAFKA_VERSION  # what BackoffClient was written against


class BackoffClient(AIOKafkaClient):  # type: ignore[misc]
    """aiokafka's client, whose failed metadata update takes at least ``retry_backoff_ms``.

    aiokafka 0.14's producer sender (``producer/sender.py`` 155–168) and consumer fetcher
    (``consumer/fetcher.py`` 557–565) both do, whenever a partition's leader is unknown:
    ``await client.force_metadata_update()`` and go round again, with no sleep. The update
    (``_md_synchronizer`` → ``_metadata_update``) fails at once while the broker refuses
    connections, so each loop spins: over a core of CPU and two ERROR lines per turn, for
    as long as the broker is away. Everything else in the client already sleeps
    ``retry_backoff`` between attempts. Holding a *failed* update back until the backoff
    has passed since it started makes ``force_metadata_update()``'s future (shared by
    every caller while it is pending) resolve no sooner, so both loops wait. A successful
    update returns at once, and attempts go on every ``retry_backoff`` (100 ms by
    default): the worker resumes within that of the broker's return.
    """

    async def _metadata_update(self, cluster_metadata: Any, topics: Any) -> bool:
        started = time.monotonic()
        updated: bool = await super()._metadata_update(cluster_metadata, topics)
        if not updated:
            remaining = self._retry_backoff - (time.monotonic() - started)
            if remaining > 0:
                await asyncio.sleep(remaining)
        return updated


def with_backoff(client: Any) -> Any:
    """Make an aiokafka client built by aiokafka itself a ``BackoffClient``, in place.

    The producer and the consumer construct their ``AIOKafkaClient`` inside ``__init__``
    (no hook to pass a class); ``BackoffClient`` adds no state, only the override, so
    switching the instance's class right after construction, before anything started, is
    the same as having built it as one.
    """
    if type(client) is AIOKafkaClient:
        client.__class__ = BackoffClient
    return client


class RepeatFilter(logging.Filter):
    """Rate-limits repeated log records: per (logger, message template), the first record
    passes, then at most one every ``every`` seconds, saying how many were suppressed.

    While the broker is away aiokafka logs the same few errors on every retry of every
    loop ("Unable connect to node with id 1", "Unable to update metadata from [1]", ...):
    the first one says what happened, the rest only bury the log. Keyed by the template
    (``record.msg``), not the formatted text, so the table stays as small as aiokafka's
    set of messages. Records below ``level`` always pass.
    """

    def __init__(
        self,
        every: float = 10.0,
        level: int = logging.WARNING,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self.every = every
        self.level = level
        self.clock = clock
        # (logger, template) -> [when one last passed, how many suppressed since]
        self._seen: dict[tuple[str, str], list[float]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < self.level:
            return True
        key = (record.name, str(record.msg))
        now = self.clock()
        seen = self._seen.get(key)
        if seen is None:
            self._seen[key] = [now, 0]
            return True
        passed, suppressed = seen
        if now - passed < self.every:
            seen[1] = suppressed + 1
            return False
        seen[0], seen[1] = now, 0
        if suppressed:
            # Formatted here, so the note cannot clash with the template's %-placeholders;
            # args (), not None: mode's formatter turns None into (None,) and formats again.
            record.msg = (
                f"{record.getMessage()} ({int(suppressed):,} more like this suppressed"
                f" in the last {now - passed:.0f} s)"
            )
            record.args = ()
        return True


# aiokafka's loggers (0.14): the client logs on "aiokafka" itself, the rest per module. A
# filter on a logger sees only the records logged on it, not its children's.
AIOKAFKA_LOGGERS = (
    "aiokafka",
    "aiokafka.conn",
    "aiokafka.cluster",
    "aiokafka.consumer.consumer",
    "aiokafka.consumer.fetcher",
    "aiokafka.consumer.group_coordinator",
    "aiokafka.producer.producer",
    "aiokafka.producer.sender",
)


def quiet_aiokafka(every: float = 10.0) -> RepeatFilter:
    """Rate-limit aiokafka's repeated warnings and errors (one ``RepeatFilter`` for all of
    its loggers; installed once: a second call returns the first filter)."""
    for name in AIOKAFKA_LOGGERS:
        for existing in logging.getLogger(name).filters:
            if isinstance(existing, RepeatFilter):
                return existing
    repeat = RepeatFilter(every)
    for name in AIOKAFKA_LOGGERS:
        logging.getLogger(name).addFilter(repeat)
    return repeat


__all__ = [
    "AIOKAFKA_LOGGERS",
    "AIOKAFKA_VERSION",
    "BackoffClient",
    "RepeatFilter",
    "quiet_aiokafka",
    "with_backoff",
]
