"""The gateway's HTTP surface against an in-memory store and a hub fed by hand."""

import asyncio
import logging
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import jwt
import orjson
import pytest
from aiohttp import ClientPayloadError, ClientResponse
from aiohttp.test_utils import TestClient, TestServer

from stream.config import Settings
from stream.gateway import app as gateway_app
from stream.gateway.app import Options, _Writer, build_app
from stream.gateway.auth import FileKeys, Verifier
from stream.gateway.hub import Hub
from tests.unit.gateway.fakes import FakeStore, hub, stored, update
from tests.unit.gateway.tokens import Signer, jwks
from tests.waiting import FakeClock, until

Scenario = Callable[[TestClient[Any, Any], FakeStore, Hub], Awaitable[None]]


def run(scenario: Scenario, verifier: Verifier | None = None, **options: Any) -> None:
    async def go() -> None:
        store = FakeStore()
        fan = hub(store)
        settings = Settings(redis_key_prefix="t:")
        config = Options(auth="jwt" if verifier else "none", **options)
        app = build_app(settings, config, store=store, hub=fan, verifier=verifier)
        async with TestClient(TestServer(app, handler_cancellation=True)) as client:
            await scenario(client, store, fan)

    asyncio.run(go())


def seqs(events: list[tuple[str, bytes]]) -> list[int]:
    """The seqs of update events (ids ``gen-seq-n-v``)."""
    return [int(i.split("-")[1]) for i, _ in events]


@dataclass
class Stream:
    """Reads an SSE response: update events as (id, data), named events as (name, data),
    comment lines, and whether the server ended it."""

    response: ClientResponse
    events: list[tuple[str, bytes]] = field(default_factory=list)
    named: list[tuple[str, bytes]] = field(default_factory=list)
    retries: list[int] = field(default_factory=list)
    comments: list[bytes] = field(default_factory=list)
    ended: bool = False

    async def read(self, count: int, timeout: float = 5) -> list[tuple[str, bytes]]:
        async with asyncio.timeout(timeout):
            event_id, name, data = None, None, b""
            while len(self.events) < count and not self.ended:
                raw = await self.response.content.readline()
                if not raw:
                    self.ended = True
                    break
                line = raw.rstrip(b"\n")
                if line.startswith(b":"):
                    self.comments.append(line)
                elif line.startswith(b"id: "):
                    event_id = line[4:].decode()
                elif line.startswith(b"event: "):
                    name = line[7:].decode()
                elif line.startswith(b"retry: "):
                    self.retries.append(int(line[7:]))
                elif line.startswith(b"data: "):
                    data = line[6:]
                elif line == b"" and name is not None:
                    self.named.append((name, data))
                    event_id, name, data = None, None, b""
                elif line == b"" and event_id is not None:
                    self.events.append((event_id, data))
                    event_id, name, data = None, None, b""
        return self.events

    async def to_end(self, timeout: float = 5) -> None:
        await self.read(10**9, timeout)

    async def quiet(self, seconds: float) -> None:
        """Asserts no event arrives for a while."""
        try:
            await self.read(len(self.events) + 1, timeout=seconds)
        except TimeoutError:
            return
        raise AssertionError(f"unexpected event {self.events[-1]}")


def test_get_returns_the_stored_json_byte_for_byte_or_404() -> None:
    async def scenario(client: TestClient[Any, Any], store: FakeStore, fan: Hub) -> None:
        payload = update("s1", 5, faults={"contextBreakdown": {"seq": 4, "error": "x"}})
        store.put("s1", payload)
        response = await client.get("/sessions/s1/context")
        assert response.status == 200
        assert response.content_type == "application/json"
        assert await response.read() == payload
        assert "Last-Modified" not in response.headers  # not in the recent set: no time
        # When Redis took it (the listing's updatedAt), to the second, as HTTP says.
        store.put("s2", update("s2", 1), 1_700_000_000_999)
        taken = await client.get("/sessions/s2/context")
        assert taken.headers["Last-Modified"] == "Tue, 14 Nov 2023 22:13:20 GMT"
        listed = await (await client.get("/sessions?prefix=s2")).json()
        assert listed["sessions"][0]["updatedAt"] == 1_700_000_000_999
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
        assert await stream.read(1) == [("0-3-3-0", update("s", 3))]
        await until(lambda: fan.client_count == 1)
        for seq in (3, 4, 4, 2, 5, 6):  # repeats and older versions are skipped
            fan.dispatch("s", stored("s", seq))
        assert seqs(await stream.read(4)) == [3, 4, 5, 6]
        await stream.quiet(0.2)
        response.close()
        await until(lambda: fan.client_count == 0)

    run(scenario)


