"""Where updates go (contract: "What is published"): the one publisher of a batch — rows,
the compacted output topic, dead letters, Redis — and the Redis scripts that write them.
What is written (the record, the key layout) lives below, in ``stream.output``."""
