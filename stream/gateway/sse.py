"""Server-Sent Events framing (pure): one event per update, ``id:`` = the update's version.

The version that orders a session's updates is the stored ``(gen, seq, n, v)``
(``output.record.SessionUpdate.version``, what the worker's Redis guard compares): a
rebuild starts a higher generation at a lower seq, and that is newer. An event id is the
version joined by ``-`` (``2-3044-3100-1``); a browser's ``EventSource`` resends the last
one as ``Last-Event-ID`` when it reconnects. Ids of older gateways (a plain seq, ``3044``)
are still understood, by seq alone (``Resume``).

Besides updates a stream may carry ``event: expired`` (the session expired; the stream
ends) and ``event: reauthenticate`` (the token expired; the stream ends).
"""

from dataclasses import dataclass
from typing import Final

import orjson

Version = tuple[int, int, int, int]  # gen, seq, n, v


@dataclass(frozen=True, slots=True)
class Frame:
    """One update, framed once and written to every client watching its session."""

    version: Version
    data: bytes

    @property
    def seq(self) -> int:
        return self.version[1]


@dataclass(frozen=True, slots=True)
class Ending:
    """The last event of a stream: the session expired (``event: expired``)."""

    data: bytes


@dataclass(frozen=True, slots=True)
class Resume:
    """Where a client resumes: the version its last event carried, or for an id of an older
    gateway only a seq (its generation unknown)."""

    version: Version | None
    seq: int

    def has(self, version: Version) -> bool:
        """Whether the client already holds ``version``. Redis never moves a session
        backwards, so a version other than the client's is news to it."""
        if self.version is not None:
            return self.version == version
        return self.seq == version[1]


def event_id(version: Version) -> str:
    return "-".join(map(str, version))


def seq_of(payload: bytes) -> int | None:
    """The ``seq`` of an update's JSON, or ``None`` when it has none (not an update)."""
    try:
        update = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return None
    seq = update.get("seq") if isinstance(update, dict) else None
    return seq if isinstance(seq, int) and not isinstance(seq, bool) else None


def _data_lines(payload: bytes) -> bytes:
    # SSE lines end at CR or LF: compact JSON has neither, but split defensively so an
    # unexpected one cannot end the event early (the client joins data lines with LF).
    lines = payload.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
    return b"".join(b"data: " + line + b"\n" for line in lines)


def event(version: Version, payload: bytes) -> bytes:
    return b"id: " + event_id(version).encode() + b"\n" + _data_lines(payload) + b"\n"


def frame(version: Version, payload: bytes) -> Frame:
    return Frame(version, event(version, payload))


def named(name: str, payload: bytes) -> bytes:
    """An event of type ``name`` (``EventSource.addEventListener(name, ...)``), no id."""
    return b"event: " + name.encode() + b"\n" + _data_lines(payload) + b"\n"


def comment(text: str) -> bytes:
    """A comment line: ignored by clients, keeps proxies and idle timers from closing."""
    return b": " + text.encode() + b"\n\n"


def retry(milliseconds: int) -> bytes:
    """Tells ``EventSource`` how soon to reconnect after the stream ends."""
    return b"retry: %d\n\n" % milliseconds


MAX_ID_CHARS: Final = 100


def last_event_id(raw: str | None) -> Resume | None:
    """The resume point a client sent, or ``None`` (absent or unreadable: start fresh)."""
    if raw is None or len(raw) > MAX_ID_CHARS:
        return None
    parts = raw.strip().split("-")
    if not all(p.isascii() and p.isdigit() for p in parts):
        return None
    numbers = [int(p) for p in parts]
    if len(numbers) == 4:
        gen, seq, n, v = numbers
        return Resume((gen, seq, n, v), seq)
    if len(numbers) == 1:
        return Resume(None, numbers[0])
    return None
