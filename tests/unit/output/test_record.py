"""The output record (``stream.output.record``): its three ways in, its headers, its bytes.

A batch's change, a stored row and a record read back from the output topic must give the
same ``SessionUpdate`` for the same session state, the headers must be the ones the worker
has always written, and the payload the core encoded must go out as it is.
"""

import ast
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

import stream.output
from stream.output.record import SessionUpdate
from stream.session import codec
from stream.session.batch import BatchResult, Limits, Message, SessionChange, fold_batch
from stream.session.processor import PROJECTIONS, update
from stream.testing import events as build

TOPIC = "events"
DEFAULT_LIMITS = Limits()


def user(seq: int) -> bytes:
    return orjson.dumps(build.user_message(seq, build.texts("abcd"), time=seq))


def reset(gen: int, key: bytes, offset: int) -> Message:
    return Message(key, None, TOPIC, 0, offset, [("stream-reset", str(gen).encode())])


def folded(limits: Limits = DEFAULT_LIMITS) -> BatchResult:
    """A batch with varied sessions: plain, with duplicates, with a gap (faults), reset
    to generation 4."""
    messages: list[Message] = []

    def add(key: bytes, value: bytes) -> None:
        messages.append(Message(key, value, TOPIC, 0, len(messages)))

    for seq in range(3):
        add(b"plain", user(seq))
    for seq in (0, 1, 1, 0):
        add(b"dup", user(seq))
    for seq in (0, 2):
        add(b"gap", user(seq))
    messages.append(reset(4, b"reset", len(messages)))
    add(b"reset", user(0))
    return fold_batch(messages, lambda key, partition: None, limits)


def by_id(result: BatchResult) -> dict[str, SessionChange]:
    return {c.session_id: c for c in result.sessions}


def test_the_batch_covers_what_the_headers_carry() -> None:
    changes = by_id(folded())
    assert changes["dup"].tally.duplicate > 0
    assert changes["gap"].tally.faulted > 0 and "faults" in changes["gap"].update
    assert changes["reset"].gen == 4


@pytest.mark.parametrize("deployment_gen", [1, 3, 7])
def test_headers_round_trip(deployment_gen: int) -> None:
    for change in folded().sessions:
        record = SessionUpdate.from_change(change, deployment_gen)
        back = SessionUpdate.from_kafka(change.key, record.payload, record.headers())
        assert back == record
        assert back.gen == max(deployment_gen, change.gen)


@given(
    st.integers(1, 2**53 - 1),
    st.integers(0, 2**53 - 1),
    st.tuples(*[st.integers(0, 2**53 - 1)] * 3),
    st.integers(0, 10**6),
)
def test_any_record_reads_back_from_its_headers(
    gen: int, seq: int, tally: tuple[int, int, int], v: int
) -> None:
    payload = orjson.dumps({"sessionId": "s", "seq": seq})
    record = SessionUpdate("s", gen, seq, tally, payload, v)
    assert SessionUpdate.from_kafka(b"s", payload, record.headers()) == record


def test_headers_are_the_ones_written_before() -> None:
    record = SessionUpdate("s", 2, 5, (3, 1, 0), b"{}", 8)
    assert record.headers() == [("gen", b"2"), ("tally", b"3 1 0"), ("v", b"8")]


def test_from_change_takes_what_the_fold_made() -> None:
    for change in folded().sessions:
        record = SessionUpdate.from_change(change, 1)
        assert record.session_id == change.session_id
        assert record.seq == change.update["seq"]
        assert record.tally == tuple(change.tally.as_list())
        assert record.view_version == change.view_version
        assert orjson.loads(record.payload) == change.update


def test_the_payload_is_not_encoded_again() -> None:
    for change in folded().sessions:
        assert SessionUpdate.from_change(change, 1).payload is change.payload
        value = bytes(change.payload)  # a record's value, as the consumer hands it over
        assert SessionUpdate.from_kafka(change.key, value, None).payload is value


def test_a_change_without_its_payload_is_refused() -> None:
    change = folded().sessions[0]
    bare = SessionChange(
        change.session_id, change.key, change.partition, change.row, change.update, change.tally
    )
    with pytest.raises(ValueError, match="no payload"):
        SessionUpdate.from_change(bare, 1)


@pytest.mark.parametrize("limits", [DEFAULT_LIMITS, Limits(system_prompts=5)])
@pytest.mark.parametrize("gen", [1, 3, 7])
def test_from_row_equals_from_change_for_the_same_state(limits: Limits, gen: int) -> None:
    for change in folded(limits).sessions:
        from_row = SessionUpdate.from_row(change.session_id, change.row, gen, limits.folds)
        assert from_row == SessionUpdate.from_change(change, gen)
        assert from_row.payload == change.payload  # byte for byte


