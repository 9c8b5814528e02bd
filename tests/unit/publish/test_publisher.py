"""The publisher's queueing logic, with a fake Kafka outbox and a fake Redis sink.

What real Redis does with the writes (the guarded scripts, totals, re-seeds against a
live server) is tested in tests/integration; here the sink is a stand-in that can be
down, refuse, or accept, so the order of duties can be checked step by step: delivery
before Redis, a transient outage queues (coalesced, newest wins) and drains — Redis out of
memory or refusing writes included —, the queue is bounded in sessions and bytes and lets
held batches go at its low-water mark, writes Redis rejects as older are counted, a
permanent error stops loudly, and a re-seed decodes stored rows and skips bad ones.
"""

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar, cast

import orjson
import pytest
from redis import exceptions as rx
from redis._parsers.base import BaseParser
from redis.asyncio.client import Pipeline

from stream.config import Settings
from stream.ops.metrics import Metrics
from stream.output.record import SessionUpdate
from stream.publish import kafka as kafka_module
from stream.publish import queue as queue_module
from stream.publish.kafka import Backoff
from stream.publish.publisher import Publisher
from stream.publish.queue import entry_bytes
from stream.publish.redis_sink import (
    DeadCount,
    PermanentRedisError,
    RedisSink,
    is_transient,
    outage_kind,
)
from stream.session import codec
from stream.session.batch import PARTITION_KEY, BatchResult, DeadLetter, Message, fold_batch
from stream.session.processor import update
from stream.testing import events as build
from tests.waiting import until

T = TypeVar("T")
TOPIC = "events"


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coroutine)


