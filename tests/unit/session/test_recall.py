"""A fold that is handed back the records it wrote (``fold_batch``'s ``recall``, the worker's
``KeptRecords``) writes and publishes exactly what a fold that decodes every row does:
realistic sessions with duplicates, gaps, resets and expiry, and a hostile producer's
messages, split into batches anywhere."""

import random
import zlib
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stream.app.table import KeptRecords
from stream.output.headers import RESET_HEADER
from stream.session.batch import (
    PARTITION_KEY,
    BatchResult,
    Limits,
    Message,
    fold_batch,
)
from tests.generators.extreme import extreme_messages
from tests.generators.sessions import encode_json, generate_session


class Table:
    """Rows by (partition, key), as the worker keeps them; ``keep`` > 0 recalls records."""

    def __init__(self, keep: int) -> None:
        self.rows: dict[tuple[int, bytes], bytes] = {}
        self.kept = KeptRecords(keep)

    def fold(self, messages: list[Message], limits: Limits) -> BatchResult:
        recall = self.kept.recall if self.kept.keep else None
        result = fold_batch(messages, lambda k, p: self.rows.get((p, k)), limits, recall)
        for change in result.sessions:
            self.rows[(change.partition, change.key)] = change.row
        for part in result.partitions:
            self.rows[(part.partition, PARTITION_KEY)] = part.row
        self.kept.remember(result.sessions)
        return result


def seen(result: BatchResult) -> Any:
    """Everything a batch writes and publishes, less the record objects themselves."""
    return (
        [
            (c.key, c.partition, c.row, c.payload, c.before, c.after, c.touched)
            for c in result.sessions
        ],
        [(p.partition, p.row) for p in result.partitions],
        [(d.offset, d.reason, d.value) for d in result.dead_letters],
        result.counts.as_dict(),
        result.retired.as_dict(),
        [(n.session_id, n.gen, n.applied) for n in result.resets],
    )


def realistic(rng: random.Random) -> list[tuple[bytes, bytes, list[tuple[str, bytes | None]]]]:
    """A few sessions interleaved, with redeliveries, a lost event and a reset now and then."""
    logs = [
        [encode_json(e).encode() for e in generate_session(rng, f"s{i}", rng.randint(1, 40))]
        for i in range(rng.randint(1, 5))
    ]
    cursors = [0] * len(logs)
    out: list[tuple[bytes, bytes, list[tuple[str, bytes | None]]]] = []
    while any(c < len(log) for c, log in zip(cursors, logs, strict=True)):
        i = rng.choice([i for i, log in enumerate(logs) if cursors[i] < len(log)])
        key = f"s{i}".encode()
        roll = rng.random()
        if roll < 0.05 and cursors[i]:
            out.append((key, logs[i][cursors[i] - 1], []))  # a duplicate
        elif roll < 0.08:
            cursors[i] += 1  # a gap: every projection faults until a replay
            continue
        elif roll < 0.10:
            out.append((key, b"", [(RESET_HEADER, str(rng.randint(1, 3)).encode())]))
            continue
        out.append((key, logs[i][cursors[i]], []))
        cursors[i] += 1
    return out


def same_either_way(
    raws: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]],
    rng: random.Random,
    limits: Limits,
    keep: int,
) -> None:
    messages = [
        Message(key, value, "events", zlib.crc32(key or b"") % 2, offset, headers)
        for offset, (key, value, headers) in enumerate(raws)
    ]
    decoding, recalling = Table(0), Table(keep)
    start = 0
    while start < len(messages):
        end = start + rng.randint(1, 12)
        chunk = messages[start:end]
        assert seen(recalling.fold(chunk, limits)) == seen(decoding.fold(chunk, limits))
        start = end
    # Redelivered whole (a crash before the commit): still the same.
    assert seen(recalling.fold(messages, limits)) == seen(decoding.fold(messages, limits))
    assert recalling.rows == decoding.rows


EXPIRY = Limits(session_ttl=5_000)


@settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.randoms(use_true_random=False), st.sampled_from([Limits(), EXPIRY]), st.integers(1, 4))
def test_recalled_records_fold_exactly_as_decoded_rows(
    rng: random.Random, limits: Limits, keep: int
) -> None:
    same_either_way(realistic(rng), rng, limits, keep)  # type: ignore[arg-type]


@settings(
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.randoms(use_true_random=False), st.integers(1, 60))
def test_recalled_records_fold_hostile_input_exactly_as_decoded_rows(
    rng: random.Random, count: int
) -> None:
    same_either_way(extreme_messages(rng, count, prefix="r"), rng, Limits(), 100)


def test_a_record_is_handed_out_once_and_only_for_its_own_row() -> None:
    table = Table(10)
    limits = Limits()
    events = [orjson.dumps(e) for e in generate_session(random.Random(3), "a", 3)]
    first = table.fold([Message(b"a", events[0], "events", 0, 0)], limits)
    (change,) = first.sessions
    assert change.record is not None
    kept = table.kept
    assert kept.recall(b"a", 0, change.row + b" ") is None  # another row: not this record
    table.kept.remember(first.sessions)
    assert kept.recall(b"a", 0, change.row) is change.record
    assert kept.recall(b"a", 0, change.row) is None  # handed out already
    assert kept.recall(b"a", 1, change.row) is None  # another partition's key


def test_the_least_recently_written_records_go_first() -> None:
    table = Table(2)
    limits = Limits()
    event = orjson.dumps(generate_session(random.Random(3), "x", 1)[0])
    for offset, key in enumerate([b"a", b"b", b"a", b"c"]):
        table.fold([Message(key, event, "events", 0, offset)], limits)
    kept = table.kept
    assert len(kept) == 2
    assert kept.recall(b"b", 0, table.rows[(0, b"b")]) is None  # written before a's second
    assert kept.recall(b"a", 0, table.rows[(0, b"a")]) is not None
    assert kept.recall(b"c", 0, table.rows[(0, b"c")]) is not None


def test_keeping_none_keeps_nothing() -> None:
    table = Table(0)
    event = orjson.dumps(generate_session(random.Random(3), "x", 1)[0])
    table.fold([Message(b"a", event, "events", 0, 0)], Limits())
    assert len(table.kept) == 0
