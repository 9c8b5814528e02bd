"""Bind a Faust event as "current" while touching its session's table row.

Faust routes a table read or write to the partition of the *current event*: the store
opens that partition's RocksDB, and the changelog record goes to the same partition
number. Inside a ``take_events()`` batch there is no current event, so Faust refuses
the write ("Cannot modify table key from outside of stream iteration",
faust-streaming #497). Binding the session's own input event for the duration of the
access restores exactly the per-event routing: the row lands in the changelog partition
that matches the input partition, whichever partitioner the producer used.
"""

import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from faust.streams import _current_event


@contextmanager
def bound(event: Any) -> Iterator[None]:
    token = _current_event.set(weakref.ref(event))
    try:
        yield
    finally:
        _current_event.reset(token)
