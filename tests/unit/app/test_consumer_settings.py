"""What the worker's settings make of its aiokafka consumer, read by the fetcher it builds
at start (``stream.app.fetch.BackoffConsumerThread._create_consumer``)."""

import asyncio
from pathlib import Path
from typing import Any

import pytest

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
    assert consumer._fetch_max_wait_ms == 50  # STREAM_FETCH_MAX_WAIT's 0.05 s, not 1.5 s


def test_the_default_is_read_committed(tmp_path: Path) -> None:
    assert consumer_of(Settings(state_dir=str(tmp_path)))._isolation_level == "read_committed"
