"""The drain loop's decisions, as plain values: what the bulk consumer does with each fetch,
partition and record. ``stream.app.fetch`` applies them.

No Faust, no aiokafka, no event loop, no clock (``now`` is passed in): partitions are any
hashable value with a ``topic``, records anything with an ``offset`` (and, where named,
a ``generation_id`` or a ``timestamp``), and the state a decision reads is handed in — the
read offset, the seek epoch, the consumer generation, the ``Holes`` of
``stream.app.offsets``, which the decisions about jumps note in. What each decision
guards against, and the losses it ended, is docs/notes/010, 024 and 025; every loss is a
row of ``tests/unit/app/test_drain_plan.py``.

- ``route``: what happens to a partition's part of a fetch (dropped with the rest of
  the fetch, skipped, restored, handed over in bulk, or Faust's way).
- ``check``: what happens to one record against the read offset (already read, taken,
  taken past a confirmed hole, or the jump before it fetched again).
- ``seek_moved``, ``dropped_by_seek``, ``dropped_too``, ``refetch_dropped``: what a seek
  or a rebalance racing the drain loop leaves to fetch again, and from where.
- ``current``: the records of a hand-over still of the consumer's generation.
- ``ends_due``, ``end_worth_checking``, ``empty_end``, ``passed_end``: an input
  partition's end that holds no record.
- ``after_seek_to_committed``: the read offsets a seek to the committed offsets leaves,
  and the input partitions with none, moved to their beginning (a seek of one partition
  leaves ``offsets.read_after_seek``).
- ``Pace``: how long each fetch waits at its broker (the latency budget while records
  arrive, a long poll while none do).
- ``is_raw``, ``record_ages``: which channels take a partition's records as one list, and
  each handed-over part's age, as the metric observes it.
"""

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, NamedTuple, Protocol, TypeVar

from stream.app.offsets import Holes, read_after_seek


class Handed(Protocol):
    """A record handed over (Faust's message): the consumer generation it was fetched in."""

    generation_id: int


M = TypeVar("M", bound=Handed)


class Route(Enum):
    """What happens to one partition's part of a fetch, and what sets its read offset."""

    DROP_REST = "drop the rest"  # a rebalance or a seek came first: fetched again
    SKIP = "skip"  # not active (Faust's ``getmany``): fetched again when it is
    RESTORE = "restore"  # a changelog's, in bulk (``stream.app.restore``): its last record
    BULK = "bulk"  # the input's, once per fetch: the last record of it handed over whole
    FAUST = "faust"  # any other topic: an event per record, each as Faust's callback takes it


def route(
    tp: Any,
    records: Sequence[Any],
    *,
    stale: bool,
    flow_active: bool,
    generation: int,
    generation_now: int,
    active: Collection[Any] | None,
    buffered: Collection[Any],
    changelogs: Collection[str],
    bulk_topics: Collection[str],
) -> Route:
    """As ``getmany``: once the flow stops, the consumer generation moves (``generation``
    read as the fetch came, ``generation_now`` now) or a part was found ``stale``, the
    rest of the fetch is dropped; a partition neither ``active`` (None: all are) nor
    ``buffered`` is skipped. An empty changelog part goes Faust's way (nothing to write)."""
    if stale or not flow_active or generation_now != generation:
        return Route.DROP_REST
    if not (active is None or tp in active or tp in buffered):
        return Route.SKIP
    if records and tp.topic in changelogs:
        return Route.RESTORE
    return Route.BULK if tp.topic in bulk_topics else Route.FAUST


def dropped_too(records: Mapping[Any, Any], bulk_topics: Collection[str]) -> list[Any]:
    """The input's parts of a fetch dropped with its rest (``Route.DROP_REST``): every one,
    handed over or not (``refetch_dropped`` leaves those read past their first record)."""
    return [(tp, batch) for tp, batch in records.items() if tp.topic in bulk_topics]


class Kind(Enum):
    SKIP = "already read"  # Faust logs "DROPPED MESSAGE ROFF"
    TAKE = "take"
    TAKE_PAST_HOLE = "note the hole, take"  # a jump fetched twice: no record there
    TAKE_PAST_GAP = "Faust's gap, take"  # Faust's ``_add_gap(first, last)``
    FETCH_AGAIN = "fetch the span again"  # from ``first``, the record before the jump


@dataclass(frozen=True, slots=True)
class Step:
    """``check``'s answer. ``first``..``last``: the offsets it concerns — the hole to note
    (both ends holding no record), Faust's gap, or for ``FETCH_AGAIN`` the record read
    last and the one after the jump. ``span``: for a ``TAKE`` that ends a span fetched
    again, what ``Holes.taken`` made of it (``redelivered`` or ``refetched``, then the
    span's last record and the one after it)."""

    kind: Kind
    first: int = 0
    last: int = 0
    span: tuple[str, int, int] | None = None


