"""The drain section of ``benchmarks.run``: a backlog produced once per run and segment,
read to its end by our worker and by the peers (``benchmarks.peers``), each timed from
its first poll that saw an event. ``our_drain`` is also what the live sweep's rates are
fractions of (``benchmarks.sweep``)."""

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.infra import REPO, Infra, Scenario, WorkerProcess, corpus_sessions, produce_backlog
from benchmarks.peers import PEERS_INSTALL, peers_python
from benchmarks.plan import Plan, log

_BACKLOGS: dict[tuple[str, int], tuple[str, int, int]] = {}


def backlog(infra: Infra, work: Path, plan: Plan, segment: int) -> tuple[str, int, int]:
    """The drain corpus produced to a topic of its own, ``segment`` events per message:
    (topic, messages, events); once per run and segment (every system reads the same)."""
    key = (str(work), segment)
    if key not in _BACKLOGS:
        corpus = corpus_sessions(work / "drain-corpus", plan.drain_sessions, plan.drain_turns)
        topic = f"drain-{segment}-{os.getpid()}-{time.monotonic_ns() % 100_000}"
        infra.create_topic(topic, 6)
        messages, events = produce_backlog(infra, topic, corpus, segment)
        log(f"drain: {events:,} events in {messages:,} messages (segment {segment})")
        _BACKLOGS[key] = (topic, messages, events)
    return _BACKLOGS[key]


def drain(infra: Infra, work: Path, plan: Plan) -> list[dict[str, Any]]:
    """Every system over each segment's backlog, ``plan.drain_repeat`` times, alternating
    (ck, quix, faust, ours, then again): one row per system and run, so a pair's ratio is
    read by medians, with the spread beside them (``summarize``)."""
    rows = []
    for segment in plan.drain_segments:
        topic, messages, events = backlog(infra, work, plan, segment)
        for run in range(1, plan.drain_repeat + 1):
            for system in plan.drain_systems:
                if system == "ours":
                    result = drain_ours(infra, work, topic, events)
                else:
                    result = drain_peer(infra, work, system, topic, messages)
                rate = events_per_s(result)
                rows.append(
                    {
                        "segment": segment,
                        "system": system,
                        "run": run,
                        "messages": messages,
                        "events": events,
                        "events_per_s": rate,
                        "messages_per_s": rate / (events / messages),
                    }
                )
                log(
                    f"  {system}"
                    + (f", run {run}" if plan.drain_repeat > 1 else "")
                    + f": {rate:,.0f} events/s"
                )
    return rows


def summarize(rows: list[dict[str, Any]]) -> dict[tuple[int, str], dict[str, float]]:
    """Per (segment, system): the median of its runs' events/s and messages/s, the
    lowest and highest events/s and how many runs."""
    grouped: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for row in rows:
        grouped.setdefault((row["segment"], row["system"]), []).append(row)
    return {
        key: {
            "events_per_s": statistics.median(r["events_per_s"] for r in runs),
            "messages_per_s": statistics.median(r["messages_per_s"] for r in runs),
            "min": min(r["events_per_s"] for r in runs),
            "max": max(r["events_per_s"] for r in runs),
            "runs": len(runs),
        }
        for key, runs in grouped.items()
    }


def events_per_s(drained: dict[str, Any]) -> float:
    """A drain's rate: the events after the first poll that saw any, over its time."""
    return float(drained["events"] - drained["before"]) / max(float(drained["seconds"]), 1e-9)


def our_drain(infra: Infra, work: Path, plan: Plan, cores: frozenset[int] | None) -> float:
    """Our single-event drain of the drain section's backlog, the worker on ``cores`` (or
    any): what the live sweep's rates are fractions of."""
    topic, _, events = backlog(infra, work, plan, 1)
    return events_per_s(drain_ours(infra, work, topic, events, cores))


def drain_peer(infra: Infra, work: Path, system: str, topic: str, expect: int) -> dict[str, Any]:
    python = sys.executable
    if system == "quix":  # Quix Streams has a venv of its own (``benchmarks.peers``)
        found_python = peers_python()
        if found_python is None:
            raise RuntimeError(f"no Quix Streams venv: {PEERS_INSTALL}")
        python = found_python
    done = subprocess.run(
        [
            *(python, "-m", "benchmarks.peers", system, "--bootstrap", infra.bootstrap),
            *("--topic", topic, "--expect", str(expect), "--state-dir", str(work / topic)),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )
    lines = [line[line.index("{") :] for line in done.stdout.splitlines() if '{"messages"' in line]
    if not lines:
        raise RuntimeError(f"{system} peer failed:\n{done.stdout[-2000:]}{done.stderr[-3000:]}")
    found: dict[str, Any] = json.loads(lines[-1])
    found["seconds"] = found["last"] - found["first"]
    return found


def drain_ours(
    infra: Infra, work: Path, topic: str, events: int, cores: frozenset[int] | None = None
) -> dict[str, Any]:
    scenario = Scenario(infra, work, input_topic=topic)
    worker = WorkerProcess(scenario, "drain", cores=cores)
    worker.start()
    ready = time.monotonic()
    try:
        first = 0.0
        before = 0
        while True:
            have = scenario.accounted()
            now = time.monotonic()
            if have and not first:
                first, before = now, have
                if have >= events:  # a backlog drained within one poll: time it from ready
                    first, before = ready, 0
            if have >= events:
                return {"events": have, "before": before, "seconds": now - first}
            time.sleep(0.005)
    finally:
        worker.stop()
