"""Which input offsets the worker has accounted for, and so how far a commit may go.

- ``read_after_seek``: the read offset a seek leaves, the offset before where it put the
  fetcher (Faust leaves the offset itself, and a record dropped there looked read).
- ``Holes``: a jump between two records' offsets is fetched once more before it may count
  as offsets holding no record, and records a seek or a rebalance made the fetch drop are
  noted to be fetched again.
- ``commit_offset`` and ``note_gap``: the offset a commit of an input partition may reach,
  from the committed offset through every offset acked or confirmed empty, never one
  past (Faust's own passes the record at the committed offset: faust-streaming #606).

The fetch path (``stream.app.fetch``) and the acks (``stream.app.batching``) keep these on
Faust's consumer; here they are plain data, checked without a broker (docs/notes/010, 024).
"""

from bisect import bisect_left
from typing import Any

from intervaltree import IntervalTree  # type: ignore[import-untyped]


def read_after_seek(offset: int | None) -> int | None:
    """The read offset of an input partition the consumer was just moved to ``offset``:
    the last offset read, as the drain loop sets it after a hand-over, so the record the
    next fetch brings is checked against the one before ``offset``. Faust sets ``offset``
    itself (0.15.3): a record at ``offset`` dropped because a seek came first then looks
    read already, is never fetched again, and the next record looks like the one after it
    (a loss seen in a rolling restart: docs/notes/024). None: nothing before it."""
    return offset - 1 if offset is not None and offset > 0 else None


class Holes:
    """Offsets missing between two records of one input partition, checked before Faust
    may commit past them.

    Faust counts a jump in offsets as a gap and commits past it: right for compacted and
    transactional topics (removed records, commit markers), silent loss when the records
    were fetched and not handed over, which a rebalance or a seek racing the drain loop
    can do (a worker that took over a partition once committed past 59 records it never
    saw). So a jump is fetched once more from the last record before it: a real hole
    comes back the same and is noted as holding no record (``note_gap``); records that
    come back are taken, and the loss it would have been is logged.
    """

    def __init__(self) -> None:
        self.spans: dict[Any, tuple[int, int]] = {}  # tp -> (last, next), fetched again
        # tp -> the highest offset handed over: a seek's read offset can fall below it
        # (``perform_seek`` sets it after its await, while records go on being handed
        # over), and then the span comes back as redeliveries rather than as a loss.
        self.handed: dict[Any, int] = {}
        self.refetched = 0  # spans that came back without having been handed over
        # tp -> the first offset of records dropped because a seek or a rebalance came
        # first (BulkConsumer._fetch_dropped_again)
        self.dropped: dict[Any, int] = {}

    def confirmed(self, tp: Any, last: int, offset: int) -> bool:
        """True when this very jump was fetched again already (a real hole); otherwise it
        is noted, and the caller fetches from ``last`` again."""
        if self.spans.get(tp) == (last, offset):
            del self.spans[tp]
            return True
        self.spans[tp] = (last, offset)
        return False

    def drop(self, parts: list[tuple[Any, list[Any]]]) -> None:
        """Records of ``parts`` (partition, its records) were dropped, not handed over."""
        for tp, messages in parts:
            if messages:
                first = messages[0].offset
                self.dropped[tp] = min(first, self.dropped.get(tp, first))

    def taken(self, tp: Any, offset: int) -> tuple[str, int, int] | None:
        """A record of ``tp`` was taken without a jump before it. When it ends a span
        fetched again: ``("redelivered", last, following)`` when the span's records had
        been handed over already, ``("refetched", last, following)`` when they had not (a
        loss averted: counted in ``refetched``), the span's last record and the one after
        it; None otherwise."""
        span = self.spans.get(tp)
        if span is None:
            return None
        last, following = span
        if offset <= last:
            return None  # the record before the span, again (or a seek further back)
        del self.spans[tp]
        if offset >= following:
            return None
        if self.handed.get(tp, -1) >= following - 1:
            return ("redelivered", last, following)
        self.refetched += 1
        return ("refetched", last, following)


def commit_offset(
    acked: list[int], index: set[int], gaps: IntervalTree | None, committed: int | None
) -> int | None:
    """The offset a commit of one input partition may reach: where the offsets accounted
    for, from ``committed`` on, first stop; None when that is not past ``committed``. An
    offset is accounted for once its record is acked (``acked``, unique, with ``index``
    the same as a set), or once the fetch found it holds no record the consumer can read
    (``gaps``: a hole fetched twice, e.g. a transaction's commit marker).
    The run's offsets leave ``acked`` and ``index``, and ``gaps`` below it are dropped.

    Without a committed offset (a partition never committed, or one being revoked, whose
    bookkeeping Faust has dropped) the run starts at the lowest acked offset. Runs are
    found by a binary search and gaps kept as intervals: a hole of a billion offsets (records
    deleted by retention) costs nothing."""
    if not acked and not gaps:
        return None
    acked.sort()
    if not committed and not acked:
        return None
    base: int = committed if committed else acked[0]
    at = bisect_left(acked, base)  # those below it: a commit passed them already
    offset = base
    while True:
        if at < len(acked) and acked[at] == offset:
            low, high = at, len(acked) - 1  # the run ends at the last i where
            while low < high:  # acked[i] - offset == i - at (unique, sorted)
                middle = (low + high + 1) // 2
                if acked[middle] - offset == middle - at:
                    low = middle
                else:
                    high = middle - 1
            offset, at = acked[low] + 1, low + 1
            continue
        covering = gaps.at(offset) if gaps else ()
        if not covering:
            break
        offset = max(interval.end for interval in covering)
        at = bisect_left(acked, offset, at)
    if at:
        index.difference_update(acked[:at])
        del acked[:at]
    if gaps:
        gaps.chop(0, offset)
    return offset if offset > base else None


def note_gap(gaps: IntervalTree, committed: int | None, first: int, last: int) -> bool:
    """Note offsets ``first`` to ``last`` as holding no record, clipped at ``committed``
    (the record after the hole is not in it: it is acked when it is processed). False:
    nothing left to note. Faust's ``_add_gap`` starts one past the committed offset, so a
    marker right at it would hold the commit for good under ``commit_offset``."""
    if committed is not None:
        first = max(first, committed)
    if first > last:
        return False
    gaps.addi(first, last + 1)
    gaps.merge_overlaps(strict=False)
    return True


__all__ = ["Holes", "commit_offset", "note_gap", "read_after_seek"]
