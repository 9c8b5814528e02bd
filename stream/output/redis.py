"""What Redis holds and carries for readers, besides the key names (``output.layout``):
the fields of a session's hash, the messages on its channel, the values of the totals'
hashes, and what the worker's functions answer.

Written by ``publish.redis_sink`` (and by its Lua functions, which name the same fields:
``tests/unit/publish`` checks that they agree), read by the gateway (``gateway.store``,
``gateway.hub``), ``stream watch``, the re-seed and ``stream republish``.

Pure: no Redis client in here.
"""

from collections.abc import Mapping
from typing import Any, Final

import orjson

# -- a session's hash: {prefix}session:{id} ------------------------------------------------
# Its version (``output.record.SessionUpdate.version``), in the order the guard compares:
# generation, seq, events counted, view version.
VERSION_FIELDS: Final = ("gen", "seq", "n", "v")
UPDATE_FIELD: Final = "update"  # the update JSON, as published on the channel
HASH_FIELDS: Final = (*VERSION_FIELDS, UPDATE_FIELD)  # what a reader's HMGET asks for

# -- what the worker's functions answer, per session ---------------------------------------
# A write: refused (Redis holds a newer version), written and published, or already there.
# A drop: refused (Redis holds a newer life), or dropped.
OLDER: Final = 0
WRITTEN: Final = 1
UNCHANGED: Final = 2


# -- channel messages: {prefix}session:{id} (in cluster mode also the shard's feed) -------
# Every accepted update, as written (its JSON, the hash's ``update``), and one message when
# the session expired: ``expiry_message``.
def expiry_message(session_id: str) -> bytes:
    """What a session's channel carries when it expired (readers end its streams)."""
    return orjson.dumps({"sessionId": session_id, "expired": True})


def is_expiry(message: Mapping[str, Any]) -> bool:
    """Whether a channel message, parsed, is an expiry (an update always has a ``seq``)."""
    return message.get("expired") is True and "seq" not in message


def expiry_of(payload: bytes) -> bool:
    """Whether a channel message, as received, is an expiry (``expiry_message``)."""
    if b'"expired"' not in payload:  # an update's JSON never holds this key
        return False
    try:
        message = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return False
    return isinstance(message, dict) and is_expiry(message)


def session_id_in(payload: bytes) -> str | None:
    """The ``sessionId`` an update or expiry message names (a shard's feed carries many
    sessions' messages); ``None`` when it names none."""
    try:
        message = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return None
    session_id = message.get("sessionId") if isinstance(message, dict) else None
    return session_id if isinstance(session_id, str) else None


# -- the totals' hashes: tallies, dead, retired, marker ------------------------------------
def tally_text(tally: tuple[int, ...]) -> str:
    """A tally as Redis keeps it (``{prefix}tallies``, the retired figures) and as the
    output record's ``tally`` header carries it: ``"folded duplicate faulted"``."""
    return " ".join(map(str, tally))


def parse_tally(text: str) -> tuple[int, int, int]:
    """``tally_text`` read back; raises ``ValueError`` for anything else."""
    folded, duplicate, faulted = (int(n) for n in text.split())
    return folded, duplicate, faulted


def partition_field(topic: str, partition: int) -> str:
    """The field of an input partition in ``{prefix}dead``, ``retired`` and ``marker``."""
    return f"{topic}:{partition}"


def marker_value(gen: int, run_id: str) -> str:
    """A marker field's value: who re-seeded the partition (generation, worker run)."""
    return f"{gen}:{run_id}"
