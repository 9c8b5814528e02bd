"""The drain loop's driver (``stream.app.fetch.BulkConsumer``) on in-memory fetches: a
real bulk consumer, as ``assemble`` builds it, given fetches instead of a broker, its
seeks recorded. What it decides is ``stream.app.drain``'s (test_drain_plan.py); here, that
each decision reaches Faust: the hand-over, the read offsets, a span fetched again, a
hole noted, the rest of a fetch dropped, a changelog restored, Faust's path."""

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from faust.types import TP
from faust.types.tuples import Message

from stream.app import fetch
from stream.app.table import RAW
from stream.app.worker import assemble
from stream.config import Settings
from tests.unit.app.test_bulk_path import FakeChannel
from tests.waiting import until

INPUT = "events-in"
TP0, TP1 = TP(INPUT, 0), TP(INPUT, 1)
OTHER = TP("other", 0)


class Driven:
    """A bulk consumer whose fetches are given (``fetches``), its seeks and Faust's
    callback recorded, and a raw channel subscribed to the input."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.consumer: fetch.BulkConsumer = app.consumer
        self.fetches: list[tuple[dict[Any, list[Any]], Any]] = []
        self.seeks: list[tuple[Any, int]] = []
        self.called: list[Any] = []
        self.before_each: Callable[[Any], None] = lambda tp: None
        self.channel = FakeChannel()
        self.channel.schema = app.topic(INPUT, **RAW).schema  # type: ignore[attr-defined]
        for tp in (TP0, TP1):
            app.topics._tp_index[tp].add(self.channel)
        app.topics._acking_topics.update({INPUT, OTHER.topic})
        app.flow_control.resume()
        driven = self

        async def wait_next_records(timeout: float) -> Any:
            return driven.fetches.pop(0) if driven.fetches else (None, None)

        async def seek(tp: Any, offset: int) -> None:
            driven.seeks.append((tp, offset))

        async def callback(message: Any) -> None:
            driven.called.append(message.offset)

        def to_message(tp: Any, record: Any) -> Any:
            driven.before_each(tp)
            return record

        self.consumer.__dict__.update(
            _wait_next_records=wait_next_records,
            _seek=seek,
            callback=callback,
            _to_message=to_message,
            highwater=lambda tp: 1_000,
            assignment=lambda: set(),
        )

    def fetch(self, *parts: tuple[Any, list[int]]) -> None:
        generation = self.app.consumer_generation_id
        self.fetches.append(
            (
                {
                    tp: [
                        Message(
                            tp.topic,
                            tp.partition,
                            o,
                            0.0,
                            0,
                            None,
                            b"k",
                            b"v",
                            None,
                            generation_id=generation,
                        )
                        for o in offsets
                    ]
                    for tp, offsets in parts
                },
                None,
            )
        )

    def queued(self) -> list[tuple[Any, list[int]]]:
        out = []
        while not self.channel.queue.empty():
            messages = self.channel.queue.get_nowait()
            out.append((messages[0].tp, [m.offset for m in messages]))
        return out


def _driven(tmp_path: Path, run: Callable[[Driven], Any]) -> Any:
    async def go() -> Any:
        settings = Settings(state_dir=str(tmp_path), input_topic=INPUT)
        return await run(Driven(assemble(settings, 2).app))

    return asyncio.run(go())


def test_a_fetch_is_handed_over_a_partition_at_a_time_and_sets_the_read_offsets(
    tmp_path: Path,
) -> None:
    async def run(d: Driven) -> Any:
        d.consumer._read_offset[TP0] = 4
        d.fetch((TP0, [3, 4, 5, 6]), (TP1, [0, 1]))
        assert await d.consumer._drain_fetch()
        return d.queued(), dict(d.consumer._read_offset)

    queued, read = _driven(tmp_path, run)
    assert queued == [(TP0, [4, 5, 6]), (TP1, [0, 1])]  # 3 read already; 4 again at most
    assert read[TP0] == 6 and read[TP1] == 1


def test_a_jump_is_fetched_again_then_noted_as_a_hole(tmp_path: Path) -> None:
    async def run(d: Driven) -> Any:
        d.consumer._read_offset[TP0] = 4
        d.fetch((TP0, [5, 9, 10]))
        await d.consumer._drain_fetch()
        first = (d.queued(), list(d.seeks), d.consumer._read_offset[TP0])
        d.fetch((TP0, [5, 9, 10]))  # the same jump again: 6..8 hold no record
        await d.consumer._drain_fetch()
        return first, d.queued(), d.consumer._gap[TP0]

    (queued, seeks, read), again, gaps = _driven(tmp_path, run)
    assert queued == [(TP0, [5])] and seeks == [(TP0, 5)] and read == 5
    assert again == [(TP0, [5, 9, 10])]
    assert sorted((i.begin, i.end) for i in gaps) == [(6, 9)]


def test_a_rebalance_while_a_fetch_is_read_drops_the_rest(tmp_path: Path) -> None:
    async def run(d: Driven) -> Any:
        def rebalance(tp: Any) -> None:
            if tp == TP1:  # after partition 1's first record
                d.app.consumer_generation_id += 1

        d.fetch((TP0, [0, 1]), (TP1, [0, 1]), (TP(INPUT, 2), [7]))
        d.before_each = rebalance
        await d.consumer._drain_fetch()
        return d.queued(), dict(d.consumer._holes.dropped)

    queued, dropped = _driven(tmp_path, run)
    assert queued == []  # of the generation before: the hand-over drops them too
    assert dropped == {TP0: 0, TP1: 0, TP(INPUT, 2): 7}  # fetched again unless read since


def test_a_seek_before_a_jump_is_fetched_again_drops_the_rest_of_the_fetch(
    tmp_path: Path,
) -> None:
    async def run(d: Driven) -> Any:
        d.consumer._read_offset[TP0] = 4
        d.fetch((TP0, [5, 9]), (TP1, [0]))
        real = d.consumer._hand_over

        async def hand_over(parts: Any, epoch: int) -> None:
            await real(parts, epoch)
            d.consumer._seek_epoch += 1  # a seek began meanwhile

        d.consumer.__dict__["_hand_over"] = hand_over
        await d.consumer._drain_fetch()
        return d.queued(), d.seeks, dict(d.consumer._holes.dropped)

    queued, seeks, dropped = _driven(tmp_path, run)
    assert queued == [(TP0, [5])] and not seeks
    assert dropped == {TP0: 5, TP1: 0}  # 9 and the rest of the fetch, fetched again


def test_a_changelog_goes_to_its_restore_and_other_topics_take_fausts_path(
    tmp_path: Path,
) -> None:
    async def run(d: Driven) -> Any:
        taken: list[Any] = []

        class Restore:
            async def take(self, tp: Any, batch: list[Any], to_message: Any) -> None:
                taken.append((tp, [m.offset for m in batch]))

        log = TP("changelog", 0)
        d.app.transport.changelogs = {"changelog": Restore()}
        d.consumer._read_offset[OTHER] = 1
        d.fetch((TP0, [0]), (log, [3, 4]), (OTHER, [2, 5]), (TP1, [0]))
        await d.consumer._drain_fetch()
        read = d.consumer._read_offset
        return taken, d.called, d.queued(), read[log], read[OTHER], dict(d.consumer._gap)

    taken, called, queued, log_read, other_read, gaps = _driven(tmp_path, run)
    assert taken == [(TP("changelog", 0), [3, 4])] and log_read == 4
    assert called == [2, 5] and other_read == 5  # one event at a time, Faust's gap 3..5
    assert [(i.begin, i.end) for i in gaps[OTHER]] == [(3, 6)]
    assert queued == [(TP0, [0]), (TP1, [0])]  # TP0's before Faust's path took its turn


def test_a_span_that_comes_back_is_logged_as_a_loss_averted_or_redeliveries(
    tmp_path: Path,
) -> None:
    async def run(d: Driven) -> Any:
        lines: list[str] = []
        log = d.consumer.log
        d.consumer.__dict__["log"] = type(
            "Log",
            (),
            {
                "info": lambda self, text, *a: lines.append(text % a),
                "warning": lambda self, text, *a: lines.append(text % a),
                "dev": log.dev,
            },
        )()
        d.consumer._holes.spans.update({TP0: (4, 9), TP1: (0, 3)})
        d.consumer._holes.handed[TP1] = 2
        d.consumer._read_offset.update({TP0: 4, TP1: 0})
        d.fetch((TP0, [5, 6]), (TP1, [1]))
        await d.consumer._drain_fetch()
        return lines

    lines = _driven(tmp_path, run)
    assert any("5..8 had been fetched and not handed over" in line for line in lines)
    assert any("1..2 again: redeliveries" in line for line in lines)


def test_the_loop_drains_until_stopped(tmp_path: Path) -> None:
    async def run(d: Driven) -> Any:
        class Fetcher:
            _stopped = asyncio.Event()

        d.fetch((TP0, [0, 1]))
        d.fetch((TP0, [2]))
        real = d.consumer._drain_fetch

        async def drain_fetch() -> bool:
            done = await real()
            if not d.fetches:
                Fetcher._stopped.set()
            return done

        d.consumer.__dict__["_drain_fetch"] = drain_fetch
        await d.consumer._drain_messages(Fetcher())
        return d.queued()

    assert _driven(tmp_path, run) == [(TP0, [0, 1]), (TP0, [2])]


def test_a_full_queue_holds_the_hand_over_until_there_is_room(tmp_path: Path) -> None:
    async def run(d: Driven) -> Any:
        d.channel.queue.bulk_events = d.channel.queue.maxsize  # full: the agent is behind
        d.fetch((TP0, [0, 1]))
        draining = asyncio.ensure_future(d.consumer._drain_fetch())
        await until(lambda: not d.fetches, what="the fetch taken")
        held = d.channel.queue.empty() and not draining.done()  # waiting for room
        d.channel.queue.bulk_events = 0  # the agent took a batch
        await draining
        return held, d.queued()

    held, queued = _driven(tmp_path, run)
    assert held and queued == [(TP0, [0, 1])]


def test_a_full_queue_gives_up_on_a_rebalance_and_drops_what_it_held(tmp_path: Path) -> None:
    async def run(d: Driven) -> Any:
        d.channel.queue.bulk_events = d.channel.queue.maxsize
        d.fetch((TP0, [3, 4]))
        draining = asyncio.ensure_future(d.consumer._drain_fetch())
        await until(lambda: not d.fetches, what="the fetch taken")
        d.consumer.suspend_flow.set()  # a rebalance suspends the flow
        await draining
        d.channel.queue.bulk_events = 0
        return d.queued(), dict(d.consumer._holes.dropped), d.consumer._read_offset.get(TP0)

    queued, dropped, read = _driven(tmp_path, run)
    assert queued == [] and dropped == {TP0: 3} and read is None


def test_a_channel_that_decodes_gets_an_event_per_record(tmp_path: Path) -> None:
    async def run(d: Driven) -> Any:
        class Decoding:
            """A channel of the input that takes decoded values (not raw)."""

            schema = None
            queue: asyncio.Queue[Any] = asyncio.Queue(maxsize=1)

            async def decode(self, message: Any, propagate: bool) -> Any:
                return None if message.offset == 1 else ("event", message.offset)

        decoding = Decoding()
        d.app.topics._tp_index[TP0].add(decoding)
        d.fetch((TP0, [0, 1, 2]))
        draining = asyncio.ensure_future(d.consumer._drain_fetch())
        events = []
        while len(events) < 2:  # its queue holds one: the hand-over waits for room
            events.append(await decoding.queue.get())
        await draining
        return events, d.queued(), d.consumer._read_offset[TP0]

    events, queued, read = _driven(tmp_path, run)
    assert events == [("event", 0), ("event", 2)]  # 1 failed to decode: Faust acks it
    assert queued == [(TP0, [0, 1, 2])] and read == 2
