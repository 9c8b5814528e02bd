"""The agent's side of the bulk path: batches taken off its queue, and their acks.

- ``batches``: the agent drains its channel's queue in bulk instead of iterating the
  stream: up to ``max_`` messages, whatever has arrived when the agent is free (the batch
  grows with the load by itself), partitions taking turns (``Waiting``). Messages taken
  while flow control is suspended wait for it to resume; those of an older consumer
  generation are then dropped unacked (the rebalance seeks back: they are fetched again
  from the committed offset). Each batch is tracked as one (``Batch``, in the consumer's
  unacked set) before it is handed out, so ``stream_wait_empty`` still waits for it at a
  rebalance or shutdown.
- ``ack``: the caller acks a batch after it is delivered; ``BulkAcks`` (mixed into the
  consumer) does Faust's bookkeeping in one pass, and finds the offset to commit by a
  binary search instead of a Python call per offset.

Written against faust-streaming 0.15.3 and mode-streaming 0.4.1; the private names it
reads are listed in ``stream.app.internals``.
"""

import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterable
from typing import Any, Final

from faust.types import TP
from faust.types.tuples import ack_lock
from mode.utils.futures import notify

from stream.app import bulkqueue, offsets


class BulkAcks:
    """Acking of the bulk path, mixed into the consumer (``stream.app.fetch``)."""

    _acked: Any
    _gap: Any
    _committed_offset: Any
    _acked_index: Any
    _n_acked: int
    _waiting_for_ack: Any
    app: Any
    transport: Any

    def _faust_new_offset(self, tp: TP) -> int | None:  # Faust's, by the MRO
        found: int | None = super()._new_offset(tp)  # type: ignore[misc]
        return found

    def _new_offset(self, tp: TP) -> int | None:
        """The offset to commit for ``tp``: for the input, ``offsets.commit_offset``, which
        never passes an offset neither acked nor confirmed empty (Faust's own passes the
        record at the committed offset: faust-streaming #606, docs/notes/024), and finds
        runs by a binary search instead of a Python call per offset; Faust's way for the
        other topics."""
        if tp.topic not in self.transport.bulk_topics:
            return self._faust_new_offset(tp)
        return offsets.commit_offset(
            self._acked[tp], self._acked_index[tp], self._gap.get(tp), self._committed_offset[tp]
        )

    def _note_gap(self, tp: TP, first: int, last: int) -> None:
        """Offsets ``first`` to ``last`` of ``tp`` hold no record the consumer can read
        (confirmed by fetching them twice): accounted for once the commit reaches them
        (``offsets.note_gap``; Faust's ``_add_gap`` also marks the record after the hole)."""
        if offsets.note_gap(self._gap[tp], self._committed_offset[tp], first, last):
            self._acked.setdefault(tp, [])  # Faust's commit visits the partitions in _acked

    def ack_many(self, messages: Iterable[Any]) -> None:
        """``Consumer.ack`` for each message whose last reference this releases, in one
        pass (faust-streaming 0.15.3's bookkeeping: the offset joins the partition's acked
        offsets unless a commit already passed it; the commit computes from them). The
        messages are not in the unacked set: ``batches`` tracks each batch as one."""
        topics = self.app.topics
        acking = topics.acking_topics
        committed_offsets = self._committed_offset
        acked_index = self._acked_index
        acked = self._acked
        count = 0
        with ack_lock:
            for message in messages:
                if message.acked:
                    continue
                refcount = message.refcount = max(message.refcount - 1, 0)
                if refcount:
                    continue
                message.acked = True
                if message.topic not in acking:
                    continue
                tp = message.tp
                offset = message.offset
                committed = committed_offsets[tp]
                if committed is None or offset >= committed:
                    index = acked_index[tp]
                    if offset not in index:
                        index.add(offset)
                        acked[tp].append(offset)
                        count += 1
            self._n_acked += count
            notify(self._waiting_for_ack)


# The events a batch may hold, as ``bulkqueue.elements`` counts them, per record it may
# hold: one batch of records of large segments folds about as long as a batch of records
# of one event each, four times over at most (docs/notes/028).
ELEMENTS_PER_RECORD: Final = 4