SKIP = Step(Kind.SKIP)
TAKE = Step(Kind.TAKE)


def check(tp: Any, read: int | None, offset: int, bulk: bool, acks: bool, holes: Holes) -> Step:
    """One record at ``offset`` against the partition's read offset ``read`` (the last
    offset read; None: none yet), as Faust's drain loop checks it, with the input's
    (``bulk``) jumps fetched again once before they count (``Holes``).

    A jump (more than one offset past ``read``, of a topic that ``acks``) is, for the
    input, fetched again from ``read`` unless this very jump was fetched again already;
    then its offsets are noted as holding no record, the record after it excluded. Other
    topics take Faust's gap, which includes it. ``read`` is tested against None, not for
    truth as Faust does: a jump from offset 0 went unseen (docs/notes/025)."""
    if read is not None:  # called per record: positional arguments, no allocation
        if offset < read:
            return SKIP
        if offset - read > 1 and acks:
            if not bulk:
                return Step(Kind.TAKE_PAST_GAP, read + 1, offset)
            if not holes.confirmed(tp, read, offset):
                return Step(Kind.FETCH_AGAIN, read, offset)
            return Step(Kind.TAKE_PAST_HOLE, read + 1, offset - 1)
    return _taken(holes, tp, offset) if bulk and holes.spans else TAKE


def _taken(holes: Holes, tp: Any, offset: int) -> Step:
    span = holes.taken(tp, offset)
    return TAKE if span is None else Step(Kind.TAKE, span=span)


def seek_moved(seeking: int, epoch_now: int, epoch: int) -> bool:
    """Whether what was fetched at seek ``epoch`` must be dropped: a seek began since
    (``epoch_now``), or a ``perform_seek`` is under way (``seeking``) or ended since. It
    is fetched again from where the seek put it (a seek to the committed offsets puts
    every input partition somewhere, ``after_seek_to_committed``)."""
    return seeking > 0 or epoch_now != epoch


def dropped_by_seek(seek_moved: bool, suspended: bool) -> bool:
    """Before fetching a jump again (after handing over what came before it): a seek or a
    rebalance came first, so the record after the jump is dropped instead, and the rest
    of the fetch with it; the seek, or ``refetch_dropped``, brings it again."""
    return seek_moved or suspended


def refetch_dropped(first: int, read: int | None) -> str | None:
    """A partition's records from ``first`` were dropped because a seek or a rebalance came
    first; once no seek is under way: ``"again"`` from its read offset ``read`` when it
    was not read past them since (a duplicate of ``read`` at most), ``"beginning"`` when
    nothing was read since a seek put it there, None when it was read past them.

    The records may have been fetched after the seek took effect, from where it put the
    fetcher: then nothing brings them again until the partition's next record shows the
    jump, and the last records of a quiet partition would wait for good (seen after an
    out-of-range reset during recovery's seek).

    After a seek, ``read`` is the offset before the one it put the fetcher at
    (``read_after_seek``): records dropped from exactly there are fetched again
    (docs/notes/024)."""
    if read is None:
        return "beginning"
    return "again" if read < first else None


def current(messages: list[M], generation: int) -> tuple[list[M], bool]:
    """The records of one partition's hand-over still of the consumer ``generation``, and
    whether any were cut (a rebalance while the drain loop built them: the rest of the
    hand-over is fetched again after it)."""
    if messages[-1].generation_id == generation:
        return messages, False
    return [m for m in messages if m.generation_id == generation], True


def ends_due(now: float, checked: float, seeking: bool, dropped: bool) -> bool:
    """Whether to check the input's ends (``empty_end``) at ``now`` (monotonic seconds):
    at most once a second since ``checked``, and never while a seek is under way or
    dropped records wait to be fetched again."""
    return not (now - checked < 1.0 or seeking or dropped)


def end_worth_checking(last: int | None, high: int | None) -> bool:
    """A partition the fetch brought nothing for, its read offset ``last`` and its end
    ``high``: worth asking where its fetcher stands when it was read and its end lies
    past the record after the one read last."""
    return last is not None and high is not None and high > last + 1


class End(Enum):
    NOTHING = "records still to come, or taken meanwhile"
    FETCH_AGAIN = "fetch again from the record read last"
    PASSED = "note its offsets as holding no record; read to the end"


def empty_end(
    tp: Any, last: int, high: int, position: int | None, read_now: int | None, holes: Holes
) -> End:
    """An input partition whose fetcher stands at its end ``high`` (``position``) past the
    record read last (``last``, still its read offset ``read_now``): a jump to its end
    with no record after it to show it (a transaction's commit marker ends every
    transactional write), so the commit would stop short of the end until one does, and
    the lag stay at 1. Fetched again from ``last`` once; at the same end again, its
    offsets ``last + 1``..``high - 1`` hold no record and the read offset moves to
    ``high - 1``, so it is not checked again until a record follows (docs/notes/024, 025)."""
    if position != high or read_now != last:
        return End.NOTHING
    return End.PASSED if holes.confirmed(tp, last, high) else End.FETCH_AGAIN


