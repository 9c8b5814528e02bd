"""`benchmarks.lifecycle --smoke`: a compressed quarter of sessions through the real worker
with a 30-day STREAM_SESSION_TTL, against the session's broker and Redis. The figures are
the benchmark's; what is asserted is what expiry promises whatever the machine: every
session is live or expired, the sessions Redis knows are the live ones, and the live
count stands still once the first sessions have expired."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.harness import REPO

pytestmark = pytest.mark.integration


def test_a_quarter_of_sessions_expires_and_stays_flat(
    kafka_bootstrap: str, redis_url: str, tmp_path: Path
) -> None:
    out = tmp_path / "lifecycle.json"
    env = dict(os.environ, KAFKA_BOOTSTRAP_SERVERS=kafka_bootstrap, REDIS_URL=redis_url)
    done = subprocess.run(
        [
            *(sys.executable, "-m", "benchmarks.lifecycle", "--smoke", "--only", "ttl"),
            *("--sessions", "8000", "--json", str(out)),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = json.loads(out.read_text())["runs"]["ttl"]
    assert [r["month"] for r in rows] == [1, 2, 3]
    for row in rows:
        assert row["live"] + row["expired"] == row["sessions"], row
        assert row["tallies"] == row["live"], row
    month2, month3 = rows[1], rows[2]
    assert month2["expired"] > 0
    assert abs(month3["live"] / month2["live"] - 1) <= 0.15, (month2, month3)
    assert "TTL 30d" in done.stdout
