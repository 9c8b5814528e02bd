"""The session row codec: compact, exact, versioned per projection.

Contract: "Per-session processing".
"""

from typing import Any

import orjson
import pytest

from stream.session import codec, processor
from stream.session.processor import (
    PROJECTIONS,
    Outcome,
    SessionRecord,
    faults,
    process,
    views,
)

from ..builders import (
    assistant,
    context,
    header,
    meter,
    replace,
    system,
    usage,
    usage_chunk,
    user,
)

LOG = [
    header(0, "You are terse.", [{"name": "bash"}]),
    context(1, 128_000),
    system(2, "You are terse."),
    user(3, "abcd"),
    usage_chunk(4, usage(100, 5, 7, 9), turn=0, step=0),
    assistant(5, "abcd", usage=usage(100, 7), turn=0, step=0),
    system(6, "You are terse, and precise."),
    user(7, "abcd" * 4),
    meter(8, 3, 5, 27, shadowed=[3, 4, 5]),
]


def run(events: list[Any], record: SessionRecord | None = None) -> SessionRecord:
    record = SessionRecord.new() if record is None else record
    for event in events:
        process(record, event)
    return record


def edit_row(row: bytes, key: str, index: int, value: Any) -> bytes:
    raw = orjson.loads(row)
    for entry in raw[4:]:
        if entry[0] == key:
            entry[index] = value
    return orjson.dumps(raw)


@pytest.mark.parametrize("length", [0, 1, 3, 5, 6, len(LOG)])
def test_round_trip_is_byte_identical(length: int) -> None:
    record = run(LOG[:length])
    row = codec.encode(record)
    again = codec.decode(row)
    assert codec.encode(again) == row
    assert again == record
    assert views(again) == views(record)


def test_round_trip_keeps_claims_and_prompts() -> None:
    record = run(LOG)  # ends on a metering event: both surface claims are armed
    decoded = codec.decode(codec.encode(record))
    assert decoded.slots["contextPressure"].state.claim is not None
    assert decoded.slots["contextBreakdown"].state.claim is not None
    assert (
        decoded.slots["contextBreakdown"].state.prompts
        == record.slots["contextBreakdown"].state.prompts
        == ((2, 8), (6, 11))
    )
    # the decoded claim consumes exactly like the original
    for target in (record, decoded):
        assert process(target, user(9, "x", op=replace(3, 5))) is Outcome.FOLDED
    assert codec.encode(decoded) == codec.encode(record)
    assert decoded.slots["contextBreakdown"].state.prompts == (
        (2, 8),
        (6, 11),
    )  # seqs 3-5 hold no prompt


def test_round_trip_keeps_faults() -> None:
    record = run([*LOG, context(9, 0), user(10, "abcd")])
    decoded = codec.decode(codec.encode(record))
    assert faults(decoded) == faults(record)
    assert decoded == record


def test_row_layout() -> None:
    record = run(LOG[:2])
    raw = orjson.loads(codec.encode(record))
    assert raw[0] == codec.ROW_FORMAT
    assert raw[1] == record.seen == 1
    assert [entry[:4] for entry in raw[4:]] == [[p.key, p.version, 1, None] for p in PROJECTIONS]


# --- version bumps ------------------------------------------------------------------------------


@pytest.mark.parametrize("index", range(len(PROJECTIONS)))
def test_version_bump_discards_only_that_projection(index: int) -> None:
    record = run(LOG)
    key = PROJECTIONS[index].key
    stale = edit_row(codec.encode(record), key, 1, PROJECTIONS[index].version - 1)
    decoded = codec.decode(stale)
    for i, (projection, slot) in enumerate(zip(PROJECTIONS, decoded, strict=True)):
        if i == index:
            assert slot.cursor == -1
            assert slot.fault is None
            assert slot.state == projection.init()
        else:
            assert slot == list(record)[i]
    assert decoded.seen == record.seen


@pytest.mark.parametrize("index", range(len(PROJECTIONS)))
def test_replay_rebuilds_the_discarded_projection(index: int) -> None:
    record = run(LOG)
    key = PROJECTIONS[index].key
    decoded = codec.decode(edit_row(codec.encode(record), key, 1, 10_000))
    others = [i for i in range(len(PROJECTIONS)) if i != index]

    def kept() -> list[Any]:
        raw = orjson.loads(codec.encode(decoded))
        return [raw[4 + i] for i in others]

    before = kept()
    for event in LOG:  # replaying the input topic: the others skip it as duplicates
        assert process(decoded, event) is Outcome.FOLDED
        assert kept() == before
    assert codec.encode(decoded) == codec.encode(record)


