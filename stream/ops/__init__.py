"""Operator tooling at the Kafka edge (confluent-kafka): topics, producing, offsets."""
