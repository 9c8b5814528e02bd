"""Fold one consumer batch: decode messages, fold per session, coalesce the outputs.

Pure: rows come in through ``load`` and go out in the result, so the worker's Faust glue
stays thin and this logic is tested without a broker. Every input event ends up in
exactly one count — folded, duplicate, faulted or dead-lettered — and the counts live in
the rows themselves (per session, and per partition for dead letters), stamped with the
highest input offset they cover: a message redelivered after a crash refolds (repairing
whatever the crash lost) but is not counted twice.

Nothing in here may stop a partition: hostile input is bounded by ``Limits`` and
dead-lettered with a reason, and an error nobody foresaw while folding one message
quarantines that message (dead-lettered with the exception) and the batch goes on.
"""

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Generic, TypeVar

import orjson

from stream.contract.errors import MAX_ERROR_CHARS, Unreadable, safe_text
from stream.contract.events import Event, read_event
from stream.contract.jsontext import PARSE_DEPTH, check_depth, dumps, loads, might_nest
from stream.contract.storage import ChunkRun, decode_line
from stream.session import codec
from stream.session.processor import (
    Outcome,
    SessionRecord,
    Tally,
    fault,
    fold_items,
    update,
    view_version,
)

M = TypeVar("M")  # the transport's message handle (a Faust event in the worker)

