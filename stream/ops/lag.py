"""The worker group's lag on the input topic: committed offset, end offset, members.

Read with the AdminClient only (ListOffsets, OffsetFetch, DescribeGroups), so looking
never joins the group, commits, or disturbs a running replay.

Also pure helpers for ``stream lag --watch``: ``Stalls`` flags a partition whose committed
offset has not moved for a while although records wait, and ``behind`` names what is left.
(Whether the brokers can be used at all is ``stream.ops.probe``'s, before any of this.)
"""

import time
from collections.abc import Mapping
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


class Stalls:
    """Which partitions make no progress: records wait (``lag > 0``) and the committed
    offset has not moved for ``after`` seconds, over successive reports.

    The clock of a partition restarts whenever its committed offset moves or nothing
    waits in it, so a partition idle at lag 0 is not flagged the moment a record arrives.
    """

    def __init__(self, after: float) -> None:
        self.after = after
        self._since: dict[int, tuple[int | None, float]] = {}  # (committed, since when)
        self._last: LagReport | None = None

    def observe(self, report: LagReport) -> None:
        for p in report.partitions:
            seen = self._since.get(p.partition)
            if seen is None or seen[0] != p.committed or p.lag == 0:
                self._since[p.partition] = (p.committed, report.taken_at)
        self._last = report

    def waiting(self) -> dict[int, float]:
        """Seconds each partition with records waiting has kept its committed offset."""
        if self._last is None:
            return {}
        now = self._last.taken_at
        return {
            p.partition: now - self._since[p.partition][1]
            for p in self._last.partitions
            if p.lag > 0
        }

    def stalled(self) -> dict[int, float]:
        """The partitions stalled in the last report, with how long (seconds)."""
        return {p: s for p, s in self.waiting().items() if s >= self.after}


def behind(report: LagReport, stalled: Mapping[int, float] | None = None) -> list[str]:
    """One line per partition with records left: its offsets, lag and whether stalled."""
    stalled = stalled or {}
    lines = []
    for p in report.partitions:
        if p.lag <= 0:
            continue
        committed = "-" if p.committed is None else f"{p.committed:,}"
        line = f"partition {p.partition}: lag {p.lag:,} (committed {committed}, end {p.high:,})"
        if p.partition in stalled:
            line += f", stalled: no commit for {stalled[p.partition]:.0f} s"
        lines.append(line)
    return lines


def caught_up_status(report: LagReport) -> int:
    """``stream lag --until-caught-up``'s exit status: 0 once the lag is 0, else 1."""
    return 0 if report.lag == 0 else 1
