"""The offline fold: a session's log lines through the same processor the worker runs.

Pure: it takes lines already read (``(line number, parsed value)`` pairs, packed chunk
rows as ``ChunkRun``; or a log's text lines, ``fold_text``), so ``stream fold``,
``stream verify``, the benchmarks and the tests all fold logs the one way, and the
worker's batch fold and this one publish the same ``seq`` (``processor.published_seq``).
"""

from collections.abc import Iterable, Iterator
from typing import Any

from stream.contract.errors import BadLine, Unreadable
from stream.contract.events import Event, event_time, passive_seq, read_event
from stream.contract.storage import SKIPPED, ChunkRun, read_line
from stream.session.processor import (
    SessionRecord,
    note_time,
    process,
    process_run,
)


def events(lines: Iterable[tuple[int, Any]]) -> Iterator[tuple[int, Event | ChunkRun | BadLine]]:
    """Each line read at the envelope: an ``Event``, a ``ChunkRun``, or a ``BadLine``."""
    for number, value in lines:
        if type(value) is ChunkRun or type(value) is BadLine:
            yield number, value
            continue
        try:
            yield number, read_event(value)
        except Unreadable as error:
            yield number, BadLine(number, str(error))


def fold_lines(
    record: SessionRecord, lines: Iterable[tuple[int, Any]], every_event: bool = False
) -> Iterator[BadLine | None]:
    """Fold a log's lines into ``record``, counting every event in its tally.

    Yields a ``BadLine`` for each unreadable line, and — only with ``every_event`` —
    ``None`` after each event (a packed run is then folded one event at a time, so each
    yield sees the record exactly as after that event). Otherwise each event is folded as
    it is read, while its parsed line is still in cache, except passive events and packed
    runs that continue each other: those are gathered into one run for ``process_run``
    (O(1) per run), as ``processor.fold_items`` gathers them; a bad line changes no
    record, so its place among them does not matter.
    """
    return _fold(record, lines, every_event, False)


def fold_text(
    record: SessionRecord, lines: Iterable[bytes], every_event: bool = False
) -> Iterator[BadLine | None]:
    """``fold_lines`` over a log's text lines, each decoded as ``storage.read_lines`` does
    but in this loop: ``stream fold``'s path, a tuple and a generator step less per line."""
    return _fold(record, lines, every_event, True)


def _fold(
    record: SessionRecord, lines: Iterable[Any], every_event: bool, text: bool
) -> Iterator[BadLine | None]:
    tally = record.tally
    first = end = 0  # the pending run of passive events: seqs [first, end)
    number = 0
    value: Any = None
    for line in lines:
        if text:
            number += 1
            value = read_line(number, line)
            if value is SKIPPED:
                continue
        else:
            number, value = line
        if type(value) is dict:
            seq = -1 if every_event else passive_seq(value)
            if seq < 0:
                try:
                    event = read_event(value)
                except Unreadable as error:
                    yield BadLine(number, str(error))
                    continue
                note_time(record, event_time(value))
                if every_event:
                    tally.count(process(record, event))
                    yield None
                    continue
                if not event.passive:
                    if end > first:
                        tally.add(process_run(record, first, end - first))
                        first = end = 0
                    tally.count(process(record, event))
                    continue
                seq = event.seq
            else:
                note_time(record, event_time(value))
            size = 1
        elif type(value) is ChunkRun:
            note_time(record, value.latest_time)
            if every_event:
                for seq in range(value.seq0, value.seq0 + value.size):
                    tally.add(process_run(record, seq, 1))
                    yield None
                continue
            seq, size = value.seq0, value.size
        elif type(value) is BadLine:
            yield value
            continue
        else:
            yield BadLine(number, f"event must be a JSON object, got {type(value).__name__}")
            continue
        if seq == end and end > first:
            end += size
            continue
        if end > first:
            tally.add(process_run(record, first, end - first))
        first, end = seq, seq + size
    if end > first:
        tally.add(process_run(record, first, end - first))
