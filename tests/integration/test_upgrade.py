"""Upgrading with a projection's state version bumped: only that projection is rebuilt,
by a replay, without publishing faults; the others keep their rows and cursors."""

import random
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.integration.harness import (
    Deployment,
    Worker,
    event_count,
    offline_fold,
    wait_until,
    write_sessions,
)

pytestmark = [pytest.mark.integration, pytest.mark.deployment_options(partitions=2)]


def _rows(deployment: Deployment) -> dict[str, list[Any]]:
    """The latest stored row of every session, as the changelog holds it."""
    rows = {}
    for message in deployment.consume_all(f"{deployment.name}-sessions-changelog"):
        if message.key() != b"\xff" and message.value():
            rows[message.key().decode()] = orjson.loads(message.value())
    return rows


def _entries(row: list[Any]) -> dict[str, list[Any]]:
    return {entry[0]: entry for entry in row[4:]}


def test_a_version_bump_rebuilds_only_that_projection_on_the_next_replay(
    deployment: Deployment, tmp_path: Path
) -> None:
    paths = write_sessions(tmp_path / "logs", random.Random(83), "u", 5, (40, 120))
    expected = offline_fold(paths)
    total = event_count(paths)
    old = deployment.start_worker("old")
    deployment.stream("produce", *map(str, paths))
    deployment.wait_accounted(total)
    before_rows = _rows(deployment)
    stats = deployment.stats()
    assert old.terminate() == 0

    # The new release starts on the same state: contextBreakdown waits for a replay.
    new = Worker(deployment, old.worker_id, {}, module="tests.integration.bumped_worker")
    deployment.workers.append(new)
    new.start()
    wait_until(lambda: new.probe("/readyz") == 200, 60, "the new release to be ready")
    for session, line in expected.items():
        assert deployment.redis_update(session) == line  # nothing published as a fault
    assert new.terminate() == 0
    deployment.stream("replay", "--to-earliest")
    new.start()
    wait_until(
        lambda: all(
            deployment.redis().hget(f"{deployment.prefix}session:{s}", "v") == b"9"
            for s in expected
        ),
        90,
        "the rebuilt views in Redis",
    )
    for session, line in expected.items():
        assert deployment.redis_update(session) == line
    assert deployment.stats() == stats  # a replay counts nothing again
    after_rows = _rows(deployment)
    for session, row in before_rows.items():
        old_entries, new_entries = _entries(row), _entries(after_rows[session])
        for key in ("contextPressure", "tokenUsage"):  # untouched: same cursor and state
            assert new_entries[key][2:5] == old_entries[key][2:5], (session, key)
        rebuilt = new_entries["contextBreakdown"]
        assert rebuilt[1] == old_entries["contextBreakdown"][1] + 1  # the new version
        assert rebuilt[2:5] == old_entries["contextBreakdown"][2:5]  # same cursor and state
        assert rebuilt[5] is False  # no longer rebuilding