def passed_end(last: int, high: int) -> tuple[int, int, int]:
    """An empty end ``End.PASSED``: its offsets holding no record (``first``, ``last``,
    both included) and the partition's read offset after it, its end's last offset."""
    return last + 1, high - 1, high - 1


@dataclass(frozen=True)
class SeekPlan:
    """What a seek to the committed offsets leaves: the read offsets, the committed
    offsets Faust keeps (a partition with none is not in them), and the input's
    partitions without one, to move to their beginning."""

    read: dict[Any, int | None]
    committed: dict[Any, int | None]
    fresh: list[Any]


def after_seek_to_committed(
    committed: Mapping[Any, int | None], bulk_topics: Collection[str]
) -> SeekPlan:
    """After aiokafka's ``seek_to_committed`` (``committed``: each partition's offset,
    None or not positive when it has none): aiokafka leaves a partition with none where
    it is, so input records fetched and dropped since would never come again, and with
    no committed offset to hold it the commit would pass them: those go to their
    beginning."""

    def read(tp: Any, offset: int | None) -> int | None:
        if tp.topic in bulk_topics:
            return read_after_seek(offset)
        return offset if offset is not None and offset >= 0 else None  # Faust's

    return SeekPlan(
        read={tp: read(tp, offset) for tp, offset in committed.items()},
        committed={tp: offset or None for tp, offset in committed.items() if offset is not None},
        fresh=[tp for tp, offset in committed.items() if tp.topic in bulk_topics and not offset],
    )


def is_raw(channel: Any) -> bool:
    """Whether Faust would hand this channel the record's key and value bytes unchanged:
    then it takes each partition's records of a fetch as one list."""
    schema = getattr(channel, "schema", None)
    if schema is None:
        return False
    return (
        schema.key_type is bytes
        and schema.value_type is bytes
        and schema.key_serializer in ("raw", None)
        and schema.value_serializer in ("raw", None)
    )


def record_ages(now: float, parts: Iterable[tuple[Any, Sequence[Any]]]) -> list[float]:
    """Each part's age at ``now`` (wall-clock seconds), by its middle record's timestamp;
    a part with no record or no timestamp has none."""
    ages = []
    for _, messages in parts:
        stamp = messages[len(messages) // 2].timestamp if messages else None
        if stamp:
            ages.append(max(0.0, now - stamp))
    return ages


# A paced fetch's wait ends early once the broker holds this many bytes for it: a backlog
# (or a restore) fills it at once, a live stream rarely within the budget. Below aiokafka's
# 1 MiB per partition, so a single partition's backlog is enough.
PACED_MIN_BYTES = 256 << 10


class Wait(NamedTuple):
    """A fetch's wait at its broker: at most ``ms``, unless ``min_bytes`` are there sooner."""

    ms: int
    min_bytes: int
    resting: bool  # the long poll of a broker whose partitions had nothing (``Pace``)


@dataclass(frozen=True)
class Pace:
    """How long the next fetch from a broker may wait there, and for how many bytes
    (docs/notes/034).

    While records arrive, a fetch waits up to ``budget_ms``, the latency budget, unless
    ``PACED_MIN_BYTES`` are there sooner: the worker runs one fetch, fold, Redis write and
    produce per budget, whatever the rate below its capacity, instead of one per record
    or two, and a backlog still comes back at once. A fetch that found nothing while no
    record waits to be taken (``pending``) rests: the next waits up to ``resting_ms`` for
    its first byte, so an idle worker sends a few fetches a second and the first record
    after a quiet spell is not held. Never resting while records wait: aiokafka builds a
    broker's fetch only from partitions whose records were taken, and a long poll of the
    quiet ones would hold the busy ones (docs/notes/016)."""

    budget_ms: int
    resting_ms: int

    def first(self) -> Wait:
        """A broker's first fetch."""
        return Wait(self.resting_ms, 1, resting=True)

    def next(self, fetched: bool, pending: bool) -> Wait:
        """The next fetch from a broker whose last fetch ``fetched`` records or not, with
        records of the input still ``pending`` (fetched and not taken)."""
        if fetched or pending:
            return Wait(self.budget_ms, PACED_MIN_BYTES, resting=False)
        return self.first()


__all__ = [
    "PACED_MIN_BYTES",
    "End",
    "Kind",
    "Pace",
    "Route",
    "SeekPlan",
    "Step",
    "Wait",
    "after_seek_to_committed",
    "check",
    "current",
    "dropped_by_seek",
    "dropped_too",
    "empty_end",
    "end_worth_checking",
    "ends_due",
    "is_raw",
    "passed_end",
    "record_ages",
    "refetch_dropped",
    "route",
    "seek_moved",
]
