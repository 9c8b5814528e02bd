"""No record stalls a partition: ``fold_batch`` never raises and accounts for every input.

The property runs the hostile producer of ``tests.generators.extreme`` (the same messages
the fault suite sends through a real worker). ``STREAM_FUZZ_EXAMPLES`` makes it a longer
fuzz run (``make fuzz``).
"""

import os
import random
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stream import native
from stream.contract.storage import ChunkRun
from stream.output.headers import RESET_HEADER
from stream.session import batch as batch_module
from stream.session import codec
from stream.session import input as input_module
from stream.session.batch import (
    PARTITION_KEY,
    DeadLetter,
    Limits,
    Message,
    decode,
    fold_batch,
)
from stream.session.input import MAX_GENERATION, Reset
from stream.testing import events as build
from tests.generators.extreme import MAX_SAFE, Raw, extreme_messages

EXAMPLES = int(os.environ.get("STREAM_FUZZ_EXAMPLES", "200"))
LIMITS = Limits()


class Store:
    """The table as the worker keeps it: rows by (partition, key)."""

    def __init__(self) -> None:
        self.rows: dict[tuple[int, bytes], bytes] = {}

    def fold(self, messages: list[Message], limits: Limits = LIMITS) -> Any:
        result = fold_batch(
            messages, lambda key, partition: self.rows.get((partition, key)), limits
        )
        for change in result.sessions:
            self.rows[(change.partition, change.key)] = change.row
        for part in result.partitions:
            self.rows[(part.partition, PARTITION_KEY)] = part.row
        return result


def messages_of(raws: list[Raw], partitions: int = 3) -> list[Message]:
    out = []
    for offset, (key, value, headers) in enumerate(raws):
        partition = hash(key) % partitions
        out.append(Message(key, value, "events", partition, offset, headers))
    return out


def events_in(message: Message, limits: Limits = LIMITS) -> int:
    """The events a message holds as the contract reads it (a reset record holds none)."""
    _, items = decode(message, limits)
    return sum(
        item.size
        if type(item) is ChunkRun
        else item.count
        if type(item) is DeadLetter
        else 0
        if type(item) is Reset
        else 1
        for item in items
    )


def all_integers(value: Any) -> list[int]:
    if type(value) is int:
        return [value]
    if type(value) is list:
        return [n for v in value for n in all_integers(v)]
    if type(value) is dict:
        return [n for v in value.values() for n in all_integers(v)]
    return []


def check(result: Any, messages: list[Message]) -> None:
    """Every input accounted once; everything written is bytes JSON readers take exactly."""
    assert result.counts.total == sum(events_in(m) for m in messages)
    assert min(result.counts.as_dict().values()) >= 0
    assert min(result.retired.as_dict().values()) >= 0
    for change in result.sessions:
        assert orjson.loads(change.payload) == change.update
        numbers = all_integers(change.update)
        assert all(-MAX_SAFE <= n <= MAX_SAFE for n in numbers), change.update
        codec.decode(change.row)
        assert 0 <= change.gen <= MAX_GENERATION


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.randoms(use_true_random=False), st.integers(1, 60), st.integers(1, 4))
def test_hostile_batches_never_raise_and_account_for_every_input(
    rng: random.Random, count: int, batches: int
) -> None:
    store = Store()
    raws = extreme_messages(rng, count, prefix="p")
    messages = messages_of(raws)
    size = max(1, len(messages) // batches)
    for start in range(0, len(messages), size):
        chunk = messages[start : start + size]
        check(store.fold(chunk), chunk)
    # Redelivered after a crash: refolded, counted nothing, still never raises.
    again = store.fold(messages)
    assert again.counts.total == 0


@settings(max_examples=EXAMPLES, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.one_of(st.none(), st.binary(max_size=12)),
            st.one_of(st.none(), st.binary(max_size=120)),
            st.lists(
                st.tuples(
                    st.sampled_from([RESET_HEADER, "x", "", "gen"]),
                    st.one_of(st.none(), st.binary(max_size=20)),
                ),
                max_size=3,
            ),
        ),
        max_size=20,
    )
)
def test_arbitrary_bytes_keys_and_headers_never_raise(raws: list[Raw]) -> None:
    messages = messages_of(raws)
    check(Store().fold(messages), messages)


# --- the records of the hostile run, one by one ---------------------------------------------


