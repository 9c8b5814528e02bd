"""The service's Kafka topics, in one place: what each must be (``specs``), how an existing
one differs (``differences``, pure), and the admin calls that look and create (``survey``,
``create_missing``). ``stream topics`` prints the differences and ``--create`` makes what is
missing; the worker's own ``ensure_topics`` creates its three from the same specs.

The numbers (docs/deploy.md, "Quick start"):

- ``delete.retention.ms`` on the compacted output and changelog: 7 days. A tombstone (an
  expired session) is kept that long after compaction reaches it; a reader that takes
  longer from its start to the head (a worker restoring a partition, a ``stream
  republish``, a worker back on its volume after an absence) can miss it and keep the
  session. A restore is minutes (docs/notes/021), so 7 days covers a worker down over a
  long weekend with room to spare, for a few MB of tombstones (~100 B per expired
  session). Kafka's default, 1 day, does not.
- Partitions: ``STREAM_PARTITIONS`` (6; 12 in the quick start) for the input, output and
  dead letters; the changelog exactly as the input (co-partitioned); the control and
  leader topics 1. The input's count is fixed for good: sessions are keyed to partitions.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from stream.config import Settings

DAY_MS = 86_400_000
TOPIC_AUTHORIZATION_FAILED = 29
DELETE_RETENTION_MS = 7 * DAY_MS  # tombstones outlive the longest restore or absence

# The sessions table's name, here rather than in stream.app.table (which declares the
# table by it): importing that would import faust into every operator command.
TABLE = "sessions"
# Compaction keeps the newest record only, and a worker can check a step only against the
# one before it: the control topic is created never to compact (a record per operator run).
KEEP_HISTORY = str(2**63 - 1)  # min.compaction.lag.ms

Role = Literal["input", "output", "dlq", "changelog", "control", "leader"]


@dataclass(frozen=True, slots=True)
class TopicSpec:
    """One topic the service needs, as ``stream topics --create`` makes it."""

    role: Role
    name: str
    partitions: int
    replication: int
    config: Mapping[str, str]
    written_by: str
    # Each key's least acceptable value in ms on an existing topic (-1, Kafka's "for
    # ever", is always enough): below it is a warning, not a break.
    at_least_ms: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Found:
    """What the broker says about an existing topic."""

    partitions: int
    replication: int  # the fewest replicas of any partition
    config: Mapping[str, str]
    # False: the principal may not DESCRIBE_CONFIGS it (the workers' may not, but on the
    # control topic), so only partitions and replication can be checked.
    readable: bool = True


@dataclass(frozen=True, slots=True)
class Difference:
    topic: str
    what: str
    breaks: bool  # the service cannot run right with it (else a warning)

    def line(self) -> str:
        return f"{'BREAKS' if self.breaks else 'warning'}: {self.topic}: {self.what}"


def control_topic(settings: Settings) -> str:
    """The rebuild control record's topic (``stream.ops.control``)."""
    return f"{settings.app_id}-control"


def changelog_topic(settings: Settings) -> str:
    """Faust's name for the table's changelog topic."""
    return f"{settings.app_id}-{TABLE}-changelog"


def leader_topic(settings: Settings) -> str:
    """Faust's group leader topic (``LeaderAssignor._leader_topic_name``)."""
    return f"{settings.app_id}-__assignor-__leader"


