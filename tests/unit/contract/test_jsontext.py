"""Parsing JSON text the way JavaScript's ``JSON.parse`` reads it (contract: "Pricing")."""

import contextlib
import math
from typing import Any

import pytest

from stream.contract.errors import Unreadable
from stream.contract.jsontext import loads


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


@pytest.mark.parametrize("depth", [2_000, 100_000])
def test_deep_nesting_is_parsed_or_unreadable_never_a_crash(depth: int) -> None:
    # JSON.parse reads deep arrays; at worst we may refuse them as Unreadable (dead
    # letter). Any other exception escapes the dead-letter path and drops the line's log.
    text = "[" * depth + "]" * depth
    with contextlib.suppress(Unreadable):
        loads(text)


def test_deep_nesting_with_lone_surrogate_is_parsed_or_unreadable() -> None:
    text = "[" * 5_000 + '"\\ud800"' + "]" * 5_000
    with contextlib.suppress(Unreadable):
        loads(text)


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
