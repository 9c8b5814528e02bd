"""Slow, greedy and garbled clients against the gateway's real server setup (``server.py``'s
aiohttp options and ``CappedSite``) on a loopback port, with raw sockets: a half-sent
request is closed within the header timeout, a stream outlives it, the connection cap
holds, also against a burst; requests that do not parse cost one log line a second."""

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import uvloop
from aiohttp import web
from aiohttp.http_exceptions import BadHttpMessage

from stream.config import Settings
from stream.gateway.app import Options, build_app
from stream.gateway.server import CappedSite, _NoRequestText, handler_options
from tests.unit.gateway.fakes import FakeStore, hub, update
from tests.waiting import until

REQUEST = b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n"


@asynccontextmanager
async def serving(**options: Any) -> AsyncIterator[tuple[CappedSite, int]]:
    store = FakeStore()
    store.put("s", update("s", 1))
    fan = hub(store)
    fan.ready.set()  # the subscription is not started in these tests: say it is live
    config = Options(**options)
    app = build_app(Settings(redis_key_prefix="t:"), config, store=store, hub=fan)
    runner = web.AppRunner(app, shutdown_timeout=1, **handler_options(config))
    await runner.setup()
    site = CappedSite(
        runner,
        "127.0.0.1",
        0,
        cap=config.max_connections,
        per_address=config.max_connections_per_address,
    )
    await site.start()
    try:
        yield site, runner.addresses[0][1]
    finally:
        await runner.cleanup()


async def _closed(reader: asyncio.StreamReader, limit: float = 5) -> bytes:
    """What the server sent until it closed the connection; ``limit`` bounds a failure."""
    async with asyncio.timeout(limit):
        try:
            return await reader.read()  # to EOF
        except ConnectionResetError:  # closed with our bytes unread: a reset (uvloop)
            return b""


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    """On asyncio's loop and on uvloop's (the worker's; its transports are no asyncio
    ``WriteTransport``, which once kept the 503 from being written)."""
    asyncio.run(scenario())
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(scenario())


def test_a_half_sent_request_is_closed_by_the_header_timeout() -> None:
    """aiohttp's keep-alive timer is the header timeout (server.py). Its 0.2 s pass for
    real here, but nothing asserts on the wall clock: a connection is closed or not, a
    trickle is cut before its end, a stream counts heartbeats."""

    async def scenario() -> None:
        async with serving(header_timeout=0.2) as (_, port):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: local")  # and never the rest
            assert await _closed(reader) == b""
            # Nothing at all sent: the same.
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            assert await _closed(reader) == b""
            # A kept-alive connection: answered, then its next half request is closed too.
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(REQUEST)
            assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
            writer.write(b"GET /heal")
            await _closed(reader)
            # Trickling bytes does not keep it open: the timer is not reset by data. The
            # client's pace is the subject: the request would take four header timeouts
            # (on the loop's time, which the server's timer shares), and is cut before.
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            sent = 0
            for byte in REQUEST[:-2]:
                if reader.at_eof() or writer.is_closing():
                    break
                writer.write(bytes([byte]))
                sent += 1
                await asyncio.sleep(0.02)
            await _closed(reader)
            assert sent < len(REQUEST) - 2, "a trickle kept the connection open"

    run(scenario)


def test_a_stream_outlives_the_header_timeout() -> None:
    async def scenario() -> None:
        async with serving(header_timeout=0.3, heartbeat=0.1) as (_, port):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET /sessions/s/context/stream HTTP/1.1\r\nHost: localhost\r\n\r\n")
            got = b""
            # Ten heartbeats, 0.1 s apart on the loop's time: three header timeouts and more.
            async with asyncio.timeout(10):  # a failure bound
                while got.count(b": heartbeat") < 10:
                    chunk = await reader.read(4096)
                    assert chunk, "the stream was closed"
                    got += chunk
            assert got.startswith(b"HTTP/1.1 200")
            writer.close()

    run(scenario)