def specs(settings: Settings, input_partitions: int | None = None) -> tuple[TopicSpec, ...]:
    """Every topic the service needs. ``input_partitions``: the existing input topic's
    count, which the changelog must equal (``STREAM_PARTITIONS`` when it is new)."""
    partitions = settings.partitions
    table = input_partitions or partitions
    rf = settings.replication_factor
    ttl_ms = settings.session_ttl_seconds * 1000
    compacted = {"cleanup.policy": "compact", "delete.retention.ms": str(DELETE_RETENTION_MS)}
    keep = {"delete.retention.ms": DELETE_RETENTION_MS}
    input_config = {"cleanup.policy": "delete"}
    if ttl_ms:  # replay and rebuild reach back a session's life (STREAM_SESSION_TTL)
        input_config["retention.ms"] = str(max(ttl_ms, 7 * DAY_MS))
    return (
        TopicSpec(
            "input",
            settings.input_topic,
            partitions,
            rf,
            input_config,
            "your producers",
            {"retention.ms": ttl_ms} if ttl_ms else {},
        ),
        TopicSpec("output", settings.output_topic, partitions, rf, compacted, "the workers", keep),
        TopicSpec(
            "dlq", settings.dlq_topic, partitions, rf, {"cleanup.policy": "delete"}, "the workers"
        ),
        TopicSpec(
            "changelog", changelog_topic(settings), table, rf, compacted, "the workers", keep
        ),
        TopicSpec(
            "control",
            control_topic(settings),
            1,
            rf,
            {"cleanup.policy": "compact", "min.compaction.lag.ms": KEEP_HISTORY},
            "stream replay, stream produce --reset",
        ),
        TopicSpec(
            "leader", leader_topic(settings), 1, rf, {"cleanup.policy": "delete"}, "the workers"
        ),
    )


def _policies(value: str | None) -> set[str]:
    return {part.strip() for part in (value or "delete").split(",")}


def differences(
    spec: TopicSpec, found: Found | None, input_partitions: int | None
) -> list[Difference]:
    """How an existing topic differs from its spec, worst first. ``None``: it is missing
    (a break for the input, which the service never creates on a locked-down cluster
    either; the workers create the others when allowed, hence also a break here: the
    quick start makes them all)."""
    name = spec.name
    if found is None:
        return [
            Difference(
                name,
                "missing, or this principal may not DESCRIBE it (`stream topics --create`"
                " as an admin makes it)",
                True,
            )
        ]
    if not found.readable:
        unchecked = Difference(
            name,
            "settings not checked: this principal may not DESCRIBE_CONFIGS it (run"
            " `stream topics` as an admin to check cleanup.policy and retention)",
            False,
        )
        return [*_layout(spec, found, input_partitions), unchecked]
    out: list[Difference] = []
    policy = _policies(found.config.get("cleanup.policy"))
    wanted = _policies(spec.config.get("cleanup.policy"))
    if spec.role in ("output", "changelog", "control") and "compact" not in policy:
        out.append(
            Difference(
                name,
                f"cleanup.policy={','.join(sorted(policy))}, must be compact (the latest"
                " row or update of every session must stay)",
                True,
            )
        )
    elif spec.role == "input" and "compact" in policy:
        out.append(
            Difference(
                name,
                f"cleanup.policy={','.join(sorted(policy))}: compaction drops events the"
                " fold needs; must be delete",
                True,
            )
        )
    elif policy != wanted and spec.role != "leader":
        out.append(
            Difference(
                name,
                f"cleanup.policy={','.join(sorted(policy))}, expected {','.join(sorted(wanted))}",
                False,
            )
        )
    out += _layout(spec, found, input_partitions)
    for key, least in spec.at_least_ms.items():
        have = _int(found.config.get(key))
        if have is not None and have != -1 and have < least:
            out.append(
                Difference(
                    name,
                    f"{key}={have} ({have / DAY_MS:g} d), below {least} ({least / DAY_MS:g} d)",
                    False,
                )
            )
    history = spec.config.get("min.compaction.lag.ms")
    if history and found.config.get("min.compaction.lag.ms") != history:
        out.append(
            Difference(name, "min.compaction.lag.ms is not the maximum: old steps may go", False)
        )
    isr = _int(found.config.get("min.insync.replicas"))
    if found.replication >= 3 and isr is not None and isr < 2:
        out.append(
            Difference(
                name,
                f"min.insync.replicas={isr} with {found.replication} replicas: 2 keeps an"
                " acknowledged record on two disks",
                False,
            )
        )
    return sorted(out, key=lambda d: not d.breaks)