def test_from_row_reads_an_older_row_format() -> None:
    record = SessionUpdate.from_row("s", b"[1,5]", 2, PROJECTIONS)  # format 1: no tally
    assert (record.gen, record.tally) == (2, (0, 0, 0))
    assert record.payload == orjson.dumps(update("s", codec.decode(b"[1,5]")))


@pytest.mark.parametrize("row", [b"\x00not a row", b"[1]", b"{}", b"[9,1,2,3]"])
def test_an_unreadable_row_raises_a_row_error(row: bytes) -> None:
    with pytest.raises(codec.RowError):
        SessionUpdate.from_row("s", row, 1, PROJECTIONS)


@pytest.mark.parametrize("headers", [None, [], [("other", b"x")], [("gen", None)]])
def test_records_without_headers_read_as_before_headers_existed(headers: Any) -> None:
    value = b'{"sessionId":"s","seq":4}'
    assert SessionUpdate.from_kafka(b"s", value, headers) == SessionUpdate(
        "s", 1, 4, (0, 0, 0), value, 0
    )


def test_headers_read_as_pairs_or_as_a_mapping() -> None:
    record = SessionUpdate("s", 3, 4, (5, 1, 0), b'{"seq":4}', 6)
    as_pairs = SessionUpdate.from_kafka(b"s", record.payload, record.headers())
    assert as_pairs == SessionUpdate.from_kafka(b"s", record.payload, dict(record.headers()))
    assert as_pairs == record


def test_each_header_has_its_own_default() -> None:
    value = b'{"seq":4}'
    only_tally = SessionUpdate.from_kafka(b"s", value, [("tally", b"2 1 0")])
    assert (only_tally.gen, only_tally.tally, only_tally.view_version) == (1, (2, 1, 0), 0)
    only_gen = SessionUpdate.from_kafka(b"s", value, [("gen", b"5"), ("v", b"9")])
    assert (only_gen.gen, only_gen.tally, only_gen.view_version) == (5, (0, 0, 0), 9)


@pytest.mark.parametrize(
    ("key", "value", "headers", "error"),
    [
        (b"s", b"{torn", None, ValueError),  # not JSON
        (b"s", b"[1]", None, TypeError),  # not an object
        (b"s", b"{}", None, KeyError),  # no seq
        (b"s", b'{"seq":"x"}', None, ValueError),
        (b"\xff", b'{"seq":1}', None, ValueError),  # a key that is not UTF-8
        (b"s", b'{"seq":1}', [("gen", b"x")], ValueError),
        (b"s", b'{"seq":1}', [("tally", b"1 2")], ValueError),
        (b"s", b'{"seq":1}', [("v", b"")], ValueError),
    ],
)
def test_a_record_that_is_not_an_update_raises(
    key: bytes, value: bytes, headers: Any, error: type[Exception]
) -> None:
    with pytest.raises(error):
        SessionUpdate.from_kafka(key, value, headers)


def test_version_orders_generation_seq_events_then_views() -> None:
    def v(gen: int, seq: int, tally: tuple[int, int, int], view: int) -> Any:
        return SessionUpdate("s", gen, seq, tally, b"{}", view).version

    assert v(1, 2, (1, 1, 1), 3) == (1, 2, 3, 3)
    assert v(2, 0, (0, 0, 0), 0) > v(1, 9, (9, 0, 0), 9)
    assert v(1, 3, (0, 0, 0), 0) > v(1, 2, (9, 0, 0), 9)
    assert v(1, 3, (1, 0, 1), 0) > v(1, 3, (1, 0, 0), 9)
    assert v(1, 3, (1, 0, 0), 1) > v(1, 3, (1, 0, 0), 0)


# --- the package stays below the writers ------------------------------------------------------

OUTPUT = sorted(Path(stream.output.__file__).parent.glob("*.py"))
ALLOWED = ("stream.output", "stream.session", "stream.projections", "stream.contract", "orjson")
STDLIB = ("collections", "dataclasses", "typing", "heapq", "itertools", "zlib")


def imported(path: Path) -> list[str]:
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
    return names


@pytest.mark.parametrize("path", OUTPUT, ids=lambda p: p.name)
def test_the_output_package_imports_no_io_and_no_writer(path: Path) -> None:
    """No Redis, Kafka or Faust, nor the packages that use it (publish, gateway, config)."""
    found = [n for n in imported(path) if not n.startswith(ALLOWED + STDLIB)]
    assert not found, f"{path.name} imports {found}"


def test_the_output_package_is_there() -> None:
    names = {"__init__.py", "headers.py", "layout.py", "record.py", "redis.py"}
    assert {p.name for p in OUTPUT} == names
