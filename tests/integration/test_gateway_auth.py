"""The gateway with authentication on, as a real process against a real redis-server:
tokens signed by keys made here, grants (exact ids and prefixes), streams ended by a
token's expiry or a session's, resumes across a generation bump, the limits, the Host
check, key rotation, a slow https JWKS endpoint, hostile clients, and the refusal to serve
a non-loopback address without keys.

Sessions are written the way the worker writes them (its Lua script: hash, recent set,
channel, guarded by the version), so no worker is needed and every test is quick.
"""

import asyncio
import concurrent.futures
import datetime
import ipaddress
import socket
import ssl
import subprocess
import threading
import time
import urllib.parse
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from stream.publish.redis_sink import SESSIONS_WRITE
from tests.integration.gateway_harness import SERVE, Gateway
from tests.integration.harness import Deployment, free_port, wait_until
from tests.integration.test_gateway import SseClient, _session
from tests.unit.gateway.tokens import Signer, claims, hmac_signed, jwks, tampered, unsigned

pytestmark = pytest.mark.integration

AUDIENCE, ISSUER = "context-stream-test", "https://idp.test"


class Sessions:
    """Writes sessions as the worker does (SESSIONS_WRITE), and expires them as it will."""

    def __init__(self, deployment: Deployment) -> None:
        self.client = deployment.redis()
        self.prefix = deployment.prefix
        self.script = self.client.register_script(SESSIONS_WRITE)

    def write(
        self,
        session_id: str,
        seq: int,
        gen: int = 0,
        n: int | None = None,
        taken_ms: int | None = None,
    ) -> bytes:
        """``taken_ms``: when Redis took it (the recent set's score; default now)."""
        n = seq if n is None else n
        payload = orjson.dumps(
            {
                "sessionId": session_id,
                "seq": seq,
                "time": int(time.time() * 1000) - 5000,
                "contextPressure": {"contextWindow": 1000, "projectedTokens": seq % 1000},
            }
        )
        key = f"{self.prefix}session:{session_id}"
        now = int(time.time() * 1000) if taken_ms is None else taken_ms
        args = [0, "", f"{gen} {seq} {n} 0 {now} {n} 0 0", payload, session_id]
        keys = [f"{self.prefix}tallies", f"{self.prefix}stats", f"{self.prefix}recent", key]
        assert self.script(keys=keys, args=args) == [1], "the guard refused the write"
        return payload

    def expire(self, session_id: str) -> bytes:
        key = f"{self.prefix}session:{session_id}"
        self.client.delete(key)
        self.client.zrem(f"{self.prefix}recent", session_id)
        message = orjson.dumps({"sessionId": session_id, "expired": True})
        self.client.publish(key, message)
        return message


@pytest.fixture(scope="module")
def deployment_(
    kafka_bootstrap: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployment]:
    created = Deployment(kafka_bootstrap, redis_url, tmp_path_factory.mktemp("gateway_auth"))
    yield created
    created.stop_all()


@pytest.fixture(scope="module")
def signer() -> Signer:
    return Signer("RS256", kid="main")


@pytest.fixture(scope="module")
def secured(deployment_: Deployment, signer: Signer) -> Iterator[Gateway]:
    keys = deployment_.workdir / "jwks.json"
    keys.write_bytes(jwks(signer))
    started = Gateway.start(
        deployment_,
        "--heartbeat",
        "0.5",
        STREAM_GATEWAY_JWT_KEYS=str(keys),
        STREAM_GATEWAY_JWT_AUDIENCE=AUDIENCE,
        STREAM_GATEWAY_JWT_ISSUER=ISSUER,
        STREAM_GATEWAY_JWT_LEEWAY="1",
        STREAM_GATEWAY_MAX_STREAMS_PER_SUBJECT="2",
        STREAM_GATEWAY_MAX_STREAMS_PER_ADDRESS="4",
        STREAM_GATEWAY_ACCESS_LOG="1",
    )
    yield started
    started.stop()


@pytest.fixture(scope="module")
def sessions(deployment_: Deployment) -> Sessions:
    return Sessions(deployment_)


def _token(signer: Signer, prefixes: list[str], **options: Any) -> str:
    return signer.token(prefixes, aud=AUDIENCE, iss=ISSUER, **options)


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _quote(session_id: str) -> str:
    return urllib.parse.quote(session_id, safe="")


