"""The offline fold and the published seq: one definition shared with the worker."""

from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stream.cli import main
from stream.config import Settings
from stream.contract.errors import BadLine
from stream.contract.events import read_event
from stream.contract.storage import ChunkRun
from stream.logs.reader import open_log, text_lines
from stream.projections.breakdown import CONTEXT_BREAKDOWN
from stream.session.batch import Message, fold_batch
from stream.session.offline import fold_lines, fold_text
from stream.session.processor import (
    SessionRecord,
    Tally,
    fold_items,
    process,
    process_run,
    update,
)
from stream.testing import events as build

from ..builders import raw, user


def user_raw(seq: int) -> dict[str, Any]:
    return build.user_message(seq, build.texts("ab"))


def test_a_log_ending_in_a_duplicate_publishes_the_highest_seq_seen(
    tmp_path: Path, capsys: Any
) -> None:
    events = [user_raw(0), user_raw(1), user_raw(2), user_raw(1)]
    log = tmp_path / "s.jsonl"
    log.write_bytes(b"\n".join(orjson.dumps(e) for e in events) + b"\n")
    assert main(["fold", str(log)]) == 0
    offline = orjson.loads(capsys.readouterr().out)
    messages = [Message(b"s", orjson.dumps(e), "t", 0, offset) for offset, e in enumerate(events)]
    worker = fold_batch(messages, lambda key, partition: None).sessions[0].update
    assert offline["seq"] == worker["seq"] == 2
    assert offline == worker


