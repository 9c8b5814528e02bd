"""Where updates go (SPEC §6): the compacted output topic, Redis, and the dead-letter topic."""
