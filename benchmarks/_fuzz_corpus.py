"""Seed inputs for the fuzz campaign and its tests: segments of every codec and format, with the
records they hold.

A seed is a run of entries as a ``.log`` file holds them, built in memory:

- record batches v2 (magic 2) by ``MemoryRecordsBuilder``, one seed per codec (none, gzip,
  snappy, lz4, zstd), a few batches of a few records each, keys, values and headers varied
  (null key, empty value, binary bytes), one idempotent and one transactional batch followed by
  a COMMIT marker (a control batch: no rows);
- legacy message sets (magic 0 and 1) by kafka-python's ``LegacyRecordBatchBuilder`` (an
  independent writer), uncompressed and wrapped (gzip, snappy, lz4; magic 0 lz4 is skipped, as
  Kafka writes it with a broken checksum);
- the real batches Kafka's Java client wrote (tests/fixtures/kafka-java-ref) and the segments of
  the real broker log dirs (tests/fixtures/kafka-logdirs), when those fixtures are present.

Each :class:`Seed` carries the rows a consumer must see (offset, key, value, headers) and the
entry boundaries (position, magic) so that an oracle can tell which bytes a mutation touched.
Seeds are immutable values; building them is deterministic (no clock, no random source).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from broker_embedded.record.compression import CompressionType
from broker_embedded.record.control_record import ControlRecordType
from broker_embedded.record.memory_records_builder import MemoryRecordsBuilder
from broker_embedded.record.records import iter_batches

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures"
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
TS0 = 1_700_000_000_000
_HEAD = struct.Struct(">qi")  # base offset, length: every entry's first 12 bytes

Row = tuple[int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]


@dataclass(frozen=True)
class Seed:
    """A run of entries and what reading it must give.

    ``rows``: (offset, key, value, headers) of every record a read_uncommitted consumer sees,
    in order. ``entries``: (position, magic) of each entry. ``name``: where it came from.
    """

    name: str
    data: bytes
    rows: tuple[Row, ...]
    entries: tuple[tuple[int, int], ...]

    @property
    def codec(self) -> str:
        return self.name.split("/")[1] if "/" in self.name else "none"


def entry_table(data: bytes) -> tuple[tuple[int, int], ...]:
    """(position, magic) of each whole entry of ``data`` (stops at a partial one)."""
    out, pos = [], 0
    while pos + 17 <= len(data):
        size = _HEAD.unpack_from(data, pos)[1] + 12
        if size < 12 or pos + size > len(data):
            break
        out.append((pos, data[pos + 16]))
        pos += size
    return tuple(out)


def rows_of(data: bytes) -> tuple[Row, ...]:
    """The rows of a valid run, by the Python decoder (control batches give none)."""
    rows: list[Row] = []
    for batch in iter_batches(data, tail="error"):
        if getattr(batch, "is_control", False):
            continue
        rows += [(r.offset, r.key, r.value, tuple(r.headers)) for r in batch.records()]
    return tuple(rows)


def make_seed(name: str, data: bytes) -> Seed:
    return Seed(name, data, rows_of(data), entry_table(data))


def _record_fields(i: int) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]:
    key = None if i % 4 == 1 else b"key-%d" % (i % 3)
    value = b"" if i % 5 == 2 else (b"value %d " % i) * (1 + i % 4) + bytes(range(i % 7))
    headers = [("h", b"x" * (i % 3)), ("n", None)] if i % 3 == 0 else []
    return key, value, headers


def v2_batch(
    base: int, codec: str, count: int, *, producer_id: int = -1, txn: bool = False
) -> bytes:
    """One v2 batch of ``count`` varied records from offset ``base``."""
    builder = MemoryRecordsBuilder(
        base,
        CompressionType[codec.upper()],
        producer_id=producer_id,
        producer_epoch=0 if producer_id >= 0 else -1,
        base_sequence=0 if producer_id >= 0 else -1,
        is_transactional=txn,
        partition_leader_epoch=3,
    )
    for i in range(count):
        key, value, headers = _record_fields(base + i)
        builder.append(base + i, TS0 + base + i, key, value, headers)
    return builder.build()


def commit_marker(offset: int, producer_id: int) -> bytes:
    builder = MemoryRecordsBuilder(
        offset,
        producer_id=producer_id,
        producer_epoch=0,
        is_transactional=True,
        is_control=True,
        partition_leader_epoch=3,
    )
    value = struct.pack(">hi", 0, 3)  # version 0, coordinator epoch 3
    builder.append(offset, TS0 + offset, struct.pack(">hh", 0, ControlRecordType.COMMIT), value)
    return builder.build()


def v2_run(codec: str, base: int = 0, batches: int = 4, per_batch: int = 5) -> bytes:
    """``batches`` batches of ``codec``: plain, idempotent, transactional + COMMIT marker."""
    out, offset = [], base
    for b in range(batches):
        pid = 7 if b == 1 else (9 if b == 2 else -1)
        out.append(v2_batch(offset, codec, per_batch, producer_id=pid, txn=b == 2))
        offset += per_batch
        if b == 2:
            out.append(commit_marker(offset, 9))
            offset += 1
    return b"".join(out)


def legacy_run(magic: int, codec: str, base: int = 0, messages: int = 6) -> bytes:
    """A legacy message set: uncompressed entries, or one wrapper per three messages."""
    from kafka.record.legacy_records import LegacyRecordBatchBuilder

    codec_id = CODECS.index(codec)
    out, offset = [], base
    per_wrapper = 1 if codec == "none" else 3
    for _ in range(0, messages, per_wrapper):
        builder = LegacyRecordBatchBuilder(magic, codec_id, 1 << 20)
        for j in range(per_wrapper):
            key, value, _ = _record_fields(offset + j)
            # magic 1 wrappers hold relative inner offsets, magic 0 absolute ones
            builder.append(j if magic == 1 else offset + j, TS0 + offset + j, key, value)
        entry = bytearray(builder.build())
        if codec == "none":
            struct.pack_into(">q", entry, 0, offset)
        else:  # the wrapper carries the offset of its last inner message
            struct.pack_into(">q", entry, 0, offset + per_wrapper - 1)
        out.append(bytes(entry))
        offset += per_wrapper
    return b"".join(out)


def builtin_seeds() -> list[Seed]:
    """Every codec of v2, and magic 0/1 with every codec Kafka writes for them."""
    seeds = [make_seed(f"v2/{c}", v2_run(c)) for c in CODECS]
    for magic in (0, 1):
        for codec in CODECS[:4]:
            if (magic, codec) == (0, "lz4"):
                continue
            seeds.append(make_seed(f"magic{magic}/{codec}", legacy_run(magic, codec)))
    return seeds


def fixture_seeds(limit_bytes: int = 16 * 1024) -> list[Seed]:
    """The real batches and segments of tests/fixtures (each cut to whole entries below
    ``limit_bytes`` so that mutation stays fast); none when the fixtures are absent."""
    seeds = []
    java = FIXTURES / "kafka-java-ref"
    for path in sorted(java.glob("batch_*.bin")) + sorted(java.glob("*.log")):
        seeds.append(make_seed(f"java/{path.stem}", path.read_bytes()))
    for path in sorted((FIXTURES / "kafka-logdirs").glob("*/*/*.log")):
        data = path.read_bytes()
        cut = 0
        for pos, _ in entry_table(data):
            end = pos + _HEAD.unpack_from(data, pos)[1] + 12
            if end > limit_bytes and cut:
                break
            cut = end
        data = data[:cut]
        if data:
            seeds.append(make_seed(f"logdir/{path.parent.name}/{path.name}", data))
    return seeds


def all_seeds() -> list[Seed]:
    return builtin_seeds() + fixture_seeds()
