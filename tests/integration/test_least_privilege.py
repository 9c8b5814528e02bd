"""The worker on least privilege: a Kafka 4.4 broker run as managed clusters are (the
StandardAuthorizer with ``allow.everyone.if.no.acl.found=false``, auto-creation off,
SASL_SSL/SCRAM; deploy/kafka.sh ``--authorizer --no-auto-create``), every topic created
by an admin (``stream topics --create``), a control record already written by the operator
(``stream replay --new-generation``), and the worker's principal
granted exactly the ACLs docs/deploy.md lists ("Kafka ACLs", read from the page, so the
page cannot drift from what is proven): no CREATE, ALTER or DELETE anywhere.

The worker folds unseen generated sessions exactly (the fault suite's verifier), then
starts again on an empty state directory, restores its table from the changelog under the
same ACLs and folds the rest of the same sessions exactly. The test's own clients (the
admin, the producer of the input, the verifier's readers) use the PLAINTEXT listener,
whose ANONYMOUS principal is the broker's super user; only the worker is locked down.
"""

from __future__ import annotations

import random
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (  # type: ignore[attr-defined,unused-ignore]
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from tests.integration.broker import Broker
from tests.integration.faults import (
    Ledger,
    input_topic,
    produce_now,
    say,
    session_traffic,
    wipe_state,
)
from tests.integration.harness import REPO, free_ports, wait_until
from tests.integration.pki import Pki, make_pki
from tests.integration.test_security import KAFKA_USER, SecureDeployment, _secret
from tests.integration.verdict import verify

pytestmark = pytest.mark.integration

KAFKA_VERSION: Final = "4.4.0"
PRINCIPAL: Final = f"User:{KAFKA_USER}"
PARTITIONS: Final = 2


@dataclass(frozen=True)
class LockedKafka:
    admin: str  # PLAINTEXT: ANONYMOUS, the super user
    sasl_ssl: str  # the worker's listener: SCRAM, ACLs enforced
    password: str


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def locked_kafka(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LockedKafka]:
    port, controller, sasl_port = free_ports(3)
    password = _secret()
    broker = Broker(
        tmp_path_factory.mktemp("kafka-locked"),
        port,
        controller,
        options=(
            *("--sasl-ssl-port", str(sasl_port), "--scram-user", KAFKA_USER),
            *("--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key)),
            *("--tls-ca", str(pki.ca), "--authorizer", "--no-auto-create"),
        ),
        env={"KAFKA_SCRAM_PASSWORD": password, "KAFKA_VERSION": KAFKA_VERSION},
    )
    admin = broker.start()
    try:
        yield LockedKafka(admin, f"127.0.0.1:{sasl_port}", password)
    finally:
        broker.stop()


# --------------------------------------------------------------------------- the ACLs


ROW = re.compile(r"^\| (topic|group) \| (\w[\w ]*?) \(.*\) \| (.+) \|$")


def documented_acls(deployment: SecureDeployment) -> list[AclBinding]:
    """docs/deploy.md's "Kafka ACLs" table, for this deployment's topics and group."""
    page = (REPO / "docs" / "deploy.md").read_text()
    section = page.split("### Kafka ACLs", 1)[1].split("\n#", 1)[0]
    app = deployment.name
    names = {
        ("topic", "input"): input_topic(deployment),
        ("topic", "output"): f"{app}.context",
        ("topic", "dead letters"): f"{app}.dlq",
        ("topic", "changelog"): f"{app}-sessions-changelog",
        ("topic", "leader"): f"{app}-__assignor-__leader",
        ("topic", "control"): f"{app}-control",
        ("group", "workers"): app,
    }
    kinds = {"topic": ResourceType.TOPIC, "group": ResourceType.GROUP}
    bindings = []
    for line in section.splitlines():
        row = ROW.match(line)
        if row is None:
            continue
        kind, which, operations = row.groups()
        for operation in re.findall(r"`([A-Z_]+)`", operations):
            bindings.append(
                AclBinding(
                    kinds[kind],
                    names[(kind, which)],
                    ResourcePatternType.LITERAL,
                    PRINCIPAL,
                    "*",
                    AclOperation[operation],
                    AclPermissionType.ALLOW,
                )
            )
    assert {(b.restype, b.name) for b in bindings} == {
        (kinds[kind], name) for (kind, _), name in names.items()
    }, "the page's table names every topic and the group"
    return bindings


def grant(admin: AdminClient, bindings: list[AclBinding], prefix: str) -> None:
    for future in admin.create_acls(bindings, request_timeout=30).values():
        future.result()
    # The page's list and nothing more: the principal holds exactly these.
    everything = AclBindingFilter(
        ResourceType.ANY,
        None,  # type: ignore[arg-type]  # None: any name, any host
        ResourcePatternType.ANY,
        PRINCIPAL,
        None,  # type: ignore[arg-type]
        AclOperation.ANY,
        AclPermissionType.ANY,
    )

    def held() -> list[AclBinding]:
        return list(admin.describe_acls(everything, request_timeout=30).result())

    mine = sorted(map(str, bindings))
    # A new ACL reaches the broker's metadata a moment after the controller took it.
    wait_until(
        lambda: sorted(str(b) for b in held() if b.name.startswith(prefix)) == mine,
        30,
        "the principal to hold exactly the page's ACLs on this deployment",
    )
    forbidden = {AclOperation.CREATE, AclOperation.ALTER, AclOperation.DELETE, AclOperation.ALL}
    assert not [b for b in held() if b.operation in forbidden]


def group_coordinator_ready(admin: AdminClient, group: str) -> bool:
    try:
        admin.describe_consumer_groups([group], request_timeout=5)[group].result()
    except KafkaException:
        return False
    return True


# --------------------------------------------------------------------------- the scenarios


@pytest.fixture
def locked(
    locked_kafka: LockedKafka, pki: Pki, redis_url: str, tmp_path: Path
) -> Iterator[tuple[SecureDeployment, AdminClient]]:
    """A deployment whose workers are the SCRAM principal, every topic made by the admin
    (``stream topics --create``, docs/deploy.md "Quick start") and a control record written
    by the operator (``stream replay --new-generation``), both over the admin's listener;
    no ACL granted yet. The test's own readers and producer use the admin's listener."""
    deployment = SecureDeployment(
        locked_kafka.sasl_ssl,
        redis_url,
        tmp_path,
        partitions=PARTITIONS,
        extra_env={
            "KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
            "KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
            "KAFKA_SASL_USERNAME": KAFKA_USER,
            "KAFKA_SASL_PASSWORD": locked_kafka.password,
            "KAFKA_SSL_CAFILE": str(pki.ca),
        },
        client_conf={"bootstrap.servers": locked_kafka.admin},
    )
    admin = AdminClient({"bootstrap.servers": locked_kafka.admin, "log_level": 2})
    as_admin = deployment.env(
        KAFKA_BOOTSTRAP_SERVERS=locked_kafka.admin, KAFKA_SECURITY_PROTOCOL="PLAINTEXT"
    )
    # A fresh broker answers group requests once its coordinator has loaded; `stream
    # replay` fails rather than waits.
    wait_until(lambda: group_coordinator_ready(admin, deployment.name), 60, "the coordinator")

    def admin_runs(*command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "stream", *command],
            env=as_admin,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )

    created = admin_runs("topics", "--create")
    # Its own check right after creating may not see them yet (KRaft metadata settles a
    # moment later: the report); the check alone must pass once it does.
    wait_until(lambda: admin_runs("topics").returncode == 0, 60, f"the topics: {created}")
    done = admin_runs("replay", "--new-generation")
    assert done.returncode == 0, done.stderr[-2000:]
    yield deployment, admin
    deployment.stop_all()


def test_the_worker_folds_restores_and_reads_control_on_the_documented_acls(
    locked: tuple[SecureDeployment, AdminClient], tmp_path: Path
) -> None:
    began = time.monotonic()
    deployment, admin = locked
    grant(admin, documented_acls(deployment), deployment.name)

    ledger = Ledger(input_topic(deployment))
    traffic = session_traffic(random.Random(2650), "acl", 12, (40, 120), garbage_rate=0.05)
    half = len(traffic) // 2
    worker = deployment.start_worker("acl")
    produce_now(deployment, ledger, traffic[:half])
    first = verify(deployment, ledger, tmp_path)
    say(f"least privilege, first half: {first.line()}")

    # On an empty state directory the table comes back from the changelog, read under the
    # same ACLs; the rest of the same sessions folds on top of it.
    assert worker.terminate() == 0, worker.log()[-3000:]
    wipe_state(worker)
    worker.restart()
    produce_now(deployment, ledger, traffic[half:])
    second = verify(deployment, ledger, tmp_path)
    say(f"least privilege, after the restore: {second.line()}")

    log = worker.log()
    restarted = log.rsplit("[^---Recovery]: Starting...", 1)[1]
    assert "Restoring state from changelog topics" in restarted, restarted[-3000:]
    assert "Cannot create topic" not in log and "AUTHORIZATION_FAILED" not in log
    say(f"least privilege: {time.monotonic() - began:.1f} s")


def test_a_missing_topic_it_may_not_create_is_one_line_naming_it(
    locked: tuple[SecureDeployment, AdminClient],
) -> None:
    """Faust's leader topic deleted by the admin: the worker, holding the documented ACLs
    and no CREATE, exits 1 at start with one line naming the topic and what would fix it."""
    deployment, admin = locked
    leader = f"{deployment.name}-__assignor-__leader"
    admin.delete_topics([leader], request_timeout=30)[leader].result()
    wait_until(lambda: leader not in admin.list_topics(timeout=10).topics, 30, "the deletion")
    grant(admin, documented_acls(deployment), deployment.name)

    began = time.monotonic()
    with pytest.raises(AssertionError, match="exited early"):
        deployment.start_worker("nolead")
    worker = deployment.workers[-1]
    assert worker.process is not None
    code = worker.process.wait(30)
    seconds = time.monotonic() - began
    lines = worker.log().strip().splitlines()
    assert code == 1, lines[-20:]
    last = lines[-1]
    assert last.startswith("stream worker: cannot start:"), lines[-20:]
    assert f"topic {leader} is missing" in last and "TOPIC_AUTHORIZATION_FAILED" in last
    assert "have an admin create it (1 partition, replication 1)" in last, last
    say(f"least privilege, a missing leader topic: exit {code} in {seconds:.1f} s: {last}")
