"""JavaScript-exact lengths (contract: "Pricing"): UTF-16 units and ``JSON.stringify`` output.

Expected values were printed by Node (``JSON.stringify(JSON.parse(text))``), so every row
is a JavaScript fact, not a restatement of our implementation.
"""

import random
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from stream.contract.jsontext import loads
from stream.pricing.jslength import (
    compact_json_len,
    js_number,
    json_len,
    json_string_len,
    utf16_len,
    walked_json_len,
)
from tests.generators.sessions import encode_json, nasty_value


@pytest.mark.parametrize(
    ("text", "units"),
    [
        ("", 0),
        ("abcd", 4),
        ("é", 1),
        ("中文字", 3),
        ("😀", 2),  # astral: a surrogate pair in UTF-16
        ("😀😀😀", 6),
        ("\U0010ffff", 2),
        ("👩\u200d💻", 5),  # ZWJ sequence: 2 + 1 + 2
        ("🇯🇵", 4),
        ("e\u0301", 2),  # combining mark: two code units
        ("\ud800", 1),  # a lone surrogate is one unit
        ("a\udc00b", 3),
        ("\u2028\u0085\x7f", 3),
    ],
)
def test_utf16_len_counts_code_units(text: str, units: int) -> None:
    assert utf16_len(text) == units


@pytest.mark.parametrize(
    ("text", "length"),
    [
        ("", 2),
        ("abc", 5),
        ('"', 4),
        ("\\", 4),
        ("/", 3),  # JS does not escape the solidus
        ("\n", 4),
        ("\b\f\n\r\t", 12),  # the five short escapes
        ("\x00", 8),  # other control characters: \u00xx
        ("\x01\x1f", 14),
        ("\x7f", 3),  # DEL is not a control character for JSON
        ("\u2028", 3),  # JSON.stringify leaves U+2028/U+2029 raw
        ("é中", 4),  # other non-ASCII is not escaped
        ("😀", 4),
        ("\ud800", 8),  # a lone surrogate escapes to \ud800: 6 units
        ("\udc00x\ud83d", 15),
        ("a\udfffb", 10),
    ],
)
def test_json_string_len_is_json_stringify_length(text: str, length: int) -> None:
    assert json_string_len(text) == length


@pytest.mark.parametrize(
    ("literal", "printed"),
    [
        ("1.0", "1"),
        ("100.0", "100"),
        ("1e-7", "1e-7"),
        ("0.0000001", "1e-7"),
        ("-1e-7", "-1e-7"),
        ("1e-6", "0.000001"),
        ("1.2e-5", "0.000012"),
        ("1e20", "100000000000000000000"),
        ("1e21", "1e+21"),
        ("-1e+21", "-1e+21"),
        ("1000000000000000000000", "1e+21"),
        ("1e16", "10000000000000000"),
        ("1E+2", "100"),
        ("0e0", "0"),
        ("-0", "0"),
        ("-0.0", "0"),
        ("0", "0"),
        ("0.1", "0.1"),
        ("1.5", "1.5"),
        ("4.35", "4.35"),
        ("0.30000000000000004", "0.30000000000000004"),
        ("123e-20", "1.23e-18"),
        ("2.5E-7", "2.5e-7"),
        ("5e-324", "5e-324"),
        ("1.7976931348623157e308", "1.7976931348623157e+308"),
        ("9.999999999999999e22", "1e+23"),
        ("123456789012345680000", "123456789012345680000"),
        # integers beyond 2**53 are rounded to the nearest double first
        ("9007199254740992", "9007199254740992"),
        ("9007199254740993", "9007199254740992"),
        ("-9007199254740993", "-9007199254740992"),
        ("12345678901234567891", "12345678901234567000"),
        ("18446744073709551616", "18446744073709552000"),
        ("123456789012345678901234567890", "1.2345678901234568e+29"),
        ("1e400", "null"),  # Infinity prints as null
    ],
)
def test_numbers_print_like_javascript(literal: str, printed: str) -> None:
    value = loads(literal)
    assert js_number(value) == printed
    assert json_len(value) == len(printed)


