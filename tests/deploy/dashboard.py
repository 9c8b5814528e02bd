"""The chart's Grafana dashboard as data: its PromQL queries, made concrete, and the metric
names they select. Used by tests/deploy/test_dashboard_queries.py (every query parses, with
promtool) and tests/integration/test_dashboard.py (every name is exported by a real worker
or gateway); deploy/chart-check.sh parses the rendered copy the same way."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "helm" / "context-stream" / "files" / "dashboards" / "context-stream.json"

# Grafana's variables, as a scrape of one release would fill them in.
VARIABLES = {
    "$__rate_interval": "2m",
    "$namespace": "context-stream",
    "$gateway_job": "context-stream/context-stream-gateway",
    "$job": "context-stream-metrics",
}
SELECTOR = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{")
OURS = re.compile(r"\bstream_[a-zA-Z0-9_]+")
LABEL_VALUES = re.compile(r"label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)")


@dataclass(frozen=True)
class Query:
    where: str  # the panel's title and refId, or the variable's name
    expr: str  # as Grafana holds it

    @property
    def concrete(self) -> str:
        """The query with the dashboard's variables filled in (PromQL Prometheus parses)."""
        expr = self.expr
        for name, value in VARIABLES.items():  # longest names first: $job after $gateway_job
            expr = expr.replace(name, value)
        return expr

    @property
    def metrics(self) -> set[str]:
        """Every series name the query selects (all of ours start with stream_)."""
        return set(OURS.findall(self.expr)) | set(SELECTOR.findall(self.expr))

    @property
    def gateway(self) -> bool:
        return "$gateway_job" in self.expr


def load(path: Path = DASHBOARD) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(path.read_text())
    return loaded


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])  # a collapsed row holds its panels


def queries(dashboard: dict[str, Any]) -> list[Query]:
    found = [
        Query(f"{panel['title']} ({target['refId']})", target["expr"])
        for panel in panels(dashboard)
        for target in panel.get("targets", [])
    ]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] != "query":
            continue
        query = variable["query"]
        text = query["query"] if isinstance(query, dict) else query
        match = LABEL_VALUES.match(text)
        if match:  # label_values(metric{...}, label) is Grafana's, not PromQL: its selector is
            selector = text[match.start(1) : text.rindex(",")]
            found.append(Query(f"variable {variable['name']}", selector))
    return found


def rules_file(found: list[Query]) -> str:
    """A Prometheus rules file recording each query: `promtool check rules` parses it."""
    rules = [
        {"record": f"dashboard:query_{n}", "expr": query.concrete} for n, query in enumerate(found)
    ]
    return yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}, sort_keys=False)


def exported(text: str) -> set[str]:
    """The series names a /metrics page exports, declared families included (a labelled
    metric with no series yet is still exported): counters as name_total, histograms as
    name_bucket, name_sum and name_count."""
    from prometheus_client.parser import text_string_to_metric_families

    names = set()
    for family in text_string_to_metric_families(text):
        suffixes = {
            "counter": ("_total",),
            "histogram": ("_bucket", "_sum", "_count"),
            "summary": ("_sum", "_count", ""),
        }.get(family.type, ("",))
        names |= {family.name + suffix for suffix in suffixes}
        names |= {sample.name for sample in family.samples}
    return names