# The partition's own row (dead-letter accounting). 0xff never occurs in UTF-8, so no
# session id can collide with it.
PARTITION_KEY: Final = b"\xff"


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds on what one input may cost; past them input is dead-lettered with a reason.

    Defaults fit Kafka's default 1 MiB record limit, so every record the worker produces
    (rows, updates, dead letters) stays under the producer's request size.
    """

    message_bytes: int = 1_000_000
    event_bytes: int = 1_000_000  # one event (a segment's element as compact JSON)
    key_bytes: int = 1_024
    segment_events: int = 10_000
    error_chars: int = MAX_ERROR_CHARS
    dead_letter_bytes: int = 900_000  # value kept in a dead letter; the rest is cut


@dataclass(frozen=True, slots=True)
class Message(Generic[M]):
    """One input record as the transport delivered it."""

    key: bytes | None
    value: bytes | None
    topic: str
    partition: int
    offset: int
    handle: M
    headers: Sequence[tuple[str, bytes | None]] = ()


# A control record, not an event: "start this session over under generation G". Sent by
# `stream produce --reset-generation G` before a session's complete log, so a session whose
# beginning fell out of input retention is rebuilt exactly (contract: "Per-session
# processing"). Idempotent: a reset at or below the session's generation is ignored.
RESET_HEADER: Final = "stream-reset"


@dataclass(frozen=True, slots=True)
class Reset:
    gen: int


@dataclass(frozen=True, slots=True)
class DeadLetter:
    value: bytes
    reason: str
    topic: str
    partition: int
    offset: int
    index: int | None = None  # position inside a segment, when only one element was bad
    size: int | None = None  # original value size when ``value`` was cut to fit

    def headers(self) -> list[tuple[str, bytes]]:
        found = [
            ("reason", self.reason.encode()),
            ("source-topic", self.topic.encode("utf-8", "backslashreplace")),
            ("source-partition", str(self.partition).encode()),
            ("source-offset", str(self.offset).encode()),
        ]
        if self.index is not None:
            found.append(("segment-index", str(self.index).encode()))
        if self.size is not None:
            found.append(("original-bytes", str(self.size).encode()))
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

    def add_tally(self, tally: Tally, sign: int = 1) -> None:
        self.folded += sign * tally.folded
        self.duplicate += sign * tally.duplicate
        self.faulted += sign * tally.faulted

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
    """What one batch did to one session: its new row and the update to publish."""

    session_id: str
    key: bytes  # table and output-topic key
    handle: M  # a message of this session in this partition: routes the row's write
    row: bytes
    update: dict[str, Any]
    tally: Tally  # the session's totals after the batch (published with the update)
    gen: int = 0  # the session's own generation (after a reset), 0: the deployment's
    view_version: int = 0  # processor.view_version: breaks ties of (gen, seq, n) in Redis


@dataclass(slots=True)
class PartitionChange(Generic[M]):
    """The partition row: dead letters accounted so far, and the offset they cover."""

    partition: int
    handle: M
    row: bytes
    dead_lettered: int


@dataclass(slots=True)
class BatchResult(Generic[M]):
    sessions: list[SessionChange[M]] = field(default_factory=list)
    partitions: list[PartitionChange[M]] = field(default_factory=list)
    dead_letters: list[DeadLetter] = field(default_factory=list)
    counts: Counts = field(default_factory=Counts)  # new events only, not redeliveries
    redelivered: int = 0  # messages already accounted for (a retry after a crash)
    quarantined: int = 0  # messages an unexpected error took out of the batch
    types: dict[str, int] = field(default_factory=dict)  # events by type (metrics)


Item = Event | ChunkRun | DeadLetter | Reset


def decode(message: Message[Any], limits: Limits = Limits()) -> tuple[str | None, list[Item]]:
    """A message as (session id, its events); unreadable parts become dead letters."""
    value = message.value or b""

    def dead(reason: str, raw: bytes = value, index: int | None = None) -> DeadLetter:
        size = None
        if len(raw) > limits.dead_letter_bytes:
            raw, size = raw[: limits.dead_letter_bytes], len(raw)
        return DeadLetter(
            raw,
            safe_text(reason, limits.error_chars),
            message.topic,
            message.partition,
            message.offset,
            index,
            size,
        )

    key = message.key or b""
    for name, raw in message.headers:
        if name == RESET_HEADER:
            return _reset(key, raw, limits, dead)
    if len(key) > limits.key_bytes:
        return None, [dead(f"session key of {len(key):,} bytes exceeds {limits.key_bytes:,}")]
    try:
        session_id = key.decode()
    except UnicodeDecodeError:
        session_id = ""
    if not session_id:
        return None, [dead("no session key (the message key must be the session id, in UTF-8)")]
    if len(value) > limits.message_bytes:
        return session_id, [
            dead(f"message of {len(value):,} bytes exceeds {limits.message_bytes:,}")
        ]
    try:
        # A segment nests its events one level deeper: parse the message as deep as any
        # parser here reads, then hold each event to the event bound (as `stream fold`).
        body = loads(value, PARSE_DEPTH)
    except Unreadable as error:
        return session_id, [dead(str(error))]
    deep = might_nest(value)
    if type(body) is not list:
        if len(value) > limits.event_bytes:
            return session_id, [
                dead(f"event of {len(value):,} bytes exceeds {limits.event_bytes:,}")
            ]
        try:
            if deep:
                check_depth(body)
            return session_id, [_item(body)]
        except Unreadable as error:
            return session_id, [dead(str(error))]
    if not body:
        return session_id, [dead("empty segment: a segment must hold at least one event")]
    if len(body) > limits.segment_events:
        return session_id, [
            dead(f"segment of {len(body):,} events exceeds {limits.segment_events:,}")
        ]
    out: list[Item] = []
    # No element can be larger than the whole message: sizes are measured only when the
    # message is over the event bound (never, with the defaults).
    sized = len(value) > limits.event_bytes
    for index, element in enumerate(body):
        try:
            if deep:
                check_depth(element)
            if sized and len(encoded := dumps(element)) > limits.event_bytes:
                size = f"event of {len(encoded):,} bytes exceeds {limits.event_bytes:,}"
                out.append(dead(size, encoded, index))
                continue
            out.append(_item(element))
        except Unreadable as error:
            out.append(dead(str(error), _reencode(element, value), index))
    return session_id, out


def _reset(
    key: bytes, raw: bytes | None, limits: Limits, dead: Callable[..., DeadLetter]
) -> tuple[str | None, list[Any]]:
    try:
        session_id = key.decode() if len(key) <= limits.key_bytes else ""
        gen = int(raw or b"")
    except (UnicodeDecodeError, ValueError):
        return None, [dead(f"{RESET_HEADER} needs a session key and an integer generation")]
    if not session_id or gen < 1:
        return None, [dead(f"{RESET_HEADER} needs a session key and a generation >= 1")]
    return session_id, [Reset(gen)]


def _item(element: Any) -> Event | ChunkRun:
    """One element: an event, or a dsh packed chunk row (taken too, as the run of events
    it stands for, so a producer that copies log lines verbatim loses nothing)."""
    decoded = decode_line(element)
    if type(decoded) is ChunkRun:
        return decoded
    return read_event(decoded)


def _reencode(element: Any, whole: bytes) -> bytes:
    """A bad segment element as JSON text; the whole message when it cannot be printed
    (nesting past what any encoder takes), so the dead letter still holds the input."""
    try:
        return dumps(element)
    except (RecursionError, ValueError, TypeError):
        return whole


class _Batch(Generic[M]):
    """The state of one batch fold: the rows it loaded and what it changed."""

    def __init__(self, load: Callable[[bytes, M], bytes | None], limits: Limits) -> None:
        self.load = load
        self.limits = limits
        self.result: BatchResult[M] = BatchResult()
        # (partition, key) -> (record, tally when loaded, a handle, messages folded)
        self.sessions: dict[tuple[int, bytes], tuple[SessionRecord, Tally, M, list[Any]]] = {}
        self.partitions: dict[int, tuple[list[int], int, M]] = {}  # [dead, offset], before
        self.refolding = False

    def session(
        self, partition: int, key: bytes, handle: M, first_seq: int
    ) -> tuple[SessionRecord, Tally, M, list[Any]]:
        entry = self.sessions.get((partition, key))
        if entry is None:
            record = _restore(self.load(key, handle), first_seq, self.limits)
            entry = (record, Tally(*record.tally.as_list()), handle, [])
            self.sessions[(partition, key)] = entry
        return entry

    def fold(self, message: Message[M]) -> None:
        session_id, items = decode(message, self.limits)
        letters = [item for item in items if type(item) is DeadLetter]
        if letters:
            self.dead_letters(message, letters)
        if session_id is None or len(letters) == len(items):
            return
        key = session_id.encode()
        first = next(item for item in items if type(item) is not DeadLetter)
        if type(first) is Reset:
            self.reset(message, key, first.gen)
            return
        first_seq = first.seq0 if type(first) is ChunkRun else first.seq  # type: ignore[union-attr]
        record, _, _, folded = self.session(message.partition, key, message.handle, first_seq)
        fresh = message.offset > record.offset
        if not fresh:
            self.result.redelivered += 1
        folded.append(message)
        types = self.result.types
        folding: list[Event | ChunkRun] = []
        for item in items:
            if type(item) is Event:
                types[item.type] = types.get(item.type, 0) + 1
                folding.append(item)
            elif type(item) is ChunkRun:
                types["assistant/chunk"] = types.get("assistant/chunk", 0) + item.size
                folding.append(item)
        fold_items(record, folding, record.tally if fresh else None)
        if fresh:
            record.offset = message.offset

    def reset(self, message: Message[M], key: bytes, gen: int) -> None:
        """Start the session over under generation ``gen`` (ignored at or below its own)."""
        record, _, _, folded = self.session(message.partition, key, message.handle, 0)
        folded.append(message)
        if gen > record.gen:
            fresh = SessionRecord.new()
            fresh.gen, fresh.offset = gen, max(record.offset, message.offset)
            record.slots, record.seen, record.tally = fresh.slots, fresh.seen, fresh.tally
            record.gen, record.offset = fresh.gen, fresh.offset

    def dead_letters(self, message: Message[M], letters: list[DeadLetter]) -> None:
        if self.refolding:  # already sent and accounted the first time round
            return
        self.result.dead_letters.extend(letters)
        entry = self.partitions.get(message.partition)
        if entry is None:
            row = _partition_row(self.load(PARTITION_KEY, message.handle))
            entry = self.partitions[message.partition] = (row, row[0], message.handle)
        row = entry[0]
        if message.offset > row[1]:  # not yet accounted: a redelivery counts nothing
            row[0] += len(letters)
            row[1] = message.offset

    def quarantine(self, message: Message[M], error: BaseException) -> None:
        """Take a message an unexpected error broke out of the batch: dead-letter it with
        the exception, and refold its session's other messages from the stored row."""
        self.result.quarantined += 1
        reason = f"unexpected {type(error).__name__} while folding: {error}"
        letter = DeadLetter(
            (message.value or b"")[: self.limits.dead_letter_bytes],
            safe_text(reason, self.limits.error_chars),
            message.topic,
            message.partition,
            message.offset,
        )
        try:
            session_key = (message.key or b"")[: self.limits.key_bytes]
            entry = self.sessions.pop((message.partition, session_key), None)
            if entry is not None:
                self.refolding = True
                for earlier in entry[3]:
                    if earlier is not message:
                        self.fold(earlier)
        finally:
            self.refolding = False
            self.dead_letters(message, [letter])

    def finish(self) -> BatchResult[M]:
        result = self.result
        for (_, key), (record, before, handle, _) in self.sessions.items():
            session_id = key.decode()
            result.counts.add_tally(record.tally)
            result.counts.add_tally(before, -1)
            result.sessions.append(
                SessionChange(
                    session_id,
                    key,
                    handle,
                    codec.encode(record),
                    update(session_id, record),
                    record.tally,
                    record.gen,
                    view_version(record),
                )
            )
        for partition, (row, before_dead, handle) in self.partitions.items():
            result.counts.dead_lettered += row[0] - before_dead
            result.partitions.append(PartitionChange(partition, handle, orjson.dumps(row), row[0]))
        return result


