"""Compressed input is inflated within bounds (``stream.app.inflate``, put in aiokafka's
modules by ``stream.app.patches``).

Batches are built with aiokafka's own builder and encoders (what a producer sends) and read
back through aiokafka's own ``MemoryRecords``, so the bounded decoders are checked against
the real formats. Memory is measured with ``tracemalloc`` (the decoders' buffers are
Python objects) around a bomb of each codec.
"""

from __future__ import annotations

import gzip
import tracemalloc
from collections.abc import Callable
from typing import Any

import cramjam
import pytest
from aiokafka import codec as aiokafka_codec  # type: ignore[import-untyped]
from aiokafka.consumer.fetcher import PartitionRecords  # type: ignore[import-untyped]
from aiokafka.record.default_records import (  # type: ignore[import-untyped]
    DefaultRecordBatchBuilder,
)
from aiokafka.structs import TopicPartition  # type: ignore[import-untyped]

from stream.app import inflate, patches
from stream.app.inflate import GuardedRecords, InflateLimit, Unread
from stream.app.internals import PATCHED

LIMIT = 1_000_000
CODECS = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
ENCODERS: dict[str, Callable[[bytes], bytes]] = {
    "gzip": aiokafka_codec.gzip_encode,
    "snappy": lambda data: aiokafka_codec.snappy_encode(data, xerial_compatible=True),
    "lz4": aiokafka_codec.lz4_encode,
    "zstd": aiokafka_codec.zstd_encode,
}
DECODERS = {
    "gzip": inflate.gzip_decode,
    "snappy": inflate.snappy_decode,
    "lz4": inflate.lz4_decode,
    "zstd": inflate.zstd_decode,
}


@pytest.mark.parametrize("codec", sorted(CODECS))
def test_every_codec_reads_what_a_producer_writes(codec: str) -> None:
    data = b"".join(b"%d:" % i + bytes(range(i % 251)) for i in range(3000))
    assert DECODERS[codec](ENCODERS[codec](data), len(data)) == data


def test_raw_snappy_and_multi_member_gzip_are_read() -> None:
    data = b"context" * 1000
    assert inflate.snappy_decode(cramjam.snappy.compress_raw(data), len(data)) == data
    members = gzip.compress(data[:3000]) + gzip.compress(data[3000:])
    assert inflate.gzip_decode(members, len(data)) == data


@pytest.mark.parametrize("codec", sorted(CODECS))
def test_a_bomb_raises_without_inflating_past_the_limit(codec: str) -> None:
    bomb = ENCODERS[codec](b"\0" * 64_000_000)
    assert len(bomb) < 4_000_000  # the ratio that makes it a bomb
    tracemalloc.start()
    try:
        with pytest.raises(InflateLimit):
            DECODERS[codec](bomb, LIMIT)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 3 * LIMIT + 2 * len(bomb), f"{codec} held {peak:,} bytes"


@pytest.mark.parametrize("codec", sorted(CODECS))
def test_exactly_the_limit_is_allowed(codec: str) -> None:
    data = b"x" * LIMIT
    assert DECODERS[codec](ENCODERS[codec](data), LIMIT) == data
    with pytest.raises(InflateLimit):
        DECODERS[codec](ENCODERS[codec](data + b"x"), LIMIT)


def _batch(codec: int, base: int, values: list[bytes], key: bytes | None = b"s") -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 31,
    )
    for index, value in enumerate(values):
        builder.append(offset=index, timestamp=1_700_000_000_000, key=key, value=value, headers=[])
    raw = bytearray(builder.build())
    raw[0:8] = base.to_bytes(8, "big")  # the offsets a broker assigns
    return bytes(raw)


def _read(response: bytes, budget: int = 10**9) -> tuple[list[Any], int]:
    """The records aiokafka's fetcher hands out of one partition's response, and the
    offset it fetches from next."""
    placed = patches.install(patches.Patches(inflate.Bounds(limit=LIMIT, budget=budget)))
    guarded = placed["aiokafka.consumer.fetcher", "MemoryRecords"]
    records = PartitionRecords(
        TopicPartition("in", 0),
        guarded(response),
        [],
        0,
        None,
        None,
        True,
        "read_uncommitted",
    )
    out = list(records)
    return out, records.next_fetch_offset


