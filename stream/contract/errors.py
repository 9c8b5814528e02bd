"""The two ways input can be wrong, kept apart because they go to different places, and
the one way their texts are made safe to store.

``ContractError``: a readable event breaks the contract (malformed data, a claim over the
wrong range, a gap). It faults the projection that read it; the fault is published as data.

``Unreadable``: the input is not an event at all (not JSON, no usable ``seq``). It cannot be
attributed to a position in a session, so it goes to the dead-letter topic. In a log it
is a ``BadLine``: the offline tools report it with its line number and read on.

Error texts quote input, and input is hostile: a 335 KB ``type`` or a lone surrogate copied
into a fault would make every stored row and published update huge or unencodable. Every
text that leaves the core passes through ``safe_text``; quoted values through ``brief``.
"""

from dataclasses import dataclass
from typing import Any, Final

MAX_ERROR_CHARS: Final = 500  # default bound on a fault or dead-letter reason


class ContractError(ValueError):
    """A readable event violates the contract for the projection reading it."""


class Unreadable(ValueError):
    """Input that cannot be read as an event; dead-lettered with this reason."""


@dataclass(frozen=True, slots=True)
class BadLine:
    """A line that is not an event: reported with its real position, never dropped."""

    line: int
    reason: str


def safe_text(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    """``text`` bounded to ``limit`` characters (saying how long it was) and encodable as
    UTF-8: lone surrogates become their ``\\udxxx`` escapes, as JSON.stringify prints them."""
    if len(text) > limit:
        text = f"{text[: max(limit - 40, 0)]}... [truncated, {len(text):,} chars]"
    try:
        text.encode()
    except UnicodeEncodeError:
        text = "".join(f"\\u{ord(c):04x}" if 0xD800 <= ord(c) <= 0xDFFF else c for c in text)
    return text


def brief(value: Any, limit: int = 80) -> str:
    """A short, safe quotation of an input value for an error text."""
    if type(value) is str and len(value) > limit:
        value = value[:limit]  # repr of a huge string is itself huge: cut first
    try:
        text = repr(value)
    except RecursionError:
        text = f"<{type(value).__name__} nested too deeply to quote>"
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return safe_text(text)
