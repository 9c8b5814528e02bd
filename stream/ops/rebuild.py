"""A rebuild's side of the table's changelog: what a rebuild would drop, the plan that
says so, and the truncation itself (``stream replay --rebuild``, ``--new-generation``).

The control record the plan moves to is ``stream.ops.control``'s.
"""

import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace

from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined,unused-ignore]
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
)

from stream.config import Settings
from stream.ops.control import Control
from stream.ops.offsets import ResetPlan, watermarks
from stream.ops.topics import changelog_topic


@dataclass(frozen=True, slots=True)
class ChangelogPartition:
    partition: int
    low: int
    high: int

    @property
    def records(self) -> int:
        """Offsets still held (compaction leaves holes: an upper bound on the records)."""
        return self.high - self.low


@dataclass(frozen=True, slots=True)
class RebuildPlan:
    current: Control
    next: Control | None  # None: this very rebuild is already in place, nothing to write
    changelog: tuple[ChangelogPartition, ...]  # the selected partitions, before truncation

    @property
    def dropped(self) -> int:
        return sum(p.records for p in self.changelog)


def plan_rebuild(
    current: Control,
    reset: ResetPlan,
    changelog: Sequence[ChangelogPartition],
    configured_generation: int,
    generation: int | None = None,
) -> RebuildPlan:
    """What ``--rebuild`` writes on top of the offset reset (pure).

    Repeating a rebuild before any worker ran finds the offsets at the targets, the
    changelog empty and the control record naming the same targets: nothing to do. A
    rebuild interrupted part way (offsets moved, control not yet written, changelog not yet
    truncated) is never mistaken for a finished one, so running it again completes it.
    Raises ``ControlError`` for a ``generation`` not above the one in use.
    """
    targets = reset.targets()
    done = (
        not reset.changes
        and all(p.records == 0 for p in changelog)
        and current.is_rebuild_to(reset.topic, targets)
        and generation in (None, current.generation)
    )
    following = (
        None
        if done
        else current.after_rebuild(configured_generation, reset.topic, targets, generation)
    )
    return RebuildPlan(current, following, tuple(changelog))


def plan_generation(
    current: Control, configured: int, generation: int | None = None
) -> Control | None:
    """The record a generation bump writes (``None``: already at ``generation``). Only the
    generation moves: no state is discarded. Bumping to an explicit ``generation`` is
    idempotent; a bare bump moves one further every time it runs."""
    if generation is not None and generation == current.generation:
        return None
    return replace(current, generation=current.next_generation(configured, generation))


def changelog_state(
    settings: Settings,
    admin: AdminClient,
    partitions: Collection[int] | None = None,
    timeout: float = 20.0,
) -> list[ChangelogPartition]:
    """The changelog's partitions (those in ``partitions``); empty when it does not exist."""
    topic = changelog_topic(settings)
    metadata = admin.list_topics(timeout=timeout).topics.get(topic)
    if metadata is None:
        return []
    chosen = sorted(p for p in metadata.partitions if partitions is None or p in partitions)
    marks = watermarks(admin, topic, chosen, timeout) if chosen else {}
    return [ChangelogPartition(p, *marks[p]) for p in chosen]


def _set_cleanup_policy(admin: AdminClient, topic: str, policy: str, timeout: float) -> None:
    entry = ConfigEntry("cleanup.policy", policy, incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource("topic", topic, incremental_configs=[entry])
    admin.incremental_alter_configs([resource], request_timeout=timeout)[resource].result()


def truncate_changelog(
    settings: Settings,
    admin: AdminClient,
    parts: Sequence[ChangelogPartition],
    timeout: float = 30.0,
    on_done: Callable[[int], None] = lambda _: None,
) -> None:
    """Delete every record below each partition's end offset (DeleteRecords).

    Brokers refuse DeleteRecords on a compact-only topic (POLICY_VIOLATION), which Faust's
    changelogs are, so the policy is ``compact,delete`` for the duration and restored after.
    """
    parts = [p for p in parts if p.records > 0]
    if not parts:
        return
    topic = changelog_topic(settings)
    resource = ConfigResource("topic", topic)
    described = admin.describe_configs([resource], request_timeout=timeout)[resource].result()
    policy = described["cleanup.policy"].value
    if "delete" not in policy.split(","):
        _set_cleanup_policy(admin, topic, "compact,delete", timeout)
    try:
        pending = {p.partition: p.high for p in parts}
        deadline = time.monotonic() + timeout
        while pending:
            request = [TopicPartition(topic, p, high) for p, high in pending.items()]
            for tp, future in admin.delete_records(request, request_timeout=timeout).items():
                try:
                    future.result()
                except KafkaException as error:
                    # The policy change reaches the partition leader a moment later.
                    code = error.args[0].code()
                    if code != KafkaError.POLICY_VIOLATION or time.monotonic() > deadline:
                        raise RuntimeError(
                            f"cannot truncate {topic}[{tp.partition}]: {error}"
                        ) from None
                    continue
                del pending[tp.partition]
                on_done(tp.partition)
            if pending:
                time.sleep(0.2)
    finally:
        if "delete" not in policy.split(","):
            _set_cleanup_policy(admin, topic, policy, timeout)
