"""The published interface holds for what a real deployment publishes (docs/api/): every input
record, output record, dead letter, Redis channel message, Redis value, SSE event and gateway
HTTP answer of one run validates against the AsyncAPI and OpenAPI documents' schemas, and the
run covers every message the documents name.

One partition, so one stream time: the examples, a gap (faults), a segment with one bad
element, unreadable records (dead letters, one cut to the size bound), a reset (a second
generation) and a bad reset; then two sessions two months on expire everything else
(tombstones, expiry messages, `event: expired`). The gateway runs with authentication on,
and one stream's token runs out (`event: reauthenticate`)."""

import asyncio
import threading
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson
import pytest
from confluent_kafka import Producer

from stream.testing import events as build
from tests.integration.gateway_harness import EXAMPLES, Gateway
from tests.integration.harness import Deployment, offline_fold, wait_until
from tests.interface.checker import check
from tests.unit.gateway.tokens import Signer, jwks

pytestmark = [pytest.mark.integration, pytest.mark.deployment_options(partitions=1)]

T0 = 1_700_000_000_000  # the agent examples' time: the gap and segment sessions keep to it
DAY = 86_400_000
LATE = 1_767_225_615_000 + 60 * DAY  # two months after the last example: past the 30-day TTL
MAX_MESSAGE = 50_000
EXAMPLE_PATHS = sorted(EXAMPLES.glob("example-*"))
RESET_LOG = EXAMPLES / "example-system-prompts.jsonl"

# What the run must have shown at least once (AsyncAPI "channel/message", schemas, routes).
COVERED = {
    "input/event",
    "input/reset",
    "output/update",
    "output/tombstone",
    "deadLetters/deadLetter",
    "sessionChannel/update",
    "sessionChannel/expired",
    "sessionStream/update",
    "sessionStream/expired",
    "sessionStream/reauthenticate",
    "schema/RedisSessionHash",
    "schema/SessionUpdate",
    "schema/RedisStats",
    "schema/RedisTallies",
    "schema/RedisDeadLetters",
    "schema/RedisRecent",
    "GET /sessions/{id}/context 200 application/json",
    "GET /sessions/{id}/context 400 application/json",
    "GET /sessions/{id}/context 401 application/json",
    "GET /sessions/{id}/context 404 application/json",
    "GET /sessions/{id}/context 421 application/json",
    "GET /sessions/{id}/context/stream 200 text/event-stream",
    "GET /sessions/{id}/context/stream 401 application/json",
    "GET /sessions 200 application/json",
    "GET /sessions 400 application/json",
    "GET /sessions 414 application/json",
    "GET /healthz 200 application/json",
    "GET / 200 text/html",
    "GET /sessions/{id} 200 text/html",
}


@dataclass
class SseReader:
    """Reads one SSE stream as an EventSource would: each dispatched event's fields other
    than ``data`` (``id``, ``event``) and its data; blocks without data that carry anything
    but ``retry`` go to ``stray``."""

    url: str
    headers: dict[str, str]
    status: int = 0
    content_type: str = ""
    events: list[tuple[dict[str, str], bytes]] = field(default_factory=list)
    stray: list[dict[str, str]] = field(default_factory=list)
    ended: bool = False

    async def run(self, http: aiohttp.ClientSession) -> None:
        try:
            async with http.get(self.url, headers=self.headers) as response:
                self.status = response.status
                self.content_type = response.headers.get("Content-Type", "")
                fields: dict[str, str] = {}
                data: list[bytes] = []
                async for raw in response.content:
                    line = raw.rstrip(b"\r\n")
                    if not line:
                        if data:
                            self.events.append((fields, b"\n".join(data)))
                        elif set(fields) - {"retry"}:
                            self.stray.append(fields)
                        fields, data = {}, []
                    elif not line.startswith(b":"):
                        name, _, value = line.partition(b":")
                        value = value.removeprefix(b" ")
                        if name == b"data":
                            data.append(value)
                        else:
                            fields[name.decode()] = value.decode()
        finally:
            self.ended = True

    def named(self, name: str) -> bool:
        return any(fields.get("event") == name for fields, _ in self.events)


class Channels:
    """Every message on the deployment's session channels, heard from before the run."""

    def __init__(self, deployment: Deployment) -> None:
        self.pubsub = deployment.redis().pubsub()
        self.pubsub.psubscribe(f"{deployment.prefix}session:*")
        self.heard: list[tuple[str, bytes]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._listen, daemon=True)
        self.thread.start()

    def _listen(self) -> None:
        while not self.stop.is_set():
            message = self.pubsub.get_message(ignore_subscribe_messages=True, timeout=0.2)
            if message is not None:
                self.heard.append((message["channel"].decode(), message["data"]))

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)
        self.pubsub.close()


