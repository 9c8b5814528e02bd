"""A wrong setting at start-up is one line, within seconds, naming the variable (or the
resource) and the real reason — for the worker, the gateway and the operator commands —
against a broker set up as managed clusters are (SASL_SSL with SCRAM-SHA-512, the
StandardAuthorizer, auto-creation off) and a redis-server with the three ACL users of
helm/context-stream/files/redis-acl.conf.

Each case runs the real command as a subprocess and asserts its status, its stderr and
that it answered within 10 s (it took 20–60 s, or never, before). The broker's
plaintext listener is its super user (the admin's door): the Redis cases reach Kafka
through it, and ``stream topics --create`` runs through it as an admin would.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from stream.config import Settings
from stream.ops.probe import group_has_run
from tests.integration.broker import Broker
from tests.integration.harness import REPO, free_ports, wait_until
from tests.integration.pki import Pki, make_pki

pytestmark = pytest.mark.integration

KAFKA_USER = "stream-worker"
ACL_FILE = REPO / "helm" / "context-stream" / "files" / "redis-acl.conf"
FAST = 10.0  # seconds a start-up failure may take to be said


@dataclass(frozen=True)
class Servers:
    plaintext: str  # the broker's super user (User:ANONYMOUS)
    sasl_ssl: str
    ca: Path
    kafka_password: str = field(repr=False)
    redis_port: int = 0
    redis_passwords: dict[str, str] = field(default_factory=dict, repr=False)


@dataclass(frozen=True)
class Said:
    code: int
    out: str
    err: str
    took: float


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def servers(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    port, controller, sasl_port, redis_port = free_ports(4)
    kafka_password = "pw" + secrets.token_hex(12)
    broker = Broker(
        tmp_path_factory.mktemp("kafka-locked"),
        port,
        controller,
        options=(
            *("--sasl-ssl-port", str(sasl_port), "--scram-user", KAFKA_USER),
            *("--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key)),
            *("--tls-ca", str(pki.ca), "--authorizer", "--no-auto-create"),
        ),
        env={"KAFKA_SCRAM_PASSWORD": kafka_password},
    )
    plaintext = broker.start()
    redis_dir = tmp_path_factory.mktemp("redis-acl")
    script = str(REPO / "deploy" / "redis.sh")
    admin_password = "pw" + secrets.token_hex(12)
    try:
        subprocess.run(
            [
                *("bash", script, "start", "--port", str(redis_port)),
                *("--dir", str(redis_dir), "--acl-user", "admin"),
            ],
            env=os.environ | {"REDIS_ACL_PASSWORD": admin_password},
            check=True,
            capture_output=True,
            timeout=120,
        )
        passwords = _redis_users(redis_port, admin_password)
        yield Servers(
            plaintext, f"127.0.0.1:{sasl_port}", pki.ca, kafka_password, redis_port, passwords
        )
    finally:
        subprocess.run(["bash", script, "stop", "--dir", str(redis_dir)], timeout=60, check=False)
        broker.stop()


def _redis_users(port: int, admin_password: str) -> dict[str, str]:
    """The chart's three Redis users, exactly as redis-acl.conf has them, each with a
    password of its own."""
    import redis

    admin = redis.Redis(port=port, username="admin", password=admin_password)
    passwords = {}
    for line in ACL_FILE.read_text().splitlines():
        if line.startswith("user "):
            _, name, *rules = line.split()
            passwords[name] = "pw" + secrets.token_hex(12)
            admin.execute_command(  # type: ignore[no-untyped-call]
                "ACL", "SETUSER", name, "reset", *rules, f">{passwords[name]}"
            )
    return passwords


def _run(*argv: str, env: dict[str, str], tmp: Path) -> Said:
    base = {
        k: v for k, v in os.environ.items() if not k.startswith(("KAFKA_", "REDIS_", "STREAM_"))
    }
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "stream", *argv],
        env=base
        | {
            "STREAM_APP_ID": f"startup-{secrets.token_hex(3)}",
            "STREAM_STATE_DIR": str(tmp / "state"),
            "STREAM_METRICS_PORT": "0",
            "STREAM_GATEWAY_PORT": "0",
        }
        | env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return Said(done.returncode, done.stdout, done.stderr, time.monotonic() - began)


def _sasl(servers: Servers, password: str | None = None) -> dict[str, str]:
    return {
        "KAFKA_BOOTSTRAP_SERVERS": servers.sasl_ssl,
        "KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
        "KAFKA_SASL_USERNAME": KAFKA_USER,
        "KAFKA_SASL_PASSWORD": password or servers.kafka_password,
        "KAFKA_SSL_CAFILE": str(servers.ca),
    }


def _redis(servers: Servers, user: str) -> dict[str, str]:
    return {
        "REDIS_URL": f"redis://127.0.0.1:{servers.redis_port}/0",
        "REDIS_USERNAME": user,
        "REDIS_PASSWORD": servers.redis_passwords[user],
    }


def _one_line(said: Said, code: int, *parts: str) -> None:
    """Exit ``code`` within FAST seconds, stderr one line holding every part, no trace."""
    assert said.code == code, said.err[-2000:]
    assert said.took < FAST, (said.took, said.err[-2000:])
    lines = said.err.strip().splitlines()
    assert len(lines) == 1, said.err[-2000:]
    for part in parts:
        assert part in lines[0], lines[0]
    assert "Traceback" not in said.err and "Broker transport failure" not in said.err


# The Kafka commands, each with arguments that reach its connection (a dry run where the
# command would write).
KAFKA_COMMANDS = [
    ("worker",),
    ("lag",),
    ("produce", str(REPO / "examples")),
    ("topics",),
]
# replay and republish share lag's and produce's connection path (stream.cli.reach): the
# unit tests cover their wiring; each run here costs about 2 s of a 2-core CI.


@pytest.mark.parametrize("argv", KAFKA_COMMANDS, ids=lambda argv: argv[0])
def test_a_wrong_sasl_password(argv: tuple[str, ...], servers: Servers, tmp_path: Path) -> None:
    wrong = "pw" + secrets.token_hex(12)
    said = _run(*argv, env=_sasl(servers, wrong), tmp=tmp_path)
    _one_line(
        said,
        1,
        f"stream {argv[0]}: cannot use Kafka at {servers.sasl_ssl}",
        "(KAFKA_SASL_USERNAME, KAFKA_SASL_PASSWORD): SASL authentication error",
        "invalid credentials",
    )
    assert wrong not in said.err


@pytest.mark.parametrize("argv", [("worker",), ("lag",)], ids=lambda argv: argv[0])
def test_a_bootstrap_host_that_does_not_resolve(argv: tuple[str, ...], tmp_path: Path) -> None:
    said = _run(*argv, env={"KAFKA_BOOTSTRAP_SERVERS": "kafka.invalid:9092"}, tmp=tmp_path)
    _one_line(
        said,
        1,
        "cannot reach Kafka at kafka.invalid:9092 (KAFKA_BOOTSTRAP_SERVERS): DNS lookup failed",
    )


@pytest.mark.parametrize("argv", [("worker",), ("produce", "examples")], ids=lambda a: a[0])
def test_a_refused_bootstrap_port(argv: tuple[str, ...], tmp_path: Path) -> None:
    (port,) = free_ports(1)
    said = _run(*argv, env={"KAFKA_BOOTSTRAP_SERVERS": f"127.0.0.1:{port}"}, tmp=tmp_path)
    _one_line(
        said,
        1,
        f"cannot reach Kafka at 127.0.0.1:{port} (KAFKA_BOOTSTRAP_SERVERS): connection refused",
    )


def test_a_ca_file_that_did_not_sign_the_brokers_certificate(
    servers: Servers, pki: Pki, tmp_path: Path
) -> None:
    # The server's own certificate as the CA bundle: not a CA, so nothing verifies.
    env = _sasl(servers) | {"KAFKA_SSL_CAFILE": str(pki.server_cert)}
    said = _run("worker", env=env, tmp=tmp_path)
    _one_line(said, 1, "(KAFKA_SSL_CAFILE): TLS handshake failed", "certificate verify failed")


def test_a_missing_acl_names_the_topic_and_the_principal(servers: Servers, tmp_path: Path) -> None:
    """The SCRAM user authenticates but holds no ACL: the worker names the topic it may
    not describe and the principal, and does not blame the address."""
    said = _run("worker", env=_sasl(servers), tmp=tmp_path)
    _one_line(
        said,
        1,
        f"User:{KAFKA_USER} (KAFKA_SASL_USERNAME) may not describe topic",
        "TOPIC_AUTHORIZATION_FAILED",
    )


REDIS_CASES = [
    (("worker",), "refused"),
    (("worker",), "unresolvable"),
    (("serve",), "refused"),
    (("serve",), "unresolvable"),
    (("compare", "examples"), "refused"),
    (("watch", "--seconds", "5"), "unresolvable"),
]


@pytest.mark.parametrize(
    ("argv", "where"), REDIS_CASES, ids=[f"{argv[0]}-{where}" for argv, where in REDIS_CASES]
)
def test_a_wrong_redis_url(
    argv: tuple[str, ...], where: str, servers: Servers, tmp_path: Path
) -> None:
    """The worker exited never (one WARNING, then Faust's Ready) before."""
    if where == "refused":
        (port,) = free_ports(1)
        url, reason = f"redis://127.0.0.1:{port}/0", "connection refused"
    else:
        url, reason = "redis://redis.invalid:6379/0", "DNS lookup failed"
    env = {"KAFKA_BOOTSTRAP_SERVERS": servers.plaintext, "REDIS_URL": url}
    said = _run(*argv, env=env, tmp=tmp_path)
    _one_line(said, 1, f"stream {argv[0]}: cannot reach Redis at {url} (REDIS_URL): {reason}")


@pytest.mark.parametrize("argv", [("worker",), ("serve",)], ids=lambda argv: argv[0])
def test_a_wrong_redis_password(argv: tuple[str, ...], servers: Servers, tmp_path: Path) -> None:
    env = _redis(servers, "context-stream") | {
        "KAFKA_BOOTSTRAP_SERVERS": servers.plaintext,
        "REDIS_PASSWORD": "wrong",
    }
    said = _run(*argv, env=env, tmp=tmp_path)
    # The worker's status for a Redis refusal is 3, as when one stops it running.
    _one_line(
        said,
        3 if argv[0] == "worker" else 1,
        "(REDIS_USERNAME, REDIS_PASSWORD): login refused",
    )


def test_compare_as_the_workers_redis_user_says_which_user_it_needs(
    servers: Servers, tmp_path: Path
) -> None:
    """compare reads (HGETALL): the worker's user may only FCALL and a few writes. One line
    naming the user, the refused command and the user to run it as; with the gateway's
    (read-only) user it runs."""
    said = _run("compare", "examples", env=_redis(servers, "context-stream"), tmp=tmp_path)
    _one_line(
        said,
        1,
        "(REDIS_USERNAME): user 'context-stream' lacks a permission",
        "'hgetall'",
        "it runs as the gateway's Redis user",
    )
    reader = _run(
        "compare", "examples", env=_redis(servers, "context-stream-gateway"), tmp=tmp_path
    )
    assert reader.code == 1 and "not in Redis" in reader.out, reader.err  # nothing published
    assert reader.err == ""


def test_topics_create_as_an_admin_then_check(servers: Servers, tmp_path: Path) -> None:
    """`stream topics --create` through the admin's door makes all six topics with their
    settings; the check then passes; the SCRAM user without ACLs sees none of them."""
    env = {
        "KAFKA_BOOTSTRAP_SERVERS": servers.plaintext,
        "STREAM_APP_ID": "topics-check",
        "STREAM_INPUT_TOPIC": "topics-check.events",
        "STREAM_OUTPUT_TOPIC": "topics-check.context",
        "STREAM_PARTITIONS": "3",
    }
    before = _run("topics", env=env, tmp=tmp_path)
    assert before.code == 1 and "6 difference(s) break the service" in before.err
    created = _run("topics", "--create", env=env, tmp=tmp_path)
    assert created.code == 0, created.err
    assert created.out.count("created ") == 6
    checked = _run("topics", env=env, tmp=tmp_path)
    assert checked.code == 0, checked.out + checked.err
    lines = checked.out.splitlines()
    assert len(lines) == 6 and all(line.startswith("ok ") for line in lines), lines
    assert "topics-check-sessions-changelog (changelog): 3 partition(s)" in checked.out
    assert "cleanup.policy=compact, delete.retention.ms=604800000" in checked.out
    unseen = _run("topics", env=env | _sasl(servers), tmp=tmp_path)
    assert unseen.code == 1 and "Traceback" not in unseen.err


def test_a_silent_redis_is_an_outage_for_a_group_that_has_run(
    servers: Servers, tmp_path: Path
) -> None:
    """Redis is a cache: a worker restarted while Redis is down must still take its
    partitions. Its group has committed offsets, so a refused REDIS_URL is said once and
    ridden out (a first start exits, test_a_wrong_redis_url)."""
    from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined,unused-ignore]

    app = f"ran-{secrets.token_hex(3)}"
    admin = AdminClient({"bootstrap.servers": servers.plaintext, "log_level": 0})
    admin.create_topics([NewTopic(f"{app}.events", 1, 1)])[f"{app}.events"].result()
    committed = ConsumerGroupTopicPartitions(app, [TopicPartition(f"{app}.events", 0, 0)])
    deadline = time.monotonic() + 60
    while True:  # a fresh broker makes __consumer_offsets on the first group request
        try:
            done = admin.alter_consumer_group_offsets([committed], request_timeout=10)[app]
            if not any(tp.error for tp in done.result().topic_partitions or []):
                break  # an error per partition (the topic not known yet) is not raised
        except KafkaException:
            if time.monotonic() > deadline:
                raise
        assert time.monotonic() < deadline, "the group's offset was never committed"
        time.sleep(0.5)
    (port,) = free_ports(1)
    env = os.environ | {
        "KAFKA_BOOTSTRAP_SERVERS": servers.plaintext,
        "REDIS_URL": f"redis://127.0.0.1:{port}/0",
        "STREAM_APP_ID": app,
        "STREAM_INPUT_TOPIC": f"{app}.events",
        "STREAM_STATE_DIR": str(tmp_path / "state"),
        "STREAM_METRICS_PORT": "0",
    }
    # On this fresh broker the committed offset can take a moment to be read back.
    settings = Settings.from_env(env)
    wait_until(lambda: group_has_run(settings), 30, f"group {app} to show its commit")
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        worker = subprocess.Popen(
            [sys.executable, "-m", "stream", "worker"], env=env, cwd=REPO, stdout=out, stderr=out
        )
    try:
        said = "is taken for an outage: consuming on"
        deadline = time.monotonic() + FAST
        while said not in log.read_text(errors="replace") and time.monotonic() < deadline:
            assert worker.poll() is None, log.read_text(errors="replace")[-2000:]
            time.sleep(0.2)
        text = log.read_text(errors="replace")
        assert f"cannot reach Redis at redis://127.0.0.1:{port}/0 (REDIS_URL)" in text, text
        assert said in text and f"group {app} has run before" in text
        time.sleep(3)  # past the probes: Faust is starting, not exiting
        assert worker.poll() is None, log.read_text(errors="replace")[-2000:]
    finally:
        worker.terminate()
        worker.wait(60)
