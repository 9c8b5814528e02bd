"""Sessions expire (contract: "Session expiry"): the worker's index of when each session
was last active, and the sweeps that expire those idle past ``STREAM_SESSION_TTL``.

The rule is the core's (``session.partition.past_ttl``); a sweep's outcome is the core's
too (``session.expiry.sweep``). Here: which sessions to look at and when, a step at a
time between batches (under the commit path's lock); the committer takes the result out
of every store (``Committer.sweep``: the rows, Redis, the tombstones). The committer a
sweep steps between batches with is handed to ``run``, not to the constructor: the commit
path is built after expiry (its ``committed`` files each batch here), so the worker's
parts are built in one order, with no part waiting for one that does not exist yet
(``stream.app.worker.assemble``).
"""

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from stream.session import codec
from stream.session.batch import BatchResult
from stream.session.expiry import Deadlines, SweepResult, sweep
from stream.session.limits import Limits
from stream.session.partition import PARTITION_KEY, PartitionRow, expires, past_ttl

log = logging.getLogger("stream.worker")

# A sweep takes at most this many due sessions at a time, and the agent's batches go
# between two such steps (the lock is fair), so a million sessions expiring at once are
# worked off in steps of a few tens of milliseconds (docs/notes/013).
SWEEP_STEP = 256


class Between(Protocol):
    """What a sweep steps between batches with (``stream.app.commit.Committer``)."""

    @property
    def lock(self) -> asyncio.Lock: ...
    async def landed(self) -> None: ...
    async def sweep(self, sweep: SweepResult) -> bool: ...


class Expiry:
    """The expiry index of the partitions this worker holds, and its sweeps."""

    def __init__(
        self,
        limits: Limits,
        table: Any,  # stream.app.table.SessionTable (load)
        publisher: Callable[[], Any],  # stream.publish.publisher.Publisher
        stats: Any,  # stream.ops.metrics.Metrics (the census: which partitions are walked)
    ) -> None:
        self.ttl = limits.session_ttl
        self.folds = limits.folds
        self.table = table
        self.publisher = publisher
        self.stats = stats
        self.deadlines = Deadlines()  # sessions by last activity
        self.stream_time: dict[int, int | None] = {}  # per partition, after the last batch
        self.wanted = asyncio.Event()  # a batch or a walk may have made sessions due

    @property
    def enabled(self) -> bool:
        return expires(self.ttl)

    def file(self, result: BatchResult) -> None:
        """A committed batch's sessions into the index, its stream times noted."""
        if not self.enabled:
            return
        deadlines = self.deadlines
        for change in result.sessions:
            deadlines.set(change.partition, change.key, change.touched)
        for part in result.partitions:
            self.stream_time[part.partition] = part.now
        self.wanted.set()

    def keep(self, assigned: list[int]) -> None:
        """After a rebalance: forget the partitions that moved away."""
        self.deadlines.keep(assigned)
        for partition in [p for p in self.stream_time if p not in assigned]:
            del self.stream_time[partition]

    def clock(self, partition: int) -> PartitionRow:
        """A newly assigned partition's row: its stream time noted for the walk."""
        row = PartitionRow.decode(self.table.load(PARTITION_KEY, partition))
        self.stream_time[partition] = row.now
        return row

    def visit(self, partition: int, key: bytes, row: bytes, clock: PartitionRow) -> None:
        """A stored session met while walking a newly assigned partition."""
        if not self.enabled or key == PARTITION_KEY:
            return
        try:
            touched = clock.touched(codec.decode(row, self.folds))
        except codec.RowError:
            touched = None
        if touched is not None and not self.deadlines.filed(partition, key):
            self.deadlines.set(partition, key, touched)

    def due(self, partition: int) -> bool:
        if self.publisher().state.retrying:
            return False  # Redis is away: a sweep would only queue drops (Committer.sweep)
        first = self.deadlines.next_due(partition)
        return past_ttl(first, self.stream_time.get(partition), self.ttl)

    async def step(self, committer: Between) -> int:
        """Expire up to ``SWEEP_STEP`` due sessions of one walked partition (the first
        with any due); returns how many left (0: those due were alive, filed again),
        -1 when no partition had any due. Holds the committer's lock for this step only."""
        ttl = self.ttl
        async with committer.lock:
            await committer.landed()
            for partition in self.stats.census.walked_partitions():
                if not self.due(partition):
                    continue
                now = self.stream_time[partition]
                assert now is not None
                keys = self.deadlines.due(partition, now - ttl, SWEEP_STEP)
                if not keys:
                    continue
                result = sweep(partition, keys, self.table.load, ttl, self.folds)
                for key, touched in result.alive:
                    self.deadlines.set(partition, key, touched)
                removed = await committer.sweep(result)
                if not removed:
                    # Redis is away: the drops wait in its queue and the rows stay until a
                    # later sweep finds them again (counted once: the cursor moved).
                    for expired in result.expired:
                        self.deadlines.set(partition, expired.key, expired.touched)
                try:
                    self.stats.observe_sweep(result, removed)
                except Exception:
                    log.exception("metrics of a sweep not recorded")
                return len(result.expired) if removed else -1
        return -1

    async def run(self, committer: Between) -> None:
        """Work off due sessions a step at a time, between ``committer``'s batches,
        whenever any are due (the batches say when: only the input moves a partition's
        stream time)."""
        if not self.enabled:
            return
        while True:
            await self.wanted.wait()
            self.wanted.clear()
            idle = 0  # steps in a row that expired nothing
            while any(self.due(p) for p in self.stats.census.walked_partitions()):
                started = time.monotonic()
                gone = await self.step(committer)
                # A step whose candidates were all alive files them again and lets the
                # next partition's due sessions through; stopping there would leave those
                # until the next batch. A few such steps in a row: the next batch says more.
                idle = idle + 1 if gone <= 0 else 0
                if gone < 0 or idle > 8:
                    break
                if gone > 0:
                    log.debug(
                        "expired %d sessions in %.1f ms", gone, 1e3 * (time.monotonic() - started)
                    )
                await asyncio.sleep(0)  # batches and heartbeats between steps


__all__ = ["SWEEP_STEP", "Between", "Expiry"]
