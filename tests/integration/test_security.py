"""The worker over secured connections, against a local broker and redis-server set up
that way (deploy/kafka.sh, deploy/redis.sh) with certificates made at test time (openssl):

- Kafka over SASL_SSL with SCRAM-SHA-512, and over mutual TLS (client certificates);
- Redis with AUTH as an ACL user (the default user off), over TLS.

Each scenario ends with the fault suite's verifier (``verdict.verify``: the offline fold
equals Redis and the output topic, every event accounted for, dead letters exact), and
the credentials must appear nowhere the service writes: worker logs, the output, changelog
and dead-letter topics, Redis, the metrics and probe pages. The listeners are shown to
enforce what they are configured for, and a worker given a wrong password stops within
seconds naming the variables and the real reason, without quoting it.
"""

from __future__ import annotations

import os
import random
import secrets
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pytest
import redis
from confluent_kafka.admin import AdminClient

from tests.integration.broker import Broker
from tests.integration.faults import Ledger, input_topic, produce_now, say, session_traffic
from tests.integration.harness import REPO, Deployment, free_ports
from tests.integration.pki import Pki, make_pki
from tests.integration.verdict import Verdict, verify

pytestmark = pytest.mark.integration

KAFKA_USER = "stream-worker"
REDIS_USER = "stream-worker"


def _secret() -> str:
    # Letters and digits only: SCRAM's --add-scram and Redis ACL rules take them verbatim.
    return "pw" + secrets.token_hex(16)


# --------------------------------------------------------------------------- certificates


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


# --------------------------------------------------------------------------- servers


@dataclass(frozen=True)
class SecureKafka:
    plaintext: str  # for readiness only; the workers never use it
    ssl: str  # mutual TLS
    sasl_ssl: str  # SCRAM-SHA-512/256
    password: str = field(repr=False)


@pytest.fixture(scope="module")
def secure_kafka(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureKafka]:
    port, controller, ssl_port, sasl_port = free_ports(4)
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
    port, tls_port = free_ports(2)
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

    reader_wait: ClassVar[float] = 20  # TLS handshakes on top

    def redis(self) -> redis.Redis:
        return redis.Redis.from_url(self.redis_url, **self.redis_options)

    def reader_conf(self) -> dict[str, Any]:
        return {"bootstrap.servers": self.bootstrap, "log_level": 2} | self.client_conf


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


