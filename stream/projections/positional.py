"""The positional surface fold: the ``measure()`` X-ray, not a projection.

Contract: "The positional X-ray"; background: docs/notes/008.

It keeps every surface node ``(seq, type, price, system)`` in surface order, so it can
price any replacement exactly — and that is why the projections do not use it: its size
grows with the session. It is the yardstick the O(1) projections are verified against.

Plan/commit: ``plan`` does every fallible step against the read-only surface; ``commit``
applies the plan in place and cannot fail. Appends are amortised O(1) (a list append);
a replace costs one O(surface) lookup and splice, which only replacements pay.
"""

from dataclasses import dataclass, field
from typing import Any, NamedTuple

from stream.contract.data import envelope
from stream.contract.errors import ContractError
from stream.contract.events import APPEND, Event, Replace
from stream.pricing.estimate import price_envelope_system, price_envelope_tools
from stream.projections.claim import surface_price


class Node(NamedTuple):
    seq: int
    type: str
    price: int

    @property
    def system(self) -> bool:
        return self.type == "system/message"


class Plan(NamedTuple):
    start: int  # index of the first replaced node (len(nodes) for an append)
    stop: int  # index after the last replaced node
    node: Node
    delta: int


@dataclass(slots=True)
class Surface:
    nodes: list[Node] = field(default_factory=list)
    total: int = 0
    tools: int = 0
    header_system: int = 0

    def plan(self, event: Event) -> Plan | None:
        """The surface change an event makes (None for non-surface events); pure."""
        if event.type == "request/header":
            return None
        if event.op is None and event.surface_error is None:
            return None
        node = Node(event.seq, event.type, surface_price(event))
        op = event.op
        if op == APPEND:
            size = len(self.nodes)
            return Plan(size, size, node, node.price)
        assert isinstance(op, Replace)
        seqs = [n.seq for n in self.nodes]
        try:
            start, end = seqs.index(op.start), seqs.index(op.end)
        except ValueError:
            start = end = -1
        if start < 0 or end < start:
            raise ContractError(
                f"replace at seq {event.seq} names range {op.start}-{op.end}, which is not a"
                " range of current surface nodes"
            )
        removed = sum(n.price for n in self.nodes[start : end + 1])
        return Plan(start, end + 1, node, node.price - removed)

    def commit(self, plan: Plan) -> None:
        if plan.start == len(self.nodes):
            self.nodes.append(plan.node)
        else:
            self.nodes[plan.start : plan.stop] = [plan.node]
        self.total += plan.delta

    def fold(self, event: Event) -> Plan | None:
        """Plan then commit; on error nothing changes and the same event errors again."""
        if event.error is not None:
            raise ContractError(event.error)
        if event.type == "request/header":
            system, tools = envelope(event)
            self.header_system = price_envelope_system(system)
            self.tools = price_envelope_tools(tools)
            return None
        plan = self.plan(event)
        if plan is not None:
            self.commit(plan)
        return plan

    def breakdown(self) -> dict[str, int]:
        """The breakdown this surface implies, for comparison with ``contextBreakdown``."""
        for node in reversed(self.nodes):
            if node.system and node.price > 0:
                return {
                    "systemTokens": node.price,
                    "toolsTokens": self.tools,
                    "messageTokens": max(0, self.total - node.price),
                }
        return {
            "systemTokens": self.header_system,
            "toolsTokens": self.tools,
            "messageTokens": self.total,
        }

    def checkpoint(self) -> list[Any]:
        """What a per-node checkpoint of this surface would have to store."""
        return [[n.seq, n.price, n.system] for n in self.nodes]
