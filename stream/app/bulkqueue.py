"""The agent's queue on the bulk path: the hand-over (``stream.app.fetch``) puts one
partition's records on it as one list, ``batches`` (``stream.app.batching``) takes lists off
it. Counted in events and in bytes (on the queue object itself, beside Faust's own count of
items): the hand-over waits while either count is at its bound."""

from typing import Any

NO_BOUND = float("inf")


def queued(queue: Any) -> int:
    """Events in a raw channel's queue (its items are lists of them)."""
    return getattr(queue, "bulk_events", 0)


def queued_bytes(queue: Any) -> int:
    """Bytes of input in a raw channel's queue (``size`` of its lists)."""
    return getattr(queue, "bulk_bytes", 0)


def full(queue: Any) -> bool:
    """A raw channel's queue holds as many events as its size, or as many bytes as the
    transport's ``bulk_bytes`` (``batches`` puts that bound on it), or more."""
    limit: int = queue.maxsize
    return queued(queue) >= limit or queued_bytes(queue) >= getattr(queue, "bulk_max", NO_BOUND)


def size(messages: list[Any]) -> int:
    """The bytes of input ``messages`` hold (what bounds the worker's memory, beside their
    number: every value may be as large as the inflate bound allows)."""
    return sum(m.serialized_value_size + m.serialized_key_size for m in messages)


def put(queue: Any, messages: list[Any]) -> None:
    """Put one partition's records on ``queue`` as one list, counted."""
    queue.put_nowait(messages)
    queue.bulk_events = queued(queue) + len(messages)
    queue.bulk_bytes = queued_bytes(queue) + size(messages)


def taken(queue: Any, item: Any) -> tuple[list[Any], int]:
    """A list the hand-over put on ``queue``, now out of its count, and its ``size``."""
    if type(item) is not list:
        raise TypeError(
            f"batches takes lists of messages from a raw channel of bulk topics, not {item!r}"
        )
    held = size(item)
    queue.bulk_events = queued(queue) - len(item)
    queue.bulk_bytes = queued_bytes(queue) - held
    return item, held
