"""The per-session processor (SPEC §5).

Each projection keeps its own cursor (last applied seq), state version and fault. For an
event, every projection's next state is planned first against the committed state (the
projections are pure, so planning cannot disturb it), then all plans are committed
together. A projection that errors is faulted at that seq: its state and cursor stay, it
takes no later event, the others carry on. The same input always gives the same result,
so replaying an event already applied changes nothing.
"""

from dataclasses import dataclass
from enum import Enum
from typing import Any, Final, NamedTuple

from stream.contract.errors import ContractError
from stream.contract.events import Event
from stream.projections.base import Projection
from stream.projections.breakdown import CONTEXT_BREAKDOWN
from stream.projections.pressure import CONTEXT_PRESSURE
from stream.projections.usage import TOKEN_USAGE

# Output order of the views in every update.
PROJECTIONS: Final[tuple[Projection, ...]] = (CONTEXT_PRESSURE, CONTEXT_BREAKDOWN, TOKEN_USAGE)


class Fault(NamedTuple):
    seq: int
    error: str


@dataclass(slots=True)
class Slot:
    """One projection's committed position in one session."""

    state: Any
    cursor: int = -1
    fault: Fault | None = None


class Outcome(Enum):
    """How one input event was accounted for; the service counts these."""

    FOLDED = "folded"  # at least one projection applied it
    DUPLICATE = "duplicate"  # already applied (or already refused) everywhere
    FAULTED = "faulted"  # a projection faulted on it, or every projection is faulted


@dataclass(slots=True)
class SessionRecord:
    """Everything kept per session: O(1) in the number of events."""

    slots: list[Slot]
    seen: int = -1  # highest seq offered, so a redelivered refused event is a duplicate

    @classmethod
    def new(cls) -> "SessionRecord":
        return cls([Slot(p.init()) for p in PROJECTIONS])


def _gap(cursor: int, seq: int) -> Fault:
    """A seq past ``cursor + 1``: events are missing, and folding on would drift silently."""
    return Fault(seq, f"gap: expected seq {cursor + 1}, got {seq}")


def _plan(projection: Projection, slot: Slot, event: Event) -> Any:
    """The slot's next state, a ``Fault``, or ``None`` when the event does not apply."""
    seq = event.seq
    if seq <= slot.cursor or slot.fault is not None:
        return None
    if seq != slot.cursor + 1:
        return _gap(slot.cursor, seq)
    try:
        return projection.apply(slot.state, event)
    except ContractError as error:
        return Fault(seq, str(error))
    except (RecursionError, ValueError, TypeError, OverflowError) as error:
        # Hostile shapes (absurd nesting, say) must fault the projection, not the worker.
        return Fault(seq, f"unprocessable event: {type(error).__name__}: {error}")


def process(record: SessionRecord, event: Event) -> Outcome:
    """Fold one event into a session record: plan every projection, then commit all."""
    if event.passive:
        return _process_passive(record, event.seq)
    slots = record.slots
    plans = [_plan(p, slot, event) for p, slot in zip(PROJECTIONS, slots, strict=True)]
    applied = faulted = False
    for slot, plan in zip(slots, plans, strict=True):
        if plan is None:
            continue
        if type(plan) is Fault:
            slot.fault = plan
            faulted = True
        else:
            slot.state = plan
            slot.cursor = event.seq
            applied = True
    return _outcome(record, event.seq, applied, faulted)


def _process_passive(record: SessionRecord, seq: int) -> Outcome:
    """``process`` for an event no projection reads (most of a log: streamed deltas).

    Its transition cannot fail and touches only the projection's own slot, so each slot
    commits directly; the result is the same as planning all three first.
    """
    applied = faulted = False
    for projection, slot in zip(PROJECTIONS, record.slots, strict=True):
        cursor = slot.cursor
        if seq <= cursor or slot.fault is not None:
            continue
        if seq != cursor + 1:
            slot.fault = _gap(cursor, seq)
            faulted = True
            continue
        slot.state = projection.passive(slot.state)
        slot.cursor = seq
        applied = True
    if applied and not faulted and seq > record.seen:  # the common case, decided inline
        record.seen = seq
        return Outcome.FOLDED
    return _outcome(record, seq, applied, faulted)


def _outcome(record: SessionRecord, seq: int, applied: bool, faulted: bool) -> Outcome:
    """Account for an event exactly once, and move the session's high-water mark."""
    seen = record.seen
    if seq > seen:
        record.seen = seq
    if faulted:
        return Outcome.FAULTED
    if applied:
        return Outcome.FOLDED
    # Taken by no projection: a duplicate if every projection already had it (applied it,
    # or was already refusing from its fault on); otherwise a new event a fault blocks.
    if seq <= seen and all(
        seq <= slot.cursor or (slot.fault is not None and slot.fault.seq <= seq)
        for slot in record.slots
    ):
        return Outcome.DUPLICATE
    return Outcome.FAULTED


def process_run(record: SessionRecord, seq0: int, count: int) -> None:
    """Fold ``count`` consecutive passive events from ``seq0`` at once (a packed chunk row).

    Equivalent to ``process`` on each of them in turn: passive events change no view, so
    per projection the run is a duplicate prefix, then one claim expiry and a cursor jump,
    or a gap at the first event past the cursor.
    """
    last = seq0 + count - 1
    for projection, slot in zip(PROJECTIONS, record.slots, strict=True):
        if slot.fault is not None or last <= slot.cursor:
            continue
        if seq0 > slot.cursor + 1:
            slot.fault = _gap(slot.cursor, seq0)
            continue
        slot.state = projection.passive(slot.state)
        slot.cursor = last
    if last > record.seen:
        record.seen = last


def views(record: SessionRecord) -> dict[str, dict[str, int]]:
    return {p.key: p.view(slot.state) for p, slot in zip(PROJECTIONS, record.slots, strict=True)}


def faults(record: SessionRecord) -> dict[str, dict[str, Any]]:
    return {
        p.key: {"seq": slot.fault.seq, "error": slot.fault.error}
        for p, slot in zip(PROJECTIONS, record.slots, strict=True)
        if slot.fault is not None
    }


def update(session_id: str, seq: int, record: SessionRecord) -> dict[str, Any]:
    """The published shape (SPEC §6): views in a fixed order, ``faults`` only when any."""
    out: dict[str, Any] = {"sessionId": session_id, "seq": seq}
    out.update(views(record))
    found = faults(record)
    if found:
        out["faults"] = found
    return out