def _json_or_text(raw: bytes) -> Any:
    """A record value as the schemas see it: its JSON, or (not JSON) its text, which no
    JSON-object schema takes."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw.decode("utf-8", "replace")


def _headers(message: Any) -> dict[str, str]:
    return {name: (raw or b"").decode("utf-8", "replace") for name, raw in message.headers() or []}


def _key(message: Any) -> str:
    return (message.key() or b"").decode("utf-8", "replace")


def _send_unusual(deployment: Deployment) -> None:
    """A gap (faults), a segment with one bad element, and records the worker dead-letters."""
    producer = Producer({"bootstrap.servers": deployment.bootstrap})
    topic = f"{deployment.name}.events"

    def send(key: bytes | None, value: Any, headers: list[tuple[str, bytes]] | None = None) -> None:
        raw = value if value is None or isinstance(value, bytes) else orjson.dumps(value)
        producer.produce(topic, raw, key, headers=headers)

    def user(seq: int) -> dict[str, Any]:
        return build.user_message(seq, build.texts(f"m{seq}"), time=T0 + seq)

    send(b"gappy", user(0))
    send(b"gappy", user(2))  # seq 1 is missing: every projection faults at 2
    send(b"segment", [user(0), 7, user(1)])  # element 1 is dead-lettered alone
    send(b"hollow", [{}, 7, "x"])  # three elements, one dead letter that counts them
    send(b"unreadable", b"{not json")
    send(b"unreadable", [])
    send(None, user(0))
    send(b"too-big", build.user_message(0, build.texts("x" * MAX_MESSAGE), time=T0))
    send(b"bad-reset", None, [("stream-reset", b"0")])
    assert producer.flush(30) == 0


def _send_late(deployment: Deployment) -> None:
    """Two sessions past everyone's TTL: the partition's stream time moves there."""
    producer = Producer({"bootstrap.servers": deployment.bootstrap})
    for key in (b"late-a", b"late-b"):
        event = build.user_message(0, build.texts("later"), time=LATE)
        producer.produce(f"{deployment.name}.events", orjson.dumps(event), key)
    assert producer.flush(30) == 0


def _hash(deployment: Deployment, session_id: str) -> dict[str, str]:
    raw = deployment.redis().hgetall(f"{deployment.prefix}session:{session_id}")
    return {k.decode(): v.decode() for k, v in raw.items()}


def _http(gateway: Gateway, path: str, headers: dict[str, str]) -> tuple[int, str, Any]:
    status, answer, body = gateway.request(path, headers)
    content_type = answer.get("Content-Type", "")
    return status, content_type, _json_or_text(body) if "json" in content_type else None


def _quote(session_id: str) -> str:
    return urllib.parse.quote(session_id, safe="")


@pytest.fixture
def signer() -> Signer:
    return Signer("ES256", kid="interface")


@pytest.fixture
def gateway(deployment: Deployment, signer: Signer) -> Iterator[Gateway]:
    keys = deployment.workdir / "jwks.json"
    keys.write_bytes(jwks(signer))
    started = Gateway.start(
        deployment, STREAM_GATEWAY_JWT_KEYS=str(keys), STREAM_GATEWAY_JWT_LEEWAY="1"
    )
    yield started
    started.stop()


def test_every_published_message_fits_the_documents(
    deployment: Deployment, gateway: Gateway, signer: Signer
) -> None:
    deployment.start_worker(
        STREAM_RESETS="1", STREAM_SESSION_TTL="30d", STREAM_MAX_MESSAGE_BYTES=str(MAX_MESSAGE)
    )
    channels = Channels(deployment)
    try:
        observed = _run(deployment, gateway, signer)
    finally:
        channels.close()
    records, unreadable = _records(deployment)
    observed += records
    observed += [
        {
            "what": f"channel {name} #{i}",
            "channel": "sessionChannel",
            "payload": _json_or_text(data),
        }
        for i, (name, data) in enumerate(channels.heard)
    ]
    # The channel a message is heard on is its session's.
    for name, data in channels.heard:
        assert name == f"{deployment.prefix}session:{orjson.loads(data)['sessionId']}"

    report = check(observed)
    assert report.problems == [], report.stderr
    # The input records the worker dead-lettered are no input message; everything else fits.
    failed = {f["what"] for f in report.failures}
    assert failed == unreadable, [f for f in report.failures if f["what"] not in unreadable][:5]
    assert set(report.matched) >= COVERED, COVERED - set(report.matched)


def _run(deployment: Deployment, gateway: Gateway, signer: Signer) -> list[dict[str, Any]]:
    """The run, with streams open on the examples throughout; returns the gateway's and
    Redis' observations."""
    expected = offline_fold(EXAMPLE_PATHS)
    token = signer.token(["*"], sub="interface")
    brief = signer.token(["*"], sub="brief", expires_in=8)
    observed: list[dict[str, Any]] = []

    def stream_url(session_id: str) -> str:
        return f"{gateway.url}/sessions/{_quote(session_id)}/context/stream"

    async def go() -> list[SseReader]:
        readers = [
            SseReader(stream_url(s), {"Authorization": f"Bearer {token}"})
            for s in [*expected, "gappy"]
        ]
        # A token that runs out on a stream whose session stays: `late-a`, made last.
        readers.append(SseReader(f"{stream_url('late-a')}?access_token={brief}", {}))
        connector = aiohttp.TCPConnector(limit=0, force_close=True)
        async with aiohttp.ClientSession(connector=connector) as http:
            tasks = [asyncio.create_task(r.run(http)) for r in readers]
            try:
                async with asyncio.timeout(10):
                    while not all(r.status for r in readers):
                        await asyncio.sleep(0.05)
                await asyncio.to_thread(_feed, deployment, expected)
                observed.extend(await asyncio.to_thread(_read, deployment, gateway, token))
                await asyncio.to_thread(_send_late, deployment)
                async with asyncio.timeout(60):
                    while not all(r.named("expired") for r in readers[:-1]):
                        await asyncio.sleep(0.1)
                    while not readers[-1].ended:
                        await asyncio.sleep(0.1)
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
        return readers

    readers = asyncio.run(go())
    assert all(r.status == 200 and not r.stray for r in readers)
    assert readers[-1].named("reauthenticate")
    observed.append(
        {
            "what": "a stream",
            "path": "/sessions/{id}/context/stream",
            "status": readers[0].status,
            "contentType": readers[0].content_type,
        }
    )
    for n, reader in enumerate(readers):
        for i, (fields, data) in enumerate(reader.events):
            observed.append(
                {
                    "what": f"sse {n} #{i}",
                    "channel": "sessionStream",
                    "headers": fields,
                    "payload": _json_or_text(data),
                }
            )
    return observed


