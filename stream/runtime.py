"""Process-wide runtime settings shared by the worker and the offline commands.

The garbage collector's thresholds, the switch interval, uvloop, and the JSON log format
(``json_logging``: the worker's and the loader's alike)."""

import gc
import sys
from typing import Any

YOUNG = 50_000  # allocations between passes over the youngest generation (offline)


def tune_gc(freeze: bool = False, young: int = YOUNG) -> None:
    """Collect the youngest generation every ``young`` allocations instead of 700.

    Folding allocates a few objects per event (the parsed line, the event, rows and
    updates) that die young; at the default threshold the cyclic collector runs every few
    hundred events and walks the young objects each time (about a tenth of `stream fold`'s
    time). ``freeze``: the worker moves its long-lived heap (Faust's services, the app)
    out of the collector's walks once it has started.
    """
    if freeze:
        gc.freeze()
    gc.set_threshold(young, 20, 20)


def worker_young(batch_max: int) -> int:
    """The worker's ``young``: above what its batches keep alive at once.

    A pass over the youngest generation runs when the objects allocated since the last
    one and still alive exceed the threshold, and walks all of them. The worker keeps a
    few tracked objects per event in hand (Kafka's record, Faust's message, the core's)
    for up to four batches' worth of events (the agent's queue holds two, one is folded,
    one more is fetched): at 50,000 a pass came every second or two under load, each
    walking only live objects for 30-80 ms on the loop (docs/notes/016). Twenty objects
    per event of ``batch_max`` keeps them out of it; cyclic garbage, which a batch does
    not make (``tests/unit/session/test_batch.py``), waits that much longer."""
    return max(YOUNG, 20 * batch_max)


def tune_switch(interval: float) -> None:
    """Let a thread waiting for the interpreter have it after ``interval`` seconds.

    The worker's loop and Faust's consumer thread share one interpreter lock. A thread
    that wants it waits until the holder gives it up at an await or a blocking call, or
    for the switch interval at most: CPython's 5 ms. The loop folds and publishes in
    stretches of a millisecond or more, so a fetch response that arrived meanwhile waited
    for the lock before the consumer thread could even read it, and the next fetch went
    out that much later (docs/notes/022: 2-3 ms of an update's fetch at 0.5 ms)."""
    sys.setswitchinterval(interval)


def use_uvloop() -> bool:
    """uvloop's event loop policy for loops created from now on (the worker's loop and its
    consumer thread's both take it); False if unavailable."""
    import asyncio  # here, not at the top: ~18 ms that the offline commands never use

    try:
        import uvloop
    except ImportError:  # pragma: no cover - a dependency of the worker (faust[uvloop])
        return False
    if not isinstance(asyncio.get_event_loop_policy(), uvloop.EventLoopPolicy):
        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    return True


def json_logging(level: str) -> dict[str, Any]:
    """One JSON object per log line (``STREAM_LOG_FORMAT=json``), for log pipelines: the
    ``logging.config.dictConfig`` of every process that logs that way."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {
            "json": {
                "()": "pythonjsonlogger.json.JsonFormatter",
                "fmt": "%(asctime)s %(levelname)s %(name)s %(process)d %(message)s",
                "rename_fields": {"asctime": "time", "levelname": "level", "name": "logger"},
            }
        },
        "handlers": {
            "default": {
                "class": "logging.StreamHandler",
                "formatter": "json",
                "stream": "ext://sys.stderr",
            }
        },
        "root": {"level": level, "handlers": ["default"]},
    }
