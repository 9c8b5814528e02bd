"""The output record: one session's latest update, as every writer and reader sees it.

A session's update goes out as one record on the compacted output topic (key: the session
id, value: ``payload``, the update JSON; headers: ``headers()``) and as one guarded write to
Redis (``publish.redis_sink``), both built from this value. Each way in is a constructor
here:

- ``from_change``: a batch just folded (``session.batch.SessionChange``), the payload the
  core encoded once, sent as it is;
- ``from_expired``: a session a sweep retired (``session.expiry.Expired``): only its drop;
- ``from_row``: a stored table row, for the worker's re-seed of Redis, and ``from_record``
  the same from a row already decoded;
- ``from_kafka``: a record read back from the output topic, for ``stream republish``.

The headers carry what the payload does not and the guard needs to rebuild Redis exactly:
the generation, the session's tally and the view version.

Pure: it may use the session core and orjson, never Redis, Kafka or Faust.
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import orjson

from stream.output.headers import UPDATE_GENERATION, UPDATE_TALLY, UPDATE_VIEW_VERSION
from stream.output.redis import parse_tally, tally_text
from stream.projections.base import Projection
from stream.session import codec
from stream.session.batch import SessionChange
from stream.session.expiry import Expired
from stream.session.processor import SessionRecord, update, view_version

# Kafka headers as a consumer hands them over: (name, value) pairs, or a mapping.
Headers = Iterable[tuple[str, str | bytes | None]] | Mapping[str, str | bytes | None]


@dataclass(frozen=True, slots=True)
class SessionUpdate:
    session_id: str
    gen: int  # the generation published: max(deployment's, session's own)
    seq: int
    tally: tuple[int, int, int]  # folded, duplicate, faulted
    payload: bytes  # the update JSON (empty when ``gone``)
    view_version: int = 0  # processor.view_version
    # The version of an earlier life of the session (it expired) that must be dropped
    # before this one is written: Redis deletes it and the output topic gets a tombstone.
    replaces: tuple[int, int, int, int] | None = None
    gone: bool = False  # the session expired: only the drop, nothing written after it

    @property
    def version(self) -> tuple[int, int, int, int]:
        """What the guard compares, in order: generation, seq, events counted, views."""
        return (self.gen, self.seq, sum(self.tally), self.view_version)

    def headers(self) -> list[tuple[str, bytes]]:
        """The output record's Kafka headers: what a reader of the output topic needs,
        besides the payload, to re-seed Redis exactly (``from_kafka`` reads them)."""
        return [
            (UPDATE_GENERATION, str(self.gen).encode()),
            (UPDATE_TALLY, tally_text(self.tally).encode()),
            (UPDATE_VIEW_VERSION, str(self.view_version).encode()),
        ]

    @classmethod
    def from_change(cls, change: SessionChange, deployment_gen: int) -> "SessionUpdate":
        """A session's update from the batch that folded it. The payload is the one the
        core encoded (``change.payload``), never serialised again."""
        if not change.payload:
            raise ValueError(f"session change {change.session_id!r} carries no payload")
        replaces = None
        if change.expired is not None:
            gen, seq, n, v = change.expired
            replaces = (max(deployment_gen, gen), seq, n, v)
        return cls(
            change.session_id,
            max(deployment_gen, change.gen),
            change.update["seq"],
            change.tally.as_tuple(),
            change.payload,
            change.view_version,
            replaces,
        )

    @classmethod
    def from_expired(cls, expired: Expired, deployment_gen: int) -> "SessionUpdate":
        """The drop of a session a sweep retired: its Redis entry (up to the version its
        life published) and, on the output topic, a tombstone."""
        gen, seq, n, v = expired.version
        version = (max(deployment_gen, gen), seq, n, v)
        tally = expired.tally.as_tuple()
        return cls(expired.session_id, version[0], seq, tally, b"", v, version, gone=True)

    @classmethod
    def from_row(
        cls,
        session_id: str,
        row: bytes,
        deployment_gen: int,
        folds: tuple[Projection, ...],
    ) -> "SessionUpdate":
        """A session's update from its stored row (the re-seed): the update a batch
        ending in that state publishes, byte for byte. Raises ``codec.RowError`` for a
        row that cannot be read, saying why."""
        return cls.from_record(session_id, codec.decode(row, folds), deployment_gen)

    @classmethod
    def from_record(
        cls, session_id: str, record: SessionRecord, deployment_gen: int
    ) -> "SessionUpdate":
        """``from_row`` of a row already decoded."""
        body = update(session_id, record)
        return cls(
            session_id,
            max(deployment_gen, record.gen),
            body["seq"],
            record.accounted.as_tuple(),
            orjson.dumps(body),
            view_version(record),
        )

    @classmethod
    def from_kafka(cls, key: bytes, value: bytes, headers: Headers | None) -> "SessionUpdate":
        """A session's update read back from the output topic; the value is kept as the
        payload, as it is. Headers a record lacks (or whose value is not bytes) read as
        written before they existed: generation 1, tally ``0 0 0``, view version 0.

        Raises ``ValueError`` (a key that is not UTF-8, a value that is not JSON, a header
        that is not a number), ``KeyError`` (no ``seq``) or ``TypeError`` (a value that is
        not an object) for a record that is not an update."""
        pairs = headers.items() if isinstance(headers, Mapping) else headers or ()
        found = {name: raw for name, raw in pairs if isinstance(raw, bytes)}
        body = orjson.loads(value)
        gen = int(found.get(UPDATE_GENERATION, b"1"))
        tally = parse_tally(found.get(UPDATE_TALLY, b"0 0 0").decode())
        v = int(found.get(UPDATE_VIEW_VERSION, b"0"))
        return cls(key.decode(), gen, int(body["seq"]), tally, value, v)
