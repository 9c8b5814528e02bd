"""The context meter as UI backends draw it, as a pure function of one update.

- the occupancy ring: the provider figure, ``projectedTokens / contextWindow``;
- the headline ``~used / capacity`` (``projectedTokens`` moves with the surface between
  provider samples, hence the ``~``);
- a segmented bar whose segments take their *relative* proportions from the heuristic
  ``contextBreakdown`` (never scaled to the provider figure; zero segments not drawn);
- ``~`` rows with the heuristic figures as they are; usage totals; faults.

``stream watch`` renders this model in the terminal and the gateway's listings use it;
``static/meter.js`` mirrors it in the browser (keep the two in step).
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

# (update key, label), in drawing order.
BREAKDOWN: Final = (
    ("systemTokens", "system"),
    ("toolsTokens", "tools"),
    ("messageTokens", "messages"),
)
USAGE: Final = (
    ("uncachedInputTokens", "input"),
    ("outputTokens", "output"),
    ("cacheReadTokens", "cache read"),
    ("cacheWriteTokens", "cache write"),
)
WARN_PERCENT: Final = 70.0
HIGH_PERCENT: Final = 90.0


def _count(value: Any) -> int | None:
    """A token count, or ``None`` for anything else (a UI must survive a malformed update)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _section(update: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = update.get(key)
    return value if isinstance(value, Mapping) else {}


@dataclass(frozen=True, slots=True)
class Segment:
    key: str
    label: str
    tokens: int
    share: float  # of the heuristic total, 0..1 (relative proportion, not of the window)


@dataclass(frozen=True, slots=True)
class Fault:
    projection: str
    seq: int | None
    error: str


@dataclass(frozen=True, slots=True)
class Meter:
    session_id: str
    seq: int | None
    capacity: int | None  # contextWindow
    used: int | None  # projectedTokens
    pressure: int | None  # pressureTokens: the provider's last prompt size
    rows: tuple[Segment, ...]  # every breakdown row, zeros included
    usage: tuple[tuple[str, int], ...]
    faults: tuple[Fault, ...]

    @property
    def percent(self) -> float | None:
        """Occupancy in percent (may exceed 100); ``None`` until both figures are known."""
        if self.used is None or not self.capacity:
            return None
        return 100.0 * self.used / self.capacity

    @property
    def level(self) -> str:
        """``ok``, ``warn`` or ``high``: the ring's colour."""
        percent = self.percent
        if percent is None or percent < WARN_PERCENT:
            return "ok"
        return "warn" if percent < HIGH_PERCENT else "high"

    @property
    def segments(self) -> tuple[Segment, ...]:
        """The bar's segments: zero-width ones are not drawn."""
        return tuple(row for row in self.rows if row.tokens > 0)

    @property
    def heuristic_total(self) -> int:
        return sum(row.tokens for row in self.rows)


def meter(update: Mapping[str, Any]) -> Meter:
    pressure = _section(update, "contextPressure")
    breakdown = _section(update, "contextBreakdown")
    usage = _section(update, "tokenUsage")
    counts = [(key, label, max(0, _count(breakdown.get(key)) or 0)) for key, label in BREAKDOWN]
    total = sum(tokens for _, _, tokens in counts)
    rows = tuple(
        Segment(key, label, tokens, tokens / total if total else 0.0)
        for key, label, tokens in counts
    )
    faults = tuple(
        Fault(
            str(name),
            _count(fault.get("seq")) if isinstance(fault, Mapping) else None,
            str(fault.get("error", "")) if isinstance(fault, Mapping) else str(fault),
        )
        for name, fault in _section(update, "faults").items()
    )
    session_id = update.get("sessionId")
    return Meter(
        session_id="" if session_id is None else str(session_id),
        seq=_count(update.get("seq")),
        capacity=_count(pressure.get("contextWindow")),
        used=_count(pressure.get("projectedTokens")),
        pressure=_count(pressure.get("pressureTokens")),
        rows=rows,
        usage=tuple((label, _count(usage.get(key)) or 0) for key, label in USAGE),
        faults=faults,
    )


def bar_cells(segments: Sequence[Segment], width: int) -> list[int]:
    """Cells per segment for a text bar ``width`` cells wide, by relative share.

    Largest remainder, so the cells add up to ``width``; a non-empty segment gets at
    least one cell so that it stays visible however small its share.
    """
    if not segments or width <= 0:
        return [0] * len(segments)
    total = sum(s.tokens for s in segments)
    exact = [width * s.tokens / total for s in segments]
    cells = [max(1, int(e)) for e in exact]
    while sum(cells) > width:  # the minimum of one cell overshot: take from the largest
        cells[cells.index(max(cells))] -= 1
    by_remainder = sorted(range(len(segments)), key=lambda i: exact[i] - int(exact[i]))
    while sum(cells) < width:
        cells[by_remainder.pop()] += 1
        if not by_remainder:
            by_remainder = list(range(len(segments)))
    return cells


def summary(update: Mapping[str, Any], updated_ms: int | None) -> dict[str, Any]:
    """One row of a session listing (``GET /sessions``, the page's index): ``updatedAt``
    is when Redis took the update, ``time`` the session's latest event time (epoch ms,
    from the update; ``None`` in records written before it existed)."""
    model = meter(update)
    percent = model.percent
    return {
        "sessionId": model.session_id,
        "seq": model.seq,
        "percent": None if percent is None else round(percent, 2),
        "projectedTokens": model.used,
        "contextWindow": model.capacity,
        "faults": len(model.faults),
        "updatedAt": updated_ms,
        "time": _count(update.get("time")),
    }
