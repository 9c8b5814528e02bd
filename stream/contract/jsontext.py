"""Parse JSON text the way JavaScript's ``JSON.parse`` reads it.

orjson is the fast path. It refuses two inputs that ``JSON.parse`` accepts: escaped lone
surrogates (``"\\ud800"``) and numbers that overflow a double (``1e400`` is ``Infinity`` in
JS). Those lines fall back to the stdlib parser, configured to read what orjson reads
(integers past 64 bits become doubles, as in JS) and to refuse what JS refuses
(``NaN``/``Infinity`` literals).

Nesting has one fixed bound, ``MAX_DEPTH`` levels per event, checked without recursion
before either parser runs, so an event reads the same in every caller whatever its stack
depth (the worker's is deeper than ``stream fold``'s).
"""

import json
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final

import orjson

from stream.contract.errors import Unreadable

MAX_DEPTH = 512
"""The deepest an event may nest (arrays and objects); deeper is unreadable."""

PARSE_DEPTH = 1024
"""The deepest a message is parsed at all (orjson's own bound): a segment adds a level
to its events, and its events are then checked one by one against ``MAX_DEPTH``."""

TOO_DEEP = f"not JSON we can read: nested deeper than {MAX_DEPTH} levels"

# orjson reads integers in [-2**63, 2**64) exactly and larger ones as doubles.
_INT_MIN, _INT_END = -(2**63), 2**64


def _parse_int(text: str) -> int | float:
    value = int(text)
    return value if _INT_MIN <= value < _INT_END else float(text)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


# Bound once: compiled code would look each up on the module at every call.
_orjson_loads: Final = orjson.loads
_orjson_dumps: Final = orjson.dumps

_fallback = json.JSONDecoder(parse_int=_parse_int, parse_constant=_reject_constant)

# A string (skipped whole, so brackets inside it do not count), an opener, a closer.
_TOKENS_STR = re.compile(r'("(?:[^"\\]|\\.)*")|([\[{])|([\]}])', re.DOTALL)
_TOKENS_BYTES = re.compile(rb'("(?:[^"\\]|\\.)*")|([\[{])|([\]}])', re.DOTALL)


def might_nest(text: bytes | str, depth: int = MAX_DEPTH) -> bool:
    """Cheap: can ``text`` nest deeper than ``depth``? (False for almost every input.)

    It has more than ``depth`` openers. They are found one by one (``find``: memchr),
    stopping past ``depth``: an event has tens of them, and ``count`` read every byte
    of a line twice, a third of the time orjson takes to parse it."""
    if len(text) <= 2 * depth:
        return False
    if isinstance(text, bytes):
        return _openers(text, b"[", depth) + _openers(text, b"{", depth) > depth
    return _openers_str(text, "[", depth) + _openers_str(text, "{", depth) > depth


def _openers(text: bytes, opener: bytes, most: int) -> int:
    """How many ``opener`` bytes ``text`` holds, counting no further than ``most + 1``."""
    found = 0
    at = text.find(opener)
    while at >= 0 and found <= most:
        found += 1
        at = text.find(opener, at + 1)
    return found


def _openers_str(text: str, opener: str, most: int) -> int:
    found = 0
    at = text.find(opener)
    while at >= 0 and found <= most:
        found += 1
        at = text.find(opener, at + 1)
    return found


def text_depth(text: bytes | str) -> int:
    """How deep ``text`` nests, read without recursion (brackets in strings ignored)."""
    tokens = _TOKENS_BYTES if isinstance(text, bytes) else _TOKENS_STR
    depth = deepest = 0
    for match in tokens.finditer(text):  # type: ignore[arg-type]
        index = match.lastindex
        if index == 2:
            depth += 1
            if depth > deepest:
                deepest = depth
        elif index == 3:
            depth -= 1
    return deepest


def value_depth(value: Any) -> int:
    """How deep a parsed value nests, without recursion (a scalar is 0, ``[]`` is 1)."""
    deepest = 0
    pending = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        kind = type(item)
        if kind is dict:
            children: Any = item.values()
        elif kind is list:
            children = item
        else:
            continue
        if depth > deepest:
            deepest = depth
        pending.extend((child, depth + 1) for child in children)
    return deepest


def check_depth(value: Any) -> None:
    """Raise ``Unreadable`` for an event nested deeper than ``MAX_DEPTH``."""
    if value_depth(value) > MAX_DEPTH:
        raise Unreadable(TOO_DEEP)


@contextmanager
def _headroom() -> Iterator[None]:
    # The stdlib parser and encoder recurse once per level; give them room for
    # PARSE_DEPTH levels above wherever the caller stands, so depth alone decides.
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(limit + 2 * PARSE_DEPTH + 100)
    try:
        yield
    finally:
        sys.setrecursionlimit(limit)


def loads(text: bytes | str, max_depth: int = MAX_DEPTH) -> Any:
    """Parse one JSON document no deeper than ``max_depth``; raise ``Unreadable`` with the
    parser's reason."""
    if might_nest(text, max_depth) and text_depth(text) > max_depth:
        raise Unreadable(TOO_DEEP)
    try:
        return _orjson_loads(text)
    except orjson.JSONDecodeError as fast_error:
        try:
            with _headroom():
                return _fallback.decode(text.decode() if isinstance(text, bytes) else text)
        except (ValueError, UnicodeDecodeError):
            raise Unreadable(f"not JSON: {fast_error}") from None
        except RecursionError:  # only past PARSE_DEPTH, which the check above refuses
            raise Unreadable(TOO_DEEP) from None


def _js_float(value: float) -> str:
    # JSON.parse read an overflowing literal as ±Infinity; 1e999 reads back the same way.
    if value != value:
        raise ValueError("NaN cannot come from JSON")
    if value in (float("inf"), float("-inf")):
        return "1e999" if value > 0 else "-1e999"
    return float.__repr__(value)


def _slow_dumps(value: Any) -> str:
    encoder = json.JSONEncoder(separators=(",", ":"))
    # The pure-Python encoder takes a float formatter; the C one cannot print Infinity as
    # a number. Lone surrogates come out escaped (ensure_ascii), integers exact.
    chunks = json.encoder._make_iterencode(  # type: ignore[attr-defined]
        {},
        encoder.default,
        json.encoder.py_encode_basestring_ascii,
        None,
        _js_float,
        ":",
        ",",
        False,
        False,
        True,
    )
    with _headroom():
        return "".join(chunks(value, 0))


def dumps(value: Any) -> bytes:
    """Serialise a value ``loads`` produced so that ``JSON.parse`` reads back the same value."""
    try:
        return _orjson_dumps(value)
    except (TypeError, orjson.JSONEncodeError):  # lone surrogates, ints past 64 bits, ±inf
        return _slow_dumps(value).encode()
