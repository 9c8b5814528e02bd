"""Process-wide runtime settings shared by the worker and the offline commands."""

import gc


def tune_gc(freeze: bool = False) -> None:
    """Collect the youngest generation every 50,000 allocations instead of 700.

    Folding allocates a few objects per event (the parsed line, the event, rows and
    updates) that die young; at the default threshold the cyclic collector runs every few
    hundred events and walks the young objects each time (about a tenth of `stream fold`'s
    time). ``freeze``: the worker moves its long-lived heap (Faust's services, the app)
    out of the collector's walks once it has started.
    """
    if freeze:
        gc.freeze()
    gc.set_threshold(50_000, 20, 20)
