"""The batch fold the worker runs: decoding, dead letters, counts, rows, updates."""

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stream import native
from stream.contract.jsontext import dumps
from stream.output.headers import dead_letter_headers
from stream.session import codec
from stream.session.batch import PARTITION_KEY, Limits, Message, decode, fold_batch
from stream.testing import events as build


def msg(value: Any, key: bytes | None = b"s1", offset: int = 0) -> Message:
    raw = value if isinstance(value, bytes) else orjson.dumps(value)
    return Message(key, raw, "events", 3, offset)


def user(seq: int, text: str = "abcd") -> dict[str, Any]:
    return build.user_message(seq, build.texts(text), time=seq)


DEFAULT_LIMITS = Limits()


def fold(
    messages: list[Message],
    store: dict[bytes, bytes] | None = None,
    limits: Limits = DEFAULT_LIMITS,
) -> Any:
    store = {} if store is None else store
    result = fold_batch(messages, lambda key, partition: store.get(key), limits)
    for change in result.sessions:
        store[change.key] = change.row
    for part in result.partitions:
        store[PARTITION_KEY] = part.row
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
    message: Message, reason: str
) -> None:
    result = fold([message])
    assert result.counts.dead_lettered == 1 and result.counts.total == 1
    (letter,) = result.dead_letters
    assert reason in letter.reason
    headers = dict(dead_letter_headers(letter))
    assert headers["source-topic"] == b"events" and headers["source-partition"] == b"3"
    assert headers["source-offset"] == b"0"


def test_a_bad_segment_element_is_dead_lettered_alone() -> None:
    result = fold([msg([user(0), {"seq": "x"}, user(1)])])
    assert (result.counts.folded, result.counts.dead_lettered) == (2, 1)
    assert result.dead_letters[0].index == 1
    assert dict(dead_letter_headers(result.dead_letters[0]))["segment-index"] == b"1"
    assert result.sessions[0].update["seq"] == 1


def test_segments_and_single_events_fold_identically() -> None:
    events = [user(i, "x" * i) for i in range(6)]
    single = fold([msg(e, offset=i) for i, e in enumerate(events)])
    segmented = fold([msg(events[:4]), msg(events[4:], offset=5)])
    assert single.sessions[0].row == segmented.sessions[0].row
    assert single.sessions[0].update == segmented.sessions[0].update


def test_counts_add_up_and_a_redelivery_counts_nothing_twice() -> None:
    store: dict[bytes, bytes] = {}
    first = fold([msg(user(0)), msg(user(1), offset=1), msg(b"junk", offset=2)], store)
    assert (first.counts.folded, first.counts.dead_lettered) == (2, 1)
    # A crash before the commit: offsets 1 and 2 come again, with a new message.
    again = fold([msg(user(1), offset=1), msg(b"junk", offset=2), msg(user(2), offset=3)], store)
    assert again.counts.as_dict() == {"folded": 1, "duplicate": 0, "faulted": 0, "dead_lettered": 0}
    assert again.redelivered == 1
    assert len(again.dead_letters) == 1  # re-sent (readers drop it by source offset)
    # A producer that sends seq 1 again, as a new message, is a counted duplicate.
    dup = fold([msg(user(1), offset=4)], store)
    assert dup.counts.duplicate == 1
    assert codec.decode(store[b"s1"]).tally.as_list() == [3, 1, 0]


def test_one_row_and_one_update_per_session_per_batch() -> None:
    result = fold([msg(user(i), key=k, offset=i) for i in range(3) for k in (b"a", b"b")])
    assert sorted(c.session_id for c in result.sessions) == ["a", "b"]
    assert all(c.update["seq"] == 2 for c in result.sessions)
    assert all(c.partition == 3 for c in result.sessions)  # read and written in its partition


def test_a_pure_redelivery_rewrites_and_republishes() -> None:
    store: dict[bytes, bytes] = {}
    fold([msg(user(0))], store)
    again = fold([msg(user(0))], store)
    assert again.counts.total == 0 and again.redelivered == 1
    assert again.sessions[0].update["seq"] == 0