def _streams(gateway: Gateway, *clients: SseClient, until: Any, timeout: float = 15) -> None:
    """Runs SSE clients until ``until(clients)`` holds (or they all end)."""

    async def go() -> None:
        async with _session() as http:
            tasks = [asyncio.create_task(c.run(http)) for c in clients]
            try:
                async with asyncio.timeout(timeout):
                    while not until(clients):
                        await asyncio.sleep(0.05)
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(go())


def _no_streams(gateway: Gateway) -> None:
    wait_until(lambda: gateway.health()["clients"] == 0, 10, "the gateway's streams to close")


# -- tests --------------------------------------------------------------------------------
def test_only_valid_tokens_read(secured: Gateway, signer: Signer, sessions: Sessions) -> None:
    payload = sessions.write("auth-1", 3)
    path = "/sessions/auth-1/context"
    good = _token(signer, ["*"])
    status, _, body = secured.request(path, _bearer(good))
    assert (status, body) == (200, payload)

    status, headers, _ = secured.request(path)
    assert status == 401 and headers["WWW-Authenticate"] == 'Bearer realm="context-stream"'
    forged = {
        "expired": _token(signer, ["*"], expires_in=-120),
        "foreign key": _token(Signer(kid="main"), ["*"]),
        "wrong audience": signer.token(["*"], aud="someone-else", iss=ISSUER),
        "wrong issuer": signer.token(["*"], aud=AUDIENCE, iss="https://idp.evil"),
        "alg none": unsigned(claims(["*"], aud=AUDIENCE, iss=ISSUER)),
        "hmac with the public key": hmac_signed(
            signer.pem(), claims(["*"], aud=AUDIENCE, iss=ISSUER), kid="main"
        ),
        "tampered": tampered(_token(signer, ["nothing-"]), sessions=["*"]),
        "no exp": _token(signer, ["*"], expires_in=None),
    }
    logged = {
        "expired": "token expired",
        "foreign key": "signature",
        "wrong audience": "wrong audience",
        "wrong issuer": "wrong issuer",
        "alg none": "'none'",
    }

    def line_for(token: str, reason: str) -> bool:
        """Whether the refusal's line is written; if not, refused again (the log writes
        at most a line a second: a refusal within the second is only counted)."""
        if reason in secured.log():
            return True
        secured.request(path, _bearer(token))
        return False

    for what, token in forged.items():
        status, headers, _ = secured.request(path, _bearer(token))
        assert status == 401, what
        assert 'error="invalid_token"' in headers["WWW-Authenticate"], what
        if what in logged:
            wait_until(partial(line_for, token, logged[what]), 10, f"{what} logged", every=0.2)
    log = secured.log()
    for reason in logged.values():
        assert reason in log, reason
    for token in (good, *forged.values()):
        assert token not in log and token.split(".")[1] not in log  # never the token


def test_a_token_reads_only_its_prefixes(
    secured: Gateway, signer: Signer, sessions: Sessions
) -> None:
    for session_id in ("team-a/1", "team-a/2", "team-b/1"):
        sessions.write(session_id, 1)
    token = _bearer(_token(signer, ["team-a/*"]))
    assert secured.request(f"/sessions/{_quote('team-a/1')}/context", token)[0] == 200
    assert secured.request(f"/sessions/{_quote('team-b/1')}/context", token)[0] == 404
    assert secured.request(f"/sessions/{_quote('team-b/1')}/context/stream", token)[0] == 404
    status, _, body = secured.request("/sessions?prefix=team-", token)
    listed = [row["sessionId"] for row in orjson.loads(body)["sessions"]]
    assert status == 200 and listed == ["team-a/2", "team-a/1"]
    everything = _bearer(_token(signer, ["*"]))
    listed = [
        row["sessionId"]
        for row in orjson.loads(secured.request("/sessions?prefix=team-", everything)[2])[
            "sessions"
        ]
    ]
    assert listed == ["team-b/1", "team-a/2", "team-a/1"]


