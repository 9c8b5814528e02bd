"""JavaScript string and ``JSON.stringify`` lengths, computed without JavaScript.

Every length the estimator uses is a JS ``.length``: UTF-16 code units. Python strings
count code points, so an astral character (an emoji) is 1 here and 2 in JS. A JSON
document's length is the length of what ``JSON.stringify`` prints for the value
``JSON.parse`` read: doubles print in JS's shortest form (``1e+21``, ``1e-7``, ``1``),
integers beyond 2^53 lose precision first, lone surrogates are escaped as ``\\udxxx``.
We only ever need lengths, so key order (JS hoists integer-like keys) does not matter.
"""

import codecs
import re
from json.encoder import encode_basestring  # C-accelerated; escapes like JS for lengths
from typing import Any, Final

import orjson

from stream.contract.jsontext import MAX_DEPTH

_MAX_SAFE = 2**53
_SURROGATE = re.compile(r"[\ud800-\udfff]")  # re reads the escapes (mypyc takes no raw surrogates)


# The codec's own function: ``str.encode`` looks the codec up by name at every call.
_utf16: Final = codecs.utf_16_le_encode
_dumps: Final = orjson.dumps


def utf16_len(text: str) -> int:
    """JS ``text.length``."""
    if text.isascii():
        return len(text)
    encoded: bytes = _utf16(text, "surrogatepass")[0]
    return len(encoded) >> 1


def json_string_len(text: str) -> int:
    """Length of ``JSON.stringify(text)`` including the quotes."""
    quoted = encode_basestring(text)
    if text.isascii():
        return len(quoted)
    # Python leaves lone surrogates raw (1 unit); JS escapes them as \udxxx (6 units).
    return utf16_len(quoted) + 5 * len(_SURROGATE.findall(text))


def js_number(value: float | int) -> str:
    """What JS ``String(x)`` / ``JSON.stringify(x)`` prints for a JSON number."""
    if isinstance(value, int):
        if -_MAX_SAFE <= value <= _MAX_SAFE:
            return str(value)
        value = float(value)  # JSON.parse rounds to the nearest double, as float() does
    if value != value or value in (float("inf"), float("-inf")):
        return "null"
    if value == 0:
        return "0"  # includes -0
    sign = "-" if value < 0 else ""
    mantissa, _, exp_text = repr(abs(value)).partition("e")
    int_part, _, frac = mantissa.partition(".")
    digits = int_part + frac
    point = len(int_part) + (int(exp_text) if exp_text else 0)
    stripped = digits.lstrip("0")
    point -= len(digits) - len(stripped)
    digits = stripped.rstrip("0")
    k, n = len(digits), point  # value = 0.digits * 10**n  (ECMA-262 Number::toString)
    if k <= n <= 21:
        body = digits + "0" * (n - k)
    elif 0 < n <= 21:
        body = digits[:n] + "." + digits[n:]
    elif -6 < n <= 0:
        body = "0." + "0" * -n + digits
    else:
        e = n - 1
        exponent = f"e{'+' if e >= 0 else '-'}{abs(e)}"
        body = (digits if k == 1 else digits[0] + "." + digits[1:]) + exponent
    return sign + body


def _scalar_len(value: Any) -> int:
    kind = type(value)
    if kind is bool:
        return 4 if value else 5
    if value is None:
        return 4
    if kind is int or kind is float:
        return len(js_number(value))
    raise TypeError(f"not a JSON value: {kind.__name__}")


# Where orjson may print a number unlike JS: a float (``1.0``, ``1e+21``, ``-0.0``: a digit
# then ``.``, ``e`` or ``E``) or an integer of 16 digits or more (beyond 2^53 JS rounds it
# first). Found in one ``bytes.translate`` of the text: every digit mapped to ``0``, ``e``
# and ``E`` to ``.`` (UTF-8 continuation bytes to 0x80 and 4-byte leads to 0xF0, for the
# UTF-16 length below), then ``find`` for ``0.`` and sixteen zeros, each hit taken as a number
# only where its zeros follow ``:``, ``,`` or ``[`` (and maybe ``-``): where orjson's
# compact text starts a number. Real text ("v2.0", "1.5 s", a hash "3e9f") has such bytes
# inside strings often; a string's digits follow those bytes only in text such as
# "a:1.5", which then costs the exact walk. (A regex over the whole text for the same
# test took longer than the rest of this function.)
_MAPPED = bytes.maketrans(
    b"123456789eE" + bytes(range(0x80, 0xC0)) + bytes(range(0xF0, 0xF8)),
    b"000000000.." + b"\x80" * 0x40 + b"\xf0" * 8,
)
_SIXTEEN_ZEROS = b"0" * 16
_ZERO, _MINUS = 0x30, 0x2D
_NUMBER_AFTER = b":,["