def test_an_unreadable_stored_row_faults_loudly_instead_of_starting_over() -> None:
    result = fold([msg(user(5))], {b"s1": b"\x00not a row"})
    update = result.sessions[0].update
    assert set(update["faults"]) == {"contextPressure", "contextBreakdown", "tokenUsage"}
    assert "stored row unreadable" in update["faults"]["tokenUsage"]["error"]
    assert result.counts.faulted == 1
    assert codec.decode(result.sessions[0].row).slots["contextPressure"].fault is not None


def test_decode_reads_a_single_event_and_a_segment() -> None:
    session, items = decode(msg([user(0), user(1)]))
    assert session == "s1" and [i.seq for i in items] == [0, 1]  # type: ignore[union-attr]


def test_packed_chunk_rows_are_taken_as_the_events_they_hold() -> None:
    row = build.chunk_row("text-chunks", 1, 5, ["a", "b", "c"], dt=[1, 1])
    result = fold([msg(user(0)), msg(row, offset=1), msg([user(4)], offset=2)])
    assert result.counts.folded == 5 and result.counts.total == 5
    assert result.sessions[0].update["seq"] == 4
    bad = dict(row, seq0="x")
    assert fold([msg(bad)]).counts.dead_lettered == 1


# --- accounting ---------------------------------------------------------------------------------


def test_the_partition_row_accounts_dead_letters_once_per_offset() -> None:
    store: dict[bytes, bytes] = {}
    first = fold([msg(b"junk", offset=4), msg([user(0), 42, "x"], offset=5)], store)
    assert first.counts.dead_lettered == 3
    assert [(p.partition, p.dead_lettered) for p in first.partitions] == [(3, 3)]
    assert orjson.loads(store[PARTITION_KEY])[:2] == [3, 5]  # [accounted, highest offset]
    # A redelivery of offset 5 sends its dead letters again but counts none of them.
    again = fold([msg([user(0), 42, "x"], offset=5), msg(b"more junk", offset=6)], store)
    assert len(again.dead_letters) == 2 and again.counts.dead_lettered == 1
    assert orjson.loads(store[PARTITION_KEY])[:2] == [4, 6]


def test_a_message_taken_twice_in_one_batch_counts_its_dead_letters_once() -> None:
    """A seek within a consumer generation fetches again what the agent's queue still
    holds, so one batch can carry the same offset twice (a fault-suite run counted 45
    dead letters for 43)."""
    store: dict[bytes, bytes] = {}
    twice = [msg(b"junk", offset=4), msg([user(0), 42], offset=5)]
    result = fold([*twice, *twice, msg(b"more", offset=6)], store)
    assert result.counts.dead_lettered == 3
    assert orjson.loads(store[PARTITION_KEY])[:2] == [3, 6]
    (change,) = result.sessions
    assert change.tally.as_list() == [1, 0, 0]  # the session's event, once


@pytest.mark.parametrize("stored", [b"junk", b"[1]", b'[1,"2"]', b"{}"])
def test_an_unreadable_partition_row_starts_its_count_over(stored: bytes) -> None:
    result = fold([msg(b"junk", offset=7)], {PARTITION_KEY: stored})
    assert orjson.loads(result.partitions[0].row)[:2] == [1, 7]


def test_a_dead_segment_element_keeps_its_own_text() -> None:
    result = fold([msg([user(0), {"seq": "x", "type": "t"}])])
    (letter,) = result.dead_letters
    assert orjson.loads(letter.value) == {"seq": "x", "type": "t"}  # not the whole segment


def test_faulted_events_are_counted_as_faulted() -> None:
    window = build.request_context(1, 0, time=1)  # contextWindow 0: contextPressure faults
    result = fold([msg(user(0)), msg(window, offset=1), msg(user(2), offset=2)])
    assert result.counts.as_dict() == {
        "folded": 2,
        "duplicate": 0,
        "faulted": 1,
        "dead_lettered": 0,
    }
    assert result.sessions[0].tally.as_list() == [2, 0, 1]


