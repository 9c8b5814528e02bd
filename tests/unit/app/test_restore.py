"""The bulk restore (``stream.app.restore``): a fetch's changelog records into the table's real
RocksDB as one write, with Faust's persisted offset, and Faust's recovery kept up to date."""

from pathlib import Path
from typing import Any

import faust
import pytest
from aiokafka.structs import ConsumerRecord  # type: ignore[import-untyped]
from faust.types import TP, Message
from rocksdict import Options, Rdict

from stream.app.restore import install, write_batch
from stream.app.table import SessionTable

TOPIC = "restore-test-sessions-changelog"


def record(partition: int, offset: int, key: bytes, value: bytes | None) -> Any:
    size = -1 if value is None else len(value)
    return ConsumerRecord(TOPIC, partition, offset, 0, 0, key, value, None, len(key), size, [])


def to_message(tp: TP, r: Any) -> Message:
    return Message(r.topic, r.partition, r.offset, 0.0, 0, [], r.key, r.value, None, tp=tp)


def test_write_batch_writes_rows_and_removals_past_the_held_offset(tmp_path: Path) -> None:
    db = Rdict(str(tmp_path / "db"), Options(raw_mode=True))  # as Faust opens its stores
    db[b"gone"] = b"old"
    records = [
        record(0, 4, b"held", b"already restored"),  # at or below the held offset: left
        record(0, 5, b"a", b"row a"),
        record(0, 6, b"b", b"row b1"),
        record(0, 7, b"b", b"row b2"),  # the later row of a key wins
        record(0, 8, b"gone", None),  # a tombstone removes the row
    ]
    batch, last, size, taken = write_batch(records, 4)
    assert batch is not None and (last, size, taken) == (8, 4, records[-1])
    db.write(batch)
    assert (db.get(b"a"), db.get(b"b"), db.get(b"gone"), db.get(b"held")) == (
        b"row a",
        b"row b2",
        None,
        None,
    )
    db.close()


def test_write_batch_of_records_held_already_is_none() -> None:
    assert write_batch([record(0, 3, b"a", b"x")], 3) == (None, 3, 0, None)
    assert write_batch([], None) == (None, -1, 0, None)


@pytest.fixture
def restored(tmp_path: Path) -> Any:
    app = faust.App("restore-test", store="rocksdb://", datadir=str(tmp_path), broker="kafka://x:1")
    table = SessionTable(app, partitions=3)
    assert table.changelog == TOPIC
    return app, table, install(app, table)  # as the worker has it: revocations wait for writes


def test_take_restores_a_fetch_and_moves_recovery(restored: Any) -> None:
    app, table, restore = restored
    recovery = app.tables.recovery
    active, standby, revoked = TP(TOPIC, 0), TP(TOPIC, 1), TP(TOPIC, 2)
    recovery.add_active(table.table, active)
    recovery.add_standby(table.table, standby)
    # The changelog channel recovery reads, as the table manager subscribes it.
    channel = table.table.changelog_topic.clone_using_queue(app.tables.changelog_queue)
    app.topics._tp_index[active].add(channel)

    async def fetches() -> None:
        await restore.take(
            active, [record(0, 0, b"s1", b"r1"), record(0, 1, b"s2", b"r2")], to_message
        )
        await restore.take(
            active, [record(0, 1, b"s2", b"stale"), record(0, 2, b"s1", None)], to_message
        )
        await restore.take(standby, [record(1, 0, b"s3", b"r3")], to_message)
        await restore.take(revoked, [record(2, 0, b"s4", b"r4")], to_message)
        await restore.drained()  # the writes run on a thread of their own

    app.loop.run_until_complete(fetches())  # the loop the app's objects are bound to

    assert table.load(b"s2", 0) == b"r2"  # offset 1 again: not applied twice
    assert table.load(b"s1", 0) is None  # removed by its tombstone
    assert table.load(b"s3", 1) == b"r3"
    assert table.table.data.persisted_offset(active) == 2  # read back as Faust reads it
    assert table.table.data.persisted_offset(standby) == 0
    assert recovery.active_offsets[active] == 2 and recovery.standby_offsets[standby] == 0
    assert revoked not in recovery.active_offsets and 2 not in table.table.data._dbs
    assert restore.total == 4  # s1, s2, the tombstone, s3
    # Recovery's loop is handed each fetch's last record of the partition it watches.
    queue = app.tables.changelog_queue
    offsets = [queue.get_nowait().message.offset for _ in range(queue.qsize())]
    assert offsets == [1, 2]


def test_recovery_moves_only_once_the_write_is_done(restored: Any) -> None:
    app, table, restore = restored
    recovery = app.tables.recovery
    active = TP(TOPIC, 0)
    recovery.add_active(table.table, active)

    async def fetch() -> tuple[Any, Any]:
        await restore.take(active, [record(0, 0, b"s1", b"r1")], to_message)
        before = recovery.active_offsets.get(active)  # the loop has not turned since
        await app.on_partitions_revoked.send(set())  # a revocation waits for the write
        return before, recovery.active_offsets.get(active)

    before, after = app.loop.run_until_complete(fetch())
    assert (before, after) == (None, 0)
    assert table.load(b"s1", 0) == b"r1"


def test_a_failed_write_stops_the_restore(restored: Any) -> None:
    app, table, restore = restored
    recovery = app.tables.recovery
    active = TP(TOPIC, 0)
    recovery.add_active(table.table, active)
    table.table.data._db_for_partition(0).close()  # the disk under it gone, say

    async def fetches() -> None:
        await restore.take(active, [record(0, 0, b"s1", b"r1")], to_message)
        await restore.drained()

    with pytest.raises(Exception, match="closed"):
        app.loop.run_until_complete(fetches())
    assert restore.failed is not None and recovery.active_offsets.get(active) is None
    with pytest.raises(Exception, match="closed"):  # and every later fetch is refused
        app.loop.run_until_complete(restore.take(active, [record(0, 1, b"s", b"r")], to_message))


