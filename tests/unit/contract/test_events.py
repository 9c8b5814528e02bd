"""Reading one event at the envelope (contract: "Events", "Validation")."""

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stream.contract.errors import Unreadable
from stream.contract.events import (
    APPEND,
    SURFACE_TYPES,
    Event,
    Replace,
    passive_seq,
    read_event,
)

from ..builders import raw

SURFACE = sorted(SURFACE_TYPES)
NON_SURFACE = [
    "request/header",
    "request/context",
    "assistant/chunk",
    "compaction/summary",
    "compaction/prune",
    "turn/start",
    "some/unknown-type",
]


# --- not an event at all: Unreadable ----------------------------------------------------------


@pytest.mark.parametrize("value", [None, [], [1], "event", 5, 1.5, True])
def test_non_object_is_unreadable(value: Any) -> None:
    with pytest.raises(Unreadable, match="JSON object"):
        read_event(value)


@pytest.mark.parametrize(
    "seq", [None, -1, 1.5, True, False, "3", [3], {"n": 3}, 2**53, 2**64, float("inf")]
)
def test_unusable_seq_is_unreadable(seq: Any) -> None:
    event = raw("user/message", 0, {"content": []}, "append")
    event["seq"] = seq
    with pytest.raises(Unreadable, match="seq"):
        read_event(event)


def test_missing_seq_is_unreadable() -> None:
    event = raw("user/message", 0, {"content": []}, "append")
    del event["seq"]
    with pytest.raises(Unreadable, match="seq"):
        read_event(event)


@pytest.mark.parametrize(("seq", "expected"), [(0, 0), (7, 7), (7.0, 7), (2**53 - 1, 2**53 - 1)])
def test_usable_seq(seq: Any, expected: int) -> None:
    value = raw("turn/start", 0)
    value["seq"] = seq
    event = read_event(value)
    assert event.seq == expected
    assert type(event.seq) is int


# --- envelope errors: kept on the event, fault every projection -------------------------------


@pytest.mark.parametrize("kind", [None, 5, ["user/message"], {"t": 1}])
def test_type_not_a_string_is_an_event_error(kind: Any) -> None:
    value = raw("x", 3)
    value["type"] = kind
    event = read_event(value)
    assert event.error is not None
    assert "type must be a string" in event.error


@pytest.mark.parametrize("data", [None, [], "text", 5, True])
def test_data_not_an_object_is_an_event_error(data: Any) -> None:
    event = read_event(raw("request/context", 4, data))
    assert event.error == "request/context at seq 4: data must be an object"
    assert event.data == {}


def test_missing_data_is_an_event_error() -> None:
    value = raw("request/context", 4)
    del value["data"]
    assert read_event(value).error == "request/context at seq 4: data must be an object"


@pytest.mark.parametrize("time", [None, 1.5, "1700000000000", True, [1]])
def test_time_not_an_integer_is_an_event_error(time: Any) -> None:
    event = read_event(raw("turn/start", 2, time=time))
    assert event.error is not None
    assert "time" in event.error


@pytest.mark.parametrize("time", [0, -5, 1_700_000_000_000, 1.7e12])
def test_integer_time_is_accepted(time: Any) -> None:
    assert read_event(raw("turn/start", 2, time=time)).error is None


def test_provenance_and_ignorable_are_ignored(ev: Callable[..., Event]) -> None:
    plain = ev("user/message", 5, {"content": []}, "append")
    decorated = ev(
        "user/message", 5, {"content": []}, "append", sourceEventSeqs=[1, 2], ignorable=True
    )
    assert decorated == plain


# --- surfaceOp --------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", SURFACE)
def test_surface_type_with_append(kind: str) -> None:
    event = read_event(raw(kind, 1, {}, "append"))
    assert event.op == APPEND
    assert event.surface_error is None
    assert event.error is None


@pytest.mark.parametrize("kind", SURFACE)
@pytest.mark.parametrize(
    "op",
    [
        {"op": "replace", "start": 2, "end": 5},  # format v0
        {"op": "replace", "startSeq": 2, "endSeq": 5},  # format v3
        {"end": 5, "op": "replace", "start": 2},  # key order is irrelevant
        {"op": "replace", "start": 2.0, "end": 5.0},  # JS numbers: 2.0 is the integer 2
    ],
)
def test_surface_type_with_replace_both_formats(kind: str, op: dict[str, Any]) -> None:
    event = read_event(raw(kind, 9, {}, op))
    assert event.op == Replace(2, 5)
    assert event.surface_error is None


