"""The worker's fetch path: Faust's consumer, handing records over in bulk.

Stock Faust hands every fetched record on one at a time: ``Consumer._drain_messages``
wraps each in ``wait_first`` (four tasks per record), the conductor takes a lock and
decodes it through the serializer registry, and the stream iterator sleeps, runs sensors
and acks per event. At a few thousand records per second that path, not the fold, is
the worker's CPU (docs/performance.md). ``BulkConsumer`` takes it out, keeping what Faust
guarantees: for the topics named in ``bulk_topics`` (the agent's input), every record of
one fetch is checked against the read offset exactly as Faust does (gaps,
``commit_every``) and each partition's records go on the subscribing raw channel's queue
as one list of Faust messages (``stream.app.bulkqueue``): no ``Event`` per record, no
queue operation per record (raw bytes need no decoding). The queue is Faust's own,
bounded in records and in bytes (one fetch may go beyond), kept out of Faust's pause at
high pressure and of flow control's clearing. A full queue waits — for room or for the
rebalance that suspends the flow, as Faust's ``wait_first`` does. Records fetched before
a rebalance or a seek are dropped without moving the read offset, so they are fetched
again. A jump in an input partition's offsets is fetched again once before Faust may
commit past it (``Holes``), and ``perform_seek`` moves partitions without a committed
offset to their beginning. A table's changelog goes, a partition's records of a fetch at
a time, to its bulk restore (``transport.changelogs``, ``stream.app.restore``); other
topics take Faust's path. The agent's side (batches, acks) is ``stream.app.batching``.

``install`` gives the app this consumer and the producer of ``stream.app.producer``, both
on the backoff clients of ``stream.app.backoff``. Written against faust-streaming 0.15.3
and aiokafka 0.14.0 (pinned); every private name of theirs the worker relies on is listed
in ``stream.app.internals`` and checked against the installed versions.
"""

import asyncio
import functools
import time
from collections.abc import Callable, Iterable
from typing import Any

from aiokafka import TopicPartition  # type: ignore[import-untyped]
from faust.transport.consumer import CONSUMER_FETCHING, ensure_TP
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP
from faust.types.tuples import ack_lock
from mode.utils.futures import maybe_async

from stream.app import bulkqueue
from stream.app.backoff import quiet_aiokafka, with_backoff
from stream.app.batching import BulkAcks
from stream.app.membership import leave_on_close
from stream.app.offsets import Holes, read_after_seek
from stream.app.producer import BackoffProducer


def _is_raw(channel: Any) -> bool:
    """Whether Faust would hand this channel the record's key and value bytes unchanged."""
    schema = getattr(channel, "schema", None)
    if schema is None:
        return False
    return (
        schema.key_type is bytes
        and schema.value_type is bytes
        and schema.key_serializer in ("raw", None)
        and schema.value_serializer in ("raw", None)
    )


