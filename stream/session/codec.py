"""The session row: compact orjson bytes, versioned per projection.

Layout: ``[ROW_FORMAT, seen, [key, stateVersion, cursor, fault|null, state], ...]``. A
stored projection whose key or state version no longer matches the code is dropped on
decode and starts from ``init`` with cursor -1, so replaying the input topic rebuilds it
while the other projections keep their rows and skip the replay as duplicates.
"""

from typing import Any, Final

import orjson

from stream.session.processor import PROJECTIONS, Fault, SessionRecord, Slot

ROW_FORMAT: Final = 1


class RowError(ValueError):
    """A stored row that this code cannot read."""


def encode(record: SessionRecord) -> bytes:
    return orjson.dumps(
        [
            ROW_FORMAT,
            record.seen,
            *(
                [
                    p.key,
                    p.version,
                    s.cursor,
                    None if s.fault is None else list(s.fault),
                    p.encode(s.state),
                ]
                for p, s in zip(PROJECTIONS, record.slots, strict=True)
            ),
        ]
    )


def decode(row: bytes) -> SessionRecord:
    if not isinstance(row, bytes | bytearray | memoryview):
        raise RowError(f"stored row must be bytes, got {type(row).__name__}")
    try:
        raw: Any = orjson.loads(row)
    except orjson.JSONDecodeError as error:
        raise RowError(f"stored row is not JSON: {error}") from None
    if type(raw) is not list or not raw or raw[0] != ROW_FORMAT:
        raise RowError(f"unknown row format {raw[0] if type(raw) is list and raw else raw!r}")
    stored = {entry[0]: entry for entry in raw[2:]}
    slots = []
    for projection in PROJECTIONS:
        entry = stored.get(projection.key)
        if entry is None or entry[1] != projection.version:
            slots.append(Slot(projection.init()))  # new or version-bumped: rebuild by replay
            continue
        _, _, cursor, fault, state = entry
        slots.append(
            Slot(projection.decode(state), cursor, None if fault is None else Fault(*fault))
        )
    return SessionRecord(slots, raw[1])
