"""The bulk consumer path (stream.app.fetch, batching) without a broker: what it hands the
agent, what it tracks and acks, and what a seek keeps from it. How a batch's records are
grouped and their deliveries resolved: test_batch_sender.py; the holes in the offsets:
test_offsets.py."""

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import faust
import pytest
from faust.types import TP
from mode.utils.queues import FlowControlEvent, ThrowableQueue

from stream.app import batching, bulkqueue, fetch, internals
from stream.app.monitor import LeanMonitor
from stream.app.table import RAW
from stream.app.worker import assemble
from stream.config import Settings
from tests.waiting import until

# --- batches ------------------------------------------------------------------------------------


@dataclass
class FakeMessage:
    topic: str
    partition: int
    offset: int
    generation_id: int = 1
    acked: bool = False
    key: bytes = b""
    serialized_key_size: int = 0
    serialized_value_size: int = 100

    @property
    def tp(self) -> tuple[str, int]:
        return (self.topic, self.partition)


@dataclass
class FakeApp:
    active: bool = True
    consumer_generation_id: int = 1
    tracked: list[Any] = field(default_factory=list)  # the batches tracked, in order
    acquiring: int = 0  # waits on the flow begun

    def __post_init__(self) -> None:
        app = self

        class Unacked:
            def add(self, batch: Any) -> None:
                app.tracked.append(batch)

        class Transport:
            bulk_topics = frozenset({"in"})
            bulk_bytes: int | None = None  # no bound but the record count

        class Consumer:
            _unacked_messages = Unacked()
            transport = Transport()

            def __init__(self) -> None:
                self._read_offset: dict[Any, int | None] = {}

        class Flow:
            def is_active(self) -> bool:
                return app.active

            async def acquire(self) -> None:
                app.acquiring += 1
                await until(lambda: app.active, what="the flow to resume")

        class Topics:
            acking_topics = frozenset({"in"})

        class MonitorStub:
            def __init__(self) -> None:
                self.stream_inbound_time: dict[Any, float] = {}
                self.tp_end_offsets: dict[Any, int] = {}

        self.consumer, self.flow_control, self.topics = Consumer(), Flow(), Topics()
        self.monitor = MonitorStub()


class WatchedQueue(ThrowableQueue[Any]):
    """The agent's queue, saying when the agent waits on it for more."""

    waiting = 0

    async def get(self) -> Any:
        self.waiting += 1
        try:
            return await super().get()
        finally:
            self.waiting -= 1


class FakeChannel:
    def __init__(self, flow: FlowControlEvent | None = None) -> None:
        flow = flow or FlowControlEvent(initially_suspended=False)
        self.queue = WatchedQueue(maxsize=100, flow_control=flow, clear_on_resume=True)
        self.flow = flow

    def __aiter__(self) -> "FakeChannel":
        return self

    async def __anext__(self) -> Any:  # pragma: no cover - batches reads the queue
        return await self.queue.get()


@dataclass
class FakeStream:
    app: FakeApp
    channel: FakeChannel = field(default_factory=FakeChannel)
    should_stop: bool = False


def _messages(count: int, generation: int = 1, start: int = 0) -> list[FakeMessage]:
    return [FakeMessage("in", 0, start + i, generation) for i in range(count)]


def _put(queue: Any, messages: list[FakeMessage]) -> None:
    """What the hand-over does: a partition's records as one list, counted."""
    queue.put_nowait(messages)
    queue.bulk_events = getattr(queue, "bulk_events", 0) + len(messages)
    queue.bulk_bytes = getattr(queue, "bulk_bytes", 0) + sum(
        m.serialized_value_size for m in messages
    )


def test_a_batch_is_what_has_arrived_up_to_the_maximum() -> None:
    async def run() -> list[list[FakeMessage]]:
        stream = FakeStream(FakeApp())
        _put(stream.channel.queue, _messages(3))
        _put(stream.channel.queue, _messages(4, start=3))
        taken = batching.batches(stream, 5)
        return [await anext(taken), await anext(taken)]

    first, second = asyncio.run(run())
    assert [m.offset for m in first] == [0, 1, 2, 3, 4]
    assert [m.offset for m in second] == [5, 6]  # the rest of a split list comes first