@pytest.mark.parametrize("kind", SURFACE)
def test_surface_type_without_surface_op_is_malformed(kind: str) -> None:
    event = read_event(raw(kind, 6, {}))
    assert event.op is None
    assert event.surface_error == f"{kind} at seq 6 has no surfaceOp"


@pytest.mark.parametrize("kind", SURFACE)
def test_surface_type_with_null_surface_op_is_malformed(kind: str) -> None:
    event = read_event(raw(kind, 6, {}, None))
    assert event.surface_error is not None
    assert "surfaceOp" in event.surface_error


@pytest.mark.parametrize("kind", NON_SURFACE)
@pytest.mark.parametrize("op", ["append", {"op": "replace", "start": 0, "end": 0}, None])
def test_non_surface_type_with_surface_op_is_malformed(kind: str, op: Any) -> None:
    event = read_event(raw(kind, 3, {}, op))
    assert event.op is None
    assert event.surface_error == (
        f"{kind} at seq 3 is not a surface type and cannot carry surfaceOp"
    )


@pytest.mark.parametrize("kind", NON_SURFACE)
def test_non_surface_type_without_surface_op_is_fine(kind: str) -> None:
    event = read_event(raw(kind, 3, {}))
    assert event.op is None
    assert event.surface_error is None
    assert event.error is None


BAD_OPS = [
    "prepend",
    "",
    "APPEND",
    5,
    [],
    ["replace", 1, 2],
    {},
    {"op": "append"},
    {"op": "replace"},
    {"op": "replace", "start": 1},  # missing key
    {"op": "replace", "end": 1},
    {"op": "replace", "startSeq": 1},
    {"op": "replace", "start": 1, "end": 2, "extra": 0},  # extra key
    {"op": "replace", "start": 1, "end": 2, "startSeq": 1},
    {"op": "replace", "startSeq": 1, "endSeq": 2, "note": "x"},
    {"op": "replace", "start": 1, "endSeq": 2},  # mixed formats
    {"op": "replace", "startSeq": 1, "end": 2},
    {"op": "splice", "start": 1, "end": 2},
    {"start": 1, "end": 2, "kind": "replace"},
    {"op": "replace", "start": -1, "end": 2},  # ends must be non-negative integers
    {"op": "replace", "start": 1, "end": -2},
    {"op": "replace", "start": 1.5, "end": 2},
    {"op": "replace", "start": True, "end": 2},
    {"op": "replace", "start": "1", "end": 2},
    {"op": "replace", "startSeq": None, "endSeq": 2},
    {"op": "replace", "start": 1, "end": 2**53},
]


@pytest.mark.parametrize("op", BAD_OPS)
def test_malformed_surface_op_is_a_surface_error(op: Any) -> None:
    event = read_event(raw("user/message", 12, {"content": []}, op))
    assert event.op is None
    assert event.surface_error is not None
    assert event.surface_error.startswith("user/message at seq 12 ")
    assert event.error is None  # an error for the surface projections only


_ENVELOPE_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-2, 2**53 + 1),
    st.sampled_from([0.0, 3.0, 2.5, -1.0, 1e300]),
    st.sampled_from(
        ["assistant/chunk", "step/start", "user/message", "request/context", "x", "append"]
    ),
    st.dictionaries(
        st.sampled_from(["chunk", "type", "turn"]),
        st.one_of(
            st.none(),
            st.sampled_from(["usage", "text-delta"]),
            st.dictionaries(st.sampled_from(["type"]), st.sampled_from(["usage", "text-delta"])),
        ),
    ),
)


@settings(max_examples=3000, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["type", "seq", "time", "data", "surfaceOp", "x"]), _ENVELOPE_VALUES
    )
)
def test_a_passive_seq_is_read_events_passive_event(value: dict[str, Any]) -> None:
    """``passive_seq`` (the offline fold's shortcut) answers only for what ``read_event``
    reads as a passive event of that seq; -1 otherwise (then ``read_event`` decides)."""
    seq = passive_seq(value)
    if seq < 0:
        assert seq == -1
        return
    event = read_event(value)
    assert event == Event(value["type"], seq, value["data"], None, passive=True)
    assert seq == value["seq"] and type(seq) is int


@pytest.mark.parametrize(
    "value",
    [
        raw("step/start", 3, {"turn": 0}),
        raw("assistant/chunk", 4, {"turn": 0, "chunk": {"type": "text-delta", "text": "a"}}),
        raw("x/unknown", 5, {}),
    ],
)
def test_common_passive_events_take_the_shortcut(value: dict[str, Any]) -> None:
    assert passive_seq(value) == value["seq"]
    assert read_event(value).passive