def test_access_token_in_the_query_and_a_stream_that_ends_with_its_token(
    secured: Gateway, signer: Signer, sessions: Sessions
) -> None:
    sessions.write("short-lived", 1)
    token = _token(signer, ["short-lived"], sub="brief", expires_in=2)
    url = f"{secured.url}/sessions/short-lived/context/stream?access_token={token}"
    client = SseClient(url)
    started = time.monotonic()
    _streams(secured, client, until=lambda cs: cs[0].ended, timeout=15)
    lasted = time.monotonic() - started
    assert client.status == 200 and client.seqs() == [1]
    assert client.named == [("reauthenticate", b'{"reason":"the token expired"}')]
    assert 1.0 < lasted < 6.0, lasted  # exp (whole seconds, 1-2 s away) plus the 1 s leeway
    # The same URL again: the token is refused now, which ends an EventSource for good.
    assert secured.request(f"/sessions/short-lived/context/stream?access_token={token}")[0] == 401
    # Only the stream takes a query token.
    fresh = _token(signer, ["*"])
    assert secured.request(f"/sessions/short-lived/context?access_token={fresh}")[0] == 401
    # The access log has the path, never the query string.
    wait_until(lambda: "/context/stream" in secured.log(), 10, "the access log line")
    assert token not in secured.log() and "access_token" not in secured.log()
    _no_streams(secured)


def test_streams_beyond_the_limits_get_429(
    secured: Gateway, signer: Signer, sessions: Sessions
) -> None:
    sessions.write("limited", 1)
    url = f"{secured.url}/sessions/limited/context/stream"
    alice = [SseClient(url, token=_token(signer, ["*"], sub="alice")) for _ in range(3)]
    others = [SseClient(url, token=_token(signer, ["*"], sub=f"u{i}")) for i in range(3)]

    def settled(clients: list[SseClient]) -> bool:
        return all(c.status for c in clients)

    _streams(secured, *alice, *others, until=settled)
    statuses = sorted(c.status for c in (*alice, *others))
    # Per subject 2 (alice's third refused), per address 4 (all come from 127.0.0.1).
    assert sorted(c.status for c in alice) == [200, 200, 429]
    assert statuses == [200, 200, 200, 200, 429, 429]
    assert secured.health()["refused"] >= 2
    _no_streams(secured)


def test_a_host_name_not_allowed_is_refused(secured: Gateway, signer: Signer) -> None:
    token = _bearer(_token(signer, ["*"]))
    status, _, _ = secured.request("/sessions", token | {"Host": "rebound.attacker.example"})
    assert status == 421
    assert secured.request("/", {"Host": "rebound.attacker.example"})[0] == 421
    assert secured.request("/sessions", token | {"Host": "localhost"})[0] == 200
    assert secured.request("/healthz", {"Host": "10.9.8.7:8080"})[0] == 200  # probes


def test_an_expired_session_ends_its_streams_and_is_gone(
    secured: Gateway, signer: Signer, sessions: Sessions
) -> None:
    sessions.write("expiring", 4)
    token = _token(signer, ["expiring"])
    client = SseClient(f"{secured.url}/sessions/expiring/context/stream", token=token)

    async def go() -> None:
        async with _session() as http:
            task = asyncio.create_task(client.run(http))
            await client.wait(lambda c: c.events)
            message = await asyncio.to_thread(sessions.expire, "expiring")
            await client.wait(lambda c: c.ended, timeout=10)
            task.cancel()
            assert client.named == [("expired", message)]

    asyncio.run(go())
    assert client.seqs() == [4]
    assert secured.request("/sessions/expiring/context", _bearer(token))[0] == 404
    _no_streams(secured)


def test_resuming_across_a_generation_bump(
    secured: Gateway, signer: Signer, sessions: Sessions
) -> None:
    sessions.write("rebuilt", 3044, gen=1)
    token = _token(signer, ["rebuilt"])
    url = f"{secured.url}/sessions/rebuilt/context/stream"
    live = SseClient(url, token=token)

    async def go() -> None:
        async with _session() as http:
            task = asyncio.create_task(live.run(http))
            await live.wait(lambda c: c.events)
            # A rebuild: generation 2 starts over at a low seq, and is newer.
            await asyncio.to_thread(sessions.write, "rebuilt", 5, 2)
            await live.wait(lambda c: len(c.events) == 2, timeout=10)
            task.cancel()

    asyncio.run(go())
    assert live.ids == ["1-3044-3044-0", "2-5-5-0"]
    # Away across the bump, back with the old generation's id (full, or a plain seq of an
    # older gateway): the current value at once.
    sessions.write("rebuilt", 6, gen=2)
    for resume in ("1-3044-3044-0", "3044"):
        back = SseClient(url, last_event_id=resume, token=token)
        _streams(secured, back, until=lambda cs: cs[0].events)
        assert back.ids == ["2-6-6-0"], resume
    # Resuming at the current version: nothing at once.
    current = SseClient(url, last_event_id="2-6-6-0", token=token)
    _streams(secured, current, until=lambda cs: cs[0].comments >= 2)
    assert current.events == []
    _no_streams(secured)


