"""What Redis holds and carries (``stream.output.redis``): the messages readers tell apart,
the values the writer and its readers share, and the result codes of the functions."""

import orjson
from hypothesis import given
from hypothesis import strategies as st

from stream.output.record import SessionUpdate
from stream.output.redis import (
    HASH_FIELDS,
    OLDER,
    UNCHANGED,
    VERSION_FIELDS,
    WRITTEN,
    expiry_message,
    expiry_of,
    is_expiry,
    marker_value,
    parse_tally,
    partition_field,
    session_id_in,
    tally_text,
)
from stream.session.processor import SessionRecord, update


def an_update(session_id: str = "s") -> bytes:
    record = SessionRecord.new()
    record.seen = 3
    return orjson.dumps(update(session_id, record))


def test_the_expiry_message_is_what_readers_have_always_been_sent() -> None:
    assert expiry_message("s") == b'{"sessionId":"s","expired":true}'


def test_expiry_messages_are_told_from_updates() -> None:
    assert expiry_of(b'{"sessionId":"s","expired":true}')
    assert not expiry_of(b'{"sessionId":"s","expired":false}')
    assert not expiry_of(b'{"sessionId":"s","seq":3,"expired":true}')
    assert not expiry_of(an_update())
    assert not expiry_of(b'{"expired": tru')
    assert not expiry_of(b'["expired"]')
    assert is_expiry({"sessionId": "s", "expired": True})
    assert not is_expiry({"sessionId": "s", "seq": 3, "expired": True})
    assert not is_expiry(orjson.loads(an_update()))


@given(st.text())
def test_an_expiry_message_is_read_back_for_any_session_id(session_id: str) -> None:
    message = expiry_message(session_id)
    assert expiry_of(message) and session_id_in(message) == session_id


def test_the_session_id_of_a_feed_message() -> None:
    assert session_id_in(an_update("abc")) == "abc"
    assert session_id_in(b'{"sessionId": 5}') is None
    assert session_id_in(b"[1]") is None
    assert session_id_in(b"{torn") is None


def test_the_hash_fields_are_the_version_in_the_guard_s_order_and_the_update() -> None:
    assert VERSION_FIELDS == ("gen", "seq", "n", "v")
    assert HASH_FIELDS == ("gen", "seq", "n", "v", "update")
    u = SessionUpdate("s", 3, 7, (4, 2, 1), b"{}", 5)
    assert dict(zip(VERSION_FIELDS, u.version, strict=True)) == {
        "gen": 3,
        "seq": 7,
        "n": 7,
        "v": 5,
    }


@given(st.tuples(*(st.integers(0, 2**53),) * 3))
def test_a_tally_is_read_back_as_written(tally: tuple[int, int, int]) -> None:
    assert parse_tally(tally_text(tally)) == tally


def test_the_totals_values_keep_their_format() -> None:
    assert tally_text((5, 0, 2)) == "5 0 2"
    assert partition_field("events", 3) == "events:3"
    assert marker_value(2, "abc") == "2:abc"


def test_the_result_codes() -> None:
    assert (OLDER, WRITTEN, UNCHANGED) == (0, 1, 2)
