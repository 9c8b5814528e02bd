"""How long a partition goes unserved when its worker is killed: a ticking session per
partition, the seconds until the new owner's first update (``takeover_seconds``), and what
its restore read from the changelog."""

from __future__ import annotations

import re
import threading
import time
from typing import Final

from tests.integration.faults import (
    Ledger,
    assigned,
    input_topic,
    produce,
    produce_now,
    producer_for,
    ticks,
)
from tests.integration.harness import Deployment, Worker, wait_until
from tests.integration.verdict import redis_updates


class Ticker(threading.Thread):
    """A heartbeat: one passive event every ``every`` seconds for each of some sessions."""

    def __init__(
        self, deployment: Deployment, ledger: Ledger, sessions: dict[str, int], every: float
    ) -> None:
        super().__init__(daemon=True, name="ticker")
        self.producer = producer_for(deployment, **{"linger.ms": 0})
        self.topic = input_topic(deployment)
        self.ledger = ledger
        self.next = dict(sessions)  # session -> next seq
        self.every = every
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.wait(self.every):
            for session, seq in self.next.items():
                for out in ticks(session.encode(), seq, 1):
                    produce(self.producer, self.topic, self.ledger, out)
                self.next[session] = seq + 1
            self.producer.poll(0)

    def finish(self) -> None:
        self.stopping.set()
        self.join(30)
        assert self.producer.flush(120) == 0


def takeover_seconds(
    deployment: Deployment, ledger: Ledger, victim: Worker, probes: dict[int, str]
) -> float:
    """SIGKILL ``victim`` while its partitions' probe sessions keep receiving events;
    seconds from the kill to the first update of one of them published by whoever takes
    the partitions over."""
    targets = [probes[p] for p in assigned(victim)]
    assert targets, "the victim owns no partition"
    seqs = {s: (u or {}).get("seq", -1) for s, u in redis_updates(deployment, targets).items()}
    ticker = Ticker(deployment, ledger, {s: len(ledger.logs[s]) for s in targets}, 0.1)
    ticker.start()
    try:
        # The victim must be folding the heartbeat before it dies.
        wait_until(
            lambda: any(
                (u or {}).get("seq", -1) > seqs[s]
                for s, u in redis_updates(deployment, targets).items()
            ),
            60,
            "the victim to fold the heartbeat",
            every=0.05,
        )
        killed = time.monotonic()
        victim.kill()
        baseline = {
            s: (u or {}).get("seq", -1) for s, u in redis_updates(deployment, targets).items()
        }
        deadline = killed + 180
        while time.monotonic() < deadline:
            now = redis_updates(deployment, targets)
            if any((now[s] or {}).get("seq", -1) > baseline[s] for s in targets):
                return time.monotonic() - killed
            time.sleep(0.05)
        raise AssertionError("no update of the victim's sessions within 180 s of the kill")
    finally:
        ticker.finish()


_TABLE_ROW: Final = re.compile(r"^\|\s*(\S+)\s*\|\s*(\d+)\s*\|\s*(-?\d+)\s*\|")


def _last_table(log: str, title: str) -> dict[int, int]:
    """The last Faust recovery table called ``title`` in a worker log: partition -> offset."""
    start = log.rfind(f"+{title}")
    if start < 0:
        return {}
    rows: dict[int, int] = {}
    for line in log[start:].splitlines()[3:]:
        found = _TABLE_ROW.match(line)
        if not found:
            break
        rows[int(found.group(2))] = int(found.group(3))
    return rows


def changelog_restored(worker: Worker) -> dict[int, int]:
    """Per active changelog partition of the worker's last recovery, the records it had
    to read before serving it (0: its local state was already current, i.e. warm)."""
    log = worker.log()
    highwater = _last_table(log, "Highwater - Active")
    starts = _last_table(log, "Reading Starts At - Active")
    return {p: max(0, high - max(starts.get(p, -1), -1)) for p, high in highwater.items()}


def probe_sessions(
    deployment: Deployment, ledger: Ledger, partitions: int, prefix: str = "probe"
) -> dict[int, str]:
    """One session per input partition (found by producing a first event and reading
    where it landed), for timing takeovers."""
    found: dict[int, str] = {}
    candidates = [f"{prefix}-{n}" for n in range(partitions * 12)]
    produce_now(deployment, ledger, [ticks(c.encode(), 0, 1)[0] for c in candidates])
    for candidate in candidates:
        found.setdefault(ledger.partition_of[candidate], candidate)
    assert sorted(found) == list(range(partitions)), found
    return found
