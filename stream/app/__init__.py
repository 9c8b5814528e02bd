"""The worker's edge: the only package that imports faust or rocksdict.

- ``worker``: ``Worker``, the one start-up sequence and the commit order of a batch;
- ``consumer``: Faust's consumer path in bulk (records to the agent, acks);
- ``producer``: a batch's records out (``BatchSender``, ``Outbox``);
- ``table``: the sessions table (the only private Faust/RocksDB access);
- ``backoff``: aiokafka's clients and log lines while the broker is away.

``faust -A stream.app worker`` finds ``app`` here, started as ``stream worker`` starts it.
"""

from typing import Any


def __getattr__(name: str) -> Any:
    # Built on first access, not at import, so `import stream.app.*` stays side-effect free.
    if name == "app":
        from stream.app.worker import Worker
        from stream.config import Settings

        globals()["app"] = built = Worker.start(Settings.from_env()).app
        return built
    raise AttributeError(name)
