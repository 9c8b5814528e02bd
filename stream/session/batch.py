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

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from stream.contract.errors import MAX_ERROR_CHARS, Unreadable, safe_text
from stream.contract.events import Event, event_time, read_event
from stream.contract.jsontext import PARSE_DEPTH, check_depth, dumps, loads, might_nest
from stream.contract.storage import ChunkRun, decode_line
from stream.projections.base import Projection
from stream.session import codec
from stream.session.partition import PARTITION_KEY, PartitionRow
from stream.session.processor import (
    MAX_SYSTEM_PROMPTS,
    Outcome,
    SessionRecord,
    Tally,
    fault,
    fold_items,
    note_time,
    projections,
    published_seq,
    update,
    view_version,
)


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
    resets: bool = True  # take reset records from the input topic (STREAM_RESETS)
    # The highest generation a reset may name: the highest claimed on the control topic
    # (``stream produce --reset`` claims one before it sends); above it, dead-lettered.
    reset_ceiling: int = 2**53 - 1
    system_prompts: int = MAX_SYSTEM_PROMPTS  # retained per session (contextBreakdown)
    session_ttl: int = 0  # ms of stream time a session may idle before it expires; 0: never

    @property
    def folds(self) -> tuple[Projection, ...]:
        """The projections this fold runs under these limits."""
        return projections(self.system_prompts)


@dataclass(slots=True)  # not frozen: compiled, its __init__ costs 0.7 us, frozen 2.1 us
class Message:
    """One input record as the transport delivered it: plain values (never changed)."""

    key: bytes | None
    value: bytes | None
    topic: str
    partition: int
    offset: int
    headers: Sequence[tuple[str, bytes | None]] = ()
    # Why the transport could not read the record(s) it stands for (a compressed batch
    # past the inflate bound: stream.app.inflate); ``value`` is then a bounded copy.
    unread: str | None = None
    records: int = 1  # input records this message stands for (an unread batch: several)


# A control record, not an event: "start this session over under generation G". Sent by
# `stream produce --reset-generation G` before a session's complete log, so a session whose
# beginning fell out of input retention is rebuilt exactly (contract: "Per-session
# processing"). Idempotent: a reset at or below the session's generation is ignored.
RESET_HEADER: Final = "stream-reset"
# A generation is published in JSON and compared in Redis' Lua (doubles): 1..2^53 - 1,
# written as plain decimal digits.
MAX_GENERATION: Final = 2**53 - 1
_GENERATION = re.compile(rb"[1-9][0-9]{0,15}")


def reset_generation(headers: Sequence[tuple[str, bytes | None]]) -> int:
    """The generation a record's reset header names; 0 when it names none (or none valid:
    those are dead-lettered by the fold)."""
    for name, raw in headers:
        if name == RESET_HEADER:
            if raw is None or _GENERATION.fullmatch(raw) is None:
                return 0
            generation = int(raw)
            return generation if generation <= MAX_GENERATION else 0
    return 0


@dataclass(frozen=True, slots=True)
class Reset:
    gen: int


@dataclass(frozen=True, slots=True)
class ResetNote:
    """A reset record met in a batch, for the worker's log: every reset is logged."""

    session_id: str
    gen: int
    previous: int  # the session's generation before it
    applied: bool  # False: at or below the session's generation, ignored
    partition: int
    offset: int


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


# A published version's parts as the session holds them: (its own generation, seq, events
# counted, view version); the publisher raises the generation to the deployment's.
Version = tuple[int, int, int, int]


def version_of(record: SessionRecord) -> Version:
    return (record.gen, published_seq(record), record.accounted.total, view_version(record))


