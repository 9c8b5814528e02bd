"""Turn log files into a stream of ``(session id, event or unreadable line)``.

Shared by every offline command, so ``fold``, ``measure``, ``verify`` and ``produce`` all
read exactly the same events out of the same files.
"""

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from stream.contract.errors import Unreadable
from stream.contract.events import Event, read_event
from stream.contract.storage import ChunkRun
from stream.logs.reader import BadLine, log_files, open_log
from stream.session.processor import SessionRecord, process, process_run


def raw_events(paths: list[str]) -> Iterator[tuple[str, Path, Any]]:
    """Every raw event object (or ``BadLine``) of every log, in file then line order."""
    for path in log_files(paths):
        log = open_log(path)
        for item in log.events():
            yield log.session_id, path, item


def events(paths: list[str]) -> Iterator[tuple[str, Event | ChunkRun | BadLine]]:
    """Every event read at the envelope, packed chunk rows as ``ChunkRun`` (fold them with
    ``process_run``), unreadable lines as ``BadLine`` (reported, never dropped)."""
    for path in log_files(paths):
        log = open_log(path)
        session_id = log.session_id
        for item in log.events():  # one generator deep: this loop runs per event
            if isinstance(item, BadLine | ChunkRun):
                yield session_id, item
                continue
            try:
                yield session_id, read_event(item)
            except Unreadable as error:
                yield session_id, BadLine(str(path), 0, str(error))


def fold(
    paths: list[str], records: dict[str, SessionRecord]
) -> Iterator[tuple[str, range] | BadLine]:
    """Fold every event of the logs into ``records`` (one per session id, created on first
    sight), yielding after each event or packed run its session and the seqs it covered."""
    for path in log_files(paths):
        log = open_log(path)
        session_id = log.session_id
        record = records.get(session_id)
        if record is None:
            record = records[session_id] = SessionRecord.new()
        for item in log.events():  # read directly, not via events(): this runs per event
            if type(item) is dict:
                try:
                    event = read_event(item)
                except Unreadable as error:
                    yield BadLine(str(path), 0, str(error))
                    continue
                process(record, event)
                yield session_id, range(event.seq, event.seq + 1)
            elif isinstance(item, ChunkRun):
                process_run(record, item.seq0, item.size)
                yield session_id, range(item.seq0, item.seq0 + item.size)
            elif isinstance(item, BadLine):
                yield item
            else:
                yield BadLine(
                    str(path), 0, f"event must be a JSON object, got {type(item).__name__}"
                )
