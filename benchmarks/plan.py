"""What ``benchmarks.run`` and its live sweep (``benchmarks.sweep``) share: a run's plan,
the progress log and the table's number format (a module of its own so neither imports
the other)."""

import math
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Plan:
    live_sessions: int
    live_rates: tuple[int, ...]  # events/s, when no fractions are given
    live_fractions: tuple[float, ...]  # of our single-event drain rate
    live_seconds: float
    live_turns: int
    live_variants: tuple[tuple[tuple[str, str], ...], ...]  # worker settings per sweep
    live_warmup: float  # seconds at the first rate before measuring
    live_repeat: int  # sweeps per variant, each on a fresh worker (the p99 is bimodal)
    live_own_core: bool  # the worker on a core of its own, the load elsewhere (Placement)
    live_floor: bool  # each step also timed through a plain relay first (``benchmarks.live``)
    live_quix: bool  # and through a Quix Streams app (with the relay; its venv permitting)
    live_traffic: str  # "bench" (the corpus, warmed up) or "heldout" (``benchmarks.heldout``)
    live_idle: float  # seconds with no traffic after the last step: each runner's idle CPU
    drain_sessions: int
    drain_turns: int
    drain_segments: tuple[int, ...]
    drain_systems: tuple[str, ...]
    drain_repeat: int  # runs of every system, alternating (ck, quix, faust, ours, again)
    scale_sessions: int
    scale_turns: int
    scale_settle: float  # seconds for two workers' group to settle before producing
    replay_args: tuple[str, ...]
    fold_sessions: int
    fold_turns: int
    fold_repeat: int
    lifecycle_args: tuple[str, ...]


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def n(value: float, digits: int = 0) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{value:,.{digits}f}"
