"""Per-session processing: cursors, duplicates, gaps, faults, outcomes.

Contract: "Per-session processing".
"""

from typing import Any

import orjson
import pytest

from stream.contract.events import read_event
from stream.contract.storage import expand
from stream.session import codec
from stream.session.processor import (
    PROJECTIONS,
    Fault,
    Outcome,
    SessionRecord,
    faults,
    process,
    process_run,
    update,
    views,
)
from stream.testing import events as build

from ..builders import (
    assistant,
    context,
    ev,
    header,
    meter,
    noop,
    replace,
    system,
    text_chunk,
    usage,
    usage_chunk,
    user,
)

KEYS = [p.key for p in PROJECTIONS]
PRESSURE, BREAKDOWN, USAGE = range(3)


def run(events: list[Any], record: SessionRecord | None = None) -> SessionRecord:
    record = SessionRecord.new() if record is None else record
    for event in events:
        process(record, event)
    return record


def copy(record: SessionRecord) -> SessionRecord:
    return codec.decode(codec.encode(record))


def slot_row(record: SessionRecord, index: int) -> list[Any]:
    """One projection's stored entry: [key, version, cursor, fault, state]."""
    row: list[Any] = orjson.loads(codec.encode(record))[4 + index]
    return row[:5]  # without the rebuilding flag


LOG = [
    header(0, "You are terse.", [{"name": "bash"}]),
    context(1, 128_000),
    system(2, "You are terse."),
    user(3, "abcd"),
    usage_chunk(4, usage(100, 5), turn=0, step=0),
    assistant(5, "abcd", usage=usage(100, 7), turn=0, step=0),
    user(6, "abcd" * 4),
]


def test_projection_order_and_keys() -> None:
    assert KEYS == ["contextPressure", "contextBreakdown", "tokenUsage"]


def test_fresh_record(record: SessionRecord) -> None:
    assert [s.cursor for s in record] == [-1, -1, -1]
    assert record.seen == -1
    assert views(record) == {
        "contextPressure": {},
        "contextBreakdown": {"systemTokens": 0, "toolsTokens": 0, "messageTokens": 0},
        "tokenUsage": {
            "uncachedInputTokens": 0,
            "outputTokens": 0,
            "cacheReadTokens": 0,
            "cacheWriteTokens": 0,
        },
    }


def test_folding_a_log() -> None:
    record = SessionRecord.new()
    outcomes = [process(record, event) for event in LOG]
    assert outcomes == [Outcome.FOLDED] * len(LOG)
    assert [s.cursor for s in record] == [6, 6, 6]
    assert record.seen == 6
    assert faults(record) == {}
    assert views(record) == {
        # both samples were stamped at surface 8 + 9; then 9 + 12 joined
        "contextPressure": {
            "contextWindow": 128_000,
            "pressureTokens": 100,
            "projectedTokens": 100 + 9 + 12,
        },
        # [{"name":"bash"}] is 17 chars: 5 + 4
        "contextBreakdown": {"systemTokens": 8, "toolsTokens": 9, "messageTokens": 9 + 9 + 12},
        "tokenUsage": {
            "uncachedInputTokens": 100,
            "outputTokens": 7,
            "cacheReadTokens": 0,
            "cacheWriteTokens": 0,
        },
    }


def test_an_event_that_changes_no_state_still_advances_every_cursor() -> None:
    record = run(LOG)
    assert process(record, noop(7)) is Outcome.FOLDED
    assert [s.cursor for s in record] == [7, 7, 7]


# --- duplicates -------------------------------------------------------------------------------


@pytest.mark.parametrize("index", range(len(LOG)))
def test_duplicate_changes_nothing(index: int) -> None:
    record = run(LOG)
    before = codec.encode(record)
    assert process(record, LOG[index]) is Outcome.DUPLICATE
    assert codec.encode(record) == before


def test_duplicate_with_different_content_is_still_a_duplicate() -> None:
    record = run(LOG)
    before = codec.encode(record)
    assert process(record, user(3, "something else entirely")) is Outcome.DUPLICATE
    assert process(record, ev("user/message", 2, {})) is Outcome.DUPLICATE  # even malformed
    assert codec.encode(record) == before


# --- gaps -------------------------------------------------------------------------------------


def test_gap_faults_every_projection_and_keeps_their_state() -> None:
    record = run(LOG[:3])
    before = [slot_row(record, i)[2:] for i in range(3)]
    assert process(record, user(5, "abcd")) is Outcome.FAULTED
    for i in range(3):
        cursor, fault, state = slot_row(record, i)[2:]
        assert [cursor, state] == [before[i][0], before[i][2]]
        assert fault == [5, "gap: expected seq 3, got 5"]
    assert faults(record) == {
        key: {"seq": 5, "error": "gap: expected seq 3, got 5"} for key in KEYS
    }