@pytest.mark.parametrize("codec", sorted(CODECS))
def test_a_bomb_batch_becomes_one_unread_record_and_the_partition_moves_on(codec: str) -> None:
    number = CODECS[codec]
    response = (
        _batch(number, 0, [b'{"seq":0}', b'{"seq":1}'])
        + _batch(number, 2, [b"\0" * 30_000_000, b"\0" * 30_000_000, b"\0"])
        + _batch(number, 5, [b'{"seq":2}'])
    )
    records, next_offset = _read(response)
    assert [r.offset for r in records] == [0, 1, 4, 5]
    assert next_offset == 6
    unread = records[2]
    assert type(unread.value) is Unread and unread.key is None
    assert unread.value.records == 3
    assert f"offsets 2..4, 3 records, {codec}" in unread.value.reason
    assert "inflates past 1,000,000 bytes" in unread.value.reason
    assert 0 < len(unread.value) <= inflate.COPY_BYTES
    assert [r.value for r in records if r is not unread] == [
        b'{"seq":0}',
        b'{"seq":1}',
        b'{"seq":2}',
    ]


def test_a_batch_that_does_not_inflate_is_unread_too() -> None:
    good = _batch(4, 0, [b"{}"])
    broken = bytearray(_batch(4, 1, [b"y" * 5000]))
    broken[70:80] = b"\xff" * 10  # inside the compressed records; CRC fixed below
    from aiokafka.record.util import calc_crc32c  # type: ignore[import-untyped]

    broken[17:21] = calc_crc32c(bytes(broken[21:])).to_bytes(4, "big")
    records, next_offset = _read(good + bytes(broken))
    assert [r.offset for r in records] == [0, 1]
    assert type(records[1].value) is Unread
    assert next_offset == 2


def test_the_budget_leaves_the_rest_of_a_response_for_the_next_fetch() -> None:
    response = b"".join(_batch(4, i, [b"v" * 400_000]) for i in range(5))
    records, next_offset = _read(response, budget=1_000_000)
    # 400 kB, 800 kB, then 1.2 MB crosses the budget: two batches wait for the next fetch
    assert [r.offset for r in records] == [0, 1, 2]
    assert next_offset == 3


def test_install_reaches_every_name_aiokafka_calls() -> None:
    """The names the patch point replaces exist in the pinned aiokafka (an upgrade that
    moves them fails here, not in production), and each holds this module's code."""
    import importlib

    patches.install(patches.Patches(inflate.Bounds(limit=LIMIT, budget=LIMIT)))
    fetcher = importlib.import_module("aiokafka.consumer.fetcher")
    assert issubclass(fetcher.MemoryRecords, GuardedRecords)
    for name, names in PATCHED.items():
        module = importlib.import_module(name)
        for decoder in (n for n in names if n.endswith("_decode")):
            assert getattr(module, decoder).__module__ == inflate.__name__, (name, decoder)
    assert "zstd_decode" in PATCHED["aiokafka.record._crecords.default_records"]


def test_installing_again_with_other_bounds_leaves_nothing_of_the_last() -> None:
    """Re-installable: each install's codecs and records carry their own bounds (nothing
    is kept on a class or in a module global), the last one installed is what runs."""
    response = b"".join(_batch(4, i, [b"v" * 400_000]) for i in range(5))
    assert [r.offset for r in _read(response, budget=1_000_000)[0]] == [0, 1, 2]
    assert [r.offset for r in _read(response)[0]] == [0, 1, 2, 3, 4]
    assert [r.offset for r in _read(response, budget=500_000)[0]] == [0, 1]
    small = patches.install(patches.Patches(inflate.Bounds.of(300_000)))
    records = list(
        PartitionRecords(
            TopicPartition("in", 0),
            small["aiokafka.consumer.fetcher", "MemoryRecords"](response),
            [],
            0,
            None,
            None,
            True,
            "read_uncommitted",
        )
    )
    # each batch past this install's limit; an unread batch inflated nothing of the budget
    assert [type(r.value) for r in records] == [Unread] * 5
    assert "inflates past 300,000 bytes" in records[0].value.reason


def test_one_setting_is_both_bounds() -> None:
    assert inflate.Bounds.of(4_000_000) == inflate.Bounds(limit=4_000_000, budget=4_000_000)
