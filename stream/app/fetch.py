"""The worker's fetch path: Faust's consumer, handing records over in bulk.

Stock Faust hands every fetched record on one at a time (``wait_first``, four tasks per
record; the conductor's lock and decoding; the stream's sleep, sensors and ack per
event): at a few thousand records per second that path, not the fold, was the worker's
CPU (docs/performance.md). ``BulkConsumer`` takes it out, keeping what Faust guarantees:
every record of the input (``FetchSettings.bulk_topics``) is checked against the read
offset as Faust does, and each partition's records go on the raw channel's queue as one
list of Faust messages (``stream.app.bulkqueue``), bounded in records and in bytes; a
full queue waits, for room or for the rebalance that suspends the flow. What is done with
each fetch, partition and record — read offsets, holes fetched again, records a seek or
a rebalance dropped, empty ends, seeks — is decided by ``stream.app.drain``; here it is
applied to Faust and aiokafka. A table's changelog goes to its bulk restore
(``stream.app.restore``), other topics take Faust's path; the agent's side is
``stream.app.batching``.

``install`` gives the app this consumer with its ``FetchSettings``, each fetch paced
(``stream.app.pacing``), and the producer of ``stream.app.producer``, on the backoff
clients of ``stream.app.backoff``. Private names relied on: ``stream.app.internals``.
"""

import asyncio
import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from aiokafka import TopicPartition  # type: ignore[import-untyped]
from faust.transport.consumer import CONSUMER_FETCHING, ensure_TP
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP
from faust.types.tuples import ack_lock
from mode.utils.futures import maybe_async

from stream.app import bulkqueue, drain, pacing
from stream.app.backoff import quiet_aiokafka, with_backoff
from stream.app.batching import BulkAcks
from stream.app.membership import leave_on_close
from stream.app.offsets import Holes, read_after_seek
from stream.app.producer import BackoffProducer


@dataclass(frozen=True)
class FetchSettings:
    """What the worker's settings make of its consumer, built once (``of``: the defaults
    are the settings' own) and handed to the transport and each consumer it creates."""

    bulk_topics: frozenset[str]  # the input, handed over in bulk
    pace: drain.Pace | None  # how long each fetch waits at its broker (``stream.app.pacing``)
    bulk_bytes: int | None  # input bytes handed over, not yet in a batch (None: no bound)
    isolation_level: str  # set on the aiokafka consumer (docs/notes/025)
    consumer_thread: bool  # False: the consumer on the app's loop (``InlineConsumerThread``)
    record_age: Callable[[float], None] | None = None  # each fetch's age as handed over
    fetches: Callable[[bool], None] | None = None  # each fetch sent: resting or not
    leaving: Callable[[], bool] | None = None  # whether a static member leaves (note 027)

    @classmethod
    def of(
        cls,
        settings: Any,
        record_age: Callable[[float], None] | None = None,
        leaving: Callable[[], bool] | None = None,
        fetches: Callable[[bool], None] | None = None,
    ) -> "FetchSettings":
        """From the worker's ``stream.config.Settings``: its input topic in bulk."""
        return cls(
            bulk_topics=frozenset([settings.input_topic]),
            pace=drain.Pace(
                budget_ms=max(1, round(settings.latency_budget * 1000)),
                resting_ms=max(1, round(settings.fetch_max_wait * 1000)),
            ),
            bulk_bytes=settings.max_buffered_bytes,
            isolation_level=settings.isolation_level,
            consumer_thread=settings.consumer_thread,
            record_age=record_age,
            leaving=leaving,
            fetches=fetches,
        )


