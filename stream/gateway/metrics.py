"""The gateway's Prometheus metrics, on a port of their own (``STREAM_GATEWAY_METRICS_PORT``;
0, the default: off), never on the public one: what it counts is the operator's business.

Read at scrape time from the application's own state (open streams, slow clients
dropped, streams refused by the limits, the Redis subscription), plus the one counter
the routes move: requests refused for their token, by reason.
"""

import logging
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Final

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from stream.gateway.state import HUB, STREAMS

log = logging.getLogger(__name__)

# RFC 6750's error codes as the gateway answers them: no token, a malformed request, a
# token that does not verify (signature, expiry, audience, issuer, grant claim).
AUTH_REASONS: Final = ("missing", "malformed", "invalid")


class _State(Collector):
    """The gauges and counters the application already keeps, read at each scrape."""

    def __init__(self, app: web.Application) -> None:
        self.app = app

    def collect(self) -> Iterable[Metric]:
        hub = self.app.get(HUB)
        streams = self.app.get(STREAMS)
        open_ = GaugeMetricFamily("stream_gateway_streams_open", "SSE streams open")
        dropped = CounterMetricFamily(
            "stream_gateway_streams_dropped",
            "SSE clients dropped for reading too slowly (their queue was full)",
        )
        refused = CounterMetricFamily(
            "stream_gateway_streams_refused",
            "SSE streams refused (429) by the per-subject or per-address stream limits",
        )
        subscribed = GaugeMetricFamily(
            "stream_gateway_subscribed", "1 while the Redis pattern subscription is live"
        )
        if hub is not None:
            open_.add_metric([], hub.client_count)
            dropped.add_metric([], hub.dropped)
            subscribed.add_metric([], 1 if hub.ready.is_set() else 0)
        if streams is not None:
            refused.add_metric([], streams.refused)
        return [open_, dropped, refused, subscribed]


class GatewayMetrics:
    def __init__(self, app: web.Application) -> None:
        self.registry = CollectorRegistry()
        self.auth_refused = Counter(
            "stream_gateway_auth_refused",
            "Requests refused for their token (401/400), by reason",
            ["reason"],
            registry=self.registry,
        )
        for reason in AUTH_REASONS:
            self.auth_refused.labels(reason)
        self.registry.register(_State(app))

    def refused(self, status: int, challenge: str) -> None:
        """A refusal as ``_challenge`` answered it (its status and WWW-Authenticate)."""
        if 'error="invalid_token"' in challenge:
            self.auth_refused.labels("invalid").inc()
        elif status == 400:
            self.auth_refused.labels("malformed").inc()
        else:
            self.auth_refused.labels("missing").inc()

    def page(self) -> bytes:
        return generate_latest(self.registry)


METRICS = web.AppKey("metrics", GatewayMetrics)


def served(bind: str, port: int) -> Callable[[web.Application], AsyncIterator[None]]:
    """A cleanup context for the main application: ``/metrics`` on ``bind:port`` while it
    runs (port 0: nothing)."""

    async def serve(app: web.Application) -> AsyncIterator[None]:
        if not port:
            yield
            return
        metrics = app[METRICS]

        async def page(_: web.Request) -> web.Response:
            return web.Response(body=metrics.page(), headers={"Content-Type": CONTENT_TYPE_LATEST})

        side = web.Application()
        side.router.add_get("/metrics", page)
        runner = web.AppRunner(side, access_log=None)
        await runner.setup()
        try:
            await web.TCPSite(runner, bind, port, reuse_address=True).start()
            log.info("gateway metrics on http://%s:%d/metrics", bind, port)
            yield
        finally:
            await runner.cleanup()

    return serve