def test_the_connection_cap_holds() -> None:
    async def scenario() -> None:
        async with serving(max_connections=5, header_timeout=30) as (site, port):
            held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(5)]
            await until(lambda: site.open == 5, what="five connections admitted")
            reader, _ = await asyncio.open_connection("127.0.0.1", port)
            data = await _closed(reader)
            assert data.startswith(b"HTTP/1.1 503") and b"Retry-After: 5" in data
            # The five admitted are served.
            for reader, writer in held[:2]:
                writer.write(REQUEST)
                assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
            # One closes: its place is free again.
            held[0][1].close()
            await until(lambda: site.open == 4)
            fresh = await asyncio.open_connection("127.0.0.1", port)
            fresh[1].write(REQUEST)
            assert (await fresh[0].readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
            # A burst accepted in one go (asyncio makes all its protocols first): the cap
            # is still exact.
            burst = await asyncio.gather(
                *(asyncio.open_connection("127.0.0.1", port) for _ in range(40))
            )
            answers = await asyncio.gather(*(_closed(r) for r, _ in burst))
            assert all(data.startswith(b"HTTP/1.1 503") for data in answers)
            assert site.open == 5 and site.refused == 41
            for _, writer in (*held, *burst, fresh):
                writer.close()
            await until(lambda: site.open == 0)

    run(scenario)


def test_one_client_address_cannot_take_every_connection() -> None:
    async def scenario() -> None:
        async with serving(max_connections=6, max_connections_per_address=3) as (site, port):
            greedy = [await asyncio.open_connection("127.0.0.1", port) for _ in range(3)]
            reader, _ = await asyncio.open_connection("127.0.0.1", port)
            data = await _closed(reader)
            assert data.startswith(b"HTTP/1.1 503")
            # Another client (another loopback source address) still gets in, up to three.
            other = [
                await asyncio.open_connection("127.0.0.1", port, local_addr=("127.0.0.2", 0))
                for _ in range(3)
            ]
            other[0][1].write(REQUEST)
            assert (await other[0][0].readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
            assert site.addresses == {"127.0.0.1": 3, "127.0.0.2": 3} and site.open == 6
            for _, writer in (*greedy, *other):
                writer.close()
            await until(lambda: site.open == 0 and not site.addresses)

    run(scenario)


def test_files_are_served_through_the_counted_connections() -> None:
    """The page's files go out by sendfile, which swaps the transport's protocol for a
    while: the counting protocol in between must survive that."""

    async def scenario() -> None:
        async with serving(max_connections=5) as (site, port):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            for path in ("/", "/static/session.js", "/"):
                writer.write(f"GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode())
                head = await reader.readuntil(b"\r\n\r\n")
                assert head.startswith(b"HTTP/1.1 200"), head
                length = next(
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                body = await reader.readexactly(length)
                assert len(body) == length > 100
            assert site.open == 1
            writer.close()
            await until(lambda: site.open == 0)

    run(scenario)


def test_requests_that_do_not_parse_are_one_quiet_line_a_second() -> None:
    """aiohttp logs each unparseable request as an ERROR quoting the request line (a
    token in its query string, say): one WARNING without the quote, at most once a
    second, with the count of the others."""
    quiet = _NoRequestText()
    secret = "GET /x?access_token=eyJsecret HTTP/1.1"

    def record() -> logging.LogRecord:
        error = BadHttpMessage(f"Invalid char in url path:\n\n  {secret!r}")
        return logging.LogRecord(
            "aiohttp.server",
            logging.ERROR,
            __file__,
            1,
            "Error handling request from %s",
            ("127.0.0.1",),
            (type(error), error, None),
        )

    first = record()
    assert quiet.filter(first) and first.levelno == logging.WARNING
    assert first.exc_info is None and "eyJsecret" not in first.getMessage()
    assert "BadHttpMessage (status 400)" in first.getMessage()
    assert not any(quiet.filter(record()) for _ in range(50))
    quiet.last -= 1.0  # a second later
    later = record()
    assert quiet.filter(later) and "(50 more since)" in later.getMessage()
    other = logging.LogRecord("aiohttp.server", logging.ERROR, __file__, 1, "boom", None, None)
    assert quiet.filter(other) and other.levelno == logging.ERROR  # anything else: as it was
