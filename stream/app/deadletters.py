"""Dead letters in the worker's log, bounded whatever the input holds (``DeadLetterLog``).

A line per dead letter let one batch of hostile records write hundreds of thousands of
WARNING lines (issue 51: 300,000 in 17 s). Now the first dead letter is logged at once,
as before; those after it within ``every`` seconds are counted and logged together in
one line when the interval ends: how many records, how many input events they stand for,
the most frequent reasons and one sample with its source. The dead-letter topic keeps
every record; the log only says that they happen and why.
"""

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Final

from stream.session.results import DeadLetter

TRACKED: Final = 16  # distinct reasons counted per interval; the rest as "other"
SHOWN: Final = 3  # reasons a summary line names


def _kind(reason: str) -> str:
    """A reason without what varies per record (the quoted value after the colon)."""
    return reason.split(":", 1)[0][:80]


class DeadLetterLog:
    """The worker's dead-letter lines: at most one per ``every`` seconds, aggregated."""

    def __init__(
        self,
        log: logging.Logger,
        every: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.log, self.every, self.clock = log, every, clock
        self.next_line = float("-inf")  # the first dead letter is logged at once
        self.records = 0
        self.events = 0
        self.kinds: dict[str, int] = {}
        self.other = 0
        self.sample: DeadLetter | None = None
        self.timer: asyncio.TimerHandle | None = None

    def note(self, letter: DeadLetter) -> None:
        """One dead letter sent: logged now, or counted into the next summary."""
        now = self.clock()
        if now >= self.next_line and not self.records:
            self.next_line = now + self.every
            self.log.warning(
                "dead-lettered %s[%d]@%d%s: %s",
                letter.topic,
                letter.partition,
                letter.offset,
                f" ({letter.count:,} input events)" if letter.count > 1 else "",
                letter.reason,
            )
            return
        self.records += 1
        self.events += letter.count
        kind = _kind(letter.reason)
        if kind in self.kinds or len(self.kinds) < TRACKED:
            self.kinds[kind] = self.kinds.get(kind, 0) + 1
        else:
            self.other += 1
        if self.sample is None:
            self.sample = letter
        if now >= self.next_line:
            self.flush()
        elif self.timer is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # no loop (a test): the next note past the interval logs
                return
            self.timer = loop.call_later(self.next_line - now, self.flush)

    def flush(self) -> None:
        """The summary of what was counted since the last line, if anything was."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if not self.records:
            return
        kinds = sorted(self.kinds.items(), key=lambda item: -item[1])
        named = [f"{n:,} × {kind!r}" for kind, n in kinds[:SHOWN]]
        rest = sum(n for _, n in kinds[SHOWN:]) + self.other
        if rest:
            named.append(f"{rest:,} other")
        sample = self.sample
        assert sample is not None  # set with the first record counted
        self.log.warning(
            "dead-lettered %s more records (%s input events) since the last such line: %s;"
            " e.g. %s[%d]@%d: %s",
            f"{self.records:,}",
            f"{self.events:,}",
            ", ".join(named),
            sample.topic,
            sample.partition,
            sample.offset,
            sample.reason,
        )
        self.next_line = self.clock() + self.every
        self.records = self.events = self.other = 0
        self.kinds = {}
        self.sample = None


__all__ = ["DeadLetterLog"]
