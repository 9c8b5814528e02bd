"""The heuristic estimator (contract: "Pricing"): block, message, system-prompt and envelope prices.

Message/content figures were cross-checked against the reference estimator
(``estimateContent``/``estimateMessage`` of dsh-token-meter 0.1.0-rc.8).
"""

from typing import Any

import pytest

from stream.contract.errors import ContractError
from stream.contract.jsontext import loads
from stream.pricing.estimate import (
    BLOCK_OVERHEAD,
    CHARS_PER_TOKEN,
    ROLE_OVERHEAD,
    ceil4,
    price_content,
    price_envelope_system,
    price_envelope_tools,
    price_message,
    price_system_message,
)


def test_constants() -> None:
    assert (CHARS_PER_TOKEN, BLOCK_OVERHEAD, ROLE_OVERHEAD) == (4, 4, 4)


@pytest.mark.parametrize(("n", "tokens"), [(0, 0), (1, 1), (3, 1), (4, 1), (5, 2), (8, 2), (9, 3)])
def test_ceil4(n: int, tokens: int) -> None:
    assert ceil4(n) == tokens


# --- the contract's examples ("Pricing") ------------------------------------------------------


def test_spec_example_user_abcd_is_9() -> None:
    assert price_message({"role": "user", "content": [{"type": "text", "text": "abcd"}]}) == 9


def test_spec_example_system_you_are_terse_is_8() -> None:
    message = {"role": "system", "content": [{"type": "text", "text": "You are terse."}]}
    assert price_system_message(message) == 8
    assert price_envelope_system("You are terse.") == 8


def test_spec_example_empty_system_is_0() -> None:
    assert price_system_message({"role": "system", "content": [{"type": "text", "text": ""}]}) == 0
    assert price_envelope_system("") == 0


def test_spec_example_tool_call_block_only_is_7() -> None:
    block = {"type": "tool-call", "name": "bash", "arguments": '{"a":1}'}
    assert price_content([block]) == 7


# --- content and message prices (reference figures) -------------------------------------------

CONTENT_CASES = [
    ('[{"type":"text","text":"abcd"}]', 5),
    ('[{"type":"text","text":""}]', 4),
    ('[{"type":"text","text":"abcde"}]', 6),
    ('[{"type":"text","text":"😀"}]', 5),
    ('[{"type":"text","text":"😀😀😀"}]', 6),  # 6 UTF-16 units, not 3 code points
    ('[{"type":"text","text":"中文字"}]', 5),
    ('[{"type":"reasoning","text":"thinking..."}]', 7),
    ('[{"type":"tool-call","name":"bash","arguments":"{\\"a\\":1}"}]', 7),
    ('[{"type":"tool-call","name":"","arguments":""}]', 4),
    ('[{"type":"tool-result","content":[{"type":"text","text":"ok"}]}]', 9),
    ('[{"type":"tool-result","content":[]}]', 4),
    ('[{"type":"image","url":"x"}]', 11),  # unknown block: 4 + ceil4(len(JSON(block)))
    ('[{"type":"image","n":1.0,"m":1e21,"k":1e-7}]', 15),  # JSON as JS prints it
    ('[{"type":"file","data":"\\u0001"}]', 12),
    ('[{"type":"file","data":"\\ud800"}]', 12),  # lone surrogate escapes to 6
    ('[{"type":"file","big":9007199254740993}]', 14),  # rounded like a double
    (
        '[{"type":"text","text":"ab"},'
        '{"type":"tool-call","name":"read_file","arguments":"{\\"path\\":\\"/tmp/x\\"}"},'
        '{"type":"x"}]',
        24,
    ),
    ("[]", 0),
]


@pytest.mark.parametrize(("blocks", "tokens"), CONTENT_CASES)
def test_price_content(blocks: str, tokens: int) -> None:
    assert price_content(loads(blocks)) == tokens


@pytest.mark.parametrize(("blocks", "tokens"), CONTENT_CASES)
def test_price_message_adds_role_overhead(blocks: str, tokens: int) -> None:
    assert price_message({"role": "user", "content": loads(blocks)}) == tokens + 4


def test_nested_tool_result_prices_recursively() -> None:
    inner = {"type": "tool-result", "content": [{"type": "text", "text": "abcd"}]}
    outer = {"type": "tool-result", "content": [inner]}
    assert price_content([outer]) == (5 + 4) + 4


