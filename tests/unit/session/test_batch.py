"""The batch fold the worker runs: decoding, dead letters, counts, rows, updates."""

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stream.contract.jsontext import dumps
from stream.session import codec
from stream.session.batch import Message, decode, fold_batch


def msg(value: Any, key: bytes | None = b"s1", offset: int = 0) -> Message[int]:
    raw = value if isinstance(value, bytes) else orjson.dumps(value)
    return Message(key, raw, "events", 3, offset, offset)


def user(seq: int, text: str = "abcd") -> dict[str, Any]:
    return {
        "type": "user/message",
        "seq": seq,
        "time": seq,
        "surfaceOp": "append",
        "data": {"role": "user", "content": [{"type": "text", "text": text}]},
    }


def fold(messages: list[Message[int]], store: dict[str, bytes] | None = None) -> Any:
    store = {} if store is None else store
    result = fold_batch(messages, lambda sid, handle: store.get(sid))
    for change in result.sessions:
        store[change.session_id] = change.row
    return result


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        (msg(b"{nope"), "not JSON"),
        (msg(user(0), key=None), "no session key"),
        (msg(user(0), key=b""), "no session key"),
        (msg(user(0), key=b"\xff\xfe"), "no session key"),
        (msg({"type": "x", "seq": -1, "time": 0, "data": {}}), "no usable seq"),
        (msg({"type": "x", "seq": "1", "time": 0, "data": {}}), "no usable seq"),
        (msg(b"[]"), "empty segment"),
        (msg(b"42"), "must be a JSON object"),
    ],
)
def test_unreadable_messages_become_dead_letters_with_their_source(
    message: Message[int], reason: str
) -> None:
    result = fold([message])
    assert result.counts.dead_lettered == 1 and result.counts.total == 1
    (letter,) = result.dead_letters
    assert reason in letter.reason
    headers = dict(letter.headers())
    assert headers["source-topic"] == b"events" and headers["source-partition"] == b"3"
    assert headers["source-offset"] == b"0"


def test_a_bad_segment_element_is_dead_lettered_alone() -> None:
    result = fold([msg([user(0), {"seq": "x"}, user(1)])])
    assert (result.counts.folded, result.counts.dead_lettered) == (2, 1)
    assert result.dead_letters[0].index == 1
    assert dict(result.dead_letters[0].headers())["segment-index"] == b"1"
    assert result.sessions[0].update["seq"] == 1


def test_segments_and_single_events_fold_identically() -> None:
    events = [user(i, "x" * i) for i in range(6)]
    single = fold([msg(e, offset=i) for i, e in enumerate(events)])
    segmented = fold([msg(events[:4]), msg(events[4:], offset=1)])
    assert single.sessions[0].row == segmented.sessions[0].row
    assert single.sessions[0].update == segmented.sessions[0].update


def test_counts_add_up_and_redelivery_is_duplicate() -> None:
    store: dict[str, bytes] = {}
    first = fold([msg(user(0)), msg(user(1), offset=1), msg(b"junk", offset=2)], store)
    assert (first.counts.folded, first.counts.dead_lettered) == (2, 1)
    again = fold([msg(user(1), offset=1), msg(user(2), offset=3)], store)
    assert (again.counts.duplicate, again.counts.folded) == (1, 1)
    assert again.counts.total == 2


def test_one_row_and_one_update_per_session_per_batch() -> None:
    result = fold([msg(user(i), key=k, offset=i) for i in range(3) for k in (b"a", b"b")])
    assert sorted(c.session_id for c in result.sessions) == ["a", "b"]
    assert all(c.update["seq"] == 2 for c in result.sessions)
    assert all(c.handle == 2 for c in result.sessions)  # its last message routes the row


def test_a_pure_redelivery_rewrites_and_republishes() -> None:
    store: dict[str, bytes] = {}
    fold([msg(user(0))], store)
    again = fold([msg(user(0))], store)
    assert again.counts.duplicate == 1
    assert again.sessions[0].update["seq"] == 0


def test_an_unreadable_stored_row_faults_loudly_instead_of_starting_over() -> None:
    result = fold([msg(user(5))], {"s1": b"\x00not a row"})
    update = result.sessions[0].update
    assert set(update["faults"]) == {"contextPressure", "contextBreakdown", "tokenUsage"}
    assert "stored row unreadable" in update["faults"]["tokenUsage"]["error"]
    assert result.counts.faulted == 1
    assert codec.decode(result.sessions[0].row).slots[0].fault is not None


def test_decode_reads_a_single_event_and_a_segment() -> None:
    session, items = decode(msg([user(0), user(1)]))
    assert session == "s1" and [i.seq for i in items] == [0, 1]  # type: ignore[union-attr]


def test_packed_chunk_rows_are_taken_as_the_events_they_hold() -> None:
    row = {
        "type": "text-chunks",
        "seq0": 1,
        "time0": 5,
        "data": {"turn": 0, "step": 0, "index": 0, "dt": [1, 1], "texts": ["a", "b", "c"]},
    }
    result = fold([msg(user(0)), msg(row, offset=1), msg([user(4)], offset=2)])
    assert result.counts.folded == 5 and result.counts.total == 5
    assert result.sessions[0].update["seq"] == 4
    bad = dict(row, seq0="x")
    assert fold([msg(bad)]).counts.dead_lettered == 1


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
event_like = st.fixed_dictionaries(
    {
        "type": st.sampled_from(
            [
                "user/message",
                "assistant/message",
                "assistant/chunk",
                "request/header",
                "request/context",
                "compaction/summary",
                "system/message",
                "tool/result",
                "x/y",
            ]
        ),
        "seq": st.integers(min_value=-2, max_value=6),
        "time": st.integers(min_value=0, max_value=9),
    },
    optional={"data": json_values, "surfaceOp": json_values},
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.binary(max_size=40), json_values, event_like, st.lists(event_like, max_size=4)
        ),
        max_size=12,
    )
)
def test_hostile_input_never_raises_and_every_event_is_counted(values: list[Any]) -> None:
    messages = []
    expected = 0
    for offset, value in enumerate(values):
        raw = value if isinstance(value, bytes) else dumps(value)
        messages.append(msg(raw, key=b"k", offset=offset))
        expected += len(value) if isinstance(value, list) and value else 1
    result = fold(messages)
    assert result.counts.total == expected
