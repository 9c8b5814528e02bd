"""Parse JSON text the way JavaScript's ``JSON.parse`` reads it.

orjson is the fast path. It refuses two inputs that ``JSON.parse`` accepts: escaped lone
surrogates (``"\\ud800"``) and numbers that overflow a double (``1e400`` is ``Infinity`` in
JS). Those lines fall back to the stdlib parser, configured to refuse what JS refuses
(``NaN``/``Infinity`` literals). Integers are kept exact here; pricing rounds them to
doubles where JavaScript would have.
"""

import json
from typing import Any

import orjson

from stream.contract.errors import Unreadable


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


_fallback = json.JSONDecoder(parse_constant=_reject_constant)


def loads(text: bytes | str) -> Any:
    """Parse one JSON document; raise ``Unreadable`` with the parser's reason."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as fast_error:
        try:
            return _fallback.decode(text.decode() if isinstance(text, bytes) else text)
        except (ValueError, UnicodeDecodeError):
            raise Unreadable(f"not JSON: {fast_error}") from None
        except RecursionError:
            raise Unreadable("not JSON we can read: nested too deeply") from None


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
    return "".join(chunks(value, 0))


def dumps(value: Any) -> bytes:
    """Serialise a value ``loads`` produced so that ``JSON.parse`` reads back the same value."""
    try:
        return orjson.dumps(value)
    except (TypeError, orjson.JSONEncodeError):  # lone surrogates, ints past 64 bits, ±inf
        return _slow_dumps(value).encode()