def test_rewriting_the_key_file_rotates_keys_without_a_restart(deployment_: Deployment) -> None:
    old, new = Signer("ES256", kid="2025"), Signer("EdDSA", kid="2026")
    keys = deployment_.workdir / "rotating.json"
    keys.write_bytes(jwks(old))
    gateway = Gateway.start(deployment_, STREAM_GATEWAY_JWT_KEYS=str(keys))
    try:
        Sessions(deployment_).write("rotation", 1)
        path = "/sessions/rotation/context"
        assert gateway.request(path, _bearer(old.token(["*"])))[0] == 200
        assert gateway.request(path, _bearer(new.token(["*"])))[0] == 401
        staged = keys.with_suffix(".new")
        staged.write_bytes(jwks(old, new))  # the new key published beside the old one
        staged.replace(keys)
        assert gateway.request(path, _bearer(new.token(["*"])))[0] == 200
        assert gateway.request(path, _bearer(old.token(["*"])))[0] == 200
        staged.write_bytes(jwks(new))  # the old one retired
        staged.replace(keys)
        assert gateway.request(path, _bearer(old.token(["*"])))[0] == 401
        assert gateway.request(path, _bearer(new.token(["*"])))[0] == 200
        assert "key file reloaded" in gateway.log()
    finally:
        gateway.stop()


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({}, "refusing to serve 0.0.0.0 without authentication"),
        ({"STREAM_GATEWAY_JWT_KEYS": "/nonexistent/jwks.json"}, "cannot read"),
        ({"STREAM_GATEWAY_AUTH": "jwt"}, "needs STREAM_GATEWAY_JWT_KEYS"),
    ],
)
def test_refuses_to_start_unsafely(
    deployment_: Deployment, env: dict[str, str], message: str
) -> None:
    done = subprocess.run(
        [*SERVE, "--bind", "0.0.0.0", "--port", str(free_port())],
        env=deployment_.env(**env),
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert message in done.stderr.decode(), done.stderr


def test_the_loopback_gateway_without_keys_still_serves(deployment_: Deployment) -> None:
    """`make demo`'s gateway: loopback, no keys, no token needed."""
    gateway = Gateway.start(deployment_)
    try:
        Sessions(deployment_).write("demo-like", 2)
        status, headers, _ = gateway.request("/sessions/demo-like/context")
        assert status == 200 and headers["Server"] == "context-stream"
        assert "stream serve: http://127.0.0.1:" in gateway.log()
    finally:
        gateway.stop()


def test_redis_is_asked_little_per_listing(
    secured: Gateway, signer: Signer, sessions: Sessions, deployment_: Deployment
) -> None:
    """One ZREVRANGE and one pipeline of HGETs, whatever the prefix finds."""
    for i in range(30):
        sessions.write(f"costly-{i}", 1)
    admin = redis.Redis.from_url(deployment_.redis_url)
    before = _commands(admin)
    token = _bearer(_token(signer, ["*"]))
    status, _, body = secured.request("/sessions?prefix=costly-&limit=10", token)
    assert status == 200 and len(orjson.loads(body)["sessions"]) == 10
    after = _commands(admin)
    assert after.get("zrevrange", 0) - before.get("zrevrange", 0) == 1
    assert after.get("hget", 0) - before.get("hget", 0) == 10
    status, _, body = secured.request("/sessions?prefix=no-such-&limit=500", token)
    assert status == 200 and orjson.loads(body)["sessions"] == []
    final = _commands(admin)
    assert final.get("zrevrange", 0) - after.get("zrevrange", 0) == 1
    assert final.get("hget", 0) == after.get("hget", 0)


def _commands(client: "redis.Redis") -> dict[str, int]:
    stats = client.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}