def _starts_number(digits: bytes, end: int) -> bool:
    """Whether the zeros just before ``end`` in ``digits`` begin where a number can."""
    start = end
    while start > 0 and digits[start - 1] == _ZERO:
        start -= 1
    if start > 0 and digits[start - 1] == _MINUS:
        start -= 1
    return start > 0 and digits[start - 1] in _NUMBER_AFTER


def _risky_number(digits: bytes) -> bool:
    at = digits.find(b"0.")  # a digit then ".", "e" or "E"
    while at >= 0:
        if _starts_number(digits, at + 1):
            return True
        at = digits.find(b"0.", at + 2)
    at = digits.find(_SIXTEEN_ZEROS)
    while at >= 0:
        end = at + 16
        if _starts_number(digits, end):
            return True
        while end < len(digits) and digits[end] == _ZERO:
            end += 1  # past this run of zeros
        at = digits.find(_SIXTEEN_ZEROS, end)
    return False


def compact_json_len(text: bytes) -> int | None:
    """``JSON.stringify``'s length for a container, from its ``orjson.dumps`` text, or None
    when that text may differ from JS's in length (numbers, above). orjson prints what
    ``JSON.stringify`` prints otherwise: no spaces, the same escapes (``\\n``, ``\\u001f``;
    U+2028 raw), other characters raw (UTF-8 here, counted in UTF-16 units: a character
    per byte that is not a continuation byte, two for a 4-byte sequence)."""
    mapped = text.translate(_MAPPED)
    if _risky_number(mapped):
        return None
    if text.isascii():
        return len(text)
    return len(text) - mapped.count(0x80) + mapped.count(0xF0)


def _utf16_len_of(text: bytes) -> int:
    """The UTF-16 length of UTF-8 ``text``: a unit per byte that is not a continuation
    byte, two for a 4-byte sequence (``compact_json_len`` without its number check)."""
    if text.isascii():
        return len(text)
    mapped = text.translate(_MAPPED)
    return len(text) - mapped.count(0x80) + mapped.count(0xF0)


def json_len(value: Any) -> int:
    """Length of ``JSON.stringify(value)`` for a value parsed from JSON text.

    Containers: from orjson's text when its numbers print as in JS (``compact_json_len``),
    else walked with a work list, not recursion, so the answer never depends on the
    caller's stack; a value nested deeper than an event may be (``MAX_DEPTH``) raises
    ValueError (orjson refuses anything deeper than 255 levels, which takes the walk)."""
    kind = type(value)
    if kind is str:
        return json_string_len(value)
    if kind is not dict and kind is not list:
        return _scalar_len(value)
    try:
        if kind is dict and _strings_only(value):
            # No number to print unlike JS (a `file` block, say): its text's length.
            return _utf16_len_of(_dumps(value))
        length = compact_json_len(_dumps(value))
    except (TypeError, orjson.JSONEncodeError):  # lone surrogates, integers beyond 64 bits
        length = None
    if length is not None:
        return length
    return walked_json_len(value)


def _strings_only(value: dict[str, Any]) -> bool:
    return all(type(item) is str for item in value.values())


def walked_json_len(value: Any) -> int:
    """``json_len`` by walking the value: exact for every JSON value."""
    kind = type(value)
    if kind is str:
        return json_string_len(value)
    if kind is not dict and kind is not list:
        return _scalar_len(value)
    total = 0
    pending = [(value, 1)]
    while pending:
        container, depth = pending.pop()
        if depth > MAX_DEPTH:
            raise ValueError(f"nested deeper than {MAX_DEPTH} levels")
        if not container:
            total += 2
            continue
        if type(container) is dict:
            # braces + a colon per member + commas between members
            total += 1 + 2 * len(container)
            for key in container:
                total += json_string_len(key)
            items: Any = container.values()
        else:
            total += 1 + len(container)  # brackets + commas between items
            items = container
        for item in items:
            kind = type(item)
            if kind is str:
                total += json_string_len(item)
            elif kind is dict or kind is list:
                pending.append((item, depth + 1))
            else:
                total += _scalar_len(item)
    return total
