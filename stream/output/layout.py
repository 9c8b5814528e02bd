"""Where the service publishes in Redis: every key and channel name, in one place.

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
``n`` the events counted, ``v`` the view version). The totals are sums of what the session
rows and the partitions' retired figures hold (every event ever taken, sessions that
expired included), applied as differences by the writing scripts, so they stay exact
under redelivery and come back with a re-seed.

Readers (``stream watch``, the gateway, UI backends) and the writer use these functions,
so a prefix means the same keys everywhere.
"""

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RedisLayout:
    prefix: str = "ctx:"

    def session_key(self, session_id: str) -> str:
        """A session's latest update (hash) and its update channel (same name)."""
        return f"{self.prefix}session:{session_id}"

    @property
    def session_pattern(self) -> str:
        """``PSUBSCRIBE`` pattern matching every session's channel."""
        return f"{self.prefix}session:*"

    def session_id_of(self, key: str) -> str | None:
        """The session id a key or channel name belongs to (``None`` for other names)."""
        head = f"{self.prefix}session:"
        return key[len(head) :] if key.startswith(head) else None

    @property
    def recent_key(self) -> str:
        return f"{self.prefix}recent"

    @property
    def stats_key(self) -> str:
        return f"{self.prefix}stats"

    @property
    def tallies_key(self) -> str:
        return f"{self.prefix}tallies"

    @property
    def retired_key(self) -> str:
        return f"{self.prefix}retired"

    @property
    def dead_key(self) -> str:
        return f"{self.prefix}dead"

    @property
    def marker_key(self) -> str:
        return f"{self.prefix}marker"
