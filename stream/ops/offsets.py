"""The worker group's committed input offsets: read them, plan a reset, apply it.

``stream replay`` and ``stream lag`` are built from three separate steps so the decision
can be tested without a broker:

- ``snapshot`` / ``describe_group`` read the broker (AdminClient): each input partition's
  watermarks and the group's committed offset, and the group's live members;
- ``plan_reset`` (pure) decides every partition's target and what moving there means;
- ``apply_reset`` writes the targets with ``alter_consumer_group_offsets``.

Offsets count records: with ``stream produce --segment N`` one record holds up to N events.
"""

import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from confluent_kafka import (
    OFFSET_INVALID,
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec  # type: ignore[attr-defined,unused-ignore]

from stream.config import Settings

# What a fresh cluster answers while it creates its group-offsets topic: worth asking again.
COORDINATOR_STARTING = frozenset(
    {
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.NOT_COORDINATOR,
        KafkaError._TIMED_OUT,
        KafkaError._TRANSPORT,
    }
)


class PlanError(ValueError):
    """A reset that cannot be planned as asked (unknown partition, conflicting options)."""


class GroupBusy(RuntimeError):
    """The group has live members: moving its offsets now would race the workers."""

    def __init__(self, group: "GroupState") -> None:
        self.group = group
        names = "; ".join(str(m) for m in group.members)
        super().__init__(
            f"group {group.group} has {len(group.members)} live member(s): {names}"
            " (stop the workers and retry)"
        )


# -- what the broker holds ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PartitionOffsets:
    """One input partition as the group sees it."""

    partition: int
    low: int  # earliest retained offset
    high: int  # end offset: the next record written gets this offset
    committed: int | None  # the group's committed offset (next to read); None: never

    @property
    def position(self) -> int:
        """Where the group resumes: the committed offset, or the earliest retained one
        when there is none or it is out of range (the worker's auto.offset.reset)."""
        c = self.committed
        return c if c is not None and self.low <= c <= self.high else self.low

    @property
    def lag(self) -> int:
        return self.high - self.position


@dataclass(frozen=True, slots=True)
class Member:
    member_id: str
    client_id: str
    host: str
    partitions: tuple[int, ...]  # input partitions assigned to it

    def __str__(self) -> str:
        return f"{self.client_id} on {self.host.lstrip('/')} (member {self.member_id})"


@dataclass(frozen=True, slots=True)
class GroupState:
    group: str
    state: str  # STABLE, EMPTY, PREPARING_REBALANCE, DEAD (never used) ...
    members: tuple[Member, ...]


# -- targets and the plan (pure) ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Earliest:
    def __str__(self) -> str:
        return "earliest"


@dataclass(frozen=True, slots=True)
class Latest:
    def __str__(self) -> str:
        return "latest"


@dataclass(frozen=True, slots=True)
class AtTime:
    ms: int  # epoch milliseconds: the first record with a timestamp at or after it

    def __str__(self) -> str:
        return datetime.fromtimestamp(self.ms / 1000, UTC).isoformat(timespec="milliseconds")


@dataclass(frozen=True, slots=True)
class AtOffsets:
    offsets: tuple[tuple[int, int], ...]  # (partition, offset); only these partitions move

    def __str__(self) -> str:
        return "offsets " + ", ".join(f"{p}:{o}" for p, o in self.offsets)


Target = Earliest | Latest | AtTime | AtOffsets


@dataclass(frozen=True, slots=True)
class PartitionPlan:
    partition: int
    low: int
    high: int
    committed: int | None
    target: int
    note: str = ""  # why the target is not exactly what was asked

    @property
    def position(self) -> int:
        return PartitionOffsets(self.partition, self.low, self.high, self.committed).position

    @property
    def changes(self) -> bool:
        """Whether applying writes anything: the stored commit differs from the target."""
        return self.committed != self.target

    @property
    def rereads(self) -> int:
        """Records already read that the group reads again."""
        return max(0, self.position - self.target)

    @property
    def skips(self) -> int:
        """Records not yet read that the group will never read."""
        return max(0, self.target - self.position)

    @property
    def backlog(self) -> int:
        """Records the group reads from the target to today's end."""
        return self.high - self.target


@dataclass(frozen=True, slots=True)
class ResetPlan:
    group: str
    topic: str
    target: Target
    partitions: tuple[PartitionPlan, ...]

    @property
    def changes(self) -> tuple[PartitionPlan, ...]:
        return tuple(p for p in self.partitions if p.changes)

    @property
    def rereads(self) -> int:
        return sum(p.rereads for p in self.partitions)

    @property
    def skips(self) -> int:
        return sum(p.skips for p in self.partitions)

    @property
    def backlog(self) -> int:
        return sum(p.backlog for p in self.partitions)

    def targets(self) -> dict[int, int]:
        return {p.partition: p.target for p in self.partitions}


def plan_reset(
    offsets: Sequence[PartitionOffsets],
    target: Target,
    *,
    group: str,
    topic: str,
    only: Collection[int] | None = None,
    times: Mapping[int, int | None] | None = None,
) -> ResetPlan:
    """Each selected partition's target offset, clamped to what the topic retains.

    ``only`` limits the reset to those partitions (``--partitions``); ``AtOffsets`` moves
    only the partitions it names. ``times`` is the broker's answer to ``offsets_for_times``
    for an ``AtTime`` target (``None``: no record at or after the time, so the end).
    Applying the same plan twice is a no-op: the second time nothing ``changes``.
    """
    known = {p.partition: p for p in offsets}
    available = ", ".join(map(str, sorted(known))) or "none"
    wanted = set(known) if only is None else set(only)
    unknown = sorted(wanted - set(known))
    if unknown:
        raise PlanError(f"{topic} has no partition {unknown[0]} (partitions: {available})")
    requested: dict[int, int | None] = {}
    if isinstance(target, AtOffsets):
        for partition, offset in target.offsets:
            if partition not in known:
                raise PlanError(f"{topic} has no partition {partition} (partitions: {available})")
            if partition not in wanted:
                raise PlanError(f"partition {partition} is given an offset but not --partitions")
            if partition in requested:
                raise PlanError(f"partition {partition} is given two offsets")
            requested[partition] = offset
    else:
        for partition in wanted:
            current = known[partition]
            if isinstance(target, Earliest):
                requested[partition] = current.low
            elif isinstance(target, Latest):
                requested[partition] = current.high
            else:
                if times is None or partition not in times:
                    raise PlanError(f"no offset-for-time answer for partition {partition}")
                requested[partition] = times[partition]
    plans = []
    for partition in sorted(requested):
        current, asked = known[partition], requested[partition]
        if asked is None:
            chosen, note = current.high, "no record at or after the time: end"
        elif asked < current.low:
            chosen, note = current.low, f"{asked} not retained: earliest"
        elif asked > current.high:
            chosen, note = current.high, f"{asked} past the end: end"
        else:
            chosen, note = asked, ""
        plans.append(
            PartitionPlan(partition, current.low, current.high, current.committed, chosen, note)
        )
    return ResetPlan(group, topic, target, tuple(plans))


# -- the broker -----------------------------------------------------------------------


def _check(error: KafkaError | None, what: str) -> None:
    if error is not None:
        raise RuntimeError(f"{what}: {error.str()}")


def partitions_of(admin: AdminClient, topic: str, timeout: float = 20.0) -> list[int]:
    # Listing every topic (no name) never auto-creates one on brokers that allow it.
    metadata = admin.list_topics(timeout=timeout).topics.get(topic)
    if metadata is None:
        raise PlanError(f"topic {topic} does not exist")
    return sorted(metadata.partitions)


def watermarks(
    admin: AdminClient, topic: str, partitions: Sequence[int], timeout: float = 20.0
) -> dict[int, tuple[int, int]]:
    """(earliest, end) offsets per partition, from ListOffsets."""
    found: dict[int, list[int]] = {p: [] for p in partitions}
    specs = (OffsetSpec.earliest(), OffsetSpec.latest())  # type: ignore[no-untyped-call,unused-ignore]
    for spec in specs:
        request = {TopicPartition(topic, p): spec for p in partitions}
        for tp, future in admin.list_offsets(request, request_timeout=timeout).items():
            found[tp.partition].append(future.result().offset)
    return {p: (low, high) for p, (low, high) in found.items()}


def committed_offsets(
    admin: AdminClient, group: str, topic: str, partitions: Sequence[int], timeout: float = 20.0
) -> dict[int, int | None]:
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in partitions])
    future = admin.list_consumer_group_offsets([request], request_timeout=timeout)[group]
    result: dict[int, int | None] = dict.fromkeys(partitions)
    for tp in future.result().topic_partitions or []:
        _check(tp.error, f"committed offset of {topic}[{tp.partition}]")
        result[tp.partition] = None if tp.offset == OFFSET_INVALID else tp.offset
    return result


