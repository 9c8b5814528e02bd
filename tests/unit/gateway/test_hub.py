"""The in-process fan-out: frames once, never waits, drops only the slow client."""

import asyncio

from stream.gateway.hub import CLOSED
from tests.unit.gateway.fakes import FakeStore, hub, update


def test_updates_reach_every_client_of_their_session_only() -> None:
    async def go() -> None:
        fan = hub(FakeStore())
        a, b, other = fan.subscribe("s"), fan.subscribe("s"), fan.subscribe("t")
        fan.dispatch("s", update("s", 1))
        fan.dispatch("s", update("s", 2))
        fan.dispatch("nobody", update("nobody", 1))  # no client: ignored
        for client in (a, b):
            assert [client.queue.get_nowait().seq for _ in range(2)] == [1, 2]  # type: ignore[union-attr]
        assert other.queue.empty()
        assert fan.client_count == 3 and fan.delivered == 4

    asyncio.run(go())


def test_a_slow_client_is_dropped_without_slowing_the_others() -> None:
    async def go() -> None:
        fan = hub(FakeStore(), queue_size=4)
        slow, fast = fan.subscribe("s"), fan.subscribe("s")
        aborted: list[bool] = []
        slow.on_drop = lambda: aborted.append(True)
        received = []
        for seq in range(1, 21):
            fan.dispatch("s", update("s", seq))  # never awaits: a full queue cannot block it
            frame = fast.queue.get_nowait()  # the fast client keeps up
            assert frame is not None
            received.append(frame.seq)
        assert received == list(range(1, 21))
        assert slow.dropped and aborted == [True] and fan.dropped == 1
        # The dropped client's queue holds only the end marker; the hub forgot it.
        assert slow.queue.get_nowait() is CLOSED and slow.queue.empty()
        assert fan.clients == {"s": {fast}}

    asyncio.run(go())


def test_messages_without_a_seq_are_ignored() -> None:
    async def go() -> None:
        fan = hub(FakeStore())
        client = fan.subscribe("s")
        fan.dispatch("s", b"garbage")
        assert client.queue.empty()

    asyncio.run(go())


def test_unsubscribe_and_close_all() -> None:
    async def go() -> None:
        fan = hub(FakeStore())
        a, b = fan.subscribe("s"), fan.subscribe("t")
        fan.unsubscribe(a)
        assert fan.clients == {"t": {b}}
        fan.dispatch("t", update("t", 1))
        fan.close_all()
        assert b.queue.get_nowait() is CLOSED  # pending frames give way to the end marker
        assert fan.clients == {} and not b.dropped

    asyncio.run(go())


def test_resync_dispatches_the_stored_values_of_watched_sessions() -> None:
    async def go() -> None:
        store = FakeStore()
        store.put("s", update("s", 9))
        fan = hub(store)
        client = fan.subscribe("s")
        fan.subscribe("unknown")
        await fan._resync(list(fan.clients))
        frame = client.queue.get_nowait()
        assert frame is not None and frame.seq == 9

    asyncio.run(go())