@pytest.fixture(autouse=True)
def quick_backoff(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Backoff waits a tick instead of its delay; the delays asked for are recorded."""
    waited: list[float] = []

    async def wait(self: Backoff) -> None:
        waited.append(self.delay)
        self.delay = min(self.delay * 2, self.cap)
        await asyncio.sleep(0.001)

    monkeypatch.setattr(Backoff, "wait", wait)
    return waited


# --- fakes --------------------------------------------------------------------------------------


class FakeOutbox:
    """Kafka as the app provides it: every call returns a delivery future; the first
    ``fail_first`` deliveries fail."""

    def __init__(self, fail_first: int = 0) -> None:
        self.fail_first = fail_first
        self.log: list[tuple[str, Any]] = []
        self.calls = 0
        self.journal: list[str] | None = None

    def _future(self, kind: str, item: Any) -> Awaitable[Any]:
        self.calls += 1
        self.log.append((kind, item))
        failing = self.calls <= self.fail_first

        async def deliver() -> str:
            if failing:
                raise RuntimeError("broker unavailable")
            if self.journal is not None:
                self.journal.append(f"kafka {kind}")
            return "ok"

        return deliver()

    def send_update(
        self, key: bytes, payload: bytes | None, headers: list[tuple[str, bytes]]
    ) -> Awaitable[Any]:
        return self._future("update", (key, payload, headers))

    def send_dead_letter(self, letter: DeadLetter) -> Awaitable[Any]:
        return self._future("dead", letter)


class FakeClient:
    def __init__(self) -> None:
        self.hashes: dict[str, dict[str, str]] = {}

    async def hmget(self, key: str, fields: list[str]) -> list[str | None]:
        stored = self.hashes.get(key, {})
        return [stored.get(f) for f in fields]

    async def hset(self, key: str, mapping: dict[str, str]) -> int:
        self.hashes.setdefault(key, {}).update(mapping)
        return len(mapping)


class FakeSink(RedisSink):
    """The Redis sink: ``fail`` is raised by every write while set; accepted writes are
    kept (``writes``) and the newest version per session is what it ``holds``. ``newer``:
    versions another writer stored, which the guard keeps (result 0 for anything older).
    ``gate``: when set, every write takes one permit first (a test paces the drain). Its
    markers and reads are the real sink's, on a fake client."""

    def __init__(self, settings: Settings) -> None:
        self.fake = FakeClient()
        super().__init__(settings, self.fake)  # type: ignore[arg-type]
        self.fail: BaseException | None = None
        self.attempts = 0
        self.writes: list[tuple[list[SessionUpdate], list[DeadCount]]] = []
        self.journal: list[str] | None = None
        self.newer: dict[str, tuple[int, int, int, int]] = {}
        self.gate: asyncio.Semaphore | None = None

    async def write(
        self,
        updates: Any,
        dead: Any = (),
        now_ms: int = 0,
        retired: Any = (),
        seeded: bool = False,
    ) -> list[int]:  # the RedisSink signature
        self.attempts += 1
        updates, dead = list(updates), list(dead)
        await asyncio.sleep(0)
        if self.fail is not None:
            raise self.fail
        if self.gate is not None:
            await self.gate.acquire()
        self.writes.append((updates, dead))
        if self.journal is not None:
            self.journal.append("redis")
        newer = self.newer
        return [0 if u.version < newer.get(u.session_id, u.version) else 1 for u in updates]

    @property
    def holds(self) -> dict[str, tuple[int, int, int]]:
        latest: dict[str, tuple[int, int, int]] = {}
        for updates, _ in self.writes:
            for u in updates:
                latest[u.session_id] = max(latest.get(u.session_id, u.version[:3]), u.version[:3])
        return latest

    @property
    def dead(self) -> list[DeadCount]:
        return [d for _, dead in self.writes for d in dead]


def make(
    outbox: FakeOutbox | None = None,
    on_permanent: Callable[[BaseException], None] | None = None,
    max_pending: int = 500_000,
    max_pending_bytes: int = 0,
) -> tuple[Publisher, FakeOutbox, FakeSink]:
    settings = Settings(input_topic=TOPIC)
    outbox = outbox or FakeOutbox()
    sink = FakeSink(settings)
    publisher: Publisher = Publisher(
        settings,
        outbox,
        sink,
        max_pending=max_pending,
        max_pending_bytes=max_pending_bytes,
        on_permanent=on_permanent,
    )
    return publisher, outbox, sink


def user(seq: int) -> bytes:
    return orjson.dumps(build.user_message(seq, build.texts("abcd"), time=seq))


def batch(*sessions: tuple[str, int], junk: int = 0) -> BatchResult:
    """A folded batch: each (session, n) gets events 0..n-1; ``junk`` unreadable messages."""
    messages: list[Message] = []
    for session_id, n in sessions:
        for seq in range(n):
            offset = len(messages)
            messages.append(Message(session_id.encode(), user(seq), TOPIC, 0, offset))
    for _ in range(junk):
        offset = len(messages)
        messages.append(Message(b"j", b"{torn", TOPIC, 0, offset))
    return fold_batch(messages, lambda key, partition: None)


async def publish(publisher: Publisher, result: BatchResult) -> None:
    """A batch's updates built, its records out to Kafka and confirmed (re-sent whole as
    the committer does), then to Redis (the worker writes Redis without waiting for the
    confirmation, and its rows and their changelog records are its own: ``stream.app.commit``)."""
    sending = publisher.build(result)
    await kafka_module.confirmed(lambda: publisher.send(sending), "records of a batch")
    await publisher.cache(sending)


def pending(publisher: Publisher) -> dict[str, tuple[int, int, int]]:
    return {s: u.version[:3] for s, u in publisher.queue._pending.items()}


def su(session_id: str, seq: int, gen: int = 1, tally: tuple[int, int, int] = (1, 0, 0)) -> Any:
    return SessionUpdate(session_id, gen, seq, tally, b'{"seq":%d}' % seq)


# --- delivery before ack ------------------------------------------------------------------------


def test_publish_delivers_every_record_then_writes_redis() -> None:
    publisher, outbox, sink = make()
    journal: list[str] = []
    outbox.journal = sink.journal = journal
    result = batch(("a", 2), ("b", 1), junk=1)
    run(publish(publisher, result))
    kinds = [kind for kind, _ in outbox.log]
    assert kinds.count("row") == 0  # the rows are the committer's
    assert kinds.count("update") == len(result.sessions) == 2
    assert kinds.count("dead") == len(result.dead_letters) == 1
    assert journal[-1] == "redis" and journal.count("redis") == 1  # after every delivery
    for _, (key, payload, headers) in (e for e in outbox.log if e[0] == "update"):
        change = next(c for c in result.sessions if c.key == key)
        assert payload is change.payload  # encoded once, in the fold
        assert orjson.loads(payload) == change.update
        v = str(change.view_version).encode()
        assert headers == [("gen", b"1"), ("tally", b"%d 0 0" % change.tally.folded), ("v", v)]
    (updates, dead) = sink.writes[0]
    assert {u.session_id: u.seq for u in updates} == {"a": 1, "b": 0}
    assert all(orjson.loads(u.payload)["sessionId"] == u.session_id for u in updates)
    assert all(u.payload is c.payload for u, c in zip(updates, result.sessions, strict=True))
    assert dead == [DeadCount(TOPIC, 0, 1, 1)]


def test_failed_deliveries_are_re_sent_before_publish_returns(quick_backoff: list[float]) -> None:
    result = batch(("a", 1), ("b", 2), junk=1)
    # a round: each session's update, the dead letter
    per_round = len(result.sessions) + len(result.dead_letters)
    outbox = FakeOutbox(fail_first=2 * per_round + 1)  # two whole rounds and one record
    publisher, _, sink = make(outbox)
    run(publish(publisher, result))
    assert outbox.calls == 4 * per_round  # three failed rounds, each re-sent whole
    assert quick_backoff == [0.2, 0.4, 0.8]  # backing off between rounds
    assert len(sink.writes) == 1  # Redis only after the round that was delivered


def test_publish_never_returns_while_deliveries_fail() -> None:
    publisher, _, sink = make(FakeOutbox(fail_first=10**9))

    async def attempt() -> bool:
        try:
            await asyncio.wait_for(publish(publisher, batch(("a", 1))), 0.2)
        except TimeoutError:
            return False
        return True

    assert run(attempt()) is False
    assert sink.attempts == 0


# --- Redis: transient outages queue, coalesced -------------------------------------------------


def test_a_transient_error_queues_the_updates_and_the_batch_goes_on() -> None:
    publisher, _, sink = make()

    async def scenario() -> None:
        sink.fail = rx.ConnectionError("connection refused")
        await publish(publisher, batch(("a", 2), ("b", 1)))  # returns: nothing raised
        assert publisher.state.retrying
        assert publisher.state.pending == 2
        assert "connection refused" in publisher.state.last_error
        assert pending(publisher) == {"a": (1, 1, 2), "b": (1, 0, 1)}
        assert not sink.writes
        sink.fail = None  # Redis is back
        assert await publisher.flush(5.0)

    run(scenario())
    assert sink.holds == {"a": (1, 1, 2), "b": (1, 0, 1)}
    assert not publisher.state.retrying and publisher.state.pending == 0


def test_queued_updates_coalesce_per_session_and_the_newest_version_wins() -> None:
    publisher, _, sink = make()

    async def scenario() -> None:
        sink.fail = rx.TimeoutError("timed out")
        await publisher.write_redis([su("a", 1), su("b", 4)], [])
        await publisher.write_redis([su("a", 3)], [])
        await publisher.write_redis([su("a", 2), su("b", 4, tally=(3, 2, 0))], [])
        await publisher.write_redis([su("b", 4, gen=0, tally=(9, 9, 9))], [])  # older gen
        assert pending(publisher) == {"a": (1, 3, 1), "b": (1, 4, 5)}
        sink.fail = None
        assert await publisher.flush(5.0)

    run(scenario())
    written = [u for updates, _ in sink.writes for u in updates]
    assert sorted((u.session_id, u.version[:3]) for u in written) == [
        ("a", (1, 3, 1)),
        ("b", (1, 4, 5)),
    ]  # one write per session: what was superseded in the queue never reached Redis


def test_while_a_queue_drains_new_updates_queue_behind_it() -> None:
    publisher, _, sink = make()

    async def scenario() -> None:
        sink.fail = rx.ConnectionError("down")
        await publisher.write_redis([su("a", 1)], [])
        attempts = sink.attempts
        sink.fail = None
        await publisher.write_redis([su("a", 0)], [])  # queued, never written around it
        assert sink.attempts == attempts
        assert await publisher.flush(5.0)

    run(scenario())
    assert sink.holds == {"a": (1, 1, 1)}


def test_dead_letter_counts_queue_too_highest_count_wins() -> None:
    publisher, _, sink = make()

    async def scenario() -> None:
        sink.fail = rx.ConnectionError("down")
        await publisher.write_redis([], [DeadCount(TOPIC, 0, 1, 5), DeadCount(TOPIC, 1, 1, 2)])
        await publisher.write_redis([], [DeadCount(TOPIC, 0, 1, 3)])
        await publisher.write_redis([], [DeadCount(TOPIC, 1, 2, 1)])  # a newer generation
        sink.fail = None
        assert await publisher.flush(5.0)

    run(scenario())
    assert sorted(sink.dead[-2:], key=lambda d: d.partition) == [
        DeadCount(TOPIC, 0, 1, 5),
        DeadCount(TOPIC, 1, 2, 1),
    ]


def test_a_full_queue_holds_batches_until_redis_drains_it() -> None:
    publisher, _, sink = make(max_pending=2)

    async def scenario() -> None:
        sink.fail = rx.ConnectionError("down")
        await publisher.write_redis([su("a", 0)], [])
        held = asyncio.ensure_future(publisher.write_redis([su("b", 0), su("c", 0)], []))
        await until(lambda: sink.attempts >= 3, what="the drain retrying")
        assert not held.done()  # three sessions pending, more than max_pending
        sink.fail = None
        await asyncio.wait_for(held, 5.0)

    run(scenario())
    assert set(sink.holds) == {"a", "b", "c"}


def test_flush_reports_updates_still_pending() -> None:
    publisher, _, sink = make()

    async def scenario() -> bool:
        sink.fail = rx.ConnectionError("down")
        await publisher.write_redis([su("a", 0)], [])
        return await publisher.flush(0.05)

    assert run(scenario()) is False


# --- Redis: permanent errors stop loudly --------------------------------------------------------


@pytest.mark.parametrize(
    "error",
    [
        PermanentRedisError("Redis refused the write: WRONGTYPE"),
        rx.ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value"),
        rx.AuthenticationError("invalid username-password pair"),
        ValueError("a bug, not an outage"),
    ],
    ids=["permanent", "response", "auth", "other"],
)
def test_a_permanent_error_calls_on_permanent_and_raises(error: BaseException) -> None:
    seen: list[BaseException] = []
    publisher, _, sink = make(on_permanent=seen.append)
    sink.fail = error
    with pytest.raises(PermanentRedisError):
        run(publish(publisher, batch(("a", 1))))
    assert seen == [error]
    assert not publisher.queue._pending  # nothing queued: retrying cannot fix it
    assert str(error)[:50] in publisher.state.last_error


def test_a_permanent_error_while_draining_stops_the_drain() -> None:
    seen: list[BaseException] = []
    publisher, _, sink = make(on_permanent=seen.append)

    async def scenario() -> bool:
        sink.fail = rx.ConnectionError("down")
        await publisher.write_redis([su("a", 0)], [])
        sink.fail = rx.ResponseError("NOPERM this user has no permissions")
        writer = publisher.queue._writer
        assert writer is not None
        await until(writer.done, what="the drain to stop")  # it does not loop on it
        assert seen
        return await publisher.flush(0.01)

    assert run(scenario()) is False
    assert len(seen) == 1 and isinstance(seen[0], rx.ResponseError)


# --- Redis refusing writes for a while (OOM, MISCONF, ...) is an outage, not an error ------------

OOM_REPLY = "OOM command not allowed when used memory > 'maxmemory'."
MISCONF_REPLY = (
    "MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist"
    " to disk. Commands that may modify the data set are disabled"
)
WRONGTYPE_REPLY = "WRONGTYPE Operation against a key holding the wrong kind of value"


def reply(text: str) -> rx.RedisError:
    """The exception redis-py raises for an error reply (its own parser)."""
    error: rx.RedisError = BaseParser.parse_error(text)  # type: ignore[no-untyped-call]
    return error


def in_pipeline(error: rx.RedisError, *args: object) -> rx.RedisError:
    """The same error as a pipeline raises it: redis-py quotes the command in front."""
    Pipeline.annotate_exception(cast(Any, None), error, 1, ("FCALL", "cs_00_write", 4, *args))
    return error


@pytest.mark.parametrize(
    ("make_error", "kind"),
    [
        (lambda: reply(OOM_REPLY), "oom"),
        (lambda: in_pipeline(reply(OOM_REPLY + " script: f00, on @user_script:22."), "s"), "oom"),
        (lambda: reply(MISCONF_REPLY), "misconf"),
        (lambda: in_pipeline(reply(MISCONF_REPLY), "ctx:session:s"), "misconf"),
        (
            lambda: reply("ERR Error running script (call to f_00): @user_script:22: " + OOM_REPLY),
            "oom",
        ),
        (lambda: reply("ERR Error running script: @user_script: 22: -" + OOM_REPLY), "oom"),
        (lambda: reply("LOADING Redis is loading the dataset in memory"), "loading"),
        (
            lambda: reply(
                "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."
            ),
            "masterdown",
        ),
        (lambda: reply("READONLY You can't write against a read only replica."), "readonly"),
        (
            lambda: reply("BUSY Redis is busy running a script. You can only call SCRIPT KILL"),
            "busy",
        ),
        (
            lambda: reply(
                "BUSY Redis is busy running a script. You can only call FUNCTION KILL or"
                " SHUTDOWN NOSAVE."
            ),
            "busy",
        ),
        (lambda: reply("CLUSTERDOWN The cluster is down"), "cluster"),
        (lambda: rx.ConnectionError("Error 111 connecting to 127.0.0.1:6379"), "connection"),
        (lambda: ConnectionResetError("reset by peer"), "connection"),
        (lambda: rx.TimeoutError("Timeout reading from socket"), "timeout"),
        (lambda: TimeoutError(), "timeout"),
    ],
    ids=[
        "oom",
        "oom-in-a-script-in-a-pipeline",
        "misconf",
        "misconf-in-a-pipeline",
        "oom-inside-a-script-error",
        "oom-inside-a-script-error-dash",
        "loading",
        "masterdown",
        "readonly",
        "busy",
        "busy-function",
        "clusterdown",
        "connection",
        "os-error",
        "redis-timeout",
        "timeout",
    ],
)
def test_refusals_that_end_by_themselves_are_transient(
    make_error: Callable[[], BaseException], kind: str
) -> None:
    error = make_error()
    assert outage_kind(error) == kind
    assert is_transient(error)


@pytest.mark.parametrize(
    "make_error",
    [
        lambda: reply(WRONGTYPE_REPLY),
        # a payload or session id that quotes a refusal is data, not the server's answer
        lambda: in_pipeline(reply(WRONGTYPE_REPLY), "s", b'{"text": "OOM command not allowed"}'),
        lambda: in_pipeline(reply(WRONGTYPE_REPLY), "MISCONF of pipeline caused error: BUSY"),
        lambda: reply("WRONGPASS invalid username-password pair or user is disabled."),
        lambda: reply("NOAUTH Authentication required."),
        lambda: reply("NOPERM this user has no permissions to run the 'evalsha' command"),
        lambda: reply("NOPERM this user has no permissions to run the 'function|load' command"),
        lambda: reply("ERR Function not found"),  # still, after the sink loaded its library
        lambda: reply(
            "ERR user_function:3: attempt to compare nil script: cs_00_write, on @user_function:3."
        ),
        lambda: reply(
            "ERR Error running script (call to f_00): @user_script:3: attempt to compare nil"
        ),
        lambda: reply("NOSCRIPT No matching script. Please use EVAL."),  # redis-py's to handle
        lambda: rx.AuthenticationError("invalid password"),
        lambda: ValueError("a bug, not an outage"),
    ],
    ids=[
        "wrongtype",
        "wrongtype-quoting-oom",
        "wrongtype-quoting-codes",
        "wrongpass",
        "noauth",
        "noperm",
        "noperm-function-load",
        "function-not-found",
        "function-error",
        "script-error",
        "noscript",
        "auth",
        "bug",
    ],
)
def test_refusals_no_retry_fixes_are_permanent(make_error: Callable[[], BaseException]) -> None:
    error = make_error()
    assert outage_kind(error) is None
    assert not is_transient(error)


@pytest.mark.parametrize(
    ("text", "kind"),
    [(OOM_REPLY, "oom"), (MISCONF_REPLY, "misconf"), ("LOADING loading the dataset", "loading")],
    ids=["oom", "misconf", "loading"],
)
def test_redis_refusing_writes_queues_and_retries_until_it_accepts(
    text: str, kind: str, quick_backoff: list[float], caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[BaseException] = []
    publisher, _, sink = make(on_permanent=seen.append)
    caplog.set_level(logging.WARNING, logger="stream.publish")

    async def scenario() -> None:
        sink.fail = in_pipeline(reply(text), "ctx:session:a")
        await publish(publisher, batch(("a", 2), ("b", 1)))  # returns: nothing raised
        await publisher.write_redis([su("c", 0)], [])  # queued behind
        # The writer keeps retrying, backing off.
        await until(lambda: sink.attempts >= 6, what="six attempts")
        state = publisher.state
        assert state.retrying and state.reason == kind and state.oom == (kind == "oom")
        assert state.pending == 3 and set(publisher.queue._pending) == {"a", "b", "c"}
        assert text.split(" ", 1)[1][:20] in state.last_error
        sink.fail = None  # memory freed / persistence fixed / loaded
        assert await publisher.flush(5.0)
        assert not state.retrying and state.reason == "" and not state.oom
        assert state.pending == 0 and state.pending_bytes == 0
        assert text.split(" ", 1)[1][:20] in state.last_error  # the last reason stays

    run(scenario())
    assert seen == []  # never a permanent error: no worker exits
    assert quick_backoff[:3] == [0.1, 0.2, 0.4]
    assert sink.holds == {"a": (1, 1, 2), "b": (1, 0, 1), "c": (1, 0, 1)}
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1  # once per outage, however many retries, with the reason
    assert text.split(" ", 1)[1][:20] in warnings[0]


def test_an_outage_that_turns_into_oom_is_logged_again_and_labelled_oom(
    caplog: pytest.LogCaptureFixture,
) -> None:
    publisher, _, sink = make()
    caplog.set_level(logging.WARNING, logger="stream.publish")

    async def scenario() -> None:
        sink.fail = rx.ConnectionError("connection refused")
        await publisher.write_redis([su("a", 0)], [])
        await until(lambda: sink.attempts >= 2, what="the drain's first retry")
        assert publisher.state.reason == "connection" and not publisher.state.oom
        sink.fail = reply(OOM_REPLY)  # back, but full
        await until(lambda: publisher.state.oom, what="the outage labelled oom")
        assert publisher.state.retrying
        sink.fail = None
        assert await publisher.flush(5.0)

    run(scenario())
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2
    assert "unreachable" in warnings[0] and "out of memory" in warnings[1]


# --- the queue's bounds: sessions and bytes, released at the low-water mark -----------------------


def queued_bytes(publisher: Publisher) -> int:
    return sum(entry_bytes(u) for u in publisher.queue._pending.values())


def test_queued_bytes_are_kept_as_entries_come_replace_and_go() -> None:
    publisher, _, sink = make()

    async def scenario() -> None:
        sink.fail = rx.ConnectionError("down")
        await publisher.write_redis([su("a", 0), su("b", 0)], [])
        assert publisher.state.pending_bytes == queued_bytes(publisher) > 0
        big = SessionUpdate("a", 1, 1, (2, 0, 0), b"x" * 5000)
        await publisher.write_redis([big], [])  # replaces a's entry: the difference counts
        assert publisher.state.pending_bytes == queued_bytes(publisher)
        assert publisher.state.pending_bytes == entry_bytes(big) + entry_bytes(su("b", 0))
        await publisher.write_redis([su("a", 0)], [])  # older: not queued, nothing moves
        assert publisher.state.pending_bytes == entry_bytes(big) + entry_bytes(su("b", 0))
        sink.fail = None
        assert await publisher.flush(5.0)
        assert publisher.state.pending_bytes == 0 == publisher.queue._bytes

    run(scenario())


def test_the_byte_bound_holds_batches_and_lets_them_go_at_low_water(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(queue_module, "CHUNK", 2)  # the drain writes two per round trip
    cost = entry_bytes(su("s00", 0))
    publisher, _, sink = make(max_pending_bytes=10 * cost)  # sessions: far from their bound

    async def scenario() -> None:
        sink.fail = rx.ConnectionError("down")
        await publisher.write_redis([su("s00", 0)], [])  # the outage starts: queued
        first = asyncio.ensure_future(
            publisher.write_redis([su(f"s{i:02}", 0) for i in range(1, 10)], [])
        )
        await until(first.done, what="ten entries: at the bound, not past it")
        held = asyncio.ensure_future(publisher.write_redis([su("s10", 0)], []))
        await until(lambda: publisher.state.pending_bytes == 11 * cost, what="s10 queued")
        assert not held.done()  # past the bound
        sink.gate = asyncio.Semaphore(0)
        sink.fail = None  # Redis is back; each write waits for a permit
        later = asyncio.ensure_future(publisher.write_redis([su("s11", 0)], []))
        await until(lambda: "s11" in publisher.queue._pending, what="s11 queued")
        assert not later.done()  # under the bound again but not at low water: held too
        room = publisher.queue._room
        seen: list[int] = []
        while not held.done():
            before = publisher.state.pending
            sink.gate.release()
            # One write of two; once under low water, the held batch goes on.
            await until(
                lambda b=before: publisher.state.pending < b and (held.done() or not room.is_set()),
                what="one write of the drain",
            )
            seen.append(publisher.state.pending)
            assert publisher.state.pending_bytes == queued_bytes(publisher)
            assert len(seen) < 10
        await until(later.done, what="the later batch let go with it")
        # twelve queued, two per write: let go at half the byte bound, not when empty
        assert seen == [10, 8, 6, 4]
        assert publisher.state.pending_bytes == 4 * cost <= publisher.max_pending_bytes // 2
        assert not publisher.queue._drained.is_set()
        for _ in range(2):
            sink.gate.release()
        assert await publisher.flush(5.0)

    run(scenario())
    assert set(sink.holds) == {f"s{i:02}" for i in range(12)}


def test_the_session_bound_lets_batches_go_at_half_of_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(queue_module, "CHUNK", 1)
    publisher, _, sink = make(max_pending=4)

    async def scenario() -> None:
        sink.fail = rx.ConnectionError("down")
        await publisher.write_redis([su("a", 0)], [])
        held = asyncio.ensure_future(publisher.write_redis([su(s, 0) for s in "bcde"], []))
        await until(lambda: publisher.state.pending == 5, what="b-e queued")
        assert not held.done()  # five sessions: past four
        sink.gate = asyncio.Semaphore(0)
        sink.fail = None
        for left in (4, 3):
            sink.gate.release()
            await until(lambda n=left: publisher.state.pending <= n, what="one write")
            assert publisher.state.pending == left and not held.done()
        sink.gate.release()
        await until(held.done, what="the held batch let go")
        assert publisher.state.pending == 2  # half of four
        sink.gate.release()
        sink.gate.release()
        assert await publisher.flush(5.0)

    run(scenario())


# --- writes Redis rejects as older are counted --------------------------------------------------


def rejections(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "holds newer versions" in r.getMessage()]


def test_rejected_direct_writes_are_counted_and_reported_at_most_every_10_s(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    clock = [1000.0]
    monkeypatch.setattr(queue_module, "monotonic", lambda: clock[0])
    caplog.set_level(logging.WARNING, logger="stream.publish")
    publisher, _, sink = make()
    sink.newer = {"a": (2, 0, 0, 0), "b": (2, 0, 0, 0)}  # a newer generation wrote them
    sink.fake.hashes["ctx:session:a"] = {"gen": "2", "seq": "0", "n": "1", "v": "0"}

    async def scenario() -> None:
        await publisher.write_redis([su("a", 3), su("c", 1)], [])
        assert publisher.state.rejected == 1
        clock[0] += 5
        await publisher.write_redis([su("a", 4), su("b", 4)], [])
        assert publisher.state.rejected == 3
        clock[0] += 5
        await publisher.write_redis([su("b", 5)], [])
        assert publisher.state.rejected == 4

    run(scenario())
    lines = rejections(caplog)
    assert len(lines) == 2  # the first at once, the next 10 s later
    assert "1 session writes since the last report (1 in all)" in lines[0]
    assert "session a: (gen, seq, n, v) (1, 3, 1, 0), stored (2, 0, 1, 0)" in lines[0]
    assert "3 session writes since the last report (4 in all)" in lines[1]
    assert "session b: (gen, seq, n, v) (1, 5, 1, 0)" in lines[1]


def test_rejected_writes_of_the_drained_queue_are_counted() -> None:
    publisher, _, sink = make()

    async def scenario() -> None:
        sink.fail = rx.ConnectionError("down")
        await publish(publisher, batch(("a", 1), ("b", 1)))
        await publisher.write_redis([su("c", 0)], [])
        sink.newer = {"a": (2, 0, 0, 0), "c": (1, 5, 0, 0)}  # meanwhile written by others
        sink.fail = None
        assert await publisher.flush(5.0)

    run(scenario())
    assert publisher.state.rejected == 2


def test_a_reseed_overtaken_by_live_updates_is_not_counted_as_rejected() -> None:
    publisher, _, sink = make()
    rows = stored_rows(batch(("a", 1), ("b", 1)))
    sink.newer = {"a": (1, 5, 0, 0), "b": (1, 5, 0, 0)}  # live batches wrote newer meanwhile

    async def scenario() -> None:
        await publisher.reseed(rows, 0)  # written at once
        sink.fail = rx.ConnectionError("down")
        await publisher.reseed(rows, 0)  # queued, then drained
        await publisher.write_redis([su("c", 0)], [])  # a live update queued beside them
        sink.newer["c"] = (1, 1, 0, 0)
        sink.fail = None
        assert await publisher.flush(5.0)

    run(scenario())
    assert publisher.state.rejected == 1  # c only


def test_metrics_show_pending_bytes_oom_and_rejected_writes() -> None:
    publisher, _, sink = make()
    metrics = Metrics.create(publisher.settings)
    metrics.redis = publisher.state

    def sample(name: str) -> float | None:
        metrics.refresh_live()
        return metrics.registry.get_sample_value(name)

    async def scenario() -> None:
        assert sample("stream_redis_rejected_writes_total") == 0
        sink.newer = {"a": (2, 0, 0, 0)}
        await publisher.write_redis([su("a", 1), su("a", 2)], [])
        assert sample("stream_redis_rejected_writes_total") == 2
        assert sample("stream_redis_rejected_writes_total") == 2  # a scrape adds nothing
        sink.fail = reply(OOM_REPLY)
        await publisher.write_redis([su("a", 3)], [])
        await publisher.write_redis([su("b", 3)], [])
        assert sample("stream_redis_oom") == 1 and sample("stream_redis_retrying") == 1
        assert sample("stream_redis_pending_bytes") == queued_bytes(publisher) > 0
        assert sample("stream_redis_pending_sessions") == 2
        sink.fail = None
        assert await publisher.flush(5.0)
        assert sample("stream_redis_oom") == 0 and sample("stream_redis_pending_bytes") == 0
        assert sample("stream_redis_rejected_writes_total") == 3  # a's queued write too

    run(scenario())


# --- re-seed ------------------------------------------------------------------------------------


def stored_rows(result: BatchResult) -> list[tuple[bytes, bytes]]:
    rows = [(c.key, c.row) for c in result.sessions]
    return rows + [(PARTITION_KEY, p.row) for p in result.partitions]


def test_reseed_decodes_rows_and_skips_bad_ones() -> None:
    publisher, _, sink = make()
    result = batch(("a", 3), ("b", 1), junk=2)
    rows = [
        *stored_rows(result),
        (b"torn", b"\x00not a row"),
        (b"schema", b"[1]"),
        (b"\xfe\xff", result.sessions[0].row),  # a key that is not UTF-8
        (PARTITION_KEY, b"junk"),
    ]
    sent = run(publisher.reseed(rows, 0))
    assert sent == 2 and publisher.state.reseeded_sessions == 2
    (updates, dead) = sink.writes[0]
    by_id = {u.session_id: u for u in updates}
    assert set(by_id) == {"a", "b"}
    for change in result.sessions:
        record = codec.decode(change.row)
        assert orjson.loads(by_id[change.session_id].payload) == update(change.session_id, record)
        assert by_id[change.session_id].seq == change.update["seq"]
        assert by_id[change.session_id].tally == tuple(record.tally.as_list())
    assert dead == [DeadCount(TOPIC, 0, 1, 2)]


def test_reseed_goes_out_in_chunks() -> None:
    publisher, _, sink = make()
    rows = stored_rows(batch(*((f"s{i}", 1) for i in range(2001))))
    assert run(publisher.reseed(rows, 3)) == 2001
    assert [len(updates) for updates, _ in sink.writes] == [2000, 1]


def test_reseed_queues_like_any_write_when_redis_is_down() -> None:
    publisher, _, sink = make()

    async def scenario() -> int:
        sink.fail = rx.ConnectionError("down")
        sent = await publisher.reseed(stored_rows(batch(("a", 1))), 0)
        assert set(publisher.queue._pending) == {"a"}
        sink.fail = None
        assert await publisher.flush(5.0)
        return sent

    assert run(scenario()) == 1
    assert set(sink.holds) == {"a"}


def test_markers_are_per_partition_so_every_owner_notices_its_own_loss() -> None:
    publisher, _, sink = make()

    async def scenario() -> tuple[list[int], list[int], list[int]]:
        before = await publisher.unmarked([0, 1, 2])
        await publisher.mark([0, 2])
        return before, await publisher.unmarked([0, 1, 2]), await publisher.unmarked([])

    assert run(scenario()) == ([0, 1, 2], [1], [])
    topic = publisher.settings.input_topic
    assert sink.fake.hashes == {
        "ctx:marker": {f"{topic}:0": f"1:{publisher.run_id}", f"{topic}:2": f"1:{publisher.run_id}"}
    }


# --- small parts --------------------------------------------------------------------------------


def test_backoff_doubles_to_its_cap_and_resets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.undo()  # the real wait, with asyncio.sleep recorded instead of slept
    slept: list[float] = []

    async def sleep(delay: float) -> None:
        slept.append(delay)

    monkeypatch.setattr(kafka_module.asyncio, "sleep", sleep)
    backoff = Backoff(0.1, 0.5)

    async def scenario() -> None:
        for _ in range(5):
            await backoff.wait()
        backoff.reset()
        await backoff.wait()

    run(scenario())
    assert slept == [0.1, 0.2, 0.4, 0.5, 0.5, 0.1]


# --- Redis Cluster (note 014) ------------------------------------------------------------------
def test_the_sharded_scripts_publish_with_spublish_on_the_session_and_its_feed() -> None:
    from stream.publish import redis_sink

    for plain, sharded, channel, feed in (
        (redis_sink.SESSIONS_WRITE, redis_sink.SESSIONS_WRITE_SHARDED, "key", "ARGV[3]"),
        (redis_sink.SESSION_DROP, redis_sink.SESSION_DROP_SHARDED, "KEYS[1]", "ARGV[7]"),
    ):
        assert "'PUBLISH'" in plain and "SPUBLISH" not in plain
        assert "'PUBLISH'" not in sharded
        assert sharded.count(f"redis.call('SPUBLISH', {channel},") == 1
        assert sharded.count(f"redis.call('SPUBLISH', {feed},") == 1
    # The sharded batch reads its updates after the feed argument.
    assert "local a = (i - 4) * 3 + 3" in redis_sink.SESSIONS_WRITE_SHARDED


def test_the_library_version_is_in_its_names() -> None:
    """Another library text is another library: a worker never runs code it was not built
    with, and two versions' functions coexist during a rolling upgrade."""
    from stream.publish.redis_sink import CALLBACKS, FUNCTIONS, LIBRARY, LIBRARY_NAME, library

    name, code, functions = library(CALLBACKS)
    assert (name, code, functions) == (LIBRARY_NAME, LIBRARY, FUNCTIONS)
    changed = dict(CALLBACKS, dead_write=CALLBACKS["dead_write"] + "\n-- changed\n")
    other, _, other_functions = library(changed)
    assert other != name and not set(other_functions.values()) & set(functions.values())
    assert code.startswith(f"#!lua name={name}\n")
    assert all(f"redis.register_function('{f}', " in code for f in functions.values())
    # every script is a function (the sharded ones for a cluster), each registered once
    assert set(functions) == set(CALLBACKS) and code.count("redis.register_function(") == 6
    assert all(body.strip("\n") in code for body in CALLBACKS.values())


def test_the_functions_name_the_hash_fields_readers_read() -> None:
    """The Lua writes and compares the fields ``output.redis`` names, in its order."""
    from stream.output.redis import UPDATE_FIELD, VERSION_FIELDS
    from stream.publish.library import SESSION_DROP, SESSIONS_WRITE

    read = ", ".join(f"'{name}'" for name in VERSION_FIELDS)
    assert f"redis.call('HMGET', key, {read})" in SESSIONS_WRITE
    assert f"redis.call('HMGET', KEYS[1], {read})" in SESSION_DROP
    written = ", ".join(f"'{name}', h[{i}]" for i, name in enumerate(VERSION_FIELDS, 1))
    assert f"redis.call('HSET', key, {written}, '{UPDATE_FIELD}', payload)" in SESSIONS_WRITE


def test_cluster_errors_are_transient_and_crossslot_is_not() -> None:
    from redis import exceptions as rx

    from stream.publish.redis_sink import outage_kind

    assert outage_kind(rx.SlotNotCoveredError("Slot 5 is not covered")) == "cluster"
    assert outage_kind(rx.ClusterError("TTL exhausted.")) == "cluster"
    unreachable = rx.RedisClusterException("Redis Cluster cannot be connected. Please ...")
    assert outage_kind(unreachable) == "cluster"
    assert outage_kind(rx.RedisClusterException("No targets were found")) is None
    assert outage_kind(rx.ClusterCrossSlotError("Keys in request don't hash")) is None


# --- expiry (note 013): the order that survives a crash ----------------------------------------
def swept_one() -> Any:
    """A sweep of one session, ``old``, past a day's TTL (its partition row to write)."""
    from stream.session.expiry import sweep
    from stream.session.partition import PartitionRow

    day = 86_400_000
    rows: dict[bytes, bytes] = {}
    messages = [
        Message(b"old", user(0), TOPIC, 0, 0),
        Message(
            b"a", orjson.dumps(build.user_message(0, build.texts("x"), time=10 * day)), TOPIC, 0, 1
        ),
        Message(
            b"b", orjson.dumps(build.user_message(0, build.texts("y"), time=11 * day)), TOPIC, 0, 2
        ),
    ]
    result = fold_batch(messages, lambda key, _: rows.get(key))
    for change in result.sessions:
        rows[change.key] = change.row
    for part in result.partitions:
        rows[PARTITION_KEY] = part.row
    assert PartitionRow.decode(rows[PARTITION_KEY]).now == 10 * day
    return sweep(0, [b"old"], lambda key, _: rows.get(key), day)


def test_a_sweep_drops_from_redis_with_the_retired_figure_and_sends_only_output_tombstones() -> (
    None
):
    """The publisher's side of a sweep (the rows are the committer's: ``Committer.sweep``,
    tests/unit/app/test_commit.py): the drop, counted with the partition's retired figure,
    and one output tombstone per session; no row, no changelog record."""
    publisher, outbox, sink = make()
    journal: list[str] = []
    outbox.journal = sink.journal = journal
    swept = swept_one()
    assert [e.session_id for e in swept.expired] == ["old"] and swept.row
    assert run(publisher.drop(swept)) is True
    assert journal == ["redis"]
    run(_gathered(publisher.tombstones(swept)))
    assert journal == ["redis", "kafka update"]
    assert [kind for kind, _ in outbox.log] == ["update"]


def test_a_sweep_while_redis_is_away_is_only_queued() -> None:
    publisher, outbox, sink = make()
    sink.fail = rx.ConnectionError("refused")
    assert run(publisher.drop(swept_one())) is False
    assert outbox.log == []


async def _gathered(futures: list[Awaitable[Any]]) -> None:
    await asyncio.gather(*futures)
