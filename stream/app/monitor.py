"""What the worker reads off Faust for its operators: the lean monitor, and the consumer's
positions as plain values for the metrics (``stream.ops.metrics`` never reads Faust).

``LeanMonitor`` is Faust's monitor without its per-message and per-send bookkeeping.
``positions`` reads the committed offsets and high-water marks of the input partitions
the member holds, ``recovery`` Faust's table recovery. ``positions`` reads two private
names of Faust (``stream.app.internals`` lists them, the pin test checks them on their
owners) without fallbacks, so a rename fails loudly here instead of turning the lag and
stall figures quietly to nothing.
"""

import time
from typing import Any

from faust.sensors.monitor import Monitor

from stream.ops.metrics import Position


def positions(app: Any, topic: str) -> dict[int, Position] | None:
    """``topic``'s partitions this member holds actively (by number): the committed offset
    and the high-water mark of each whose high-water mark is known. None while the app
    has no consumer yet (``app.consumer`` would make one)."""
    consumer = app._consumer
    if consumer is None:
        return None
    committed = consumer._committed_offset
    out: dict[int, Position] = {}
    for tp in list(app.assignor.assigned_actives()):
        if tp.topic != topic:
            continue
        high = consumer.highwater(tp)
        if high is not None:
            out[tp.partition] = Position(committed.get(tp), high)
    return out


def recovery(app: Any) -> Any:
    """Faust's table recovery (made on first use; ``TableManagerT`` does not type it): the
    metrics' restore gauges read it (``Metrics.observe_recovery``)."""
    return app.tables.recovery


class LeanMonitor(Monitor):
    """Faust's monitor without its per-message and per-send bookkeeping.

    Kept: end offsets (lag), commits, rebalances, assignment, and ``stream_inbound_time``
    (the consumer's slow-stream check reads it; ``batches`` stamps it once per batch).
    """

    def on_message_in(self, tp: Any, offset: int, message: Any) -> None:
        pass

    def on_stream_event_in(self, tp: Any, offset: int, stream: Any, event: Any) -> None:
        self.stream_inbound_time[tp] = time.monotonic()

    def on_stream_event_out(
        self, tp: Any, offset: int, stream: Any, event: Any, state: Any = None
    ) -> None:
        pass

    def on_message_out(self, tp: Any, offset: int, message: Any) -> None:
        pass

    def on_table_get(self, table: Any, key: Any) -> None:
        pass

    def on_table_set(self, table: Any, key: Any, value: Any) -> None:
        pass

    def on_send_initiated(
        self, producer: Any, topic: str, message: Any, keysize: int, valsize: int
    ) -> Any:
        return None

    def on_send_completed(self, producer: Any, state: Any, metadata: Any) -> None:
        pass

    def on_send_error(self, producer: Any, exc: BaseException, state: Any) -> None:
        pass