def test_a_split_list_keeps_its_order_before_what_came_after() -> None:
    async def run() -> list[list[FakeMessage]]:
        stream = FakeStream(FakeApp())
        queue = stream.channel.queue
        _put(queue, _messages(7))
        _put(queue, _messages(2, start=7))
        taken = batching.batches(stream, 3)
        return [await anext(taken) for _ in range(3)]

    assert [[m.offset for m in batch] for batch in asyncio.run(run())] == [
        [0, 1, 2],
        [3, 4, 5],
        [6, 7, 8],
    ]


def test_the_queue_counts_messages_not_lists() -> None:
    async def run() -> tuple[int, int]:
        stream = FakeStream(FakeApp())
        queue = stream.channel.queue
        _put(queue, _messages(3))
        _put(queue, _messages(4, start=3))
        queued = queue.bulk_events
        await anext(batching.batches(stream, 10))
        return queued, queue.bulk_events

    assert asyncio.run(run()) == (7, 0)


def test_anything_but_a_list_on_the_queue_is_refused() -> None:
    async def run() -> None:
        stream = FakeStream(FakeApp())
        stream.channel.queue.put_nowait(FakeMessage("in", 0, 0))
        await anext(batching.batches(stream, 10))

    with pytest.raises(TypeError, match="lists of messages"):
        asyncio.run(run())


def test_a_batch_is_tracked_as_one_and_not_acked() -> None:
    async def run() -> tuple[FakeApp, list[FakeMessage]]:
        app = FakeApp()
        stream = FakeStream(app)
        _put(stream.channel.queue, _messages(3))
        return app, await anext(batching.batches(stream, 10))

    app, batch = asyncio.run(run())
    assert len(batch) == 3 and not any(m.acked for m in batch)
    assert app.tracked == [batch] and app.tracked[0] is batch
    assert not batch.acked and batch.refcount == 3  # what wait_empty logs


def test_messages_of_an_older_generation_are_dropped_untracked_and_unacked() -> None:
    async def run() -> tuple[FakeApp, list[FakeMessage], list[FakeMessage]]:
        app = FakeApp(consumer_generation_id=2)
        stream = FakeStream(app)
        stale, fresh = _messages(2, generation=1), _messages(2, generation=2, start=2)
        _put(stream.channel.queue, stale)
        _put(stream.channel.queue, fresh)
        return app, stale, await anext(batching.batches(stream, 10))

    app, stale, batch = asyncio.run(run())
    assert [m.offset for m in batch] == [2, 3]
    assert [[m.offset for m in tracked] for tracked in app.tracked] == [[2, 3]]
    assert not any(m.acked for m in stale)


def test_messages_taken_while_the_flow_is_suspended_wait_for_it_and_keep_their_generation() -> None:
    async def run() -> list[FakeMessage]:
        app = FakeApp(active=False)
        stream = FakeStream(app)
        _put(stream.channel.queue, _messages(2, generation=1))
        _put(stream.channel.queue, _messages(1, generation=2, start=2))
        pending = asyncio.ensure_future(anext(batching.batches(stream, 10)))
        await until(lambda: app.acquiring, what="the batch to wait for the flow")
        assert not pending.done()  # held while the flow is suspended
        app.consumer_generation_id = 2  # the rebalance that suspended it moved on
        app.active = True
        return await asyncio.wait_for(pending, 1)

    assert [m.offset for m in asyncio.run(run())] == [2]