def test_later_events_do_not_apply_after_a_gap() -> None:
    record = run(LOG[:3])
    process(record, user(5, "abcd"))
    frozen = codec.encode(record)
    assert process(record, user(6, "abcd")) is Outcome.FAULTED  # new, but all faulted
    assert process(record, user(7, "abcd")) is Outcome.FAULTED
    after = orjson.loads(codec.encode(record))
    assert after[2:] == orjson.loads(frozen)[2:]


def test_a_late_event_below_a_refused_gap_is_not_a_duplicate() -> None:
    # seq 3 was never applied nor refused: every projection is simply faulted (cursor 2).
    record = run(LOG[:3])
    process(record, user(5, "abcd"))
    assert process(record, LOG[3]) is Outcome.FAULTED


def test_redelivered_refused_event_changes_nothing() -> None:
    record = run(LOG[:3])
    process(record, user(5, "abcd"))
    before = codec.encode(record)
    process(record, user(5, "abcd"))
    assert codec.encode(record) == before


# --- faults -----------------------------------------------------------------------------------

# (event at seq 7, the projections it faults, a fragment of the error)
FAULTS = [
    (assistant(7, "x", usage=None), {PRESSURE, USAGE}, "usage must be an object"),
    (usage_chunk(7, {"inputTokens": -1, "outputTokens": 0}), {PRESSURE, USAGE}, "inputTokens"),
    (context(7, 0), {PRESSURE}, "contextWindow must be a positive integer"),
    (context(7, -5), {PRESSURE}, "contextWindow must be a positive integer"),
    (ev("user/message", 7, {"content": []}), {PRESSURE, BREAKDOWN}, "has no surfaceOp"),
    (ev("request/context", 7, {}, "append"), {PRESSURE, BREAKDOWN}, "cannot carry surfaceOp"),
    (ev("mystery/type", 7, {}, "append"), {PRESSURE, BREAKDOWN}, "cannot carry surfaceOp"),
    (
        ev("user/message", 7, {"content": []}, {"op": "replace", "start": 1, "end": 2, "x": 3}),
        {PRESSURE, BREAKDOWN},
        "invalid surfaceOp",
    ),
    (ev("user/message", 7, {"content": "abcd"}, "append"), {PRESSURE, BREAKDOWN}, "list"),
    (
        ev(
            "tool/result",
            7,
            {"message": {"content": [{"type": "tool-call", "name": 1, "arguments": ""}]}},
            "append",
        ),
        {PRESSURE, BREAKDOWN},
        "name must be a string",
    ),
    (meter(7, 3, 3, 9, shadowed="3"), {BREAKDOWN}, "shadowedSeqs must be an array"),
    (meter(7, 3, 3, -9), {PRESSURE, BREAKDOWN}, "shadowedTokenCount"),
    (header(7, system=5), {BREAKDOWN}, "header.system must be a string"),
    (system(7, "x", op=replace(3, 3)), {BREAKDOWN}, "not exactly one retained system prompt"),
    (ev("user/message", 7, None, "append"), {PRESSURE, BREAKDOWN, USAGE}, "data must be an object"),
    (ev("turn/start", 7, {}, time=None), {PRESSURE, BREAKDOWN, USAGE}, "time"),
]


@pytest.mark.parametrize(("event", "faulted", "fragment"), FAULTS)
def test_fault_isolation(event: Any, faulted: set[int], fragment: str) -> None:
    record = run(LOG)
    before = [slot_row(record, i) for i in range(3)]
    assert process(record, event) is Outcome.FAULTED
    for i in range(3):
        row = slot_row(record, i)
        if i in faulted:
            assert row[2] == before[i][2]  # cursor kept
            assert row[4] == before[i][4]  # state kept
            assert row[3][0] == 7
            assert fragment in row[3][1]
        else:
            assert row[2] == 7  # the others carry on
            assert row[3] is None
    assert set(faults(record)) == {KEYS[i] for i in faulted}


@pytest.mark.parametrize(("event", "faulted", "fragment"), FAULTS)
def test_fault_repeats_identically(event: Any, faulted: set[int], fragment: str) -> None:
    record = run(LOG)
    first, second = copy(record), copy(record)
    assert process(first, event) is process(second, event) is Outcome.FAULTED
    assert codec.encode(first) == codec.encode(second)
    # re-offering it to the faulted record changes nothing
    before = codec.encode(first)
    process(first, event)
    assert codec.encode(first) == before


@pytest.mark.parametrize(("event", "faulted", "fragment"), FAULTS)
def test_later_events_skip_the_faulted_projection(
    event: Any, faulted: set[int], fragment: str
) -> None:
    record = run([*LOG, event])
    frozen = {i: slot_row(record, i) for i in faulted}
    later = [user(8, "abcd"), usage_chunk(9, usage(500, 1), turn=1, step=0), context(10, 1000)]
    for e in later:
        outcome = process(record, e)
        assert outcome is (Outcome.FAULTED if len(faulted) == 3 else Outcome.FOLDED)
    for i in range(3):
        if i in faulted:
            assert slot_row(record, i) == frozen[i]
        else:
            assert list(record)[i].cursor == 10
            assert list(record)[i].fault is None


