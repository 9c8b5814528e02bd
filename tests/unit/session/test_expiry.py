"""Session expiry in the pure core: the partition's stream time, an event that finds its
session expired, the sweep and its index (contract: "Session expiry")."""

from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from stream.session import codec
from stream.session.batch import PARTITION_KEY, Limits, Message, fold_batch
from stream.session.expiry import Deadlines, sweep
from stream.session.partition import PartitionRow
from stream.testing import events as build

DAY = 86_400_000
TTL = 7 * DAY
T0 = 1_700_000_000_000
LIMITS = Limits(session_ttl=TTL)


def user(seq: int, time: int) -> dict[str, Any]:
    return build.user_message(seq, build.texts(f"m{seq}"), time=time)


class Store:
    """One partition's rows, written as the worker writes them."""

    def __init__(self, limits: Limits = LIMITS) -> None:
        self.rows: dict[bytes, bytes] = {}
        self.limits = limits
        self.offset = 0

    def load(self, key: bytes, _: int) -> bytes | None:
        return self.rows.get(key)

    def send(self, key: str, *events: dict[str, Any]) -> Any:
        value = orjson.dumps(list(events) if len(events) > 1 else events[0])
        message = Message(key.encode(), value, "events", 0, self.offset)
        self.offset += 1
        return self.fold([message])

    def fold(self, messages: list[Message]) -> Any:
        result = fold_batch(messages, self.load, self.limits)
        for change in result.sessions:
            self.rows[change.key] = change.row
        for part in result.partitions:
            self.rows[PARTITION_KEY] = part.row
        return result

    def sweep(self, limit: int = 1000) -> Any:
        index = Deadlines()
        clock = self.clock
        for key, row in self.rows.items():
            if key != PARTITION_KEY:
                index.set(0, key, clock.touched(codec.decode(row)))
        assert clock.now is not None
        result = sweep(0, index.due(0, clock.now - TTL, limit), self.load, TTL)
        if result.row:
            self.rows[PARTITION_KEY] = result.row
        for expired in result.expired:
            del self.rows[expired.key]
        return result

    @property
    def clock(self) -> PartitionRow:
        return PartitionRow.decode(self.rows.get(PARTITION_KEY))


def test_stream_time_is_the_best_time_of_the_sessions_other_than_the_leader() -> None:
    row = PartitionRow()
    row.observe(T0, "a")
    assert row.now is None  # one session alone: no stream time yet
    row.observe(T0 + 5, "b")
    assert (row.now, row.leader) == (T0, "b")
    row.observe(T0 + 10**12, "wild")  # one producer decades ahead
    assert row.now == T0 + 5 and row.leader == "wild"
    row.observe(T0 + 9, "a")
    assert row.now == T0 + 9
    row.observe(0, "c")  # a clock in the past moves nothing
    assert row.now == T0 + 9 and row.since == T0


@given(st.lists(st.tuples(st.integers(0, 50), st.sampled_from("abcd")), max_size=40))
@settings(max_examples=200, deadline=None)
def test_stream_time_never_moves_back_and_a_replay_of_seen_events_changes_nothing(
    events: list[tuple[int, str]],
) -> None:
    row = PartitionRow()
    for time, session in events:
        before = row.now
        row.observe(time, session)
        assert before is None or (row.now is not None and row.now >= before)
    after = row.encode()
    for time, session in events:
        row.observe(time, session)
    assert row.encode() == after
    assert PartitionRow.decode(after).encode() == after


def _expire_a(store: Store) -> None:
    """Session a is active at T0; b and c move the stream time past a's TTL."""
    store.send("a", user(0, T0), user(1, T0 + 1))
    store.send("b", user(0, T0 + 1))
    store.send("c", user(0, T0 + TTL + DAY))
    store.send("b", user(1, T0 + TTL + DAY))


def test_an_event_after_expiry_faults_every_projection_and_keeps_every_count() -> None:
    store = Store()
    _expire_a(store)
    result = store.send("a", user(2, T0 + TTL + DAY))
    (change,) = result.sessions
    faults = change.update["faults"]
    assert set(faults) == {"contextPressure", "contextBreakdown", "tokenUsage"}
    # The fault a swept session's next event meets too: its beginning is gone.
    assert all(f == {"seq": 2, "error": "gap: expected seq 0, got 2"} for f in faults.values())
    assert result.expired == 1 and change.expired is not None
    # Nothing is lost from the totals: the first life's two events are carried.
    assert change.tally.as_list() == [2, 0, 1]
    assert result.counts.as_dict() == {
        "folded": 0,
        "duplicate": 0,
        "faulted": 1,
        "dead_lettered": 0,
    }


def test_a_session_that_starts_over_at_seq_0_after_expiry_is_exact() -> None:
    store = Store()
    _expire_a(store)
    log = [user(0, T0 + TTL + DAY), user(1, T0 + TTL + DAY + 1)]
    (change,) = store.send("a", *log).sessions
    fresh = Store(Limits()).send("x", *log).sessions[0].update
    assert "faults" not in change.update
    assert {k: v for k, v in change.update.items() if k != "sessionId"} == {
        k: v for k, v in fresh.items() if k != "sessionId"
    }
    assert change.expired is not None  # Redis drops the first life before this one