async def batches(stream: Any, max_: int, sessions: int = 0) -> AsyncIterator["Batch"]:
    """Batches of messages from the agent's channel, each tracked, none acked.

    The channel must be raw and its topics bulk (``install``): the hand-over puts a
    partition's records on its queue as one list. A batch is what has arrived when the
    agent asks, up to ``max_`` messages (a partition's records beyond that wait behind
    the other partitions); how long records gather before they arrive is the fetch's pace
    (``stream.app.drain.Pace``). The caller acks the batch (``ack``) once it is delivered.

    ``sessions`` > 0: partitions take turns (``Waiting.take``). A batch costs about the
    same per session whatever number of events each brings, and a busy worker's batch
    holds nearly every session: each then waits for all of them to be folded and
    published. A batch of the partitions waiting longest, holding at most ``sessions``
    sessions, publishes them after their own share of the work; the others come next with
    whatever reached them meanwhile (docs/notes/016).

    A batch also holds at most ``ELEMENTS_PER_RECORD × max_`` events by
    ``bulkqueue.elements`` (at least one record): a record's cost is its elements, and a
    few records of 10,000 elements each must not hold the loop for seconds.
    """
    app = stream.app
    channel = aiter(stream.channel)  # subscribes the channel, as iterating the stream does
    queue = channel.queue
    consumer = app.consumer
    _keep_on_resume(queue)
    bound = consumer.transport.bulk_bytes
    queue.bulk_max = bytes_max = bulkqueue.NO_BOUND if bound is None else bound
    track = consumer._unacked_messages.add
    flow_active = app.flow_control.is_active
    inbound = app.monitor.stream_inbound_time
    waiting = Waiting()  # what has arrived and no batch took yet, per partition
    while not stream.should_stop:
        if not waiting:
            try:
                waiting.add(*bulkqueue.taken(queue, await queue.get()))
            except StopAsyncIteration:  # the channel is closing (shutdown)
                return
        # What the queue holds joins, up to a batch: the rest stays on the queue, whose size
        # holds the hand-over back, so the events in hand are as many as without turns
        # (the collector's threshold counts on it: runtime.worker_young).
        while waiting.events < max_ and waiting.bytes < bytes_max and not queue.empty():
            waiting.add(*bulkqueue.taken(queue, queue.get_nowait()))
        messages = waiting.take(max_, sessions, ELEMENTS_PER_RECORD * max_)
        if not flow_active():
            # A rebalance (or recovery) holds the flow: wait it out, then keep what is still
            # of the current generation (a rebalance moves it on and seeks back).
            await app.flow_control.acquire()
        taken = Batch()
        # What waits behind this batch, in hand and in the broker: a worker a whole batch
        # behind overlaps a batch's delivery with the next one's fold (Worker._agent).
        taken.behind = waiting.events + bulkqueue.queued(queue) + _broker_lag(app, consumer)
        generation = app.consumer_generation_id
        now = time.monotonic()
        for message in messages:
            if message.generation_id != generation:
                continue  # stale: fetched again from the committed offset
            inbound[message.tp] = now
            taken.append(message)
        if taken:
            track(taken)
            yield taken


class Waiting:
    """Messages handed over and not yet in a batch, per partition in the order they
    began to wait (the one waiting longest first)."""

    def __init__(self) -> None:
        self.parts: OrderedDict[Any, list[Any]] = OrderedDict()
        self.events = 0
        self.bytes = 0  # ``bulkqueue.size`` of what waits

    def __bool__(self) -> bool:
        return self.events > 0

    def add(self, messages: list[Any], size: int) -> None:
        """A list the hand-over put on the queue: one partition's records, in order, and
        their ``bulkqueue.size`` (counted when they left the queue)."""
        if not messages:
            return
        tp = messages[0].tp
        held = self.parts.get(tp)
        if held is None:
            # Copied: the hand-over's list may be another channel's too.
            self.parts[tp] = list(messages)
        else:
            held.extend(messages)
        self.events += len(messages)
        self.bytes += size

    def take(self, max_: int, sessions: int = 0, elements: float = bulkqueue.NO_BOUND) -> list[Any]:
        """Up to ``max_`` messages holding up to ``elements`` events
        (``bulkqueue.elements``; the first message goes whatever it holds), whole
        partitions longest waiting first; with ``sessions`` > 0, no further partition that
        would bring the keys past it (the first partition goes whatever it holds), unless
        a whole batch is waiting: a worker that far behind gains nothing from turns, and
        one batch of every partition costs less per event than several."""
        out: list[Any] = []
        keys = 0
        weight = 0
        parts = self.parts
        if self.events >= max_:
            sessions = 0
        while parts and len(out) < max_ and weight < elements:
            tp, held = next(iter(parts.items()))
            if sessions > 0:
                keys += len({m.key for m in held})
                if out and keys > sessions:
                    break
            room, more = bulkqueue.fit(held, max_ - len(out), elements - weight, not out)
            if out and not room:
                break
            if len(held) > room:  # its rest takes the last turn: a backlog starves no one
                out.extend(held[:room])
                parts[tp] = held[room:]
                parts.move_to_end(tp)
                break
            del parts[tp]
            out.extend(held)
            weight += more
        self.events -= len(out)
        self.bytes = max(0, self.bytes - bulkqueue.size(out)) if self.parts else 0
        return out


