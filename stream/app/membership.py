"""Static group membership (KIP-345): leaving for good, which a static member does not do.

A worker joins its group with an instance id (``Settings.instance_id``: the pod name), so
one that crashes and is back within the session timeout is handed its own partitions and
no other member pauses (note 027). aiokafka then never sends LeaveGroup: its coordinator
skips it for a static member, and the group would keep a scaled-down worker's partitions
idle for the whole session timeout. Two ways out, both KIP-345's LeaveGroup v3, which
names members by instance id (aiokafka 0.14 has only v0-v1, which cannot):

- ``leave_on_close``: the worker's own consumer leaves as it closes, after its heartbeat
  and coordination tasks have stopped (a leave before would be answered by a rejoin);
- ``remove``: an operator's admin removal (``stream leave``) of members that are gone or
  going, from outside the group (member id empty, the instance id alone).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import MethodType
from typing import Any, TypeAlias

from aiokafka import errors  # type: ignore[import-untyped]
from aiokafka.client import (  # type: ignore[import-untyped]
    AIOKafkaClient,
    ConnectionGroup,
    CoordinationType,
)
from aiokafka.protocol.api import Request, RequestStruct, Response  # type: ignore[import-untyped]
from aiokafka.protocol.types import Array, Int16, Int32, Schema, String  # type: ignore[import-untyped]

from stream.config import Settings

log = logging.getLogger("stream.membership")


class LeaveGroupResponse_v3(Response):  # type: ignore[misc]
    API_KEY = 13
    API_VERSION = 3
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("error_code", Int16),
        (
            "members",
            Array(
                ("member_id", String("utf-8")),
                ("group_instance_id", String("utf-8")),
                ("error_code", Int16),
            ),
        ),
    )


class LeaveGroupRequest_v3(RequestStruct):  # type: ignore[misc]
    API_KEY = 13
    API_VERSION = 3
    RESPONSE_TYPE = LeaveGroupResponse_v3
    SCHEMA = Schema(
        ("group", String("utf-8")),
        ("members", Array(("member_id", String("utf-8")), ("group_instance_id", String("utf-8")))),
    )


LeaveStruct: TypeAlias = LeaveGroupRequest_v3


class LeaveGroup(Request[LeaveStruct]):  # type: ignore[misc]
    """LeaveGroup v3 (Kafka 2.4+): members by (member id, instance id); a member id of
    ``""`` removes whoever holds the instance id (the admin removal)."""

    API_KEY = 13

    def __init__(self, group: str, members: Sequence[tuple[str, str]]) -> None:
        self.group = group
        self.members = list(members)

    def build(self, request_struct_class: type[LeaveStruct]) -> LeaveStruct:
        return request_struct_class(self.group, self.members)


@dataclass(frozen=True)
class Left:
    """One member's answer: ``error`` is None when it left (or was removed)."""

    instance_id: str
    error: str | None


# KIP-345's own error, which aiokafka 0.14 does not name.
UNNAMED: dict[int, str] = {82: "FencedInstanceIdError"}


def error_name(code: int) -> str | None:
    if code == 0:
        return None
    return UNNAMED.get(code) or errors.for_code(code).__name__


def outcome(response: Any) -> list[Left]:
    """The broker's answer, per member: a group-wide error is every member's."""
    group_error = error_name(response.error_code)
    found = [
        Left(instance_id, group_error or error_name(code))
        for _member_id, instance_id, code in response.members
    ]
    if not found and group_error is not None:
        found.append(Left("", group_error))
    return found


def leave_on_close(consumer: Any, leaving: Callable[[], bool]) -> None:
    """Make a static member's ``consumer`` leave its group as it closes, when
    ``leaving()`` says so then (a dynamic member already does: aiokafka's own leave)."""
    coordinator = consumer._coordinator
    instance_id = coordinator._group_instance_id
    if instance_id is None:
        return
    dynamic_leave = coordinator._maybe_leave_group

    async def maybe_leave_group(self: Any) -> None:
        # Only as the consumer closes: aiokafka also calls this from its heartbeat when the
        # fetcher sat idle past max.poll.interval (a worker held up by a Redis outage),
        # and there a static member must keep its place, not leave.
        if not self._closing.done() or not leaving() or self.generation <= 0:
            await dynamic_leave()  # aiokafka's: nothing sent for a static member
            return
        request = LeaveGroup(self.group_id, [(self.member_id, instance_id)])
        try:
            left = outcome(await self._send_req(request))
        except (errors.KafkaError, NotImplementedError) as error:
            # The group then keeps the partitions for the session timeout, as after a crash.
            log.warning("could not leave the group as %s: %r", instance_id, error)
        else:
            log.info("left the group as %s: %s", instance_id, left)
        self.reset_generation()

    coordinator._maybe_leave_group = MethodType(maybe_leave_group, coordinator)


async def remove(settings: Settings, instance_ids: Sequence[str]) -> list[Left]:
    """KIP-345's admin removal: the members holding ``instance_ids`` leave the worker's
    group now (one rebalance for all), whether their workers are gone or still stopping."""
    security = settings.kafka
    client = AIOKafkaClient(
        bootstrap_servers=settings.bootstrap_servers.split(","),
        client_id="stream-leave",
        security_protocol=security.protocol,
        ssl_context=security.ssl_context() if security.uses_ssl else None,
        sasl_mechanism=security.sasl_mechanism if security.uses_sasl else "PLAIN",
        sasl_plain_username=security.sasl_username,
        sasl_plain_password=security.sasl_password,
    )
    try:
        await client.bootstrap()
        node = await client.coordinator_lookup(CoordinationType.GROUP, settings.app_id)
        request = LeaveGroup(settings.app_id, [("", instance) for instance in instance_ids])
        response = await client.send(node, request, group=ConnectionGroup.COORDINATION)
    finally:
        await client.close()
    return outcome(response)


__all__ = ["LeaveGroup", "Left", "leave_on_close", "outcome", "remove"]
