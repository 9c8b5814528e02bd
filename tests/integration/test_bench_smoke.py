"""`make bench-smoke`: the benchmark runner on small loads, against the session's broker
and Redis. Figures are printed, not judged; the run must complete."""

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.infra import own_core
from tests.integration.harness import REPO

pytestmark = pytest.mark.integration


def test_the_benchmark_smoke_run_fills_every_section(
    kafka_bootstrap: str, redis_url: str, tmp_path: Path
) -> None:
    out = tmp_path / "bench.json"
    env = dict(os.environ, KAFKA_BOOTSTRAP_SERVERS=kafka_bootstrap, REDIS_URL=redis_url)
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.run", "--smoke", "--json", str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert len(result["live"]) >= 1 and all(row["lat_n"] > 0 for row in result["live"])
    placement = own_core()  # the worker on a core of its own wherever there are two
    where = placement.describe() if placement is not None else "shared"
    assert all(row["placement"] == where for row in result["live"])
    # Each step at its fraction of the median of the sweep's drains, one more measured just
    # before it (a step whose drain ran past the corpus' margin is capped, and says so).
    for i, row in enumerate(result["live"]):
        assert len(row["drains"]) == i + 2 and all(d > 0 for d in row["drains"])
        assert row["drain_rate"] == statistics.median(row["drains"])
    for row, fraction in zip(result["live"], (0.02, 0.05), strict=True):
        wanted = max(100, round(row["drain_rate"] * fraction / 100) * 100)
        assert (row["rate"], row["fraction"]) == (wanted, fraction) or (
            row["capped"] and row["rate"] < wanted and row["fraction"] < fraction
        )
    assert {r["system"] for r in result["drain"]} == {"ck", "faust", "ours"}
    assert all(r["events_per_s"] > 0 for r in result["drain"])
    assert [r["workers"] for r in result["scale"]] == [1, 2]
    assert result["fold"]["unpacked"]["ours"]["events"] > 0
    assert "live" in done.stdout and "drain" in done.stdout
    assert "  regime" in done.stdout and "events per session" in done.stdout
    # Each step first through the plain relay (the floor), timed the same way.
    assert all(row["floor_lat_n"] > 0 and row["floor_ack_n"] > 0 for row in result["live"])
    assert "  floor" in done.stdout and "a plain relay" in done.stdout
