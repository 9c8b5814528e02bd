"""SSE framing: one event per update, id = the version, resume points old and new."""

import pytest

from stream.gateway import sse


def test_an_update_is_one_event_with_its_version_as_id() -> None:
    payload = b'{"sessionId":"s","seq":12,"x":"a\\nb"}'
    framed = sse.frame((2, 12, 15, 1), payload)
    assert framed.seq == 12 and framed.version == (2, 12, 15, 1)
    assert framed.data == b'id: 2-12-15-1\ndata: {"sessionId":"s","seq":12,"x":"a\\nb"}\n\n'


def test_raw_line_breaks_cannot_end_the_event_early() -> None:
    assert sse.event((0, 3, 3, 0), b"a\r\nb\rc\nd") == (
        b"id: 0-3-3-0\ndata: a\ndata: b\ndata: c\ndata: d\n\n"
    )
    assert sse.named("expired", b"x\ny") == b"event: expired\ndata: x\ndata: y\n\n"


@pytest.mark.parametrize("payload", [b"not json", b"[1,2]", b'{"seq":"3"}', b'{"seq":true}', b"{}"])
def test_messages_without_a_seq_are_not_updates(payload: bytes) -> None:
    assert sse.seq_of(payload) is None


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, None),
        ("", None),
        ("17", sse.Resume(None, 17)),  # an id of an older gateway: a plain seq
        (" 17 ", sse.Resume(None, 17)),
        ("0", sse.Resume(None, 0)),
        ("2-3044-3100-1", sse.Resume((2, 3044, 3100, 1), 3044)),
        ("2-3044", None),
        ("x", None),
        ("-1", None),
        ("1-2-3-x", None),
        ("１７", None),  # digits, but not ASCII ones
        ("9" * 200, None),
    ],
)
def test_last_event_id(raw: str | None, expected: sse.Resume | None) -> None:
    assert sse.last_event_id(raw) == expected


def test_a_resume_point_holds_exactly_its_version() -> None:
    full = sse.Resume((1, 3044, 3044, 0), 3044)
    assert full.has((1, 3044, 3044, 0))
    assert not full.has((2, 5, 5, 0))  # rebuilt: newer although its seq is lower
    assert not full.has((1, 3044, 3045, 0))
    plain = sse.Resume(None, 3044)  # the generation is unknown: by seq alone
    assert plain.has((1, 3044, 3044, 0)) and not plain.has((2, 5, 5, 0))


def test_comments_and_retry() -> None:
    assert sse.comment("heartbeat") == b": heartbeat\n\n"
    assert sse.retry(1000) == b"retry: 1000\n\n"
