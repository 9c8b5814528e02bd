"""The gateway (`stream serve`) against a live worker, real Kafka and a real redis-server.

One deployment, worker and gateway serve the whole module (conftest's `live_deployment`,
`gateway` and `feeder`: a worker takes seconds to join its group); every test uses its own
session ids. Sessions are the example logs,
produced line by line under new keys (the update's sessionId is the Kafka key).
"""

import asyncio
import itertools
import resource
import socket
import statistics
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
import redis

from tests.integration.gateway_harness import Feeder, Gateway, Log, wait_seq
from tests.integration.harness import Deployment, wait_until
from tests.unit.gateway.tokens import Signer, jwks

pytestmark = [pytest.mark.integration, pytest.mark.gateway_args("--heartbeat", "0.5")]


# -- the pieces ---------------------------------------------------------------------------
class ChannelRecorder:
    """The test's own subscriber to a session channel, on a thread: what Redis published,
    and when (perf_counter), independent of the asyncio loop the SSE clients share."""

    def __init__(self, deployment: Deployment, session_id: str) -> None:
        self.pubsub = deployment.redis().pubsub()
        self.pubsub.subscribe(f"{deployment.prefix}session:{session_id}")
        confirmation = self.pubsub.get_message(timeout=5)
        assert confirmation is not None and confirmation["type"] == "subscribe"
        self.received: list[tuple[int, bytes, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            message = self.pubsub.get_message(ignore_subscribe_messages=True, timeout=0.05)
            if message is not None:
                data = message["data"]
                self.received.append((orjson.loads(data)["seq"], data, time.perf_counter()))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.pubsub.close()

    def seqs(self) -> list[int]:
        """Published seqs, each once, in order (an identical republish is not an update)."""
        out: list[int] = []
        for seq, _, _ in self.received:
            if not out or seq > out[-1]:
                out.append(seq)
        return out


@dataclass
class SseClient:
    """An EventSource-like reader: events as (seq, data, perf_counter at receipt); the
    ids (``gen-seq-n-v``) in ``ids``, named events (``expired``, ...) in ``named``."""

    url: str
    last_event_id: int | str | None = None
    token: str | None = None
    status: int = 0
    events: list[tuple[int, bytes, float]] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)
    named: list[tuple[str, bytes]] = field(default_factory=list)
    comments: int = 0
    ended: bool = False
    _arrived: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self, session: aiohttp.ClientSession) -> None:
        headers = {"Accept": "text/event-stream"}
        if self.last_event_id is not None:
            headers["Last-Event-ID"] = str(self.last_event_id)
        if self.token is not None:
            headers["Authorization"] = f"Bearer {self.token}"
        try:
            async with session.get(self.url, headers=headers) as response:
                self.status = response.status
                self._arrived.set()
                event_id, name, data = None, None, b""
                async for raw in response.content:
                    line = raw.rstrip(b"\n")
                    if line.startswith(b":"):
                        self.comments += 1
                        self._arrived.set()
                    elif line.startswith(b"id: "):
                        event_id = line[4:].decode()
                    elif line.startswith(b"event: "):
                        name = line[7:].decode()
                    elif line.startswith(b"data: "):
                        data = line[6:]
                    elif not line and name is not None:
                        self.named.append((name, data))
                        self._arrived.set()
                        event_id, name, data = None, None, b""
                    elif not line and event_id is not None:
                        seq = int(event_id.split("-")[1])
                        self.events.append((seq, data, time.perf_counter()))
                        self.ids.append(event_id)
                        self._arrived.set()
                        event_id, name, data = None, None, b""
        except (aiohttp.ClientError, ConnectionError):
            pass
        finally:
            self.ended = True
            self._arrived.set()

    async def wait(self, check: Any, timeout: float = 30) -> None:
        async with asyncio.timeout(timeout):
            while not check(self):
                self._arrived.clear()
                if check(self):
                    return
                await self._arrived.wait()

    def seqs(self) -> list[int]:
        return [seq for seq, _, _ in self.events]


def _session() -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0, force_close=True),
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=30),
    )


def _raise_fd_limit(needed: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(needed, hard), hard))


