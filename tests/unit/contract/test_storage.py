"""dsh JSONL storage rows (contract: "Session logs"): packed chunk rows expand to the exact events.

Expected expansions were printed by the reference decoder (``decodeStorageRecord`` of
dsh-session 0.1.0-rc.8). Malformed rows are corrupt storage: ``Unreadable``, never a
partial or guessed expansion.
"""

import copy
from typing import Any

import pytest

from stream.contract.errors import Unreadable
from stream.contract.events import read_event
from stream.contract.storage import decode_line, expand, session_id_of

MAX_SAFE = 2**53 - 1


def chunk_event(seq: int, time: int, turn: int, step: int, chunk: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "assistant/chunk",
        "seq": seq,
        "time": time,
        "data": {"turn": turn, "step": step, "chunk": chunk},
    }


TEXT_ROW = {
    "type": "text-chunks",
    "seq0": 10,
    "time0": 1000,
    "data": {"turn": 1, "step": 2, "index": 0, "dt": [5, -3], "texts": ["Hel", "lo", "😀"]},
}
REASONING_ROW = {
    "type": "reasoning-chunks",
    "seq0": 0,
    "time0": 7,
    "data": {"turn": 0, "step": 0, "index": 1, "dt": [], "texts": ["think"]},
}
TOOL_ROW = {
    "type": "tool-call-chunks",
    "seq0": 4,
    "time0": 50,
    "data": {
        "turn": 0,
        "step": 1,
        "index": 2,
        "id": "call_1",
        "name": "bash",
        "dt": [1],
        "args": ['{"a"', ":1}"],
    },
}
TOOL_ROW_NO_NAME = {
    "type": "tool-call-chunks",
    "seq0": 4,
    "time0": 50,
    "data": {"turn": 0, "step": 1, "index": 2, "id": "call_1", "dt": [0], "args": ["x", ""]},
}

EXPANSIONS = [
    (
        TEXT_ROW,
        [
            chunk_event(10, 1000, 1, 2, {"type": "text-delta", "index": 0, "text": "Hel"}),
            chunk_event(11, 1005, 1, 2, {"type": "text-delta", "index": 0, "text": "lo"}),
            chunk_event(12, 1002, 1, 2, {"type": "text-delta", "index": 0, "text": "😀"}),
        ],
    ),
    (
        REASONING_ROW,
        [chunk_event(0, 7, 0, 0, {"type": "reasoning-delta", "index": 1, "text": "think"})],
    ),
    (
        TOOL_ROW,
        [
            chunk_event(
                4,
                50,
                0,
                1,
                {
                    "type": "tool-call-delta",
                    "index": 2,
                    "id": "call_1",
                    "name": "bash",
                    "argumentsDelta": '{"a"',
                },
            ),
            chunk_event(
                5,
                51,
                0,
                1,
                {
                    "type": "tool-call-delta",
                    "index": 2,
                    "id": "call_1",
                    "name": "bash",
                    "argumentsDelta": ":1}",
                },
            ),
        ],
    ),
    (
        TOOL_ROW_NO_NAME,  # no name in the row: no name key in the chunks
        [
            chunk_event(
                4,
                50,
                0,
                1,
                {"type": "tool-call-delta", "index": 2, "id": "call_1", "argumentsDelta": "x"},
            ),
            chunk_event(
                5,
                50,
                0,
                1,
                {"type": "tool-call-delta", "index": 2, "id": "call_1", "argumentsDelta": ""},
            ),
        ],
    ),
]


@pytest.mark.parametrize(("row", "events"), EXPANSIONS)
def test_chunk_rows_expand_to_the_exact_events(row: dict[str, Any], events: list[Any]) -> None:
    before = copy.deepcopy(row)
    assert expand(row) == events
    assert row == before  # the row is not mutated


@pytest.mark.parametrize(("row", "events"), EXPANSIONS)
def test_expanded_chunks_are_readable_events(row: dict[str, Any], events: list[Any]) -> None:
    for raw_event, expected in zip(expand(row), events, strict=True):
        event = read_event(raw_event)
        assert event.error is None
        assert event.surface_error is None
        assert (event.type, event.seq) == ("assistant/chunk", expected["seq"])


