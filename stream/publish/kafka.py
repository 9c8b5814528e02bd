"""The Kafka side of the publisher: what the app provides (``Outbox``) and how a batch's
records are sent until the broker confirms every one (``confirmed``), with the one retry
pacing the publisher uses (``Backoff``).

Delivery before ack: a batch's offsets are committed only after ``confirmed`` returns, so a
failed send is re-sent with backoff and the batch held, never committed past.
"""

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from stream.contract.errors import safe_text
from stream.session.results import DeadLetter

log = logging.getLogger("stream.publish")


class Outbox(Protocol):
    """The Kafka side of what the publisher sends, as the app provides it
    (``stream.app.producer.Outbox``): each call returns the delivery future. The rows'
    changelog records are not here: the committer sends those (``stream.app.commit``)."""

    def send_update(
        self, key: bytes, payload: bytes | None, headers: list[tuple[str, bytes]]
    ) -> Awaitable[Any]: ...

    def send_dead_letter(self, letter: DeadLetter) -> Awaitable[Any]: ...

    async def left(self) -> None:
        """Until what was sent so far is on its way to the broker, not just queued."""


class Backoff:
    """Exponential backoff with a cap, reset on success: the one retry pacing we use."""

    def __init__(self, first: float = 0.1, cap: float = 5.0) -> None:
        self.first, self.cap, self.delay = first, cap, first

    async def wait(self) -> None:
        await asyncio.sleep(self.delay)
        self.delay = min(self.delay * 2, self.cap)

    def reset(self) -> None:
        self.delay = self.first


async def confirmed(
    records: Callable[[], list[Awaitable[Any]]],
    what: str,
    sent: list[Awaitable[Any]] | None = None,
) -> None:
    """Send ``records()`` until the broker confirms every one, re-sending all with backoff
    (the caller is held meanwhile, never committed past). Records sent together share
    their delivery (``Outbox``), awaited once. ``sent``: the first sending's deliveries,
    when the caller has sent them already."""
    backoff = Backoff(0.2, 10.0)
    while True:
        futures = records() if sent is None else sent
        sent = None
        deliveries = list(dict.fromkeys(futures))
        outcomes = await asyncio.gather(*deliveries, return_exceptions=True)
        failed = [o for o in outcomes if isinstance(o, BaseException)]
        if not failed:
            return
        log.warning(
            "%d %s not all delivered (%s); re-sending in %.1f s",
            len(futures),
            what,
            safe_text(repr(failed[0]), 300),
            backoff.delay,
        )
        await backoff.wait()
