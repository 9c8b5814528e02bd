"""The live bench's and the drain comparison's own logic, without a broker: the drain's
medians and spread, the runners' row, the held-out traffic's shape, the peers' venv."""

from pathlib import Path
from typing import Any

import pytest

from benchmarks import peers
from benchmarks.drain import summarize
from benchmarks.heldout import figures, heldout_logs
from benchmarks.run import FULL, render
from benchmarks.runners import runners


def _drain_row(segment: int, system: str, run: int, rate: float) -> dict[str, Any]:
    return {
        "segment": segment,
        "system": system,
        "run": run,
        "messages": 100,
        "events": 100 * segment,
        "events_per_s": rate,
        "messages_per_s": rate / segment,
    }


def test_the_drain_reports_each_runner_by_its_median_and_spread() -> None:
    rows = [
        _drain_row(1, "quix", 1, 60_000),
        _drain_row(1, "ours", 1, 90_000),
        _drain_row(1, "quix", 2, 66_000),
        _drain_row(1, "ours", 2, 150_000),
        _drain_row(1, "quix", 3, 62_000),
        _drain_row(1, "ours", 3, 130_000),
    ]
    found = summarize(rows)
    assert found[(1, "quix")] == {
        "events_per_s": 62_000,
        "messages_per_s": 62_000,
        "min": 60_000,
        "max": 66_000,
        "runs": 3,
    }
    assert found[(1, "ours")]["events_per_s"] == 130_000
    result = {
        "smoke": False,
        "machine": "test",
        "started": "now",
        "plan": {**FULL.__dict__, "drain_repeat": 3},
        "drain": rows,
    }
    table = render(result)
    # Our ratio to Quix by the medians (130,000 / 62,000), with each runner's spread.
    assert "2.10x Quix single events (by medians)" in table
    assert "median of 3: 60,000-66,000" in table
    assert "median of 3: 90,000-150,000" in table


def test_the_runners_row_shows_every_runner_and_a_peer_behind() -> None:
    row = {
        "rate": 6000,
        "lat_p50": 0.067,
        "lat_p99": 0.223,
        "cpu": 0.6,
        "floor_lat_n": 10,
        "floor_lat_p50": 0.007,
        "floor_lat_p99": 0.053,
        "floor_cpu": 0.35,
        "floor_backlog": 0,
        "quix_lat_n": 10,
        "quix_lat_p50": 2.4,
        "quix_lat_p99": 5.6,
        "quix_cpu": 0.63,
        "quix_backlog": 20_000,
    }
    assert runners(row) == (
        "p50 / p99: our worker 67 / 223 ms, 0.60 cores; plain relay 7.0 / 53 ms, 0.35 cores;"
        " Quix app 2,400 / 5,600 ms, 0.63 cores (behind)"
    )
    del row["quix_lat_n"]  # no peers' venv: the Quix app did not run
    assert "Quix" not in runners(row)


def test_held_out_traffic_has_the_mixed_modern_shape(tmp_path: Path) -> None:
    logs = heldout_logs(tmp_path, 6, 120)
    assert len(logs) == 6 and min(map(len, logs)) >= 120
    shape = figures(logs)
    assert 230 <= shape["mean_bytes"] <= 320  # the harness: a mean event of ~270 bytes
    assert 1_200 <= shape["p99_bytes"] <= 2_100  # p99 ~1.6 kB
    assert 0.4 <= shape["chunk_share"] <= 0.6  # about half chunks
    # Every session starts from its first event: a new session to the worker.
    assert all(events[0]["seq"] == 0 for events in logs)


def test_the_bench_runs_without_quix_when_its_venv_is_missing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("BENCH_PEERS_PYTHON", str(tmp_path / "missing" / "python"))
    peers.peers_python.cache_clear()
    try:
        assert peers.peers_python() is None
    finally:
        peers.peers_python.cache_clear()
