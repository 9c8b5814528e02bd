"""Redis is a cache of the output topic: when it loses data the worker re-seeds it, and
``stream republish`` rebuilds it on demand — exact, and never backwards."""

import random
import threading
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis

from tests.integration.harness import (
    Deployment,
    event_count,
    offline_fold,
    wait_until,
    write_sessions,
)

pytestmark = pytest.mark.integration


def _corpus(directory: Path, sessions: int, seed: int) -> list[Path]:
    return write_sessions(directory, random.Random(seed), f"r{seed}-", sessions, (40, 200))


def _exact(deployment: Deployment, expected: dict[str, dict[str, Any]]) -> bool:
    return all(deployment.redis_update(s) == line for s, line in expected.items())


# The shared `deployment` fixture (conftest), checking Redis every second.
pytestmark = pytest.mark.deployment_options(extra_env={"STREAM_REDIS_CHECK_INTERVAL": "1"})


def test_a_flushall_while_idle_is_repaired_within_seconds(
    deployment: Deployment, tmp_path: Path
) -> None:
    paths = _corpus(tmp_path / "logs", sessions=8, seed=41)
    expected = offline_fold(paths)
    deployment.start_worker()
    deployment.stream("produce", *map(str, paths))
    deployment.wait_accounted(event_count(paths))
    before = deployment.stats()
    deployment.redis().flushall()
    started = time.monotonic()
    wait_until(lambda: _exact(deployment, expected), 30, "the re-seed")
    repaired = time.monotonic() - started
    assert deployment.stats() == before  # the totals come back, never from zero
    print(f"\nFLUSHALL repaired in {repaired:.1f} s for {len(expected)} sessions")


def test_a_reseed_racing_live_updates_never_moves_a_session_backwards(
    deployment: Deployment, tmp_path: Path
) -> None:
    paths = _corpus(tmp_path / "logs", sessions=10, seed=43)
    expected = offline_fold(paths)
    first, second = paths[:5], paths
    deployment.start_worker()
    deployment.stream("produce", *map(str, first))
    deployment.wait_accounted(event_count(first))
    # Watch every channel: per session, published seqs never go down.
    seen: dict[str, int] = {}
    backwards: list[tuple[str, int, int]] = []
    stop = threading.Event()
    pubsub = deployment.redis().pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
    pubsub.psubscribe(f"{deployment.prefix}session:*")

    def watch() -> None:
        while not stop.is_set():
            message = pubsub.get_message(timeout=0.2)
            if message is None:
                continue
            update = orjson.loads(message["data"])
            session, seq = update["sessionId"], update["seq"]
            if seq < seen.get(session, -1):
                backwards.append((session, seen[session], seq))
            seen[session] = max(seq, seen.get(session, -1))

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        deployment.redis().flushall()  # the worker re-seeds while new events stream in
        deployment.stream("produce", "--rate", "3000", *map(str, second[5:]))
        deployment.redis().flushall()
        wait_until(lambda: _exact(deployment, expected), 60, "every session exact")
    finally:
        stop.set()
        watcher.join(5)
        pubsub.close()
    assert not backwards
    assert deployment.accounted() == event_count(paths)


def test_republish_into_an_empty_redis_under_another_prefix_equals_the_original(
    deployment: Deployment, tmp_path: Path
) -> None:
    paths = _corpus(tmp_path / "logs", sessions=8, seed=47)
    deployment.start_worker()
    deployment.stream("produce", *map(str, paths))
    deployment.wait_accounted(event_count(paths))
    client = deployment.redis()
    fresh = "copy:"
    done = deployment.stream("republish", REDIS_KEY_PREFIX=fresh)
    assert b"republished 8 sessions" in done.stderr
    for path in paths:
        session = path.name.removesuffix(".jsonl")
        original = client.hgetall(f"{deployment.prefix}session:{session}")
        copy = client.hgetall(f"{fresh}session:{session}")
        assert copy[b"update"] == original[b"update"]
        assert (copy[b"gen"], copy[b"seq"], copy[b"n"]) == (
            original[b"gen"],
            original[b"seq"],
            original[b"n"],
        )
    assert client.hgetall(f"{fresh}stats") == client.hgetall(f"{deployment.prefix}stats")
    again = deployment.stream("republish", REDIS_KEY_PREFIX=fresh)
    assert b"0 written, 8 already current" in again.stderr  # idempotent
    one = deployment.stream("republish", "--session", "r47-3", REDIS_KEY_PREFIX="one:")
    assert b"republished 1 sessions" in one.stderr
    assert redis.Redis.from_url(deployment.redis_url).exists("one:session:r47-3")


def test_with_two_workers_every_owner_reseeds_its_own_partitions(
    deployment: Deployment, tmp_path: Path
) -> None:
    paths = _corpus(tmp_path / "logs", sessions=12, seed=53)
    expected = offline_fold(paths)
    deployment.start_worker("a")
    deployment.start_worker("b")
    deployment.stream("produce", *map(str, paths))
    deployment.wait_accounted(event_count(paths))
    before = deployment.stats()
    deployment.redis().flushall()
    wait_until(lambda: _exact(deployment, expected), 45, "both workers' re-seeds")
    assert deployment.stats() == before
