"""The session row: compact orjson bytes, versioned per projection, validated on the way in.

Layout (row format 3)::

    [3, seen, offset,
     [folded, duplicate, faulted, gen, time|null, touched|null, cfolded, cduplicate, cfaulted],
     [key, stateVersion, cursor, fault|null, state, rebuilding], ...]

``time`` is the session's latest event time, ``touched`` the partition's stream time after
its latest event (what expiry is measured from), and the ``c`` counts the events of the
key's earlier lives (``SessionRecord.carried``); format 2 rows, written before these were
kept, read with null times and nothing carried.

A stored projection whose key or state version no longer matches the code is dropped on
decode and starts from ``init`` with cursor -1 — marked *rebuilding* when the session was
already under way, so it waits for a replay from seq 0 instead of faulting on a gap while
the other projections keep their rows and skip the replay as duplicates.

Each projection validates the state it decodes against its schema before anything is
committed; a row that does not fit raises ``RowError``, which the batch fold turns into a
published row fault for that session, never an exception in the worker.
"""

from functools import lru_cache
from typing import Any, Final

import orjson

from stream.projections.base import Projection, StateError
from stream.session.processor import (
    PROJECTIONS,
    Fault,
    SessionRecord,
    Slot,
    Tally,
    fault,
)

ROW_FORMAT: Final = 3


_BY_KEY: Final = {p.key: p for p in PROJECTIONS}


@lru_cache(maxsize=8)
def _by_key(folds: tuple[Projection, ...]) -> dict[str, Projection]:
    return {p.key: p for p in folds}


class RowError(ValueError):
    """A stored row that this code cannot read."""


def encode(record: SessionRecord) -> bytes:
    return orjson.dumps(
        [
            ROW_FORMAT,
            record.seen,
            record.offset,
            [
                *record.tally.as_list(),
                record.gen,
                record.time,
                record.touched,
                *record.carried.as_list(),
            ],
            *(
                [
                    key,
                    slot.projection.version,
                    slot.cursor,
                    None if slot.fault is None else list(slot.fault),
                    slot.projection.encode(slot.state),
                    slot.rebuilding,
                ]
                for key, slot in record.slots.items()
            ),
        ]
    )


# A row's part in a partition's figures: (any projection faulted, (folded, duplicate,
# faulted events)), of the record as ``decode`` reads it, so the worker's census of a
# partition and a batch's before/after of a session agree by construction.
RowPart = tuple[bool, tuple[int, int, int]]


def part(record: SessionRecord) -> RowPart:
    """A record's part in its partition's figures (every event the key took)."""
    t = record.accounted
    faulted = False
    for slot in record.slots.values():
        if slot.fault is not None:
            faulted = True
            break
    return faulted, t.as_tuple()


def row_part(row: bytes | None) -> RowPart | None:
    """A stored row's part; None when there is no row or it cannot be read."""
    if row is None:
        return None
    try:
        return part(decode(row))
    except RowError:
        return None


def decode(row: bytes, folds: tuple[Projection, ...] = PROJECTIONS) -> SessionRecord:
    """The record a row holds, folded on by ``folds`` (``processor.projections``), or
    ``RowError`` saying why the row does not fit."""
    if not isinstance(row, bytes | bytearray | memoryview):
        raise RowError(f"stored row must be bytes, got {type(row).__name__}")
    try:
        raw: Any = orjson.loads(row)
    except orjson.JSONDecodeError as error:
        raise RowError(f"stored row is not JSON: {error}") from None
    try:
        return _record(raw, folds)
    except (StateError, TypeError, ValueError) as error:
        raise RowError(f"stored row does not fit the schema: {error}") from None


def _record(raw: Any, folds: tuple[Projection, ...]) -> SessionRecord:
    if type(raw) is list and len(raw) >= 2 and raw[0] == 1:
        # Format 1 (before accounting moved into the row): no offset, no tally.
        raw = [2, raw[1], -1, [0, 0, 0, 0], *([*e, False] for e in raw[2:])]
    if type(raw) is not list or len(raw) < 4 or raw[0] not in (2, ROW_FORMAT):
        found = raw[0] if type(raw) is list and raw else type(raw).__name__
        raise RowError(f"unknown row format {str(found)[:40]}")
    _, seen, offset, tally, *entries = raw
    if type(seen) is not int or seen < -1 or type(offset) is not int or offset < -1:
        raise StateError("seen and offset must be integers >= -1")
    if type(tally) is not list or len(tally) != (4 if raw[0] == 2 else 9):
        raise StateError("tally must be [f, d, x, gen, time, touched, cf, cd, cx]")
    counts = [*tally[:4], *tally[6:]]
    if any(type(n) is not int or n < 0 for n in counts):
        raise StateError("counts and gen must be non-negative integers")
    times = tally[4:6] or [None, None]
    if any(t is not None and type(t) is not int for t in times):
        raise StateError("time and touched must be integers or null")
    stored: dict[str, Slot] = {}
    by_key = _BY_KEY if folds is PROJECTIONS else _by_key(folds)
    for entry in entries:
        if type(entry) is not list or len(entry) < 2:
            raise StateError("a projection entry must be a list")
        projection = by_key.get(entry[0]) if type(entry[0]) is str else None
        if projection is None or entry[1] != projection.version:
            continue  # retired or version-bumped: rebuilt by replay (below)
        if len(entry) != 6:
            raise StateError(f"the {projection.key} entry must be a list of 6")
        key, _, cursor, stored_fault, state, rebuilding = entry
        if type(cursor) is not int or cursor < -1 or cursor > max(seen, -1):
            raise StateError(f"{key} cursor must be an integer in -1..seen")
        if type(rebuilding) is not bool:
            raise StateError(f"{key} rebuilding flag must be a boolean")
        stored[key] = Slot(
            projection,
            projection.decode(state),
            cursor,
            _fault(stored_fault, key),
            rebuilding,
        )
    slots = {}
    for projection in folds:
        slot = stored.get(projection.key)
        if slot is None:  # new or version-bumped: waits for a replay from seq 0
            slot = Slot(projection, projection.init(), rebuilding=seen >= 0)
        slots[projection.key] = slot
    carried = Tally(*tally[6:]) if len(tally) == 9 else Tally()
    return SessionRecord(
        slots, seen, Tally(*tally[:3]), offset, tally[3], times[0], times[1], carried
    )


def _fault(raw: Any, key: str) -> Fault | None:
    if raw is None:
        return None
    if type(raw) is not list or len(raw) != 2 or type(raw[0]) is not int:
        raise StateError(f"{key} fault must be [seq, error]")
    if type(raw[1]) is not str:
        raise StateError(f"{key} fault error must be a string")
    return fault(raw[0], raw[1])
