"""Compressed input, inflated within bounds (docs/reliability.md, "Hostile inputs").

A producer may compress a record batch as well as it likes: the broker checks the
compressed size against ``message.max.bytes``, so a 30 kB zstd batch can hold a 900 MB
value. aiokafka (0.14.0, pinned) inflates every batch in full before the worker sees a
byte, and a worker that dies of it on every restart stalls its partitions for good. Two
things change that, made here from one ``Bounds`` (``replacements``) and put in aiokafka's
modules by ``stream.app.patches.install``:

- **Bounded codecs.** aiokafka's record modules call ``gzip_decode``, ``snappy_decode``,
  ``lz4_decode`` and ``zstd_decode`` by module-global name (the Cython build too);
  ``install`` puts decoders there that stop past ``limit`` bytes of output and raise
  ``InflateLimit``. None of them allocates more than the limit: zstd and gzip stream into
  a bounded read, snappy checks the length each block declares, lz4 inflates block by
  block (Kafka's frames have independent blocks, KIP-57).
- **A guarded fetch.** The fetcher builds ``MemoryRecords`` from each partition's part of
  a fetch response; ``GuardedRecords`` (the bounds bound in) wraps it. A batch that would
  inflate past the limit (or fails to inflate at all) becomes one record at its last
  offset whose value is ``Unread``: no payload, a reason, the batch's offsets and record
  count, and a bounded copy of its compressed bytes. The worker dead-letters it
  (``session.batch``) and the partition moves on. Past ``budget`` inflated bytes in one
  response the rest of it is left for the next fetch (aiokafka fetches again from the
  first batch not handed out), so one fetch holds at most ``budget`` plus one batch per
  partition.

Why not a different client: librdkafka leaves gzip, lz4 and snappy unbounded and stalls a
partition on a zstd bomb, and drives none of Faust's tables (docs/notes/017, 019).
"""

import struct
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Final

import cramjam
import zstandard

