"""The worker's edge: the only package that imports faust or rocksdict.

- ``run``: ``run``, the one start-up sequence, from settings to the exit status;
- ``worker``: ``assemble`` builds a worker's parts in order, ``Worker`` wires them to Faust;
- ``commit``: ``Committer.commit``, the order that makes a batch's commit safe;
- ``fetch``, ``bulkqueue``, ``batching``: Faust's consumer path in bulk (records to the
  agent, batches, acks); ``inflate``: compressed input within bounds;
- ``producer``: a batch's records out (``BatchSender``, ``Outbox``);
- ``table``: the sessions table (RocksDB and its changelog);
- ``claims``: the control topic while the worker runs; ``expiry``: idle sessions swept;
- ``backoff``: aiokafka's clients and log lines while the broker is away;
- ``internals``: every private name of Faust, mode and aiokafka the edge relies on.

``faust -A stream.app worker`` finds ``app`` here, started as ``stream worker`` starts it.
"""

from typing import Any


def __getattr__(name: str) -> Any:
    # Built on first access, not at import, so `import stream.app.*` stays side-effect free.
    if name == "app":
        from stream.app.run import prepare
        from stream.config import Settings

        globals()["app"] = built = prepare(Settings.from_env()).app
        return built
    raise AttributeError(name)