@pytest.mark.parametrize(
    ("numbers", "dt", "reason"),
    [
        ((10, 1000), [5], "dt length 1 does not match 3 members"),
        ((10.0, 1000), [5], "dt length 1 does not match 3 members"),
        ((10, 1000), [5.0], "dt length 1 does not match 3 members"),
        ((MAX_SAFE - 1, 1000), [5, 1], "member seqs must stay safe integers"),
        ((MAX_SAFE - 1.0, 1000), [5, 1], "member seqs must stay safe integers"),
        ((10, MAX_SAFE - 2), [5, -3], "member times must stay safe integers"),
        ((10, MAX_SAFE - 2), [5.0, -3], "member times must stay safe integers"),
        ((10, 1000), [5, MAX_SAFE + 1], "dt must be an array of safe integers"),
    ],
)
def test_a_malformed_row_gives_the_same_reason_whatever_its_numbers_are_written_as(
    numbers: tuple[float, float], dt: list[Any], reason: str
) -> None:
    """Integers throughout take a one-pass check; any float takes the general one: the
    same checks in the same order."""
    seq0, time0 = numbers
    data: dict[str, Any] = {**TEXT_ROW["data"], "dt": dt}  # type: ignore[dict-item]
    row = {**TEXT_ROW, "seq0": seq0, "time0": time0, "data": data}
    with pytest.raises(Unreadable, match=f"malformed text-chunks storage row: {reason}$"):
        expand(row)


def test_a_row_of_integers_is_kept_as_read_and_one_with_floats_as_integers() -> None:
    as_read = decode_line(TEXT_ROW)
    assert as_read.row is TEXT_ROW
    data: dict[str, Any] = {**TEXT_ROW["data"], "dt": [5.0, -3]}
    floats = {**TEXT_ROW, "time0": 1000.0, "data": data}
    normalised = decode_line(floats).row
    assert normalised == TEXT_ROW
    assert type(normalised["time0"]) is int
    assert [type(gap) for gap in normalised["data"]["dt"]] == [int, int]


def test_integral_float_fields_read_like_javascript() -> None:
    # JSON.parse("1.0") is the integer 1: the reference accepts and expands this row.
    row = {
        "type": "text-chunks",
        "seq0": 1.0,
        "time0": 2.0,
        "data": {"turn": 0, "step": 0, "index": 0, "dt": [1.0], "texts": ["a", "b"]},
    }
    events = expand(row)
    assert [(e["seq"], e["time"]) for e in events] == [(1, 2), (2, 3)]


@pytest.mark.parametrize(
    "value",
    [
        {"type": "user/message", "seq": 0, "time": 0, "data": {}, "surfaceOp": "append"},
        {"type": "assistant/chunk", "seq": 3, "time": 0, "data": {"chunk": {"type": "usage"}}},
        {"type": "session", "id": "abc"},
        {"type": "text-chunk", "seq0": 0},  # not a row tag
        {"type": ["text-chunks"], "seq": 0},  # unhashable type: still just a value
        {"type": {"t": 1}, "seq": 0},
        {"no": "type"},
        [1, 2],
        "text",
        5,
        None,
    ],
)
def test_other_values_pass_through_as_themselves(value: Any) -> None:
    assert expand(value) == [value]


