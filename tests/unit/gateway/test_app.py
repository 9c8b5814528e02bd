"""The gateway's HTTP surface against an in-memory store and a hub fed by hand."""

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest
from aiohttp import ClientPayloadError, ClientResponse
from aiohttp.test_utils import TestClient, TestServer

from stream.config import Settings
from stream.gateway.app import Options, build_app
from stream.gateway.hub import Hub
from tests.unit.gateway.fakes import FakeStore, hub, update

Scenario = Callable[[TestClient[Any, Any], FakeStore, Hub], Awaitable[None]]


def run(scenario: Scenario, **options: Any) -> None:
    async def go() -> None:
        store = FakeStore()
        fan = hub(store)
        settings = Settings(redis_key_prefix="t:")
        app = build_app(settings, Options(**options), store=store, hub=fan)
        async with TestClient(TestServer(app, handler_cancellation=True)) as client:
            await scenario(client, store, fan)

    asyncio.run(go())


@dataclass
class Stream:
    """Reads an SSE response: events as (id, data) and comment lines."""

    response: ClientResponse
    events: list[tuple[int, bytes]] = field(default_factory=list)
    comments: list[bytes] = field(default_factory=list)

    async def read(self, count: int, timeout: float = 5) -> list[tuple[int, bytes]]:
        async with asyncio.timeout(timeout):
            event_id, data = None, b""
            while len(self.events) < count:
                line = (await self.response.content.readline()).rstrip(b"\n")
                if line.startswith(b":"):
                    self.comments.append(line)
                elif line.startswith(b"id: "):
                    event_id = int(line[4:])
                elif line.startswith(b"data: "):
                    data = line[6:]
                elif line == b"" and event_id is not None:
                    self.events.append((event_id, data))
                    event_id, data = None, b""
        return self.events

    async def quiet(self, seconds: float) -> None:
        """Asserts no event arrives for a while."""
        try:
            await self.read(len(self.events) + 1, timeout=seconds)
        except TimeoutError:
            return
        raise AssertionError(f"unexpected event {self.events[-1]}")


async def _until(check: Callable[[], bool], timeout: float = 5) -> None:
    async with asyncio.timeout(timeout):
        while not check():
            await asyncio.sleep(0.01)


def test_get_returns_the_stored_json_byte_for_byte_or_404() -> None:
    async def scenario(client: TestClient[Any, Any], store: FakeStore, fan: Hub) -> None:
        payload = update("s1", 5, faults={"contextBreakdown": {"seq": 4, "error": "x"}})
        store.put("s1", payload)
        response = await client.get("/sessions/s1/context")
        assert response.status == 200
        assert response.content_type == "application/json"
        assert await response.read() == payload
        missing = await client.get("/sessions/nope/context")
        assert missing.status == 404
        assert (await missing.json())["sessionId"] == "nope"
        store.down = True
        assert (await client.get("/sessions/s1/context")).status == 503

    run(scenario)


def test_stream_sends_the_latest_at_once_then_every_update_in_order() -> None:
    async def scenario(client: TestClient[Any, Any], store: FakeStore, fan: Hub) -> None:
        store.put("s", update("s", 3))
        response = await client.get("/sessions/s/context/stream")
        assert response.status == 200
        assert response.headers["Content-Type"] == "text/event-stream"
        stream = Stream(response)
        assert await stream.read(1) == [(3, update("s", 3))]
        await _until(lambda: fan.client_count == 1)
        for seq in (3, 4, 4, 2, 5, 6):  # repeats and older seqs are skipped
            fan.dispatch("s", update("s", seq))
        assert [i for i, _ in await stream.read(4)] == [3, 4, 5, 6]
        await stream.quiet(0.2)
        response.close()
        await _until(lambda: fan.client_count == 0)

    run(scenario)


def test_last_event_id_resumes_without_repeats() -> None:
    async def scenario(client: TestClient[Any, Any], store: FakeStore, fan: Hub) -> None:
        store.put("s", update("s", 7))
        # Already has 7: nothing at once, then only newer updates.
        resumed = Stream(
            await client.get("/sessions/s/context/stream", headers={"Last-Event-ID": "7"})
        )
        await _until(lambda: fan.client_count == 1)
        await resumed.quiet(0.2)
        fan.dispatch("s", update("s", 7))
        fan.dispatch("s", update("s", 8))
        assert [i for i, _ in await resumed.read(1)] == [8]
        # Behind: the current value at once (it supersedes what was missed).
        behind = Stream(await client.get("/sessions/s/context/stream?lastEventId=5"))
        assert [i for i, _ in await behind.read(1)] == [7]

    run(scenario)


def test_an_unknown_session_streams_once_it_appears_and_heartbeats_meanwhile() -> None:
    async def scenario(client: TestClient[Any, Any], store: FakeStore, fan: Hub) -> None:
        stream = Stream(await client.get("/sessions/new/context/stream"))
        await _until(lambda: fan.client_count == 1)
        await stream.quiet(0.3)
        assert b": heartbeat" in stream.comments
        fan.dispatch("new", update("new", 0))
        assert [i for i, _ in await stream.read(1)] == [0]

    run(scenario, heartbeat=0.1)