CODEC_NAMES: Final = {1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
COPY_BYTES: Final = 1024  # of the compressed batch, kept in the dead letter as evidence


class InflateLimit(ValueError):
    """A batch would inflate past the limit; nothing past it was inflated."""


def _over(limit: int) -> InflateLimit:
    return InflateLimit(f"inflates past {limit:,} bytes")


def zstd_decode(payload: Any, limit: int) -> bytes:
    reader = zstandard.ZstdDecompressor().stream_reader(
        bytes(payload), read_across_frames=True, read_size=65_536
    )
    out = bytearray()
    # read() returns what one frame step gives, not the whole request: loop to the limit.
    while len(out) <= limit:
        chunk = reader.read(limit + 1 - len(out))
        if not chunk:
            return bytes(out)
        out += chunk
    raise _over(limit)


def gzip_decode(payload: Any, limit: int) -> bytes:
    data = bytes(payload)
    out = bytearray()
    while data:  # a gzip stream may hold several members, one after another
        inflater = zlib.decompressobj(wbits=31)
        out += inflater.decompress(data, limit + 1 - len(out))
        if len(out) > limit or inflater.unconsumed_tail:
            raise _over(limit)
        if not inflater.eof:
            raise InflateLimit("truncated gzip stream")
        data = inflater.unused_data
    return bytes(out)


_XERIAL: Final = b"\x82SNAPPY\x00"


def snappy_decode(payload: Any, limit: int) -> bytes:
    data = memoryview(bytes(payload))
    if len(data) > 16 and bytes(data[:8]) == _XERIAL:  # Java's blocks (xerial framing)
        blocks = []
        at = 16
        while at < len(data):
            (size,) = struct.unpack_from("!i", data, at)
            blocks.append(data[at + 4 : at + 4 + size])
            at += 4 + size
    else:
        blocks = [data]
    total = 0
    for block in blocks:  # each raw block declares its length: checked before inflating
        total += cramjam.snappy.decompress_raw_len(block)
        if total > limit:
            raise _over(limit)
    return b"".join(bytes(cramjam.snappy.decompress_raw(block)) for block in blocks)


_LZ4_MAGIC: Final = 0x184D2204
_LZ4_BLOCK: Final = {4: 1 << 16, 5: 1 << 18, 6: 1 << 20, 7: 1 << 22}


def lz4_decode(payload: Any, limit: int) -> bytes:
    """An LZ4 frame (the format Kafka uses since KIP-57), block by block."""
    data = memoryview(bytes(payload))
    if len(data) < 7 or struct.unpack_from("<I", data)[0] != _LZ4_MAGIC:
        raise InflateLimit("not an LZ4 frame")
    flags, descriptor = data[4], data[5]
    if not flags & 0x20:
        raise InflateLimit("linked LZ4 blocks (Kafka writes independent blocks)")
    block_max = _LZ4_BLOCK.get((descriptor >> 4) & 0x7)
    if block_max is None:
        raise InflateLimit("LZ4 frame with an unknown block size")
    at = 6 + (8 if flags & 0x08 else 0) + (4 if flags & 0x01 else 0) + 1
    checksummed = bool(flags & 0x10)
    out = bytearray()
    while True:
        if at + 4 > len(data):
            raise InflateLimit("truncated LZ4 frame")
        (size,) = struct.unpack_from("<I", data, at)
        at += 4
        if size == 0:  # end mark (a content checksum may follow: not needed to read)
            return bytes(out)
        stored, size = bool(size & 0x80000000), size & 0x7FFFFFFF
        block = data[at : at + size]
        at += size + (4 if checksummed else 0)
        if len(out) + (size if stored else 0) > limit:
            raise _over(limit)
        if stored:
            out += block
            continue
        room = bytearray(min(block_max, limit + 1 - len(out)))
        try:
            size = cramjam.lz4.decompress_block_into(block, room)
        except Exception as error:  # past the room left, or not LZ4 at all
            if len(room) < block_max:
                raise _over(limit) from error
            raise InflateLimit(f"LZ4 block does not inflate: {error}") from error
        out += memoryview(room)[:size]
        if len(out) > limit:
            raise _over(limit)


DECODERS: Final[dict[str, Callable[[Any, int], bytes]]] = {
    "gzip_decode": gzip_decode,
    "snappy_decode": snappy_decode,
    "lz4_decode": lz4_decode,
    "zstd_decode": zstd_decode,
}


class Unread(bytes):
    """The value of a record the fetch could not read (``GuardedBatch``): the bytes are a
    bounded copy of the compressed batch; no producer can make one (it is not ``bytes``)."""

    reason: str
    records: int  # the input records it stands for

    @classmethod
    def of(cls, copy: bytes, reason: str, records: int) -> "Unread":
        made = cls(copy)
        made.reason, made.records = reason, records
        return made


@dataclass(frozen=True, slots=True)
class UnreadRecord:
    """What aiokafka's fetcher reads of a record (``PartitionRecords._consumer_record``)."""

    offset: int
    timestamp: int
    value: Unread
    timestamp_type: int = 0
    key: bytes | None = None
    checksum: None = None
    headers: tuple[tuple[str, bytes], ...] = ()


class GuardedBatch:
    """A record batch whose records are read within the limit; everything else is the
    batch's own (CRC, control and transaction flags, offsets)."""

    def __init__(self, batch: Any, raw: memoryview, inflated: list[int], meter: "Meter") -> None:
        self._batch = batch
        self._raw = raw  # the batch as fetched (header and compressed records)
        self._inflated = inflated  # the response's running total, shared
        self._meter = meter  # what this install's codecs last gave out

    def __getattr__(self, name: str) -> Any:
        return getattr(self._batch, name)

    def __next__(self) -> Any:  # a control batch's marker (never compressed)
        return next(self._batch)

    def __iter__(self) -> Iterator[Any]:
        batch = self._batch
        try:
            records = list(batch)  # inflates here, bounded by the codecs
        except Exception as error:  # past the limit, or a batch that does not inflate
            yield self._unread(error)
            return
        # What the codec gave out (an uncompressed batch: its own size), not a sum per record.
        compressed = batch.compression_type
        self._inflated[0] += self._meter.last if compressed else len(self._raw)
        yield from records

    def _unread(self, error: Exception) -> UnreadRecord:
        batch = self._batch
        first, last = batch.base_offset, batch.next_offset - 1
        count = max(1, min(last - first + 1, _record_count(self._raw, batch)))
        codec = CODEC_NAMES.get(getattr(batch, "compression_type", 0), "uncompressed")
        span = f"offset {first}" if first == last else f"offsets {first}..{last}"
        reason = (
            f"record batch ({span}, {count:,} record{'s' * (count != 1)}, {codec}) "
            f"not read: {error}"
        )
        copy = bytes(self._raw[_V2_RECORDS : _V2_RECORDS + COPY_BYTES])
        return UnreadRecord(
            last, getattr(batch, "max_timestamp", -1), Unread.of(copy, reason, count)
        )


_V2_RECORDS: Final = 61  # where a v2 batch's records begin (after its header)


def _record_count(raw: memoryview, batch: Any) -> int:
    """Records the v2 batch header declares (bytes 57..60); a legacy entry counts one."""
    if batch.magic == 2 and len(raw) >= _V2_RECORDS:
        return int(struct.unpack_from(">i", raw, 57)[0])
    return 1


class GuardedRecords:
    """``MemoryRecords`` of one partition's part of a fetch response: its batches come
    guarded, and once ``budget`` bytes are inflated the rest waits for the next fetch.
    aiokafka builds it with the buffer alone: ``replacements`` makes the class it is given
    with this install's budget and meter bound in."""

    def __init__(self, buffer: Any, budget: int, meter: "Meter") -> None:
        self._unpacked = _memory_records(buffer)
        self._raw = memoryview(buffer)
        self._at = 0  # where the next batch begins: offset (8), length (4), the rest
        self._inflated = [0]
        self._budget = budget
        self._meter = meter

    def has_next(self) -> bool:
        return self._inflated[0] < self._budget and bool(self._unpacked.has_next())

    def next_batch(self) -> Any:
        batch = self._unpacked.next_batch()
        if batch is None:
            return None
        at = self._at
        (length,) = struct.unpack_from(">i", self._raw, at + 8)
        self._at = at + 12 + length
        return GuardedBatch(batch, self._raw[at : self._at], self._inflated, self._meter)

    def size_in_bytes(self) -> int:
        return int(self._unpacked.size_in_bytes())


def _memory_records(buffer: Any) -> Any:
    from aiokafka.record.memory_records import MemoryRecords  # type: ignore[import-untyped]

    return MemoryRecords(buffer)


@dataclass(frozen=True, slots=True)
class Bounds:
    """What one fetch may inflate: ``limit`` bytes per batch, ``budget`` per partition per
    fetch (plus the batch that crosses it)."""

    limit: int
    budget: int

    @classmethod
    def of(cls, max_inflated_bytes: int) -> "Bounds":
        """The worker's: ``STREAM_MAX_INFLATED_BYTES`` is both bounds by design (note 017):
        a batch inflates to at most it, and a partition's part of a fetch stops once it
        inflated as much, so one fetch holds at most twice it per partition."""
        return cls(limit=max_inflated_bytes, budget=max_inflated_bytes)


class Meter:
    """How many bytes this install's codecs last gave out. aiokafka calls a codec and
    keeps its output; the batch that asked reads the size here right after (one fetch is
    unpacked at a time, on the consumer's thread). One per install, bound into its codecs
    and its ``GuardedRecords``: nothing of it outlives a re-install."""

    __slots__ = ("last",)

    def __init__(self) -> None:
        self.last = 0


def replacements(bounds: Bounds) -> dict[str, Any]:
    """aiokafka's names and what ``stream.app.patches.install`` puts in their place: the
    bounded codecs (by the name aiokafka's record modules call them) and the guarded
    ``MemoryRecords`` (by the name the fetcher builds it), sharing one new ``Meter``."""
    meter = Meter()
    budget = bounds.budget

    class BoundGuardedRecords(GuardedRecords):
        def __init__(self, buffer: Any) -> None:
            super().__init__(buffer, budget, meter)

    made: dict[str, Any] = {
        name: _bound(decoder, bounds.limit, meter) for name, decoder in DECODERS.items()
    }
    made["MemoryRecords"] = BoundGuardedRecords
    return made


def _bound(
    decoder: Callable[[Any, int], bytes], limit: int, meter: Meter
) -> Callable[[Any], bytes]:
    def decode(payload: Any) -> bytes:
        out = decoder(payload, limit)
        meter.last = len(out)
        return out

    decode.__name__ = decoder.__name__
    return decode


__all__ = [
    "Bounds",
    "GuardedBatch",
    "GuardedRecords",
    "InflateLimit",
    "Meter",
    "Unread",
    "replacements",
]
