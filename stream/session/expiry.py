"""Session expiry: which sessions are due, and the sweep that retires them.

Whether an event finds its session expired is decided by the fold itself
(``session.batch``, from the partition's stream time), so outcomes never depend on when a
sweep ran. The sweep only removes what has expired, and keeps the cost flat:

- ``Deadlines`` indexes the sessions of each partition by when they were last active, so
  finding what is due costs O(due), never a scan of every session. It is rebuilt from the
  rows when a partition is assigned (the walk that counts them) and moved by every batch.
- ``sweep`` takes at most a bounded number of due sessions, confirms each against its
  stored row, and returns the partition row (retired totals and the cursor moved) and
  the sessions to delete. The caller writes the partition row *before* the tombstones:
  a session found again at or below the cursor was counted already
  (``PartitionRow.retired_already``).

Pure: no clocks, no I/O; ``load`` is the caller's.
"""

import heapq
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from stream.projections.base import Projection
from stream.session import codec
from stream.session.batch import Version, version_of
from stream.session.partition import PARTITION_KEY, PartitionRow
from stream.session.processor import PROJECTIONS, Tally


class Deadlines:
    """Per partition: every session by (touched, key), and the latest entry of each.

    A heap with lazy deletion: a session touched again is pushed anew and its older
    entry skipped when it surfaces; the heap is rebuilt when stale entries outnumber the
    live ones, so its size stays within twice the sessions it holds.
    """

    def __init__(self) -> None:
        self._heaps: dict[int, list[tuple[int, bytes]]] = {}
        self._latest: dict[int, dict[bytes, int]] = {}

    def set(self, partition: int, key: bytes, touched: int | None) -> None:
        """The session was last active at ``touched`` (None: it cannot expire yet)."""
        latest = self._latest.setdefault(partition, {})
        if touched is None:
            latest.pop(key, None)
            return
        if latest.get(key) == touched:
            return
        latest[key] = touched
        heap = self._heaps.setdefault(partition, [])
        heapq.heappush(heap, (touched, key))
        if len(heap) > 2 * len(latest) + 1024:
            self._heaps[partition] = [(t, k) for k, t in latest.items()]
            heapq.heapify(self._heaps[partition])

    def filed(self, partition: int, key: bytes) -> bool:
        return key in self._latest.get(partition, {})

    def discard(self, partition: int, key: bytes) -> None:
        self._latest.get(partition, {}).pop(key, None)

    def drop(self, partition: int) -> None:
        """The partition moved away."""
        self._heaps.pop(partition, None)
        self._latest.pop(partition, None)

    def keep(self, partitions: Iterable[int]) -> None:
        held = set(partitions)
        for partition in [p for p in self._latest if p not in held]:
            self.drop(partition)

    def due(self, partition: int, before: int, limit: int) -> list[bytes]:
        """Up to ``limit`` sessions last active before ``before``, oldest first; they
        leave the index (the caller files again any that turn out to be alive)."""
        heap = self._heaps.get(partition)
        latest = self._latest.get(partition)
        out: list[bytes] = []
        if not heap or latest is None:
            return out
        while heap and len(out) < limit and heap[0][0] < before:
            touched, key = heapq.heappop(heap)
            if latest.get(key) == touched:
                del latest[key]
                out.append(key)
        return out

    def next_due(self, partition: int) -> int | None:
        """The earliest ``touched`` held for the partition (stale entries included)."""
        heap = self._heaps.get(partition)
        return heap[0][0] if heap else None

    def sessions(self, partition: int) -> int:
        return len(self._latest.get(partition, {}))


@dataclass(frozen=True, slots=True)
class Expired:
    """One session a sweep retired: what its tombstones and the Redis delete need."""

    session_id: str
    key: bytes
    version: Version  # what its life last published (own generation, seq, n, v)
    tally: Tally  # every event the key took: removed from the live totals
    part: codec.RowPart  # its part in the partition's figures (the census drops it)
    # An earlier sweep retired it already (its tombstones had not landed: a crash, or a
    # restore that met the row but not its compacted-away tombstone): deleted again,
    # counted nothing twice.
    again: bool = False
    touched: int = 0  # its last activity: where it is filed again if its drop must wait


@dataclass(slots=True)
class SweepResult:
    partition: int
    row: bytes = b""  # the partition row to write first ("" : nothing to write)
    expired: list[Expired] = field(default_factory=list)
    alive: list[tuple[bytes, int | None]] = field(default_factory=list)  # to file again
    retired: Tally = field(default_factory=Tally)  # events that left the live rows
    now: int | None = None


def sweep(
    partition: int,
    keys: Iterable[bytes],
    load: Callable[[bytes, int], bytes | None],
    ttl: int,
    folds: tuple[Projection, ...] = PROJECTIONS,
) -> SweepResult:
    """Retire the sessions among ``keys`` (due candidates, oldest first) that are past
    ``ttl`` at the partition's stream time. A candidate touched since it was filed is
    returned in ``alive``; one without a row is gone already; one whose row cannot be
    read is left to its next event, which faults it loudly."""
    row = PartitionRow.decode(load(PARTITION_KEY, partition))
    result = SweepResult(partition, now=row.now)
    counted = False
    for key in keys:
        stored = load(key, partition)
        if stored is None:
            continue
        try:
            session_id = key.decode()
            record = codec.decode(stored, folds)
        except (UnicodeDecodeError, codec.RowError):
            continue
        touched = row.touched(record)
        if touched is None or not row.expired_record(record, ttl):
            result.alive.append((key, touched))
            continue
        accounted = record.accounted
        again = row.retired_already(touched, session_id)
        if not again:
            row.retired.add(accounted)
            row.expired += 1
            row.cursor = (touched, session_id)
            result.retired.add(accounted)
            counted = True
        expired = Expired(
            session_id, key, version_of(record), accounted, codec.part(record), again, touched
        )
        result.expired.append(expired)
    if counted:
        result.row = row.encode()
    return result


__all__ = ["Deadlines", "Expired", "SweepResult", "sweep"]
