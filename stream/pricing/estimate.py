"""The fixed-density heuristic estimator, priced exactly as the reference does.

Contract: "Pricing".

Every consumer (the projections, the positional X-ray, the tools) prices through this
module, so the same content is always the same number of tokens. The estimator
validates what it reads: a block whose ``text`` is not a string is a broken contract,
and pricing it anyway would publish a number nobody can reproduce.
"""

from typing import Any

import orjson

from stream.contract.errors import ContractError
from stream.pricing.jslength import compact_json_len, json_len, utf16_len

CHARS_PER_TOKEN = 4
BLOCK_OVERHEAD = 4
ROLE_OVERHEAD = 4


def ceil4(length: int) -> int:
    """ceil(length / CHARS_PER_TOKEN) for a non-negative length."""
    return -(-length // CHARS_PER_TOKEN)


def _string(block: dict[str, Any], field: str) -> str:
    value = block.get(field)
    if type(value) is not str:
        raise ContractError(f"{block.get('type')} block: {field} must be a string")
    return value


def _blocks(content: Any, where: str) -> list[Any]:
    if type(content) is not list:
        raise ContractError(f"{where} must be a list of blocks")
    return content


def price_content(content: Any, where: str = "content") -> int:
    """Sum of block prices, each including its structural overhead."""
    tokens = 0
    for block in _blocks(content, where):
        if type(block) is not dict:
            raise ContractError(f"{where}: every block must be an object")
        kind = block.get("type")
        if kind == "text" or kind == "reasoning":
            tokens += ceil4(utf16_len(_string(block, "text"))) + BLOCK_OVERHEAD
        elif kind == "tool-call":
            tokens += (
                ceil4(utf16_len(_string(block, "name")))
                + ceil4(utf16_len(_string(block, "arguments")))
                + BLOCK_OVERHEAD
            )
        elif kind == "tool-result":
            tokens += price_content(block.get("content"), "tool-result content") + BLOCK_OVERHEAD
        else:
            # Unknown block types keep a conservative structural price: their JSON.
            tokens += BLOCK_OVERHEAD + ceil4(json_len(block))
    return tokens


def price_message(message: Any) -> int:
    """A model-visible message: its blocks plus role framing."""
    if type(message) is not dict:
        raise ContractError("message must be an object")
    return price_content(message.get("content"), "message content") + ROLE_OVERHEAD


def price_system_message(message: Any) -> int:
    """A ``system/message`` prices its characters as one prompt; an empty prompt is free."""
    if type(message) is not dict:
        raise ContractError("message must be an object")
    chars = 0
    for block in _blocks(message.get("content"), "message content"):
        if type(block) is not dict:
            raise ContractError("message content: every block must be an object")
        if block.get("type") == "text":
            chars += utf16_len(_string(block, "text"))
        else:
            chars += json_len(block)
    return 0 if chars == 0 else ceil4(chars) + ROLE_OVERHEAD


# The last system prompt priced and its price, one tuple (swapped whole). Harnesses re-log
# the same prompt in every request envelope; comparing it with the last one (a memcmp) is
# much cheaper than its UTF-16 length when it holds non-BMP characters (~4 us a kB).
_last_system: tuple[str, int] = ("", 0)


def price_envelope_system(system: str | None) -> int:
    """The request envelope's system prompt; absent (or canonically empty) is 0."""
    global _last_system
    if not system:
        return 0
    last = _last_system
    if last[0] == system:
        return last[1]
    price = ceil4(utf16_len(system)) + ROLE_OVERHEAD
    _last_system = (system, price)
    return price


def price_envelope_tools(tools: list[Any] | None) -> int:
    """The request envelope's tool schemas as JSON; absent (or empty) is 0."""
    if not tools:
        return 0
    # Harnesses re-log the same tool list on every request; pricing it walks the whole
    # schema in Python, so memoise by its orjson text. Equal text means equal JS value
    # (orjson prints shortest round-trip floats), hence an equal JS length.
    try:
        key = orjson.dumps(tools)
    except (TypeError, orjson.JSONEncodeError):  # lone surrogates, integers beyond 64 bits
        return ceil4(json_len(tools)) + BLOCK_OVERHEAD
    price = _TOOLS_PRICES.get(key)
    if price is None:
        if len(_TOOLS_PRICES) >= _TOOLS_MEMO_SIZE:
            _TOOLS_PRICES.clear()
        length = compact_json_len(key)  # the text is JSON.stringify's, numbers aside
        if length is None:
            length = json_len(tools)
        price = _TOOLS_PRICES[key] = ceil4(length) + BLOCK_OVERHEAD
    return price


_TOOLS_MEMO_SIZE = 256
_TOOLS_PRICES: dict[bytes, int] = {}