def test_last_event_id_resumes_without_repeats() -> None:
    async def scenario(client: TestClient[Any, Any], store: FakeStore, fan: Hub) -> None:
        store.put("s", update("s", 7))
        # Already has 7: nothing at once, then only newer updates.
        resumed = Stream(
            await client.get("/sessions/s/context/stream", headers={"Last-Event-ID": "0-7-7-0"})
        )
        await until(lambda: fan.client_count == 1)
        await resumed.quiet(0.2)
        fan.dispatch("s", stored("s", 7))
        store.put("s", update("s", 8))
        fan.dispatch("s", stored("s", 8))
        assert seqs(await resumed.read(1)) == [8]
        # Behind: the current value at once (it supersedes what was missed).
        behind = Stream(await client.get("/sessions/s/context/stream?lastEventId=0-5-5-0"))
        assert seqs(await behind.read(1)) == [8]
        # An id of an older gateway (a plain seq) resumes too.
        plain = Stream(
            await client.get("/sessions/s/context/stream", headers={"Last-Event-ID": "8"})
        )
        await until(lambda: fan.client_count == 3)
        await plain.quiet(0.2)

    run(scenario)


def test_an_unknown_session_streams_once_it_appears_and_heartbeats_meanwhile() -> None:
    async def scenario(client: TestClient[Any, Any], store: FakeStore, fan: Hub) -> None:
        stream = Stream(await client.get("/sessions/new/context/stream"))
        await until(lambda: fan.client_count == 1)
        await stream.quiet(0.3)
        assert b": heartbeat" in stream.comments
        fan.dispatch("new", stored("new", 0))
        assert seqs(await stream.read(1)) == [0]

    run(scenario, heartbeat=0.1)


def test_a_dropped_client_sees_its_stream_end() -> None:
    async def scenario(client: TestClient[Any, Any], store: FakeStore, fan: Hub) -> None:
        response = await client.get("/sessions/s/context/stream")
        await until(lambda: fan.client_count == 1)
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
            "time": None,
        }
        store.put("c-3", update("c-3", 1, time=1234), 4000)
        body = await (await client.get("/sessions?limit=1")).json()
        assert body["sessions"][0]["time"] == 1234  # the session's latest event time
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


CSP_NO_FRAMES = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self';"
    " connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
META = re.compile(r'<meta name="context-stream-app-origins" content="([^"]*)">')


def test_without_embed_origins_the_page_may_not_be_framed_or_opened_across_origins() -> None:
    async def scenario(client: TestClient[Any, Any], store: FakeStore, fan: Hub) -> None:
        for path in ("/", "/sessions/s", "/static/index.js", "/sessions", "/healthz"):
            response = await client.get(path)
            assert response.headers["Content-Security-Policy"] == CSP_NO_FRAMES, path
            assert response.headers["X-Frame-Options"] == "DENY", path
            assert response.headers["Cross-Origin-Opener-Policy"] == "same-origin", path
        for path in ("/", "/sessions/s"):
            found = META.findall(await (await client.get(path)).text())
            assert found == [""], path  # only the page's own origin hands it a token

    run(scenario)


