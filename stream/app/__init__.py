"""The worker's edge: the only package that imports faust or rocksdict.

- ``run``: ``run``, the one start-up sequence, from settings to the exit status;
- ``worker``: ``assemble`` builds a worker's parts in order and wires them to Faust
  (``Worker.wire``); the one way a worker is built;
- ``entry``: ``faust -A stream.app.entry``, Faust's command line built through ``run``;
- ``commit``: ``Committer.commit``, the order that makes a batch's commit safe;
- ``fetch``, ``bulkqueue``, ``batching``: Faust's consumer path in bulk (records to the
  agent, batches, acks); ``inflate``: compressed input within bounds;
- ``producer``: a batch's records out (``BatchSender``, ``Outbox``);
- ``table``: the sessions table (RocksDB and its changelog);
- ``claims``: the control topic while the worker runs; ``expiry``: idle sessions swept;
- ``backoff``: aiokafka's clients and log lines while the broker is away;
- ``internals``: every private name of Faust, mode and aiokafka the edge relies on.

Importing any of these builds nothing: a worker is built by calling ``run``, ``prepare``
or ``assemble`` (``entry`` alone builds on import, being Faust's ``-A`` target).
"""
