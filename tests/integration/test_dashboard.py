"""The chart's Grafana dashboard against a real worker and gateway: every metric a panel's
query names is on their /metrics pages (histograms as _bucket/_sum/_count, counters as
_total), so no panel stays empty for want of a series nobody exports. That every query
parses as PromQL: tests/deploy/test_dashboard_queries.py and deploy/chart-check.sh."""

import random
import urllib.request
from pathlib import Path

import pytest

from tests.deploy.dashboard import Query, exported, load, queries
from tests.integration.gateway_harness import Gateway
from tests.integration.harness import Deployment, event_count, free_port, wait_until, write_sessions

pytestmark = pytest.mark.integration


def _page(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200
        return response.read().decode()


def _missing(found: list[Query], worker: set[str], gateway: set[str]) -> list[str]:
    """``where: name`` for each name a query selects that its process does not export."""
    return [
        f"{query.where}: {name}"
        for query in found
        for name in sorted(query.metrics)
        if name not in (gateway if name.startswith("stream_gateway_") else worker)
    ]


def test_every_metric_a_panel_names_is_exported_by_a_real_worker_or_gateway(
    deployment: Deployment, tmp_path: Path
) -> None:
    paths = write_sessions(tmp_path / "logs", random.Random(41), "d", 4, (30, 80))
    worker = deployment.start_worker()
    metrics_port = free_port()
    gateway = Gateway.start(deployment, STREAM_GATEWAY_METRICS_PORT=str(metrics_port))
    try:
        wait_until(lambda: worker.probe("/readyz") == 200, 90, "the worker's readiness")
        deployment.stream("produce", *map(str, paths))
        deployment.wait_accounted(event_count(paths))
        # The per-partition gauges appear with the worker's 10 s refresh.
        wait_until(
            lambda: any(k.startswith("stream_committed_lag{") for k in worker.metrics()),
            30,
            "the per-partition lag series",
        )
        worker_page = _page(f"http://127.0.0.1:{worker.metrics_port}/metrics")
        gateway_page = _page(f"http://127.0.0.1:{metrics_port}/metrics")
        assert gateway.get("/metrics")[0] == 404  # never on the gateway's public port
    finally:
        gateway.stop()
    worker_names, gateway_names = exported(worker_page), exported(gateway_page)
    found = queries(load())
    assert len(found) >= 39
    assert _missing(found, worker_names, gateway_names) == []
    # The check can fail: a name nobody exports is reported, with its panel.
    typo = [Query("typo (A)", 'sum(stream_consumer_lagg{namespace="$namespace"})')]
    assert _missing(typo, worker_names, gateway_names) == ["typo (A): stream_consumer_lagg"]
    # The end-to-end latency from event time was observed for the published updates.
    samples = worker.metrics()
    assert samples["stream_event_to_redis_seconds_count"] >= 4
    assert samples["stream_rebalances_total"] >= 1
    assert "stream_gateway_streams_open 0.0" in gateway_page
    assert 'stream_gateway_auth_refused_total{reason="missing"} 0.0' in gateway_page
