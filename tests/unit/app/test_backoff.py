"""The worker's aiokafka clients while the broker is away (stream.app.backoff), without a
broker: a client whose only broker is a closed port, and aiokafka's own producer sender
driving it exactly as in the outage (a record queued for a partition whose leader is
unknown); and the filter that rate-limits aiokafka's repeated log lines."""

import asyncio
import io
import logging
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiokafka  # type: ignore[import-untyped]
import pytest
from aiokafka.client import AIOKafkaClient  # type: ignore[import-untyped]
from aiokafka.cluster import BrokerMetadata  # type: ignore[import-untyped]
from aiokafka.structs import TopicPartition  # type: ignore[import-untyped]
from mode.utils.logging import ExtensionFormatter

from stream.app import backoff as app_backoff
from stream.app import producer as app_producer
from stream.app.worker import assemble
from stream.config import Settings
from tests.waiting import FakeClock, until

BACKOFF_MS = 100


@pytest.fixture
def closed_port() -> int:
    """A local port nothing listens on: connecting is refused at once, as with the broker
    stopped."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def _stranded_producer(port: int, backoff: bool) -> Any:
    """A producer whose cluster metadata knows one broker (on ``port``) and no partition
    leaders, with its metadata synchronizer running: what the worker's producer is left
    with when the broker goes away while records are queued."""
    kind = app_producer.BackoffAIOKafkaProducer if backoff else aiokafka.AIOKafkaProducer
    producer = kind(bootstrap_servers=f"127.0.0.1:{port}", retry_backoff_ms=BACKOFF_MS)
    client = producer.client
    client.cluster._brokers = {1: BrokerMetadata(1, "127.0.0.1", port, None)}
    client._sync_task = asyncio.ensure_future(client._md_synchronizer())
    return producer


async def _time_to_attempts(port: int, backoff: bool, attempts: int, timeout: float) -> float:
    """How long aiokafka's sender takes to ask for ``attempts`` metadata updates (it
    fails after ``timeout`` s)."""
    producer = _stranded_producer(port, backoff)
    client = producer.client
    count = 0
    update = client._metadata_update

    async def counted(*args: Any) -> bool:
        nonlocal count
        count += 1
        result: bool = await update(*args)
        return result

    client._metadata_update = counted
    await producer._message_accumulator.add_message(TopicPartition("t", 0), None, b"v", 5.0)
    loop = asyncio.get_running_loop()
    await producer._sender.start()
    started = loop.time()
    try:
        await until(lambda: count >= attempts, timeout, f"{attempts} metadata attempts")
        return loop.time() - started
    finally:
        await producer._sender.close()
        await client.close()
        producer._closed = True  # never started: nothing else to stop


@pytest.fixture
def quiet_aiokafka_logs() -> Iterator[None]:
    # The spin logs two ERROR lines per turn; keep them out of pytest's captured log.
    logger = logging.getLogger("aiokafka")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    yield
    logger.setLevel(level)


@pytest.mark.usefixtures("quiet_aiokafka_logs")
def test_stock_sender_spins_on_an_unknown_leader(closed_port: int) -> None:
    """The bug, as aiokafka 0.14 has it: attempts without a pause (a few hundred in a
    quarter second on an idle machine). A hundred come well before a backoff of
    ``BACKOFF_MS`` between them would allow (10 s). (If this fails after an aiokafka
    upgrade, the upgrade may have fixed it: see ``BackoffClient``.)"""
    asyncio.run(_time_to_attempts(closed_port, backoff=False, attempts=100, timeout=5.0))


@pytest.mark.usefixtures("quiet_aiokafka_logs")
def test_backoff_sender_waits_between_metadata_attempts(closed_port: int) -> None:
    """With the backoff client: at most one attempt per ``retry_backoff_ms`` (and it keeps
    trying, so the broker's return is noticed within one backoff)."""
    attempts = 6
    took = asyncio.run(_time_to_attempts(closed_port, backoff=True, attempts=attempts, timeout=10))
    # The first at once, then one per backoff at most (the loop's timers may fire up to
    # its clock resolution early).
    assert took >= (attempts - 1) * BACKOFF_MS / 1000 * 0.95


def test_a_failed_update_resolves_after_the_backoff_a_good_one_at_once(
    closed_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    def client_whose_update(result: bool) -> Any:
        async def update(self: Any, cluster_metadata: Any, topics: Any) -> bool:
            return result

        monkeypatch.setattr(AIOKafkaClient, "_metadata_update", update)
        client = app_backoff.with_backoff(
            AIOKafkaClient(bootstrap_servers=f"127.0.0.1:{closed_port}", retry_backoff_ms=100)
        )
        assert isinstance(client, app_backoff.BackoffClient)
        return client

    async def failed() -> float:
        client = client_whose_update(False)
        loop = asyncio.get_running_loop()
        started = loop.time()
        assert await asyncio.wait_for(client._metadata_update(client.cluster, set()), 5) is False
        return loop.time() - started

    async def good() -> bool:
        # At once: the update's coroutine completes without giving the loop a turn.
        client = client_whose_update(True)
        update = client._metadata_update(client.cluster, set())
        with pytest.raises(StopIteration) as done:
            update.send(None)
        result: bool = done.value.value
        return result

    assert asyncio.run(failed()) >= 0.09  # the backoff (the loop's timers may fire a hair early)
    assert asyncio.run(good()) is True


def test_the_worker_builds_both_clients_with_backoff(tmp_path: Path) -> None:
    """What ``assemble`` gives the worker: its producer's aiokafka client and its
    consumer's (shared by the fetcher and the group coordinator) are ``BackoffClient``s,
    and aiokafka's loggers carry the repeat filter."""

    async def clients() -> list[Any]:
        app = assemble(Settings(state_dir=str(tmp_path), input_topic="events-in"), 2).app
        producer = app.producer._new_producer()
        consumer = app.consumer._thread._create_consumer(asyncio.get_running_loop())
        made = [producer.client, consumer._client]
        for client, owner in zip(made, (producer, consumer), strict=True):
            await client.close()
            owner._closed = True  # never started: nothing else to stop
        return made

    assert [type(c) for c in asyncio.run(clients())] == [app_backoff.BackoffClient] * 2
    for name in ("aiokafka", "aiokafka.consumer.fetcher", "aiokafka.producer.sender"):
        assert any(isinstance(f, app_backoff.RepeatFilter) for f in logging.getLogger(name).filters)


def test_aiokafka_is_the_version_the_backoff_client_was_written_against() -> None:
    assert aiokafka.__version__ == app_backoff.AIOKAFKA_VERSION


# --- the repeat filter -----------------------------------------------------------------------


def _record(msg: str, *args: Any, level: int = logging.ERROR, name: str = "aiokafka") -> Any:
    return logging.LogRecord(name, level, __file__, 1, msg, args, None)


def test_repeat_filter_lets_the_first_through_then_one_per_period_with_a_count() -> None:
    clock = FakeClock()
    repeat = app_backoff.RepeatFilter(every=10.0, clock=clock)
    template = "Unable connect to node with id %s: %s"
    passed = []
    for _ in range(320):  # 320 failures in 20 s (steps exact in binary)
        record = _record(template, 1, "[Errno 111] Connection refused")
        if repeat.filter(record):
            passed.append(record.getMessage())
        clock.now += 0.0625
    assert passed == [
        "Unable connect to node with id 1: [Errno 111] Connection refused",
        "Unable connect to node with id 1: [Errno 111] Connection refused"
        " (159 more like this suppressed in the last 10 s)",
    ]
    clock.now += 60  # long after: passes, with the ones suppressed since the last
    late = _record(template, 1, "[Errno 111] Connection refused 100%")
    assert repeat.filter(late)
    note = "refused 100% (159 more like this suppressed in the last 70 s)"
    assert late.getMessage().endswith(note)
    # The worker's handlers format with mode's formatter, which formats the args again.
    assert ExtensionFormatter(stream=io.StringIO()).format(late).endswith(note)
    clock.now += 60  # nothing suppressed in between: no note
    again = _record(template, 1, "refused")
    assert repeat.filter(again)
    assert again.getMessage() == "Unable connect to node with id 1: refused"


def test_repeat_filter_keys_by_logger_and_template_and_spares_info() -> None:
    repeat = app_backoff.RepeatFilter(every=10.0, clock=FakeClock())
    assert repeat.filter(_record("Unable to update metadata from %s", [1]))
    assert not repeat.filter(_record("Unable to update metadata from %s", [2]))
    assert repeat.filter(_record("Unable connect to node with id %s: %s", 1, "x"))
    assert repeat.filter(_record("Unable to update metadata from %s", [1], name="aiokafka.conn"))
    for _ in range(3):
        assert repeat.filter(_record("Discovered coordinator %s", 1, level=logging.INFO))


def test_repeat_filter_on_aiokafka_loggers_once(caplog: pytest.LogCaptureFixture) -> None:
    first = app_backoff.quiet_aiokafka()
    assert app_backoff.quiet_aiokafka() is first
    for name in app_backoff.AIOKAFKA_LOGGERS:
        filters = logging.getLogger(name).filters
        assert sum(isinstance(f, app_backoff.RepeatFilter) for f in filters) == 1
    first._seen.clear()
    with caplog.at_level(logging.ERROR, logger="aiokafka"):
        for _ in range(100):
            logging.getLogger("aiokafka").error("Unable to update metadata from %s", [1])
    assert len(caplog.records) == 1
