"""The per-session processor (contract: "Per-session processing").

Each projection keeps its own slot: cursor (last applied seq), state and fault. For an
event, every projection's next state is planned first against the committed state (the
projections are pure, so planning cannot disturb it), then all plans are committed
together. A projection that errors is faulted at that seq: its state and cursor stay, it
takes no later event, the others carry on. The same input always gives the same result,
so replaying an event already applied changes nothing.

The record also keeps the session's accounting — how many events it folded, skipped as
duplicates and faulted — so the totals are exact whatever was redelivered: they are part
of the state, committed with it.
"""

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from enum import Enum
from functools import lru_cache
from typing import Any, Final, NamedTuple

from stream.contract.errors import ContractError, safe_text
from stream.contract.events import Event
from stream.contract.storage import ChunkRun
from stream.projections.base import Projection
from stream.projections.breakdown import CONTEXT_BREAKDOWN, ContextBreakdown
from stream.projections.pressure import CONTEXT_PRESSURE
from stream.projections.usage import TOKEN_USAGE

# Output order of the views in every update; with the default limits.
PROJECTIONS: Final[tuple[Projection, ...]] = (CONTEXT_PRESSURE, CONTEXT_BREAKDOWN, TOKEN_USAGE)
MAX_SYSTEM_PROMPTS: Final = 1_000


@lru_cache(maxsize=8)
def projections(max_system_prompts: int = MAX_SYSTEM_PROMPTS) -> tuple[Projection, ...]:
    """The projections a fold runs under its limits (``STREAM_MAX_SYSTEM_PROMPTS``): one
    value per limit, passed to every record the fold makes, never a shared object changed."""
    if max_system_prompts == MAX_SYSTEM_PROMPTS:
        return PROJECTIONS
    return (CONTEXT_PRESSURE, ContextBreakdown(max_system_prompts), TOKEN_USAGE)


class Fault(NamedTuple):
    seq: int
    error: str


def fault(seq: int, error: str) -> Fault:
    """A fault whose text is bounded and encodable, whatever input it quotes."""
    return Fault(seq, safe_text(error))


@dataclass(slots=True)
class Slot:
    """One projection's committed position in one session.

    ``rebuilding``: the projection's stored state was discarded (its state version was
    bumped) while the session was already under way. It waits, without faulting, for a
    replay that starts at the session's first event (contract: "Per-session processing").
    """

    projection: Projection
    state: Any
    cursor: int = -1
    fault: Fault | None = None
    rebuilding: bool = False


class Outcome(Enum):
    """How one input event was accounted for; the service counts these."""

    FOLDED = "folded"  # at least one projection applied it
    DUPLICATE = "duplicate"  # already applied (or already refused) everywhere
    FAULTED = "faulted"  # a projection faulted on it, or every projection is faulted


@dataclass(slots=True)
class Tally:
    """Events accounted for, by outcome. Kept in the session row and summed for totals."""

    folded: int = 0
    duplicate: int = 0
    faulted: int = 0

    def count(self, outcome: Outcome, n: int = 1) -> None:
        if outcome is Outcome.FOLDED:
            self.folded += n
        elif outcome is Outcome.DUPLICATE:
            self.duplicate += n
        else:
            self.faulted += n

    def add(self, other: "Tally") -> None:
        self.folded += other.folded
        self.duplicate += other.duplicate
        self.faulted += other.faulted

    @property
    def total(self) -> int:
        return self.folded + self.duplicate + self.faulted

    def as_list(self) -> list[int]:
        return [self.folded, self.duplicate, self.faulted]

    def as_tuple(self) -> tuple[int, int, int]:
        """``(folded, duplicate, faulted)``: how rows, records and Redis carry a tally."""
        return (self.folded, self.duplicate, self.faulted)


@dataclass(slots=True)
class SessionRecord:
    """Everything kept per session: O(1) in the number of events."""

    slots: dict[str, Slot]  # by projection key, in PROJECTIONS order
    seen: int = -1  # highest seq offered: the published seq
    tally: Tally = field(default_factory=Tally)
    offset: int = -1  # highest input offset applied (the worker's redelivery check)
    gen: int = 0  # the session's own rebuild generation (a reset), 0: the deployment's
    # The latest event time the session took (epoch ms; None: none yet, or a row written
    # before times were kept). Published as the update's ``time``.
    time: int | None = None
    # The partition's stream time after the session's latest event: what its expiry is
    # measured from (contract: "Session expiry"). None: not known (an older row).
    touched: int | None = None
    # Events of this key's earlier lives (before a reset, or before it expired and
    # started over): still part of every total, never folded again.
    carried: Tally = field(default_factory=Tally)

    @property
    def accounted(self) -> Tally:
        """Every event the key ever took: this life's tally and the carried one."""
        t, c = self.tally, self.carried
        return Tally(t.folded + c.folded, t.duplicate + c.duplicate, t.faulted + c.faulted)

    @classmethod
    def new(cls, folds: tuple[Projection, ...] = PROJECTIONS) -> "SessionRecord":
        return cls({p.key: Slot(p, p.init()) for p in folds})

    def __iter__(self) -> Iterator[Slot]:
        return iter(self.slots.values())