def test_the_same_offset_twice_in_one_batch_counts_once() -> None:
    result = fold([msg(user(0), offset=0), msg(user(0), offset=0)])
    assert result.counts.total == 1 and result.redelivered == 1


def test_events_are_counted_by_type_runs_by_their_size() -> None:
    row = build.chunk_row("text-chunks", 1, 5, ["a", "b", "c"])
    usage = build.usage_chunk(4, build.usage(1, 1), time=4)
    result = fold([msg([user(0), row, usage])])
    assert result.types == {"user/message": 1, "assistant/chunk": 4}


def test_a_tombstone_is_dead_lettered() -> None:
    (letter,) = fold([Message(b"s1", None, "events", 3, 0)]).dead_letters
    assert letter.reason.startswith("not JSON")


@pytest.mark.skipif(
    native.ACTIVE, reason="patches batch.fold_items, which compiled callers do not look up"
)  # `make unit` runs it in its pure-Python pass
def test_a_quarantine_refolds_the_session_without_counting_its_dead_letters_twice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from stream.session import batch as batch_module

    real = batch_module.fold_items

    def explode(record: Any, items: Any, tally: Any) -> Any:
        if any(getattr(item, "seq", None) == 2 for item in items):
            raise RuntimeError("boom")
        return real(record, items, tally)

    monkeypatch.setattr(batch_module, "fold_items", explode)
    messages = [msg([user(0), "bad"]), msg(user(1), offset=1), msg(user(2), offset=2)]
    result = fold(messages)
    assert [letter.offset for letter in result.dead_letters] == [0, 2]
    assert result.counts.as_dict() == {
        "folded": 2,
        "duplicate": 0,
        "faulted": 0,
        "dead_lettered": 2,
    }
    assert result.sessions[0].update["seq"] == 1


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


# --- poison pills, limits, quarantine (nothing may stop a partition) -------------------------


def deep(levels: int) -> bytes:
    return b"[" * levels + b"]" * levels


@pytest.mark.parametrize(
    "value",
    [
        b'{"type":"\\ud800","seq":0,"time":1,"data":1}',  # lone surrogate in the type
        b'{"type":"user/message","seq":0,"time":1,"data":{"x":"\\udfff"},"surfaceOp":"append"}',
        deep(1000),
        deep(1023),
        b"[" + deep(1000) + b"]",  # a segment whose element is nested 1,000 deep
        b'{"type":"x","seq":0,"time":1,"data":{"a":' + deep(1000) + b"}}",
        b'{"type":"' + b"t" * 335_000 + b'","seq":0,"time":1,"data":1}',
    ],
)
def test_poison_pills_are_folded_or_dead_lettered_and_every_record_is_bounded(
    value: bytes,
) -> None:
    result = fold([msg(value)])
    assert result.counts.total >= 1
    for change in result.sessions:
        assert len(change.row) < 10_000
        encoded = orjson.dumps(change.update)
        assert len(encoded) < 10_000
    for letter in result.dead_letters:
        assert len(letter.reason) <= Limits().error_chars
        letter.reason.encode()  # encodable


def nested_event(seq: int, depth: int) -> bytes:
    """A turn/start whose whole text nests exactly ``depth`` levels."""
    return b'{"type":"turn/start","seq":%d,"time":1,"data":{"x":%s}}' % (seq, deep(depth - 2))