def test_embed_origins_open_the_page_and_only_the_page_to_those_apps() -> None:
    origins = ("https://app.example.com", "http://127.0.0.1:8081")

    async def scenario(client: TestClient[Any, Any], store: FakeStore, fan: Hub) -> None:
        for path in ("/", "/sessions/s"):
            page = await client.get(path)
            assert page.status == 200 and page.headers["Cache-Control"] == "no-cache"
            csp = page.headers["Content-Security-Policy"]
            assert csp == CSP_NO_FRAMES.removesuffix("'none'") + " ".join(origins)
            assert csp.endswith("frame-ancestors https://app.example.com http://127.0.0.1:8081")
            # Framed by those origins (CSP), opened by them (no COOP); nothing else moves.
            assert "X-Frame-Options" not in page.headers
            assert "Cross-Origin-Opener-Policy" not in page.headers
            assert page.headers["X-Content-Type-Options"] == "nosniff"
            assert page.headers["Referrer-Policy"] == "no-referrer"
            assert META.findall(await page.text()) == [" ".join(origins)]
        # Everything that is not the page keeps the strict headers.
        for path in ("/static/index.js", "/static/style.css", "/sessions", "/healthz", "/nope"):
            response = await client.get(path)
            assert response.headers["Content-Security-Policy"] == CSP_NO_FRAMES, path
            assert response.headers["X-Frame-Options"] == "DENY", path
            assert response.headers["Cross-Origin-Opener-Policy"] == "same-origin", path

    run(scenario, embed_origins=origins)


def test_the_origins_meta_is_filled_escaped_and_must_exist() -> None:
    template = '<head><meta name="context-stream-app-origins" content=""></head>'
    # Origins reaching it are validated (config); escaping holds even for a hostile value.
    filled = gateway_app.page_html(template, ('https://a.example"><script>x</script>',))
    assert b"<script>" not in filled and b"&quot;&gt;&lt;script&gt;" in filled
    assert gateway_app.page_html(template, ()) == template.encode()
    with pytest.raises(ValueError, match="context-stream-app-origins"):
        gateway_app.page_html("<head></head>", ("https://a.example",))


def test_session_ids_are_taken_from_the_path_decoded() -> None:
    async def scenario(client: TestClient[Any, Any], store: FakeStore, fan: Hub) -> None:
        store.put("a b:é", update("a b:é", 1))
        response = await client.get("/sessions/a%20b:%C3%A9/context")
        assert response.status == 200

    run(scenario)


# -- resumable across generations, expiry ----------------------------------------------
def test_a_rebuilt_generation_is_newer_although_its_seq_is_lower() -> None:
    async def scenario(client: TestClient[Any, Any], store: FakeStore, fan: Hub) -> None:
        store.put_stored("s", stored("s", 3044, gen=1))
        live = Stream(await client.get("/sessions/s/context/stream"))
        assert [i for i, _ in await live.read(1)] == ["1-3044-3044-0"]
        await until(lambda: fan.client_count == 1)
        store.put_stored("s", stored("s", 5, gen=2))
        fan.dispatch("s", stored("s", 5, gen=2))  # the rebuilt view: taken at once
        fan.dispatch("s", stored("s", 3050, gen=1))  # a late write of the old generation
        fan.dispatch("s", stored("s", 6, gen=2))
        assert [i for i, _ in await live.read(3)] == [
            "1-3044-3044-0",
            "2-5-5-0",
            "2-6-6-0",
        ]
        # Resuming from the old generation, by full id or by the plain seq of an older
        # gateway: the current value at once, although its seq is lower.
        store.put_stored("s", stored("s", 6, gen=2))
        for resume in ("1-3044-3044-0", "3044"):
            back = Stream(
                await client.get("/sessions/s/context/stream", headers={"Last-Event-ID": resume})
            )
            assert [i for i, _ in await back.read(1)] == ["2-6-6-0"], resume
            back.response.close()

    run(scenario)


def test_an_expired_session_ends_its_streams_for_good() -> None:
    async def scenario(client: TestClient[Any, Any], store: FakeStore, fan: Hub) -> None:
        store.put("gone", update("gone", 2))
        stream = Stream(await client.get("/sessions/gone/context/stream"))
        await stream.read(1)
        await until(lambda: fan.client_count == 1)
        store.delete("gone")
        message = orjson.dumps({"sessionId": "gone", "expired": True})
        await fan.handle([("gone", message)])
        await stream.to_end()
        assert stream.ended and stream.named == [("expired", message)]
        # The last retry is long: a client that ignores the event does not loop.
        assert stream.retries[-1] == 3_600_000
        assert fan.client_count == 0
        assert (await client.get("/sessions/gone/context")).status == 404

    run(scenario)


