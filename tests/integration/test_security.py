"""The worker over secured connections, against a local broker and redis-server set up
that way (deploy/kafka.sh, deploy/redis.sh) with certificates made at test time (openssl):

- Kafka over SASL_SSL with SCRAM-SHA-512, and over mutual TLS (client certificates);
- Redis with AUTH as an ACL user (the default user off), over TLS.

Each scenario ends with the fault suite's verifier (``faults.verify``: the offline fold
equals Redis and the output topic, every event accounted for, dead letters exact), and
the credentials must appear nowhere the service writes: worker logs, the output, changelog
and dead-letter topics, Redis, the metrics and probe pages. The listeners are shown to
enforce what they are configured for, and a worker given a wrong password stops with a
clear message that does not quote it.
"""

from __future__ import annotations

import os
import random
import secrets
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.integration.faults import (
    Broker,
    Ledger,
    input_topic,
    produce_now,
    say,
    session_traffic,
    verify,
)
from tests.integration.harness import REPO, Deployment, Worker, wait_until

pytestmark = pytest.mark.integration

KAFKA_USER = "stream-worker"
REDIS_USER = "stream-worker"


def _free_ports(count: int) -> list[int]:
    with ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in socks]


def _secret() -> str:
    # Letters and digits only: SCRAM's --add-scram and Redis ACL rules take them verbatim.
    return "pw" + secrets.token_hex(16)


# --------------------------------------------------------------------------- certificates


