"""Where the service publishes in Redis: every key and channel name, in one place.

Standalone Redis (``REDIS_CLUSTER`` unset):

| name | type | content |
|---|---|---|
| ``{prefix}session:{id}`` | hash | ``update`` (JSON), ``gen``, ``seq``, ``n``, ``v`` |
| ``{prefix}session:{id}`` | channel | every accepted update, as written |
| ``{prefix}recent`` | sorted set | the 10,000 latest updated session ids, scored by epoch ms |
| ``{prefix}session:{id}`` | channel | also ``{"sessionId": id, "expired": true}`` when it expires |
| ``{prefix}stats`` | hash | event totals: folded, duplicate, faulted, dead_lettered; expired |
| ``{prefix}tallies`` | hash | per live session, ``"folded duplicate faulted"`` (totals' parts) |
| ``{prefix}dead`` | hash | per ``topic:partition``, ``"gen count"`` of dead letters |
| ``{prefix}retired`` | hash | per ``topic:partition``, ``"gen f d x sessions"`` of expired ones |
| ``{prefix}marker`` | hash | per ``topic:partition``: Redis holds what its owner published |

``gen, seq, n, v`` is the stored update's version (``output.record.SessionUpdate.version``:
``n`` the events counted, ``v`` the view version); what the keys and channels hold (the
fields, the messages, the values) is named in ``output.redis``. The totals are sums of
what the session rows and the partitions' retired figures hold (every event ever taken,
sessions that expired included), applied as differences by the writing scripts, so they
stay exact under redelivery and come back with a re-seed.

Redis Cluster (``REDIS_CLUSTER=1``, note 014): a script may only touch keys of one hash
slot, so each session belongs to one of ``SHARDS`` shards (``shard_of``: CRC-32 of the id)
and its keys carry the shard's hash tag ``{NN}`` (``00`` to ``15``), beside the shard's own
totals; the partitions' figures share the tag ``{p}``:

| name | type | content |
|---|---|---|
| ``{prefix}session:{NN}:{id}`` | hash, sharded channel | as ``{prefix}session:{id}`` |
| ``{prefix}session:{NN}`` | sharded channel | every update and expiry of the shard's sessions |
| ``{prefix}recent:{NN}`` | sorted set | the shard's 10,000 latest updated session ids |
| ``{prefix}stats:{NN}`` | hash | the shard's live sessions' folded, duplicate, faulted |
| ``{prefix}tallies:{NN}`` | hash | per live session of the shard, as ``{prefix}tallies`` |
| ``{prefix}stats:{p}`` | hash | dead_lettered; the retired sessions' parts; expired |
| ``{prefix}dead:{p}``, ``{prefix}retired:{p}`` | hash | as ``{prefix}dead``, ``{prefix}retired`` |
| ``{prefix}marker:{NN}``, ``{prefix}marker:{p}`` | hash | as ``{prefix}marker``, per slot group |

The totals are then the sum of the ``stats_keys`` (``read_stats``), and the recent sessions
the newest of the ``recent_keys`` merged (``newest``). The prefix must hold no brace: a
``{`` in it would move the hash tag.

Readers (``stream watch``, the gateway, UI backends) and the writer use these functions,
so a prefix means the same keys everywhere.
"""

import heapq
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import Any

SHARDS = 16  # cluster mode: the shards sessions and their totals are spread over
PARTITIONS_TAG = "{p}"  # cluster mode: the hash tag of the partitions' figures
TOTALS = ("folded", "duplicate", "faulted", "dead_lettered")