def test_hostile_clients_get_401s_timeouts_and_503s_not_tracebacks(
    deployment_: Deployment, signer: Signer, sessions: Sessions
) -> None:
    """The review's attacks against a real `stream serve`: malformed tokens, a token
    without ``sub``, grants by string prefix, half-sent requests, a pile of connections."""
    keys = deployment_.workdir / "hostile-jwks.json"
    keys.write_bytes(jwks(signer))
    gateway = Gateway.start(
        deployment_,
        STREAM_GATEWAY_JWT_KEYS=str(keys),
        STREAM_GATEWAY_HEADER_TIMEOUT="1",
        STREAM_GATEWAY_MAX_CONNECTIONS="8",
    )
    try:
        for session_id in ("user-1", "user-10", "user-1/../admin"):
            sessions.write(session_id, 1)
        now = int(time.time())
        good = {"sub": "mallory", "iat": now, "exp": now + 60, "sessions": ["user-1"]}
        header = {"alg": signer.alg, "kid": signer.kid}
        path = "/sessions/user-1/context"
        assert gateway.request(path, _bearer(signer.raw(header, good)))[0] == 200
        for what, token in {
            "alg as a list": signer.raw(header | {"alg": [signer.alg]}, good),
            "kid as a number": signer.raw(header | {"kid": 7}, good),
            "an unknown crit": signer.raw(header | {"crit": ["x-acme"], "x-acme": 1}, good),
            "no sub": signer.raw(header, {k: v for k, v in good.items() if k != "sub"}),
            "a year long": signer.raw(header, good | {"exp": now + 365 * 86_400}),
        }.items():
            status, headers, _ = gateway.request(path, _bearer(token))
            assert status == 401 and "invalid_token" in headers["WWW-Authenticate"], what
        # Header bytes that are not UTF-8 (aiohttp passes them on as lone surrogates).
        with socket.create_connection(("127.0.0.1", _port(gateway)), timeout=10) as raw:
            raw.sendall(
                f"GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n".encode()
                + b"Authorization: Bearer \xff\xfe.e30.e30\r\n\r\n"
            )
            assert raw.recv(1024).startswith(b"HTTP/1.1 401")
        # ... and in the path, read by Redis with every session granted.
        everything = signer.raw(header, good | {"sessions": ["*"]})
        for target in (b"/sessions/\xff/context", b"/sessions/%ED%B3%BF/context"):
            with socket.create_connection(("127.0.0.1", _port(gateway)), timeout=10) as raw:
                raw.sendall(
                    b"GET "
                    + target
                    + b" HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n"
                    + f"Authorization: Bearer {everything}\r\n\r\n".encode()
                )
                answer = raw.recv(1024)
                status = answer.split(b" ", 2)[1]
                assert status in (b"400", b"404"), (target, answer)
        exact = _bearer(signer.raw(header, good))
        for other in ("user-10", "user-1%2F..%2Fadmin", "user-1%252F..%252Fadmin"):
            assert gateway.request(f"/sessions/{other}/context", exact)[0] == 404, other
        log = gateway.log()
        assert "Traceback" not in log and " ERROR " not in log
        assert "token refused" in log

        # A half-sent request: closed within the header timeout (1 s here).
        with socket.create_connection(("127.0.0.1", _port(gateway)), timeout=10) as half:
            half.sendall(b"GET /healthz HTTP/1.1\r\nHost: local")
            started = time.monotonic()
            assert half.recv(1024) == b""  # the server closed it
            assert time.monotonic() - started < 3.0
        # Eight connections held open without a request: the ninth is answered 503 ...
        held = [socket.create_connection(("127.0.0.1", _port(gateway))) for _ in range(8)]
        try:
            time.sleep(0.2)
            with socket.create_connection(("127.0.0.1", _port(gateway)), timeout=10) as extra:
                assert extra.recv(1024).startswith(b"HTTP/1.1 503")
            # ... until the header timeout closes the idle ones, and requests get in again.
            wait_until(lambda: gateway.get("/healthz")[0] == 200, 10, "a free connection")
        finally:
            for connection in held:
                connection.close()
    finally:
        gateway.stop()


def _port(gateway: Gateway) -> int:
    return int(gateway.url.rsplit(":", 1)[1])