class Batch(list[Any]):
    """A batch of messages, tracked as one: in the consumer's unacked messages (a weak
    set) from ``batches`` until ``ack``, so Faust's ``wait_empty`` waits for it at a
    rebalance or shutdown, as it waits for each message it tracks itself. One entry per
    batch, not one per message (about a microsecond each, added and discarded)."""

    acked = False
    behind = 0  # events waiting when it was taken: handed over, and in the broker past them
    # By identity, as the set's other entries: two batches are never one entry.
    __hash__ = object.__hash__  # type: ignore[assignment]

    def __eq__(self, other: object) -> bool:
        return self is other

    def __ne__(self, other: object) -> bool:
        return self is not other

    @property
    def refcount(self) -> int:  # what ``wait_empty`` logs of each entry it waits for
        return 0 if self.acked else len(self)


def _broker_lag(app: Any, consumer: Any) -> int:
    """Records of the bulk topics in the broker past those handed over, as the last
    fetches saw the partitions' ends (the monitor's end offsets; no request)."""
    ends: dict[Any, int] = app.monitor.tp_end_offsets
    read: dict[Any, int | None] = consumer._read_offset
    topics = consumer.transport.bulk_topics
    lag = 0
    for tp, end in ends.items():
        if tp.topic in topics:
            offset = read.get(tp)
            if offset is not None and end > offset + 1:
                lag += end - offset - 1
    return lag


def _keep_on_resume(queue: Any) -> None:
    """Take the agent's queue out of flow control's clearing.

    Faust clears every channel queue whenever flow control resumes (``clear_on_resume``)
    and on a revoke, and table recovery resumes it *after* seeking the stream partitions
    to their committed offsets: records queued in between are dropped while the read
    offset says they were read, so they are never fetched again until the next rebalance
    (stock Faust has this window too). ``batches`` already drops what a rebalance made
    stale (by consumer generation), and a seek in the same generation only brings
    duplicates, so this queue keeps its records. (mode-streaming 0.7.1 internals.)
    """
    queue._clear_on_resume = False
    queue._flow_control._queues.discard(queue)  # app.flow_control, for a Faust channel


def ack(messages: list[Any], consumer: Any) -> None:
    """Ack delivered messages: release the batch's reference to each, and on its last
    reference ``Consumer.ack`` (the offset becomes committable); ``BulkConsumer`` does it
    in one pass."""
    many = getattr(consumer, "ack_many", None)
    if many is not None:
        many(messages)
    else:
        _ack_each(messages, consumer)
    if isinstance(messages, Batch):  # its messages acked: the batch leaves the unacked set
        messages.acked = True
        consumer._unacked_messages.discard(messages)
        notify(consumer._waiting_for_ack)


def _ack_each(messages: list[Any], consumer: Any) -> None:
    consumer_ack = consumer.ack
    with ack_lock:  # what Message.ack holds; re-entered by Consumer.ack
        for message in messages:
            if message.acked:
                continue
            refcount = message.refcount = max(message.refcount - 1, 0)
            if not refcount:
                consumer_ack(message)


__all__ = ["Batch", "BulkAcks", "Waiting", "ack", "batches"]