def test_the_nesting_bound_is_the_same_for_messages_segments_and_log_lines() -> None:
    from stream.contract.jsontext import MAX_DEPTH, TOO_DEEP, loads

    at_bound, past = nested_event(1, MAX_DEPTH), nested_event(1, MAX_DEPTH + 1)
    assert loads(at_bound)  # a log line at the bound reads (stream fold)
    with pytest.raises(ValueError, match=TOO_DEEP):
        loads(past)  # one level more does not
    # The same events as messages of their own...
    alone = fold([msg(orjson.dumps(user(0)), offset=0), msg(at_bound, offset=1)])
    assert (alone.counts.folded, alone.dead_letters) == (2, [])
    (letter,) = fold([msg(orjson.dumps(user(0)), offset=0), msg(past, offset=1)]).dead_letters
    assert (letter.reason, letter.index) == (TOO_DEEP, None)
    # ...and inside a segment (one level deeper as a message): only the deep one is dead.
    for middle, dead in ((at_bound, []), (past, [1])):
        value = b"[" + orjson.dumps(user(0)) + b"," + middle + b"," + orjson.dumps(user(2)) + b"]"
        result = fold([msg(value)])
        assert [d.index for d in result.dead_letters] == dead
        assert all(d.reason == TOO_DEEP for d in result.dead_letters)


def test_a_huge_type_is_faulted_with_a_truncated_reason() -> None:
    result = fold([msg(b'{"type":' + orjson.dumps("t" * 335_000) + b',"seq":0,"time":1,"data":1}')])
    (change,) = result.sessions
    errors = [f["error"] for f in change.update["faults"].values()]
    assert all("truncated, 335," in e and len(e) <= 500 for e in errors)
    assert len(change.row) < 3_000


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        (msg(b"x" * 2_000, key=b"s"), "message of 2,000 bytes exceeds 1,500"),
        (msg(user(0), key=b"k" * 65), "session key of 65 bytes exceeds 64"),
        (msg([user(i) for i in range(9)]), "segment of 9 events exceeds 8"),
    ],
)
def test_limits_dead_letter_with_a_clear_reason(message: Message, reason: str) -> None:
    limits = Limits(message_bytes=1_500, key_bytes=64, segment_events=8, dead_letter_bytes=100)
    result = fold([message], limits=limits)
    (letter,) = result.dead_letters
    assert reason in letter.reason
    assert len(letter.value) <= 100
    if len(message.value or b"") > 100:
        assert (
            dict(dead_letter_headers(letter))["original-bytes"]
            == str(len(message.value or b"")).encode()
        )


def test_an_event_past_the_event_bound_is_dead_lettered_alone() -> None:
    limits = Limits(event_bytes=1_200)
    big = user(1, "x" * 1_500)
    # A message of one event: the whole message.
    (letter,) = fold([msg(big)], limits=limits).dead_letters
    assert letter.index is None
    assert f"event of {len(orjson.dumps(big)):,} bytes exceeds 1,200" == letter.reason
    # In a segment: only that element (measured as compact JSON), the others fold.
    spaced = (
        b"[" + orjson.dumps(user(0)) + b",  " + orjson.dumps(big) + b" ," + orjson.dumps(user(2))
    )
    result = fold([msg(spaced + b"]")], limits=limits)
    (letter,) = result.dead_letters
    assert (letter.index, letter.value) == (1, orjson.dumps(big))
    assert letter.reason == f"event of {len(orjson.dumps(big)):,} bytes exceeds 1,200"
    assert result.counts.as_dict()["folded"] == 1  # seq 0; seq 2 is a gap fault
    # Under the bound (the default: as large as a message), nothing is measured or cut.
    assert fold([msg([user(0), big])]).dead_letters == []


