"""Metrics, probes and JSON logs of a live worker."""

import json
import random
import time
from pathlib import Path

import pytest

from tests.integration.harness import Deployment, event_count, wait_until, write_sessions

pytestmark = pytest.mark.integration


def _logs(directory: Path, sessions: int = 6) -> list[Path]:
    """Generated sessions and a log of one unreadable event."""
    paths = write_sessions(directory, random.Random(61), "m", sessions, (50, 150))
    bad = directory / "bad.jsonl"
    bad.write_text('{"type":"x","seq":"nope","time":1,"data":{}}\n')
    return [*paths, bad]


def test_counters_agree_with_the_redis_totals_and_the_probes_answer(
    deployment: Deployment, tmp_path: Path
) -> None:
    paths = _logs(tmp_path / "logs")
    total = event_count(paths)
    worker = deployment.start_worker(STREAM_LOG_FORMAT="json")
    assert worker.probe("/livez") == 200
    wait_until(lambda: worker.probe("/readyz") == 200, 60, "readiness")
    deployment.stream("produce", *map(str, paths))
    deployment.wait_accounted(total)
    stats = deployment.stats()
    assert stats["dead_lettered"] == 1
    # The counters follow the broker's confirmation, which may come after Redis's totals.
    wait_until(lambda: worker.counted() == stats, 30, f"the counters to reach {stats}")
    samples = worker.metrics()
    by_type = sum(v for k, v in samples.items() if k.startswith("stream_events_by_type_total"))
    assert by_type == total - stats["dead_lettered"]
    assert samples["stream_batches_total"] >= 1
    assert samples["stream_assigned_partitions"] == deployment.partitions
    assert samples["stream_generation"] == 1
    assert samples["stream_redis_retrying"] == 0
    assert samples["stream_ready"] == 1
    assert samples["stream_fold_seconds_count"] == samples["stream_batches_total"]
    # The loop's CPU in a step is part of its wall time (its clock reads sit just outside
    # the timer's: a little slack).
    fold_cpu = samples['stream_batch_loop_cpu_seconds_total{step="fold"}']
    slack = 0.01 * samples["stream_batches_total"]
    assert 0 < fold_cpu <= samples["stream_fold_seconds_sum"] + slack
    assert samples['stream_batch_loop_cpu_seconds_total{step="kafka"}'] > 0
    assert samples['stream_batch_loop_cpu_seconds_total{step="redis"}'] > 0
    assert samples["stream_produce_to_redis_seconds_count"] >= 1
    wait_until(
        lambda: worker.metrics().get("stream_rocksdb_bytes", 0) > 0, 30, "the state size gauge"
    )
    # JSON logs: every line of the worker's own output is one object.
    lines = [line for line in worker.log().splitlines() if line.strip()]
    parsed = [json.loads(line) for line in lines if line.startswith("{")]
    assert parsed and all({"time", "level", "logger", "message"} <= set(p) for p in parsed)
    assert any("Ready" in p["message"] for p in parsed)


def test_an_idle_worker_rests_and_a_busy_one_gathers_for_its_budget(
    deployment: Deployment, tmp_path: Path
) -> None:
    # The fetch's pace (note 034): while records arrive each fetch waits at the broker up
    # to the latency budget; once nothing comes, a fetch waits for its first byte, up to
    # STREAM_FETCH_MAX_WAIT, so an idle worker sends a couple of fetches a second.
    paths = _logs(tmp_path / "logs", sessions=3)
    worker = deployment.start_worker(STREAM_FETCH_MAX_WAIT="0.5")
    wait_until(lambda: worker.probe("/readyz") == 200, 60, "readiness")
    deployment.stream("produce", *map(str, paths))
    deployment.wait_accounted(event_count(paths))

    def fetches() -> tuple[float, float]:
        samples = worker.metrics()
        return (
            samples.get('stream_fetches_total{wait="budget"}', 0.0),
            samples.get('stream_fetches_total{wait="resting"}', 0.0),
        )

    budget, resting = fetches()
    assert budget >= 1  # the traffic was fetched at the budget's pace
    # Idle: the last budget fetch finds nothing, then every fetch rests.
    wait_until(lambda: fetches()[1] > resting + 2, 30, "resting fetches")
    budget, resting = fetches()
    idle = 5.0
    time.sleep(idle)  # the subject: what an idle worker sends in this time
    budget_after, resting_after = fetches()
    assert budget_after == budget
    assert 1 <= resting_after - resting <= idle / 0.5 + 2
