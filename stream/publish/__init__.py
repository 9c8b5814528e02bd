"""Where updates go (contract: "What is published"): the one publisher of a batch
(``publisher``) — rows, the compacted output topic and dead letters (``kafka``), Redis
(``queue``: written now, or queued while Redis is away) — the Redis sink and its function
library (``redis_sink``, ``library``) and the loader that keeps it loaded (``loader``).
What is written (the record, the key layout, the fields and messages) lives below, in
``stream.output``."""
