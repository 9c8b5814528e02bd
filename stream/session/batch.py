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

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import orjson

from stream.contract.errors import safe_text
from stream.contract.events import Event
from stream.contract.storage import ChunkRun
from stream.projections.base import Projection
from stream.session import codec
from stream.session.input import Message, Reset, _decode, decode
from stream.session.limits import Limits
from stream.session.partition import PARTITION_KEY, PartitionRow
from stream.session.processor import (
    Outcome,
    SessionRecord,
    Tally,
    fault,
    fold_items,
    note_time,
    update,
    view_version,
)
from stream.session.results import (
    BatchResult,
    Counts,
    DeadLetter,
    PartitionChange,
    Recall,
    ResetNote,
    SessionChange,
    Version,
    version_of,
)


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
            self.dead_letters(message, letters, 0 if again else None)
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
        """Send ``letters`` and account ``count`` events (None: the events the letters
        stand for) for a message not accounted before this batch (a redelivery sends
        again but counts nothing)."""
        self.result.dead_letters.extend(letters)
        entry = self.partition(message.partition)
        if message.offset > entry.before_offset:
            entry.row.dead += sum(letter.count for letter in letters) if count is None else count

    def letter(
        self, message: Message, error: BaseException, during: str, count: int = 1
    ) -> DeadLetter:
        reason = f"unexpected {type(error).__name__} while {during}: {error}"
        return DeadLetter(
            (message.value or b"")[: self.limits.dead_letter_bytes],
            safe_text(reason, self.limits.error_chars),
            message.topic,
            message.partition,
            message.offset,
            count=max(count, 1),
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
            letter = self.letter(message, error, "folding", count)
            self.dead_letters(message, [letter], count)

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
            ("faults" in body, accounted.as_tuple()),
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
                count = count or self.events
                letter = self.letter(message, error, "finishing the session", count)
                self.dead_letters(message, [letter], count)
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
    "version_of",
]
