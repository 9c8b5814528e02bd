"""No record multiplies (docs/notes/028): whatever one input record holds, it gets at most
one dead letter, bounded by the record and the limits, and the letter counts the events
it stands for, so the totals still add up."""

import orjson

from stream.output.headers import dead_letter_headers
from stream.session.batch import PARTITION_KEY, Limits, Message, fold_batch

LIMITS = Limits()


def fold(messages: list[Message], limits: Limits = LIMITS):  # type: ignore[no-untyped-def]
    return fold_batch(messages, lambda key, partition: None, limits)


def segment(*elements: bytes, offset: int = 0) -> Message:
    return Message(b"s", b"[" + b",".join(elements) + b"]", "events", 2, offset)


def turn(seq: int) -> bytes:
    return orjson.dumps({"type": "turn/start", "seq": seq, "time": seq, "data": {}})


def test_a_segment_of_ten_thousand_unreadable_elements_is_one_dead_letter() -> None:
    result = fold([segment(*[b"{}"] * 10_000, offset=o) for o in range(3)])
    assert len(result.dead_letters) == 3
    assert result.counts.as_dict() == {
        "folded": 0,
        "duplicate": 0,
        "faulted": 0,
        "dead_lettered": 30_000,
    }
    letter = result.dead_letters[0]
    assert letter.count == 10_000 and letter.index == 0
    assert letter.positions == tuple(range(LIMITS.dead_letter_positions))
    assert letter.value == b"[" + b",".join([b"{}"] * 10_000) + b"]"
    assert letter.reason.startswith("10,000 of 10,000 segment elements unreadable;")
    headers = dict(dead_letter_headers(letter))
    assert headers["count"] == b"10000" and headers["segment-index"] == b"0"
    assert headers["segment-indexes"] == ",".join(map(str, range(100))).encode()
    assert sum(len(v) for v in headers.values()) < 1_000


def test_the_readable_elements_fold_and_the_letter_lists_the_others() -> None:
    result = fold([segment(turn(0), b"42", turn(1), b'"x"', b'{"seq":"1"}', turn(2))])
    (letter,) = result.dead_letters
    assert (result.counts.folded, result.counts.dead_lettered) == (3, 3)
    assert (letter.count, letter.index, letter.positions) == (3, 1, (1, 3, 4))
    assert letter.value == b'[42,"x",{"seq":"1"}]'
    assert letter.reason == (
        "3 of 6 segment elements unreadable; the first (index 1): event must be a JSON"
        " object, got int; also: event must be a JSON object, got str; event has no usable"
        " seq: '1'"
    )
    assert result.sessions[0].update["seq"] == 2


def test_one_unreadable_element_is_dead_lettered_as_it_always_was() -> None:
    (letter,) = fold([segment(turn(0), b"42", turn(1))]).dead_letters
    assert (letter.count, letter.index, letter.value) == (1, 1, b"42")
    assert letter.reason == "event must be a JSON object, got int"
    headers = dict(dead_letter_headers(letter))
    assert "count" not in headers and "segment-indexes" not in headers


def test_reasons_and_positions_are_bounded_whatever_the_elements_say() -> None:
    limits = Limits(dead_letter_positions=5, error_chars=120)
    odd = [orjson.dumps({"seq": f"{'z' * 300}{n}"}) for n in range(50)]
    (letter,) = fold([segment(*odd)], limits).dead_letters
    assert letter.count == 50 and letter.positions == (0, 1, 2, 3, 4)
    assert len(letter.reason) <= 120


def test_a_letter_is_never_larger_than_its_record_or_the_bound() -> None:
    limits = Limits(dead_letter_bytes=1_000)
    result = fold([segment(*[b"1e5"] * 2_000)], limits)  # each printed longer: 100000.0
    (letter,) = result.dead_letters
    assert letter.size is not None and letter.size <= 2 * 4 * 2_000
    assert len(letter.value) == 1_000 and letter.count == 2_000


def test_a_redelivered_segment_sends_its_letter_again_and_counts_nothing() -> None:
    store: dict[tuple[bytes, int], bytes] = {}

    def run(message: Message):  # type: ignore[no-untyped-def]
        result = fold_batch([message], lambda key, partition: store.get((key, partition)))
        for part in result.partitions:
            store[(PARTITION_KEY, part.partition)] = part.row
        for change in result.sessions:
            store[(change.key, change.partition)] = change.row
        return result

    first = run(segment(b"1", b"2", turn(0)))
    again = run(segment(b"1", b"2", turn(0)))
    assert (first.counts.dead_lettered, len(first.dead_letters)) == (2, 1)
    assert (again.counts.dead_lettered, len(again.dead_letters)) == (0, 1)
    assert again.dead_letters == first.dead_letters
