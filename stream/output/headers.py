"""The headers the service reads and writes on Kafka records: one home for their names.

- On the input topic, ``stream-reset: G`` makes a record a reset (contract: "Per-session
  processing"; ``stream produce --reset``): the input's, named where the input is read
  (``session.input``) and listed here with the others.
- On the dead-letter topic, every record says why and where it came from
  (``dead_letter_headers``).
- On the output topic, an update carries its generation, tally and view version
  (``output.record.SessionUpdate.headers``), what a re-seed needs besides the payload.

Pure constants and encoding: imported by the producer, the dead-letter writer, the
re-seed and every reader of these topics.
"""

from typing import Final, Protocol

# A control record, not an event: "start this session over under generation G".
from stream.session.input import RESET_HEADER as RESET_HEADER

# Dead letters (DLQ records): the reason, and the source record's place.
DLQ_REASON: Final = "reason"
DLQ_SOURCE_TOPIC: Final = "source-topic"
DLQ_SOURCE_PARTITION: Final = "source-partition"
DLQ_SOURCE_OFFSET: Final = "source-offset"
DLQ_SEGMENT_INDEX: Final = "segment-index"  # the (first) unreadable element of a segment
DLQ_ORIGINAL_BYTES: Final = "original-bytes"  # only when the value was cut to fit
DLQ_COUNT: Final = "count"  # input events the record stands for; only when more than one
DLQ_SEGMENT_INDEXES: Final = "segment-indexes"  # with a count: the first positions, a,b,c

# Output records (session updates): what Redis' guard compares, besides the payload.
UPDATE_GENERATION: Final = "gen"
UPDATE_TALLY: Final = "tally"  # "folded duplicate faulted"
UPDATE_VIEW_VERSION: Final = "v"


class Letter(Protocol):
    """What a dead letter says of itself (``session.results.DeadLetter``)."""

    @property
    def reason(self) -> str: ...
    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def index(self) -> int | None: ...
    @property
    def size(self) -> int | None: ...
    @property
    def count(self) -> int: ...
    @property
    def positions(self) -> tuple[int, ...]: ...


def dead_letter_headers(letter: Letter) -> list[tuple[str, bytes]]:
    """A dead letter's Kafka headers."""
    found = [
        (DLQ_REASON, letter.reason.encode()),
        (DLQ_SOURCE_TOPIC, letter.topic.encode("utf-8", "backslashreplace")),
        (DLQ_SOURCE_PARTITION, str(letter.partition).encode()),
        (DLQ_SOURCE_OFFSET, str(letter.offset).encode()),
    ]
    if letter.index is not None:
        found.append((DLQ_SEGMENT_INDEX, str(letter.index).encode()))
    if letter.size is not None:
        found.append((DLQ_ORIGINAL_BYTES, str(letter.size).encode()))
    if letter.count > 1:
        found.append((DLQ_COUNT, str(letter.count).encode()))
        if letter.positions:
            found.append((DLQ_SEGMENT_INDEXES, ",".join(map(str, letter.positions)).encode()))
    return found
