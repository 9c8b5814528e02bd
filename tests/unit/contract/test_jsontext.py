"""Parsing JSON text the way JavaScript's ``JSON.parse`` reads it (contract: "Pricing")."""

import math
from typing import Any

import pytest

from stream.contract.errors import Unreadable
from stream.contract.jsontext import (
    MAX_DEPTH,
    PARSE_DEPTH,
    loads,
    might_nest,
    text_depth,
    value_depth,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"a":[1,2.5,"x",null,true]}', {"a": [1, 2.5, "x", None, True]}),
        ('"\\ud800"', "\ud800"),  # lone surrogates are legal in JSON.parse
        ('"\\udc00x\\ud83d"', "\udc00x\ud83d"),
        ('"\\ud83d\\ude00"', "😀"),  # an escaped pair is one astral character
        ('{"\\ud800":1}', {"\ud800": 1}),
        ("-0", 0),
        ('"\u2028\u2029\u0085"', "\u2028\u2029\u0085"),
        ('{"a":1,"a":2}', {"a": 2}),  # the last duplicate wins, as in JS
    ],
)
def test_loads(text: str, expected: Any) -> None:
    assert loads(text) == expected
    assert loads(text.encode()) == expected if text.isascii() else True


@pytest.mark.parametrize(
    "text", ["123456789012345678901234567890", "18446744073709551616", "9007199254740993"]
)
def test_big_integers_read_as_the_double_javascript_reads(text: str) -> None:
    # Exact or not, the value must round to the double JSON.parse makes of it.
    value = loads(text)
    assert type(value) in (int, float)
    assert float(value) == float(text)


@pytest.mark.parametrize(("text", "sign"), [("1e400", 1), ("-1e400", -1), ("[1e400]", 1)])
def test_overflowing_numbers_are_infinite(text: str, sign: int) -> None:
    value = loads(text)
    number = value[0] if isinstance(value, list) else value
    assert math.isinf(number)
    assert math.copysign(1, number) == sign


@pytest.mark.parametrize(
    "text",
    ["", "{", "NaN", "Infinity", "-Infinity", "[NaN]", "{'a':1}", "[1,]", "undefined", "01"],
)
def test_invalid_json_is_unreadable(text: str) -> None:
    with pytest.raises(Unreadable, match="not JSON"):
        loads(text)


def test_invalid_utf8_is_unreadable() -> None:
    with pytest.raises(Unreadable):
        loads(b'{"a":"\xff\xfe"}')


def _nested(depth: int, inner: str = "") -> str:
    return "[" * depth + inner + "]" * depth


@pytest.mark.parametrize("inner", ["", '"\\ud800"', "1e400"])  # orjson, and its fallback
def test_nesting_has_one_fixed_bound_on_either_parser(inner: str) -> None:
    assert value_depth(loads(_nested(MAX_DEPTH, inner))) == MAX_DEPTH
    for depth in (MAX_DEPTH + 1, PARSE_DEPTH, PARSE_DEPTH + 1, 100_000):
        with pytest.raises(Unreadable, match=f"nested deeper than {MAX_DEPTH} levels"):
            loads(_nested(depth, inner))


@pytest.mark.parametrize("inner", ["", '"\\ud800"'])
def test_a_message_parses_to_the_parse_depth_whatever_the_callers_stack(inner: str) -> None:
    # The worker calls from a deeper stack than `stream fold`; depth alone decides.
    def at_stack(frames: int) -> Any:
        if frames:
            return at_stack(frames - 1)
        return loads(_nested(PARSE_DEPTH, inner), PARSE_DEPTH)

    for frames in (0, 400, 800):
        assert value_depth(at_stack(frames)) == PARSE_DEPTH


@pytest.mark.parametrize(
    ("squares", "braces"),
    [(0, 0), (20, 15), (256, 256), (257, 256), (513, 0), (0, 513), (512, 0), (300, 300)],
)
def test_might_nest_counts_openers_past_the_bound(squares: int, braces: int) -> None:
    # Openers spread through a long line (padding between them), as in a real event.
    text = "x" * 2000 + "[ ".join([""] * (squares + 1)) + "{ ".join([""] * (braces + 1))
    expected = squares + braces > MAX_DEPTH
    assert might_nest(text) is expected
    assert might_nest(text.encode()) is expected


def test_brackets_inside_strings_do_not_count_as_nesting() -> None:
    text = '{"a":"' + "[" * 5_000 + '\\"{"}'
    assert text_depth(text) == 1
    assert text_depth(text.encode()) == 1
    assert loads(text) == {"a": "[" * 5_000 + '"{'}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("18446744073709551615", 18446744073709551615),  # the largest orjson keeps exact
        ("-9223372036854775808", -9223372036854775808),
        ("18446744073709551616", 1.8446744073709552e19),
        ("-9223372036854775809", -9.223372036854776e18),
        ("123456789012345678901234567890", 1.2345678901234568e29),
    ],
)
def test_big_integers_read_the_same_with_or_without_the_fallback(
    text: str, expected: float
) -> None:
    # orjson reads integers past 64 bits as doubles; a lone surrogate elsewhere in the
    # document sends it to the stdlib parser, which must read them the same way.
    fast = loads(f"[{text}]")[0]
    slow = loads(f'[{text},"\\ud800"]')[0]
    assert (fast, type(fast)) == (expected, type(expected))
    assert (slow, type(slow)) == (expected, type(expected))


@pytest.mark.parametrize(
    "text",
    [
        b'[1e400,-1e400,"\\ud800x",123456789012345678901234567890,{"a":1.5}]',
        b'{"a":[1,2.0,-0.0,1e21,1e-7],"b":"\\u0001\\ud83d\\ude00"}',
        b'"\\udfff\\ud800"',
    ],
)
def test_dumps_reads_back_as_the_same_value(text: bytes) -> None:
    from stream.contract.jsontext import dumps
    from stream.pricing.jslength import json_len

    value = loads(text)
    again = loads(dumps(value))
    assert json_len(again) == json_len(value)
    assert repr(again) == repr(value) or again == value
