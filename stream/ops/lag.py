"""The worker group's lag on the input topic: committed offset, end offset, members.

Read with the AdminClient only (ListOffsets, OffsetFetch, DescribeGroups), so looking
never joins the group, commits, or disturbs a running replay.
"""

import time
from dataclasses import dataclass
from typing import Any

from confluent_kafka.admin import AdminClient

from stream.config import Settings
from stream.ops.admin import admin as admin_client
from stream.ops.offsets import GroupState, PartitionOffsets, describe_group, snapshot


@dataclass(frozen=True, slots=True)
class LagReport:
    group: str
    topic: str
    partitions: tuple[PartitionOffsets, ...]
    state: GroupState
    taken_at: float  # time.monotonic() when read: for rates

    @property
    def lag(self) -> int:
        return sum(p.lag for p in self.partitions)

    @property
    def position(self) -> int:
        """Sum of the positions: grows by one per record the group reads."""
        return sum(p.position for p in self.partitions)

    @property
    def end(self) -> int:
        """Sum of the end offsets: grows by one per record produced."""
        return sum(p.high for p in self.partitions)

    def as_json(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "topic": self.topic,
            "state": self.state.state,
            "lag": self.lag,
            "partitions": [
                {
                    "partition": p.partition,
                    "earliest": p.low,
                    "committed": p.committed,
                    "end": p.high,
                    "lag": p.lag,
                }
                for p in self.partitions
            ],
            "members": [
                {
                    "memberId": m.member_id,
                    "clientId": m.client_id,
                    "host": m.host,
                    "partitions": list(m.partitions),
                }
                for m in self.state.members
            ],
        }


def read_lag(
    settings: Settings, admin: AdminClient | None = None, timeout: float = 20.0
) -> LagReport:
    admin = admin or admin_client(settings)
    group, topic = settings.app_id, settings.input_topic
    partitions = tuple(snapshot(admin, group, topic, timeout))
    state = describe_group(admin, group, topic, timeout)
    return LagReport(group, topic, partitions, state, time.monotonic())
