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