@dataclass(slots=True)
class SessionChange:
    """What one batch did to one session: its new row and the update to publish."""

    session_id: str
    key: bytes  # table and output-topic key
    partition: int  # the input partition its messages came from: the row's partition
    row: bytes
    update: dict[str, Any]
    tally: Tally  # the session's totals after the batch (published with the update)
    gen: int = 0  # the session's own generation (after a reset), 0: the deployment's
    view_version: int = 0  # processor.view_version: breaks ties of (gen, seq, n) in Redis
    payload: bytes = b""  # ``update`` as JSON: encoded once, inside the quarantine
    # The session's part in its partition's figures before the batch and after it
    # (``codec.row_part``; None: no readable row before): what the worker's census moves.
    before: codec.RowPart | None = None
    after: codec.RowPart = (False, (0, 0, 0))
    # When the session last was active, in stream time (``PartitionRow.touched``): the
    # expiry index files it under this. None: it cannot expire yet.
    touched: int | None = None
    # The session had expired and started a new life in this batch: the version its old
    # life last published, which Redis and the output topic drop first.
    expired: Version | None = None
    # The record ``row`` encodes, for the caller to hand back through ``recall`` instead
    # of decoding ``row`` again; None when the session had to be rescued.
    record: SessionRecord | None = None


# ``recall(key, partition, row)``: the record the caller kept for a row it is handed (the
# ``record`` of the change that wrote ``row``), or None. A record is handed out once: the
# fold goes on folding it in place.
Recall = Callable[[bytes, int, bytes], SessionRecord | None]


@dataclass(slots=True)
class PartitionChange:
    """The partition row (``session.partition``): dead letters accounted, the offset
    covered, the stream time, and what expiry retired."""

    partition: int
    row: bytes
    dead_lettered: int
    now: int | None = None  # the stream time after the batch
    since: int | None = None
    retired: Tally = field(default_factory=Tally)  # events of sessions swept away
    expired: int = 0  # sessions swept away


@dataclass(slots=True)
class BatchResult:
    sessions: list[SessionChange] = field(default_factory=list)
    partitions: list[PartitionChange] = field(default_factory=list)
    dead_letters: list[DeadLetter] = field(default_factory=list)
    counts: Counts = field(default_factory=Counts)  # new events only, not redeliveries
    # Events of a life that ended in this batch (a reset, or the session expired): they
    # stay in every total (``SessionRecord.carried``), this says how many moved.
    retired: Counts = field(default_factory=Counts)
    expired: int = 0  # sessions an event found expired (they start a new life)
    redelivered: int = 0  # messages already accounted for (a retry after a crash)
    quarantined: int = 0  # messages an unexpected error took out of the batch
    types: dict[str, int] = field(default_factory=dict)  # events by type (metrics)
    resets: list[ResetNote] = field(default_factory=list)


Item = Event | ChunkRun | DeadLetter | Reset


def decode(message: Message, limits: Limits = Limits()) -> tuple[str | None, list[Item]]:
    """A message as (session id, its events); unreadable parts become dead letters."""
    session_id, items, _ = _decode(message, limits)
    return session_id, items


def _time(element: Any, item: Event | ChunkRun) -> int | None:
    return item.latest_time if type(item) is ChunkRun else event_time(element)


