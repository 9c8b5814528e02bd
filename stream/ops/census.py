"""What the worker's state holds per assigned partition: sessions, faulted sessions and the
event totals of their rows (plus the partition's dead letters).

Counted from the rows, not from what this process happened to see, so the figures tell
the truth across restarts and rebalances: when a partition is assigned its rows are walked
once in the background (``walk``), and every batch after that moves the figures by what it
changed (``observe``). A batch may change a session while the walk is under way; the walk
then leaves that session to the batches (exact, because the worker's event loop runs one
of them at a time, and keys are walked in RocksDB's bytewise order).
"""

from collections.abc import Iterable
from dataclasses import dataclass, field

from stream.session.codec import RowPart, row_part
from stream.session.partition import PARTITION_KEY, PartitionRow

Part = RowPart  # a session's part in the figures (``session.codec.row_part``)


@dataclass(slots=True)
class Figures:
    sessions: int = 0
    faulted_sessions: int = 0
    folded: int = 0
    duplicate: int = 0
    faulted: int = 0
    dead_lettered: int = 0
    # The partition row's: events of the sessions its sweeps expired, and how many.
    retired: tuple[int, int, int] = (0, 0, 0)
    expired: int = 0

    def add(self, part: Part | None, sign: int = 1) -> None:
        if part is None:
            return
        faulted, (folded, duplicate, faulted_events) = part
        self.sessions += sign
        self.faulted_sessions += sign * faulted
        self.folded += sign * folded
        self.duplicate += sign * duplicate
        self.faulted += sign * faulted_events


@dataclass(slots=True)
class _Walk:
    figures: Figures = field(default_factory=Figures)
    cursor: bytes = b""  # the last key walked
    # Sessions a batch changed meanwhile: (walked before the first change, part before it).
    first: dict[bytes, tuple[bool, Part | None]] = field(default_factory=dict)
    latest: dict[bytes, Part | None] = field(default_factory=dict)
    partition: PartitionRow | None = None  # the partition row, when a batch moved it


def _take(figures: Figures, row: PartitionRow) -> None:
    figures.dead_lettered = row.dead
    figures.retired = row.retired.as_tuple()
    figures.expired = row.expired


class Census:
    """The figures of every assigned partition, kept exact as batches change rows."""

    def __init__(self) -> None:
        self.counted: dict[int, Figures] = {}
        self.walking: dict[int, _Walk] = {}

    # -- assignment ------------------------------------------------------------------
    def assign(self, partitions: Iterable[int]) -> list[int]:
        """Keep only ``partitions``; returns those that need a walk."""
        keep = set(partitions)
        for table in (self.counted, self.walking):
            for partition in [p for p in table if p not in keep]:
                del table[partition]
        new = sorted(p for p in keep if p not in self.counted and p not in self.walking)
        for partition in new:
            self.walking[partition] = _Walk()
        return new

    def visit(self, partition: int, key: bytes, row: bytes) -> None:
        """One row the walk of ``partition`` reads, in key order."""
        walk = self.walking.get(partition)
        if walk is None:
            return
        walk.cursor = key
        if key == PARTITION_KEY:
            if walk.partition is None:
                _take(walk.figures, PartitionRow.decode(row))
            return
        if key not in walk.first:  # a session a batch changed is the batches' to count
            walk.figures.add(row_part(row))

    def walked(self, partition: int) -> None:
        """The walk of ``partition`` is complete: its figures are exact from now on."""
        walk = self.walking.pop(partition, None)
        if walk is None:
            return
        figures = walk.figures
        for key, (seen, before) in walk.first.items():
            if seen:
                figures.add(before, -1)
            figures.add(walk.latest[key])
        if walk.partition is not None:
            _take(figures, walk.partition)
        self.counted[partition] = figures

    # -- batches ---------------------------------------------------------------------
    def observe(self, partition: int, key: bytes, before: Part | None, after: Part | None) -> None:
        """A batch changed a session row (``before``: None when it had none; ``after``:
        None when it was deleted, the session expired)."""
        figures = self.counted.get(partition)
        if figures is not None:
            figures.add(before, -1)
            figures.add(after)
            return
        walk = self.walking.get(partition)
        if walk is not None:
            if key not in walk.first:
                walk.first[key] = (key <= walk.cursor, before)
            walk.latest[key] = after

    def observe_partition(self, partition: int, row: PartitionRow) -> None:
        """A batch or a sweep wrote the partition row."""
        figures = self.counted.get(partition)
        if figures is not None:
            _take(figures, row)
        elif (walk := self.walking.get(partition)) is not None:
            walk.partition = row

    # -- reading ---------------------------------------------------------------------
    def total(self) -> Figures:
        out = Figures()
        for f in self.counted.values():
            out.sessions += f.sessions
            out.faulted_sessions += f.faulted_sessions
            out.folded += f.folded
            out.duplicate += f.duplicate
            out.faulted += f.faulted
            out.dead_lettered += f.dead_lettered
            out.retired = tuple(a + b for a, b in zip(out.retired, f.retired, strict=True))  # type: ignore[assignment]
            out.expired += f.expired
        return out

    def walked_partitions(self) -> list[int]:
        """Partitions whose walk is complete (the expiry index holds all their rows)."""
        return list(self.counted)