@pytest.mark.parametrize(
    ("value", "printed"),
    [
        (1.0, "1"),
        (-0.0, "0"),
        (0, "0"),
        (2**53, "9007199254740992"),
        (2**53 + 1, "9007199254740992"),
        (-(2**53) - 1, "-9007199254740992"),
        (10**21, "1e+21"),
        (float("inf"), "null"),
        (float("-inf"), "null"),
        (float("nan"), "null"),
    ],
)
def test_js_number_on_python_values(value: float, printed: str) -> None:
    assert js_number(value) == printed


@pytest.mark.parametrize(
    ("document", "length"),
    [
        ('"\\ud800"', 8),
        ('"\\udc00x\\ud83d"', 15),
        ('"😀"', 4),
        ('"\\u2028"', 3),
        ('"\\u0001\\u001f"', 14),
        ('"\\b\\f\\n\\r\\t"', 12),
        ('"\\u007f"', 3),
        ('"é中"', 4),
        ('{"a":[1,2,{"b":null}]}', 22),
        ('{"\\ud800":true}', 15),  # keys escape like values
        ("[1.0,-0,1e21,1e-7]", 16),
        ('{"k":"\\"\\\\\\/"}', 13),
        ("[]", 2),
        ("{}", 2),
        ("[[],{}]", 7),
        ('{"a":1,"a":2}', 7),  # JSON.parse keeps the last duplicate
        ('{"2":1,"1":2}', 13),  # key order does not change a length
        ("[9007199254740993,12345678901234567891]", 39),
        ("[false,true,null]", 17),
        ('  { "spaced" : [ 1 , 2 ] }  ', 16),  # no whitespace in the output
    ],
)
def test_json_len_is_stringify_of_parse(document: str, length: int) -> None:
    assert json_len(loads(document)) == length


def test_json_len_rejects_non_json_values() -> None:
    with pytest.raises(TypeError):
        json_len(object())


@pytest.mark.parametrize(
    ("document", "walked"),
    [
        ('{"a":"x"}', False),
        ('{"a":[1,2,-3],"b":{"c":123456789012345}}', False),  # 15 digits: exact in JS
        ('{"a":1234567890123456}', True),  # 16 digits: may round in JS
        ('{"a":1.0}', True),
        ("[0.5]", True),
        ('{"a":[1,-0.0]}', True),
        ('{"a":1e21}', True),
        ('{"a":"1.5, [2.5"}', True),  # number-like text in a string: the exact walk, same length
        ('{"a":"v2.0 took 1.5 s, hash 3e9f, 1E-9"}', False),  # inside strings only
        ('{"1.0":"x","k":["2e3","12345678901234567"]}', False),  # keys and strings
        ('{"a":"x:1.5"}', True),  # a string that reads like a member: walked, same length
        ('{"a":"x","b":[1,2.5]}', True),
        ("[-1.5]", True),
        ('{"a":-12345678901234567}', True),
    ],
)
def test_json_len_takes_orjson_text_only_when_its_numbers_print_as_in_js(
    document: str, walked: bool
) -> None:
    value = loads(document)
    assert (compact_json_len(orjson.dumps(value)) is None) == walked
    assert json_len(value) == walked_json_len(value)


def _values(rng: random.Random) -> Any:
    text = encode_json(nasty_value(rng))  # number, key and string traps, duplicate keys
    return loads(text)


def test_json_len_equals_the_walk_on_generated_values() -> None:
    rng = random.Random(15)
    checked = 0
    for _ in range(3_000):
        value = _values(rng)
        if type(value) in (dict, list):
            assert json_len(value) == walked_json_len(value), value
            checked += 1
    assert checked > 500


_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=30,
)


@given(st.lists(_json, max_size=5) | st.dictionaries(st.text(), _json, max_size=5))
def test_json_len_equals_the_walk(value: Any) -> None:
    assert json_len(value) == walked_json_len(value)
