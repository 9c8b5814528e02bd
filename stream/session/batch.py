"""Fold one consumer batch: decode messages, fold per session, coalesce the outputs.

Pure: rows come in through ``load`` and go out in the result, so the worker's Faust glue
stays thin and this logic is tested without a broker. Every input event ends up in
exactly one count — folded, duplicate, faulted or dead-lettered — so the counts add up to
what was produced.
"""

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from stream.contract.errors import Unreadable
from stream.contract.events import Event, read_event
from stream.contract.jsontext import dumps, loads
from stream.contract.storage import ChunkRun, decode_line
from stream.session import codec
from stream.session.processor import Fault, Outcome, SessionRecord, process, update

M = TypeVar("M")  # the transport's message handle (a Faust event in the worker)


@dataclass(frozen=True, slots=True)
class Message(Generic[M]):
    """One input record as the transport delivered it."""

    key: bytes | None
    value: bytes | None
    topic: str
    partition: int
    offset: int
    handle: M


@dataclass(frozen=True, slots=True)
class DeadLetter:
    value: bytes
    reason: str
    topic: str
    partition: int
    offset: int
    index: int | None = None  # position inside a segment, when only one element was bad

    def headers(self) -> list[tuple[str, bytes]]:
        found = [
            ("reason", self.reason.encode()),
            ("source-topic", self.topic.encode()),
            ("source-partition", str(self.partition).encode()),
            ("source-offset", str(self.offset).encode()),
        ]
        if self.index is not None:
            found.append(("segment-index", str(self.index).encode()))
        return found


@dataclass(slots=True)
class Counts:
    folded: int = 0
    duplicate: int = 0
    faulted: int = 0
    dead_lettered: int = 0

    def add(self, other: "Counts") -> None:
        self.folded += other.folded
        self.duplicate += other.duplicate
        self.faulted += other.faulted
        self.dead_lettered += other.dead_lettered

    def as_dict(self) -> dict[str, int]:
        return {
            "folded": self.folded,
            "duplicate": self.duplicate,
            "faulted": self.faulted,
            "dead_lettered": self.dead_lettered,
        }

    @property
    def total(self) -> int:
        return self.folded + self.duplicate + self.faulted + self.dead_lettered


@dataclass(slots=True)
class SessionChange(Generic[M]):
    """What one batch did to one session."""

    session_id: str
    handle: M  # the last message of this session: its partition is the row's partition
    row: bytes
    update: dict[str, Any]


@dataclass(slots=True)
class BatchResult(Generic[M]):
    sessions: list[SessionChange[M]] = field(default_factory=list)
    dead_letters: list[DeadLetter] = field(default_factory=list)
    counts: Counts = field(default_factory=Counts)


def decode(message: Message[Any]) -> tuple[str | None, list[Event | DeadLetter]]:
    """A message as (session id, its events); unreadable parts become dead letters."""

    def dead(value: bytes, reason: str, index: int | None = None) -> DeadLetter:
        return DeadLetter(value, reason, message.topic, message.partition, message.offset, index)

    value = message.value or b""
    try:
        session_id = message.key.decode() if message.key else ""
    except UnicodeDecodeError:
        session_id = ""
    if not session_id:
        return None, [
            dead(value, "no session key (the message key must be the session id, in UTF-8)")
        ]
    try:
        body = loads(value)
    except Unreadable as error:
        return session_id, [dead(value, str(error))]
    if type(body) is not list:
        try:
            return session_id, list[Event | DeadLetter](_events_of(body))
        except Unreadable as error:
            return session_id, [dead(value, str(error))]
    out: list[Event | DeadLetter] = []
    for index, item in enumerate(body):
        try:
            out.extend(_events_of(item))
        except Unreadable as error:
            out.append(dead(dumps(item), str(error), index))
    if not body:
        out.append(dead(value, "empty segment: a segment must hold at least one event"))
    return session_id, out


def _events_of(item: Any) -> list[Event]:
    """One element: an event, or a dsh packed chunk row (taken too, as the events it holds,
    so a producer that copies log lines verbatim loses nothing)."""
    decoded = decode_line(item)
    if isinstance(decoded, ChunkRun):
        return [read_event(event) for event in decoded.events()]
    return [read_event(decoded)]


def fold_batch(
    messages: Iterable[Message[M]],
    load: Callable[[str, M], bytes | None],
) -> BatchResult[M]:
    """Fold a batch. ``load(session_id, handle)`` returns the stored row, if any.

    Every session the batch touched gets its row written and one update published, once:
    the update carries the session's new ``seq`` even when no view moved (readers see it
    is live, and Redis equals the offline fold line). A batch of pure duplicates still
    rewrites and republishes: after a crash between the local write and the changelog
    flush, that redelivery is what repairs the changelog and Redis.
    """
    result: BatchResult[M] = BatchResult()
    counts = result.counts
    touched: dict[str, tuple[SessionRecord, M]] = {}
    for message in messages:
        session_id, items = decode(message)
        for item in items:
            if isinstance(item, DeadLetter):
                result.dead_letters.append(item)
                counts.dead_lettered += 1
                continue
            assert session_id is not None
            entry = touched.get(session_id)
            record = (
                _restore(load(session_id, message.handle), item.seq) if entry is None else entry[0]
            )
            touched[session_id] = (record, message.handle)
            outcome = process(record, item)
            if outcome is Outcome.FOLDED:
                counts.folded += 1
            elif outcome is Outcome.DUPLICATE:
                counts.duplicate += 1
            else:
                counts.faulted += 1
    for session_id, (record, handle) in touched.items():
        result.sessions.append(
            SessionChange(
                session_id, handle, codec.encode(record), update(session_id, record.seen, record)
            )
        )
    return result


def _restore(stored: bytes | None, seq: int) -> SessionRecord:
    if stored is None:
        return SessionRecord.new()
    try:
        return codec.decode(stored)
    except codec.RowError as error:
        # A row we cannot read cannot be trusted, and starting over would count history
        # twice or drift: fault every projection, loudly, until the session is rebuilt.
        record = SessionRecord.new()
        for slot in record.slots:
            slot.fault = Fault(seq, f"stored row unreadable ({error}); rebuild this session")
        return record