def snapshot(
    admin: AdminClient, group: str, topic: str, timeout: float = 20.0
) -> list[PartitionOffsets]:
    """Every partition of ``topic``: watermarks and the group's committed offset."""
    partitions = partitions_of(admin, topic, timeout)
    marks = watermarks(admin, topic, partitions, timeout)
    committed = committed_offsets(admin, group, topic, partitions, timeout)
    return [PartitionOffsets(p, *marks[p], committed[p]) for p in partitions]


def describe_group(
    admin: AdminClient, group: str, topic: str | None = None, timeout: float = 20.0
) -> GroupState:
    """The group's state and live members (with their ``topic`` partitions).

    A fresh cluster answers "coordinator not available / loading" until it has created its
    group-offsets topic: asked again until ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        left = max(deadline - time.monotonic(), 0.5)
        try:
            found = admin.describe_consumer_groups([group], request_timeout=left)[group].result()
            break
        except KafkaException as error:
            if error.args[0].code() not in COORDINATOR_STARTING or time.monotonic() >= deadline:
                raise
            time.sleep(0.25)
    members = tuple(
        Member(
            m.member_id,
            m.client_id,
            m.host,
            tuple(
                sorted(
                    tp.partition
                    for tp in m.assignment.topic_partitions
                    if topic is None or tp.topic == topic
                )
            ),
        )
        for m in found.members
    )
    state = getattr(found.state, "name", str(found.state))
    return GroupState(group, state, members)


def ensure_no_members(
    admin: AdminClient, group: str, topic: str | None = None, timeout: float = 20.0
) -> GroupState:
    """The group's state, or ``GroupBusy`` when it has live members. ``stream replay``
    asks again right before each write: a worker may have joined since the plan."""
    state = describe_group(admin, group, topic, timeout)
    if state.members:
        raise GroupBusy(state)
    return state


def offsets_for_time(
    settings: Settings, topic: str, partitions: Sequence[int], ms: int, timeout: float = 20.0
) -> dict[int, int | None]:
    """The first offset at or after ``ms`` per partition (``None``: none that late)."""
    consumer = Consumer(
        settings.librdkafka()
        | {
            # A private group id that never joins or commits: only for the lookup.
            "group.id": f"{settings.app_id}-replay-lookup",
            "enable.auto.commit": False,
            "log_level": 2,
        }
    )
    try:
        found = consumer.offsets_for_times(
            [TopicPartition(topic, p, ms) for p in partitions], timeout=timeout
        )
    finally:
        consumer.close()
    result: dict[int, int | None] = {}
    for tp in found:
        _check(tp.error, f"offset for time in {topic}[{tp.partition}]")
        result[tp.partition] = tp.offset if tp.offset >= 0 else None
    return result


def apply_reset(admin: AdminClient, plan: ResetPlan, timeout: float = 20.0) -> list[int]:
    """Commit the plan's targets for the group; returns the partitions written.

    The broker refuses (UNKNOWN_MEMBER_ID) if the group gained a member since we looked,
    so this cannot race a worker that just started: it raises instead.
    """
    changing = plan.changes
    if not changing:
        return []
    request = ConsumerGroupTopicPartitions(
        plan.group, [TopicPartition(plan.topic, p.partition, p.target) for p in changing]
    )
    future = admin.alter_consumer_group_offsets([request], request_timeout=timeout)[plan.group]
    written = []
    for tp in future.result().topic_partitions or []:
        if tp.error is not None:
            raise RuntimeError(
                f"cannot move {plan.topic}[{tp.partition}] of group {plan.group}: {tp.error.str()}"
            )
        written.append(tp.partition)
    return sorted(written)