# What a slot does with an event (or a run of events) given its cursor.
SKIP, APPLY, GAP = 0, 1, 2


def _step(slot: Slot, first: int, last: int) -> int:
    """The cursor rule, for one event (``first == last``) or a consecutive run.

    Everything at or below the cursor is applied already; a faulted slot takes nothing
    more; the next seq must be ``cursor + 1``, anything later is a gap (events are
    missing, and folding on would drift silently). A rebuilding slot waits for seq 0.
    """
    if slot.fault is not None or last <= slot.cursor:
        return SKIP
    if first > slot.cursor + 1:
        return SKIP if slot.rebuilding else GAP
    slot.rebuilding = False
    return APPLY


def _gap(slot: Slot, seq: int) -> Fault:
    return fault(seq, f"gap: expected seq {slot.cursor + 1}, got {seq}")


def _plan(slot: Slot, event: Event) -> Any:
    """The slot's next state, a ``Fault``, or ``None`` when the event does not apply."""
    step = _step(slot, event.seq, event.seq)
    if step == SKIP:
        return None
    if step == GAP:
        return _gap(slot, event.seq)
    try:
        return slot.projection.apply(slot.state, event)
    except ContractError as error:
        return fault(event.seq, str(error))
    except (RecursionError, ValueError, TypeError, OverflowError) as failure:
        # Hostile shapes (absurd nesting, say) must fault the projection, not the worker.
        return fault(event.seq, f"unprocessable event: {type(failure).__name__}: {failure}")


def process(record: SessionRecord, event: Event) -> Outcome:
    """Fold one event into a session record: plan every projection, then commit all."""
    if event.passive:
        return _process_passive(record, event.seq)
    plans = [(slot, _plan(slot, event)) for slot in record.slots.values()]
    applied = faulted = False
    for slot, plan in plans:
        if plan is None:
            continue
        if type(plan) is Fault:
            slot.fault = plan
            faulted = True
        else:
            slot.state = plan
            slot.cursor = event.seq
            applied = True
    return _account(record, event.seq, event.seq, applied, faulted)


def _process_passive(record: SessionRecord, seq: int) -> Outcome:
    """``process`` for an event no projection reads (most of a log: streamed deltas). Its
    transition cannot fail and touches only the slot's own state, so each slot commits
    directly; the result is the same as planning all three first."""
    applied = faulted = False
    for slot in record.slots.values():
        step = _step(slot, seq, seq)
        if step == APPLY:
            slot.state = slot.projection.passive(slot.state)
            slot.cursor = seq
            applied = True
        elif step == GAP:
            slot.fault = _gap(slot, seq)
            faulted = True
    if applied and not faulted and seq > record.seen:  # the common case, decided inline
        record.seen = seq
        return Outcome.FOLDED
    return _account(record, seq, seq, applied, faulted)


def process_run(record: SessionRecord, seq0: int, count: int) -> Tally:
    """Fold ``count`` consecutive passive events from ``seq0`` (a packed chunk row) in O(1),
    with the same result and the same per-event accounting as ``process`` on each in turn.

    Passive events change no view and cannot fail, so per projection the run is a prefix
    it already has, then one claim expiry and a cursor jump — or a gap at ``seq0``.
    """
    last = seq0 + count - 1
    seen = record.seen
    # The common case, decided without the lists below (a run per few events of a log):
    # every slot healthy and exactly at seq0 - 1, so each applies the whole run.
    slots = record.slots.values()
    common = len(slots) > 0
    for slot in slots:
        if slot.cursor != seq0 - 1 or slot.fault is not None or slot.rebuilding:
            common = False
            break
    if common:
        for slot in slots:
            slot.state = slot.projection.passive(slot.state)
            slot.cursor = last
        if last > seen:
            record.seen = last
        return Tally(count)
    # Before committing: which slots take part (a rebuilding slot only from seq 0), and
    # from which seq on some slot applies the run (sequentially: the lowest cursor + 1).
    active = [(s, s.cursor, s.fault) for s in record.slots.values() if not s.rebuilding]
    joining = [c for s, c, f in active if f is None and seq0 <= c + 1]
    waiting = [s for s in record.slots.values() if s.rebuilding and seq0 == 0]
    first_applied = seq0 if waiting else min((c + 1 for c in joining), default=last + 1)
    gapped = False
    for slot in record.slots.values():
        step = _step(slot, seq0, last)
        if step == APPLY:
            slot.state = slot.projection.passive(slot.state)
            slot.cursor = last
        elif step == GAP:
            slot.fault = _gap(slot, seq0)
            gapped = True
    if last > seen:
        record.seen = last
    tally = Tally()
    start = max(first_applied, seq0)
    tally.folded = last + 1 - start if start <= last else 0
    if gapped:  # seq0 is faulted whatever else took it
        if start == seq0:
            tally.folded -= 1
        tally.faulted += 1
        seq0 += 1
    # Events nobody applied, [seq0, end): each one as ``_account`` would see it alone.
    end = min(start, last + 1)
    if seq0 < end:
        if not active:  # every projection waits for a rebuild replay: as ``_account``
            news = max(0, end - max(seq0, seen + 1))
            tally.folded += news
            tally.duplicate += end - seq0 - news
        elif end - 1 <= seen and all(f is None and end - 1 <= c for _, c, f in active):
            tally.duplicate += end - seq0  # a redelivered run: the common case
        else:
            for seq in range(seq0, end):  # rare: a run over a faulted session
                had = seq <= seen and all(
                    seq <= c or (slot.fault is not None and slot.fault.seq <= seq)
                    for slot, c, _ in active
                )
                tally.count(Outcome.DUPLICATE if had else Outcome.FAULTED)
    return tally


