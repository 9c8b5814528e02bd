"""The consumer on the worker's loop (``stream.app.fetch.InlineConsumerThread``, note 023):
what the worker calls on Faust's consumer thread runs on the worker's own loop and thread.
Starting it against a real broker, rebalances and shutdown are the integration tests' (every
worker there runs it: it is the default)."""

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import faust
import pytest

from stream.app.fetch import BackoffConsumerThread, FetchSettings, InlineConsumerThread, install
from tests.waiting import until


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    yield loop
    loop.close()
    asyncio.set_event_loop(None)


def consumer_thread(loop: asyncio.AbstractEventLoop, consumer_thread: bool = True) -> Any:
    app = faust.App("inline-test", broker="kafka://x:1", loop=loop)
    topics = frozenset({"inline-test-input"})
    install(app, FetchSettings(topics, None, None, "read_committed", consumer_thread))
    return app, app.consumer._thread


def test_faust_s_thread_unless_told_and_the_worker_s_loop_when_told(
    loop: asyncio.AbstractEventLoop,
) -> None:
    _, threaded = consumer_thread(loop)
    assert type(threaded) is BackoffConsumerThread
    assert threaded.thread_loop is not threaded.parent_loop  # a loop of its own
    threaded.thread_loop.close()
    _, inline = consumer_thread(loop, consumer_thread=False)
    assert type(inline) is InlineConsumerThread
    assert inline.thread_loop is inline.parent_loop is inline.consumer.loop


def test_calls_run_on_the_worker_s_loop_and_thread(loop: asyncio.AbstractEventLoop) -> None:
    _, inline = consumer_thread(loop, consumer_thread=False)
    loop = inline.parent_loop  # the consumer's: the worker's loop
    here = threading.get_ident()
    seen: list[tuple[int, asyncio.AbstractEventLoop]] = []

    def plain(a: int, b: int = 0) -> int:
        seen.append((threading.get_ident(), asyncio.get_running_loop()))
        return a + b

    async def awaited(a: int) -> int:
        seen.append((threading.get_ident(), asyncio.get_running_loop()))
        await asyncio.sleep(0)
        return a * 2

    async def failing() -> None:
        raise LookupError("no such partition")

    async def calls() -> tuple[int, int]:
        found = (await inline.call_thread(plain, 1, b=2), await inline.call_thread(awaited, 5))
        with pytest.raises(LookupError, match="no such partition"):
            await inline.call_thread(failing)
        await inline.cast_thread(plain, 7)  # not awaited by the caller: runs on this loop
        await until(lambda: len(seen) == 3, what="the cast call")
        return found

    assert loop.run_until_complete(calls()) == (3, 10)
    assert seen == [(here, loop)] * 3