def _layout(spec: TopicSpec, found: Found, input_partitions: int | None) -> list[Difference]:
    """The partition count and replication factor against the spec (what metadata shows
    to any principal that may DESCRIBE the topic)."""
    name = spec.name
    out: list[Difference] = []
    if spec.role == "changelog" and input_partitions and found.partitions != input_partitions:
        out.append(
            Difference(
                name,
                f"{found.partitions} partitions, must equal the input's {input_partitions}"
                " (a session's row lives in its input partition's number)",
                True,
            )
        )
    elif spec.role in ("control", "leader") and found.partitions != 1:
        out.append(Difference(name, f"{found.partitions} partitions, must be 1", True))
    elif spec.role in ("input", "output", "dlq") and found.partitions != spec.partitions:
        out.append(
            Difference(
                name,
                f"{found.partitions} partitions, STREAM_PARTITIONS says {spec.partitions}"
                " (an existing input's count wins; no action needed if it is the one you chose)",
                False,
            )
        )
    if found.replication < spec.replication:
        out.append(
            Difference(
                name,
                f"replication factor {found.replication}, STREAM_REPLICATION_FACTOR says"
                f" {spec.replication}",
                False,
            )
        )
    return out


def _int(value: str | None) -> int | None:
    try:
        return None if value is None else int(value)
    except ValueError:
        return None


# --------------------------------------------------------------------------- the admin calls


CONFIG_KEYS = (
    "cleanup.policy",
    "retention.ms",
    "delete.retention.ms",
    "min.compaction.lag.ms",
    "min.insync.replicas",
)


def survey(admin: Any, names: Sequence[str], timeout: float = 10.0) -> dict[str, Found | None]:
    """Each named topic as the broker has it, ``None`` when missing (or not visible to
    this principal: listing every topic never auto-creates one)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import ConfigResource  # type: ignore[attr-defined,unused-ignore]

    listed = admin.list_topics(timeout=timeout).topics
    present = [name for name in names if name in listed and listed[name].partitions]
    resources = {name: ConfigResource("topic", name) for name in present}
    futures = (
        admin.describe_configs(list(resources.values()), request_timeout=timeout) if present else {}
    )
    found: dict[str, Found | None] = {name: None for name in names}
    for name in present:
        partitions = listed[name].partitions
        replication = min(len(p.replicas) for p in partitions.values())
        try:
            described = futures[resources[name]].result()
        except KafkaException as error:
            if error.args[0].code() != TOPIC_AUTHORIZATION_FAILED:
                raise
            found[name] = Found(len(partitions), replication, {}, readable=False)
            continue
        config = {key: described[key].value for key in CONFIG_KEYS if key in described}
        found[name] = Found(len(partitions), replication, config)
    return found


def create_missing(admin: Any, wanted: Iterable[TopicSpec], timeout: float = 20.0) -> list[str]:
    """Create each spec's topic; returns the names created. A topic a racing creator made
    first counts as there (TOPIC_ALREADY_EXISTS); any other refusal raises ``RuntimeError``
    naming the topic and the broker's reason."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined,unused-ignore]

    new = [NewTopic(s.name, s.partitions, s.replication, config=dict(s.config)) for s in wanted]
    if not new:
        return []
    created = []
    for name, future in admin.create_topics(new, request_timeout=timeout).items():
        try:
            future.result()
            created.append(name)
        except KafkaException as error:
            if error.args[0].code() != 36:  # TOPIC_ALREADY_EXISTS
                raise RuntimeError(f"cannot create topic {name}: {error.args[0].str()}") from None
    return created


__all__ = [
    "DELETE_RETENTION_MS",
    "Difference",
    "Found",
    "TopicSpec",
    "create_missing",
    "differences",
    "leader_topic",
    "specs",
    "survey",
]
