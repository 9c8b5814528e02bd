"""The chart's Grafana dashboard: well formed, every panel's query parses as PromQL
(promtool, built by deploy/chart-check.sh; skipped until it is) and selects this release's
series by the dashboard's variables. That the names exist: tests/integration/test_dashboard.py."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.deploy.dashboard import load, panels, queries, rules_file


def _promtool() -> Path | None:
    cache = Path(os.environ.get("CONTEXT_STREAM_CACHE", Path.home() / ".cache/context-stream"))
    tool = cache / "bin" / "promtool"
    return tool if tool.exists() else None


def test_every_panel_has_queries_and_unique_ids_and_places() -> None:
    dashboard = load()
    assert dashboard["uid"] == "context-stream"
    ids = [panel["id"] for panel in panels(dashboard)]
    assert len(ids) == len(set(ids))
    for panel in panels(dashboard):
        if panel["type"] == "row":
            continue
        assert panel["targets"], panel["title"]
        assert panel["description"], panel["title"]
        box = panel["gridPos"]
        assert box["x"] + box["w"] <= 24, panel["title"]


def test_every_query_selects_by_the_dashboard_variables() -> None:
    for query in queries(load()):
        if query.where.startswith("variable"):
            continue
        assert query.metrics, query.where
        job = "$gateway_job" if query.gateway else "$job"
        assert query.expr.count("{") == query.expr.count(f'namespace="$namespace", job=~"{job}"'), (
            query.where
        )
        assert all(name.startswith("stream_") for name in query.metrics), query.where


def test_what_the_issue_asks_for_has_a_panel() -> None:
    names = set().union(*(q.metrics for q in queries(load())))
    for wanted in (
        "stream_consumer_lag",
        "stream_committed_lag",
        "stream_partition_stalled",
        "stream_committed_records_total",
        "stream_batches_total",
        "stream_fold_seconds_bucket",
        "stream_publish_seconds_bucket",
        "stream_event_to_redis_seconds_bucket",
        "stream_rebalances_total",
        "stream_restore_remaining_records",
        "stream_rocksdb_bytes",
        "stream_state_sessions",
        "stream_sessions_expired_total",
        "stream_events_total",
        "stream_redis_pending_sessions",
        "stream_gateway_streams_open",
        "stream_gateway_auth_refused_total",
    ):
        assert wanted in names, wanted


@pytest.mark.skipif(_promtool() is None, reason="promtool not built yet (deploy/chart-check.sh)")
def test_every_query_parses_as_promql(tmp_path: Path) -> None:
    found = queries(load())
    rules = tmp_path / "dashboard-rules.yaml"
    rules.write_text(rules_file(found))
    tool = _promtool()
    assert tool is not None
    done = subprocess.run([tool, "check", "rules", rules], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(found)} rules found" in done.stdout + done.stderr


@pytest.mark.skipif(_promtool() is None, reason="promtool not built yet (deploy/chart-check.sh)")
def test_promtool_refuses_a_query_that_does_not_parse(tmp_path: Path) -> None:
    """The check above can fail: a broken query is refused."""
    dashboard = load()
    dashboard["panels"][1]["targets"][0]["expr"] = "sum by (pod (stream_ready)"
    rules = tmp_path / "dashboard-rules.yaml"
    rules.write_text(rules_file(queries(dashboard)))
    tool = _promtool()
    assert tool is not None
    assert subprocess.run([tool, "check", "rules", rules], capture_output=True).returncode != 0
