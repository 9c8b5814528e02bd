"""The gateway's /metrics: on its own port only, counting token refusals and streams."""

import asyncio
from pathlib import Path

import aiohttp
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client.parser import text_string_to_metric_families

from stream.config import Settings
from stream.gateway.app import Options, build_app
from stream.gateway.auth import FileKeys, Verifier
from tests.integration.harness import free_port
from tests.unit.gateway.fakes import FakeStore, hub
from tests.unit.gateway.tokens import Signer, jwks


def _samples(text: str) -> dict[str, float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            found[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return found


def test_metrics_count_refusals_on_their_own_port_never_the_public_one(tmp_path: Path) -> None:
    path = tmp_path / "jwks.json"
    path.write_bytes(jwks(Signer()))
    port = free_port()
    config = Options(auth="jwt", metrics_port=port)
    verifier = Verifier(config, FileKeys(str(path)))

    async def go() -> None:
        store = FakeStore()
        app = build_app(
            Settings(metrics_bind="127.0.0.1"),
            config,
            store=store,
            hub=hub(store),
            verifier=verifier,
        )
        async with TestClient(TestServer(app)) as client, aiohttp.ClientSession() as http:
            assert (await client.get("/metrics")).status == 404  # not on the public port
            assert (await client.get("/sessions/s/context")).status == 401
            bad = {"Authorization": "Bearer x.y.z"}
            assert (await client.get("/sessions/s/context", headers=bad)).status == 401
            assert (await client.get("/sessions", headers=bad)).status == 401
            basic = {"Authorization": "Basic dTpw"}
            assert (await client.get("/sessions", headers=basic)).status == 400
            async with http.get(f"http://127.0.0.1:{port}/metrics") as answer:
                assert answer.status == 200
                found = _samples(await answer.text())
        assert found["stream_gateway_auth_refused_total{reason=missing}"] == 1
        assert found["stream_gateway_auth_refused_total{reason=invalid}"] == 2
        assert found["stream_gateway_auth_refused_total{reason=malformed}"] == 1
        assert found["stream_gateway_streams_open"] == 0
        assert found["stream_gateway_streams_refused_total"] == 0
        assert "stream_gateway_subscribed" in found

    asyncio.run(go())


def test_no_metrics_port_by_default() -> None:
    assert Options().metrics_port == 0
    assert (
        Options.from_env(Settings(), {"STREAM_GATEWAY_METRICS_PORT": "9103"}).metrics_port == 9103
    )
