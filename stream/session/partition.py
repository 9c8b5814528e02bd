"""A partition's own row: its dead-letter count, its stream time, and what expiry retired.

Sessions expire by event time (contract: "Session expiry"). What time it is on a
partition is the partition's *stream time*, kept here and moved only by the input:

- every event with an integer ``time`` is offered with its session id (``observe``);
- the row remembers the highest time seen (``top``) and which session sent it;
- the stream time is the highest time seen from any *other* session, and never moves
  back. One producer with a clock years ahead therefore moves the leader, not the stream
  time: it cannot expire everyone else. A clock in the past moves nothing.

A session's last activity (``touched``) is the later of the stream time and its own
latest time (``active``): the leader is not idle, and a session's wrong clock in the
future only keeps that one session longer.

Both rules are maxima, so a redelivery observes nothing new and a replay from the
earliest offset walks through the same stream times in the same order.

A session expires once the stream time passes its last activity (``touched``: the stream
time just after its latest event) plus the TTL. The sweep (``session.expiry``) deletes
expired rows in (touched, session id) order and advances ``cursor`` to the last one it
retired, *before* the tombstones are written: a row found again at or below the cursor
(a crash between the two) is deleted without being counted twice.

Layout (JSON list; the first two entries are the format before expiry existed)::

    [dead, offset, top, leader, now, since, [folded, duplicate, faulted], expired, cursor]

``since`` is the first stream time the partition had: a row written before expiry
existed (no ``touched``) counts its idleness from then.

Pure: no clocks, no I/O.
"""

from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from stream.session.processor import SessionRecord, Tally

# The partition's own row key. 0xff never occurs in UTF-8, so no session id collides.
PARTITION_KEY: Final = b"\xff"

Cursor = tuple[int, str]  # (touched, session id) of the last session a sweep retired


def expires(ttl: int) -> bool:
    """Whether sessions expire at all under ``ttl`` (ms; 0, the setting's "never")."""
    return ttl > 0


def past_ttl(touched: int | None, now: int | None, ttl: int) -> bool:
    """The expiry rule (contract: "Session expiry"): a session last active at ``touched``
    is past its TTL at stream time ``now`` when more than ``ttl`` ms lie between them.
    Never when sessions do not expire (``expires``), or either time is unknown."""
    return expires(ttl) and now is not None and touched is not None and now > touched + ttl


@dataclass(slots=True)
class PartitionRow:
    dead: int = 0  # dead letters accounted
    offset: int = -1  # highest input offset the row covers
    top: int | None = None  # highest event time seen
    leader: str = ""  # the session that sent it
    now: int | None = None  # the stream time
    since: int | None = None  # the first stream time
    retired: Tally = field(default_factory=Tally)  # events of sessions the sweep expired
    expired: int = 0  # sessions the sweep expired
    cursor: Cursor | None = None

    def observe(self, time: int | None, session_id: str) -> None:
        """An event of ``session_id`` at ``time`` (None: no integer time)."""
        if time is None:
            return
        top = self.top
        if top is None:
            self.top, self.leader = time, session_id
            return
        if session_id == self.leader:
            if time > top:
                self.top = time
            return
        if time > top:  # a new leader: the old one's time is the others' best now
            self.top, self.leader = time, session_id
            time = top
        if self.now is None or time > self.now:
            self.now = time
            if self.since is None:
                self.since = time

    def active(self, time: int | None, before: int | None) -> int | None:
        """A session's last activity after an event at ``time``: the later of the stream
        time and its own time, so a session ahead of the others (the leader) is not
        taken as idle, and a clock in the past is lifted to the stream time."""
        now = self.now
        if now is None or (time is not None and time > now):
            now = time
        if now is None or (before is not None and before > now):
            return before
        return now

    def touched(self, record: SessionRecord) -> int | None:
        """When the session was last active, in stream time (None: it cannot expire yet)."""
        return record.touched if record.touched is not None else self.since

    def expired_record(self, record: SessionRecord, ttl: int) -> bool:
        """Whether a stored session is past its TTL at this partition's stream time."""
        return past_ttl(self.touched(record), self.now, ttl)

    def retired_already(self, touched: int, session_id: str) -> bool:
        """A sweep retired this session (its tombstone may not have landed yet)."""
        return self.cursor is not None and (touched, session_id) <= self.cursor

    def encode(self) -> bytes:
        return orjson.dumps(
            [
                self.dead,
                self.offset,
                self.top,
                self.leader,
                self.now,
                self.since,
                self.retired.as_list(),
                self.expired,
                None if self.cursor is None else list(self.cursor),
            ]
        )

    @classmethod
    def decode(cls, stored: bytes | None) -> "PartitionRow":
        """The row as stored; a row that cannot be read starts over (its counts are
        figures, never input to a fold's views)."""
        return (cls.parse(stored) if stored is not None else None) or cls()

    @classmethod
    def parse(cls, stored: bytes) -> "PartitionRow | None":
        """The row as stored, or None when it cannot be read."""
        try:
            raw: Any = orjson.loads(stored)
            return _read(raw)
        except (orjson.JSONDecodeError, TypeError, ValueError):
            return None


def _int(value: Any, nullable: bool = False) -> Any:
    if (value is None and nullable) or type(value) is int:
        return value
    raise ValueError(f"not an integer: {value!r}")


def _read(raw: Any) -> PartitionRow:
    if type(raw) is not list or len(raw) not in (2, 9):
        raise ValueError("not a partition row")
    row = PartitionRow(_int(raw[0]), _int(raw[1]))
    if len(raw) == 2:  # written before expiry existed
        return row
    _, _, top, leader, now, since, retired, expired, cursor = raw
    row.top, row.now, row.since = _int(top, True), _int(now, True), _int(since, True)
    if type(leader) is not str or type(retired) is not list or len(retired) != 3:
        raise ValueError("not a partition row")
    row.leader = leader
    row.retired = Tally(*(_int(n) for n in retired))
    row.expired = _int(expired)
    if cursor is not None:
        if type(cursor) is not list or len(cursor) != 2 or type(cursor[1]) is not str:
            raise ValueError("not a cursor")
        row.cursor = (_int(cursor[0]), cursor[1])
    return row


__all__ = ["PARTITION_KEY", "Cursor", "PartitionRow", "expires", "past_ttl"]
