"""What the worker's settings make of its aiokafka consumer, read by the fetcher it builds
at start (``stream.app.fetch.BackoffConsumerThread._create_consumer``)."""

import asyncio
from pathlib import Path
from typing import Any

import pytest

from stream.app.drain import Pace
from stream.app.worker import assemble
from stream.config import Settings


def consumer_of(settings: Settings) -> Any:
    async def made() -> Any:
        app = assemble(settings, 2).app
        consumer = app.consumer._thread._create_consumer(asyncio.get_running_loop())
        await consumer._client.close()
        consumer._closed = True  # never started: nothing else to stop
        return consumer

    return asyncio.run(made())


@pytest.mark.parametrize("level", ["read_committed", "read_uncommitted"])
def test_the_consumer_reads_at_the_isolation_level_set(tmp_path: Path, level: str) -> None:
    # Faust would read uncommitted (it reads committed only under exactly-once).
    settings = Settings(state_dir=str(tmp_path), input_topic="in", isolation_level=level)
    consumer = consumer_of(settings)
    assert consumer._isolation_level == level


def test_the_default_is_read_committed(tmp_path: Path) -> None:
    assert consumer_of(Settings(state_dir=str(tmp_path)))._isolation_level == "read_committed"


def test_the_consumer_is_handed_one_value_built_from_the_settings(tmp_path: Path) -> None:
    settings = Settings(
        state_dir=str(tmp_path),
        input_topic="in",
        fetch_max_wait=0.2,
        latency_budget=0.004,
        max_buffered_bytes=1_000_000,
        consumer_thread=True,
    )
    app = assemble(settings, 2).app
    fetch = app.transport.fetch
    assert app.consumer.fetch is fetch  # handed to the consumer the transport creates
    assert (fetch.bulk_topics, fetch.pace, fetch.bulk_bytes) == (
        frozenset({"in"}),
        Pace(budget_ms=4, resting_ms=200),  # each fetch's wait (stream.app.pacing)
        1_000_000,
    )
    assert (fetch.isolation_level, fetch.consumer_thread) == ("read_committed", True)
    assert None not in (fetch.record_age, fetch.leaving, fetch.fetches)
    assert fetch.leaving() is settings.leave_on_stop