# -- tests --------------------------------------------------------------------------------
def test_get_equals_redis_for_every_session(
    live_deployment: Deployment, gateway: Gateway, feeder: Feeder
) -> None:
    logs = {
        "get-agent-0": Log.read("example-agent-0.jsonl"),
        "get-agent-1": Log.read("example-agent-1.jsonl"),
        "get-prompts": Log.read("example-system-prompts.jsonl"),
        "get ünïcode/ish": Log.read("example-system-prompts.jsonl"),
    }
    for key, log in logs.items():
        feeder.send(key, log.lines)
    for key, log in logs.items():
        wait_seq(live_deployment, key, log.seq_after(len(log.lines)))
    client = live_deployment.redis()
    for key in logs:
        stored = client.hget(f"{live_deployment.prefix}session:{key}", "update")
        path = "/sessions/" + urllib.request.quote(key, safe="") + "/context"  # "/": %2F
        assert gateway.get(path) == (200, stored), key
    status, body = gateway.get("/sessions/never-seen/context")
    assert status == 404 and orjson.loads(body)["sessionId"] == "never-seen"

    # The listing: recently updated sessions, newest first, with the Redis seq and percent.
    status, body = gateway.get("/sessions?prefix=get-&limit=10")
    assert status == 200
    listed = {row["sessionId"]: row for row in orjson.loads(body)["sessions"]}
    assert set(listed) == {"get-agent-0", "get-agent-1", "get-prompts"}
    for key, row in listed.items():
        update = live_deployment.redis_update(key)
        assert update is not None
        pressure = update["contextPressure"]
        assert row["seq"] == update["seq"]
        assert row["percent"] == round(
            100 * pressure["projectedTokens"] / pressure["contextWindow"], 2
        )
        score = client.zscore(f"{live_deployment.prefix}recent", key)
        assert score is not None and row["updatedAt"] == int(score)
    stamps = [row["updatedAt"] for row in orjson.loads(body)["sessions"]]
    assert stamps == sorted(stamps, reverse=True)