@dataclass
class Secured:
    """The secured servers and certificates, and a test's directory: the deployments made
    here (their own readers on the right credentials) are stopped after the test."""

    kafka: SecureKafka
    redis: SecureRedis
    pki: Pki
    workdir: Path
    deployments: list[SecureDeployment] = field(default_factory=list)

    @property
    def passwords(self) -> tuple[str, str]:
        return self.kafka.password, self.redis.password

    def _deployment(
        self,
        bootstrap: str,
        redis_url: str,
        extra_env: dict[str, str],
        client_conf: dict[str, Any],
        redis_options: dict[str, Any],
    ) -> SecureDeployment:
        created = SecureDeployment(
            bootstrap,
            redis_url,
            self.workdir,
            partitions=2,
            extra_env=extra_env,
            client_conf=client_conf,
            redis_options=redis_options,
        )
        self.deployments.append(created)
        return created

    def sasl_deployment(
        self, kafka_password: str | None = None, redis_password: str | None = None
    ) -> SecureDeployment:
        """Kafka over SASL_SSL/SCRAM-SHA-512; Redis AUTH over TLS, credentials in variables
        (the servers' own passwords unless told)."""
        pki = self.pki
        return self._deployment(
            self.kafka.sasl_ssl,
            f"rediss://127.0.0.1:{self.redis.tls_port}/0",
            extra_env={
                "KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
                "KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
                "KAFKA_SASL_USERNAME": KAFKA_USER,
                "KAFKA_SASL_PASSWORD": kafka_password or self.kafka.password,
                "KAFKA_SSL_CAFILE": str(pki.ca),
                "REDIS_USERNAME": REDIS_USER,
                "REDIS_PASSWORD": redis_password or self.redis.password,
                "REDIS_TLS_CAFILE": str(pki.ca),
            },
            client_conf=_sasl_conf(self.kafka, pki, self.kafka.password),
            redis_options=_redis_options(pki, self.redis.password),
        )

    def mtls_deployment(self) -> SecureDeployment:
        """Kafka over mutual TLS (client certificate); Redis over TLS with the ACL user's
        credentials embedded in REDIS_URL (the form most likely to be logged)."""
        pki = self.pki
        return self._deployment(
            self.kafka.ssl,
            f"rediss://{REDIS_USER}:{self.redis.password}@127.0.0.1:{self.redis.tls_port}/0",
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


@pytest.fixture
def secured(
    secure_kafka: SecureKafka, secure_redis: SecureRedis, pki: Pki, tmp_path: Path
) -> Iterator[Secured]:
    made = Secured(secure_kafka, secure_redis, pki, tmp_path)
    yield made
    for deployment in made.deployments:
        deployment.stop_all()


# --------------------------------------------------------------------------- leaks


def _everything_written(deployment: SecureDeployment) -> dict[str, bytes]:
    """Everything the service wrote, by where: logs, topics, Redis, metrics and probes."""
    found: dict[str, bytes] = {}
    for worker in deployment.workers:
        found[f"log {worker.worker_id}"] = worker.log_path.read_bytes()
        found[f"/metrics {worker.worker_id}"] = worker.page("/metrics")[1]
        found[f"/readyz {worker.worker_id}"] = worker.page("/readyz")[1]
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


def _assert_not_quoted(log: str, *credentials: str) -> None:
    for credential in credentials:
        assert credential not in log


def _exact_without_leaks(
    deployment: SecureDeployment, tag: str, seed: int, workdir: Path, *credentials: str
) -> Verdict:
    """A worker folds a dozen sessions with some garbage lines: the verifier passes, and
    none of the credentials appears in what the service wrote."""
    ledger = Ledger(input_topic(deployment))
    deployment.start_worker(tag)
    traffic = session_traffic(random.Random(seed), tag, 12, (40, 150), garbage_rate=0.05)
    produce_now(deployment, ledger, traffic)
    verdict = verify(deployment, ledger, workdir)
    _assert_no_leak(_everything_written(deployment), *credentials)
    return verdict


# --------------------------------------------------------------------------- scenarios


def test_sasl_ssl_scram_and_redis_acl_over_tls(secured: Secured) -> None:
    """Kafka over SASL_SSL (SCRAM-SHA-512), Redis AUTH (ACL user) over TLS: exact, and the
    passwords nowhere in what the service writes."""
    deployment = secured.sasl_deployment()
    verdict = _exact_without_leaks(deployment, "sasl", 707, secured.workdir, *secured.passwords)
    say(f"SASL_SSL/SCRAM-SHA-512 + Redis ACL over TLS: {verdict.line()}")


def test_mutual_tls_and_redis_credentials_in_the_url(secured: Secured) -> None:
    """Kafka over mutual TLS (client certificate), Redis over TLS with the ACL user's
    credentials embedded in REDIS_URL (the form most likely to be logged): exact, and the
    password nowhere in what the service writes."""
    deployment = secured.mtls_deployment()
    verdict = _exact_without_leaks(deployment, "mtls", 808, secured.workdir, secured.redis.password)
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


def _stopped_at_start(deployment: SecureDeployment, tag: str) -> tuple[int, str, float]:
    """Start a worker that must stop before it is ready: its status, log and seconds."""
    began = time.monotonic()
    with pytest.raises(AssertionError, match="exited early"):
        deployment.start_worker(tag)
    worker = deployment.workers[-1]
    assert worker.process is not None
    code = worker.process.wait(30)
    return code, worker.log(), time.monotonic() - began


def test_a_wrong_kafka_password_stops_the_worker_naming_the_cause(secured: Secured) -> None:
    """Within seconds, the variables to fix and librdkafka's own reason, not "Broker
    transport failure" after its 20 s timeout blaming the address; no password quoted."""
    wrong = _secret()
    code, log, took = _stopped_at_start(secured.sasl_deployment(kafka_password=wrong), "bad")
    assert code == 1, log[-2000:]
    assert "(KAFKA_SASL_USERNAME, KAFKA_SASL_PASSWORD): SASL authentication error" in log
    assert "invalid credentials" in log and "Broker transport failure" not in log
    assert took < 10, took
    _assert_not_quoted(log, wrong, *secured.passwords)


def test_a_wrong_redis_password_stops_the_worker_naming_the_cause(secured: Secured) -> None:
    """A Redis login refused at start: exit 3 (a permanent Redis error, as when a running
    worker meets one) within seconds, naming the variables, quoting no credential. A
    refusal after start-up stops it the same way (test_worker.py)."""
    wrong = _secret()
    code, log, took = _stopped_at_start(secured.sasl_deployment(redis_password=wrong), "bad")
    assert code == 3, log[-2000:]
    assert "(REDIS_USERNAME, REDIS_PASSWORD): login refused: invalid username-password" in log
    assert took < 10, took
    _assert_not_quoted(log, wrong, *secured.passwords)