def fold_batch(
    messages: Iterable[Message[M]],
    load: Callable[[bytes, M], bytes | None],
    limits: Limits = Limits(),
) -> BatchResult[M]:
    """Fold a batch. ``load(key, handle)`` returns the stored row under ``key`` in the
    handle's partition, if any.

    Every session the batch touched gets its row written and one update published, once:
    the update carries the session's ``seq`` even when no view moved (readers see it is
    live, and Redis equals the offline fold line). A batch of pure redeliveries still
    rewrites and republishes: after a crash between the local write and the changelog
    flush, that redelivery is what repairs the changelog and Redis.
    """
    batch: _Batch[M] = _Batch(load, limits)
    for message in messages:
        try:
            batch.fold(message)
        except Exception as error:  # a bug or an input nobody foresaw: never stall
            batch.quarantine(message, error)
    return batch.finish()


def _partition_row(stored: bytes | None) -> list[int]:
    """``[dead letters accounted, highest offset they cover]``; a bad row starts over."""
    if stored is not None:
        try:
            row = orjson.loads(stored)
            if type(row) is list and len(row) == 2 and all(type(n) is int for n in row):
                return list(row)
        except orjson.JSONDecodeError:
            pass
    return [0, -1]


def _restore(stored: bytes | None, first_seq: int, limits: Limits) -> SessionRecord:
    if stored is None:
        return SessionRecord.new()
    try:
        return codec.decode(stored)
    except codec.RowError as error:
        # A row we cannot read cannot be trusted, and guessing would count history twice
        # or drift: the session starts over from what the input allows. From seq 0 (a
        # replay) that is everything; otherwise every projection faults loudly at this
        # event until the session is rebuilt (`stream replay --rebuild`).
        record = SessionRecord.new()
        if first_seq > 0:
            reason = f"stored row unreadable ({error}); rebuild the session with a replay"
            for slot in record:
                slot.fault = fault(first_seq, safe_text(reason, limits.error_chars))
        return record


__all__ = [
    "PARTITION_KEY",
    "BatchResult",
    "Counts",
    "DeadLetter",
    "Limits",
    "Message",
    "Outcome",
    "PartitionChange",
    "SessionChange",
    "decode",
    "fold_batch",
]