def test_sse_delivers_every_update_in_order_and_resumes_by_last_event_id(
    live_deployment: Deployment, gateway: Gateway, feeder: Feeder
) -> None:
    key, log = "sse-order", Log.read("example-agent-0.jsonl")
    url = f"{gateway.url}/sessions/{key}/context/stream"
    cuts = log.cuts(3)
    first_end, second_end = cuts[0], cuts[1]
    recorder = ChannelRecorder(live_deployment, key)

    async def go() -> None:
        async with _session() as http:
            # Connected before the session exists: heartbeats only, then every update.
            live = SseClient(url)
            task = asyncio.create_task(live.run(http))
            await live.wait(lambda c: c.comments >= 2)  # heartbeats every 0.5 s
            assert live.status == 200 and live.events == []
            seq = await asyncio.to_thread(feeder.paced, key, log, 0, first_end, 12, 0.08)
            await live.wait(lambda c: c.events and c.events[-1][0] == seq)
            published = recorder.seqs()
            assert len(published) >= 4, published  # several updates, not one coalesced
            assert live.seqs() == published
            assert [d for _, d, _ in live.events] == [
                d for s, d, _ in recorder.received if s in set(published)
            ][: len(live.events)]
            task.cancel()

            # Resume from the middle: the current value at once (it supersedes what was
            # missed), nothing at or below the resume point.
            middle = published[len(published) // 2]
            resumed = SseClient(url, last_event_id=middle)
            task = asyncio.create_task(resumed.run(http))
            await resumed.wait(lambda c: c.events)
            assert resumed.seqs() == [seq]

            # Away while updates land; back with the last id seen: first the value as it is
            # now, then every further update in order; no repeats.
            task.cancel()
            seq2 = await asyncio.to_thread(feeder.paced, key, log, first_end, second_end, 6, 0.05)
            await asyncio.to_thread(wait_seq, live_deployment, key, seq2)
            back = SseClient(url, last_event_id=seq)
            task = asyncio.create_task(back.run(http))
            await back.wait(lambda c: c.events)
            assert back.seqs() == [seq2]
            seq3 = await asyncio.to_thread(
                feeder.paced, key, log, second_end, len(log.lines), 6, 0.08
            )
            await back.wait(lambda c: c.events[-1][0] == seq3)
            after = [s for s in recorder.seqs() if s > seq2]
            assert back.seqs() == [seq2, *after]

            # Resuming at the newest seq sends nothing at once (no repeat), heartbeats only.
            current = SseClient(url, last_event_id=seq3)
            quiet = asyncio.create_task(current.run(http))
            # A repeat would come at once, before the stream's first heartbeat.
            await current.wait(lambda c: c.comments >= 1)
            assert current.status == 200 and current.events == []
            for pending in (task, quiet):
                pending.cancel()

    try:
        asyncio.run(go())
    finally:
        recorder.stop()


@pytest.mark.parametrize("auth", ["none", "jwt"])
def test_1000_concurrent_sse_clients_all_receive_every_update(
    live_deployment: Deployment, gateway: Gateway, feeder: Feeder, auth: str, tmp_path: Path
) -> None:
    """Also the fan-out figure, with authentication off and on (every client its own
    ES256 token and subject, verified when it connects)."""
    clients_wanted = 1000
    _raise_fd_limit(4 * clients_wanted)
    tokens: list[str | None] = [None] * clients_wanted
    secured = None
    if auth == "jwt":
        signer = Signer("ES256")
        (tmp_path / "jwks.json").write_bytes(jwks(signer))
        secured = gateway = Gateway.start(
            live_deployment,
            "--heartbeat",
            "0.5",
            STREAM_GATEWAY_JWT_KEYS=str(tmp_path / "jwks.json"),
        )
        tokens = [signer.token(["fan-out-*"], sub=f"user-{i}") for i in range(clients_wanted)]
    key, log = f"fan-out-{auth}", Log.read("example-agent-1.jsonl")
    cuts = log.cuts(8)
    first = log.seq_after(cuts[0])
    feeder.send(key, log.lines[: cuts[0]])
    wait_seq(live_deployment, key, first)
    url = f"{gateway.url}/sessions/{key}/context/stream"
    recorder = ChannelRecorder(live_deployment, key)

    async def go() -> tuple[list[SseClient], float]:
        async with _session() as http:
            clients = [SseClient(url, token=token) for token in tokens]
            started = time.perf_counter()
            tasks = [asyncio.create_task(c.run(http)) for c in clients]
            async with asyncio.timeout(60):
                while not all(c.events for c in clients):
                    await asyncio.sleep(0.05)
            connect_seconds = time.perf_counter() - started
            assert {c.seqs()[0] for c in clients} == {first}
            assert gateway.health()["clients"] >= clients_wanted
            # Further updates, spaced so each is its own batch (one update per batch).
            for start, end in itertools.pairwise(cuts):
                await asyncio.to_thread(feeder.send, key, log.lines[start:end])
                await asyncio.to_thread(wait_seq, live_deployment, key, log.seq_after(end))
                await asyncio.sleep(0.1)
            final = log.seq_after(cuts[-1])
            async with asyncio.timeout(30):
                while not all(c.events[-1][0] == final for c in clients):
                    await asyncio.sleep(0.05)
            for task in tasks:
                task.cancel()
            return clients, connect_seconds

    try:
        clients, connect_seconds = asyncio.run(go())
    finally:
        recorder.stop()
        if secured is not None:
            secured.stop()
    published = {seq: at for seq, _, at in recorder.received}
    expected = [first, *recorder.seqs()]
    latencies = []
    for client in clients:
        assert client.seqs() == expected  # every update, in order, once
        latencies.extend(at - published[seq] for seq, _, at in client.events[1:])
    latencies.sort()
    p50 = statistics.median(latencies) * 1000
    p99 = latencies[int(0.99 * (len(latencies) - 1))] * 1000
    print(
        f"\nSSE fan-out (auth {auth}): {clients_wanted} clients on one gateway,"
        f" {len(expected) - 1} updates,"
        f" {len(latencies)} deliveries; delivery latency after Redis published:"
        f" p50 {p50:.1f} ms, p99 {p99:.1f} ms, max {latencies[-1] * 1000:.1f} ms;"
        f" {clients_wanted} clients connected and had the latest value in {connect_seconds:.2f} s"
    )
    assert len(expected) >= 5
    assert p99 < 2000, "fan-out to 1,000 clients should take well under 2 s"


def test_a_slow_client_is_dropped_without_slowing_the_others(
    live_deployment: Deployment, redis_url: str
) -> None:
    """A reader that never reads fills its queue and is dropped; fast readers get every
    update. Large updates published straight to Redis fill the socket buffers fast."""
    small = Gateway.start(live_deployment, "--queue-size", "4", "--heartbeat", "30")
    key = "slow-reader"
    channel = f"{live_deployment.prefix}session:{key}"
    client = redis.Redis.from_url(redis_url)
    pad = "x" * 65_536

    def write(body: bytes, seq: int) -> None:
        # As the worker's script does: the hash, then the channel, atomically.
        pipe = client.pipeline(transaction=True)
        pipe.hset(channel, mapping={"update": body, "seq": seq})
        pipe.publish(channel, body)
        pipe.execute()

    write(orjson.dumps({"sessionId": key, "seq": 0}), 0)
    path = f"/sessions/{key}/context/stream"
    try:
        slow = socket.socket()
        slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        slow.connect(("127.0.0.1", int(small.url.rsplit(":", 1)[1])))
        slow.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())

        async def go() -> list[SseClient]:
            async with _session() as http:
                fast = [SseClient(small.url + path) for _ in range(5)]
                tasks = [asyncio.create_task(c.run(http)) for c in fast]
                for c in fast:
                    await c.wait(lambda c: c.events)
                await asyncio.to_thread(
                    wait_until, lambda: small.health()["clients"] >= 6, 10, "the slow reader too"
                )
                for seq in range(1, 301):
                    body = orjson.dumps({"sessionId": key, "seq": seq, "pad": pad})
                    await asyncio.to_thread(write, body, seq)
                    # A fast reader is one that keeps up: each has this update before the
                    # next is written, however slow the machine (a burst of 64 KiB frames
                    # could otherwise put a reader in this process 4 behind and drop it).
                    for c in fast:
                        await c.wait(
                            lambda c, seq=seq: c.ended or c.events[-1][0] >= seq, timeout=30
                        )
                        assert not c.ended, f"a fast reader was dropped at seq {seq}"
                for task in tasks:
                    task.cancel()
                return fast

        fast = asyncio.run(go())
        for reader in fast:
            # In order, no repeats, up to the last. A burst faster than the hub's read of
            # the hash reaches clients as its latest value (the latest-value contract).
            got = reader.seqs()
            assert got == sorted(set(got)) and got[0] == 0 and got[-1] == 300, got
        health = small.health()
        assert health["dropped"] == 1, health
        # The server aborted the slow connection: reading it ends (EOF or reset), no hang.
        slow.settimeout(10)
        try:
            while slow.recv(1 << 20):
                pass
        except ConnectionResetError:
            pass
        slow.close()
    finally:
        small.stop()