def fold_items(
    record: SessionRecord, items: Iterable[Event | ChunkRun], tally: Tally | None
) -> None:
    """Fold events and packed runs in order, counting each event in ``tally`` (``None``:
    a redelivery, counted already).

    Consecutive passive events (streamed deltas, most of a log) and packed runs that
    continue each other are gathered into one run for ``process_run``: the same result
    and per-event accounting as ``process`` on each, in O(1) per run.
    """
    first = end = 0  # the pending run of passive events: seqs [first, end)
    for item in items:
        if type(item) is ChunkRun:
            seq, size = item.seq0, item.size
        elif item.passive:  # type: ignore[union-attr]
            seq, size = item.seq, 1  # type: ignore[union-attr]
        else:
            if end > first:
                _fold_run(record, first, end, tally)
                first = end = 0
            outcome = process(record, item)  # type: ignore[arg-type]
            if tally is not None:
                tally.count(outcome)
            continue
        if seq == end and end > first:
            end += size
            continue
        if end > first:
            _fold_run(record, first, end, tally)
        first, end = seq, seq + size
    if end > first:
        _fold_run(record, first, end, tally)


def _fold_run(record: SessionRecord, first: int, end: int, tally: Tally | None) -> None:
    run = process_run(record, first, end - first)
    if tally is not None:
        tally.add(run)


def _account(record: SessionRecord, first: int, last: int, applied: bool, faulted: bool) -> Outcome:
    """Account for an event (or a run, by its last event) and move the session's
    high-water mark, which only ever moves forward."""
    seen = record.seen
    if last > seen:
        record.seen = last
    if faulted:
        return Outcome.FAULTED
    if applied:
        return Outcome.FOLDED
    # Taken by no projection: a duplicate if every projection already had it (applied it,
    # or was already refusing from its fault on); otherwise a new event a fault blocks.
    # A slot waiting for a rebuild replay is neutral: it neither has nor refuses events.
    active = [slot for slot in record.slots.values() if not slot.rebuilding]
    if not active:
        return Outcome.FOLDED if last > seen else Outcome.DUPLICATE
    if last <= seen and all(
        last <= slot.cursor or (slot.fault is not None and slot.fault.seq <= first)
        for slot in active
    ):
        return Outcome.DUPLICATE
    return Outcome.FAULTED


def note_time(record: SessionRecord, time: int | None) -> None:
    """The session took an event at ``time`` (None: not an integer time): its latest
    time only moves forward, so a redelivery or an event from a wrong clock in the past
    changes nothing."""
    if time is not None and (record.time is None or time > record.time):
        record.time = time


def published_seq(record: SessionRecord) -> int:
    """The ``seq`` an update carries: the highest seq seen for the session. A duplicate or
    faulted event still moves it forward, never back (contract: "What is published")."""
    return record.seen


def view_version(record: SessionRecord) -> int:
    """How new the code behind the published views is: the sum of the state versions of
    the projections that show a view. A version bump raises it once the rebuilt view is
    complete, so Redis takes the rebuilt update although its seq did not move, and an
    older worker's update of the same seq cannot replace it."""
    return sum(slot.projection.version for slot in record.slots.values() if not slot.rebuilding)


def views(record: SessionRecord) -> dict[str, dict[str, int]]:
    """Each projection's view; one waiting for a rebuild replay has none to show yet."""
    return {
        key: slot.projection.view(slot.state)
        for key, slot in record.slots.items()
        if not slot.rebuilding
    }


def faults(record: SessionRecord) -> dict[str, dict[str, Any]]:
    return {
        key: {"seq": slot.fault.seq, "error": slot.fault.error}
        for key, slot in record.slots.items()
        if slot.fault is not None
    }


def update(session_id: str, record: SessionRecord) -> dict[str, Any]:
    """The published shape: ``time`` (the latest event time) when known, views in a fixed
    order, ``faults`` only when any, ``rebuilding`` only while a projection waits for a
    replay."""
    out: dict[str, Any] = {"sessionId": session_id, "seq": published_seq(record)}
    if record.time is not None:
        out["time"] = record.time
    out.update(views(record))
    found = faults(record)
    if found:
        out["faults"] = found
    waiting = [key for key, slot in record.slots.items() if slot.rebuilding]
    if waiting:
        out["rebuilding"] = waiting
    return out
