"""The control topic trusts nothing it did not issue (issue 51, items 2 and 3), through the
real broker, the worker and Redis: a control topic a broker auto-created on a forged first
write keeps the worker from starting, naming the fix; on a proper topic a forged first
record (any generation or epoch) is refused and reported, and never applied, at start-up,
while running and after a restart; a reset naming a generation never claimed for resets
(the deployment's own included) is dead-lettered and changes no session; the operator's
writers go on working after all of it."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, ConfigResource

from stream.config import Settings
from stream.ops.control import Control, ensure_control_topic, read_control_log
from stream.ops.topics import KEEP_HISTORY
from stream.output.headers import DLQ_REASON, RESET_HEADER
from stream.session.batch import Limits as CoreLimits
from stream.session.input import MAX_GENERATION
from stream.testing import events as build
from tests.integration.faults import assert_alive, input_topic, producer_for, say
from tests.integration.harness import REPO, Deployment, Worker, offline_fold, wait_until
from tests.integration.verdict import consumer_lag, dead_letters, pure_fold_of_topic, redis_updates

pytestmark = pytest.mark.integration

FORGED = b'{"generation": 9007199254740991}'  # as the issue produced it


def _write_control(deployment: Deployment, *values: bytes) -> None:
    producer = Producer({"bootstrap.servers": deployment.bootstrap, "log_level": 2})
    for value in values:
        producer.produce(f"{deployment.name}-control", key=b"control", value=value)
    assert producer.flush(30) == 0


def _caught_up(deployment: Deployment, worker: Worker) -> None:
    def done() -> bool:
        assert_alive(worker)
        return all(v == 0 for v in consumer_lag(deployment).values())

    wait_until(done, 60, "every input partition committed to its end", every=0.5)


def _stream(deployment: Deployment, *args: str) -> subprocess.CompletedProcess[bytes]:
    """A `stream` command as the operator runs it, whatever its exit status."""
    return subprocess.run(
        [sys.executable, "-m", "stream", *args],
        env=deployment.env(STREAM_STATE_DIR=str(deployment.workdir / "state")),
        cwd=REPO,
        capture_output=True,
        timeout=120,
    )


def _readyz(worker: Worker) -> str:
    return worker.page("/readyz")[1].decode(errors="replace")


def _generations(deployment: Deployment, sessions: list[str]) -> set[bytes]:
    client = deployment.redis()
    return {client.hget(f"{deployment.prefix}session:{s}", "gen") for s in sessions}


def test_an_auto_created_control_topic_keeps_the_worker_from_starting(
    deployment: Deployment, kafka_admin: AdminClient
) -> None:
    """The issue's way in: the first write to a control topic that did not exist, which the
    broker (auto.create.topics.enable) created with its defaults (delete, one partition)."""
    started = time.monotonic()
    topic = f"{deployment.name}-control"
    _write_control(deployment, FORGED)
    run = _stream(deployment, "worker")
    said = run.stderr.decode(errors="replace")
    assert run.returncode == 1, said[-3000:]
    assert f"{topic} is not a control topic a worker can trust: cleanup.policy=delete" in said
    assert "`stream topics --create`" in said
    assert not (deployment.workdir / "state" / "generation").exists()  # nothing taken
    # The operator's writers refuse to write a step into it too: one line, no traceback.
    log = deployment.workdir / "empty.jsonl"
    log.write_bytes(b'{"type": "session", "id": "s"}\n')
    refused = _stream(deployment, "produce", "--reset", str(log))
    assert refused.returncode == 2, refused.stderr
    assert b"configuration error: " + topic.encode() + b" is not a control topic" in refused.stderr
    assert b"Traceback" not in refused.stderr

    # The fix the message names: delete it, and create it again as its spec says.
    kafka_admin.delete_topics([topic], operation_timeout=30)[topic].result()
    wait_until(
        lambda: topic not in kafka_admin.list_topics(timeout=10).topics, 30, f"{topic} deleted"
    )
    created = _stream(deployment, "topics", "--create")
    assert f"created {topic}".encode() in created.stdout, created
    metadata = kafka_admin.list_topics(timeout=10).topics[topic]
    resource = ConfigResource("topic", topic)
    configs = kafka_admin.describe_configs([resource])[resource].result()
    assert len(metadata.partitions) == 1
    assert configs["cleanup.policy"].value == "compact"
    assert configs["min.compaction.lag.ms"].value == KEEP_HISTORY
    worker = deployment.start_worker("fixed")
    wait_until(lambda: worker.probe("/readyz") == 200, 60, "the worker ready")
    samples = worker.metrics()
    assert samples["stream_generation"] == 1 and samples["stream_control_record_problem"] == 0
    # And the operator's first step on it is one.
    assert _stream(deployment, "produce", "--reset", str(log)).returncode == 0
    found = read_control_log(Settings.from_env(deployment.env()))
    assert found.problems == () and found.control.same_point(Control(2, 0, resets=((2, 2),)))
    say(
        "auto-created control topic: refused, fixed and running in"
        f" {time.monotonic() - started:.1f} s"
    )


@pytest.mark.deployment_options(partitions=2, extra_env={"STREAM_RESETS": "1"})
def test_forged_control_records_and_unclaimed_resets_change_no_session(
    deployment: Deployment, kafka_admin: AdminClient, tmp_path: Path
) -> None:
    """Forged first records (the issue's 2^53 - 1, and the next generation with a forged
    epoch) on a proper control topic; resets naming the deployment's own generation (1),
    the forged one and the next (2, not claimed); a forged jump while the worker runs; a
    restart. Every session equals the fold with no reset taken, publishes at generation 1,
    and each refusal is visible; then `stream produce --reset` claims 2 and repairs."""
    started = time.monotonic()
    settings = Settings.from_env(deployment.env())
    ensure_control_topic(settings, kafka_admin)
    _write_control(deployment, FORGED, Control(2, MAX_GENERATION).encode())
    worker = deployment.start_worker("trust")
    log = worker.log()
    assert "offset 0: refused, it moves generation 1 -> 9007199254740991" in log, log[-3000:]
    assert "offset 1: refused, it moves generation 1 -> 2, epoch 0 -> 9007199254740991" in log
    wait_until(lambda: worker.metrics().get("stream_control_record_problem") == 1, 30, "metric")
    assert worker.metrics()["stream_generation"] == 1
    assert "control record: offset 0: refused" in _readyz(worker)

    # Sessions, each with a reset mid-way: the base generation, the forged one, the next.
    named = {"base": 1, "forged": MAX_GENERATION, "next": 2}
    logs = {
        s: [build.user_message(seq, build.texts(f"{s} {seq}"), time=seq) for seq in range(4)]
        for s in named
    }
    producer = producer_for(deployment)
    topic = input_topic(deployment)
    for session, generation in named.items():
        for event in logs[session][:2]:
            producer.produce(topic, key=session.encode(), value=orjson.dumps(event))
        reset = [(RESET_HEADER, str(generation).encode())]
        producer.produce(topic, key=session.encode(), value=b"", headers=reset)
        for event in logs[session][2:]:
            producer.produce(topic, key=session.encode(), value=orjson.dumps(event))
    assert producer.flush(30) == 0
    _caught_up(deployment, worker)
    sessions = sorted(named)
    model = pure_fold_of_topic(deployment, CoreLimits(reset_generations=()))
    assert model.resets == 0
    wait_until(lambda: deployment.stats() == model.totals, 30, f"redis totals {model.totals}")
    assert redis_updates(deployment, sessions) == model.updates
    for session in sessions:
        update = model.updates[session]
        assert update["seq"] == 3 and "faults" not in update, update  # not wiped
    assert _generations(deployment, sessions) == {b"1"}
    reasons = sorted(
        bytes(dict(letter.headers() or [])[DLQ_REASON]).decode()
        for letter in dead_letters(deployment)
    )
    assert len(reasons) == 3
    assert all(
        "never claimed for resets on the control topic (claimed: none;" in r for r in reasons
    )
    assert worker.metrics().get('stream_resets_total{applied="yes"}', 0) == 0

    # While running: a forged jump, seen when a reset naming an unclaimed generation makes
    # the worker read the topic again (and by the re-read every 30 s).
    _write_control(deployment, Control(3, 0).encode())
    producer.produce(topic, key=b"base", value=b"", headers=[(RESET_HEADER, b"3")])
    assert producer.flush(30) == 0
    wait_until(lambda: "offset 2: refused" in _readyz(worker), 30, "the jump refused")

    # After a restart nothing forged is in force either (the 2^53 - 1 republish).
    assert worker.terminate() == 0
    worker.restart()
    wait_until(lambda: "offset 2: refused" in _readyz(worker), 30, "the refusals reported")
    assert worker.metrics()["stream_generation"] == 1
    assert not (worker.deployment.workdir / f"state-{worker.worker_id}" / "generation").exists()
    assert _generations(deployment, sessions) == {b"1"}

    # The operator's repair still works: its claim is the deployment's first step.
    path = tmp_path / "next.jsonl"
    lines = [orjson.dumps({"type": "session", "id": "next"}), *map(orjson.dumps, logs["next"])]
    path.write_bytes(b"\n".join(lines) + b"\n")
    claimed = deployment.stream("produce", "--reset", str(path))
    assert b"resetting sessions under generation 2" in claimed.stderr
    _caught_up(deployment, worker)
    wait_until(lambda: worker.probe("/readyz") == 200, 30, "the problems superseded")
    assert _generations(deployment, ["next"]) == {b"2"}
    assert redis_updates(deployment, ["next"])["next"] == offline_fold([path])["next"]
    assert worker.metrics()['stream_resets_total{applied="yes"}'] == 1
    say(
        f"forged control records and unclaimed resets: refused, no session changed, repaired"
        f" in {time.monotonic() - started:.1f} s"
    )
