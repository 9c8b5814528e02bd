"""Run a real `stream serve` gateway and feed its deployment example logs, for the gateway's
integration tests (its API and SSE in test_gateway, its page in test_page)."""

import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import Producer

from tests.integration.harness import REPO, Deployment, free_port, http_get, wait_until

EXAMPLES = REPO / "examples"
# `stream serve` runs this module's server (stream/gateway/server.py).
SERVE = [sys.executable, "-m", "stream", "serve"]


@dataclass
class Gateway:
    """A `python -m stream serve` subprocess with the deployment's environment."""

    process: subprocess.Popen[bytes]
    url: str
    log_path: Path

    @classmethod
    def start(cls, deployment: Deployment, *args: str, **env: str) -> "Gateway":
        """Started and healthy. Test clients all come from 127.0.0.1: the per-address
        stream and connection limits are lifted unless ``env`` sets them."""
        port = free_port()
        log_path = deployment.workdir / f"gateway-{port}.log"
        env = {
            "STREAM_GATEWAY_MAX_STREAMS_PER_ADDRESS": "0",
            "STREAM_GATEWAY_MAX_CONNECTIONS_PER_ADDRESS": "0",
        } | env
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                [*SERVE, "--port", str(port), *args],
                env=deployment.env(**env),
                cwd=REPO,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        gateway = cls(process, f"http://127.0.0.1:{port}", log_path)
        wait_until(gateway._healthy, 30, f"the gateway on port {port} to be healthy")
        return gateway

    def _healthy(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"the gateway exited:\n{self.log()[-3000:]}")
        return self.get("/healthz")[0] == 200

    def get(self, path: str) -> tuple[int, bytes]:
        return http_get(self.url + path, timeout=10)

    def request(
        self, path: str, headers: dict[str, str] | None = None
    ) -> tuple[int, dict[str, str], bytes]:
        """GET with headers: status, response headers, body (errors included)."""
        request = urllib.request.Request(self.url + path, headers=headers or {})
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, dict(response.headers), response.read()
        except urllib.error.HTTPError as error:
            return error.code, dict(error.headers), error.read()

    def health(self) -> dict[str, Any]:
        return orjson.loads(self.get("/healthz")[1])  # type: ignore[no-any-return]

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)


@dataclass
class Log:
    """An example log's lines (header dropped), produced verbatim under a chosen key."""

    lines: list[bytes]

    @classmethod
    def read(cls, name: str) -> "Log":
        lines = (EXAMPLES / name).read_bytes().splitlines()
        return cls([line for line in lines if b'"type":"session"' not in line[:40]])

    def cuts(self, parts: int) -> list[int]:
        """About ``parts`` cut points, each just after a line with a plain ``seq`` (so the
        update's seq after it is known), the last one at the end."""
        plain = [i + 1 for i, line in enumerate(self.lines) if orjson.loads(line).get("seq")]
        step = max(1, len(plain) // parts)
        chosen = plain[step - 1 :: step][: parts - 1]
        return [*chosen, len(self.lines)]

    def seq_after(self, end: int) -> int:
        seq = orjson.loads(self.lines[end - 1]).get("seq")
        assert isinstance(seq, int), "cut after a line without a plain seq"
        return seq


class Feeder:
    """Produces raw log lines (events or packed chunk rows) keyed by session id, in order."""

    def __init__(self, deployment: Deployment) -> None:
        self.topic = f"{deployment.name}.events"
        # murmur2_random, like `stream produce`: every line of a key lands in one partition.
        self.producer = Producer(
            {
                "bootstrap.servers": deployment.bootstrap,
                "partitioner": "murmur2_random",
                "linger.ms": 0,
            }
        )

    def close(self) -> None:
        self.producer.flush(10)
        # The only reference: the client is destroyed now, not at interpreter exit after Kafka
        # has stopped (the installed confluent-kafka Producer has no close()).
        del self.producer

    def send(self, key: str, lines: Sequence[bytes]) -> None:
        for line in lines:
            self.producer.produce(self.topic, key=key.encode(), value=line)
        self.producer.flush(10)

    def paced(self, key: str, log: Log, start: int, end: int, parts: int, pause: float) -> int:
        """Lines [start, end) in ``parts`` sends, ``pause`` s apart: several updates."""
        cuts = [c for c in Log(log.lines[:end]).cuts(parts) if c > start]
        previous = start
        for cut in cuts:
            self.send(key, log.lines[previous:cut])
            previous = cut
            time.sleep(pause)
        return log.seq_after(end)


def redis_seq(deployment: Deployment, session_id: str) -> int | None:
    update = deployment.redis_update(session_id)
    return None if update is None else int(update["seq"])


def wait_seq(deployment: Deployment, session_id: str, seq: int, timeout: float = 30) -> None:
    wait_until(
        lambda: redis_seq(deployment, session_id) == seq,
        timeout,
        f"{session_id} at seq {seq} in Redis (have {redis_seq(deployment, session_id)})",
        every=0.05,
    )
