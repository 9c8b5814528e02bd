"""The sessions table: Faust's RocksDB-backed table with its Kafka changelog, read and
written directly by the worker. The one module allowed Faust's and RocksDB's private
parts (``_db_for_partition``, ``_dbs``, ``_visible_items``).

Rows are the core's own codec bytes (``session.codec``), keyed by session id in the
partition of the input events they fold (docs/notes/002); a partition's own row sits
under ``session.batch.PARTITION_KEY``.
"""

from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

import faust
from faust.types import TP

from stream.ops.topics import TABLE
from stream.session.batch import SessionChange
from stream.session.processor import SessionRecord

RAW: dict[str, Any] = {
    "key_type": bytes,
    "value_type": bytes,
    "key_serializer": "raw",
    "value_serializer": "raw",
}


class KeptRecords:
    """The decoded records of the rows written last, at most ``keep``: a session's next
    batch folds on from memory instead of decoding its row (docs/notes/016)."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        # Least recently written first: every write moves a session to the end.
        self._kept: OrderedDict[tuple[int, bytes], tuple[bytes, SessionRecord]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._kept)

    def recall(self, key: bytes, partition: int, row: bytes) -> SessionRecord | None:
        """The record kept for ``row`` (the core's ``batch.Recall``), handed out once: the
        fold goes on folding it in place."""
        kept = self._kept.pop((partition, key), None)
        if kept is None or kept[0] != row:  # a restore or a sweep wrote the row since
            return None
        return kept[1]

    def remember(self, changes: list[SessionChange]) -> None:
        """Keep the records a batch wrote; past ``keep`` the least recently written go."""
        if self.keep <= 0:
            return
        records = self._kept
        for change in changes:
            if change.record is not None:
                where = (change.partition, change.key)
                records.pop(where, None)
                records[where] = (change.row, change.record)
        while len(records) > self.keep:
            records.popitem(last=False)


class SessionTable:
    def __init__(
        self, app: faust.App, partitions: int, write_buffer: int = 8 << 20, keep: int = 0
    ) -> None:
        table = app.Table(
            TABLE,
            default=None,
            partitions=partitions,
            schema=faust.Schema(**RAW),
            # Each partition is a RocksDB of its own. Faust's default memtables (3 of 64 MiB)
            # let the write-ahead log hold a month of a busy partition's writes before a
            # flush; rows are small and sessions expire, so two small memtables keep the
            # state directory near the live rows and its memory bounded (docs/notes/013).
            options={
                "driver": "rocksdict",
                "write_buffer_size": write_buffer,
                "max_write_buffer_number": 2,
            },
        )
        # Faust picks a table's serializers from its key/value *types* (json unless the
        # type is a Model), ignoring the schema's, and registering the table already built
        # its changelog topic with them. Rows are our codec's bytes: stored and recovered raw.
        table.key_serializer = table.value_serializer = "raw"  # type: ignore[attr-defined]
        table.changelog_topic = table._new_changelog_topic()  # type: ignore[attr-defined]
        self.table: Any = table
        self.changelog: str = table.changelog_topic.get_topic_name()
        self.kept = KeptRecords(keep)

    def load(self, key: bytes, partition: int) -> bytes | None:
        """The stored row under ``key`` in ``partition`` (the core's ``load``)."""
        row: bytes | None = self.table.data._db_for_partition(partition).get(key)
        return row

    def put(self, key: bytes, row: bytes, partition: int) -> None:
        """Into the partition's local store (a batch's rows: ``Committer.commit``, step 2);
        its changelog record is sent apart, through the producer (``Outbox.send_row``)."""
        self.table.data._db_for_partition(partition).put(key, row)

    def delete(self, key: bytes, partition: int) -> None:
        self.table.data._db_for_partition(partition).delete(key)

    def persisted(self, partition: int, offset: int) -> None:
        """The changelog holds the store's rows up to ``offset``. What Faust's
        ``Table._on_changelog_sent`` does, so a restart with local state recovers only
        what follows."""
        self.table.data.set_persisted_offset(TP(self.changelog, partition), offset)

    def rows(self, partition: int) -> Iterator[tuple[bytes, bytes]]:
        """Every row the partition's local store holds (empty when it has none here)."""
        store: Any = self.table.data
        db = store._dbs.get(partition)
        if db is None:
            return iter(())
        items: Iterator[tuple[bytes, bytes]] = store._visible_items(db)
        return items


__all__ = ["KeptRecords", "SessionTable"]