# -- authentication --------------------------------------------------------------------
@pytest.fixture
def signer() -> Signer:
    return Signer("ES256")


@pytest.fixture
def verifier(tmp_path: Path, signer: Signer) -> Verifier:
    path = tmp_path / "jwks.json"
    path.write_bytes(jwks(signer))
    return Verifier(Options(auth="jwt", jwt_leeway=0), FileKeys(str(path)))


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_the_data_routes_need_a_token_and_say_so(verifier: Verifier, signer: Signer) -> None:
    async def scenario(client: TestClient[Any, Any], store: FakeStore, fan: Hub) -> None:
        store.put("s", update("s", 1), 10)
        for path in ("/sessions/s/context", "/sessions/s/context/stream", "/sessions"):
            missing = await client.get(path)
            assert missing.status == 401, path
            assert missing.headers["WWW-Authenticate"] == 'Bearer realm="context-stream"'
            bad = await client.get(path, headers=_bearer("x.y.z"))
            assert bad.status == 401
            assert 'error="invalid_token"' in bad.headers["WWW-Authenticate"]
            basic = await client.get(path, headers={"Authorization": "Basic dTpw"})
            assert basic.status == 400
            assert 'error="invalid_request"' in basic.headers["WWW-Authenticate"]
        ok = await client.get("/sessions/s/context", headers=_bearer(signer.token(["*"])))
        assert ok.status == 200 and await ok.read() == update("s", 1)
        # Open without a token: the probe and the page (its requests carry the token).
        for path in ("/healthz", "/", "/sessions/s", "/static/session.js"):
            assert (await client.get(path)).status == 200, path

    run(scenario, verifier=verifier)


def test_the_stream_takes_the_token_as_access_token_and_only_the_stream(
    verifier: Verifier, signer: Signer
) -> None:
    async def scenario(client: TestClient[Any, Any], store: FakeStore, fan: Hub) -> None:
        store.put("s", update("s", 1))
        token = signer.token(["*"])
        stream = await client.get(f"/sessions/s/context/stream?access_token={token}")
        assert stream.status == 200
        assert seqs(await Stream(stream).read(1)) == [1]
        stream.close()
        assert (await client.get(f"/sessions/s/context?access_token={token}")).status == 401
        both = await client.get(
            f"/sessions/s/context/stream?access_token={token}", headers=_bearer(token)
        )
        assert both.status == 400

    run(scenario, verifier=verifier)


def test_a_token_reads_only_the_sessions_it_grants(verifier: Verifier, signer: Signer) -> None:
    async def scenario(client: TestClient[Any, Any], store: FakeStore, fan: Hub) -> None:
        for i, session_id in enumerate(("team-a/1", "team-a/2", "team-b/1", "team-ab")):
            store.put(session_id, update(session_id, 1), 100 + i)
        token = _bearer(signer.token(["team-a/*"]))
        assert (await client.get("/sessions/team-a%2F1/context", headers=token)).status == 200
        # Outside the grant: exactly the answer for an unknown session.
        outside = await client.get("/sessions/team-b%2F1/context", headers=token)
        unknown = await client.get("/sessions/team-a%2F9/context", headers=token)
        assert outside.status == unknown.status == 404
        assert (await outside.json())["error"] == (await unknown.json())["error"]
        stream = await client.get("/sessions/team-b%2F1/context/stream", headers=token)
        assert stream.status == 404 and fan.client_count == 0
        listed = await (await client.get("/sessions", headers=token)).json()
        assert [s["sessionId"] for s in listed["sessions"]] == ["team-a/2", "team-a/1"]
        asked = await (await client.get("/sessions?prefix=team", headers=token)).json()
        assert [s["sessionId"] for s in asked["sessions"]] == ["team-a/2", "team-a/1"]
        none = await (await client.get("/sessions?prefix=team-b", headers=token)).json()
        assert none["sessions"] == []
        everything = _bearer(signer.token(["*"]))
        listed = await (await client.get("/sessions", headers=everything)).json()
        assert len(listed["sessions"]) == 4
        nothing = _bearer(signer.token(None))  # no claim: nothing
        assert (await (await client.get("/sessions", headers=nothing)).json())["sessions"] == []

    run(scenario, verifier=verifier)


