"""Input records as the fold reads them (contract: "Validation"): a ``Message`` decoded
into its session id and events, a reset, or dead letters with a reason. Every bound of
``Limits`` is checked here, before anything is folded."""

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from stream.contract.errors import Unreadable, safe_text
from stream.contract.events import Event, event_time, read_event
from stream.contract.jsontext import PARSE_DEPTH, check_depth, dumps, loads, might_nest
from stream.contract.storage import ChunkRun, decode_line
from stream.session.limits import Limits
from stream.session.results import DeadLetter


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


# The input topic's reset header: part of the input contract this module reads (the
# writers, `stream produce --reset`, and the list of every header, stream.output.headers,
# take it from here).
RESET_HEADER: Final = "stream-reset"

# A reset (``RESET_HEADER``) is a control record, not an event: "start this session over
# under generation G". Sent by `stream produce --reset` before a session's complete log,
# so a session whose beginning fell out of input retention is rebuilt exactly (contract:
# "Per-session processing"). Idempotent: a reset at or below the session's generation is
# ignored; one naming a generation not claimed for resets on the control topic
# (``Limits.reset_generations``) is dead-lettered, the deployment's own included: a row's
# generation starts at 0, so any generation a producer could name would wipe it.
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
    unreadable: _Unreadable | None = None  # made at the first bad element (rare)
    # No element can be larger than the whole message: sizes are measured only when the
    # message is over the event bound (never, with the defaults).
    sized = len(value) > limits.event_bytes
    for index, element in enumerate(body):
        try:
            if deep:
                check_depth(element)
            if sized and len(encoded := dumps(element)) > limits.event_bytes:
                size = f"event of {len(encoded):,} bytes exceeds {limits.event_bytes:,}"
                if unreadable is None:
                    unreadable = _Unreadable(len(value))
                unreadable.add(index, size, encoded, limits)
                continue
            item = _item(element)
            out.append(item)
            time = _time(element, item)
            if time is not None and (latest is None or time > latest):
                latest = time
        except Unreadable as error:
            if unreadable is None:
                unreadable = _Unreadable(len(value))
            unreadable.add(index, str(error), _reencode(element), limits)
    if unreadable is not None:
        # One dead letter for all of them: a record of 10,000 bad elements once made
        # 10,000 dead letters and log lines, 1.4 GiB in one batch (docs/notes/028).
        out.append(unreadable.letter(message, limits, len(body)))
    return session_id, out, latest


_REASONS: Final = 3  # distinct reasons a segment's dead letter quotes


class _Unreadable:
    """A segment's unreadable elements, gathered into its record's one dead letter: how
    many, the first positions, up to ``_REASONS`` distinct reasons, and their texts while
    these, as a JSON array, are no larger than the record itself (else the letter holds
    the record). So the letter is bounded by the record and the limits, not by the
    number of elements."""

    def __init__(self, record_bytes: int) -> None:
        self.record_bytes = record_bytes
        self.count = 0
        self.positions: list[int] = []
        self.reasons: list[str] = []
        self.texts: list[bytes] = []
        self.size = 1  # of ``texts`` as a JSON array: the brackets and the commas
        self.whole = False  # a text could not be kept: the letter holds the record

    def add(self, index: int, reason: str, text: bytes | None, limits: Limits) -> None:
        self.count += 1
        if len(self.positions) < limits.dead_letter_positions:
            self.positions.append(index)
        if len(self.reasons) < _REASONS and reason not in self.reasons:
            self.reasons.append(reason)
        if self.whole:
            return
        if text is None or (self.texts and self.size + len(text) + 1 > self.record_bytes):
            self.whole, self.texts = True, []
            return
        self.texts.append(text)
        self.size += len(text) + 1

    def letter(self, message: Message, limits: Limits, elements: int) -> DeadLetter:
        first = self.positions[0] if self.positions else None
        if self.count == 1:  # the element alone, as it always was
            text = (message.value or b"") if self.whole else self.texts[0]
            return _dead(message, limits, self.reasons[0], text, first)
        raw = (message.value or b"") if self.whole else b"[" + b",".join(self.texts) + b"]"
        reason = (
            f"{self.count:,} of {elements:,} segment elements unreadable;"
            f" the first (index {first}): {self.reasons[0]}"
        )
        if len(self.reasons) > 1:
            reason += "; also: " + "; ".join(self.reasons[1:])
        return _dead(message, limits, reason, raw, first, self.count, tuple(self.positions))


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
    claimed = limits.reset_generations
    if claimed is not None and not claimed_for_resets(generation, claimed):
        reason = (
            f"{RESET_HEADER} names generation {generation}, never claimed for resets on the"
            f" control topic (claimed: {_claimed(claimed)}; `stream produce --reset` claims one)"
        )
        return None, [_dead(message, limits, reason)]
    return session_id, [Reset(generation)]


def claimed_for_resets(generation: int, claims: Sequence[tuple[int, int]]) -> bool:
    """Whether ``generation`` lies in one of the claimed ranges."""
    return any(first <= generation <= last for first, last in claims)


def _claimed(claims: Sequence[tuple[int, int]]) -> str:
    """The claimed generations a reason names: the five highest ranges (it stays short)."""
    if not claims:
        return "none"
    shown = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in claims[-5:])
    return ("..., " if len(claims) > 5 else "") + shown


def _dead(
    message: Message,
    limits: Limits,
    reason: str,
    raw: bytes | None = None,
    index: int | None = None,
    count: int = 1,
    positions: tuple[int, ...] = (),
) -> DeadLetter:
    """The dead letter of ``message`` (of ``raw``: what of it was unreadable), cut to the
    bound; it stands for ``count`` input events (an unread batch: its records). Module
    level, not a closure in ``_decode``: compiled, a closure and its environment hold each
    other, a cycle per message left for the collector (note 016)."""
    if raw is None:
        raw = message.value or b""
    if message.unread is not None:
        count = message.records
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
        count,
        positions,
    )


def _item(element: Any) -> Event | ChunkRun:
    """One element: an event, or a dsh packed chunk row (taken too, as the run of events
    it stands for, so a producer that copies log lines verbatim loses nothing)."""
    decoded = decode_line(element)
    if type(decoded) is ChunkRun:
        return decoded
    return read_event(decoded)


def _reencode(element: Any) -> bytes | None:
    """A bad segment element as JSON text; None when it cannot be printed (nesting past
    what any encoder takes): the dead letter then holds the whole record."""
    try:
        return dumps(element)
    except (RecursionError, ValueError, TypeError):
        return None
