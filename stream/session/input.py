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
from stream.output.headers import RESET_HEADER
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
    claimed = limits.reset_generations
    if claimed is not None and generation not in claimed:
        reason = (
            f"{RESET_HEADER} names generation {generation}, never claimed for resets on the"
            f" control topic (claimed: {_claimed(claimed)}; `stream produce --reset` claims one)"
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
def _claimed(generations: frozenset[int]) -> str:
    """The claimed generations a reason names: the five highest (a reason stays short)."""
    if not generations:
        return "none"
    highest = sorted(generations)[-5:]
    return ("..., " if len(generations) > 5 else "") + ", ".join(map(str, highest))


