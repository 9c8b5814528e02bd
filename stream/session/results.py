"""What a batch fold gives back (``BatchResult``): each touched session's new row and
update, each touched partition's row, the dead letters, and the counts, plain values the
worker writes and publishes."""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from stream.session import codec
from stream.session.processor import SessionRecord, Tally, published_seq, view_version


@dataclass(frozen=True, slots=True)
class ResetNote:
    """A reset record met in a batch, for the worker's log: every reset is logged."""

    session_id: str
    gen: int
    previous: int  # the session's generation before it
    applied: bool  # False: at or below the session's generation, ignored
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One input record's unreadable part: at most one per record, whatever it holds
    (docs/notes/028), so what a record costs downstream is bounded by the limits."""

    value: bytes
    reason: str
    topic: str
    partition: int
    offset: int
    index: int | None = None  # the (first) unreadable element's position in its segment
    size: int | None = None  # original value size when ``value`` was cut to fit
    # Input events it stands for (the ``dead_lettered`` it adds): a segment's unreadable
    # elements, or the records of a batch the transport could not read.
    count: int = 1
    # Those elements' positions in the segment, the first ``Limits.dead_letter_positions``.
    positions: tuple[int, ...] = ()


@dataclass(slots=True)
class Counts:
    folded: int = 0
    duplicate: int = 0
    faulted: int = 0
    dead_lettered: int = 0

    def add(self, other: "Counts") -> None:
        self.folded += other.folded
        self.duplicate += other.duplicate
        self.faulted += other.faulted
        self.dead_lettered += other.dead_lettered

    def add_tally(self, tally: Tally, sign: int = 1) -> None:
        self.folded += sign * tally.folded
        self.duplicate += sign * tally.duplicate
        self.faulted += sign * tally.faulted

    def as_dict(self) -> dict[str, int]:
        return {
            "folded": self.folded,
            "duplicate": self.duplicate,
            "faulted": self.faulted,
            "dead_lettered": self.dead_lettered,
        }

    @property
    def total(self) -> int:
        return self.folded + self.duplicate + self.faulted + self.dead_lettered


# A published version's parts as the session holds them: (its own generation, seq, events
# counted, view version); the publisher raises the generation to the deployment's.
Version = tuple[int, int, int, int]


def version_of(record: SessionRecord) -> Version:
    return (record.gen, published_seq(record), record.accounted.total, view_version(record))


@dataclass(slots=True)
class SessionChange:
    """What one batch did to one session: its new row and the update to publish."""

    session_id: str
    key: bytes  # table and output-topic key
    partition: int  # the input partition its messages came from: the row's partition
    row: bytes
    update: dict[str, Any]
    tally: Tally  # the session's totals after the batch (published with the update)
    gen: int = 0  # the session's own generation (after a reset), 0: the deployment's
    view_version: int = 0  # processor.view_version: breaks ties of (gen, seq, n) in Redis
    payload: bytes = b""  # ``update`` as JSON: encoded once, inside the quarantine
    # The session's part in its partition's figures before the batch and after it
    # (``codec.row_part``; None: no readable row before): what the worker's census moves.
    before: codec.RowPart | None = None
    after: codec.RowPart = (False, (0, 0, 0))
    # When the session last was active, in stream time (``PartitionRow.touched``): the
    # expiry index files it under this. None: it cannot expire yet.
    touched: int | None = None
    # The session had expired and started a new life in this batch: the version its old
    # life last published, which Redis and the output topic drop first.
    expired: Version | None = None
    # The record ``row`` encodes, for the caller to hand back through ``recall`` instead
    # of decoding ``row`` again; None when the session had to be rescued.
    record: SessionRecord | None = None


# ``recall(key, partition, row)``: the record the caller kept for a row it is handed (the
# ``record`` of the change that wrote ``row``), or None. A record is handed out once: the
# fold goes on folding it in place.
Recall = Callable[[bytes, int, bytes], SessionRecord | None]


@dataclass(slots=True)
class PartitionChange:
    """The partition row (``session.partition``): dead letters accounted, the offset
    covered, the stream time, and what expiry retired."""

    partition: int
    row: bytes
    dead_lettered: int
    now: int | None = None  # the stream time after the batch
    since: int | None = None
    retired: Tally = field(default_factory=Tally)  # events of sessions swept away
    expired: int = 0  # sessions swept away


@dataclass(slots=True)
class BatchResult:
    sessions: list[SessionChange] = field(default_factory=list)
    partitions: list[PartitionChange] = field(default_factory=list)
    dead_letters: list[DeadLetter] = field(default_factory=list)
    counts: Counts = field(default_factory=Counts)  # new events only, not redeliveries
    # Events of a life that ended in this batch (a reset, or the session expired): they
    # stay in every total (``SessionRecord.carried``), this says how many moved.
    retired: Counts = field(default_factory=Counts)
    expired: int = 0  # sessions an event found expired (they start a new life)
    redelivered: int = 0  # messages already accounted for (a retry after a crash)
    quarantined: int = 0  # messages an unexpected error took out of the batch
    types: dict[str, int] = field(default_factory=dict)  # events by type (metrics)
    resets: list[ResetNote] = field(default_factory=list)
