"""Faust's topic declarations, fenced: no CreateTopics for a topic that exists, and a topic
that is missing and may not be created stops the worker with one line saying what to do.

Faust declares its own topics, the group leader topic ``{app}-__assignor-__leader`` and the
table's changelog ``{app}-sessions-changelog``, on every start and on every subscription
change (``Topic.maybe_declare`` calls the producer's ``create_topic``). Its aiokafka driver
looks only at the producer's cached metadata, which holds neither, so it sends CreateTopics
every time and takes only TOPIC_ALREADY_EXISTS for an answer: a principal without CREATE,
as on a managed cluster, stops there although an admin made both topics
(docs/notes/026-least-privilege.md). ``FencedProducer`` asks the broker first (a Metadata
request for every topic, which never auto-creates one) and leaves Faust's path for the
topics that are missing. Whether a topic exists and what a refusal means are decided in
``plan`` and ``refusal`` (pure); the producer only asks and applies.
"""

import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from aiokafka.errors import KafkaError  # type: ignore[import-untyped]
from faust.transport.drivers import aiokafka as faust_aiokafka
from mode.utils.times import want_seconds

log = logging.getLogger("stream.worker")

# The create refusals that are a matter of ACLs (Kafka's error codes).
TOPIC_AUTHORIZATION_FAILED = 29
CLUSTER_AUTHORIZATION_FAILED = 31
ACL_REFUSALS: Mapping[int, str] = {
    TOPIC_AUTHORIZATION_FAILED: "TOPIC_AUTHORIZATION_FAILED",
    CLUSTER_AUTHORIZATION_FAILED: "CLUSTER_AUTHORIZATION_FAILED",
}


@dataclass(frozen=True, slots=True)
class Declaration:
    """A topic as Faust declares it: what an admin would have to create."""

    topic: str
    partitions: int
    replication: int
    config: Mapping[str, Any]

    def settings(self) -> str:
        count = f"{self.partitions} partition{'s' if self.partitions != 1 else ''}"
        configured = "".join(f", {key}={value}" for key, value in sorted(self.config.items()))
        return f"{count}, replication {self.replication}{configured}"


def plan(topic: str, visible: Collection[str]) -> Literal["exists", "create"]:
    """``exists`` when the broker lists ``topic`` to this principal (it exists and the
    principal may DESCRIBE it): nothing is sent. ``create`` otherwise: Faust creates it,
    which needs CREATE on it (or on the cluster)."""
    return "exists" if topic in visible else "create"


def refusal(declaration: Declaration, code: int | None) -> str | None:
    """The one line a failed creation of ``declaration`` stops the worker with, when the
    broker refused it for want of an ACL (``code``); None for any other failure, which
    stays Faust's own error (it names the topic and the broker's reason)."""
    name = ACL_REFUSALS.get(code) if code is not None else None
    if name is None:
        return None
    topic = declaration.topic
    return (
        f"topic {topic} is missing (or this principal may not DESCRIBE it) and creating it"
        f" was refused ({name}): have an admin create it ({declaration.settings()}) and"
        f' grant DESCRIBE on it, or grant CREATE on it (docs/deploy.md, "Kafka ACLs")'
    )


class TopicRefused(RuntimeError):
    """A topic the worker needs is missing and may not be created (``refusal``'s line)."""


class FencedProducer(faust_aiokafka.Producer):
    """Faust's aiokafka producer, whose ``create_topic`` asks the broker whether the topic
    exists before Faust sends CreateTopics (``plan``), and turns an ACL refusal into
    ``TopicRefused`` (``refusal``). The worker's ``producer.BackoffProducer`` builds on it."""

    async def create_topic(
        self, topic: str, partitions: int, replication: int, **kwargs: Any
    ) -> None:
        client = self._ensure_producer().client
        # Every topic the principal may DESCRIBE: a request naming the topic could have the
        # broker auto-create it with its defaults (a changelog must be compacted).
        metadata = await client.fetch_all_metadata()
        if plan(topic, metadata.topics()) == "exists":
            log.debug("topic %s exists: not declared", topic)
            return
        try:
            await super().create_topic(topic, partitions, replication, **kwargs)
        except KafkaError as error:
            retention = kwargs.get("retention")
            transport: Any = self.transport  # Faust's aiokafka Transport
            config = transport._topic_config(  # what Faust's request carried
                int(want_seconds(retention) * 1000) if retention else None,
                kwargs.get("compacting"),
                kwargs.get("deleting"),
            )
            config.update(kwargs.get("config") or {})
            declared = Declaration(topic, partitions, replication, config)
            line = refusal(declared, getattr(error, "errno", None))
            if line is None:
                raise
            log.critical("%s", line)
            raise TopicRefused(line) from None


__all__ = ["Declaration", "FencedProducer", "TopicRefused", "plan", "refusal"]
