"""What the worker's metrics and probes say about batches, stalls and control records."""

from typing import Any

import orjson
import pytest

from stream.config import Settings
from stream.ops.metrics import Metrics, Position
from stream.output.headers import RESET_HEADER
from stream.publish.publisher import RedisState
from stream.session import codec
from stream.session.batch import PARTITION_KEY, Limits, Message, fold_batch
from stream.session.expiry import sweep
from stream.testing import events as build


def metrics(**settings: Any) -> Metrics:
    m = Metrics.create(Settings(**settings))
    m.redis = RedisState()
    m.recovered = True
    return m


def value(m: Metrics, name: str, **labels: str) -> float | None:
    m.refresh_live()
    return m.registry.get_sample_value(name, labels or None)


def batch(rows: dict[bytes, bytes], messages: list[Message], m: Metrics) -> Any:
    result = fold_batch(messages, lambda key, _: rows.get(key))
    m.observe_rows(result)
    for change in result.sessions:
        rows[change.key] = change.row
    m.observe_batch(messages, result)
    return result


def test_a_reset_that_takes_a_tally_back_never_reaches_a_counter_as_negative() -> None:
    """The demo's repair: a session faulted by a gap, reset and produced again whole."""
    m = metrics()
    m.census.assign([0])
    m.census.walked(0)
    rows: dict[bytes, bytes] = {}
    user = [build.user_message(seq, build.texts("x"), time=seq) for seq in range(3)]
    gap = orjson.dumps([user[0], user[2]])
    batch(rows, [Message(b"s", gap, "events", 0, 0)], m)
    assert value(m, "stream_sessions_faulted") == 1
    assert value(m, "stream_events_total", outcome="faulted") == 1
    repair = [
        Message(b"s", b"", "events", 0, 1, [(RESET_HEADER, b"2")]),
        Message(b"s", orjson.dumps(user), "events", 0, 2),
    ]
    batch(rows, repair, m)
    assert value(m, "stream_events_total", outcome="folded") == 4
    assert value(m, "stream_events_retired_total", outcome="faulted") == 1
    assert value(m, "stream_events_retired_total", outcome="folded") == 1
    assert value(m, "stream_resets_total", applied="yes") == 1
    # The state's own figures: what Redis' totals hold for this worker's partitions.
    assert value(m, "stream_sessions_faulted") == 0
    # Every event the key ever took, its first life's included (carried), as in Redis.
    assert value(m, "stream_state_events", outcome="folded") == 4
    assert value(m, "stream_state_events", outcome="faulted") == 1
    assert value(m, "stream_state_sessions") == 1


def test_the_faulted_sessions_gauge_comes_from_the_rows_after_a_restart() -> None:
    rows: dict[bytes, bytes] = {}
    user = [build.user_message(seq, build.texts("x"), time=seq) for seq in range(3)]
    before = metrics()
    batch(rows, [Message(b"s", orjson.dumps([user[0], user[2]]), "events", 0, 0)], before)
    after = metrics()  # a new process: nothing seen yet, the rows hold the truth
    for partition in after.census.assign([0]):
        for key in sorted(rows):
            after.census.visit(partition, key, rows[key])
        after.census.walked(partition)
    assert value(after, "stream_sessions_faulted") == 1
    assert value(after, "stream_state_events", outcome="faulted") == 1


def test_a_committed_offset_that_stands_still_while_records_wait_is_a_stall() -> None:
    m = metrics(stall_seconds=60)
    m.observe_progress(4, 280, 307, now=1000.0)
    m.observe_progress(4, 280, 310, now=1030.0)
    assert m.not_ready() == []
    m.observe_progress(4, 280, 320, now=1061.0)
    assert value(m, "stream_partition_stalled", partition="4") == 1
    assert value(m, "stream_committed_lag", partition="4") == 320
    (reason,) = m.not_ready()
    assert reason.startswith("partition 4 stalled: committed offset 280 has not moved for")
    assert "320 records wait" in reason
    m.observe_progress(4, 300, 20, now=1070.0)  # it moved: ready again
    assert (
        m.stalled_for(4, 1070.0) == 0 and value(m, "stream_partition_stalled", partition="4") == 0
    )


def test_the_committed_lag_is_the_records_past_the_committed_offset(tmp_path: Any) -> None:
    """Kafka's committed offset is the next record to read: one record past it waits (the
    gauge read it as none, and such a partition never as stalled). The positions come
    from the consumer as plain values (``stream.app.monitor.positions``)."""
    from faust.types import TP

    from stream.app.monitor import positions

    settings = Settings(state_dir=str(tmp_path), input_topic="events")
    m = Metrics.create(settings)
    tp = TP("events", 3)

    committed = {tp: 10}

    class Consumer:
        _committed_offset = committed

        def highwater(self, _: Any) -> int:
            return 11

    class Assignor:
        def assigned_actives(self) -> list[Any]:
            return [tp, TP("other", 3)]

    class App:
        _consumer = Consumer()
        assignor = Assignor()

    assert positions(App(), "events") == {3: Position(10, 11)}
    m.refresh(settings, positions(App(), "events"))
    assert m.registry.get_sample_value("stream_committed_lag", {"partition": "3"}) == 1
    committed[tp] = 11
    m.refresh(settings, positions(App(), "events"))
    assert m.registry.get_sample_value("stream_committed_lag", {"partition": "3"}) == 0
    m.refresh(settings, {})  # the partition moved away: its series go
    assert m.registry.get_sample_value("stream_committed_lag", {"partition": "3"}) is None


