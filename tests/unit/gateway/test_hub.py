"""The in-process fan-out: one read per update whatever the number of clients, never
waits, drops only the slow client, ends expired sessions' streams."""

import asyncio

import orjson

from stream.gateway.hub import CLOSED
from stream.gateway.sse import Ending, Frame
from tests.unit.gateway.fakes import FakeStore, hub, stored, update


def _frame(item: object) -> Frame:
    assert isinstance(item, Frame), item
    return item


def test_updates_reach_every_client_of_their_session_only() -> None:
    async def go() -> None:
        fan = hub(FakeStore())
        a, b, other = fan.subscribe("s"), fan.subscribe("s"), fan.subscribe("t")
        fan.dispatch("s", stored("s", 1))
        fan.dispatch("s", stored("s", 2))
        fan.dispatch("nobody", stored("nobody", 1))  # no client: ignored
        for client in (a, b):
            assert [_frame(client.queue.get_nowait()).seq for _ in range(2)] == [1, 2]
            assert client.queue.empty()
        assert other.queue.empty()
        assert fan.client_count == 3 and fan.delivered == 4

    asyncio.run(go())


def test_a_channel_message_is_one_read_of_the_hash_for_all_its_clients() -> None:
    async def go() -> None:
        store = FakeStore()
        fan = hub(store, queue_size=16)
        clients = [fan.subscribe("s") for _ in range(10)]
        store.put_stored("s", stored("s", 7, gen=3))
        await fan.handle([("s", update("s", 7)), ("unwatched", update("unwatched", 1))])
        assert store.reads == [["s"]]  # one read, of the watched session only
        for client in clients:
            framed = _frame(client.queue.get_nowait())
            assert framed.version == (3, 7, 7, 0)  # the generation comes from the hash
            assert framed.data.startswith(b"id: 3-7-7-0\n")
        # Several messages in hand: still one round trip. The one the hash has moved past
        # is relayed too, in its place: same generation, its seq between the last known
        # and the hash's (n and v unknown: 0).
        store.put_stored("s", stored("s", 9, gen=3))
        await fan.handle([("s", update("s", 8)), ("s", update("s", 9))])
        assert store.reads[-1] == ["s"] and len(store.reads) == 2
        got = [_frame(clients[0].queue.get_nowait()) for _ in range(2)]
        assert [f.version for f in got] == [(3, 8, 0, 0), (3, 9, 9, 0)]
        assert got[0].data == b"id: 3-8-0-0\ndata: " + update("s", 8) + b"\n\n"
        assert clients[0].queue.empty()
        # Nobody watching: no read at all.
        await fan.handle([("other", update("other", 1))])
        assert len(store.reads) == 2

    asyncio.run(go())


def test_a_superseded_message_across_a_rebuild_is_skipped() -> None:
    async def go() -> None:
        store = FakeStore()
        fan = hub(store)
        client = fan.subscribe("s")
        fan.observe("s", (1, 3044, 3044, 0))
        # A late message of generation 1 read after the rebuild to generation 2: its
        # place is not certain, and the newer value follows on the channel.
        store.put_stored("s", stored("s", 5, gen=2))
        await fan.handle([("s", update("s", 3045))])
        assert client.queue.empty()
        await fan.handle([("s", update("s", 5))])
        assert _frame(client.queue.get_nowait()).version == (2, 5, 5, 0)
        # Without anything known of the session, a superseded message is skipped too.
        other = fan.subscribe("t")
        store.put_stored("t", stored("t", 9))
        await fan.handle([("t", update("t", 8))])
        assert other.queue.empty()

    asyncio.run(go())


def test_a_message_whose_hash_is_gone_sends_nothing() -> None:
    async def go() -> None:
        store = FakeStore()
        fan = hub(store)
        client = fan.subscribe("s")
        await fan.handle([("s", update("s", 1))])
        assert client.queue.empty()

    asyncio.run(go())


def test_an_expiry_message_ends_the_sessions_streams() -> None:
    async def go() -> None:
        store = FakeStore()
        fan = hub(store)
        a, b, other = fan.subscribe("s"), fan.subscribe("s"), fan.subscribe("t")
        store.put_stored("s", stored("s", 4))
        await fan.handle([("s", update("s", 4))])
        expiry = orjson.dumps({"sessionId": "s", "expired": True})
        store.delete("s")
        await fan.handle([("s", expiry)])
        for client in (a, b):
            assert client.queue.get_nowait() == Ending(expiry)  # pending frames give way
            assert client.queue.empty()
        assert "s" not in fan.clients and fan.expired == 1
        assert other.queue.empty() and fan.clients == {"t": {other}}

    asyncio.run(go())


def test_a_slow_client_is_dropped_without_slowing_the_others() -> None:
    async def go() -> None:
        fan = hub(FakeStore(), queue_size=4)
        slow, fast = fan.subscribe("s"), fan.subscribe("s")
        aborted: list[bool] = []
        slow.on_drop = lambda: aborted.append(True)
        received = []
        for seq in range(1, 21):
            fan.dispatch("s", stored("s", seq))  # never awaits: a full queue cannot block it
            received.append(_frame(fast.queue.get_nowait()).seq)  # the fast client keeps up
        assert received == list(range(1, 21))
        assert slow.dropped and aborted == [True] and fan.dropped == 1
        # The dropped client's queue holds only the end marker; the hub forgot it.
        assert slow.queue.get_nowait() is CLOSED and slow.queue.empty()
        assert fan.clients == {"s": {fast}}

    asyncio.run(go())


def test_unsubscribe_and_close_all() -> None:
    async def go() -> None:
        fan = hub(FakeStore())
        a, b = fan.subscribe("s"), fan.subscribe("t")
        fan.unsubscribe(a)
        assert fan.clients == {"t": {b}}
        fan.dispatch("t", stored("t", 1))
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
        assert _frame(client.queue.get_nowait()).seq == 9
        assert store.reads == [["s", "unknown"]]

    asyncio.run(go())
