"""Server-Sent Events framing (pure): one event per update, ``id:`` = the update's seq.

A browser's ``EventSource`` reconnects by itself and sends the last ``id:`` it saw as
``Last-Event-ID``; the gateway then skips everything at or below it, so a resumed
stream has neither repeats nor (for the latest-value contract) gaps.
"""

from dataclasses import dataclass

import orjson


@dataclass(frozen=True, slots=True)
class Frame:
    """One update, framed once and written to every client watching its session."""

    seq: int
    data: bytes


def seq_of(payload: bytes) -> int | None:
    """The ``seq`` of an update's JSON, or ``None`` when it has none (not an update)."""
    try:
        update = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return None
    seq = update.get("seq") if isinstance(update, dict) else None
    return seq if isinstance(seq, int) and not isinstance(seq, bool) else None


def event(seq: int, payload: bytes) -> bytes:
    # SSE lines end at CR or LF: compact JSON has neither, but split defensively so an
    # unexpected one cannot end the event early (the client joins data lines with LF).
    lines = payload.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
    return b"id: %d\n" % seq + b"".join(b"data: " + line + b"\n" for line in lines) + b"\n"


def frame(payload: bytes) -> Frame | None:
    seq = seq_of(payload)
    return None if seq is None else Frame(seq, event(seq, payload))


def comment(text: str) -> bytes:
    """A comment line: ignored by clients, keeps proxies and idle timers from closing."""
    return b": " + text.encode() + b"\n\n"


def retry(milliseconds: int) -> bytes:
    """Tells ``EventSource`` how soon to reconnect after the stream ends."""
    return b"retry: %d\n\n" % milliseconds


def last_event_id(raw: str | None) -> int | None:
    """The resume point a client sent, or ``None`` (absent or not a seq: start fresh)."""
    if raw is None:
        return None
    raw = raw.strip()
    try:
        value = int(raw)
    except ValueError:
        return None
    return value if value >= 0 else None