class BulkConsumer(BulkAcks, faust_aiokafka.Consumer):
    """The aiokafka driver's consumer, handing records of ``fetch.bulk_topics`` over in
    bulk. What it does with each fetch, partition and record is decided by
    ``stream.app.drain``; here it is applied to Faust and aiokafka."""

    def __init__(self, transport: Any, *, fetch: FetchSettings, **kwargs: Any) -> None:
        self.fetch = fetch
        super().__init__(transport, **kwargs)

    async def _drain_messages(self, fetcher: Any) -> None:
        # Faust's loop (Consumer._drain_messages with Consumer.getmany inlined, 0.15.3):
        # the same checks per fetch (flow, generation, active partitions) and per record
        # (read offset, gaps, commit_every), the end offset tracked once per partition
        # instead of per record, and records of bulk topics handed over once per fetch.
        consumer_should_stop = self._stopped.is_set
        fetcher_should_stop = fetcher._stopped.is_set
        unset_flag = self.diag.unset_flag
        try:
            while not (consumer_should_stop() or fetcher_should_stop()):
                self.diag.set_flag(CONSUMER_FETCHING)
                if await self._drain_fetch():
                    unset_flag(CONSUMER_FETCHING)
        except self.consumer_stopped_errors:
            if self.transport.app.should_stop:
                self.log.info("Broker stopped consumer, shutting down...")
                return
            raise
        except asyncio.CancelledError:
            if self.transport.app.should_stop:
                self.log.info("Consumer shutting down for user cancel.")
                return
            raise
        except Exception as exc:
            self.log.exception("Drain messages raised: %r", exc)
            raise
        finally:
            unset_flag(CONSUMER_FETCHING)

    async def _drain_fetch(self) -> bool:
        """One fetch, its partitions in fetch order (``drain.route``); False: nothing was
        fetched, or the flow had stopped."""
        app = self.app
        holes = self._holes
        bulk_topics = self.fetch.bulk_topics
        if holes.dropped and not self._seeking:
            await self._fetch_dropped_again()
        records, active = await self._wait_next_records(1.0)
        generation = app.consumer_generation_id
        await self.sleep(0)
        if records is None or self.should_stop:
            return False
        if not self.flow_active:
            self.log.dev("fetched while flow not active: seek back to committed")
            try:
                await self.perform_seek()
            except Exception as ex:
                self.log.warning(f"exception performing seek when flow not active {ex}")
            return False
        epoch = self._seek_epoch
        pending: list[tuple[Any, list[Any]]] = []  # (partition, its records), fetch order
        stale = False
        changelogs = self.transport.changelogs
        for tp, batch in records.items():
            way = drain.route(
                tp,
                batch,
                stale=stale,
                flow_active=self.flow_active,
                generation=generation,
                generation_now=app.consumer_generation_id,
                active=active,
                buffered=self._buffered_partitions,
                changelogs=changelogs,
                bulk_topics=bulk_topics,
            )
            if way is drain.Route.DROP_REST:
                # The rest is fetched again after the rebalance or the seek, unless the
                # seek had already taken effect (_fetch_dropped_again).
                holes.drop(drain.dropped_too(records, bulk_topics))
                break
            if way is drain.Route.SKIP:
                continue
            app.monitor.track_tp_end_offset(tp, self.highwater(tp))
            if way is drain.Route.RESTORE:
                await changelogs[tp.topic].take(tp, batch, self._to_message)
                self._read_offset[tp] = batch[-1].offset
                continue
            stale = await self._drain_part(tp, batch, way is drain.Route.BULK, pending, epoch)
        if pending:
            await self._hand_over(pending, epoch)
        if bulk_topics:
            await self._pass_empty_ends(bulk_topics, records)
        return True

    async def _drain_part(
        self, tp: TP, batch: list[Any], bulk: bool, pending: list[Any], epoch: int
    ) -> bool:
        """One partition's records, each checked against its read offset (``drain.check``):
        the input's added to ``pending``, handed over once per fetch, any other's handed
        to Faust's callback one at a time. True: a seek or a rebalance came first, the
        rest of the fetch is dropped."""
        holes = self._holes
        to_message = self._to_message
        commit_every = self._commit_every
        acks = self.app.topics.acks_enabled_for(tp.topic)
        check, take, kinds = drain.check, drain.TAKE, drain.Kind  # per record: local names
        taken: list[Any] | None = None  # this partition's records in pending
        read = self._read_offset[tp]
        for record in batch:
            message = to_message(tp, record)
            offset = message.offset
            step = check(tp, read, offset, bulk, acks, holes)
            if step is not take:
                kind = step.kind
                if kind is kinds.SKIP:
                    continue  # already read (Faust logs "DROPPED MESSAGE ROFF")
                if kind is kinds.FETCH_AGAIN:  # the span again before committing past it
                    if pending:
                        await self._hand_over(pending, epoch)
                        pending.clear()
                    if drain.dropped_by_seek(self._seek_moved(epoch), self.suspend_flow.is_set()):
                        holes.drop([(tp, [message])])
                        return True
                    await self._fetch_again(tp, step.first, step.last)
                    return False
                if kind is kinds.TAKE_PAST_HOLE:  # fetched twice: no record there
                    self._note_gap(tp, step.first, step.last)
                elif kind is kinds.TAKE_PAST_GAP:
                    await self._add_gap(tp, step.first, step.last)
                elif step.span is not None:
                    self._log_span(tp, *step.span)
            if commit_every is not None and self._n_acked >= commit_every:
                self._n_acked = 0
                await self.commit()
            if bulk:
                if taken is None:
                    taken = []
                    pending.append((tp, taken))
                taken.append(message)
            else:
                if pending:
                    await self._hand_over(pending, epoch)
                    pending.clear()
                await self.wait_first(self.callback(message), self.suspend_flow.wait())
                self._read_offset[tp] = offset
            read = offset
        return False

    def _log_span(self, tp: TP, outcome: str, last: int, following: int) -> None:
        if outcome == "redelivered":
            self.log.info("%s: offsets %d..%d again: redeliveries", tp, last + 1, following - 1)
        else:
            self.log.warning(
                "%s: offsets %d..%d had been fetched and not handed over: a loss "
                "averted, they are taken now",
                tp,
                last + 1,
                following - 1,
            )

    @property
    def _holes(self) -> Holes:
        holes: Holes | None = self.__dict__.get("_bulk_holes")
        if holes is None:
            holes = self.__dict__["_bulk_holes"] = Holes()
        return holes

    async def _fetch_again(self, tp: TP, last: int, offset: int, dropped: bool = False) -> None:
        """Seek ``tp`` back to ``last``: the records up to ``offset`` come again (a
        duplicate of ``last`` at most). Not a ``seek``: records of other partitions in
        hand stay valid, so the seek epoch stays. ``dropped``: the records from ``offset``
        on were dropped because a seek came first (``_fetch_dropped_again``)."""
        if dropped:
            self.log.info(
                "%s: records from %d dropped during a seek: fetching from %d again",
                tp,
                offset,
                last,
            )
        else:
            self.log.info(
                "%s: offsets %d..%d missing from the fetch: fetching from %d again",
                tp,
                last + 1,
                offset - 1,
                last,
            )
        try:
            await self._seek(tp, last)
        except Exception as error:  # no longer assigned: the rebalance seeks it anyway
            self.log.info("%s: not fetched again (%r)", tp, error)
            return
        self._read_offset[tp] = last

    async def _fetch_dropped_again(self) -> None:
        """Once no seek is under way, each partition with records dropped because a seek
        or a rebalance came first is fetched again as ``drain.refetch_dropped`` decides."""
        holes = self._holes
        dropped, holes.dropped = holes.dropped, {}
        for tp, first in dropped.items():
            last = self._read_offset.get(tp)
            again = drain.refetch_dropped(first, last)
            if again == "again" and last is not None:
                await self._fetch_again(tp, last, first, dropped=True)
            elif again == "beginning":
                self.log.info(
                    "%s: records from %d dropped during a seek: from the start again", tp, first
                )
                try:
                    await self._thread.seek_to_beginning(TopicPartition(tp.topic, tp.partition))
                except Exception as error:  # no longer assigned: the rebalance seeks it anyway
                    self.log.info("%s: not fetched again (%r)", tp, error)

    _ends_checked = 0.0  # monotonic: when the input's ends were last checked

    async def _pass_empty_ends(self, bulk_topics: frozenset[str], records: Any) -> None:
        """At most once a second (``drain.ends_due``), each input partition this fetch
        brought nothing for is checked as a jump to its end (``drain.empty_end``): offsets
        there holding no record would hold the commit short of the end (note 024)."""
        now = time.monotonic()
        if not drain.ends_due(
            now, self._ends_checked, bool(self._seeking), bool(self._holes.dropped)
        ):
            return
        self._ends_checked = now
        fetched = set(records or ())
        for tp in list(self.assignment()):
            if tp.topic not in bulk_topics or tp in fetched:
                continue
            last = self._read_offset.get(tp)
            if last is None:
                continue
            try:
                high = self.highwater(tp)
                if high is None or not drain.end_worth_checking(last, high):
                    continue
                position = await asyncio.wait_for(self.position(tp), 1.0)
            except Exception:  # moved away, or its position is being reset: next time
                continue
            end = drain.empty_end(tp, last, high, position, self._read_offset.get(tp), self._holes)
            if end is drain.End.PASSED:
                first, hole_last, read = drain.passed_end(last, high)
                self._note_gap(tp, first, hole_last)
                self._read_offset[tp] = read  # read to the end: not checked again
            elif end is drain.End.FETCH_AGAIN:
                await self._fetch_again(tp, last, high)

    def _new_consumer_thread(self) -> "BackoffConsumerThread":
        if self.fetch.consumer_thread:
            return BackoffConsumerThread(self, loop=self.loop, beacon=self.beacon)
        return InlineConsumerThread(self, loop=self.loop, thread_loop=self.loop, beacon=self.beacon)

    _seek_epoch = 0  # bumped by every seek: records fetched before it are fetched again

    async def perform_seek(self) -> None:
        """Faust's ``perform_seek`` (every assigned partition to its committed offset),
        and the input's partitions without one to their beginning
        (``drain.after_seek_to_committed``).

        The epoch moves at both ends and nothing is handed over in between
        (``_seeking``): records fetched before the seek took effect (from wherever the
        fetcher was, e.g. past a span recovery skipped as not yet active) must not reach
        the agent ahead of the records the seek brings back, nor set a read offset past
        them after the seek set it."""
        self._seek_epoch += 1
        self._seeking += 1
        try:
            await self._seek_all_to_committed()
        finally:
            self._seeking -= 1
            self._seek_epoch += 1

    async def _seek_all_to_committed(self) -> None:
        committed = await self.seek_to_committed()
        plan = drain.after_seek_to_committed(committed, self.fetch.bulk_topics)
        self._read_offset.update(plan.read)
        self._committed_offset.update({ensure_TP(tp): o for tp, o in plan.committed.items()})
        if plan.fresh:
            fresh = [TopicPartition(tp.topic, tp.partition) for tp in plan.fresh]
            try:
                await self._thread.seek_to_beginning(*fresh)
            except Exception as error:  # moved away meanwhile: the rebalance seeks again
                self.log.info("not moved to their beginning: %s (%r)", fresh, error)

    _seeking = 0  # ``perform_seek``s under way: nothing is handed over meanwhile

    async def seek(self, partition: TP, offset: int) -> None:
        self._seek_epoch += 1
        await super().seek(partition, offset)
        tp = ensure_TP(partition)
        if tp.topic in self.fetch.bulk_topics:
            self._read_offset[tp] = read_after_seek(offset)

    def _seek_moved(self, epoch: int) -> bool:
        """A seek began since ``epoch`` was read, or a ``perform_seek`` ended or is under
        way: what was fetched meanwhile is dropped and fetched again from where the seek
        put it (``perform_seek`` puts every input partition somewhere)."""
        return drain.seek_moved(self._seeking, self._seek_epoch, epoch)

    async def _hand_over(self, parts: list[tuple[Any, list[Any]]], epoch: int) -> None:
        """What the conductor does per record (``ConductorHandler``), once per fetch, and
        what the drain loop does after it: the last record's offset becomes the read
        offset. A raw channel gets each partition's records as one list (``batches``
        takes lists); any other channel an event per record, decoded as Faust does.

        Records of an older consumer generation, or fetched before a seek, are dropped
        without touching the read offsets: the consumer fetches them again from where the
        rebalance or the seek put it (a read offset set after the seek would skip them).
        """
        observe = self.fetch.record_age
        if observe is not None:  # each partition's middle record (stream_record_age_seconds)
            for age in drain.record_ages(time.time(), parts):
                observe(age)
        handed = await self._handed_over(parts, epoch)
        if handed < len(parts):
            self._holes.drop(parts[handed:])  # fetched again: a rebalance or a seek came first

    async def _handed_over(self, parts: list[tuple[Any, list[Any]]], epoch: int) -> int:
        """``_hand_over`` up to the first part not handed over whole; returns its index."""
        app = self.app
        await app.flow_control.acquire()  # held here while a rebalance suspends the flow
        await app.producer.buffer.wait_until_ebb()
        index = app.topics._tp_index
        read_offset = self._read_offset
        handed = self._holes.handed
        for at, (tp, messages) in enumerate(parts):
            if not messages:
                continue
            channels = index.get(tp)
            raw = [channel for channel in channels or () if drain.is_raw(channel)]
            for channel in raw:  # room first: no await between the check and the puts
                queue = channel.queue
                # Only a full queue waits, and only a wait gives up on a suspended flow:
                # recovery resumes the app's flow before the consumer's, and records
                # dropped in between would never come again (no seek follows).
                full = functools.partial(bulkqueue.full, queue)
                if full() and not await self._room(full, epoch):
                    return at
            generation = app.consumer_generation_id
            if self._seek_moved(epoch):
                return at
            # A rebalance while the drain loop built them: keep those before it.
            messages, cut = drain.current(messages, generation)
            if messages:
                if channels:
                    references = len(channels)
                    with ack_lock:  # what Message.incref holds, once per list
                        for message in messages:
                            message.refcount += references
                    for channel in raw:
                        bulkqueue.put(channel.queue, messages)
                    if len(raw) < len(channels) and not await self._decoded(
                        [c for c in channels if c not in raw], messages, epoch
                    ):
                        return at  # the raw channels take them again: duplicates at most
                read_offset[tp] = handed[tp] = messages[-1].offset
            if cut:
                return at + 1  # the rest is fetched again after the rebalance
        return len(parts)

    async def _decoded(self, channels: list[Any], messages: Sequence[Any], epoch: int) -> bool:
        """Events of ``messages`` for channels that take decoded values, one at a time as
        Faust's conductor hands them; False: a rebalance or a seek came first."""
        for message in messages:
            for channel in channels:
                event = await channel.decode(message, propagate=False)
                if event is None:  # a decode error, reported by the channel; as Faust
                    message.ack(self)  # does, that channel's reference is released
                    continue
                queue = channel.queue
                if queue.full() and not await self._room(queue.full, epoch):
                    return False
                queue.put_nowait(event)
        return True

    async def _room(self, full: Callable[[], bool], epoch: int) -> bool:
        """Wait until a queue is no longer ``full``: for a raw channel, until it holds
        fewer events than its size, the back-pressure of the bulk path (a list goes in
        whole, so a queue can hold one fetch's records beyond).

        The hand-over itself waits, so the drain loop fetches nothing more meanwhile (the
        fetcher keeps at most one response per partition). Faust's way, pausing the
        partition at high pressure and resuming it at low, costs a second each time at
        high rates: once every partition is paused, the drain loop's next fetch finds no
        active partition and sleeps 1 s (``Consumer._wait_next_records``), or waits out
        its 1 s timeout on partitions resumed meanwhile; the queue runs dry and the
        partitions fill again (docs/notes/016). False: a rebalance or a seek came first.
        """
        suspended = self.suspend_flow.is_set
        while full():
            if suspended() or self._seek_moved(epoch):
                return False
            await asyncio.sleep(0.001)  # the agent takes a batch at a time
        return not suspended() and not self._seek_moved(epoch)


class BackoffConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    """Faust's consumer thread, its aiokafka consumer on a ``BackoffClient`` (the fetcher
    and the group coordinator share the consumer's client)."""

    @property
    def _fetch(self) -> FetchSettings:
        consumer: Any = self.consumer  # a ``BulkConsumer``
        settings: FetchSettings = consumer.fetch
        return settings

    def _create_consumer(self, loop: asyncio.AbstractEventLoop) -> Any:
        consumer = super()._create_consumer(loop)
        with_backoff(consumer._client)
        settings = self._fetch
        # Faust reads committed only under exactly-once; both are read by the fetcher
        # built at start (docs/notes/025).
        consumer._isolation_level = settings.isolation_level
        return consumer

    async def on_start(self) -> None:
        await super().on_start()  # the aiokafka consumer, started: its coordinator exists
        consumer: Any = self._consumer
        fetch = self._fetch
        if fetch.pace is not None:  # Faust fixes a 1,500 ms wait for every fetch
            pacing.install(consumer._fetcher, fetch.pace, fetch.bulk_topics, fetch.fetches)
        if fetch.leaving is not None:  # a static member leaves only when told (note 027)
            leave_on_close(consumer, fetch.leaving)


class InlineConsumerThread(BackoffConsumerThread):
    """Faust's consumer "thread" run on the worker's own loop: no thread, no loop of its
    own, every call to it a plain await.

    Faust runs aiokafka on a thread with its own event loop, and each fetch crosses over
    twice: the drain loop asks through a method queue, the thread answers through the
    worker's loop. Under the interpreter lock the thread never runs beside the fold; it
    takes turns with it, and each turn waits for the loop to let go. On two shared cores
    at 6,000 events/s a fetch reached the drain loop 9.6-11.2 ms after its produce on the
    thread, 6.5-7.5 ms here (docs/notes/023). aiokafka's fetcher, coordinator and
    heartbeat are tasks on the worker's loop instead; the loop never holds a batch long
    enough to miss a heartbeat (a whole ``STREAM_BATCH_MAX`` batch folds in well under a
    second, against a session timeout of seconds).
    """

    async def start(self) -> None:
        # mode's ServiceThread.start, without the thread: ``_serve`` (the service's own
        # start, the method queue, then waiting until stopped) runs as a task of this loop,
        # and start returns once it is running, as with a thread.
        self._thread_started.set()
        self._thread_running = self.parent_loop.create_future()
        self._serving = asyncio.ensure_future(self._serve())
        try:
            await self._thread_running
        finally:
            self._thread_running = None

    async def stop(self) -> None:
        await super().stop()
        serving: asyncio.Future[None] | None = getattr(self, "_serving", None)
        if serving is not None:
            await asyncio.gather(serving, return_exceptions=True)  # its shutdown, to the end

    async def _gather_remaining_tasks(self) -> None:
        """mode cancels every task left on the thread's loop; here that loop is the
        worker's, whose tasks its own shutdown gathers."""

    async def call_thread(self, fun: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await maybe_async(fun(*args, **kwargs))

    async def cast_thread(self, fun: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        self.add_future(maybe_async(fun(*args, **kwargs)))


class BulkTransport(faust_aiokafka.Transport):
    """Faust's aiokafka transport, creating the bulk consumer with ``fetch``."""

    Consumer = BulkConsumer
    Producer = BackoffProducer

    def __init__(self, url: Any, app: Any, fetch: FetchSettings, **kwargs: Any) -> None:
        super().__init__(url, app, **kwargs)
        self.fetch = fetch
        # topic -> its bulk restore (``stream.app.restore.install``)
        self.changelogs: dict[str, Any] = {}

    def create_consumer(self, callback: Any, **kwargs: Any) -> Any:
        return self.Consumer(self, callback=callback, loop=self.loop, fetch=self.fetch, **kwargs)

    @property
    def bulk_topics(self) -> frozenset[str]:
        """The topics handed over in bulk (``stream.app.batching`` reads them here)."""
        return self.fetch.bulk_topics

    @property
    def bulk_bytes(self) -> int | None:
        """The input bytes handed over and not yet in a batch (``stream.app.batching``)."""
        return self.fetch.bulk_bytes


def install(app: Any, fetch: FetchSettings) -> BulkTransport:
    """Give ``app`` the bulk consumer (before its consumer is created) with ``fetch``, the
    backoff clients, and aiokafka's repeated log lines rate-limited.

    ``fetch.pace``: each fetch's wait at its broker (``stream.app.drain.Pace``): the
    latency budget while records arrive, a long poll only while none are pending.

    ``fetch.isolation_level``: ``read_committed`` leaves out what a transactional producer
    aborted (and what it has not committed yet); the input's offsets then jump over an
    aborted span and its marker as over a commit marker (``Holes``; docs/notes/025)."""
    transport = BulkTransport(app.conf.broker_consumer, app, fetch)
    app.transport = transport
    quiet_aiokafka()
    return transport


__all__ = [
    "BackoffConsumerThread",
    "BulkConsumer",
    "BulkTransport",
    "FetchSettings",
    "InlineConsumerThread",
    "install",
]