def test_breakdown_version_6_discards_version_5_rows() -> None:
    record = run(LOG)
    decoded = codec.decode(edit_row(codec.encode(record), "contextBreakdown", 1, 5))
    assert decoded.slots["contextBreakdown"].cursor == -1
    assert decoded.slots["contextPressure"] == record.slots["contextPressure"]
    assert decoded.slots["tokenUsage"] == record.slots["tokenUsage"]


def test_unknown_and_missing_projection_keys() -> None:
    record = run(LOG)
    raw = orjson.loads(codec.encode(record))
    raw.append(["retiredProjection", 3, 8, None, [1, 2, 3]])
    raw = [entry for entry in raw if not (type(entry) is list and entry[0] == "tokenUsage")]
    decoded = codec.decode(orjson.dumps(raw))
    assert decoded.slots["contextPressure"] == record.slots["contextPressure"]
    assert decoded.slots["contextBreakdown"] == record.slots["contextBreakdown"]
    assert decoded.slots["tokenUsage"].cursor == -1  # new projection: rebuilt by replay


@pytest.mark.parametrize(
    "row", [b"", b"not json", b"{}", b"[]", b"[0]", b"[2, 5]", b'"row"', b"null"]
)
def test_unreadable_rows(row: bytes) -> None:
    with pytest.raises(codec.RowError):
        codec.decode(row)


# --- size --------------------------------------------------------------------------------------


def test_row_size_does_not_follow_the_message_count() -> None:
    # docs/notes/007: long tool-heavy runs kept ~2,000 per-node entries; version 6 keeps none.
    def row(n: int) -> bytes:
        return codec.encode(run([user(i, "abcd") for i in range(n)]))

    small, large = row(10), row(2000)
    # Only integers grow: `seen` and three cursors (9 -> 1999: +3 digits each) and the
    # surface total kept by two projections (90 -> 18000: +3 digits each).
    digits = 4 * (len("1999") - len("9")) + 2 * (len("18000") - len("90"))
    assert len(large) - len(small) <= digits
    assert len(large) < 230


def test_row_size_follows_the_retained_prompts() -> None:
    events = [system(0, "You are terse.")] + [user(i, "abcd") for i in range(1, 2000)]
    one_prompt = codec.encode(run(events))
    five = [*events, *(system(2000 + k, f"Prompt {k}.") for k in range(4))]
    five_prompts = codec.encode(run(five))
    assert len(five_prompts) - len(one_prompt) < 4 * 12


def test_a_version_bump_mid_session_waits_for_the_replay_without_faulting() -> None:
    record = run(LOG)
    key = "contextBreakdown"
    decoded = codec.decode(edit_row(codec.encode(record), key, 1, 10_000))
    assert decoded.slots[key].rebuilding
    live = process(decoded, user(len(LOG), "live"))
    assert live is Outcome.FOLDED
    out = processor.update("s", decoded)
    assert "faults" not in out and out["rebuilding"] == [key] and key not in out
    for event in LOG:  # the replay from seq 0 rebuilds it; the others skip it
        process(decoded, event)
    process(decoded, user(len(LOG), "live"))
    fresh = run([*LOG, user(len(LOG), "live")])
    assert processor.update("s", decoded) == processor.update("s", fresh)


def test_format_1_rows_are_read() -> None:
    record = run(LOG)
    raw = orjson.loads(codec.encode(record))
    old = [1, raw[1], *(entry[:5] for entry in raw[4:])]
    decoded = codec.decode(orjson.dumps(old))
    assert processor.views(decoded) == processor.views(record)
    assert decoded.offset == -1 and decoded.tally.total == 0


@pytest.mark.parametrize(
    ("edit", "why"),
    [
        (lambda raw: raw[4].__setitem__(2, "x"), "cursor"),
        (lambda raw: raw[4].__setitem__(4, [1, 2]), "contextPressure state"),
        (lambda raw: raw[5][4].__setitem__(3, [1]), "pairs"),
        (lambda raw: raw[6][4].__setitem__(0, [1, 2, 3]), "totals"),
        (lambda raw: raw.__setitem__(3, [1]), "tally"),
        (lambda raw: raw[4].__setitem__(3, [1, 2]), "fault error"),
    ],
)
def test_rows_are_validated_against_the_state_schema(edit: Any, why: str) -> None:
    raw = orjson.loads(codec.encode(run(LOG)))
    edit(raw)
    with pytest.raises(codec.RowError, match=why):
        codec.decode(orjson.dumps(raw))