# --- system/message prices --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("blocks", "tokens"),
    [
        ("[]", 0),  # an empty prompt is free: no role overhead
        ('[{"type":"text","text":""}]', 0),
        ('[{"type":"text","text":""},{"type":"text","text":""}]', 0),
        ('[{"type":"text","text":"You are terse."}]', 8),
        ('[{"type":"text","text":"ab"},{"type":"text","text":"cd"}]', 5),  # chars summed first
        ('[{"type":"text","text":"a"},{"type":"text","text":"b"}]', 5),  # not 2 blocks' ceil
        ('[{"type":"text","text":"😀"}]', 5),  # 2 units
        ('[{"type":"image","url":"x"}]', 11),  # 26 JSON chars -> 7 + 4
        ('[{"type":"text","text":"abcd"},{"type":"image","url":"x"}]', 12),  # 4 + 26 = 30
        ('[{"type":"reasoning","text":"ab"}]', 12),  # non-text blocks count their JSON: 32
        ('[{"type":"x","v":1.0}]', 9),  # {"type":"x","v":1} is 18 chars
    ],
)
def test_price_system_message(blocks: str, tokens: int) -> None:
    assert price_system_message({"role": "system", "content": loads(blocks)}) == tokens


# --- request envelope -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("system", "tokens"),
    [(None, 0), ("", 0), ("You are terse.", 8), ("a", 5), ("😀😀😀", 6), ("abcd" * 10, 14)],
)
def test_price_envelope_system(system: str | None, tokens: int) -> None:
    assert price_envelope_system(system) == tokens


TOOLS = [{"name": "bash", "description": "run", "parameters": {"type": "object"}}]


@pytest.mark.parametrize(
    ("tools", "tokens"),
    [
        (None, 0),
        ([], 0),  # canonical: an empty tool list counts as absent
        (TOOLS, 21),  # 68 JSON chars -> 17 + 4 (reference figure)
        (loads('[{"n":1.0}]'), 7),  # [{"n":1}] is 9 chars
        (loads('[{"n":"\\ud800"}]'), 8),  # [{"n":"\ud800"}] is 16 chars; orjson cannot dump it
        (loads("[123456789012345678901234567890]"), 10),  # [1.2345678901234568e+29]: 24
    ],
)
def test_price_envelope_tools(tools: list[Any] | None, tokens: int) -> None:
    assert price_envelope_tools(tools) == tokens
    assert price_envelope_tools(tools) == tokens  # a repeat (memoised or not) agrees


def test_tools_price_distinguishes_lists_that_look_alike() -> None:
    # [{"n":1}] either way (9 chars); [{"n":"a…"}] is 10 + n chars
    assert price_envelope_tools([{"n": 1}]) == price_envelope_tools([{"n": 1.0}]) == 7
    assert price_envelope_tools([{"n": "a" * 38}]) == 16
    assert price_envelope_tools([{"n": "a" * 39}]) == 17
    assert price_envelope_tools([{"n": "\ud800" + "a" * 33}]) == 17  # lone surrogate: 6


# --- malformed content ("Validation": text/name/arguments strings, content a list) ------------


@pytest.mark.parametrize(
    "blocks",
    [
        [{"type": "text"}],
        [{"type": "text", "text": None}],
        [{"type": "text", "text": 5}],
        [{"type": "text", "text": ["a"]}],
        [{"type": "reasoning", "text": {"t": "a"}}],
        [{"type": "tool-call", "name": 1, "arguments": "{}"}],
        [{"type": "tool-call", "arguments": "{}"}],
        [{"type": "tool-call", "name": "bash", "arguments": {"a": 1}}],
        [{"type": "tool-call", "name": "bash"}],
        [{"type": "tool-result", "content": "not a list"}],
        [{"type": "tool-result"}],
        [{"type": "tool-result", "content": [{"type": "text", "text": 1}]}],
        ["a string block"],
        [None],
        [[{"type": "text", "text": "nested list"}]],
    ],
)
def test_malformed_blocks_are_contract_errors(blocks: list[Any]) -> None:
    with pytest.raises(ContractError):
        price_content(blocks)
    with pytest.raises(ContractError):
        price_message({"role": "user", "content": blocks})


@pytest.mark.parametrize("content", [None, "abcd", {"type": "text", "text": "a"}, 5])
def test_content_not_a_list_is_a_contract_error(content: Any) -> None:
    with pytest.raises(ContractError, match="list"):
        price_message({"role": "user", "content": content})
    with pytest.raises(ContractError, match="list"):
        price_system_message({"role": "system", "content": content})


@pytest.mark.parametrize("message", [None, "abcd", [], 5])
def test_message_not_an_object_is_a_contract_error(message: Any) -> None:
    with pytest.raises(ContractError):
        price_message(message)
    with pytest.raises(ContractError):
        price_system_message(message)


@pytest.mark.parametrize(
    "blocks",
    [[{"type": "text", "text": 5}], [{"type": "text"}], ["a string"], [None]],
)
def test_malformed_system_blocks_are_contract_errors(blocks: list[Any]) -> None:
    with pytest.raises(ContractError):
        price_system_message({"role": "system", "content": blocks})