def test_resuming_flow_control_does_not_drop_queued_messages() -> None:
    async def run() -> list[FakeMessage]:
        flow = FlowControlEvent(initially_suspended=False)
        app = FakeApp()
        stream = FakeStream(app, FakeChannel(flow))
        taken = batching.batches(stream, 10)
        first = asyncio.ensure_future(anext(taken))
        queue = stream.channel.queue
        await until(lambda: queue.waiting, what="the agent to hold its queue and wait on it")
        _put(stream.channel.queue, _messages(1))
        await first
        _put(stream.channel.queue, _messages(2, start=1))
        flow.suspend()
        flow.resume()  # Faust's resume clears managed queues: not this one
        return await asyncio.wait_for(anext(taken), 1)

    assert [m.offset for m in asyncio.run(run())] == [1, 2]


def _sessions(partition: int, keys: list[str], start: int = 0) -> list[FakeMessage]:
    """One message per key, in order, of one partition."""
    return [FakeMessage("in", partition, start + i, key=key.encode()) for i, key in enumerate(keys)]


def _where(batch: list[FakeMessage]) -> list[tuple[int, int]]:
    return [(m.partition, m.offset) for m in batch]


def test_with_a_session_bound_partitions_take_turns_longest_waiting_first() -> None:
    async def run() -> list[list[FakeMessage]]:
        stream = FakeStream(FakeApp())
        queue = stream.channel.queue
        _put(queue, _sessions(0, ["a", "b", "a"]))
        _put(queue, _sessions(1, ["c", "d"]))
        _put(queue, _sessions(2, ["e"]))
        taken = batching.batches(stream, 100, sessions=2)
        first = await anext(taken)  # partition 0 alone holds two sessions
        _put(queue, _sessions(0, ["b"], start=3))  # joins partition 0, behind 1 and 2
        second = await anext(taken)
        third = await anext(taken)
        return [first, second, third]

    first, second, third = asyncio.run(run())
    assert _where(first) == [(0, 0), (0, 1), (0, 2)]
    assert _where(second) == [(1, 0), (1, 1)]
    # Partition 2 waited longest, then partition 0 with what reached it meanwhile.
    assert _where(third) == [(2, 0), (0, 3)]


def test_partitions_join_a_batch_while_their_sessions_fit_and_a_large_one_goes_alone() -> None:
    async def run() -> list[list[FakeMessage]]:
        stream = FakeStream(FakeApp())
        queue = stream.channel.queue
        _put(queue, _sessions(0, ["a", "b", "c", "d"]))
        _put(queue, _sessions(1, ["e", "e"]))
        _put(queue, _sessions(2, ["f"]))
        _put(queue, _sessions(3, ["g", "h"]))
        taken = batching.batches(stream, 100, sessions=3)
        return [await anext(taken) for _ in range(3)]

    assert [sorted({m.partition for m in batch}) for batch in asyncio.run(run())] == [
        [0],  # four sessions: over the bound, alone
        [1, 2],  # two sessions; partition 3 would bring four
        [3],
    ]


@pytest.mark.parametrize(("max_", "partitions"), [(5, [0]), (4, [0, 1])])
def test_a_whole_batch_waiting_takes_every_partition(max_: int, partitions: list[int]) -> None:
    async def run() -> list[FakeMessage]:
        stream = FakeStream(FakeApp())
        _put(stream.channel.queue, _sessions(0, ["a", "b"]))
        _put(stream.channel.queue, _sessions(1, ["c", "d"]))
        return await anext(batching.batches(stream, max_, sessions=1))

    assert sorted({m.partition for m in asyncio.run(run())}) == partitions


def test_without_a_session_bound_a_batch_takes_every_partition() -> None:
    async def run() -> list[FakeMessage]:
        stream = FakeStream(FakeApp())
        _put(stream.channel.queue, _sessions(0, ["a", "b"]))
        _put(stream.channel.queue, _sessions(1, ["c", "d"]))
        return await anext(batching.batches(stream, 100))

    assert _where(asyncio.run(run())) == [(0, 0), (0, 1), (1, 0), (1, 1)]