def _decode(message: Message, limits: Limits) -> tuple[str | None, list[Item], int | None]:
    """``decode``, and the latest integer event time among the message's events."""
    if message.unread is not None:
        return None, [_dead(message, limits, message.unread)], None
    value = message.value or b""

    key = message.key or b""
    for name, raw in message.headers:
        if name == RESET_HEADER:
            return (*_reset(message, key, raw, limits), None)
    if len(key) > limits.key_bytes:
        too_long = f"session key of {len(key):,} bytes exceeds {limits.key_bytes:,}"
        return None, [_dead(message, limits, too_long)], None
    try:
        session_id = key.decode()
    except UnicodeDecodeError:
        session_id = ""
    if not session_id:
        keyless = "no session key (the message key must be the session id, in UTF-8)"
        return None, [_dead(message, limits, keyless)], None
    if len(value) > limits.message_bytes:
        too_big = f"message of {len(value):,} bytes exceeds {limits.message_bytes:,}"
        return session_id, [_dead(message, limits, too_big)], None
    try:
        # A segment nests its events one level deeper: parse the message as deep as any
        # parser here reads, then hold each event to the event bound (as `stream fold`).
        body = loads(value, PARSE_DEPTH)
    except Unreadable as error:
        return session_id, [_dead(message, limits, str(error))], None
    deep = might_nest(value)
    if type(body) is not list:
        if len(value) > limits.event_bytes:
            too_big = f"event of {len(value):,} bytes exceeds {limits.event_bytes:,}"
            return session_id, [_dead(message, limits, too_big)], None
        try:
            if deep:
                check_depth(body)
            item = _item(body)
            return session_id, [item], _time(body, item)
        except Unreadable as error:
            return session_id, [_dead(message, limits, str(error))], None
    if not body:
        empty = "empty segment: a segment must hold at least one event"
        return session_id, [_dead(message, limits, empty)], None
    if len(body) > limits.segment_events:
        too_many = f"segment of {len(body):,} events exceeds {limits.segment_events:,}"
        return session_id, [_dead(message, limits, too_many)], None
    out: list[Item] = []
    latest: int | None = None
    # No element can be larger than the whole message: sizes are measured only when the
    # message is over the event bound (never, with the defaults).
    sized = len(value) > limits.event_bytes
    for index, element in enumerate(body):
        try:
            if deep:
                check_depth(element)
            if sized and len(encoded := dumps(element)) > limits.event_bytes:
                size = f"event of {len(encoded):,} bytes exceeds {limits.event_bytes:,}"
                out.append(_dead(message, limits, size, encoded, index))
                continue
            item = _item(element)
            out.append(item)
            time = _time(element, item)
            if time is not None and (latest is None or time > latest):
                latest = time
        except Unreadable as error:
            out.append(_dead(message, limits, str(error), _reencode(element, value), index))
    return session_id, out, latest


def _reset(
    message: Message, key: bytes, raw: bytes | None, limits: Limits
) -> tuple[str | None, list[Any]]:
    if not limits.resets:
        reason = f"{RESET_HEADER} records are not taken here (STREAM_RESETS=off)"
        return None, [_dead(message, limits, reason)]
    try:
        session_id = key.decode() if len(key) <= limits.key_bytes else ""
    except UnicodeDecodeError:
        session_id = ""
    if not session_id:
        reason = f"{RESET_HEADER} needs a session key (UTF-8, at most the key bound)"
        return None, [_dead(message, limits, reason)]
    if raw is None or _GENERATION.fullmatch(raw) is None or int(raw) > MAX_GENERATION:
        reason = f"{RESET_HEADER} needs a generation in 1..{MAX_GENERATION}, in digits"
        return None, [_dead(message, limits, reason)]
    generation = int(raw)
    if generation > limits.reset_ceiling:
        reason = (
            f"{RESET_HEADER} names generation {generation}, never claimed on the control"
            f" topic (the highest claimed is {limits.reset_ceiling}; `stream produce --reset`"
            " claims one)"
        )
        return None, [_dead(message, limits, reason)]
    return session_id, [Reset(generation)]


def _dead(
    message: Message,
    limits: Limits,
    reason: str,
    raw: bytes | None = None,
    index: int | None = None,
) -> DeadLetter:
    """A dead letter of ``message`` (or of ``raw``, one element of it), cut to the bound.
    Module level, not a closure in ``_decode``: compiled, a closure and its environment
    hold each other, a cycle per message left for the collector (note 016)."""
    if raw is None:
        raw = message.value or b""
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


@dataclass(slots=True)
class _Open:
    """A session the batch touched: its record, as loaded and as folded so far."""

    record: SessionRecord
    before: Tally  # the tally when loaded
    first_seq: int  # the first seq the batch offered (an unreadable row faults there)
    stored: codec.RowPart | None  # the stored row's part in the census (codec.row_part)
    messages: list[Message] = field(default_factory=list)
    retired: Tally | None = None  # events of lives that ended here (rare: made when needed)
    expired: Version | None = None  # the old life's version, when the session expired here


@dataclass(slots=True)
class _OpenPartition:
    """A partition row the batch touched, as loaded and as changed so far."""

    row: PartitionRow
    before_dead: int
    before_offset: int


