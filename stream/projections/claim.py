"""The shadow-price claim, shared by the two surface projections.

Contract: "The shadow-price claim".

A ``compaction/summary`` or ``compaction/prune`` states the heuristic price of the exact
range the very next event replaces. Keeping only that one pending claim (not per-node
prices) is what keeps projection state O(1) over a session's life.
"""

from typing import NamedTuple

from stream.contract.data import surface_message
from stream.contract.errors import ContractError
from stream.contract.events import APPEND, Event, Replace
from stream.pricing.estimate import price_message, price_system_message


class Claim(NamedTuple):
    start: int
    end: int
    tokens: int


# The last event priced and its price, one tuple (swapped whole, so a reader never pairs
# one event with another's price). contextPressure and contextBreakdown both price every
# surface event, one right after the other; the second takes the first's price.
_last_priced: tuple[Event | None, int] = (None, 0)


def surface_price(event: Event) -> int:
    """The price of the node a surface event puts on the surface (0 for a usage-only step)."""
    global _last_priced
    last = _last_priced
    if last[0] is event:
        return last[1]
    if event.surface_error is not None:
        raise ContractError(event.surface_error)
    message = surface_message(event)
    if message is None:
        price = 0
    elif event.type == "system/message":
        price = price_system_message(message)
    else:
        price = price_message(message)
    _last_priced = (event, price)
    return price


def check_claim(start: int, end: int, op: Replace, seq: int) -> None:
    """An armed claim over ``start..end`` must name the range replaced next: adjacent events
    that disagree are a live producer bug, and failing loud beats a silently drifting total."""
    if start != op.start or end != op.end:
        raise ContractError(
            f"replace at seq {seq} over range {op.start}-{op.end} has no adjacent shadow"
            f" price (armed claim covers {start}-{end})"
        )


def surface_delta(claim: Claim | None, event: Event, price: int) -> int:
    """The signed surface change of a surface event under the claim armed before it.

    A replace without a claim (never armed, or expired by an intervening event) folds at
    zero: O(1) state cannot price the replaced range, and historical logs must stay
    replayable (docs/notes/009). The total drifts in the safe direction.
    """
    op = event.op
    if op == APPEND:
        return price
    assert isinstance(op, Replace)
    if claim is None:
        return 0
    check_claim(claim.start, claim.end, op, event.seq)
    return price - claim.tokens