def test_a_partition_over_the_maximum_goes_on_after_the_others() -> None:
    async def run() -> list[list[FakeMessage]]:
        stream = FakeStream(FakeApp())
        queue = stream.channel.queue
        for partition, key in enumerate("abc"):
            _put(queue, _sessions(partition, [key]))
        taken = batching.batches(stream, 4, sessions=1)
        first = await anext(taken)  # partition 0 alone; 1 and 2 wait
        _put(queue, _sessions(1, ["b", "d", "e", "f"], start=1))  # a backlog on partition 1
        return [first, await anext(taken), await anext(taken)]

    first, second, third = asyncio.run(run())
    assert _where(first) == [(0, 0)]
    assert _where(second) == [(1, 0), (1, 1), (1, 2), (1, 3)]  # a whole batch: no turns
    assert _where(third) == [(2, 0)]  # before the rest of partition 1: it starves no one


def test_no_more_than_a_batch_leaves_the_queue_that_holds_the_hand_over_back() -> None:
    async def run() -> tuple[int, int, list[tuple[int, int]]]:
        stream = FakeStream(FakeApp())
        queue = stream.channel.queue
        for partition in range(5):
            _put(queue, _sessions(partition, ["a", "b"]))
        batch = await anext(batching.batches(stream, 3, sessions=1))
        return queue.bulk_events, queue.qsize(), _where(batch)

    # Two partitions (four messages, a batch's worth) left the queue; the batch took three.
    assert asyncio.run(run()) == (6, 3, [(0, 0), (0, 1), (1, 0)])


def test_no_more_than_the_byte_bound_leaves_the_queue_and_a_full_one_holds_the_hand_over() -> None:
    async def run() -> tuple[int, int, int, bool]:
        app = FakeApp()

        class Transport:
            bulk_topics = frozenset({"in"})
            bulk_bytes = 1_000  # ten messages of 100 bytes

        app.consumer.transport = Transport()  # type: ignore[attr-defined]
        stream = FakeStream(app)
        queue = stream.channel.queue
        for partition in range(4):
            _put(queue, [FakeMessage("in", partition, i) for i in range(6)])
        batch = await anext(batching.batches(stream, 100))
        return len(batch), queue.bulk_events, queue.bulk_bytes, bulkqueue.full(queue)

    # Of 2,400 bytes, two lists (1,200 bytes) left the queue: the first that crossed the
    # bound was the last; the 1,200 left still hold the hand-over back.
    assert asyncio.run(run()) == (12, 12, 1_200, True)


def test_waiting_messages_of_an_older_generation_are_dropped() -> None:
    async def run() -> tuple[list[list[FakeMessage]], int]:
        app = FakeApp()
        stream = FakeStream(app)
        for partition in range(3):
            _put(stream.channel.queue, _sessions(partition, ["a"]))
        taken = batching.batches(stream, 100, sessions=1)
        first = await anext(taken)
        app.consumer_generation_id = 2  # a rebalance: partitions 1 and 2 are fetched again
        second = asyncio.ensure_future(anext(taken))
        queue = stream.channel.queue
        await until(lambda: queue.waiting, what="the stale messages dropped, the agent waiting")
        assert not second.done()  # nothing of the current generation is waiting
        _put(stream.channel.queue, [FakeMessage("in", 2, 0, generation_id=2, key=b"a")])
        return [first, await asyncio.wait_for(second, 1)], len(app.tracked)

    (first, second), tracked = asyncio.run(run())
    assert _where(first) == [(0, 0)]
    assert [(m.partition, m.generation_id) for m in second] == [(2, 2)]
    assert tracked == 2


def test_a_closing_channel_ends_the_batches() -> None:
    async def run() -> list[Any]:
        stream = FakeStream(FakeApp())
        await stream.channel.queue.throw(StopAsyncIteration())
        return [batch async for batch in batching.batches(stream, 10)]

    assert asyncio.run(run()) == []


def test_ack_releases_each_message_and_acks_it_on_its_last_reference() -> None:
    class Message:
        def __init__(self, refcount: int, acked: bool = False) -> None:
            self.refcount, self.acked = refcount, acked

    class Consumer:
        def __init__(self) -> None:
            self.acked: list[Message] = []

        def ack(self, message: Message) -> bool:
            message.acked = True
            self.acked.append(message)
            return True

    last, shared, done = Message(1), Message(2), Message(1, acked=True)
    consumer = Consumer()
    batching.ack([last, shared, done], consumer)
    assert consumer.acked == [last]
    assert shared.refcount == 1 and not shared.acked  # another channel still holds it
    assert done.refcount == 1  # already acked: untouched