class _Batch:
    """The state of one batch fold: the rows it loaded and what it changed."""

    def __init__(
        self,
        load: Callable[[bytes, int], bytes | None],
        limits: Limits,
        recall: Recall | None = None,
    ) -> None:
        self.load = load
        self.recall = recall
        self.limits = limits
        self.folds = limits.folds
        self.result = BatchResult()
        self.sessions: dict[tuple[int, bytes], _Open] = {}  # by (partition, key)
        self.partitions: dict[int, _OpenPartition] = {}
        self.refolding = False  # taking messages again that were accounted already
        self.events = 0  # events the message being folded holds (what a quarantine counts)
        self.ttl = limits.session_ttl

    def partition(self, partition: int) -> _OpenPartition:
        entry = self.partitions.get(partition)
        if entry is None:
            row = PartitionRow.decode(self.load(PARTITION_KEY, partition))
            entry = _OpenPartition(row, row.dead, row.offset)
            self.partitions[partition] = entry
        return entry

    def session(self, partition: int, key: bytes, first_seq: int) -> _Open:
        entry = self.sessions.get((partition, key))
        if entry is None:
            row = self.load(key, partition)
            kept = None if row is None or self.recall is None else self.recall(key, partition, row)
            stored: codec.RowPart | None
            if kept is not None:  # the record that row was encoded from: no decode
                record, stored = kept, codec.part(kept)
            else:
                record, stored = _restore(row, first_seq, self.limits, self.folds)
            before = record.accounted
            entry = _Open(record, before, first_seq, stored)
            self.sessions[(partition, key)] = entry
        return entry

    def fold(self, message: Message) -> None:
        self.events = 1  # until decoded: a message nobody could take apart counts as one
        covered = self.partition(message.partition).row
        # Taken before: by an earlier batch, or earlier in this one (a seek within a
        # consumer generation fetches again what the agent's queue still holds).
        again = message.offset <= covered.offset
        covered.offset = max(covered.offset, message.offset)
        session_id, items, latest = _decode(message, self.limits)
        letters = [item for item in items if type(item) is DeadLetter]
        self.events = len(items) - len(letters)
        if letters and not self.refolding:  # refolding: sent and accounted already
            count = 0 if again else None if message.unread is None else message.records
            self.dead_letters(message, letters, count)
        if session_id is None or not self.events:
            return
        key = session_id.encode()
        first = next(item for item in items if type(item) is not DeadLetter)
        if type(first) is Reset:
            self.events = 0  # a control record, not an event
            self.reset(message, key, session_id, first.gen)
            return
        first_seq = first.seq0 if type(first) is ChunkRun else first.seq  # type: ignore[union-attr]
        clock = self.partition(message.partition).row
        clock.observe(latest, session_id)
        entry = self.session(message.partition, key, first_seq)
        record = entry.record
        fresh = message.offset > record.offset
        if fresh and record.seen >= 0 and clock.expired_record(record, self.ttl):
            record = self.expire(entry, clock, session_id, first_seq)
        entry.messages.append(message)
        # Metrics of what arrived: once per message, not again when refolded.
        types = self.result.types if not self.refolding else {}
        if not fresh and not self.refolding:
            self.result.redelivered += 1
        folding: list[Event | ChunkRun] = []
        for item in items:
            if type(item) is Event:
                types[item.type] = types.get(item.type, 0) + 1
                folding.append(item)
            elif type(item) is ChunkRun:
                types["assistant/chunk"] = types.get("assistant/chunk", 0) + item.size
                self.events += item.size - 1
                folding.append(item)
        fold_items(record, folding, record.tally if fresh else None)
        note_time(record, latest)
        if fresh:  # a redelivery is in the row already, at the stream time it had then
            record.touched = clock.active(latest, record.touched)
            record.offset = message.offset

    def expire(
        self, entry: _Open, clock: PartitionRow, session_id: str, first_seq: int
    ) -> SessionRecord:
        """The stored session is past its TTL (contract: "Session expiry"): its old life
        ends here, whether or not a sweep has deleted it yet. Its events stay counted
        (carried, unless the sweep that retired them already counted them). The new life
        is the blank state a swept session meets: exact from seq 0, and otherwise every
        projection faults on the gap, the same fault whenever the sweep ran."""
        old = entry.record
        touched = clock.touched(old)
        swept = touched is not None and clock.retired_already(touched, session_id)
        if entry.expired is None:
            entry.expired = version_of(old)
        if entry.retired is None:
            entry.retired = Tally()
        new = SessionRecord.new(self.folds)
        if swept:  # a sweep counted this life already; its tombstone had not landed
            entry.before = Tally()
        else:
            entry.retired.add(old.tally)
            new.carried = old.accounted
        new.offset = old.offset
        self.result.expired += 1
        entry.record = new
        return new

    def reset(self, message: Message, key: bytes, session_id: str, gen: int) -> None:
        """Start the session over under generation ``gen`` (ignored at or below its own).
        Its events stay counted (carried into the new life); the complete log that
        follows a reset is folded, and counted, as new input."""
        entry = self.session(message.partition, key, 0)
        entry.messages.append(message)
        record = entry.record
        applied = gen > record.gen
        if not self.refolding:
            self.result.resets.append(
                ResetNote(session_id, gen, record.gen, applied, message.partition, message.offset)
            )
        if applied:
            if entry.retired is None:
                entry.retired = Tally()
            entry.retired.add(record.tally)
            fresh = SessionRecord.new(self.folds)
            fresh.carried = record.accounted
            fresh.gen, fresh.offset = gen, max(record.offset, message.offset)
            # A reset is activity: the log that follows it is not "after expiry".
            now = self.partition(message.partition).row.now
            fresh.time, fresh.touched = record.time, record.touched if now is None else now
            entry.record = fresh

    def dead_letters(
        self, message: Message, letters: list[DeadLetter], count: int | None = None
    ) -> None:
        """Send ``letters`` and account ``count`` events (one per letter) for a message
        not accounted before this batch (a redelivery sends again but counts nothing)."""
        self.result.dead_letters.extend(letters)
        entry = self.partition(message.partition)
        if message.offset > entry.before_offset:
            entry.row.dead += len(letters) if count is None else count

    def letter(self, message: Message, error: BaseException, during: str) -> DeadLetter:
        reason = f"unexpected {type(error).__name__} while {during}: {error}"
        return DeadLetter(
            (message.value or b"")[: self.limits.dead_letter_bytes],
            safe_text(reason, self.limits.error_chars),
            message.topic,
            message.partition,
            message.offset,
        )

    def quarantine(self, message: Message, error: BaseException) -> None:
        """Take a message an unexpected error broke out of the batch: dead-letter it with
        the exception, and refold its session's other messages from the stored row."""
        self.result.quarantined += 1
        count = self.events  # before refolding the others moves it
        try:
            session_key = (message.key or b"")[: self.limits.key_bytes]
            entry = self.sessions.pop((message.partition, session_key), None)
            if entry is not None:
                self.refolding = True
                for earlier in entry.messages:
                    if earlier is not message:
                        self.fold(earlier)
        finally:
            self.refolding = False
            self.dead_letters(message, [self.letter(message, error, "folding")], count)

    def change(self, session_key: tuple[int, bytes], entry: _Open) -> SessionChange:
        """What is written and published for a session; raises when it cannot be encoded."""
        key = session_key[1]
        session_id = key.decode()
        record = entry.record
        body = update(session_id, record)
        accounted = record.accounted
        return SessionChange(
            session_id,
            key,
            session_key[0],
            codec.encode(record),
            body,
            accounted,
            record.gen,
            view_version(record),
            orjson.dumps(body),
            entry.stored,
            ("faults" in body, (accounted.folded, accounted.duplicate, accounted.faulted)),
            self.partition(session_key[0]).row.touched(record),
            entry.expired,
            record,
        )

    def rescue(self, session_key: tuple[int, bytes]) -> SessionChange:
        """A session that cannot be finished (encoded): refold its messages one at a time
        from the stored row and quarantine each one after which it cannot be, so one
        input nobody foresaw costs its own message, never the batch."""
        partition, key = session_key
        old = self.sessions.pop(session_key)
        entry = self.session(partition, key, old.first_seq)
        try:
            good = self.change(session_key, entry)
        except Exception:  # even the stored row: the session starts over (see _restore)
            entry.record = SessionRecord.new(self.folds)
            good = self.change(session_key, entry)
        for message in old.messages:
            count = 0
            try:
                self.refolding = True
                self.fold(message)
                count = self.events
                good = self.change(session_key, entry)
            except Exception as error:
                self.result.quarantined += 1
                entry.record = codec.decode(good.row, self.folds)
                if message in entry.messages:
                    entry.messages.remove(message)
                letter = self.letter(message, error, "finishing the session")
                self.dead_letters(message, [letter], count or self.events)
            finally:
                self.refolding = False
        good.record = None  # folded on past ``good.row`` by a message that broke it
        return good

    def finish(self) -> BatchResult:
        result = self.result
        for session_key in list(self.sessions):
            try:
                change = self.change(session_key, self.sessions[session_key])
            except Exception:  # an input nobody foresaw (every bound held): never stall
                change = self.rescue(session_key)
            result.sessions.append(change)
        for entry in self.sessions.values():
            # New events only: what the batch added (a life that ended stays carried).
            result.counts.add_tally(entry.record.accounted)
            result.counts.add_tally(entry.before, -1)
            if entry.retired is not None:
                result.retired.add_tally(entry.retired)
        for partition, open_partition in self.partitions.items():
            row = open_partition.row
            result.counts.dead_lettered += row.dead - open_partition.before_dead
            result.partitions.append(
                PartitionChange(
                    partition,
                    row.encode(),
                    row.dead,
                    row.now,
                    row.since,
                    row.retired,
                    row.expired,
                )
            )
        return result


