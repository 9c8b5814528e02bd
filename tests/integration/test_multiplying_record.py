"""No record multiplies (issue 51): a record whose elements are each unreadable costs one
dead letter, not one per element, through the real broker, worker and Redis.

31 zstd records, each a segment of 10,000 ``{}`` (30 kB, ~120 bytes compressed), arrive
in one fetch among unseen traffic. Before, each element became its own dead letter and its
own WARNING line: 310,000 of each, the worker from 87 to 1,467 MiB in 17 s (docs/notes/028).
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.integration.faults import (
    DEFAULT_LIMITS,
    Ledger,
    Part,
    alive,
    input_topic,
    produce,
    produce_now,
    producer_for,
    say,
    segment,
    session_traffic,
)
from tests.integration.harness import Deployment, Worker, http_get
from tests.integration.verdict import dead_letters, peak_rss, verify

pytestmark = pytest.mark.integration

RECORDS = 31
ELEMENTS = 10_000
PEAK_BOUND = 256 * 2**20


class LivezWatch(threading.Thread):
    """The slowest ``/livez`` answer while the run lasts (how long the loop was held)."""

    def __init__(self, worker: Worker) -> None:
        super().__init__(daemon=True, name="livez")
        self.url = f"http://127.0.0.1:{worker.metrics_port}/livez"
        self.slowest = 0.0
        self.slowest_at = ""
        self.failed = 0
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.wait(0.1):
            started = time.monotonic()
            status, _ = http_get(self.url, timeout=30)
            took = time.monotonic() - started
            if took > self.slowest:
                self.slowest, self.slowest_at = took, time.strftime("%H:%M:%S")
            self.failed += status != 200


def test_a_segment_of_unreadable_elements_costs_one_dead_letter(
    kafka_bootstrap: str, redis_url: str, tmp_path: Path
) -> None:
    """Every event accounted for exactly, one dead letter per record (with the count and
    the positions of its elements), a few log lines, peak RSS under 256 MiB, the worker
    never exits."""
    deployment = Deployment(kafka_bootstrap, redis_url, tmp_path, partitions=2)
    try:
        rng = random.Random(5151)
        ledger = Ledger(input_topic(deployment))
        worker = deployment.start_worker("multiply")
        watch = LivezWatch(worker)
        watch.start()
        produce_now(deployment, ledger, session_traffic(rng, "before", 6, (20, 60)))
        # Linger so the 31 records leave in few batches and land in one fetch.
        zstd = producer_for(deployment, **{"compression.type": "zstd", "linger.ms": 200})
        hollow = [Part(b"{}", 0)] * ELEMENTS
        for n in range(RECORDS):
            record = segment(f"multiply-{n % 3}".encode(), hollow, DEFAULT_LIMITS, "multiply")
            produce(zstd, input_topic(deployment), ledger, record)
        assert zstd.flush(60) == 0 and not ledger.failed, ledger.failed
        say(f"{RECORDS} records of {ELEMENTS:,} unreadable elements produced")
        produce_now(deployment, ledger, session_traffic(rng, "after", 6, (20, 60)))
        verdict = verify(deployment, ledger, tmp_path, timeout=180)
        watch.stopping.set()
        watch.join(5)

        elements = Counter((p, o) for p, o, index in ledger.dead_expected if index is not None)
        multiplied = {place for place, n in elements.items() if n == ELEMENTS}
        many = [
            letter
            for letter in dead_letters(deployment)
            if (
                int(dict(letter.headers() or [])["source-partition"]),
                int(dict(letter.headers() or [])["source-offset"]),
            )
            in multiplied
        ]
        assert len(multiplied) == RECORDS
        hollow_letters = [
            d for d in many if dict(d.headers() or []).get("count") == str(ELEMENTS).encode()
        ]
        lines = sum("dead-lettered" in line for line in worker.log().splitlines())
        peak = peak_rss(worker)
        say(
            f"multiplying records: {RECORDS} × {ELEMENTS:,} unreadable elements,"
            f" {len(many)} dead-letter records for them, worker peak RSS {peak / 2**20:.0f} MiB,"
            f" slowest /livez {watch.slowest:.2f} s ({watch.slowest_at}), {lines} dead-letter"
            f" log lines;"
            f" {verdict.line()}"
        )
        assert len(hollow_letters) == RECORDS, f"{len(hollow_letters)} dead letters for {RECORDS}"
        assert len(many) == RECORDS
        assert lines <= 20, f"{lines} dead-letter log lines"
        assert alive(worker) and worker.starts == 1
        assert worker.probe("/livez") == 200 and worker.probe("/readyz") == 200
        assert peak < PEAK_BOUND, f"peak RSS {peak / 2**20:.0f} MiB"
    finally:
        deployment.stop_all()
