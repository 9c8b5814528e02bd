"""The worker's side of the control topic while it runs: which generations are claimed for
resets (a reset naming any other is dead-lettered), and records refused since start-up
(said loudly).

``ops.control`` reads and judges the topic; start-up (``stream.app.run``) takes the record
in force before Faust runs; this part follows it afterwards, from where the worker's state
directory stands (``control.worker_control_log``).
"""

import asyncio
import logging
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from stream.config import Settings
from stream.ops import control
from stream.ops.topics import control_topic
from stream.session.batch import Message
from stream.session.input import claimed_for_resets, reset_generation
from stream.session.limits import Limits

log = logging.getLogger("stream.worker")

Read = Callable[[Settings, float], control.ControlRead]


class Claims:
    """The limits batches are folded under, their claims for resets kept up with the control
    topic, and the control topic's problems reported (``stats.control_problem``)."""

    def __init__(
        self, settings: Settings, stats: Any, read: Read = control.worker_control_log
    ) -> None:
        self.settings = settings
        self.stats = stats
        self.read = read
        self.limits: Limits = settings.limits

    async def admit(self, messages: list[Message]) -> None:
        """Before a batch naming a reset generation this worker does not know as claimed:
        read the control topic to its end again. ``stream produce --reset`` writes its
        claim before its first reset record, so a claim that exists is seen; a generation
        still unclaimed is dead-lettered by the fold. A producer that keeps naming
        unclaimed generations costs one control read per batch that holds one (tens of
        milliseconds), never a session."""
        claimed = self.limits.reset_generations
        if not self.limits.resets or claimed is None:
            return
        wanted = {reset_generation(m.headers) for m in messages if m.headers} - {0}
        if all(claimed_for_resets(generation, claimed) for generation in wanted):
            return
        await self._reread("control topic not read for a reset: %s", logging.ERROR)

    async def watch(self) -> None:
        """Re-read the control topic: new claims are taken, a record refused later is said
        loudly too."""
        await self._reread("control topic not read: %s", logging.DEBUG)

    async def _reread(self, failed: str, level: int) -> None:
        try:
            found = await asyncio.to_thread(self.read, self.settings, 10.0)
        except control.ControlTopicError as error:  # recreated as it must not be, meanwhile
            self._report([str(error)])
            return
        except Exception as error:  # the broker is away: judged on what was read before
            log.log(level, failed, error)
            return
        claims = found.control.resets
        if self.limits.reset_generations is not None and claims != self.limits.reset_generations:
            shown = control.describe_claims(claims)
            log.info("generations claimed for resets on the control topic: %s", shown)
            self.limits = replace(self.limits, reset_generations=claims)
        problems = list(found.problems)
        floor = control.local_generation(Path(self.settings.state_dir))
        if found.control.generation < floor:
            problems.append(f"generation {found.control.generation} is below {floor}, kept")
        self._report(problems)

    def _report(self, problems: list[str]) -> None:
        problem = "; ".join(problems)[:500]
        if problem and problem != self.stats.control_problem:
            log.error("%s: %s", control_topic(self.settings), problem)
        self.stats.control_problem = problem


__all__ = ["Claims"]