# --- the monitor and the wiring -----------------------------------------------------------------


def test_the_lean_monitor_keeps_only_what_the_slow_stream_check_reads() -> None:
    monitor = LeanMonitor()
    monitor.on_message_in(("in", 0), 5, object())
    assert monitor.messages_received_total == 0
    monitor.on_stream_event_in(("in", 0), 5, object(), object())
    assert ("in", 0) in monitor.stream_inbound_time
    assert monitor.on_send_initiated(None, "t", None, 1, 1) is None


def test_the_worker_app_takes_the_bulk_consumer_path(tmp_path: Path) -> None:
    settings = Settings(state_dir=str(tmp_path), input_topic="events-in")
    app = assemble(settings, 2).app
    assert isinstance(app.transport, fetch.BulkTransport)
    assert app.transport.Consumer is fetch.BulkConsumer
    assert app.transport.bulk_topics == frozenset({"events-in"})
    assert app.conf.Monitor is LeanMonitor


async def _unused(*args: Any) -> None:  # pragma: no cover - never called
    raise AssertionError(args)


def test_acking_in_bulk_keeps_fausts_bookkeeping(tmp_path: Path) -> None:
    """``BulkConsumer.ack_many`` against Faust's ``Consumer.ack`` one message at a time:
    the same acked offsets, counts and pending messages, a commit's offset respected."""
    from faust.types.tuples import Message as FaustMessage

    class OneByOne:  # no ack_many: ``ack`` takes Faust's Consumer.ack per message
        def __init__(self, consumer: Any) -> None:
            self.ack = consumer.ack

    async def run() -> list[tuple[Any, ...]]:
        settings = Settings(state_dir=str(tmp_path), input_topic="events-in")
        app = assemble(settings, 2).app
        app.topics._acking_topics.add("events-in")  # as subscribing the agent does
        states = []
        for bulk in (True, False):
            consumer = app.transport.create_consumer(
                callback=_unused, on_partitions_revoked=_unused, on_partitions_assigned=_unused
            )
            tp = TP("events-in", 1)
            consumer._committed_offset[tp] = 3  # a commit passed offsets below 3
            messages = [
                FaustMessage("events-in", 1, offset, 0.0, 0, None, b"k", b"v", None)
                for offset in (1, 3, 4, 4, 5)
            ] + [FaustMessage("other", 0, 9, 0.0, 0, None, b"k", b"v", None)]
            for message in messages:
                message.incref(1)
            messages[4].incref(1)  # another channel still holds offset 5
            if bulk:
                consumer.ack_many(messages)
            else:
                batching.ack(messages, OneByOne(consumer))
            states.append(
                (
                    dict(consumer._acked),
                    {tp: set(index) for tp, index in consumer._acked_index.items()},
                    consumer._n_acked,
                    [(m.acked, m.refcount) for m in messages],
                )
            )
        return states

    bulk, faust_way = asyncio.run(run())
    assert bulk == faust_way
    assert bulk[0] == {TP("events-in", 1): [3, 4]}
    assert bulk[2] == 2