def test_whether_an_event_finds_its_session_expired_does_not_depend_on_the_sweep() -> None:
    lazy, swept = Store(), Store()
    _expire_a(lazy)
    _expire_a(swept)
    gone = swept.sweep()
    assert [e.session_id for e in gone.expired] == ["a"]
    assert b"a" not in swept.rows and swept.clock.expired == 1
    late = user(2, T0 + TTL + DAY)
    assert lazy.send("a", late).sessions[0].update == swept.send("a", late).sessions[0].update
    # The totals agree too: carried in the row, or retired in the partition row.
    for store in (lazy, swept):
        rows = [codec.decode(r) for k, r in store.rows.items() if k != PARTITION_KEY]
        total = sum(r.accounted.total for r in rows) + store.clock.retired.total
        assert total == 6


def test_a_sweep_interrupted_before_its_tombstones_counts_nothing_twice() -> None:
    store = Store()
    _expire_a(store)
    index = Deadlines()
    clock = store.clock
    index.set(0, b"a", clock.touched(codec.decode(store.rows[b"a"])))
    assert clock.now is not None
    first = sweep(0, index.due(0, clock.now - TTL, 10), store.load, TTL)
    store.rows[PARTITION_KEY] = first.row  # the partition row landed, the tombstone did not
    assert store.clock.retired.total == 2 and store.clock.expired == 1
    again = sweep(0, [b"a"], store.load, TTL)
    assert [e.session_id for e in again.expired] == ["a"] and not again.row
    assert store.clock.retired.total == 2
    # An event in that window: the life is retired already, so it is not carried too.
    (change,) = store.send("a", user(0, T0 + TTL + DAY)).sessions
    assert change.tally.as_list() == [1, 0, 0]


def test_a_reset_after_expiry_starts_the_session_over_under_its_generation() -> None:
    store = Store()
    _expire_a(store)
    reset = Message(b"a", None, "events", 0, store.offset, [("stream-reset", b"3")])
    store.offset += 1
    store.fold([reset])
    (change,) = store.send("a", user(0, T0 + 2), user(1, T0 + 3)).sessions
    assert "faults" not in change.update and change.gen == 3 and change.expired is None


def test_without_a_ttl_nothing_expires() -> None:
    store = Store(Limits())
    _expire_a(store)
    (change,) = store.send("a", user(2, T0 + TTL + DAY)).sessions
    assert "faults" not in change.update


def test_a_row_written_before_expiry_existed_counts_its_idleness_from_the_first_stream_time() -> (
    None
):
    store = Store()
    legacy = codec.decode(Store(Limits()).send("old", user(0, T0)).sessions[0].row)
    legacy.touched = legacy.time = None
    store.rows[b"old"] = codec.encode(legacy)
    store.send("b", user(0, T0))
    store.send("c", user(0, T0 + 1))  # the partition's first stream time: T0
    assert store.clock.since == T0
    assert not store.sweep().expired
    store.send("b", user(1, T0 + TTL + 5))
    store.send("c", user(1, T0 + TTL + 5))
    assert [e.session_id for e in store.sweep().expired] == ["old"]


def test_the_deadline_index_gives_due_sessions_oldest_first_and_skips_stale_entries() -> None:
    index = Deadlines()
    for n in range(10):
        index.set(0, f"s{n}".encode(), 100 - n)
    index.set(0, b"s9", 500)  # touched again: its old entry is stale
    assert index.due(0, 95, 100) == [b"s8", b"s7", b"s6"]
    assert index.due(0, 95, 100) == []
    assert index.sessions(0) == 7
    for n in range(5000):  # stale entries never outgrow the live ones by much
        index.set(0, b"s0", 1000 + n)
    assert len(index._heaps[0]) <= 2 * index.sessions(0) + 1024
    assert index.due(0, 10**9, 3) == [b"s5", b"s4", b"s3"]


def test_a_redelivered_event_does_not_make_its_session_look_active() -> None:
    store = Store()
    store.send("a", user(0, T0))
    first = Message(b"a", orjson.dumps(user(0, T0)), "events", 0, 0)
    store.send("b", user(0, T0 + 1))
    store.send("c", user(0, T0 + 2 * TTL))
    store.send("d", user(0, T0 + 2 * TTL))
    touched = codec.decode(store.rows[b"a"]).touched
    store.fold([first])  # after a crash: at the stream time it had then, in the row already
    assert codec.decode(store.rows[b"a"]).touched == touched
    assert [e.session_id for e in store.sweep().expired] == ["a", "b"]


def test_a_packed_run_with_a_negative_gap_gives_the_time_its_members_give() -> None:
    from stream.contract.storage import decode_line
    from stream.session.offline import fold_lines
    from stream.session.processor import SessionRecord

    row = {
        "type": "text-chunks",
        "seq0": 1,
        "time0": T0 + 10,
        "data": {"turn": 0, "step": 0, "index": 0, "dt": [500, -400], "texts": ["a", "b", "c"]},
    }
    run = decode_line(row)
    members = run.events()
    assert max(m["time"] for m in members) == T0 + 510 == run.latest_time
    offline = SessionRecord.new()
    list(fold_lines(offline, [(1, user(0, T0)), (2, run)]))
    as_events = Store(Limits()).send("a", user(0, T0), *members).sessions[0].update
    assert offline.time == as_events["time"] == T0 + 510
