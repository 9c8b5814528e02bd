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
event of the last record written then goes on Faust's changelog queue: recovery's loop
finds nothing new in it (its offset is held already) and does the rest as it does per
record — it notes the partition as heard from, ends the restore once no active partition
has records left, and marks standbys ready once they are caught up. Records of a
partition recovery does not hold (revoked meanwhile) are left, as Faust leaves them.

A changelog's part of a fetch reaches ``take`` unread (``ChangelogRecords``, one
``Fetched``): aiokafka asks for the next part at once instead of after reading every
record into a ``ConsumerRecord``, and the records are read straight into the write batch
while it is on its way. ``replacements`` makes the class aiokafka's fetcher is given,
the changelogs bound in; ``stream.app.patches.install`` gives it.

The writes run on a thread of their own (RocksDB lets go of the GIL while it writes), in
the order they were taken, up to ``IN_FLIGHT`` at a time: the drain loop goes on to the
next partition's records and the next fetch meanwhile, and a fetch's write took as long
as the Python work on it (docs/notes/021). Recovery's offset moves, and its loop is
handed the event, only once the write is done: the restore never ends, and a standby is
never ready, ahead of its rows. A revocation waits for the writes in flight, so Faust
reads each partition's persisted offset (and reopens its database) after the last.

Progress is logged every ``PROGRESS_EVERY`` seconds while a restore runs (records
written, records left for active partitions, the rate), and the metrics' restore gauges
(``stream_restore_remaining_records``, ``stream_recovering``) are set every second.
"""

import asyncio
import functools
import itertools
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from typing import Any, NamedTuple

from aiokafka.consumer import fetcher  # type: ignore[import-untyped]
from aiokafka.errors import CorruptRecordException  # type: ignore[import-untyped]
from aiokafka.structs import ConsumerRecord  # type: ignore[import-untyped]
from rocksdict import WriteBatch

from stream.app.table import SessionTable

log = logging.getLogger("stream.restore")

PROGRESS_EVERY = 5.0  # seconds between progress lines
OBSERVE_EVERY = 1.0  # seconds between updates of the restore gauges
# Writes taken and not yet done: two fetches of six partitions (1 MiB each at most), so
# the writes of one fetch go on while the next is read, and memory stays bounded.
IN_FLIGHT = 12


class Rows(NamedTuple):
    """What ``write_batch`` made of a fetch's records."""

    batch: WriteBatch | None  # None: no record past the offset held
    last: int  # the offset of the last record in it (the one held, when none)
    size: int  # the records in it
    record: Any  # the last record in it (None when none)


def write_batch(records: Iterable[Any], after: int | None) -> Rows:
    """The rows of ``records`` (in offset order, each with ``offset``, ``key``, ``value``)
    past offset ``after`` as one raw write batch: a value is the row, None its removal (a
    tombstone)."""
    last = -1 if after is None else after
    batch = WriteBatch(raw_mode=True)
    put, delete = batch.put, batch.delete
    count, taken = 0, None
    for record in records:
        offset = record.offset
        if offset <= last:
            continue  # recovery holds it already (a record fetched again)
        value = record.value
        if value is None:
            delete(record.key)
        else:
            put(record.key, value)
        last, taken = offset, record
        count += 1
    return Rows(batch if count else None, last, count, taken)


class Fetched:
    """A changelog partition's part of one fetch response, its records not read yet: the
    fetcher asks for the next part as soon as it hands this one over, and the records are
    read on the worker's loop while the next part is on its way (``ChangelogRecords``)."""

    __slots__ = ("batches", "crcs", "first", "offset")

    def __init__(self, batches: list[Any], first: int, crcs: bool) -> None:
        self.batches = batches
        self.first = first  # the fetch's offset: records before it were read already
        self.crcs = crcs  # check each batch's CRC, as the consumer is set to
        self.offset: int = batches[-1].next_offset - 1  # the last offset it covers

    def __iter__(self) -> Iterator[Any]:
        """Its records (``offset``, ``key``, ``value``), as aiokafka's ``PartitionRecords``
        reads them: the CRC checked, control batches left out (the read-uncommitted
        records; ``ChangelogRecords`` reads the others as aiokafka does)."""
        first, crcs = self.first, self.crcs
        for batch in self.batches:
            if crcs and not batch.validate_crc():
                raise CorruptRecordException(f"Invalid CRC - offset {batch.base_offset}")
            if batch.is_control_batch:
                continue
            for record in batch:
                if record.offset >= first:
                    yield record