def usage_chunk(seq: int, tokens: int) -> dict[str, Any]:
    return build.usage_chunk(seq, build.usage(tokens, 1), step=seq, time=seq)


def test_a_segment_of_usage_samples_past_the_safe_range_faults_token_usage() -> None:
    events = [build.user_message(0, build.texts("hi"), time=0)]
    events += [usage_chunk(seq, MAX_SAFE) for seq in range(1, 2101)]
    message = Message(b"s", orjson.dumps(events), "events", 0, 0)
    result = Store().fold([message])
    (change,) = result.sessions
    fault = change.update["faults"]["tokenUsage"]
    assert fault["seq"] == 2 and "passes 2^53 - 1" in fault["error"]
    assert change.update["tokenUsage"]["uncachedInputTokens"] == MAX_SAFE  # the last good view
    # contextPressure reads each sample alone (each is safe) and goes on.
    assert "contextPressure" not in change.update["faults"]
    assert result.counts.total == 2101
    check(result, [message])


@pytest.mark.parametrize(
    "raw",
    [
        b"0",
        b"-1",
        b"1_0",
        b" 3",
        b"3 ",
        b"0x10",
        b"",
        None,
        b"\xff",
        b"03",
        str(2**53).encode(),
        str(2**64).encode(),
    ],
)
def test_a_reset_generation_outside_one_to_two_to_the_53_is_dead_lettered(
    raw: bytes | None,
) -> None:
    message = Message(b"s", b"", "events", 0, 0, [(RESET_HEADER, raw)])
    result = Store().fold([message])
    (letter,) = result.dead_letters
    assert "needs a generation in 1..9007199254740991" in letter.reason
    assert result.sessions == [] and result.resets == []


def test_the_largest_generation_is_taken_and_logged() -> None:
    message = Message(b"s", b"", "events", 0, 5, [(RESET_HEADER, str(MAX_GENERATION).encode())])
    result = Store().fold([message])
    (note,) = result.resets
    assert (note.session_id, note.gen, note.previous, note.applied) == (
        "s",
        MAX_GENERATION,
        0,
        True,
    )
    assert result.sessions[0].gen == MAX_GENERATION


@pytest.mark.parametrize("named", [1, 2, 4, MAX_GENERATION])
def test_a_reset_naming_a_generation_not_claimed_for_resets_is_dead_lettered(named: int) -> None:
    """Only generations claimed for resets (here 3) are taken: not the deployment's own (1,
    which a new row, at 0, is below), not one claimed by a rebuild (2), not one above."""
    store = Store()
    claimed = Limits(reset_generations=((3, 3),))
    user = [build.user_message(seq, build.texts("x"), time=seq) for seq in range(3)]
    store.fold([Message(b"s", orjson.dumps(user[:2]), "events", 0, 0)], claimed)
    forged = Message(b"s", b"", "events", 0, 1, [(RESET_HEADER, str(named).encode())])
    result = store.fold([forged, Message(b"s", orjson.dumps(user[2]), "events", 0, 2)], claimed)
    (letter,) = result.dead_letters
    assert (
        f"names generation {named}, never claimed for resets on the control topic (claimed: 3;"
        in letter.reason
    )
    assert result.resets == []
    (change,) = result.sessions
    assert change.gen == 0 and change.update["seq"] == 2  # it kept folding, not wiped
    assert "faults" not in change.update
    assert result.counts.as_dict() == {
        "folded": 1,
        "duplicate": 0,
        "faulted": 0,
        "dead_lettered": 1,
    }
    # A claimed generation still applies.
    repair = Message(b"s", b"", "events", 0, 3, [(RESET_HEADER, b"3")])
    (note,) = store.fold([repair], claimed).resets
    assert (note.gen, note.applied) == (3, True)


def test_with_nothing_claimed_every_reset_is_dead_lettered() -> None:
    message = Message(b"s", b"", "events", 0, 0, [(RESET_HEADER, b"1")])
    result = Store().fold([message], Limits(reset_generations=()))
    (letter,) = result.dead_letters
    assert "(claimed: none;" in letter.reason and result.resets == []
    many = Limits(reset_generations=(*((g, g) for g in range(2, 20, 2)), (30, 40)))
    (letter,) = Store().fold([message], many).dead_letters
    assert "(claimed: ..., 12, 14, 16, 18, 30-40;" in letter.reason