def uncompressed_batches(partition_records: list[list[tuple[bytes, bytes | None]]]) -> bytes:
    """Record batches as a broker sends them, one per list, offsets from 0."""
    import struct

    from aiokafka.record.default_records import (  # type: ignore[import-untyped]
        DefaultRecordBatchBuilder,
    )

    out, offset = bytearray(), 0
    for rows in partition_records:
        builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 20)
        for delta, (key, value) in enumerate(rows):
            builder.append(delta, timestamp=1_000, key=key, value=value, headers=[])
        built = bytearray(builder.build())
        struct.pack_into(">q", built, 0, offset)  # the batch's base offset
        offset += len(rows)
        out += built
    return bytes(out)


def test_a_changelogs_part_of_a_fetch_comes_unread_and_others_as_consumer_records() -> None:
    from aiokafka.record.memory_records import MemoryRecords  # type: ignore[import-untyped]
    from aiokafka.structs import TopicPartition  # type: ignore[import-untyped]

    from stream.app.restore import Fetched, as_consumer_record, changelog_records, records_of

    data = uncompressed_batches([[(b"a", b"1"), (b"b", None)], [(b"c", b"3")]])
    ChangelogRecords = changelog_records({TOPIC})
    changelog, other = TopicPartition(TOPIC, 2), TopicPartition("input", 2)
    # Fetched from offset 1: the broker sends the whole batch that holds it.
    part = ChangelogRecords(changelog, MemoryRecords(data), [], 1, None, None, True, 0)
    handed = list(part)
    assert len(handed) == 1 and isinstance(handed[0], Fetched)  # one, read later
    assert part.next_fetch_offset == 3 and handed[0].offset == 2  # the position moved on
    read = list(records_of(handed))
    assert [(r.offset, r.key, r.value) for r in read] == [(1, b"b", None), (2, b"c", b"3")]
    made = as_consumer_record(changelog, read[-1])  # the one recovery's nudge takes
    assert made == ConsumerRecord(TOPIC, 2, 2, 1_000, 0, b"c", b"3", None, 1, 1, ())
    others = list(ChangelogRecords(other, MemoryRecords(data), [], 0, None, None, True, 0))
    assert all(isinstance(r, ConsumerRecord) for r in others) and len(others) == 3


def test_read_committed_keeps_a_changelog_in_bulk_unless_a_part_holds_an_aborted_one() -> None:
    import struct

    from aiokafka.consumer.fetcher import READ_COMMITTED  # type: ignore[import-untyped]
    from aiokafka.record.default_records import (  # type: ignore[import-untyped]
        DefaultRecordBatchBuilder,
    )
    from aiokafka.record.memory_records import MemoryRecords  # type: ignore[import-untyped]
    from aiokafka.structs import TopicPartition  # type: ignore[import-untyped]

    from stream.app.restore import Fetched, changelog_records, records_of

    def batch(base: int, key: bytes, producer: int) -> bytes:
        """One record; ``producer`` >= 0: a transactional write of that producer id."""
        transactional = producer >= 0
        builder = DefaultRecordBatchBuilder(
            2, 0, int(transactional), producer, 0 if transactional else -1, 0, 1 << 20
        )
        builder.append(0, timestamp=1_000, key=key, value=b"row", headers=[])
        built = bytearray(builder.build())
        struct.pack_into(">q", built, 0, base)
        return bytes(built)

    ChangelogRecords = changelog_records({TOPIC})
    tp = TopicPartition(TOPIC, 0)
    # Our own changelog: no transaction, nothing aborted: in bulk, as read uncommitted.
    plain = batch(0, b"a", -1) + batch(1, b"b", -1)
    part = ChangelogRecords(tp, MemoryRecords(plain), [], 0, None, None, True, READ_COMMITTED)
    handed = list(part)
    assert len(handed) == 1 and isinstance(handed[0], Fetched)
    assert [r.key for r in records_of(handed)] == [b"a", b"b"]
    # A part the broker says holds producer 7's aborted transaction: aiokafka's reading,
    # which leaves it out.
    mixed = batch(0, b"aborted", 7) + batch(1, b"kept", -1)
    part = ChangelogRecords(tp, MemoryRecords(mixed), [(7, 0)], 0, None, None, True, READ_COMMITTED)
    read = list(part)
    assert [r.key for r in read] == [b"kept"] and isinstance(read[0], ConsumerRecord)
    assert part.next_fetch_offset == 2


def test_a_corrupt_batch_of_a_changelog_is_refused_when_read() -> None:
    from aiokafka.errors import CorruptRecordException  # type: ignore[import-untyped]
    from aiokafka.record.memory_records import MemoryRecords  # type: ignore[import-untyped]
    from aiokafka.structs import TopicPartition  # type: ignore[import-untyped]

    from stream.app.restore import changelog_records, records_of

    data = bytearray(uncompressed_batches([[(b"a", b"row")]]))
    data[-4] ^= 0xFF  # a bit of the row's bytes flipped on the way
    ChangelogRecords = changelog_records({TOPIC})
    tp = TopicPartition(TOPIC, 0)
    part = ChangelogRecords(tp, MemoryRecords(bytes(data)), [], 0, None, None, True, 0)
    with pytest.raises(CorruptRecordException):
        list(records_of(list(part)))