@dataclass(frozen=True)
class Pki:
    """A CA, a server certificate for 127.0.0.1/localhost and a client certificate."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    d = tmp_path_factory.mktemp("pki")
    _openssl(
        *("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2"),
        *("-keyout", "ca.key", "-out", "ca.pem"),
        *("-subj", "/CN=context-stream-test-CA"),
        *("-addext", "basicConstraints=critical,CA:TRUE"),
        *("-addext", "keyUsage=critical,keyCertSign,cRLSign"),
        cwd=d,
    )
    for who in ("server", "client"):
        _openssl(
            *f"req -newkey rsa:2048 -nodes -keyout {who}.key -out {who}.csr".split(),
            *("-subj", f"/CN={who}"),
            cwd=d,
        )
        (d / f"{who}.ext").write_text(
            "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
            f"extendedKeyUsage={'serverAuth' if who == 'server' else 'clientAuth'}\n"
            "basicConstraints=CA:FALSE\n"
        )
        _openssl(
            *f"x509 -req -in {who}.csr -CA ca.pem -CAkey ca.key -CAcreateserial".split(),
            *f"-out {who}.pem -days 2 -extfile {who}.ext".split(),
            cwd=d,
        )
    for key in d.glob("*.key"):
        key.chmod(0o600)
    return Pki(d / "ca.pem", d / "server.pem", d / "server.key", d / "client.pem", d / "client.key")


# --------------------------------------------------------------------------- servers


@dataclass(frozen=True)
class SecureKafka:
    plaintext: str  # for readiness only; the workers never use it
    ssl: str  # mutual TLS
    sasl_ssl: str  # SCRAM-SHA-512/256
    password: str = field(repr=False)


@pytest.fixture(scope="module")
def secure_kafka(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureKafka]:
    port, controller, ssl_port, sasl_port = _free_ports(4)
    password = _secret()
    broker = Broker(
        tmp_path_factory.mktemp("kafka-secure"),
        port,
        controller,
        options=(
            *("--ssl-port", str(ssl_port), "--sasl-ssl-port", str(sasl_port)),
            *("--ssl-client-auth", "required", "--scram-user", KAFKA_USER),
            *("--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key)),
            *("--tls-ca", str(pki.ca)),
        ),
        env={"KAFKA_SCRAM_PASSWORD": password},
    )
    plaintext = broker.start()
    try:
        yield SecureKafka(plaintext, f"127.0.0.1:{ssl_port}", f"127.0.0.1:{sasl_port}", password)
    finally:
        broker.stop()


@dataclass(frozen=True)
class SecureRedis:
    tls_port: int
    password: str = field(repr=False)


@pytest.fixture(scope="module")
def secure_redis(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureRedis]:
    port, tls_port = _free_ports(2)
    password = _secret()
    directory = tmp_path_factory.mktemp("redis-secure")
    script = str(REPO / "deploy" / "redis.sh")
    subprocess.run(
        [
            *("bash", script, "start", "--port", str(port), "--dir", str(directory)),
            *("--tls-port", str(tls_port), "--acl-user", REDIS_USER),
            *("--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key)),
            *("--tls-ca", str(pki.ca)),
        ],
        env=os.environ | {"REDIS_ACL_PASSWORD": password},
        check=True,
        capture_output=True,
        timeout=120,
    )
    try:
        yield SecureRedis(tls_port, password)
    finally:
        subprocess.run(
            ["bash", script, "stop", "--dir", str(directory)], capture_output=True, timeout=60
        )


# --------------------------------------------------------------------------- deployments


@dataclass
class SecureDeployment(Deployment):
    """A deployment whose own readers (Kafka and Redis) use the secured connections."""

    client_conf: dict[str, Any] = field(default_factory=dict, repr=False)
    redis_options: dict[str, Any] = field(default_factory=dict, repr=False)

    def redis(self) -> redis.Redis:
        return redis.Redis.from_url(self.redis_url, **self.redis_options)

    def consume_all(self, topic: str, timeout: float = 20) -> list[Any]:
        consumer = Consumer(
            {"bootstrap.servers": self.bootstrap, "log_level": 2}
            | self.client_conf
            | {"group.id": f"reader-{secrets.token_hex(8)}", "enable.auto.commit": False}
        )
        try:
            metadata = consumer.list_topics(topic, timeout=20).topics[topic]
            ends = {}
            for p in metadata.partitions:
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=20)
                if high > low:
                    ends[p] = high
            consumer.assign([TopicPartition(topic, p, 0) for p in ends])
            records: list[Any] = []
            positions = dict.fromkeys(ends, 0)
            deadline = time.monotonic() + timeout
            while any(positions[p] < ends[p] for p in ends) and time.monotonic() < deadline:
                message = consumer.poll(0.5)
                if message is None or message.error():
                    continue
                records.append(message)
                positions[message.partition()] = message.offset() + 1
            return records
        finally:
            consumer.close()


def _sasl_conf(kafka: SecureKafka, pki: Pki, password: str) -> dict[str, Any]:
    return {
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": KAFKA_USER,
        "sasl.password": password,
        "ssl.ca.location": str(pki.ca),
    }


def _mtls_conf(pki: Pki) -> dict[str, Any]:
    return {
        "security.protocol": "SSL",
        "ssl.ca.location": str(pki.ca),
        "ssl.certificate.location": str(pki.client_cert),
        "ssl.key.location": str(pki.client_key),
    }


def _redis_options(pki: Pki, password: str) -> dict[str, Any]:
    return {"username": REDIS_USER, "password": password, "ssl_ca_certs": str(pki.ca)}


def _sasl_deployment(
    kafka: SecureKafka,
    redis_server: SecureRedis,
    pki: Pki,
    workdir: Path,
    kafka_password: str | None = None,
    redis_password: str | None = None,
) -> SecureDeployment:
    """Kafka over SASL_SSL/SCRAM-SHA-512; Redis AUTH over TLS, credentials in variables."""
    kafka_password = kafka_password or kafka.password
    redis_password = redis_password or redis_server.password
    workdir.mkdir(parents=True, exist_ok=True)
    return SecureDeployment(
        kafka.sasl_ssl,
        f"rediss://127.0.0.1:{redis_server.tls_port}/0",
        workdir,
        partitions=2,
        extra_env={
            "KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
            "KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
            "KAFKA_SASL_USERNAME": KAFKA_USER,
            "KAFKA_SASL_PASSWORD": kafka_password,
            "KAFKA_SSL_CAFILE": str(pki.ca),
            "REDIS_USERNAME": REDIS_USER,
            "REDIS_PASSWORD": redis_password,
            "REDIS_TLS_CAFILE": str(pki.ca),
        },
        client_conf=_sasl_conf(kafka, pki, kafka.password),
        redis_options=_redis_options(pki, redis_server.password),
    )


@pytest.fixture
def deployments() -> Iterator[list[Deployment]]:
    created: list[Deployment] = []
    yield created
    for deployment in created:
        deployment.stop_all()


# --------------------------------------------------------------------------- leaks


def _page(worker: Worker, path: str) -> bytes:
    try:
        with urllib.request.urlopen(
            f"http://127.0.0.1:{worker.metrics_port}{path}", timeout=5
        ) as page:
            body: bytes = page.read()
            return body
    except urllib.error.HTTPError as error:
        return bytes(error.read())
    except OSError:
        return b""


def _everything_written(deployment: SecureDeployment) -> dict[str, bytes]:
    """Everything the service wrote, by where: logs, topics, Redis, metrics and probes."""
    found: dict[str, bytes] = {}
    for worker in deployment.workers:
        found[f"log {worker.worker_id}"] = worker.log_path.read_bytes()
        found[f"/metrics {worker.worker_id}"] = _page(worker, "/metrics")
        found[f"/readyz {worker.worker_id}"] = _page(worker, "/readyz")
    for topic in (
        f"{deployment.name}.context",
        f"{deployment.name}.dlq",
        f"{deployment.name}-sessions-changelog",
    ):
        parts = []
        for record in deployment.consume_all(topic):
            parts += [record.key() or b"", record.value() or b""]
            for name, value in record.headers() or []:
                parts += [name.encode(), value or b""]
        found[f"topic {topic}"] = b"\n".join(parts)
    client = deployment.redis()
    parts = []
    for key in client.scan_iter(match=f"{deployment.prefix}*", count=1000):
        kind = client.type(key)
        parts.append(key)
        if kind == b"hash":
            for k, v in client.hgetall(key).items():
                parts += [k, v]
        elif kind == b"string":
            parts.append(client.get(key) or b"")
        elif kind == b"zset":
            parts += list(client.zrange(key, 0, -1))
    found["redis"] = b"\n".join(parts)
    return found


def _assert_no_leak(written: dict[str, bytes], *credentials: str) -> None:
    assert all(written.values()), [where for where, data in written.items() if not data]
    for credential in credentials:
        needle = credential.encode()
        leaks = [where for where, data in written.items() if needle in data]
        assert not leaks, f"a credential appears in: {leaks}"


# --------------------------------------------------------------------------- scenarios


def test_sasl_ssl_scram_and_redis_acl_over_tls(
    secure_kafka: SecureKafka,
    secure_redis: SecureRedis,
    pki: Pki,
    tmp_path: Path,
    deployments: list[Deployment],
) -> None:
    """Kafka over SASL_SSL (SCRAM-SHA-512), Redis AUTH (ACL user) over TLS: exact, and the
    passwords nowhere in what the service writes."""
    deployment = _sasl_deployment(secure_kafka, secure_redis, pki, tmp_path)
    deployments.append(deployment)
    ledger = Ledger(input_topic(deployment))
    deployment.start_worker("sasl")
    traffic = session_traffic(random.Random(707), "sasl", 12, (40, 150), garbage_rate=0.05)
    produce_now(deployment, ledger, traffic)
    verdict = verify(deployment, ledger, tmp_path)
    _assert_no_leak(_everything_written(deployment), secure_kafka.password, secure_redis.password)
    say(f"SASL_SSL/SCRAM-SHA-512 + Redis ACL over TLS: {verdict.line()}")


def test_mutual_tls_and_redis_credentials_in_the_url(
    secure_kafka: SecureKafka,
    secure_redis: SecureRedis,
    pki: Pki,
    tmp_path: Path,
    deployments: list[Deployment],
) -> None:
    """Kafka over mutual TLS (client certificate), Redis over TLS with the ACL user's
    credentials embedded in REDIS_URL (the form most likely to be logged): exact, and the
    password nowhere in what the service writes."""
    url = f"rediss://{REDIS_USER}:{secure_redis.password}@127.0.0.1:{secure_redis.tls_port}/0"
    deployment = SecureDeployment(
        secure_kafka.ssl,
        url,
        tmp_path,
        partitions=2,
        extra_env={
            "KAFKA_SECURITY_PROTOCOL": "SSL",
            "KAFKA_SSL_CAFILE": str(pki.ca),
            "KAFKA_SSL_CERTFILE": str(pki.client_cert),
            "KAFKA_SSL_KEYFILE": str(pki.client_key),
            "REDIS_TLS_CAFILE": str(pki.ca),
        },
        client_conf=_mtls_conf(pki),
        redis_options={"ssl_ca_certs": str(pki.ca)},
    )
    deployments.append(deployment)
    ledger = Ledger(input_topic(deployment))
    deployment.start_worker("mtls")
    traffic = session_traffic(random.Random(808), "mtls", 12, (40, 150), garbage_rate=0.05)
    produce_now(deployment, ledger, traffic)
    verdict = verify(deployment, ledger, tmp_path)
    _assert_no_leak(_everything_written(deployment), secure_redis.password)
    say(f"mutual TLS + Redis ACL over TLS (credentials in REDIS_URL): {verdict.line()}")


def test_the_listeners_enforce_authentication(secure_kafka: SecureKafka, pki: Pki) -> None:
    """Not vacuous: a wrong SCRAM password, or TLS without a client certificate, gets no
    metadata; the right credentials do."""

    def metadata(bootstrap: str, conf: dict[str, Any]) -> bool:
        client = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0} | conf)
        try:
            return bool(client.list_topics(timeout=6).brokers)
        except Exception:
            return False

    assert metadata(secure_kafka.sasl_ssl, _sasl_conf(secure_kafka, pki, secure_kafka.password))
    assert not metadata(secure_kafka.sasl_ssl, _sasl_conf(secure_kafka, pki, _secret()))
    assert metadata(secure_kafka.ssl, _mtls_conf(pki))
    no_certificate = {"security.protocol": "SSL", "ssl.ca.location": str(pki.ca)}
    assert not metadata(secure_kafka.ssl, no_certificate)


def test_a_wrong_kafka_password_stops_the_worker_without_quoting_it(
    secure_kafka: SecureKafka,
    secure_redis: SecureRedis,
    pki: Pki,
    tmp_path: Path,
    deployments: list[Deployment],
) -> None:
    wrong = _secret()
    deployment = _sasl_deployment(secure_kafka, secure_redis, pki, tmp_path, kafka_password=wrong)
    deployments.append(deployment)
    with pytest.raises(AssertionError, match="exited early"):
        deployment.start_worker("badkafka")
    worker = deployment.workers[0]
    assert worker.process is not None and worker.process.returncode not in (0, None)
    log = worker.log()
    assert "cannot prepare topics" in log or "Authentication" in log, log[-2000:]
    for credential in (wrong, secure_kafka.password, secure_redis.password):
        assert credential not in log


def test_a_wrong_redis_password_stops_the_worker_without_quoting_it(
    secure_kafka: SecureKafka,
    secure_redis: SecureRedis,
    pki: Pki,
    tmp_path: Path,
    deployments: list[Deployment],
) -> None:
    """A permanent Redis refusal stops the worker with exit 3 and a clear message
    (contract: "What is published"), quoting no credential.
    (Regression: the re-seed's marker write once crashed it with exit 1 and a traceback.)
    """
    wrong = _secret()
    deployment = _sasl_deployment(secure_kafka, secure_redis, pki, tmp_path, redis_password=wrong)
    deployments.append(deployment)
    try:
        deployment.start_worker("badredis")
        ledger = Ledger(input_topic(deployment))
        produce_now(deployment, ledger, session_traffic(random.Random(9), "r", 2, (5, 10)))
    except AssertionError as error:
        assert "exited early" in str(error)  # it may stop before it is ready
    worker = deployment.workers[0]
    process = worker.process
    assert process is not None
    wait_until(lambda: process.poll() is not None, 120, "the worker to stop")
    log = worker.log()
    for credential in (wrong, secure_kafka.password, secure_redis.password):
        assert credential not in log
    assert process.returncode == 3, log[-2000:]
    assert "stream worker: stopped:" in log, log[-2000:]