def test_a_stream_ends_when_its_token_does(tmp_path: Path, signer: Signer) -> None:
    """On the verifier's clock, which the test sets: a token with a second left, and one
    that has ended by the time its stream starts."""
    path = tmp_path / "jwks.json"
    path.write_bytes(jwks(signer))
    clock = FakeClock()
    verifier = Verifier(Options(auth="jwt", jwt_leeway=0), FileKeys(str(path)), clock=clock)
    ended = [("reauthenticate", b'{"reason":"the token expired"}')]

    async def opened(client: TestClient[Any, Any], seconds_left: float) -> Stream:
        token = signer.token(["*"], expires_in=600)  # PyJWT checks exp on the real clock
        clock.now = jwt.decode(token, options={"verify_signature": False})["exp"] - seconds_left
        return Stream(await client.get("/sessions/s/context/stream", headers=_bearer(token)))

    async def scenario(client: TestClient[Any, Any], store: FakeStore, fan: Hub) -> None:
        store.put("s", update("s", 1))
        stream = await opened(client, seconds_left=1.0)
        await stream.to_end(timeout=5)  # a failure bound: a stream that outlives it fails
        assert stream.named == ended
        assert seqs(stream.events) == [1] and len(stream.comments) >= 1  # heartbeats meanwhile
        stream = await opened(client, seconds_left=-1.0)
        await stream.to_end(timeout=5)
        assert stream.named == ended
        assert seqs(stream.events) == [1] and stream.comments == []  # ended at once

    run(scenario, verifier=verifier, heartbeat=0.1)


def test_streams_are_limited_per_subject_and_per_address(
    verifier: Verifier, signer: Signer
) -> None:
    async def scenario(client: TestClient[Any, Any], store: FakeStore, fan: Hub) -> None:
        path = "/sessions/s/context/stream"
        alice = _bearer(signer.token(["*"], sub="alice"))
        first = [await client.get(path, headers=alice) for _ in range(2)]
        assert [r.status for r in first] == [200, 200]
        refused = await client.get(path, headers=alice)
        assert refused.status == 429 and "per token subject" in (await refused.json())["error"]
        bob = await client.get(path, headers=_bearer(signer.token(["*"], sub="bob")))
        assert bob.status == 200
        carol = await client.get(path, headers=_bearer(signer.token(["*"], sub="carol")))
        assert carol.status == 429 and "per client address" in (await carol.json())["error"]
        first[0].close()
        await until(lambda: fan.client_count == 2)
        again = await client.get(path, headers=alice)
        assert again.status == 200  # a closed stream frees its place

    run(scenario, verifier=verifier, max_streams_per_subject=2, max_streams_per_address=3)


def test_a_stream_whose_client_reads_nothing_is_closed() -> None:
    class Stuck:
        async def write(self, data: bytes) -> None:
            await asyncio.Event().wait()  # the socket's buffers are full: a write never ends

    class Transport:
        aborted = False

        def abort(self) -> None:
            self.aborted = True

    class Request:
        transport = Transport()

    async def go() -> None:
        request = Request()
        writer = _Writer(request, Stuck(), idle=0.1)  # type: ignore[arg-type]
        with pytest.raises(ConnectionAbortedError):
            await writer(b"data: x\n\n")
        assert writer.stalled and request.transport.aborted

    asyncio.run(go())


