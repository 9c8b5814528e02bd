"""What the service publishes (contract: "What is published"), below everything that
writes or reads it — the whole published contract, each part written once:

- ``output.record``: the output record — payload, headers, their encoding and decoding —
  used by the publisher, the re-seed and ``stream republish``;
- ``output.headers``: the Kafka headers of the input (reset), dead-letter and output
  (generation, tally, view version) topics;
- ``output.layout``: the Redis key and channel names, read by the worker, the gateway and
  ``stream watch``;
- ``output.redis``: what those keys and channels hold — a session's hash fields, the channel
  messages (the expiry message built and told from updates), the totals' values — and
  the result codes of the worker's Redis functions.

Pure: no Redis, Kafka or Faust in here; the writers in ``stream.publish`` and
``stream.ops.republish`` do the I/O."""
