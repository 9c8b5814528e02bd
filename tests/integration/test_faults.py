"""Never stall, never lose: the worker under injected faults, against real Kafka, RocksDB
and redis-server.

Every scenario produces traffic through a ``Ledger`` (what was produced, and what the
contract makes of it), injects its faults while producing, and ends with the one
verifier, ``verdict.verify``: the offline fold of what was produced equals Redis and the
output topic for every session; the totals add up to exactly the events produced (each
unreadable message or segment element counting 1) and by outcome equal the offline
fold's; the dead-letter topic holds exactly the unreadable parts produced; and every
input partition's lag reaches 0. Scenario figures are printed (run with ``-s``) and
quoted in docs/reliability.md. ``SOAK=1`` (``make soak``) scales them up.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest

from stream.config import Settings
from stream.contract.jsontext import MAX_DEPTH
from stream.ops.admin import ensure_topics
from stream.output.headers import RESET_HEADER
from stream.session.batch import Limits as CoreLimits
from stream.session.input import MAX_GENERATION
from stream.testing import events as build
from tests.generators.extreme import MAX_SAFE, extreme_messages
from tests.generators.sessions import RawNumber
from tests.integration.broker import Broker
from tests.integration.faults import (
    DEFAULT_LIMITS,
    Feeder,
    Ledger,
    Limits,
    Outage,
    Part,
    alive,
    assert_alive,
    assigned,
    garbage,
    input_topic,
    produce,
    produce_in_steps,
    produce_now,
    producer_for,
    say,
    scaled,
    segment,
    session_traffic,
    single,
    text_of,
    ticks,
    wait_assignment,
    wipe_state,
)
from tests.integration.harness import Deployment, RedisServer, Worker, offline_fold, wait_until
from tests.integration.hostile import deep_array, hostile_traffic, nested_part, user_message
from tests.integration.takeover import changelog_restored, probe_sessions, takeover_seconds
from tests.integration.verdict import (
    Verdict,
    consumer_lag,
    dead_letters,
    end_offsets,
    latest_output,
    peak_rss,
    pure_fold_of_topic,
    redis_updates,
    verify,
    wait_committed,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def deployments(tmp_path: Path) -> Iterator[list[Deployment]]:
    """Deployments a test creates; their workers are killed at the end, whatever happens."""
    created: list[Deployment] = []
    yield created
    for deployment in created:
        deployment.stop_all()


def _deployment(
    created: list[Deployment],
    bootstrap: str,
    redis_url: str,
    workdir: Path,
    partitions: int,
    **env: str,
) -> Deployment:
    workdir.mkdir(parents=True, exist_ok=True)
    deployment = Deployment(bootstrap, redis_url, workdir, partitions=partitions, extra_env=env)
    created.append(deployment)
    return deployment


def _ready(worker: Worker) -> Callable[[], bool]:
    return lambda: worker.probe("/readyz") == 200


def _leave(worker: Worker) -> None:
    """SIGTERM, and it must be a graceful leave: exit status 0, not -15."""
    code = worker.terminate(timeout=120)
    assert code == 0, f"{worker.worker_id} exited {code}:\n{worker.log()[-3000:]}"


# --------------------------------------------------------------------------- crashes


def test_repeated_sigkill_while_producing(
    kafka_bootstrap: str, redis_url: str, tmp_path: Path, deployments: list[Deployment]
) -> None:
    """SIGKILL the worker again and again while producing, with offsets committed every
    0.5 s; restarts alternate between its own state directory and an empty one (rows
    rebuilt from the changelog). Nothing lost, nothing counted twice. (Regression: records
    queued while a restarted worker's recovery resumed the flow were dropped and committed
    unfolded, until 9c5ab74; 5 of 9 runs of 14 kills lost events.)"""
    kills = scaled(7, 40)
    rng = random.Random(101)
    deployment = _deployment(
        deployments,
        kafka_bootstrap,
        redis_url,
        tmp_path,
        4,
        STREAM_COMMIT_INTERVAL="0.5",
        STREAM_SESSION_TIMEOUT="6",  # the broker's minimum: the dead member leaves soonest
    )
    ledger = Ledger(input_topic(deployment))
    messages = session_traffic(rng, "kill", scaled(40, 400), (60, 220), garbage_rate=0.02)
    worker = deployment.start_worker("k")
    feeder = Feeder(deployment, ledger, messages, seconds=kills * 6)
    feeder.start()
    started = time.monotonic()
    try:
        for n in range(kills):
            # Early kills land in recovery and the re-seed, later ones mid-batch.
            time.sleep(rng.choice([0.1, 0.3, 0.6, 1.0, 2.0, 3.5]))
            assert_alive(worker)
            worker.kill()
            if n % 2:
                wipe_state(worker)
            worker.restart()
        feeder.finish()
        verdict = verify(deployment, ledger, tmp_path)
    finally:
        feeder.stopping.set()
    say(
        f"sigkill: {kills} kills ({kills // 2} onto an empty state dir) in"
        f" {time.monotonic() - started:.0f} s; {verdict.line()}"
    )


# --------------------------------------------------------------------------- the broker


@dataclass
class Bounced:
    verdict: Verdict
    downs: list[float]
    outages: list[Outage]
    worker: Worker  # still running while the class's tests read it


@pytest.fixture(scope="class")
def bounced(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bounced]:
    """The broker (dedicated, on a fixed port below the ephemeral range) stopped and
    started again with the same data, twice, while producing and committing every 0.5 s;
    run once for the two tests of ``TestBrokerBounce`` and stopped right after them."""
    bounces = scaled(2, 8)
    rng = random.Random(202)
    tmp_path = tmp_path_factory.mktemp("bounce")
    broker = Broker.on_fixed_port(tmp_path / "kafka")
    bootstrap = broker.start()
    deployment = Deployment(
        bootstrap,
        redis_url,
        tmp_path,
        partitions=4,
        extra_env={"STREAM_COMMIT_INTERVAL": "0.5"},
    )
    try:
        ledger = Ledger(input_topic(deployment))
        messages = session_traffic(rng, "bounce", scaled(40, 300), (60, 220))
        worker = deployment.start_worker("b")
        feeder = Feeder(deployment, ledger, messages, seconds=scaled(30, 400))
        feeder.start()
        outages = []
        try:
            wait_committed(deployment)
            for n in range(bounces):
                time.sleep(rng.uniform(3, 6))
                # A burst past the worker's queue (4,096 events), so it is still folding
                # and publishing when the broker goes (the controlled shutdown takes ~2 s).
                keys = [f"burst-{n}-{k}".encode() for k in range(12)]
                produce_now(deployment, ledger, [m for k in keys for m in ticks(k, 0, 500)])
                outage = broker.bounce(down=scaled(5.0, 25.0), watch=worker)
                assert outage is not None
                outages.append(outage)
                assert_alive(worker)
            feeder.finish()
            verdict = verify(deployment, ledger, tmp_path)
        finally:
            feeder.stopping.set()
        assert_alive(worker)
        yield Bounced(verdict, broker.bounces, outages, worker)
    finally:
        deployment.stop_all()
        broker.stop()


class TestBrokerBounce:
    """One broker run (``bounced``) read by both tests."""

    def test_broker_stopped_and_started_again_mid_stream(self, bounced: Bounced) -> None:
        """The worker rides out both outages, stays in its group and loses nothing."""
        downs = ", ".join(f"{s:.1f}" for s in bounced.downs)
        say(f"broker bounce: {len(bounced.downs)} bounces (down {downs} s)")
        say(f"  {bounced.verdict.line()}")
        for outage in bounced.outages:
            say(f"  the worker while the broker was down {outage.line()}")
        # Every bounce happened, each a real outage (stopped at least its `down` seconds).
        bounces = scaled(2, 8)
        assert len(bounced.downs) == len(bounced.outages) == bounces, bounced.downs
        assert all(o.seconds >= scaled(5.0, 25.0) for o in bounced.outages), downs
        # Loses nothing: the fixture's verify() found the fold exact; here, that it covered
        # the bursts produced just before each stop (12 sessions x 500 events each).
        assert bounced.verdict.events >= bounces * 6000, bounced.verdict.line()
        # Stays up and in its group: one process, its first assignment the only one, and
        # it still owns every partition (a worker that fell out would have rebalanced).
        worker = bounced.worker
        assert_alive(worker)
        assert worker.starts == 1
        rebalances = worker.metrics().get("stream_rebalances_total")
        assert rebalances == 1, f"{rebalances} rebalances"
        assert assigned(worker) == [0, 1, 2, 3], worker.page("/readyz")

    def test_a_broker_outage_does_not_spin_the_worker(self, bounced: Bounced) -> None:
        """While the broker is down, the worker waits: under half a core and under 500 log
        lines a second (a healthy client backs off between attempts)."""
        worst = max(bounced.outages, key=lambda o: o.cores)
        assert worst.cores < 0.5, worst.line()
        noisiest = max(bounced.outages, key=lambda o: o.lines_per_second)
        assert noisiest.lines_per_second < 500, noisiest.line()


# --------------------------------------------------------------------------- the group


def test_rebalance_storm_more_workers_than_partitions(
    kafka_bootstrap: str, redis_url: str, tmp_path: Path, deployments: list[Deployment]
) -> None:
    """Three workers on two partitions joining and leaving (SIGTERM: each leave must be
    graceful, exit 0) while producing; some rejoin on an empty state directory."""
    rounds = scaled(3, 24)
    rng = random.Random(303)
    deployment = _deployment(
        deployments, kafka_bootstrap, redis_url, tmp_path, 2, STREAM_COMMIT_INTERVAL="0.5"
    )
    ledger = Ledger(input_topic(deployment))
    messages = session_traffic(rng, "storm", scaled(30, 200), (60, 200), garbage_rate=0.02)
    first = deployment.start_worker("a")
    feeder = Feeder(deployment, ledger, messages, seconds=rounds * 9)
    feeder.start()
    started = time.monotonic()
    leaves = 0
    try:
        wait_committed(deployment)
        workers = [first, deployment.start_worker("b"), deployment.start_worker("c")]
        for n in range(rounds):
            time.sleep(rng.uniform(0.5, 3))
            live = [w for w in workers if alive(w)]
            # Mostly one leaves and rejoins; every third round two leave, then both rejoin.
            leaving = rng.sample(live, 2 if n % 3 == 2 and len(live) == 3 else 1)
            for worker in leaving:
                _leave(worker)
                leaves += 1
                if rng.random() < 0.3:
                    wipe_state(worker)
            for worker in leaving:
                worker.restart()
        feeder.finish()
        verdict = verify(deployment, ledger, tmp_path)
        wait_assignment(workers, 2)
        for worker in workers:
            _leave(worker)
            leaves += 1
    finally:
        feeder.stopping.set()
    say(
        f"rebalance storm: {leaves} graceful leaves and {leaves - 3} rejoins of 3 workers on"
        f" 2 partitions in {time.monotonic() - started:.0f} s; {verdict.line()}"
    )


def test_standby_replica_takes_over_warm(
    kafka_bootstrap: str, redis_url: str, tmp_path: Path, deployments: list[Deployment]
) -> None:
    """Two workers, each active for one partition; SIGKILL one and time until the other
    publishes an update of the dead one's sessions: with a standby replica
    (STREAM_STANDBY_REPLICAS=1) the survivor's copy of the partition is current and it
    reads nothing from the changelog; without, it restores the whole partition. Both
    stay exact; the figures are printed. The session timeout (6 s, the broker's minimum)
    is how long the group takes to notice the death, in both."""
    sessions = scaled(2000, 40000)
    seconds: dict[int, float] = {}
    restored: dict[int, int] = {}
    for standby in (1, 0):
        rng = random.Random(404)
        deployment = _deployment(
            deployments,
            kafka_bootstrap,
            redis_url,
            tmp_path / f"standby-{standby}",
            2,
            STREAM_STANDBY_REPLICAS=str(standby),
            STREAM_SESSION_TIMEOUT="6",
        )
        ledger = Ledger(input_topic(deployment))
        a = deployment.start_worker("a")
        b = deployment.start_worker("b")
        wait_assignment([a, b], 2)
        probes = probe_sessions(deployment, ledger, 2)
        # Many small sessions, one event per message: a long changelog to restore.
        load = session_traffic(rng, "load", sessions, (3, 7), segment_max=1, garbage_rate=0.0)
        produce_in_steps(deployment, ledger, load)
        # Every input record committed: the active side has written all its changelog rows.
        _caught_up(deployment, a, "the load committed to its end")
        # The standby follows that changelog as it is written; its position has no outside
        # view (no group, no metric: Faust's standby highwaters are the rebalance's), so a
        # short settle lets it read the last rows. Only the printed figure depends on it.
        time.sleep(2)
        victim, survivor = (a, b) if assigned(a) else (b, a)
        taken = assigned(victim)
        wait_committed(deployment)
        seconds[standby] = takeover_seconds(deployment, ledger, victim, probes)
        verdict = verify(deployment, ledger, deployment.workdir)
        reads = changelog_restored(survivor)
        restored[standby] = sum(reads.get(p, 0) for p in taken)
        say(
            f"standby={standby}: first update {seconds[standby]:.1f} s after SIGKILL,"
            f" {restored[standby]} changelog records restored first; {verdict.line()}"
        )
        deployment.stop_all()
    say(
        f"takeover after SIGKILL (session timeout 6 s): {seconds[1]:.1f} s with a standby"
        f" replica ({restored[1]} records to restore), {seconds[0]:.1f} s without"
        f" ({restored[0]} records)"
    )
    assert restored[1] == 0, "the standby was not warm"
    assert restored[0] > 0, "without a standby the partition must be restored"


# --------------------------------------------------------------------------- Redis


def test_redis_outage_past_max_poll_interval_with_a_rebalance(
    kafka_bootstrap: str, tmp_path: Path, deployments: list[Deployment]
) -> None:
    """Redis down for longer than the max poll interval while producing, and a second
    worker joins during the outage (a rebalance with Redis unreachable); Redis comes back
    empty. Consumption never stops, nobody leaves the group, and Redis ends exact."""
    rng = random.Random(505)
    server = RedisServer(tmp_path / "redis")
    server.start()
    try:
        env = {
            "STREAM_MAX_POLL_INTERVAL": "5",
            "STREAM_REDIS_CHECK_INTERVAL": "1",
            "STREAM_COMMIT_INTERVAL": "0.5",
        }
        deployment = _deployment(deployments, kafka_bootstrap, server.url, tmp_path, 4, **env)
        ledger = Ledger(input_topic(deployment))
        messages = session_traffic(rng, "outage", scaled(40, 300), (60, 220), garbage_rate=0.02)
        first = deployment.start_worker("r")
        outage = scaled(14.0, 90.0)
        feeder = Feeder(deployment, ledger, messages, seconds=outage + 10)
        feeder.start()
        try:
            wait_committed(deployment)
            server.stop()
            down = time.monotonic()
            wait_until(lambda: first.probe("/readyz") == 503, 30, "readiness to drop")
            time.sleep(6)  # past the 5 s max poll interval
            second = deployment.start_worker("r")  # joins while Redis is down
            wait_assignment([first, second], 4)
            assert first.metrics()["stream_redis_retrying"] == 1
            while time.monotonic() - down < outage:  # both keep running all along
                assert_alive(first)
                assert_alive(second)
                time.sleep(1)
            server.start()  # empty: the workers re-seed it
            up = time.monotonic()
            feeder.finish()
            verdict = verify(deployment, ledger, tmp_path)
        finally:
            feeder.stopping.set()
        for worker in (first, second):
            assert_alive(worker)
            wait_until(_ready(worker), 60, "readiness to return")
            assert "leaving group" not in worker.log().lower()
        say(f"redis outage: down {up - down:.1f} s, a worker joined meanwhile; {verdict.line()}")
    finally:
        for deployment in deployments:
            deployment.stop_all()
        server.stop()


def test_a_long_redis_outage_with_a_rebalance_crashes_no_worker(
    kafka_bootstrap: str, tmp_path: Path, deployments: list[Deployment]
) -> None:
    """A worker joins while Redis is down, and Redis stays down longer than the re-seed's
    60 s wait: both workers keep consuming, and Redis comes back exact.
    (Regression: the re-seed's marker write once crashed such a worker 60 s in, exit 1.)
    """
    rng = random.Random(515)
    server = RedisServer(tmp_path / "redis")
    server.start()
    try:
        deployment = _deployment(
            deployments, kafka_bootstrap, server.url, tmp_path, 4, STREAM_REDIS_CHECK_INTERVAL="1"
        )
        ledger = Ledger(input_topic(deployment))
        first = deployment.start_worker("l")
        produce_now(deployment, ledger, session_traffic(rng, "long", 10, (20, 80)))
        wait_committed(deployment)
        server.stop()
        down = time.monotonic()
        second = deployment.start_worker("l")  # assigned partitions with Redis down
        produce_now(deployment, ledger, session_traffic(rng, "later", 10, (20, 80)))
        while time.monotonic() - down < 70:
            assert_alive(first)
            assert_alive(second)
            time.sleep(1)
        server.start()
        verify(deployment, ledger, tmp_path)
    finally:
        for deployment in deployments:
            deployment.stop_all()
        server.stop()


# --------------------------------------------------------------------------- hostile input


HOSTILE_LIMITS = Limits(message_bytes=65_536, key_bytes=200, segment_events=64)


def test_thousands_of_hostile_cases_in_good_traffic(
    kafka_bootstrap: str, redis_url: str, tmp_path: Path, deployments: list[Deployment]
) -> None:
    """Lone surrogates, 1,000-deep arrays, huge numbers and strings, wrong types
    everywhere, reordering, duplicates, gaps, mismatched claims, messages and segments
    past the limits (set low), oversized, non-UTF-8 and missing keys, empty segments,
    mixed into generated sessions: no partition stalls, the clean sessions come out
    exact, and every event is accounted for."""
    cases = scaled(3000, 30000)
    deployment = _deployment(
        deployments, kafka_bootstrap, redis_url, tmp_path, 4, **HOSTILE_LIMITS.env()
    )
    traffic = hostile_traffic(random.Random(606), "h", cases, HOSTILE_LIMITS)
    ledger = Ledger(input_topic(deployment))
    deployment.start_worker("h")
    started = time.monotonic()
    produce_in_steps(deployment, ledger, traffic.messages)
    verdict = verify(deployment, ledger, tmp_path, clean=traffic.clean)
    kinds = ", ".join(f"{k} {v}" for k, v in sorted(ledger.tags.items()))
    say(
        f"hostile: {traffic.cases} cases, {len(traffic.clean)} clean sessions exact,"
        f" in {time.monotonic() - started:.0f} s; messages by kind: {kinds}; {verdict.line()}"
    )


def test_a_segment_reads_its_events_as_they_read_alone(
    kafka_bootstrap: str, redis_url: str, tmp_path: Path, deployments: list[Deployment]
) -> None:
    """The same event, alone or in a segment with an escaped lone surrogate, folds the
    same (contract: errors are deterministic)."""
    deployment = _deployment(deployments, kafka_bootstrap, redis_url, tmp_path, 1)
    ledger = Ledger(input_topic(deployment))
    deployment.start_worker("seg")
    huge = RawNumber("123456789012345678901234567890")
    block = {"type": "mystery", "n": huge}  # priced: JSON.stringify prints the double
    messages = []
    for n, key in enumerate((b"alone", b"with-a-surrogate")):
        parts = [
            Part(text_of(user_message(0, [block]))),
            Part(text_of(user_message(1, [{"type": "text", "text": "ok"}]))),
            Part(
                text_of(
                    {
                        "type": "assistant/message",
                        "seq": 2,
                        "time": 2,
                        "surfaceOp": "append",
                        "data": {
                            "turn": 0,
                            "step": 0,
                            "message": {"role": "assistant", "content": []},
                            "usage": {"inputTokens": huge, "outputTokens": 1},
                        },
                    }
                )
            ),
        ]
        if n:  # the same events, with a lone surrogate in the same segment
            parts[1] = Part(text_of(user_message(1, [{"type": "text", "text": "\ud800"}])))
        messages.append(segment(key, parts, DEFAULT_LIMITS, "segment"))
    produce_now(deployment, ledger, messages)
    verify(deployment, ledger, tmp_path, timeout=120)


# --------------------------------------------------------------------------- hostile producer


def _caught_up(deployment: Deployment, worker: Worker, what: str) -> None:
    def done() -> bool:
        assert_alive(worker)
        return all(v == 0 for v in consumer_lag(deployment).values())

    wait_until(done, 240, what, every=1.0)


def test_a_hostile_producer_cannot_stall_a_partition(
    kafka_bootstrap: str, redis_url: str, tmp_path: Path, deployments: list[Deployment]
) -> None:
    """The hostile run through the broker, the worker and Redis: good traffic; the property
    test's hostile producer (``tests.generators.extreme``: arbitrary bytes, extreme but
    well-formed events, odd keys, arbitrary headers, resets); a 334 KB segment of 2,100
    usage samples of 2^53 - 1 input tokens; a reset of generation 2^64; then the documented
    repair of a gap (`stream produce --reset`) while the worker runs. Every partition's
    committed offset reaches its end; Redis and the output topic hold, for every session,
    what the pure fold of the topic's records gives; Redis' totals and the worker's state
    figures add up to it; the clean sessions equal `stream fold`; the worker stays ready."""
    deployment = _deployment(
        deployments, kafka_bootstrap, redis_url, tmp_path, 4, STREAM_RESETS="1"
    )
    rng = random.Random(1616)
    ledger = Ledger(input_topic(deployment))
    clean = session_traffic(rng, "clean", scaled(12, 60), (20, 80), garbage_rate=0)
    raws = extreme_messages(rng, scaled(400, 6000), prefix="x")
    flood = [build.user_message(0, build.texts("hi"), time=0)] + [
        build.usage_chunk(seq, build.usage(MAX_SAFE, 1), step=seq, time=seq)
        for seq in range(1, 2101)
    ]
    raws.append((b"x-flood", orjson.dumps(flood), []))
    raws.append((b"x-flood", None, [(RESET_HEADER, str(2**64).encode())]))
    log = [build.user_message(seq, build.texts(f"part {seq}"), time=seq) for seq in range(6)]
    raws.extend((b"gap", orjson.dumps(event), []) for n, event in enumerate(log) if n != 2)
    # A reset naming a generation nobody claimed, mid-session: dead-lettered, and the
    # session goes on updating under the deployment's generation (not frozen out of reach).
    forged = [build.user_message(seq, build.texts(f"on {seq}"), time=seq) for seq in range(4)]
    raws.extend((b"forged", orjson.dumps(event), []) for event in forged[:2])
    raws.append((b"forged", None, [(RESET_HEADER, str(MAX_GENERATION).encode())]))
    raws.extend((b"forged", orjson.dumps(event), []) for event in forged[2:])
    worker = deployment.start_worker("hostile")
    produce_now(deployment, ledger, clean)
    producer = producer_for(deployment)
    for key, value, headers in raws:
        producer.produce(input_topic(deployment), key=key, value=value, headers=headers or None)
        producer.poll(0)
    assert producer.flush(60) == 0
    _caught_up(deployment, worker, "the hostile traffic committed to the end")
    before_repair = end_offsets(deployment)
    gapped = deployment.redis_update("gap")
    assert gapped is not None and "gap: expected seq 2" in str(gapped["faults"])

    # The repair the docs prescribe, as an operator runs it during the demo.
    path = tmp_path / "gap.jsonl"
    lines = [orjson.dumps({"type": "session", "id": "gap"}), *map(orjson.dumps, log)]
    path.write_bytes(b"\n".join(lines) + b"\n")
    deployment.stream("produce", "--reset", str(path))
    _caught_up(deployment, worker, "the repair committed to the end")

    # No generation was claimed for resets (the deployment's own, 1, is no claim) until
    # the repair claimed 2 on the control topic.
    model = pure_fold_of_topic(
        deployment,
        CoreLimits(reset_generations=()),
        claimed=lambda p, offset: () if offset < before_repair[p] else ((2, 2),),
    )
    wait_until(lambda: deployment.stats() == model.totals, 60, f"redis totals {model.totals}")
    sessions = sorted(model.updates)
    assert model.updates["forged"]["seq"] == 3 and "faults" not in model.updates["forged"]
    assert redis_updates(deployment, sessions) == model.updates
    assert latest_output(deployment) == model.updates
    assert model.updates["gap"] == offline_fold([path])["gap"]
    assert "faults" not in model.updates["gap"]
    assert "passes 2^53 - 1" in model.updates["x-flood"]["faults"]["tokenUsage"]["error"]
    logs = ledger.write_logs(tmp_path / "clean")
    for session, line in offline_fold(logs).items():
        assert model.updates[session] == line, session

    def figures_agree() -> bool:
        samples = worker.metrics()
        state = {
            outcome: samples.get(f'stream_state_events{{outcome="{outcome}"}}')
            for outcome in model.totals
        }
        return (
            samples.get("stream_census_walking_partitions") == 0
            and state == {k: float(v) for k, v in model.totals.items()}
            and samples.get("stream_sessions_faulted") == model.faulted_sessions
        )

    wait_until(figures_agree, 60, "the worker's state figures to equal the model's")
    samples = worker.metrics()
    assert samples['stream_resets_total{applied="yes"}'] >= 1
    assert samples['stream_events_retired_total{outcome="faulted"}'] >= 1
    assert worker.probe("/readyz") == 200, worker.page("/readyz")
    say(
        f"hostile producer: {model.records} records, {len(sessions)} sessions exact,"
        f" {model.faulted_sessions} faulted, {model.resets} resets applied; totals"
        f" {model.totals}; committed offsets at the end of every partition"
    )


def test_a_decompression_bomb_is_dead_lettered_and_memory_stays_bounded(
    kafka_bootstrap: str, redis_url: str, tmp_path: Path, deployments: list[Deployment]
) -> None:
    """A 900 MB value compressed by zstd to a record of tens of kilobytes (the broker takes
    it: it checks the compressed size) among unseen traffic: the worker inflates no batch
    past its bound, dead-letters the bomb with its reason, never exits, and its peak
    resident memory stays under 768 MiB; every session and every count is exact."""
    deployment = _deployment(deployments, kafka_bootstrap, redis_url, tmp_path, 2)
    rng = random.Random(3838)
    ledger = Ledger(input_topic(deployment))
    worker = deployment.start_worker("bomb")
    produce_now(deployment, ledger, session_traffic(rng, "before", 6, (20, 60), garbage_rate=0))
    bomber = producer_for(
        deployment, **{"compression.type": "zstd", "message.max.bytes": 1_000_000_000}
    )
    bomb = garbage(b"bomb", bytes(900_000_000), "bomb")
    produce(bomber, input_topic(deployment), ledger, bomb)
    assert bomber.flush(300) == 0 and not ledger.failed, ledger.failed
    del bomb, bomber
    produce_now(deployment, ledger, session_traffic(rng, "after", 6, (20, 60), garbage_rate=0))
    verdict = verify(deployment, ledger, tmp_path, timeout=240)
    ((partition, offset, _),) = ledger.dead_expected
    letters = [d for d in dead_letters(deployment) if d.value() is not None]
    (letter,) = letters
    headers = {name: value for name, value in letter.headers() or []}
    assert b"inflates past 4,000,000 bytes" in headers["reason"], headers
    assert headers["source-offset"] == str(offset).encode()
    assert len(letter.value()) <= 1024  # a bounded copy of the batch, not the payload
    assert worker.probe("/readyz") == 200 and worker.starts == 1
    peak = peak_rss(worker)
    assert peak < 768 * 1024 * 1024, f"peak RSS {peak / 2**20:.0f} MiB"
    say(
        f"decompression bomb: dead-lettered at {partition}@{offset}, worker peak RSS"
        f" {peak / 2**20:.0f} MiB; {verdict.line()}"
    )


# --------------------------------------------------------------------------- backlog


def test_a_backlog_past_the_stream_buffer_is_consumed(
    kafka_bootstrap: str, redis_url: str, tmp_path: Path, deployments: list[Deployment]
) -> None:
    """A worker started on a backlog (after an outage, a deploy, a rebalance) takes it
    in: 20,000 records waiting on two partitions, far past Faust's stream buffer.
    (Regression: the bulk consumer once handed aiokafka's TopicPartition to Faust's
    flow control, which crashed the worker at the first pressure drop.)"""
    deployment = _deployment(deployments, kafka_bootstrap, redis_url, tmp_path, 2)
    ensure_topics(Settings.from_env(deployment.env()))
    ledger = Ledger(input_topic(deployment))
    produce_now(deployment, ledger, [m for i in range(40) for m in ticks(f"b{i}".encode(), 0, 500)])
    deployment.start_worker("backlog")
    verdict = verify(deployment, ledger, tmp_path, timeout=180)
    say(f"backlog: {verdict.line()}")


def test_nesting_at_and_past_the_bound_folds_as_offline(
    kafka_bootstrap: str, redis_url: str, tmp_path: Path, deployments: list[Deployment]
) -> None:
    """The same event gives the same outcome in the worker and in `stream fold` at every
    depth: around the nesting bound, and near Python's recursion limit, where the
    worker's deeper stack once gave up before `stream fold` did (contract: errors are
    deterministic)."""
    deployment = _deployment(deployments, kafka_bootstrap, redis_url, tmp_path, 1)
    ledger = Ledger(input_topic(deployment))
    deployment.start_worker("deep")
    messages = []
    for depth in [*range(MAX_DEPTH - 8, MAX_DEPTH + 3), *range(960, 985, 3)]:
        for name, block in (("plain", {}), ("surrogate", {"s": "\ud800"})):
            event = user_message(0, [{"type": "mystery", **block, "x": "@DEEP@"}])
            text = text_of(event).replace(b'"@DEEP@"', deep_array(depth))
            key = f"deep-{name}-{depth}".encode()
            messages.append(single(key, nested_part(text), DEFAULT_LIMITS, "deep"))
    produce_now(deployment, ledger, messages)
    verify(deployment, ledger, tmp_path, timeout=120)