def test_positions_fail_loudly_on_a_consumer_without_committed_offsets() -> None:
    """No fallback: a Faust that renamed the field fails the refresh, not the figures."""
    from stream.app.monitor import positions

    class App:
        _consumer = object()

    with pytest.raises(AttributeError):
        positions(App(), "events")

    class Unstarted:
        _consumer = None

    assert positions(Unstarted(), "events") is None


def test_nothing_waiting_is_never_a_stall() -> None:
    m = metrics(stall_seconds=1)
    m.observe_progress(0, 10, 0, now=0.0)
    m.observe_progress(0, 10, 0, now=100.0)
    assert m.stalled_for(0, 100.0) == 0


def test_a_refused_control_record_turns_readiness_red() -> None:
    m = metrics()
    m.control_problem = "offset 3: a tombstone ignored"
    assert m.not_ready() == ["control record: offset 3: a tombstone ignored"]
    assert value(m, "stream_control_record_problem") == 1


def test_a_new_assignment_forgets_the_partitions_that_moved_away() -> None:
    m = metrics(stall_seconds=1)
    m.observe_progress(2, 5, 9, now=0.0)
    m.observe_progress(2, 5, 9, now=5.0)
    assert value(m, "stream_committed_lag", partition="2") == 9
    m.forget_progress()
    assert value(m, "stream_committed_lag", partition="2") is None
    assert value(m, "stream_partition_stalled", partition="2") is None
    assert m.not_ready() == []


def test_a_sweep_that_repeats_an_earlier_one_counts_nothing_twice_and_keeps_the_figures() -> None:
    """A row swept before and met again (a crash before its tombstone landed, or a restore
    whose compacted changelog lost the tombstone): deleted again, the expired counter and
    the partition's retired figures unchanged."""
    day = 86_400_000
    ttl = 7 * day
    m = metrics()
    m.census.assign([0])
    m.census.walked(0)
    rows: dict[bytes, bytes] = {}
    limits = Limits(session_ttl=ttl)

    def send(key: bytes, offset: int, *events: dict[str, Any]) -> None:
        value = orjson.dumps(list(events) if len(events) > 1 else events[0])
        messages = [Message(key, value, "events", 0, offset)]
        result = fold_batch(messages, lambda k, _: rows.get(k), limits)
        m.observe_rows(result)
        for change in result.sessions:
            rows[change.key] = change.row
        for part in result.partitions:
            rows[PARTITION_KEY] = part.row
        m.observe_batch(messages, result)

    t0 = 1_700_000_000_000
    send(b"a", 0, build.user_message(0, build.texts("x"), time=t0))
    send(b"b", 1, build.user_message(0, build.texts("y"), time=t0 + 1))
    send(b"c", 2, build.user_message(0, build.texts("z"), time=t0 + ttl + day))
    send(b"b", 3, build.user_message(1, build.texts("y"), time=t0 + ttl + day))
    a = rows[b"a"]
    first = sweep(0, [b"a"], lambda k, _: rows.get(k), ttl)
    rows[PARTITION_KEY] = first.row
    del rows[b"a"]
    m.observe_sweep(first)
    assert value(m, "stream_sessions_expired_total", how="swept") == 1
    assert value(m, "stream_sessions_live") == 2
    retired = value(m, "stream_state_events", outcome="folded")
    rows[b"a"] = a  # back again: its tombstone was lost
    m.census.observe(0, b"a", None, codec.row_part(a))
    again = sweep(0, [b"a"], lambda k, _: rows.get(k), ttl)
    assert not again.row and [e.again for e in again.expired] == [True]
    m.observe_sweep(again)
    assert value(m, "stream_sessions_expired_total", how="swept") == 1
    assert value(m, "stream_sessions_live") == 2
    assert value(m, "stream_state_events", outcome="folded") == retired


def test_the_loop_cpu_of_each_step_adds_up_and_a_clock_step_back_adds_nothing() -> None:
    m = metrics()
    m.observe_loop_cpu(0.020, 0.010, 0.005)
    m.observe_loop_cpu(0.030, -0.001, 0.004)  # a counter cannot go down: adds nothing
    name = "stream_batch_loop_cpu_seconds_total"
    assert value(m, name, step="fold") == pytest.approx(0.050)
    assert value(m, name, step="kafka") == pytest.approx(0.010)
    assert value(m, name, step="redis") == pytest.approx(0.009)
