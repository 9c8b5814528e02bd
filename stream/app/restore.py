"""Restoring the sessions table from its changelog in bulk: one RocksDB write per fetch.

Faust restores a table one record at a time: the drain loop hands each changelog record to
the conductor in its own ``wait_first`` (four tasks), the conductor decodes it into an
event and queues it, and recovery's loop takes the events off the queue one by one (with
its per-record bookkeeping and log formatting) before a store write of 1,000 at a time.
At 8,000 records/s a pod that lost its volume was unready for minutes (docs/notes/021).
Rows are raw bytes: none of that is needed to write them.

``BulkRestore.take`` is given a changelog partition's records of one fetch by the drain
loop (``stream.app.fetch``) and does what Faust's recovery does with them, once per fetch:
the records past the offset recovery holds for the partition (active or standby) go into
the partition's RocksDB as one ``WriteBatch``, the offset they reach with them (Faust's
persisted offset, in the same atomic write), and recovery's offset moves to the last. One
event of the fetch's last record then goes on Faust's changelog queue: recovery's loop
finds nothing new in it (its offset is held already) and does the rest as it does per
record — it notes the partition as heard from, ends the restore once no active partition
has records left, and marks standbys ready once they are caught up. Records of a
partition recovery does not hold (revoked meanwhile) are left, as Faust leaves them.

Progress is logged every ``PROGRESS_EVERY`` seconds while a restore runs (records
written, records left for active partitions, the rate), and the metrics' restore gauges
(``stream_restore_remaining_records``, ``stream_recovering``) are set every second.
"""

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from contextlib import suppress
from typing import Any

from rocksdict import WriteBatch

from stream.app.table import SessionTable

log = logging.getLogger("stream.restore")

PROGRESS_EVERY = 5.0  # seconds between progress lines
OBSERVE_EVERY = 1.0  # seconds between updates of the restore gauges


def write_batch(records: Sequence[Any], after: int | None) -> tuple[WriteBatch | None, int, int]:
    """The rows of ``records`` (aiokafka's: ``offset``, ``key``, ``value``) past offset
    ``after`` as one raw write batch: a value is the row, None its removal (a tombstone).
    Returns the batch (None when no record is past ``after``), the last offset in it and
    how many records it holds."""
    batch: WriteBatch | None = None
    last = -1 if after is None else after
    count = 0
    for record in records:
        offset = record.offset
        if offset <= last:
            continue  # recovery holds it already (a record fetched again)
        if batch is None:
            batch = WriteBatch(raw_mode=True)
        value = record.value
        if value is None:
            batch.delete(record.key)
        else:
            batch.put(record.key, value)
        last = offset
        count += 1
    return batch, last, count


class BulkRestore:
    """The changelog partitions of ``table``, restored a fetch at a time into its store
    and Faust's recovery kept up to date (see the module's docstring)."""

    def __init__(
        self, app: Any, table: SessionTable, observe: Callable[[Any], None] | None = None
    ) -> None:
        self.app = app
        self.table = table
        self.observe = observe  # given recovery: the metrics' restore gauges
        self.written = 0  # records written since the last progress line
        self.total = 0  # records written by this process
        # -inf: the first write begins a restore, and sets the gauges at once
        self._since = self._observed = float("-inf")

    async def take(self, tp: Any, records: Sequence[Any], to_message: Any) -> None:
        """One fetch's ``records`` of changelog partition ``tp`` (``to_message``: the
        consumer's, a record as Faust's message, for the one event recovery is handed)."""
        if not records:
            return
        recovery = self.app.tables.recovery
        if tp in recovery.active_tps:
            offsets = recovery.active_offsets
        elif tp in recovery.standby_tps:
            offsets = recovery.standby_offsets
        else:
            return  # no longer ours: recovery would not apply it either
        batch, last, written = write_batch(records, offsets.get(tp))
        if batch is not None:
            store = self.table.table.data
            batch.put(store.offset_key, str(last).encode())  # Faust's persisted offset
            store._db_for_partition(tp.partition).write(batch)
            offsets[tp] = last
            self.count(written, recovery)
        await self.nudge(tp, to_message(tp, records[-1]))

    async def nudge(self, tp: Any, message: Any) -> None:
        """Recovery's loop, handed the fetch's last record as an event: it notes ``tp`` as
        heard from and ends the restore, or marks standbys ready, when due."""
        channels = self.app.topics._tp_index.get(tp) or ()
        queue = self.app.tables.changelog_queue
        for channel in channels:
            event = await channel.decode(message, propagate=False)
            # Never waits, as Faust's conductor never does: a full queue holds nudges
            # enough, and recovery's loop looks again after 5 s of nothing in any case.
            with suppress(asyncio.QueueFull):
                queue.put_nowait(event)

    def count(self, written: int, recovery: Any) -> None:
        now = time.monotonic()
        if self.written == 0 and now - self._since >= PROGRESS_EVERY:
            self._since = now  # the first write for a while: a restore begins
        self.written += written
        self.total += written
        if self.observe is not None and now - self._observed >= OBSERVE_EVERY:
            self.observe(recovery)
            self._observed = now
        if now - self._since < PROGRESS_EVERY:
            return
        left = max(0, recovery.active_remaining_total())
        log.info(
            "restoring: %d records written (%.0f/s), %d left for active partitions",
            self.total,
            self.written / (now - self._since),
            left,
        )
        self.written, self._since = 0, now


def install(
    app: Any, table: SessionTable, observe: Callable[[Any], None] | None = None
) -> BulkRestore:
    """Have the consumer (``stream.app.fetch``) hand ``table``'s changelog over in bulk;
    ``observe`` is given Faust's recovery while it runs (the restore gauges)."""
    restore = BulkRestore(app, table, observe)
    app.transport.changelogs = {table.changelog: restore}
    return restore


__all__ = ["BulkRestore", "install", "write_batch"]
