"""Where updates go (contract: "What is published"): the one publisher of a batch — rows,
the compacted output topic, dead letters, Redis — and the Redis layout and scripts."""