def test_stream_fold_and_the_worker_fold_under_the_same_limit(
    tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """STREAM_MAX_SYSTEM_PROMPTS reaches both paths as a parameter: the same faults, and no
    shared projection object changed for whoever folds next."""
    events = [build.system_message(seq, build.texts(f"prompt {seq}"), time=seq) for seq in range(3)]
    log = tmp_path / "s.jsonl"
    log.write_bytes(b"\n".join(orjson.dumps(e) for e in events) + b"\n")
    monkeypatch.setenv("STREAM_MAX_SYSTEM_PROMPTS", "1")
    assert main(["fold", str(log)]) == 0
    offline = orjson.loads(capsys.readouterr().out)
    messages = [Message(b"s", orjson.dumps(e), "t", 0, offset) for offset, e in enumerate(events)]
    limits = Settings.from_env().limits
    worker = fold_batch(messages, lambda key, partition: None, limits).sessions[0].update
    assert offline == worker
    assert (
        "would retain more than 1 system prompts" in worker["faults"]["contextBreakdown"]["error"]
    )
    assert CONTEXT_BREAKDOWN.max_prompts == 1_000
    assert "faults" not in fold_batch(messages, lambda key, partition: None).sessions[0].update


def test_unreadable_lines_are_reported_with_their_real_line_number(
    tmp_path: Path, capsys: Any
) -> None:
    log = tmp_path / "t.jsonl"
    log.write_text(
        '{"type":"session","id":"t"}\n'
        + orjson.dumps(user_raw(0)).decode()
        + '\n{"type":"x","time":1,"data":{}}\n{nope\n'
    )
    assert main(["fold", str(log)]) == 0
    err = capsys.readouterr().err
    assert f"{log}:3: unreadable: event has no usable seq" in err
    assert f"{log}:4: unreadable: not JSON" in err
    session = open_log(log)
    bad = [b for b in fold_lines(SessionRecord.new(), session.lines()) if b is not None]
    assert [b.line for b in bad] == [3, 4] and all(isinstance(b, BadLine) for b in bad)


@settings(max_examples=1500, deadline=None)
@given(
    st.lists(st.integers(0, 12), max_size=8),
    st.integers(0, 14),
    st.integers(1, 6),
    st.booleans(),
)
def test_a_packed_run_folds_and_counts_like_its_events_one_by_one(
    before: list[int], seq0: int, count: int, faulting: bool
) -> None:
    """``process_run`` (O(1)) equals ``process`` on each event: state, seen and tally."""

    def prepare() -> SessionRecord:
        record = SessionRecord.new()
        for seq in before:
            process(record, read_event(user_raw(seq)))
        if faulting:  # a projection faulted mid-way: runs over it account per event
            bad = raw("request/context", max(before, default=0) + 1, {"contextWindow": 0})
            process(record, read_event(bad))
        return record

    at_once, one_by_one = prepare(), prepare()
    run = process_run(at_once, seq0, count)
    expected = Tally()
    for seq in range(seq0, seq0 + count):
        chunk = raw("assistant/chunk", seq, {"turn": 0, "step": 0, "chunk": {"type": "text-delta"}})
        expected.count(process(one_by_one, read_event(chunk)))
    assert run == expected
    assert update("s", at_once) == update("s", one_by_one)
    assert [(s.cursor, s.fault) for s in at_once] == [(s.cursor, s.fault) for s in one_by_one]


def test_builders_events_fold() -> None:
    record = SessionRecord.new()
    process(record, user(0, "abcd"))
    assert update("s", record)["seq"] == 0


def _chunk(seq: int) -> dict[str, Any]:
    return raw("assistant/chunk", seq, {"turn": 0, "step": 0, "chunk": {"type": "text-delta"}})


@settings(max_examples=1500, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["chunk", "user", "run", "bad"]), st.integers(0, 14)),
        max_size=14,
    ),
    st.lists(st.integers(1, 4), min_size=14, max_size=14),
)
def test_gathered_runs_fold_and_count_like_events_one_by_one(
    items: list[tuple[str, int]], sizes: list[int]
) -> None:
    """``fold_items`` gathers passive events and packed runs into runs; the record and
    the tally must equal ``process`` on each event in turn, in any order, with
    duplicates, gaps and faults."""
    gathered, one_by_one = SessionRecord.new(), SessionRecord.new()
    folding: list[Any] = []
    expected = Tally()
    for (kind, seq), size in zip(items, sizes, strict=False):
        if kind == "run":
            folding.append(ChunkRun(seq, size, {}))
            events = [_chunk(s) for s in range(seq, seq + size)]
        elif kind == "bad":  # a fault on the surface projections
            events = [raw("request/context", seq, {"contextWindow": 0})]
            folding.append(read_event(events[0]))
        else:
            events = [_chunk(seq) if kind == "chunk" else user_raw(seq)]
            folding.append(read_event(events[0]))
        for event in events:
            expected.count(process(one_by_one, read_event(event)))
    fold_items(gathered, folding, gathered.tally)
    assert gathered.tally == expected
    assert update("s", gathered) == update("s", one_by_one)
    assert [(s.cursor, s.fault, s.state) for s in gathered] == [
        (s.cursor, s.fault, s.state) for s in one_by_one
    ]


EXAMPLES = sorted((Path(__file__).parents[3] / "docs" / "examples").glob("*.jsonl"))


@pytest.mark.parametrize("every_event", [False, True])
@pytest.mark.parametrize("tail", [b"", b"{torn\n\n[1]\n"])
def test_a_log_folds_from_its_text_as_from_its_read_lines(
    tmp_path: Path, every_event: bool, tail: bytes
) -> None:
    """``stream fold``'s path (``text_lines``, ``fold_text``) and the reader's lines
    (``fold_lines``): the same records, bad lines and updates after every event."""
    assert EXAMPLES
    for example in EXAMPLES:
        log = tmp_path / example.name
        log.write_bytes(example.read_bytes() + tail)
        opened = open_log(log)
        by_lines = SessionRecord.new()
        expected = [
            update(opened.session_id, by_lines) if bad is None else bad
            for bad in fold_lines(by_lines, opened.lines(), every_event)
        ]
        with text_lines(log) as (session_id, lines):
            by_text = SessionRecord.new()
            got = [
                update(session_id, by_text) if bad is None else bad
                for bad in fold_text(by_text, lines, every_event)
            ]
        assert session_id == opened.session_id
        assert got == expected
        assert update(session_id, by_text) == update(session_id, by_lines)
        assert by_text.tally == by_lines.tally
        assert [b.line for b in got if isinstance(b, BadLine)] == (
            [b.line for b in expected if isinstance(b, BadLine)]
        )