# -- requests: hosts, sizes, routes, headers --------------------------------------------
def test_only_allowed_host_names_are_served() -> None:
    async def scenario(client: TestClient[Any, Any], store: FakeStore, fan: Hub) -> None:
        store.put("s", update("s", 1))
        for host in ("localhost:8080", "127.0.0.1", "[::1]:80", "ctx.example.com", "a.internal"):
            response = await client.get("/sessions/s/context", headers={"Host": host})
            assert response.status == 200, host
        # DNS rebinding: the attacker's name resolving to the loopback gateway.
        for host in ("evil.example", "localhost.evil.example", "xinternal", "", "[::2]"):
            response = await client.get("/sessions/s/context", headers={"Host": host})
            assert response.status == 421, host
        rebound = await client.get("/", headers={"Host": "evil.example"})
        assert rebound.status == 421
        probe = await client.get("/healthz", headers={"Host": "10.1.2.3:8080"})
        assert probe.status == 200  # kubelet probes by pod IP

    hosts = ("localhost", "127.0.0.1", "[::1]", "ctx.example.com", ".internal.lan", ".internal")
    run(scenario, allowed_hosts=hosts)


def test_long_query_strings_unknown_routes_and_the_headers_of_every_answer() -> None:
    async def scenario(client: TestClient[Any, Any], store: FakeStore, fan: Hub) -> None:
        assert (await client.get("/sessions?prefix=" + "x" * 300)).status == 414
        assert (await client.get("/sessions?prefix=" + "x" * 200)).status == 200
        for path in ("/nope", "/sessions/s/context/nope", "/static/nope.js"):
            assert (await client.get(path)).status == 404, path
        for path in ("/", "/sessions", "/nope", "/static/meter.js", "/healthz"):
            response = await client.get(path)
            assert response.headers["Server"] == "context-stream", path
            csp = response.headers["Content-Security-Policy"]
            assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
            assert "unsafe-inline" not in csp
            assert response.headers["X-Content-Type-Options"] == "nosniff"
            assert response.headers["Referrer-Policy"] == "no-referrer"

    run(scenario, max_query_bytes=256)


def test_wildcard_cors_never_allows_credentials(verifier: Verifier, signer: Signer) -> None:
    async def scenario(client: TestClient[Any, Any], store: FakeStore, fan: Hub) -> None:
        store.put("s", update("s", 1))
        origin = {"Origin": "https://ui.example"}
        response = await client.get(
            "/sessions/s/context", headers=origin | _bearer(signer.token(["*"]))
        )
        assert response.headers["Access-Control-Allow-Origin"] == "*"
        assert "Access-Control-Allow-Credentials" not in response.headers
        preflight = await client.options(
            "/sessions/s/context",
            headers=origin
            | {
                "Access-Control-Request-Method": "GET",
                "Access-Control-Request-Headers": "authorization",
            },
        )
        assert preflight.status == 204  # no token needed for a preflight
        assert preflight.headers["Access-Control-Allow-Headers"] == "authorization"
        assert "Access-Control-Allow-Credentials" not in preflight.headers

    run(scenario, verifier=verifier, cors_origins=("*",))


# -- grants through the routes, and tokens that are not tokens --------------------------
def test_grants_mean_what_they_say_on_every_route(verifier: Verifier, signer: Signer) -> None:
    ids = ("user-1", "user-10", "user-1x", "user-1/../admin", "user-1%2F..%2Fadmin", "admin")

    async def scenario(client: TestClient[Any, Any], store: FakeStore, fan: Hub) -> None:
        for i, session_id in enumerate(ids):
            store.put(session_id, update(session_id, 1), 100 + i)

        async def status(path: str, entries: list[str]) -> int:
            token = _bearer(signer.token(entries))
            return (await client.get(path, headers=token)).status

        async def listed(entries: list[str], prefix: str = "") -> list[str]:
            token = _bearer(signer.token(entries))
            body = await (await client.get(f"/sessions?prefix={prefix}", headers=token)).json()
            return sorted(row["sessionId"] for row in body["sessions"])

        one = ["user-1"]
        assert await status("/sessions/user-1/context", one) == 200
        # The route decodes the path once; the grant is checked on that id, and Redis is
        # asked for that id only after the check passed: no spelling of another id reads.
        for path in (
            "/sessions/user-10/context",
            "/sessions/user-1x/context",
            "/sessions/user-1%2F..%2Fadmin/context",  # user-1/../admin
            "/sessions/user-1%252F..%252Fadmin/context",  # user-1%2F..%2Fadmin
            "/sessions/user-1/../admin/context",  # normalised to /sessions/admin/context
            "/sessions/user-1%00/context",
            "/sessions/user-1%20/context",
            "/sessions/user-10/context/stream",
        ):
            assert await status(path, one) == 404, path
        assert await status("/sessions/user%2D1/context", one) == 200  # the same id, spelt out
        assert set(store.latest_reads) == {"user-1"}
        assert await listed(one) == ["user-1"]
        assert await listed(one, "user-1") == ["user-1"]
        assert await listed(one, "user-10") == [] and store.listings == 2  # not even asked

        assert await status("/sessions/user-10/context", ["user-1*"]) == 200
        assert await status("/sessions/admin/context", ["user-1*"]) == 404
        assert await listed(["user-1*"]) == sorted(i for i in ids if i.startswith("user-1"))

        for path in ("/sessions/user-1/context", "/sessions/admin/context"):
            assert await status(path, [""]) == 404
            assert await status(path, ["*"]) == 200
        assert await listed([""]) == []
        assert await listed(["*"]) == sorted(ids)

    run(scenario, verifier=verifier)


