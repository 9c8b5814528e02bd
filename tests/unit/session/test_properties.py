"""Property tests over random valid session logs (see ``strategies.py``)."""

import re
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stream.contract.events import read_event
from stream.projections.positional import Surface
from stream.session import codec
from stream.session.processor import (
    PROJECTIONS,
    Outcome,
    SessionRecord,
    faults,
    process,
    views,
)
from stream.testing import events as build

from .strategies import bad_events, is_unmetered_replace, session_logs, texts

SETTINGS = settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def fold(log: list[Any]) -> SessionRecord:
    record = SessionRecord.new()
    for raw in log:
        process(record, read_event(raw))
    return record


def entries(record: SessionRecord) -> list[Any]:
    """The stored per-projection entries: [key, version, cursor, fault, state]."""
    rows: list[Any] = orjson.loads(codec.encode(record))[4:]
    return [row[:5] for row in rows]  # without the rebuilding flag


@SETTINGS
@given(session_logs())
def test_breakdown_equals_the_positional_fold_after_every_event(log: list[Any]) -> None:
    record = SessionRecord.new()
    surface = Surface()
    drifted = False  # contextPressure is neutral (not exact) on unmetered prompt rewrites
    for index, raw in enumerate(log):
        event = read_event(raw)
        assert process(record, event) is Outcome.FOLDED
        surface.fold(event)
        assert faults(record) == {}
        assert views(record)["contextBreakdown"] == surface.breakdown()
        assert record.slots["contextBreakdown"].state.surface == surface.total
        drifted = drifted or is_unmetered_replace(log, index)
        if not drifted:
            assert record.slots["contextPressure"].state.surface == surface.total


@SETTINGS
@given(session_logs(), st.data())
def test_an_error_commits_nothing_and_repeats_identically(log: list[Any], data: Any) -> None:
    cut = data.draw(st.integers(0, len(log)))
    record = fold(log[:cut])
    *lead, bad = [read_event(raw) for raw in data.draw(bad_events(cut))]
    for event in lead:
        assert process(record, event) is Outcome.FOLDED
    before_row = codec.encode(record)
    before = entries(record)

    outcome = process(record, bad)
    assert outcome is Outcome.FAULTED
    after = entries(record)
    newly = [i for i in range(len(PROJECTIONS)) if after[i][3] is not None]
    assert newly, "the bad event must fault some projection"
    for i, (old, new) in enumerate(zip(before, after, strict=True)):
        if i in newly:
            # the committed position and state are byte-identical; only the fault is new
            assert orjson.dumps([new[2], new[4]]) == orjson.dumps([old[2], old[4]])
            assert new[3][0] == bad.seq
        else:
            assert new[2] == bad.seq
    if len(newly) == len(PROJECTIONS):  # nothing applied anywhere: only faults and `seen`
        stripped = [[key, version, cursor, None, state] for key, version, cursor, _, state in after]
        assert stripped == before

    # a retry from the committed row errors identically
    retry = codec.decode(before_row)
    assert process(retry, bad) is Outcome.FAULTED
    assert codec.encode(retry) == codec.encode(record)
    # and re-offering it to the faulted record changes nothing
    row = codec.encode(record)
    process(record, bad)
    assert codec.encode(record) == row


@SETTINGS
@given(session_logs(), st.data())
def test_checkpoint_then_resume_equals_folding_the_whole(log: list[Any], data: Any) -> None:
    cut = data.draw(st.integers(0, len(log)))
    tail: list[Any] = []
    if data.draw(st.booleans()):  # sometimes with faults in the row
        tail = data.draw(bad_events(len(log)))
    events = [read_event(raw) for raw in log + tail]

    whole = SessionRecord.new()
    expected = []
    for event in events:
        process(whole, event)
        expected.append((codec.encode(whole), views(whole), faults(whole)))

    resumed = SessionRecord.new()
    for event in events[:cut]:
        process(resumed, event)
    resumed = codec.decode(codec.encode(resumed))
    for event, (row, view, fault) in zip(events[cut:], expected[cut:], strict=True):
        process(resumed, event)
        assert codec.encode(resumed) == row
        assert views(resumed) == view
        assert faults(resumed) == fault


@SETTINGS
@given(session_logs(), st.data())
def test_replaying_applied_events_changes_nothing(log: list[Any], data: Any) -> None:
    cut = data.draw(st.integers(1, len(log)))
    events = [read_event(raw) for raw in log]
    record = SessionRecord.new()
    for event in events[:cut]:
        process(record, event)
    row = codec.encode(record)
    replay = data.draw(st.lists(st.sampled_from(events[:cut]), max_size=10)) + events[:cut]
    for event in replay:
        assert process(record, event) is Outcome.DUPLICATE
        assert codec.encode(record) == row
    # and the rest still folds as if nothing had happened
    for event in events[cut:]:
        process(record, event)
    assert codec.encode(record) == codec.encode(fold(log))


def _user(seq: int, text: str) -> Any:
    return read_event(build.user_message(seq, build.texts(text), time=seq))


@settings(max_examples=10, deadline=None)
@given(st.lists(texts, min_size=1, max_size=5))
def test_row_size_does_not_grow_with_the_number_of_messages(words: list[str]) -> None:
    def row(n: int) -> bytes:
        record = SessionRecord.new()
        for seq in range(n):
            process(record, _user(seq, words[seq % len(words)]))
        return codec.encode(record)

    small, large = row(10), row(2000)
    digits = re.compile(rb"\d+")
    # identical once every integer is blanked out ...
    assert digits.sub(b"0", small) == digits.sub(b"0", large)
    # ... and the difference is exactly the extra digits of those integers
    extra = sum(
        len(b) - len(a) for a, b in zip(digits.findall(small), digits.findall(large), strict=True)
    )
    assert len(large) - len(small) == extra
    assert extra <= 4 * 3 + 2 * 4  # seen + 3 cursors (9 -> 1999); two surface totals