def _with(row: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(row)
    target = out
    for key in path[:-1]:
        target = target[key]
    if value is _DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return out


_DELETE = object()

MALFORMED = [
    # envelope: exactly type/seq0/time0/data
    (TEXT_ROW, ("extra",), 1),
    (TEXT_ROW, ("seq0",), _DELETE),
    (TEXT_ROW, ("time0",), _DELETE),
    (TEXT_ROW, ("data",), _DELETE),
    (TEXT_ROW, ("seq0",), -1),
    (TEXT_ROW, ("seq0",), 1.5),
    (TEXT_ROW, ("seq0",), True),
    (TEXT_ROW, ("seq0",), "10"),
    (TEXT_ROW, ("seq0",), None),
    (TEXT_ROW, ("seq0",), MAX_SAFE + 1),
    (TEXT_ROW, ("time0",), 1.5),
    (TEXT_ROW, ("time0",), "1000"),
    (TEXT_ROW, ("time0",), MAX_SAFE + 1),
    (TEXT_ROW, ("data",), None),
    (TEXT_ROW, ("data",), []),
    (TEXT_ROW, ("data",), "x"),
    # payload
    (TEXT_ROW, ("data", "texts"), _DELETE),
    (TEXT_ROW, ("data", "texts"), []),
    (TEXT_ROW, ("data", "texts"), "Hello"),
    (TEXT_ROW, ("data", "texts"), ["a", 1, "b"]),
    (TEXT_ROW, ("data", "texts"), ["a", None, "b"]),
    # dt: one safe integer per gap
    (TEXT_ROW, ("data", "dt"), _DELETE),
    (TEXT_ROW, ("data", "dt"), [5]),
    (TEXT_ROW, ("data", "dt"), [5, -3, 1]),
    (TEXT_ROW, ("data", "dt"), [5, 1.5]),
    (TEXT_ROW, ("data", "dt"), [5, "1"]),
    (TEXT_ROW, ("data", "dt"), [5, True]),
    (TEXT_ROW, ("data", "dt"), "5,-3"),
    # turn/step/index: numbers
    (TEXT_ROW, ("data", "turn"), _DELETE),
    (TEXT_ROW, ("data", "step"), "2"),
    (TEXT_ROW, ("data", "index"), None),
    (TEXT_ROW, ("data", "index"), True),
    # data keys are exact
    (TEXT_ROW, ("data", "extra"), 1),
    (TEXT_ROW, ("data", "args"), ["a", "b", "c"]),
    (REASONING_ROW, ("data", "id"), "call_1"),
    (TOOL_ROW, ("data", "texts"), ['{"a"', ":1}"]),
    (TOOL_ROW, ("data", "extra"), None),
    # tool-call rows: id a string, name a string when present
    (TOOL_ROW, ("data", "id"), _DELETE),
    (TOOL_ROW, ("data", "id"), None),
    (TOOL_ROW, ("data", "id"), 7),
    (TOOL_ROW, ("data", "name"), None),
    (TOOL_ROW, ("data", "name"), 5),
    (TOOL_ROW, ("data", "args"), _DELETE),
    (TOOL_ROW, ("data", "args"), ["a", {"b": 1}]),
    # member seqs and times must stay safe integers
    (TOOL_ROW, ("seq0",), MAX_SAFE),
    (TEXT_ROW, ("time0",), MAX_SAFE - 2),
    (TEXT_ROW, ("data", "dt"), [MAX_SAFE + 1, 0]),
    (TEXT_ROW, ("data", "dt"), [MAX_SAFE, 1]),
]


@pytest.mark.parametrize(
    ("row", "path", "value"),
    MALFORMED,
    ids=[f"{r['type']}:{'.'.join(p)}={'<del>' if v is _DELETE else v!r}" for r, p, v in MALFORMED],
)
def test_malformed_rows_are_unreadable(
    row: dict[str, Any], path: tuple[str, ...], value: Any
) -> None:
    bad = _with(row, path, value)
    with pytest.raises(Unreadable, match=f"malformed {row['type']}"):
        expand(bad)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"type": "session", "id": "s-1"}, "s-1"),
        ({"type": "session", "id": "s-1", "version": 3, "createdAt": 0}, "s-1"),
        ({"type": "session", "id": 5}, None),
        ({"type": "session"}, None),
        ({"type": "user/message", "id": "s-1"}, None),
        (["session", "s-1"], None),
        (None, None),
    ],
)
def test_session_id_of_header_line(value: Any, expected: str | None) -> None:
    assert session_id_of(value) == expected
