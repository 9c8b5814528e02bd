"""SSE framing: one event per update, id = seq, resume point parsing."""

import pytest

from stream.gateway import sse


def test_an_update_is_one_event_with_its_seq_as_id() -> None:
    payload = b'{"sessionId":"s","seq":12,"x":"a\\nb"}'
    framed = sse.frame(payload)
    assert framed is not None and framed.seq == 12
    assert framed.data == b'id: 12\ndata: {"sessionId":"s","seq":12,"x":"a\\nb"}\n\n'


def test_raw_line_breaks_cannot_end_the_event_early() -> None:
    assert sse.event(3, b"a\r\nb\rc\nd") == b"id: 3\ndata: a\ndata: b\ndata: c\ndata: d\n\n"


@pytest.mark.parametrize("payload", [b"not json", b"[1,2]", b'{"seq":"3"}', b'{"seq":true}', b"{}"])
def test_messages_without_a_seq_are_not_updates(payload: bytes) -> None:
    assert sse.frame(payload) is None


@pytest.mark.parametrize(
    ("raw", "expected"),
    [(None, None), ("", None), ("17", 17), (" 17 ", 17), ("x", None), ("-1", None), ("0", 0)],
)
def test_last_event_id(raw: str | None, expected: int | None) -> None:
    assert sse.last_event_id(raw) == expected


def test_comments_and_retry() -> None:
    assert sse.comment("heartbeat") == b": heartbeat\n\n"
    assert sse.retry(1000) == b"retry: 1000\n\n"