def test_the_gateway_resubscribes_after_losing_redis_and_catches_up(
    live_deployment: Deployment, gateway: Gateway, redis_url: str
) -> None:
    """Kill the gateway's Redis connections and keep it out (a password) while an update
    lands unheard: once back, its connected clients get that update (resync)."""
    key = "resubscribe"
    channel = f"{live_deployment.prefix}session:{key}"
    admin = redis.Redis.from_url(redis_url)
    admin.hset(channel, mapping={"update": orjson.dumps({"sessionId": key, "seq": 1})})
    url = f"{gateway.url}/sessions/{key}/context/stream"

    async def go() -> SseClient:
        async with _session() as http:
            reader = SseClient(url)
            task = asyncio.create_task(reader.run(http))
            await reader.wait(lambda c: c.events)
            authed = redis.Redis.from_url(redis_url, password="gateway-outage")
            admin.config_set("requirepass", "gateway-outage")
            try:
                for line in authed.client_list():
                    if line.get("name") == "stream-gateway":
                        authed.client_kill_filter(_id=line["id"])
                await asyncio.to_thread(
                    wait_until,
                    lambda: gateway.health()["subscribed"] is False,
                    10,
                    "the gateway to notice its subscription is gone",
                )
                update = orjson.dumps({"sessionId": key, "seq": 2, "while": "away"})
                authed.hset(channel, mapping={"update": update, "seq": 2})
                authed.publish(channel, update)  # nobody from the gateway hears this
            finally:
                authed.config_set("requirepass", "")
            await reader.wait(lambda c: c.events[-1][0] == 2, timeout=20)
            assert reader.status == 200 and not reader.ended  # the stream stayed open
            task.cancel()
            return reader

    reader = asyncio.run(go())
    assert reader.seqs() == [1, 2]
    wait_until(lambda: gateway.health()["subscribed"], 10, "the gateway to resubscribe")
    assert "Redis subscription lost" in gateway.log()
