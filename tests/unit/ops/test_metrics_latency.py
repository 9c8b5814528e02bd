"""The worker's end-to-end latency from event time, rebalances and restore progress."""

from typing import Any

import orjson

from stream.config import Settings
from stream.ops.metrics import Metrics
from stream.session.batch import Message, fold_batch
from stream.testing import events as build
from tests.waiting import FakeClock


def test_every_published_update_observes_its_latest_event_time() -> None:
    m = Metrics.create(Settings())
    now_ms = 1_800_000_000_000
    m.clock = FakeClock(now_ms / 1000)  # the ages do not depend on how long the test takes
    old = [build.user_message(0, build.texts("x"), time=now_ms - 120_000)]
    new = [build.user_message(0, build.texts("y"), time=now_ms - 2_000)]
    ahead = [build.user_message(0, build.texts("z"), time=now_ms + 3_600_000)]
    messages = [
        Message(b"a", orjson.dumps(old), "events", 0, 0),
        Message(b"b", orjson.dumps(new), "events", 0, 1),
        Message(b"c", orjson.dumps(ahead), "events", 0, 2),
    ]
    result = fold_batch(messages, lambda key, _: None)
    m.observe_batch(messages, result)

    def bucket(le: str) -> float | None:
        return m.registry.get_sample_value("stream_event_to_redis_seconds_bucket", {"le": le})

    assert m.registry.get_sample_value("stream_event_to_redis_seconds_count") == 3
    assert bucket("0.001") == 1  # the clock ahead counts as 0, never negative
    assert bucket("1.0") == 1
    assert bucket("5.0") == 2  # two seconds old
    assert bucket("60.0") == 2
    assert bucket("300.0") == 3  # two minutes old


class _Recovery:
    def __init__(self, active: int, standby: int, running: bool) -> None:
        self.active, self.standby, self.in_recovery = active, standby, running

    def active_remaining_total(self) -> int:
        return self.active

    def standby_remaining_total(self) -> int:
        return self.standby


class _Unknown:
    in_recovery = True

    def active_remaining_total(self) -> Any:
        raise KeyError("no highwater yet")


def test_restore_progress_and_rebalances_are_exported() -> None:
    m = Metrics.create(Settings())
    sample = m.registry.get_sample_value
    m.observe_recovery(_Recovery(1200, 40, True))
    assert sample("stream_recovering") == 1
    assert sample("stream_restore_remaining_records", {"kind": "active"}) == 1200
    assert sample("stream_restore_remaining_records", {"kind": "standby"}) == 40
    m.observe_recovery(_Unknown())  # the last figures stay
    assert sample("stream_restore_remaining_records", {"kind": "active"}) == 1200
    m.observe_recovery(_Recovery(-1, 0, False))  # done; Faust's -1 is not a figure
    assert sample("stream_recovering") == 0
    assert sample("stream_restore_remaining_records", {"kind": "active"}) == 0
    m.forget_progress()
    m.forget_progress()
    assert sample("stream_rebalances_total") == 2


def test_committed_records_count_the_committed_offsets_advance() -> None:
    m = Metrics.create(Settings())
    m.observe_progress(0, None, 10, 0.0)  # nothing committed yet: no base
    m.observe_progress(0, 99, 10, 10.0)  # the first commit seen: the base
    m.observe_progress(0, 149, 10, 20.0)
    m.observe_progress(1, 7, 0, 20.0)
    m.observe_progress(0, 149, 10, 30.0)
    assert m.registry.get_sample_value("stream_committed_records_total") == 50
    m.forget_progress()  # a rebalance: partitions count from their new base
    m.observe_progress(0, 400, 0, 40.0)
    m.observe_progress(0, 410, 0, 50.0)
    assert m.registry.get_sample_value("stream_committed_records_total") == 60
