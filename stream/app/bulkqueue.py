"""The agent's queue on the bulk path: the hand-over (``stream.app.fetch``) puts one
partition's records on it as one list, ``batches`` (``stream.app.batching``) takes lists off
it. Counted in events and in bytes (on the queue object itself, beside Faust's own count of
items): the hand-over waits while either count is at its bound."""

from typing import Any, Final

import orjson

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


_SPACE: Final = frozenset(b" \t\r\n")
_OPEN: Final = ord("[")


def elements(message: Any) -> int:
    """The events a record holds, as far as the batch is concerned: 1, or for a segment (a
    JSON array) its length. What a record costs to fold (and could cost downstream) grows
    with its elements, not with the record: 30 kB hold 10,000 ``{}`` (docs/notes/028).

    A segment is parsed here once more (orjson, a few percent of folding it); one that
    orjson does not read (a number past a double, not JSON) counts its
    commas plus one, at least its length: each element after the first follows a comma."""
    value = getattr(message, "value", None)
    if type(value) is not bytes or len(value) < 5:  # "[1,2]": the shortest of two
        return 1
    first = value[0]
    if first != _OPEN and (first not in _SPACE or not value.lstrip().startswith(b"[")):
        return 1
    try:
        body = orjson.loads(value)
    except orjson.JSONDecodeError:
        return value.count(b",") + 1
    return len(body) if type(body) is list and body else 1


def fit(messages: list[Any], room: int, budget: float, first: bool) -> tuple[int, int]:
    """How many of ``messages``, from the first, a batch with room for ``room`` more
    records and ``budget`` more ``elements`` takes, and their elements; the ``first``
    of a batch is taken whatever it weighs."""
    taken = weight = 0
    for message in messages:
        if taken >= room:
            break
        more = elements(message)
        if weight + more > budget and (taken or not first):
            break
        taken += 1
        weight += more
    return taken, weight


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
