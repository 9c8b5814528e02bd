"""What the guarded fetch (``stream.app.inflate``) costs per record, against aiokafka's own.

    python -m benchmarks.unpack

One partition's part of a fetch response (20 batches of 500 records of ~290 bytes, the
size of a dsh event), uncompressed and zstd, unpacked by aiokafka's ``PartitionRecords``
over its ``MemoryRecords`` and over ``GuardedRecords``, alternating, best of 9. Prints the
time per fetch and per record of each and their ratio (docs/notes/017).
"""

import time
from collections.abc import Callable
from typing import Any

from aiokafka.consumer.fetcher import PartitionRecords  # type: ignore[import-untyped]
from aiokafka.record.default_records import (  # type: ignore[import-untyped]
    DefaultRecordBatchBuilder,
)
from aiokafka.record.memory_records import MemoryRecords  # type: ignore[import-untyped]
from aiokafka.structs import TopicPartition  # type: ignore[import-untyped]

from stream.app import inflate, patches

BATCHES, RECORDS = 20, 500


def _batch(codec: int, base: int) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 31,
    )
    for i in range(RECORDS):
        value = b'{"type":"assistant/chunk","seq":%d,"time":1,"data":{"text":"%s"}}' % (
            i,
            b"x" * 220,
        )
        builder.append(offset=i, timestamp=1, key=b"session-%d" % (i % 50), value=value, headers=[])
    raw = bytearray(builder.build())
    raw[0:8] = base.to_bytes(8, "big")
    return bytes(raw)


def _unpack(records: Callable[[bytes], Any], response: bytes) -> float:
    started = time.perf_counter()
    for _ in range(5):
        list(
            PartitionRecords(
                TopicPartition("in", 0),
                records(response),
                [],
                0,
                None,
                None,
                True,
                "read_uncommitted",
            )
        )
    return (time.perf_counter() - started) / 5


def main() -> None:
    placed = patches.install(patches.Patches(inflate.Bounds.of(4_000_000)))
    guarded_records = placed["aiokafka.consumer.fetcher", "MemoryRecords"]
    count = BATCHES * RECORDS
    for codec, name in ((0, "uncompressed"), (4, "zstd")):
        response = b"".join(_batch(codec, n * RECORDS) for n in range(BATCHES))
        times: dict[str, list[float]] = {"aiokafka": [], "guarded": []}
        for _ in range(9):
            times["aiokafka"].append(_unpack(MemoryRecords, response))
            times["guarded"].append(_unpack(guarded_records, response))
        plain, guarded = min(times["aiokafka"]), min(times["guarded"])
        print(
            f"{name:>12}: {count:,} records in {len(response):,} B:"
            f" aiokafka {plain * 1e3:.2f} ms ({plain / count * 1e9:.0f} ns/record),"
            f" guarded {guarded * 1e3:.2f} ms ({guarded / count * 1e9:.0f} ns/record),"
            f" {guarded / plain:.2f}x"
        )


if __name__ == "__main__":
    main()
