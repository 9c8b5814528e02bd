"""The fetch's pace: the rule (``stream.app.drain.Pace``) and its application to
aiokafka's fetcher (``stream.app.pacing``), on aiokafka's own fetch request."""

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from aiokafka.protocol.fetch import FetchRequest, FetchRequest_v11  # type: ignore[import-untyped]
from aiokafka.structs import TopicPartition  # type: ignore[import-untyped]

from stream.app import pacing
from stream.app.drain import PACED_MIN_BYTES, Pace, Wait

PACE = Pace(budget_ms=10, resting_ms=500)
BUDGET = Wait(10, PACED_MIN_BYTES, resting=False)
REST = Wait(500, 1, resting=True)


@pytest.mark.parametrize(
    ("fetched", "pending", "wait"),
    [
        (True, False, BUDGET),  # records arrive: the next fetch gathers for the budget
        (True, True, BUDGET),
        (False, False, REST),  # nothing anywhere: a long poll, answered by the first byte
        # A busy partition's records not taken yet are left out of the fetch: resting
        # then would hold them behind a long poll of the quiet ones (note 016's stall).
        (False, True, BUDGET),
    ],
)
def test_the_next_fetch_after_one(fetched: bool, pending: bool, wait: Wait) -> None:
    assert PACE.next(fetched, pending) == wait


def test_a_brokers_first_fetch_rests() -> None:
    # Not held: it is answered as soon as one byte is there.
    assert PACE.first() == REST


class Fetcher:
    """aiokafka's ``Fetcher`` as the pacing sees it: the request method and the records
    fetched and not taken; ``answers`` says, per broker, whether each fetch finds records
    (and which partitions it leaves untaken)."""

    def __init__(self, answers: dict[int, list[bool | list[Any]]]) -> None:
        self.answers = answers
        self._records: dict[Any, Any] = {}
        self.sent: list[tuple[int, int, int]] = []  # (broker, wait ms, least bytes) on the wire

    async def _proc_fetch_request(self, assignment: Any, node_id: int, request: Any) -> bool:
        wire = request.build(FetchRequest_v11)  # what the broker is sent
        self.sent.append((node_id, wire.max_wait_time, wire.min_bytes))
        answer = self.answers[node_id].pop(0)
        if isinstance(answer, list):  # found nothing, these partitions still untaken
            self._records = dict.fromkeys(answer)
            return False
        return answer


def request() -> Any:
    # What aiokafka builds, with the consumer's fixed wait (Faust's 1,500 ms).
    return FetchRequest(1500, 1, 50 << 20, 1, [("in", [(0, 0, 1 << 20)])])


def fetch(fetcher: Fetcher, brokers: list[int], sent: Callable[[bool], None] | None = None) -> None:
    """One fetch from each of ``brokers`` in turn, through the paced fetcher."""
    pacing.install(fetcher, PACE, {"in"}, sent)

    async def run() -> None:
        for node in brokers:
            await fetcher._proc_fetch_request(None, node, request())

    asyncio.run(run())


def test_each_fetch_is_sent_with_its_pace() -> None:
    fetcher = Fetcher({1: [True, True, False, False]})
    fetch(fetcher, [1, 1, 1, 1])
    assert fetcher.sent == [
        (1, 500, 1),  # the first rests: answered by its first byte
        (1, 10, PACED_MIN_BYTES),  # records came: gather for the budget
        (1, 10, PACED_MIN_BYTES),
        (1, 500, 1),  # nothing came: rest again
    ]


def test_each_broker_keeps_its_own_pace() -> None:
    fetcher = Fetcher({1: [True, True], 2: [False, False]})
    fetch(fetcher, [1, 2, 1, 2])
    assert fetcher.sent == [(1, 500, 1), (2, 500, 1), (1, 10, PACED_MIN_BYTES), (2, 500, 1)]


def test_only_the_inputs_untaken_records_keep_a_broker_from_resting() -> None:
    changelog, source = TopicPartition("in-changelog", 0), TopicPartition("in", 3)
    # A recovered changelog's last fetch stays untaken for good: it must not keep the
    # worker polling at the budget; the input's untaken records must (note 016).
    fetcher = Fetcher({1: [[changelog], [source], False]})
    fetch(fetcher, [1, 1, 1])
    assert fetcher.sent == [(1, 500, 1), (1, 500, 1), (1, 10, PACED_MIN_BYTES)]


def test_each_fetch_is_counted_by_its_wait() -> None:
    waits: list[bool] = []
    fetch(Fetcher({1: [True, False, False]}), [1, 1, 1], waits.append)
    assert waits == [True, False, True]