class BulkConsumer(BulkAcks, faust_aiokafka.Consumer):
    """The aiokafka driver's consumer, handing records of the transport's ``bulk_topics``
    over in bulk."""

    async def _drain_messages(self, fetcher: Any) -> None:  # pragma: no cover - broker
        # Faust's loop (Consumer._drain_messages with Consumer.getmany inlined, 0.15.3):
        # the same checks per fetch (flow, generation, active partitions) and per record
        # (read offset, gaps, commit_every), the end offset tracked once per partition
        # instead of per record, and records of bulk topics handed over once per fetch.
        callback = self.callback
        consumer_should_stop = self._stopped.is_set
        fetcher_should_stop = fetcher._stopped.is_set
        get_read_offset = self._read_offset.__getitem__
        set_read_offset = self._read_offset.__setitem__
        set_flag = self.diag.set_flag
        unset_flag = self.diag.unset_flag
        commit_every = self._commit_every
        acks_enabled_for = self.app.topics.acks_enabled_for
        to_message = self._to_message
        app = self.app
        bulk_topics: frozenset[str] = getattr(self.transport, "bulk_topics", frozenset())
        changelogs: dict[str, Any] = getattr(self.transport, "changelogs", {})
        holes = self._holes
        try:
            while not (consumer_should_stop() or fetcher_should_stop()):
                set_flag(CONSUMER_FETCHING)
                if holes.dropped and not self._seeking:
                    await self._fetch_dropped_again()
                records, active = await self._wait_next_records(1.0)
                generation = app.consumer_generation_id
                await self.sleep(0)
                if records is None or self.should_stop:
                    continue
                if not self.flow_active:
                    self.log.dev("fetched while flow not active: seek back to committed")
                    try:
                        await self.perform_seek()
                    except Exception as ex:
                        self.log.warning(f"exception performing seek when flow not active {ex}")
                    continue
                epoch = self._seek_epoch
                # (partition, its records) to hand over, in fetch order
                pending: list[tuple[Any, list[Any]]] = []
                stale = False
                for tp, batch in records.items():
                    if stale or not self.flow_active or app.consumer_generation_id != generation:
                        # As getmany: the rest is fetched again after the rebalance or the
                        # seek, unless the seek had already taken effect (_fetch_dropped_again).
                        holes.drop([(p, b) for p, b in records.items() if p.topic in bulk_topics])
                        break
                    if not (active is None or tp in active or tp in self._buffered_partitions):
                        continue
                    app.monitor.track_tp_end_offset(tp, self.highwater(tp))
                    restore = changelogs.get(tp.topic)
                    if restore is not None and batch:  # a table's, in bulk (stream.app.restore)
                        await restore.take(tp, batch, to_message)
                        set_read_offset(tp, batch[-1].offset)
                        continue
                    bulk = tp.topic in bulk_topics
                    taken: list[Any] | None = None  # this partition's records in pending
                    r_offset = get_read_offset(tp)
                    for record in batch:
                        message = to_message(tp, record)
                        offset = message.offset
                        if r_offset is not None and offset < r_offset:
                            continue  # already read (Faust logs "DROPPED MESSAGE ROFF")
                        # (Faust tests ``r_offset`` for truth: a jump from offset 0 went
                        # unseen, and a marker at 1 held the commit for good.)
                        if (
                            r_offset is not None
                            and offset - r_offset > 1
                            and acks_enabled_for(tp.topic)
                        ):
                            if bulk and not holes.confirmed(tp, r_offset, offset):
                                # Fetch the span again before committing past it.
                                if pending:
                                    await self._hand_over(pending, epoch)
                                    pending, taken = [], None
                                if self._seek_moved(epoch) or self.suspend_flow.is_set():
                                    stale = True  # a seek or a rebalance came first
                                    holes.drop([(tp, [message])])
                                    break
                                await self._fetch_again(tp, r_offset, offset)
                                break
                            if bulk:  # fetched twice: no record there (batching)
                                self._note_gap(tp, r_offset + 1, offset - 1)
                            else:
                                await self._add_gap(tp, r_offset + 1, offset)
                        elif bulk and holes.spans:
                            holes.taken(tp, offset, self.log)
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
                                pending = []
                            await self.wait_first(callback(message), self.suspend_flow.wait())
                            set_read_offset(tp, offset)
                        r_offset = offset
                if pending:
                    await self._hand_over(pending, epoch)
                if bulk_topics:
                    await self._pass_empty_ends(bulk_topics, records)
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

    @property
    def _holes(self) -> Holes:
        holes: Holes | None = self.__dict__.get("_bulk_holes")
        if holes is None:
            holes = self.__dict__["_bulk_holes"] = Holes()
        return holes

    async def _fetch_again(
        self, tp: TP, last: int, offset: int, dropped: bool = False
    ) -> None:  # pragma: no cover
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

    async def _fetch_dropped_again(self) -> None:  # pragma: no cover - broker
        """Records dropped because a seek was under way (``_seek_moved``) may have been
        fetched after the seek took effect, from where it put the fetcher: then nothing
        brings them again until the partition's next record shows the jump, and the last
        records of a quiet partition would wait for good (seen after an out-of-range
        reset during recovery's seek). So once no seek is under way, each partition with
        dropped records not read since is fetched again from its read offset (a duplicate
        at most), or from its beginning when nothing was read since the seek put it there.
        After a seek the read offset is the one before where it put the fetcher
        (``read_after_seek``), so records dropped from exactly there come again too.
        """
        holes = self._holes
        dropped, holes.dropped = holes.dropped, {}
        for tp, first in dropped.items():
            last = self._read_offset.get(tp)
            if last is not None:
                if last < first:
                    await self._fetch_again(tp, last, first, dropped=True)
                continue
            self.log.info(
                "%s: records from %d dropped during a seek: from the start again", tp, first
            )
            try:
                await self._thread.seek_to_beginning(TopicPartition(tp.topic, tp.partition))
            except Exception as error:  # no longer assigned: the rebalance seeks it anyway
                self.log.info("%s: not fetched again (%r)", tp, error)

    _ends_checked = 0.0  # monotonic: when the input's ends were last checked

    async def _pass_empty_ends(
        self, bulk_topics: frozenset[str], records: Any
    ) -> None:  # pragma: no cover - broker
        """Offsets at the end of an input partition that hold no record (a transaction's
        commit marker ends every transactional write) show no jump: no record follows them,
        so the commit would stop short of the partition's end until one does, and its lag
        would stay at 1. So at most once a second, an input partition this fetch brought
        nothing for, whose fetcher stands at its end past the record read last, is checked
        as a jump to its end: fetched again from that record once, and noted as holding no
        record only if the fetcher stands at the end again (``Holes``); the partition is
        then read to its end, and not checked again until a record follows."""
        now = time.monotonic()
        if now - self._ends_checked < 1.0 or self._seeking or self._holes.dropped:
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
                if high is None or high <= last + 1:
                    continue
                position = await asyncio.wait_for(self.position(tp), 1.0)
            except Exception:  # moved away, or its position is being reset: next time
                continue
            if position != high or self._read_offset.get(tp) != last:
                continue  # records still to come, or taken meanwhile
            if self._holes.confirmed(tp, last, high):
                self._note_gap(tp, last + 1, high - 1)
                self._read_offset[tp] = high - 1  # read to the end: not checked again
            else:
                await self._fetch_again(tp, last, high)

    def _new_consumer_thread(self) -> "BackoffConsumerThread":
        if getattr(self.transport, "consumer_thread", True):
            return BackoffConsumerThread(self, loop=self.loop, beacon=self.beacon)
        return InlineConsumerThread(self, loop=self.loop, thread_loop=self.loop, beacon=self.beacon)

    _seek_epoch = 0  # bumped by every seek: records fetched before it are fetched again

    async def perform_seek(self) -> None:  # pragma: no cover - broker
        """Faust's ``perform_seek`` (every assigned partition to its committed offset),
        and the input's partitions without one to their beginning: aiokafka's
        ``seek_to_committed`` leaves those where they are, so records fetched and dropped
        since (a stale generation or seek epoch) would never come again, and with no
        committed offset to hold it the commit would pass them.

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

    async def _seek_all_to_committed(self) -> None:  # pragma: no cover - broker
        committed = await self.seek_to_committed()
        bulk: frozenset[str] = getattr(self.transport, "bulk_topics", frozenset())

        def read(tp: Any, offset: int | None) -> int | None:
            if tp.topic in bulk:
                return read_after_seek(offset)
            return offset if offset is not None and offset >= 0 else None  # Faust's

        self._read_offset.update({tp: read(tp, offset) for tp, offset in committed.items()})
        self._committed_offset.update(
            {
                ensure_TP(tp): offset or None
                for tp, offset in committed.items()
                if offset is not None
            }
        )
        fresh = [
            TopicPartition(tp.topic, tp.partition)
            for tp, offset in committed.items()
            if tp.topic in bulk and not offset
        ]
        if fresh:
            try:
                await self._thread.seek_to_beginning(*fresh)
            except Exception as error:  # moved away meanwhile: the rebalance seeks again
                self.log.info("not moved to their beginning: %s (%r)", fresh, error)

    _seeking = 0  # ``perform_seek``s under way: nothing is handed over meanwhile

    async def seek(self, partition: TP, offset: int) -> None:
        self._seek_epoch += 1
        await super().seek(partition, offset)
        tp = ensure_TP(partition)
        if tp.topic in getattr(self.transport, "bulk_topics", ()):
            self._read_offset[tp] = read_after_seek(offset)

    def _seek_moved(self, epoch: int) -> bool:
        """A seek began since ``epoch`` was read, or a ``perform_seek`` ended or is under
        way: what was fetched meanwhile is dropped and fetched again from where the seek
        put it (``perform_seek`` puts every input partition somewhere)."""
        return self._seeking > 0 or self._seek_epoch != epoch

    async def _hand_over(
        self, parts: list[tuple[Any, list[Any]]], epoch: int
    ) -> None:  # pragma: no cover
        """What the conductor does per record (``ConductorHandler``), once per fetch, and
        what the drain loop does after it: the last record's offset becomes the read
        offset. A raw channel gets each partition's records as one list (``batches``
        takes lists); any other channel an event per record, decoded as Faust does.

        Records of an older consumer generation, or fetched before a seek, are dropped
        without touching the read offsets: the consumer fetches them again from where the
        rebalance or the seek put it (a read offset set after the seek would skip them).
        """
        observe: Callable[[float], None] | None = getattr(self.transport, "record_age", None)
        if observe is not None:  # each partition's middle record (stream_record_age_seconds)
            now = time.time()
            for _, messages in parts:
                stamp = messages[len(messages) // 2].timestamp if messages else None
                if stamp:
                    observe(max(0.0, now - stamp))
        handed = await self._handed_over(parts, epoch)
        if handed < len(parts):
            self._holes.drop(parts[handed:])  # fetched again: a rebalance or a seek came first

    async def _handed_over(
        self, parts: list[tuple[Any, list[Any]]], epoch: int
    ) -> int:  # pragma: no cover
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
            raw = [channel for channel in channels or () if _is_raw(channel)]
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
            if messages[-1].generation_id != generation:
                # A rebalance while the drain loop built them: keep those before it.
                messages = [m for m in messages if m.generation_id == generation]
                cut = True
            else:
                cut = False
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

    async def _decoded(
        self, channels: list[Any], messages: list[Any], epoch: int
    ) -> bool:  # pragma: no cover
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

    def _create_consumer(self, loop: asyncio.AbstractEventLoop) -> Any:
        consumer = super()._create_consumer(loop)
        with_backoff(consumer._client)
        transport = self.consumer.transport
        wait = getattr(transport, "fetch_max_wait_ms", None)
        if wait is not None:  # Faust fixes 1,500 ms; read by the fetcher built at start
            consumer._fetch_max_wait_ms = wait
        # Faust reads committed only under exactly-once; both are read by the fetcher
        # built at start (docs/notes/025).
        consumer._isolation_level = getattr(transport, "isolation_level", "read_uncommitted")
        return consumer

    async def on_start(self) -> None:
        await super().on_start()  # the aiokafka consumer, started: its coordinator exists
        leaving = getattr(self.consumer.transport, "leaving", None)
        if leaving is not None:  # a static member leaves only when told (note 027)
            leave_on_close(self._consumer, leaving)


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
    Consumer = BulkConsumer
    Producer = BackoffProducer
    bulk_topics: frozenset[str] = frozenset()
    bulk_bytes: int | None = None  # input bytes handed over and not yet in a batch (install)
    fetch_max_wait_ms: int | None = None
    isolation_level = "read_uncommitted"  # Faust's unless exactly-once (install)
    consumer_thread = True  # False: the consumer on the worker's loop (InlineConsumerThread)
    # Each fetch's records' age as they are handed over (``worker.assemble``: the metric).
    record_age: Callable[[float], None] | None = None
    # Whether a static member leaves its group as it stops (``worker.assemble``).
    leaving: Callable[[], bool] | None = None


def install(
    app: Any,
    topics: Iterable[str],
    fetch_max_wait: float | None = None,
    max_buffered_bytes: int | None = None,
    consumer_thread: bool = True,
    isolation_level: str = "read_uncommitted",
) -> BulkTransport:
    """Give ``app`` the bulk consumer for ``topics`` (before its consumer is created), the
    backoff clients, and aiokafka's repeated log lines rate-limited.

    ``fetch_max_wait`` (s): how long the broker may hold a fetch that finds nothing new.
    aiokafka keeps one fetch in flight per broker, and builds it only from partitions
    whose last records the drain loop has taken; when a busy worker has not taken them
    yet, the fetch holds only quiet partitions (Faust's leader topic, the changelogs) and
    every busy partition waits out its long poll: Faust's fixed 1.5 s put the live path
    seconds behind at a fraction of its capacity (docs/notes/016).

    ``max_buffered_bytes``: the bytes of input handed over and not yet in a batch, on the
    queue and waiting for a turn each (``batches``); None: only the record count bounds.

    ``consumer_thread``: Faust's consumer thread; False runs the consumer on the app's
    loop (``InlineConsumerThread``).

    ``isolation_level``: ``read_committed`` leaves out what a transactional producer
    aborted (and what it has not committed yet); the input's offsets then jump over an
    aborted span and its marker as over a commit marker (``Holes``; docs/notes/025)."""
    transport = BulkTransport(app.conf.broker_consumer, app)
    transport.bulk_topics = frozenset(topics)
    transport.bulk_bytes = max_buffered_bytes
    transport.consumer_thread = consumer_thread
    transport.isolation_level = isolation_level
    if fetch_max_wait is not None:
        transport.fetch_max_wait_ms = max(1, round(fetch_max_wait * 1000))
    app.transport = transport
    quiet_aiokafka()
    return transport


__all__ = [
    "BackoffConsumerThread",
    "BulkConsumer",
    "BulkTransport",
    "InlineConsumerThread",
    "install",
]