def _feed(deployment: Deployment, expected: dict[str, dict[str, Any]]) -> None:
    """The examples (one agent log in segments), the unusual records, then a reset."""
    plain = [str(p) for p in EXAMPLE_PATHS if p.name != "example-agent-1.jsonl"]
    deployment.stream("produce", *plain)
    deployment.stream("produce", "--segment", "40", str(EXAMPLES / "example-agent-1.jsonl"))
    _send_unusual(deployment)
    for session_id, update in expected.items():
        wait_until(
            lambda s=session_id, u=update: deployment.redis_update(s) == u,
            60,
            f"{session_id} folded",
        )
    wait_until(lambda: deployment.stats()["dead_lettered"] >= 9, 30, "the dead letters counted")
    wait_until(lambda: deployment.redis_update("gappy") is not None, 30, "the gap published")
    deployment.stream("produce", "--reset", str(RESET_LOG))
    reset_id = "example-system-prompts"
    wait_until(
        lambda: (
            int(_hash(deployment, reset_id).get("gen", "0")) >= 2
            and deployment.redis_update(reset_id) == expected[reset_id]
        ),
        30,
        "the reset session refolded under generation 2",
    )


def _read(deployment: Deployment, gateway: Gateway, token: str) -> list[dict[str, Any]]:
    """Redis' values and the gateway's JSON answers, before anything expires."""
    client = deployment.redis()
    prefix = deployment.prefix
    observed: list[dict[str, Any]] = []
    ids = [m.decode() for m in client.zrange(f"{prefix}recent", 0, -1)]
    for session_id in ids:
        stored = _hash(deployment, session_id)
        observed.append(
            {"what": f"hash {session_id}", "schema": "RedisSessionHash", "value": stored}
        )
        update = _json_or_text(stored.get("update", "").encode())
        observed.append(
            {"what": f"update {session_id}", "schema": "SessionUpdate", "value": update}
        )
    assert "gappy" in ids and "segment" in ids

    def strings(key: str) -> dict[str, str]:
        return {k.decode(): v.decode() for k, v in client.hgetall(f"{prefix}{key}").items()}

    recent = {m.decode(): s for m, s in client.zrevrange(f"{prefix}recent", 0, -1, withscores=True)}
    observed += [
        {"what": "stats", "schema": "RedisStats", "value": strings("stats")},
        {"what": "tallies", "schema": "RedisTallies", "value": strings("tallies")},
        {"what": "dead", "schema": "RedisDeadLetters", "value": strings("dead")},
        {"what": "recent", "schema": "RedisRecent", "value": recent},
    ]

    bearer = {"Authorization": f"Bearer {token}"}
    answers: list[tuple[str, str, dict[str, str], int]] = [
        (f"/sessions/{_quote(s)}/context", "/sessions/{id}/context", bearer, 200) for s in ids
    ]
    answers += [
        ("/sessions/nobody/context", "/sessions/{id}/context", bearer, 404),
        ("/sessions/gappy/context", "/sessions/{id}/context", {}, 401),
        ("/sessions/gappy/context", "/sessions/{id}/context", {"Authorization": "Basic x"}, 400),
        (
            "/sessions/gappy/context",
            "/sessions/{id}/context",
            bearer | {"Host": "evil.example"},
            421,
        ),
        ("/sessions/gappy/context/stream", "/sessions/{id}/context/stream", {}, 401),
        ("/sessions", "/sessions", bearer, 200),
        ("/sessions?prefix=example-&limit=2", "/sessions", bearer, 200),
        ("/sessions?limit=many", "/sessions", bearer, 400),
        ("/sessions?prefix=" + "a" * 3000, "/sessions", bearer, 414),
        ("/healthz", "/healthz", {}, 200),
        ("/", "/", {}, 200),
        ("/sessions/gappy", "/sessions/{id}", {}, 200),
    ]
    for url, route, headers, status in answers:
        got, content_type, body = _http(gateway, url, headers)
        assert got == status, (url, got, body)
        observed.append(
            {
                "what": f"GET {url}",
                "path": route,
                "status": got,
                "contentType": content_type,
                "body": body,
            }
        )
    listing = next(o["body"] for o in observed if o.get("what") == "GET /sessions")
    assert len(listing["sessions"]) == len(ids)
    return observed