@dataclass(frozen=True, slots=True)
class RedisLayout:
    prefix: str = "ctx:"
    cluster: bool = False

    # -- sessions ----------------------------------------------------------------------
    def shard_of(self, session_id: str) -> int:
        """The session's shard in cluster mode (stable across processes and versions)."""
        return zlib.crc32(session_id.encode("utf-8", "surrogatepass")) % SHARDS

    def session_key(self, session_id: str) -> str:
        """A session's latest update (hash) and its update channel (same name)."""
        if self.cluster:
            return f"{self.prefix}session:{self._tag(self.shard_of(session_id))}:{session_id}"
        return f"{self.prefix}session:{session_id}"

    def session_keys(self, session_id: str) -> tuple[str, str, str, str]:
        """The keys a session's scripts touch: its hash, the tallies, the stats and the
        recent set it counts in (in cluster mode its shard's: one slot)."""
        key = self.session_key(session_id)
        if not self.cluster:
            return key, self.tallies_key, self.stats_key, self.recent_key
        tag = self._tag(self.shard_of(session_id))
        p = self.prefix
        return key, f"{p}tallies:{tag}", f"{p}stats:{tag}", f"{p}recent:{tag}"

    @property
    def session_pattern(self) -> str:
        """``PSUBSCRIBE`` pattern matching every session's channel (standalone only:
        sharded channels have no patterns; see ``feed_channels``)."""
        self._standalone("session_pattern", "feed_channels")
        return f"{self.prefix}session:*"

    def session_id_of(self, key: str) -> str | None:
        """The session id a key or channel name belongs to (``None`` for other names)."""
        head = f"{self.prefix}session:"
        if not key.startswith(head):
            return None
        rest = key[len(head) :]
        if not self.cluster:
            return rest
        tag, colon, session_id = rest.partition(":")
        if not colon or len(tag) != 4 or tag[0] != "{" or tag[3] != "}":
            return None
        return session_id if tag == self._tag(self.shard_of(session_id)) else None

    def feed_channel(self, shard: int) -> str:
        """Cluster mode: the sharded channel carrying every message of a shard's sessions."""
        return f"{self.prefix}session:{self._tag(shard)}"

    def feed_of(self, session_id: str) -> str:
        return self.feed_channel(self.shard_of(session_id))

    @property
    def feed_channels(self) -> tuple[str, ...]:
        """Cluster mode: what an "every session" reader ``SSUBSCRIBE``s to (one per shard)."""
        return tuple(self.feed_channel(s) for s in range(SHARDS))

    # -- sets and totals ---------------------------------------------------------------
    @property
    def recent_keys(self) -> tuple[str, ...]:
        """The recent sets to merge (``newest``): one, or one per shard."""
        if not self.cluster:
            return (self.recent_key,)
        return tuple(f"{self.prefix}recent:{self._tag(s)}" for s in range(SHARDS))

    @property
    def stats_keys(self) -> tuple[str, ...]:
        """The hashes whose sum is the totals (``read_stats``): one, or every shard's and
        the partitions'."""
        if not self.cluster:
            return (self.stats_key,)
        shards = (f"{self.prefix}stats:{self._tag(s)}" for s in range(SHARDS))
        return (*shards, self.partition_stats_key)

    @property
    def partition_stats_key(self) -> str:
        """The stats hash the partitions' dead-letter and retired figures move."""
        return f"{self.prefix}stats:{PARTITIONS_TAG}" if self.cluster else self.stats_key

    @property
    def marker_keys(self) -> tuple[str, ...]:
        """The marker hashes: one, or one per slot group (a master that lost its data
        loses its markers with it, and its owner notices)."""
        if not self.cluster:
            return (self.marker_key,)
        shards = (f"{self.prefix}marker:{self._tag(s)}" for s in range(SHARDS))
        return (*shards, f"{self.prefix}marker:{PARTITIONS_TAG}")

    @property
    def recent_key(self) -> str:
        self._standalone("recent_key", "recent_keys")
        return f"{self.prefix}recent"

    @property
    def stats_key(self) -> str:
        self._standalone("stats_key", "stats_keys")
        return f"{self.prefix}stats"

    @property
    def tallies_key(self) -> str:
        self._standalone("tallies_key", "session_keys")
        return f"{self.prefix}tallies"

    @property
    def retired_key(self) -> str:
        return f"{self.prefix}retired" + (f":{PARTITIONS_TAG}" if self.cluster else "")

    @property
    def dead_key(self) -> str:
        return f"{self.prefix}dead" + (f":{PARTITIONS_TAG}" if self.cluster else "")

    @property
    def marker_key(self) -> str:
        self._standalone("marker_key", "marker_keys")
        return f"{self.prefix}marker"

    @staticmethod
    def _tag(shard: int) -> str:
        return f"{{{shard:02d}}}"

    def _standalone(self, name: str, instead: str) -> None:
        if self.cluster:
            raise ValueError(f"RedisLayout.{name} has no cluster-mode name; use {instead}")


def sum_stats(hashes: Iterable[dict[Any, Any]]) -> dict[str, int]:
    """The totals from the ``stats_keys`` hashes (``HGETALL`` replies, bytes or str)."""
    totals: dict[str, int] = {}
    for fields in hashes:
        for name, value in fields.items():
            key = name.decode() if isinstance(name, bytes) else str(name)
            totals[key] = totals.get(key, 0) + int(value)
    return totals


def read_stats(client: Any, layout: RedisLayout) -> dict[str, int]:
    """The totals as one dict (``folded``, ``duplicate``, ``faulted``, ``dead_lettered``,
    ``expired``; absent ones 0), from a synchronous ``redis.Redis`` or ``RedisCluster``:
    one pipeline of ``HGETALL``s over the ``stats_keys``."""
    pipe = client.pipeline(transaction=False)
    for key in layout.stats_keys:
        pipe.hgetall(key)
    totals = sum_stats(pipe.execute())
    return {name: totals.get(name, 0) for name in (*TOTALS, "expired")} | totals


def newest(pages: Iterable[Sequence[tuple[Any, float]]], count: int) -> list[tuple[Any, float]]:
    """The ``count`` highest-scored ``(member, score)`` of ``ZREVRANGE ... WITHSCORES``
    replies (each newest first): the recent sessions over every ``recent_keys`` set."""
    merged = heapq.merge(*pages, key=lambda entry: entry[1], reverse=True)
    return list(islice(merged, max(count, 0)))