def test_a_dropped_client_sees_its_stream_end() -> None:
    async def scenario(client: TestClient[Any, Any], store: FakeStore, fan: Hub) -> None:
        response = await client.get("/sessions/s/context/stream")
        await _until(lambda: fan.client_count == 1)
        (subscription,) = fan.clients["s"]
        fan._drop(subscription)
        # The connection is aborted (a write might be stuck on this client): the stream
        # ends mid-body.
        with pytest.raises(ClientPayloadError):
            async with asyncio.timeout(5):
                while await response.content.readline():
                    pass
        assert fan.dropped == 1

    run(scenario)


def test_stream_is_503_while_the_subscription_is_down() -> None:
    async def scenario(client: TestClient[Any, Any], store: FakeStore, fan: Hub) -> None:
        fan.ready.clear()
        response = await client.get("/sessions/s/context/stream")
        assert response.status == 503
        assert fan.client_count == 0
        health = await client.get("/healthz")
        assert health.status == 503 and (await health.json())["subscribed"] is False

    run(scenario, ready_timeout=0.1)


def test_sessions_lists_recent_sessions_with_prefix_and_limit() -> None:
    async def scenario(client: TestClient[Any, Any], store: FakeStore, fan: Hub) -> None:
        store.put("a-1", update("a-1", 250), 1000)
        store.put("a-2", update("a-2", 10), 3000)
        store.put("b-1", update("b-1", 1), 2000)
        body = await (await client.get("/sessions")).json()
        assert [s["sessionId"] for s in body["sessions"]] == ["a-2", "b-1", "a-1"]
        assert body["sessions"][2] == {
            "sessionId": "a-1",
            "seq": 250,
            "percent": 25.0,
            "projectedTokens": 250,
            "contextWindow": 1000,
            "faults": 0,
            "updatedAt": 1000,
        }
        body = await (await client.get("/sessions?prefix=a-&limit=1")).json()
        assert [s["sessionId"] for s in body["sessions"]] == ["a-2"]
        assert (await client.get("/sessions?limit=x")).status == 400

    run(scenario)


def test_healthz() -> None:
    async def scenario(client: TestClient[Any, Any], store: FakeStore, fan: Hub) -> None:
        response = await client.get("/healthz")
        assert response.status == 200
        assert orjson.loads(await response.read())["redis"] is True
        store.down = True
        assert (await client.get("/healthz")).status == 503

    run(scenario)


def test_cors_for_configured_origins_only() -> None:
    async def scenario(client: TestClient[Any, Any], store: FakeStore, fan: Hub) -> None:
        store.put("s", update("s", 1))
        ok = await client.get("/sessions/s/context", headers={"Origin": "https://ui.example"})
        assert ok.headers["Access-Control-Allow-Origin"] == "https://ui.example"
        assert "Origin" in ok.headers.getall("Vary")
        other = await client.get("/sessions/s/context", headers={"Origin": "https://evil.example"})
        assert "Access-Control-Allow-Origin" not in other.headers
        preflight = await client.options(
            "/sessions/s/context/stream",
            headers={
                "Origin": "https://ui.example",
                "Access-Control-Request-Method": "GET",
                "Access-Control-Request-Headers": "last-event-id",
            },
        )
        assert preflight.status == 204
        assert preflight.headers["Access-Control-Allow-Origin"] == "https://ui.example"
        assert preflight.headers["Access-Control-Allow-Headers"] == "last-event-id"
        stream = await client.get(
            "/sessions/s/context/stream", headers={"Origin": "https://ui.example"}
        )
        assert stream.headers["Access-Control-Allow-Origin"] == "https://ui.example"
        stream.close()

    run(scenario, cors_origins=("https://ui.example",))


def test_cors_wildcard() -> None:
    async def scenario(client: TestClient[Any, Any], store: FakeStore, fan: Hub) -> None:
        response = await client.get("/healthz", headers={"Origin": "https://any.example"})
        assert response.headers["Access-Control-Allow-Origin"] == "*"

    run(scenario, cors_origins=("*",))


def test_the_page_and_its_files_are_served() -> None:
    async def scenario(client: TestClient[Any, Any], store: FakeStore, fan: Hub) -> None:
        index = await client.get("/")
        assert index.status == 200 and "text/html" in index.content_type
        assert "/static/index.js" in await index.text()
        page = await client.get("/sessions/some%20session")
        assert page.status == 200 and "/static/session.js" in await page.text()
        for name in ("meter.js", "session.js", "index.js", "style.css", "favicon.svg"):
            static = await client.get(f"/static/{name}")
            assert static.status == 200, name
            assert static.headers["Cache-Control"] == "no-cache"

    run(scenario)


def test_session_ids_are_taken_from_the_path_decoded() -> None:
    async def scenario(client: TestClient[Any, Any], store: FakeStore, fan: Hub) -> None:
        store.put("a b:é", update("a b:é", 1))
        response = await client.get("/sessions/a%20b:%C3%A9/context")
        assert response.status == 200

    run(scenario)