def test_an_acked_batch_leaves_the_set_faust_waits_on(tmp_path: Path) -> None:
    """A rebalance or a shutdown waits (``wait_empty``) until the consumer's unacked set
    is empty: a batch is in it from ``batches`` until its ``ack``, then gone."""
    from faust.types.tuples import Message as FaustMessage

    async def run() -> tuple[int, int, list[int], bool]:
        settings = Settings(state_dir=str(tmp_path), input_topic="events-in")
        app = assemble(settings, 2).app
        app.topics._acking_topics.add("events-in")
        consumer = app.transport.create_consumer(
            callback=_unused, on_partitions_revoked=_unused, on_partitions_assigned=_unused
        )
        batch = batching.Batch(
            FaustMessage("events-in", 0, offset, 0.0, 0, None, b"k", b"v", None)
            for offset in (4, 5)
        )
        for message in batch:
            message.incref(1)
        consumer._unacked_messages.add(batch)  # what ``batches`` does
        before = len(consumer._unacked_messages)
        batching.ack(batch, consumer)
        return (
            before,
            len(consumer._unacked_messages),
            consumer._acked[TP("events-in", 0)],
            batch.acked,
        )

    before, after, acked, batch_acked = asyncio.run(run())
    assert (before, after) == (1, 0)
    assert acked == [4, 5] and batch_acked


def test_the_hand_over_queues_while_only_the_consumers_flow_is_still_suspended(
    tmp_path: Path,
) -> None:
    """Table recovery resumes the app's flow before the consumer's: records fetched in
    between must be queued (no seek follows to bring them again), a partition's records
    as one list, and the read offset moved to the last of them."""
    from faust.types.tuples import Message as FaustMessage

    async def run() -> tuple[list[Any], int, Any]:
        settings = Settings(state_dir=str(tmp_path), input_topic="events-in")
        app = assemble(settings, 2).app
        consumer = app.consumer
        channel = FakeChannel()
        channel.schema = app.topic("events-in", **RAW).schema  # type: ignore[attr-defined]
        tp = TP("events-in", 0)
        app.topics._tp_index[tp].add(channel)
        app.flow_control.resume()
        consumer.suspend_flow.set()  # the window between the two resumes
        generation = app.consumer_generation_id
        messages = [
            FaustMessage(
                "events-in", 0, offset, 0.0, 0, None, b"k", b"v", None, generation_id=generation
            )
            for offset in (7, 8, 9)
        ]
        await consumer._hand_over([(tp, messages)], consumer._seek_epoch)
        queued = channel.queue.get_nowait() if not channel.queue.empty() else []
        return queued, consumer._read_offset[tp], channel.queue.bulk_events

    queued, read_offset, counted = asyncio.run(run())
    assert [m.offset for m in queued] == [7, 8, 9]
    assert read_offset == 9 and counted == 3
    assert all(m.refcount == 1 for m in queued)


def test_a_hand_over_a_seek_came_before_notes_what_it_dropped(tmp_path: Path) -> None:
    """Records fetched before a seek are not handed over (the seek brings them again),
    and each partition's first dropped offset is noted, so they are fetched again even
    when the seek took effect before they were fetched (``_fetch_dropped_again``)."""
    from faust.types.tuples import Message as FaustMessage

    async def run() -> tuple[bool, dict[Any, int], Any]:
        settings = Settings(state_dir=str(tmp_path), input_topic="events-in")
        app = assemble(settings, 2).app
        consumer = app.consumer
        channel = FakeChannel()
        channel.schema = app.topic("events-in", **RAW).schema  # type: ignore[attr-defined]
        parts = []
        for partition, first in ((0, 7), (1, 40)):
            tp = TP("events-in", partition)
            app.topics._tp_index[tp].add(channel)
            parts.append(
                (
                    tp,
                    [
                        FaustMessage("events-in", partition, offset, 0.0, 0, None, b"k", b"v", None)
                        for offset in (first, first + 1)
                    ],
                )
            )
        app.flow_control.resume()
        epoch = consumer._seek_epoch
        consumer._seek_epoch += 1  # a seek since the fetch (what ``seek`` does first)
        await consumer._hand_over(parts, epoch)
        return channel.queue.empty(), consumer._holes.dropped, consumer._read_offset

    empty, dropped, read_offset = asyncio.run(run())
    assert empty
    assert dropped == {TP("events-in", 0): 7, TP("events-in", 1): 40}
    assert TP("events-in", 1) not in read_offset


def test_faust_is_the_version_the_bulk_consumer_was_written_against() -> None:
    assert faust.__version__ == internals.FAUST_VERSION