@pytest.mark.skipif(
    native.ACTIVE, reason="patches batch.fold_items, which compiled callers do not look up"
)  # `make unit` runs it in its pure-Python pass
def test_an_unexpected_error_quarantines_only_that_message(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from stream.session import batch as batch_module

    real = batch_module.fold_items

    def explode(record: Any, items: Any, tally: Any) -> Any:
        if any(getattr(item, "seq", None) == 1 for item in items):
            raise RuntimeError("boom")
        return real(record, items, tally)

    monkeypatch.setattr(batch_module, "fold_items", explode)
    store: dict[bytes, bytes] = {}
    result = fold([msg(user(0)), msg(user(1), offset=1), msg(user(0), key=b"t", offset=2)], store)
    assert result.quarantined == 1
    (letter,) = result.dead_letters
    assert "unexpected RuntimeError while folding: boom" in letter.reason
    assert letter.offset == 1
    assert sorted(c.session_id for c in result.sessions) == ["s1", "t"]
    assert result.counts.as_dict() == {
        "folded": 2,
        "duplicate": 0,
        "faulted": 0,
        "dead_lettered": 1,
    }


def test_a_session_that_changes_partition_is_read_and_written_through_one() -> None:
    a = Message(b"s1", orjson.dumps(user(0)), "events", 0, 0)
    b = Message(b"s1", orjson.dumps(user(1)), "events", 1, 0)
    result = fold_batch([a, b], lambda key, partition: None)
    partitions = sorted(c.partition for c in result.sessions)
    assert partitions == [0, 1]  # two rows, one per partition: never read here, written there
    faults = [c.update.get("faults") for c in result.sessions]
    assert faults[1] is not None and "gap: expected seq 0, got 1" in str(faults[1])


def test_stored_rows_that_do_not_fit_the_schema_become_a_row_fault() -> None:
    for row in (b"[1]", b'[1,0,["contextPressure",1,0,null,[1,2]]]', b"[2,0,-1,[0,0,0]," + b"1]"):
        result = fold([msg(user(3))], {b"s1": row})
        assert "stored row unreadable" in str(result.sessions[0].update["faults"])
    clean = fold([msg(user(0))], {b"s1": b"[1]"})
    assert "faults" not in clean.sessions[0].update  # from seq 0 it simply starts over


def reset(gen: int, key: bytes = b"s1", offset: int = 0) -> Message:
    return Message(key, None, "events", 3, offset, [("stream-reset", str(gen).encode())])


def test_a_reset_starts_the_session_over_under_its_generation() -> None:
    store: dict[bytes, bytes] = {}
    fold([msg(user(5), offset=0)], store)  # the beginning fell out of retention: a gap
    assert codec.decode(store[b"s1"]).slots["tokenUsage"].fault is not None
    result = fold([reset(2, offset=1), *(msg(user(i), offset=2 + i) for i in range(7))], store)
    (change,) = result.sessions
    assert change.gen == 2 and "faults" not in change.update and change.update["seq"] == 6
    # Counted afresh (the state holds 0..6 now), the first life's faulted event carried.
    assert change.tally.as_list() == [7, 0, 1]
    assert codec.decode(change.row).tally.as_list() == [7, 0, 0]
    # A replay of the same records changes nothing: the reset is at the session's generation.
    again = fold([reset(2, offset=1), msg(user(6), offset=8)], store)
    assert again.sessions[0].update == change.update
    assert codec.decode(store[b"s1"]).gen == 2


def test_a_reset_needs_a_key_and_a_generation() -> None:
    for message in (
        reset(0),
        reset(2, key=b""),
        Message(b"s", None, "e", 0, 0, [("stream-reset", b"x")]),
    ):
        (letter,) = fold([message]).dead_letters
        assert "stream-reset needs" in letter.reason


def test_a_batch_leaves_no_cyclic_garbage() -> None:
    """Every object a fold allocates is freed by its reference count: the cyclic collector
    has nothing to tear down between batches. (Compiled, a closure and its environment
    hold each other; one per message made the worker's collections take 17-70 ms.)"""
    import gc

    def batch(start: int) -> list[Message]:
        good = [msg(user(i), offset=start + i) for i in range(20)]
        segment = msg([user(100 + i) for i in range(3)], offset=start + 20)
        bad = [msg(b"{nope", offset=start + 21), msg(user(0), key=b"x" * 2000, offset=start + 22)]
        return [*good, segment, *bad, reset(1, offset=start + 23)]

    store: dict[bytes, bytes] = {}
    fold(batch(0), store)  # first use: caches and lazily built tables
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)  # what a collection finds stays in gc.garbage
    try:
        for n in range(1, 4):
            fold(batch(100 * n), store)
        gc.collect()
        # Only the fold's own: a thread an earlier test left running may make garbage too.
        ours = [o for o in gc.garbage if type(o).__module__.startswith("stream.")]
        assert ours == []
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