def test_malformed_tokens_are_401_and_one_log_line_never_a_500(
    verifier: Verifier,
    signer: Signer,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A fresh log on a clock that does not move: the run lasts less than its second.
    monkeypatch.setattr(gateway_app, "_refusals", gateway_app._RefusalLog(clock=FakeClock()))
    now = int(time.time())
    good = {"sub": "mallory", "iat": now, "exp": now + 60, "sessions": ["*"]}
    header = {"alg": signer.alg, "kid": signer.kid}
    forged = {
        "alg as a list": signer.raw(header | {"alg": [signer.alg]}, good),
        "alg as an object": signer.raw(header | {"alg": {"name": signer.alg}}, good),
        "kid as a number": signer.raw(header | {"kid": 7}, good),
        "an unknown crit": signer.raw(header | {"crit": ["x-acme"], "x-acme": 1}, good),
        "crit not a list": signer.raw(header | {"crit": "exp"}, good),
        "no sub": signer.raw(header, {k: v for k, v in good.items() if k != "sub"}),
        "sub empty": signer.raw(header, good | {"sub": ""}),
        "sub a number": signer.raw(header, good | {"sub": 1}),
        "exp beyond a float": signer.raw(header, good | {"exp": 10**400}),
        "exp NaN": signer.raw(header, good | {"exp": float("nan")}),
        "lives a year": signer.raw(header, good | {"exp": now + 365 * 86_400}),
        "a payload that is a list": signer.raw(header, [good]),
    }

    async def scenario(client: TestClient[Any, Any], store: FakeStore, fan: Hub) -> None:
        store.put("s", update("s", 1))
        ok = await client.get("/sessions/s/context", headers=_bearer(signer.raw(header, good)))
        assert ok.status == 200
        for what, token in forged.items():
            for path in ("/sessions/s/context", "/sessions/s/context/stream"):
                refused = await client.get(path, headers=_bearer(token))
                assert refused.status == 401, (what, path)
                assert 'error="invalid_token"' in refused.headers["WWW-Authenticate"], what

    with caplog.at_level(logging.DEBUG):
        run(scenario, verifier=verifier)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    refusals = [r for r in caplog.records if "token refused" in r.getMessage()]
    assert len(refusals) == 1  # at most one line a second


def test_refused_tokens_are_one_log_line_a_second_counting_the_others(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    refusals = gateway_app._RefusalLog(clock=clock)
    request: Any = SimpleNamespace(remote="10.0.0.7", path="/sessions")
    with caplog.at_level(logging.WARNING):
        for _ in range(5):
            refusals.note(request, "bad signature")
        clock.advance(0.99)
        refusals.note(request, "bad signature")
        assert len(caplog.records) == 1
        clock.advance(0.01)  # a second after the line
        refusals.note(request, "token expired")
    assert [r.getMessage() for r in caplog.records] == [
        "gateway: token refused from 10.0.0.7 on /sessions: bad signature",
        "gateway: token refused from 10.0.0.7 on /sessions: token expired (5 more refused since)",
    ]
