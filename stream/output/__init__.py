"""What the service publishes (contract: "What is published"), below everything that
writes or reads it: the output record — payload, headers, their encoding and decoding —
used by the publisher, the re-seed and ``stream republish`` (``output.record``), and the
Redis key layout, read by the worker, the gateway and ``stream watch`` (``output.layout``),
and the Kafka headers of the input, dead-letter and output topics (``output.headers``).

Pure: no Redis, Kafka or Faust in here; the writers in ``stream.publish`` and
``stream.ops.republish`` do the I/O."""
