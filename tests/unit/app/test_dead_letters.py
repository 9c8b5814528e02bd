"""What one record may cost the edge (docs/notes/028): dead-letter log lines bounded in
time, not per letter, and batches bounded by the events their records may hold."""

import asyncio
import logging
from dataclasses import dataclass

import pytest

from stream.app import bulkqueue
from stream.app.batching import Waiting
from stream.app.deadletters import DeadLetterLog
from stream.session.results import DeadLetter
from tests.waiting import FakeClock, until

NO_SEQ = "event has no usable seq: None"


def letter(offset: int, reason: str = NO_SEQ, count: int = 1) -> DeadLetter:
    return DeadLetter(b"{}", reason, "events", 1, offset, 0 if count > 1 else None, count=count)


def test_the_first_letter_is_logged_at_once_the_rest_once_per_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock(100.0)
    log = DeadLetterLog(logging.getLogger("test.dead"), every=10.0, clock=clock)
    with caplog.at_level(logging.WARNING, "test.dead"):
        log.note(letter(0, count=10_000))
        for offset in range(1, 100_001):
            reason = "event must be a JSON object, got int" if offset % 4 else "not JSON: x"
            log.note(letter(offset, reason, 10_000 if offset % 2 else 1))
        assert len(caplog.records) == 1
        clock.now += 10.0
        log.note(letter(100_001))
    lines = [record.getMessage() for record in caplog.records]
    assert lines[0] == f"dead-lettered events[1]@0 (10,000 input events): {NO_SEQ}"
    assert len(lines) == 2
    assert lines[1].startswith(
        "dead-lettered 100,001 more records (500,050,001 input events) since the last such"
        " line: 75,000 × 'event must be a JSON object, got int', 25,000 × 'not JSON',"
        " 1 × 'event has no usable seq'; e.g. events[1]@1: event must be a JSON object, got int"
    )


def test_reasons_counted_are_bounded(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock(100.0)
    log = DeadLetterLog(logging.getLogger("test.dead"), every=10.0, clock=clock)
    for offset in range(1_000):
        log.note(letter(offset, f"reason {offset}: x"))
    assert len(log.kinds) <= 16 and log.other == 999 - 16
    with caplog.at_level(logging.WARNING, "test.dead"):
        log.flush()
    assert "1 × 'reason 3', 996 other;" in caplog.records[-1].getMessage()


def test_a_summary_comes_when_the_interval_ends_even_if_no_letter_follows(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def run() -> None:
        log = DeadLetterLog(logging.getLogger("test.dead"), every=0.05)
        log.note(letter(0))
        log.note(letter(1))
        log.note(letter(2))
        # The summary's timer (0.05 s) fires with no letter after it.
        await until(lambda: len(caplog.records) >= 2, what="the summary line")

    with caplog.at_level(logging.WARNING, "test.dead"):
        asyncio.run(run())
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == 2 and lines[1].startswith("dead-lettered 2 more records")


@dataclass
class Record:
    value: bytes
    partition: int = 0
    key: bytes = b"k"
    serialized_key_size: int = 1

    @property
    def tp(self) -> tuple[str, int]:
        return ("events", self.partition)

    @property
    def serialized_value_size(self) -> int:
        return len(self.value)


HOLLOW = b"[" + b",".join([b"{}"] * 10_000) + b"]"


@pytest.mark.parametrize(
    ("value", "elements"),
    [
        (b'{"seq":1,"type":"a","data":{"x":[1,2,3]}}', 1),
        (b"[]", 1),
        (b"[1,2]", 2),
        (HOLLOW, 10_000),
        (b" \n\t" + HOLLOW, 10_000),
        (b'[{"seq":1,"a":2},{"seq":2}]', 2),
        (b'[{"n":1e400},{"seq":1,"a":2},{"seq":2}]', 4),  # not orjson's: commas + 1
        (b"[1,2,3", 3),  # not JSON: commas + 1
        (b"x" * 100, 1),
    ],
)
def test_a_record_weighs_the_elements_it_holds(value: bytes, elements: int) -> None:
    assert bulkqueue.elements(Record(value)) == elements


def test_a_batch_holds_at_most_its_element_bound_and_at_least_one_record() -> None:
    waiting = Waiting()
    records = [Record(HOLLOW, partition=n % 2) for n in range(31)]
    for partition in (0, 1):
        held = [r for r in records if r.partition == partition]
        waiting.add(held, bulkqueue.size(held))
    taken = [len(waiting.take(10_000, 0, 40_000)) for _ in range(9)]
    assert taken == [4, 4, 4, 4, 4, 4, 4, 3, 0]
    one = Waiting()
    one.add([Record(HOLLOW)], len(HOLLOW))
    assert len(one.take(10_000, 0, 5)) == 1  # heavier than the bound alone: it still goes
    small = Waiting()
    events = [Record(b'{"seq":%d}' % n) for n in range(500)]
    small.add(events, bulkqueue.size(events))
    assert len(small.take(10_000, 0, 40_000)) == 500
