"""The worker's side of the control topic while it runs: which reset generations are
claimed (the ceiling a reset may name), and records refused since start-up (said loudly).

``ops.control`` reads and judges the topic; start-up (``stream.app.run``) takes the record
in force before Faust runs; this part follows it afterwards.
"""

import asyncio
import logging
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from stream.config import Settings
from stream.ops import control
from stream.session.batch import Message
from stream.session.input import reset_generation
from stream.session.limits import Limits

log = logging.getLogger("stream.worker")

Read = Callable[[Settings, float], control.ControlRead]


class Claims:
    """The limits batches are folded under, their reset ceiling kept up with the control
    topic, and the control topic's problems reported (``stats.control_problem``)."""

    def __init__(
        self, settings: Settings, stats: Any, read: Read = control.read_control_log
    ) -> None:
        self.settings = settings
        self.stats = stats
        self.read = read
        self.limits: Limits = settings.limits

    async def admit(self, messages: list[Message]) -> None:
        """Before a batch naming a reset generation above the highest claimed one this
        worker knows: read the control topic to its end again. ``stream produce --reset``
        writes its claim before its first reset record, so a claim that exists is seen;
        a generation still above it was never claimed and the fold dead-letters it. A
        producer that keeps naming unclaimed generations costs one control read per batch
        that holds one (tens of milliseconds), never a session."""
        if not self.limits.resets:
            return
        wanted = max((reset_generation(m.headers) for m in messages if m.headers), default=0)
        if wanted <= self.limits.reset_ceiling:
            return
        try:
            found = await asyncio.to_thread(self.read, self.settings, 10.0)
        except Exception as error:  # the broker is away: judged on what was read before
            log.error("control topic not read for a reset: %s", error)
            return
        ceiling = found.control.worker_generation(self.settings.generation)
        if ceiling > self.limits.reset_ceiling:
            log.info("resets up to generation %d claimed on the control topic", ceiling)
            self.limits = replace(self.limits, reset_ceiling=ceiling)

    async def watch(self) -> None:
        """Re-read the control topic: a record refused later is said loudly too."""
        settings = self.settings
        try:
            found = await asyncio.to_thread(self.read, settings, 10.0)
        except Exception as error:  # the broker is away: the consumer says so already
            log.debug("control topic not read: %s", error)
            return
        problems = list(found.problems)
        floor = control.local_generation(Path(settings.state_dir))
        if found.control.generation < floor:
            problems.append(f"generation {found.control.generation} is below {floor}, kept")
        problem = "; ".join(problems)[:500]
        if problem and problem != self.stats.control_problem:
            log.error("%s: %s", control.control_topic(settings), problem)
        self.stats.control_problem = problem


__all__ = ["Claims"]