def fold_batch(
    messages: Iterable[Message],
    load: Callable[[bytes, int], bytes | None],
    limits: Limits = Limits(),
    recall: Recall | None = None,
) -> BatchResult:
    """Fold a batch. ``load(key, partition)`` returns the stored row under ``key`` in
    that input partition's table, if any; ``recall`` (optional) the record a stored row
    was encoded from, which spares decoding it (see ``Recall``).

    Every session the batch touched gets its row written and one update published, once:
    the update carries the session's ``seq`` even when no view moved (readers see it is
    live, and Redis equals the offline fold line). A batch of pure redeliveries still
    rewrites and republishes: after a crash between the local write and the changelog
    flush, that redelivery is what repairs the changelog and Redis.

    Never raises for what a message holds: an error while folding a message quarantines
    it, and so does one while encoding its session's row or update (``_Batch.rescue``).
    """
    batch = _Batch(load, limits, recall)
    for message in messages:
        try:
            batch.fold(message)
        except Exception as error:  # a bug or an input nobody foresaw: never stall
            batch.quarantine(message, error)
    return batch.finish()


def _restore(
    stored: bytes | None, first_seq: int, limits: Limits, folds: tuple[Projection, ...]
) -> tuple[SessionRecord, codec.RowPart | None]:
    """The record to fold on (by ``folds``, the projections of ``limits``), and the stored
    row's part in the census (None: no row, or one that cannot be read)."""
    if stored is None:
        return SessionRecord.new(folds), None
    try:
        record = codec.decode(stored, folds)
        return record, codec.part(record)
    except codec.RowError as error:
        # A row we cannot read cannot be trusted, and guessing would count history twice
        # or drift: the session starts over from what the input allows. From seq 0 (a
        # replay) that is everything; otherwise every projection faults loudly at this
        # event until the session is rebuilt (`stream replay --rebuild`).
        record = SessionRecord.new(folds)
        if first_seq > 0:
            reason = f"stored row unreadable ({error}); rebuild the session with a replay"
            for slot in record:
                slot.fault = fault(first_seq, safe_text(reason, limits.error_chars))
        return record, None


__all__ = [
    "PARTITION_KEY",
    "BatchResult",
    "Counts",
    "DeadLetter",
    "Limits",
    "Message",
    "Outcome",
    "PartitionChange",
    "Recall",
    "ResetNote",
    "SessionChange",
    "Version",
    "decode",
    "fold_batch",
]
