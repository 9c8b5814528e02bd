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