class JwksServer:
    """An https JWKS endpoint on a loopback port, in a thread of its own: it counts its
    requests, and while ``hold`` is set each one waits until it is released (a slow
    identity provider). Its certificate is made here; the gateway trusts it through
    ``SSL_CERT_FILE``."""

    def __init__(self, workdir: Path, document: bytes) -> None:
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "jwks.test")])
        now = datetime.datetime.now(datetime.UTC)
        certificate = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False,
            )
            .sign(key, hashes.SHA256())
        )
        self.cafile = workdir / "jwks-ca.pem"
        self.cafile.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
        keyfile = workdir / "jwks-key.pem"
        keyfile.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.context.load_cert_chain(self.cafile, keyfile)
        self.document = document
        self.requests = 0
        self.hold = threading.Event()
        self.release = threading.Event()
        self.port = free_port()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.runner = asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(10)
        self.url = f"https://127.0.0.1:{self.port}/jwks"

    async def _start(self) -> web.AppRunner:
        app = web.Application()
        app.router.add_get("/jwks", self._serve)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", self.port, ssl_context=self.context).start()
        return runner

    async def _serve(self, request: web.Request) -> web.Response:
        self.requests += 1
        if self.hold.is_set():
            await asyncio.get_running_loop().run_in_executor(None, self.release.wait, 30)
        return web.Response(body=self.document, content_type="application/json")

    def stop(self) -> None:
        self.release.set()
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


def test_a_slow_jwks_endpoint_delays_no_token_whose_key_is_cached(
    deployment_: Deployment, signer: Signer, sessions: Sessions
) -> None:
    """The issue's case against a real `stream serve`: an unknown ``kid`` makes the gateway
    fetch its https JWKS endpoint, which hangs; tokens whose key the gateway holds are
    answered meanwhile, and a flood of unknown kids costs one fetch per interval."""
    interval = 5.0
    endpoint = JwksServer(deployment_.workdir, jwks(signer))
    gateway = Gateway.start(
        deployment_,
        STREAM_GATEWAY_JWT_KEYS=endpoint.url,
        STREAM_GATEWAY_JWKS_INTERVAL=str(interval),
        SSL_CERT_FILE=str(endpoint.cafile),
    )
    try:
        sessions.write("jwks-1", 1)
        path = "/sessions/jwks-1/context"
        good = _bearer(signer.token(["jwks-1"]))
        assert gateway.request(path, good)[0] == 200
        assert endpoint.requests == 1
        stranger = _bearer(Signer("ES256", kid="rotated").token(["jwks-1"]))
        endpoint.hold.set()
        with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
            # Unknown kids within the interval are refused at once; the first one past it
            # starts a fetch, which hangs.
            waiting: list[concurrent.futures.Future[Any]] = []

            def fetching() -> bool:
                if endpoint.requests == 1:
                    waiting.append(pool.submit(gateway.request, path, stranger))
                return endpoint.requests == 2

            wait_until(fetching, interval + 10, "an unknown kid to make the gateway fetch")
            held = [f for f in waiting if not f.done()]
            # (requests sent after the fetch started wait for it too)
            assert held and all(f.result()[0] == 401 for f in waiting if f.done())
            # While the fetch hangs: cached-key requests answer at once ...
            slowest = 0.0
            for _ in range(20):
                started = time.monotonic()
                assert gateway.request(path, good)[0] == 200
                slowest = max(slowest, time.monotonic() - started)
            assert slowest < 1.0, f"a cached-key request took {slowest:.2f} s"
            assert not any(f.done() for f in held)
            # ... and a flood of unknown kids joins the one fetch in flight.
            flood = [pool.submit(gateway.request, path, stranger) for _ in range(30)]
            endpoint.hold.clear()
            endpoint.release.set()
            assert all(f.result(15)[0] == 401 for f in [*held, *flood])
            released = time.monotonic()
        # Within the next interval a flood adds no fetch; past it, one.
        while time.monotonic() - released < interval - 2:
            assert gateway.request(path, stranger)[0] == 401
        assert endpoint.requests == 2
        wait_until(
            lambda: gateway.request(path, stranger)[0] == 401 and endpoint.requests == 3,
            interval + 10,
            "the next interval's fetch",
        )
        assert endpoint.requests == 3
        assert gateway.request(path, good)[0] == 200
        assert "Traceback" not in gateway.log()
    finally:
        gateway.stop()
        endpoint.stop()