def test_a_reset_header_names_its_generation_for_the_edge() -> None:
    assert input_module.reset_generation([(RESET_HEADER, b"12")]) == 12
    assert input_module.reset_generation([("other", b"12")]) == 0
    assert input_module.reset_generation([(RESET_HEADER, b"012")]) == 0
    assert input_module.reset_generation([(RESET_HEADER, str(2**53).encode())]) == 0


def test_an_unread_batch_is_one_dead_letter_counting_its_records() -> None:
    unread = Message(None, b"\x28\xb5", "events", 1, 9, (), "record batch not read", 3)
    result = Store().fold([unread])
    (letter,) = result.dead_letters
    assert letter.reason == "record batch not read"
    assert (letter.partition, letter.offset, letter.value) == (1, 9, b"\x28\xb5")
    assert result.counts.dead_lettered == 3 and result.sessions == []
    assert Store().fold([unread, unread]).counts.dead_lettered == 3  # redelivered: once


def test_resets_can_be_refused() -> None:
    message = Message(b"s", b"", "events", 0, 0, [(RESET_HEADER, b"3")])
    (letter,) = Store().fold([message], Limits(resets=False)).dead_letters
    assert "STREAM_RESETS=off" in letter.reason


def test_a_reset_after_a_gap_keeps_every_count_non_negative_and_retires_the_old_tally() -> None:
    store = Store()
    user = [build.user_message(seq, build.texts("x"), time=seq) for seq in range(4)]
    store.fold([Message(b"s", orjson.dumps([user[0], user[2], user[3]]), "events", 0, 0)])
    repair = [
        Message(b"s", b"", "events", 0, 1, [(RESET_HEADER, b"2")]),
        Message(b"s", orjson.dumps(user), "events", 0, 2),
    ]
    result = store.fold(repair)
    assert result.counts.as_dict() == {
        "folded": 4,
        "duplicate": 0,
        "faulted": 0,
        "dead_lettered": 0,
    }
    assert result.retired.as_dict() == {
        "folded": 1,
        "duplicate": 0,
        "faulted": 2,
        "dead_lettered": 0,
    }
    (note,) = result.resets
    assert (note.gen, note.previous, note.applied) == (2, 0, True)
    (change,) = result.sessions
    # The published tally is every event the key took: this life's 4 and the first's 3.
    assert "faults" not in change.update and change.tally.as_list() == [5, 0, 2]
    # The same reset again is ignored, and logged as such.
    (note,) = store.fold([Message(b"s", b"", "events", 0, 3, [(RESET_HEADER, b"2")])]).resets
    assert not note.applied


@pytest.mark.skipif(
    native.ACTIVE, reason="patches codec.encode, which compiled callers do not look up"
)  # `make unit` runs it in its pure-Python pass
def test_a_session_that_cannot_be_encoded_costs_only_the_message_that_broke_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An error nobody foresaw while encoding (every bound held): the session is refolded
    message by message and only the message after which it cannot be encoded is
    quarantined; other sessions of the batch are untouched."""
    real = codec.encode

    def fussy(record: Any) -> bytes:
        if record.slots["contextBreakdown"].cursor >= 2:  # what seq 2 brings, and keeps
            raise OverflowError("cannot encode")
        return real(record)

    monkeypatch.setattr(batch_module.codec, "encode", fussy)
    user = [build.user_message(seq, build.texts("x"), time=seq) for seq in range(4)]
    messages = [
        Message(b"s", orjson.dumps(user[0]), "events", 0, 0),
        Message(b"s", orjson.dumps(user[1]), "events", 0, 1),
        Message(b"t", orjson.dumps(user[0]), "events", 0, 2),
        Message(b"s", orjson.dumps(user[2]), "events", 0, 3),
        Message(b"s", orjson.dumps(user[3]), "events", 0, 4),
    ]
    result = Store().fold(messages)
    assert result.quarantined == 1
    (letter,) = result.dead_letters
    assert letter.offset == 3 and "while finishing the session" in letter.reason
    by_id = {c.session_id: c for c in result.sessions}
    assert by_id["t"].update["seq"] == 0
    # seq 3 follows the quarantined seq 2: a gap, loudly.
    assert by_id["s"].update["faults"]["contextBreakdown"]["seq"] == 3
    assert result.counts.total == 5
    assert result.counts.dead_lettered == 1
    assert isinstance(letter, DeadLetter)