def _records(deployment: Deployment) -> tuple[list[dict[str, Any]], set[str]]:
    """Every record of the input, output and dead-letter topics, as observations, and the
    labels of the input records that must not fit (the worker dead-lettered them); checks
    that the run made the records it meant to (a cut dead letter, a segment's element)."""
    name = deployment.name
    dead = deployment.consume_all(f"{name}.dlq")
    dead_headers = [_headers(m) for m in dead]
    assert len(dead) == 7, dead_headers
    assert any("segment-index" in h for h in dead_headers)
    assert any(h.get("count") == "3" and h.get("segment-indexes") == "0,1,2" for h in dead_headers)
    assert any("original-bytes" in h for h in dead_headers)
    # The one cut for its size alone is an event, only too big: it fits the schema.
    dead_offsets = {int(h["source-offset"]) for h in dead_headers if "original-bytes" not in h}
    unreadable = {f"input offset {offset}" for offset in dead_offsets}
    observed: list[dict[str, Any]] = []
    for message in deployment.consume_all(f"{name}.events"):
        observed.append(
            {
                "what": f"input offset {message.offset()}",
                "channel": "input",
                "key": _key(message),
                "headers": _headers(message),
                "payload": None if message.value() is None else _json_or_text(message.value()),
            }
        )
    outputs = deployment.consume_all(f"{name}.context")
    assert any(m.value() is None for m in outputs), "no tombstone"
    for message in outputs:
        observed.append(
            {
                "what": f"output offset {message.offset()}",
                "channel": "output",
                "key": _key(message),
                "headers": _headers(message),
                "payload": None if message.value() is None else _json_or_text(message.value()),
            }
        )
    for message, headers in zip(dead, dead_headers, strict=True):
        observed.append(
            {
                "what": f"dead letter {headers.get('reason')}",
                "channel": "deadLetters",
                "key": _key(message),
                "headers": headers,
                "payload": (message.value() or b"").decode("utf-8", "replace"),
            }
        )
    return observed, unreadable
