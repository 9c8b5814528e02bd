"""Faust's monitor without its per-message and per-send bookkeeping (``LeanMonitor``)."""

import time
from typing import Any

from faust.sensors.monitor import Monitor


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