def test_healthy_projections_keep_folding_correctly_beside_a_fault() -> None:
    healthy = run([*LOG, noop(7), user(8, "abcd"), usage_chunk(9, usage(500, 1), turn=1)])
    faulted = run([*LOG, context(7, 0), user(8, "abcd"), usage_chunk(9, usage(500, 1), turn=1)])
    assert views(faulted)["contextBreakdown"] == views(healthy)["contextBreakdown"]
    assert views(faulted)["tokenUsage"] == views(healthy)["tokenUsage"]
    assert views(faulted)["contextPressure"] == views(run(LOG))["contextPressure"]


def test_claim_mismatch_is_reported_with_the_spec_message() -> None:
    record = run([*LOG, meter(7, 3, 3, 9, shadowed=[3])])
    assert process(record, user(8, "abcd", op=replace(3, 5))) is Outcome.FAULTED
    found = faults(record)
    assert set(found) == {"contextPressure", "contextBreakdown"}
    for fault in found.values():
        assert fault["seq"] == 8
        assert "replace at seq 8 over range 3-5 has no adjacent shadow price" in fault["error"]
        assert "(armed claim covers 3-3)" in fault["error"]


@pytest.mark.parametrize("depth", [2_000, 50_000])
def test_hostile_nesting_faults_instead_of_crashing(depth: int) -> None:
    block: Any = {"type": "x"}
    for _ in range(depth):
        block = {"type": "x", "inner": block}
    event = ev("user/message", 7, {"content": [block]}, "append")
    record = run(LOG)
    assert process(record, event) is Outcome.FAULTED
    assert set(faults(record)) == {"contextPressure", "contextBreakdown"}


# --- unknown types and the claim --------------------------------------------------------------


def test_unknown_type_is_a_no_op_that_expires_the_claim() -> None:
    record = run([*LOG, meter(7, 3, 3, 9, shadowed=[3])])
    assert process(record, ev("totally/unknown", 8, {"x": 1})) is Outcome.FOLDED
    before = views(record)
    assert process(record, user(9, "abcd" * 20, op=replace(3, 3))) is Outcome.FOLDED
    assert views(record) == before  # unpriced replacement: neutral
    assert faults(record) == {}


def test_passive_and_full_paths_agree() -> None:
    # The processor may short-cut events no projection reads ("passive"); the short cut
    # must land on the state a full apply would have produced.
    armed = run([*LOG, meter(7, 3, 3, 9, shadowed=[3])])
    for event in [noop(8), text_chunk(8), ev("x/y", 8, {"z": 1})]:
        for projection, slot in zip(PROJECTIONS, armed, strict=True):
            via_apply = projection.apply(slot.state, event)
            assert via_apply.claim is None if hasattr(via_apply, "claim") else True
            shortcut = getattr(projection, "passive", None)
            if getattr(event, "passive", False) and shortcut is not None:
                assert projection.encode(shortcut(slot.state)) == projection.encode(via_apply)


# --- packed chunk runs ------------------------------------------------------------------------

ROW = build.chunk_row("text-chunks", 8, 0, ["a", "b", "c", "d"], dt=[1, 1, 1])


@pytest.mark.parametrize(
    "prefix",
    [
        [*LOG, meter(7, 3, 3, 9, shadowed=[3])],  # claim armed: the run expires it
        [*LOG, noop(7)],
        [*LOG, noop(7), text_chunk(8), text_chunk(9)],  # part of the run already applied
        LOG,  # a gap before the run
        [*LOG, context(7, 0)],  # one projection already faulted
    ],
)
def test_process_run_equals_processing_each_event(prefix: list[Any]) -> None:
    one_by_one = run(prefix)
    for raw_event in expand(ROW):
        process(one_by_one, read_event(raw_event))
    at_once = run(prefix)
    process_run(at_once, 8, 4)
    assert codec.encode(at_once) == codec.encode(one_by_one)


# --- the published update ---------------------------------------------------------------------


def test_update_shape_without_faults() -> None:
    record = run(LOG)
    out = update("s-1", record)
    assert list(out) == ["sessionId", "seq", *KEYS]
    assert out["sessionId"] == "s-1"
    assert out["seq"] == 6
    assert "faults" not in out
    assert out["contextPressure"] == views(record)["contextPressure"]


def test_update_shape_with_faults() -> None:
    record = run([*LOG, context(7, 0)])
    out = update("s-1", record)
    assert list(out) == ["sessionId", "seq", *KEYS, "faults"]
    assert out["faults"] == {
        "contextPressure": {
            "seq": 7,
            "error": "request/context at seq 7: contextWindow must be a positive integer, got 0",
        }
    }
    assert orjson.loads(orjson.dumps(out)) == out  # publishable as JSON


def test_fault_type() -> None:
    record = run([*LOG, context(7, 0)])
    assert list(record)[PRESSURE].fault == Fault(7, list(record)[PRESSURE].fault.error)