class ChangelogRecords(fetcher.PartitionRecords):  # type: ignore[misc]
    """aiokafka's records of one partition's part of a fetch response. A changelog's come
    as one ``Fetched``, unread: aiokafka reads every record into a ``ConsumerRecord`` on
    its thread before it asks for more, which took longer than the write, and the next
    fetch waited for it (docs/notes/021). Every other topic's records are aiokafka's own,
    and so are a changelog's when the consumer reads committed and the broker lists an
    aborted transaction in the part (records to leave out). The worker never writes its
    changelogs in transactions: read committed, they stay in bulk (docs/notes/025)."""

    next_fetch_offset: int  # aiokafka's: where the partition's next fetch begins

    def __init__(self, topics: frozenset[str], tp: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(tp, *args, **kwargs)
        if tp.topic in topics and not (
            self._isolation_level == fetcher.READ_COMMITTED and self._aborted_transactions
        ):
            self._records_iterator = self._unread()

    def _unread(self) -> Iterator[Fetched]:
        """The part's batches (their headers only) as one ``Fetched``; the position moves
        past the last, as aiokafka's reading would have moved it."""
        records, batches = self._records, []
        while records.has_next():
            batch = records.next_batch()
            if batch is None:
                break
            batches.append(batch)
        if batches:
            first = self.next_fetch_offset
            self.next_fetch_offset = max(first, batches[-1].next_offset)
            yield Fetched(batches, first, self._check_crcs)


def changelog_records(topics: Iterable[str]) -> type[ChangelogRecords]:
    """``ChangelogRecords`` as aiokafka's fetcher builds ``PartitionRecords`` (without the
    topics), the changelogs ``topics`` restored in bulk bound in."""
    bulk = frozenset(topics)

    class BoundChangelogRecords(ChangelogRecords):
        def __init__(self, tp: Any, *args: Any, **kwargs: Any) -> None:
            super().__init__(bulk, tp, *args, **kwargs)

    return BoundChangelogRecords


def replacements(changelogs: Iterable[str]) -> dict[str, Any]:
    """aiokafka's name and what ``stream.app.patches.install`` puts in its place: the
    fetcher's ``PartitionRecords``, handing ``changelogs``' parts over unread."""
    return {"PartitionRecords": changelog_records(changelogs)}


def records_of(fetch: Sequence[Any]) -> Iterable[Any]:
    """A partition's records of one fetch: as aiokafka read them, or a ``Fetched``'s."""
    if fetch and isinstance(fetch[0], Fetched):
        return itertools.chain.from_iterable(fetch)
    return fetch


def as_consumer_record(tp: Any, record: Any) -> Any:
    """A record as read (``Fetched``) as aiokafka's ``ConsumerRecord``."""
    if isinstance(record, ConsumerRecord):
        return record
    key, value = record.key, record.value
    return ConsumerRecord(
        tp.topic,
        tp.partition,
        record.offset,
        record.timestamp,
        record.timestamp_type,
        key,
        value,
        record.checksum,
        -1 if key is None else len(key),
        -1 if value is None else len(value),
        tuple(record.headers),
    )


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
        # One thread: a partition's writes land in the order they were taken.
        self._write_thread = ThreadPoolExecutor(1, thread_name_prefix="restore")
        self._writes_in_flight: deque[asyncio.Future[None]] = deque()
        self._queued_to: dict[Any, int] = {}  # partition -> the last offset handed to a write
        self.failed: BaseException | None = None  # a write that failed: the restore stops

    async def take(self, tp: Any, records: Sequence[Any], to_message: Any) -> None:
        """One fetch's ``records`` of changelog partition ``tp`` (``to_message``: the
        consumer's, a record as Faust's message, for the one event recovery is handed).
        Returns once the write is under way; at most ``IN_FLIGHT`` are."""
        if self.failed is not None:
            raise self.failed
        if not records:
            return
        recovery = self.app.tables.recovery
        if tp in recovery.active_tps:
            active, offsets = True, recovery.active_offsets
        elif tp in recovery.standby_tps:
            active, offsets = False, recovery.standby_offsets
        else:
            return  # no longer ours: recovery would not apply it either
        held, queued = offsets.get(tp), self._queued_to.get(tp)
        after = held if queued is None or (held is not None and held > queued) else queued
        rows = write_batch(records_of(records), after)
        if rows.batch is None:
            return  # held already, every record: nothing to write, nor news for recovery
        events = await self.events(tp, to_message(tp, as_consumer_record(tp, rows.record)))
        store = self.table.table.data
        rows.batch.put(store.offset_key, str(rows.last).encode())  # Faust's persisted offset
        write = functools.partial(store._db_for_partition(tp.partition).write, rows.batch)
        self._queued_to[tp] = rows.last
        done = asyncio.get_running_loop().run_in_executor(self._write_thread, write)
        # Done callbacks run in the order the writes end, which is the order taken.
        done.add_done_callback(
            functools.partial(self._written, tp, active, rows.last, rows.size, events)
        )
        self._writes_in_flight.append(done)
        await self._settle(IN_FLIGHT)

    async def events(self, tp: Any, message: Any) -> list[Any]:
        """A record as the event each of recovery's channels takes."""
        channels = self.app.topics._tp_index.get(tp) or ()
        return [await channel.decode(message, propagate=False) for channel in channels]

    def _written(
        self,
        tp: Any,
        active: bool,
        last: int,
        written: int,
        events: list[Any],
        done: "asyncio.Future[None]",
    ) -> None:
        """A write is done (on the loop, in order): recovery's offset moves to its last
        record, and recovery's loop is handed the event; unless the partition moved
        meanwhile (the revocation waited for this write, and Faust reads its offset anew)."""
        error = None if done.cancelled() else done.exception()
        if done.cancelled() or error is not None:
            if error is not None and self.failed is None:
                self.failed = error
                log.error("restore: a write to the table failed: %r", error)
                # No later fetch may come to raise it: the worker stops, as Faust's does
                # when the drain loop raises.
                self.app.add_future(self.app.crash(error))
            return
        recovery = self.app.tables.recovery
        if tp not in (recovery.active_tps if active else recovery.standby_tps):
            return
        offsets = recovery.active_offsets if active else recovery.standby_offsets
        held = offsets.get(tp)
        if held is None or held < last:
            offsets[tp] = last
        self.count(written, recovery)
        self.nudge(events)

    def nudge(self, events: list[Any]) -> None:
        """Recovery's loop, handed the last record written as an event: it notes its
        partition as heard from and ends the restore, or marks standbys ready, when due."""
        queue = self.app.tables.changelog_queue
        for event in events:
            # Never waits, as Faust's conductor never does: a full queue holds nudges
            # enough, and recovery's loop looks again after 5 s of nothing in any case.
            with suppress(asyncio.QueueFull):
                queue.put_nowait(event)

    async def _settle(self, limit: int) -> None:
        """Until at most ``limit`` writes are in flight; raises a write's failure."""
        in_flight = self._writes_in_flight
        while in_flight and (len(in_flight) > limit or in_flight[0].done()):
            first = in_flight[0]
            if not first.done():
                await asyncio.wait([first])
            if in_flight and in_flight[0] is first:  # a revocation may have settled it
                in_flight.popleft()
        if self.failed is not None:
            raise self.failed

    async def drained(self) -> None:
        """Every write taken is done, and its offset is recovery's."""
        await self._settle(0)

    async def on_revoked(self, sender: Any, revoked: Any = None, **kwargs: Any) -> None:
        """Partitions are revoked: the writes in flight end first (Faust then reads the
        persisted offsets, and reopens the databases, of the next assignment)."""
        with suppress(Exception):  # a failed write is the restore's to report
            await self.drained()
        self._queued_to.clear()  # recovery's offsets are read from the stores again

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
    ``observe`` is given Faust's recovery while it runs (the restore gauges). Its parts
    of a fetch come unread once ``stream.app.patches.install`` is given the changelog
    (``table.changelog``); before, as aiokafka's records (``records_of`` takes both)."""
    restore = BulkRestore(app, table, observe)
    app.transport.changelogs = {table.changelog: restore}
    app.on_partitions_revoked.connect(restore.on_revoked)
    return restore


__all__ = [
    "BulkRestore",
    "ChangelogRecords",
    "as_consumer_record",
    "changelog_records",
    "install",
    "replacements",
    "write_batch",
]
