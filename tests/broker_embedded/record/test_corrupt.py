"""Corrupt input: every defect is a CorruptRecordError naming the source, the byte position and
the batch's base offset; never IndexError, struct.error, MemoryError or a hang."""

from __future__ import annotations

import struct
import zlib
from typing import Literal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker_embedded.errors import CorruptRecordError, TornTailError
from broker_embedded.record.batch_layout import RECORD_BATCH_OVERHEAD
from broker_embedded.record.compression import CompressionType, compress
from broker_embedded.record.memory_records_builder import MemoryRecordsBuilder
from broker_embedded.record.record_batch import RecordBatch, crc32c_of
from broker_embedded.record.records import iter_batches
from broker_embedded.record.varint import encode_varint, encode_varlong

from ._java_ref import BATCHES_BY_NAME, JAVA_REF

Tail = Literal["stop", "error"]
SOURCE = "topic-0/00000000000000000000.log"
FILE_POSITION = 4096
FIRST = BATCHES_BY_NAME["batch_none"].data()  # 123 bytes, a valid batch before the bad one
BAD_AT = FILE_POSITION + len(FIRST)  # where the bad batch starts in the "file"
IDEMPOTENT = BATCHES_BY_NAME["batch_idempotent_none"].data()  # base offset 42
WHERE_42 = f"in {SOURCE} at byte {BAD_AT} (batch base offset 42)"


def recrc(data: bytes | bytearray) -> bytes:
    """The batch with a correct CRC, so that only the structural defect remains."""
    out = bytearray(data)
    struct.pack_into(">I", out, 17, crc32c_of(bytes(out[21:])))
    return bytes(out)


def with_header(data: bytes, **fields: int) -> bytes:
    offsets = {"batch_length": (8, ">i"), "magic": (16, ">b"), "attributes": (21, ">h")}
    offsets |= {"last_offset_delta": (23, ">i"), "records_count": (57, ">i")}
    out = bytearray(data)
    for name, value in fields.items():
        pos, fmt = offsets[name]
        struct.pack_into(fmt, out, pos, value)
    return bytes(out)


def with_records(data: bytes, records: bytes, count: int) -> bytes:
    """``data``'s header over a new (uncompressed) records section, lengths and CRC fixed."""
    out = bytearray(data[:RECORD_BATCH_OVERHEAD] + records)
    struct.pack_into(">i", out, 8, len(out) - 12)
    struct.pack_into(">i", out, 57, count)
    return recrc(out)


def record(body: bytes) -> bytes:
    return encode_varint(len(body)) + body


def decode_all(bad: bytes, tail: Tail = "error") -> None:
    """Walk ``FIRST + bad`` as a file at FILE_POSITION, validating and decoding everything."""
    for batch in iter_batches(FIRST + bad, SOURCE, base_position=FILE_POSITION, tail=tail):
        batch.ensure_valid()
        list(batch.records())


def expect_corrupt(bad: bytes, message: str, where: str = WHERE_42) -> CorruptRecordError:
    with pytest.raises(CorruptRecordError, match=message) as info:
        decode_all(bad)
    assert where in str(info.value)
    assert info.value.source == SOURCE
    return info.value


# -- the defects ----------------------------------------------------------------------------------


def test_bad_crc() -> None:
    bad = bytearray(IDEMPOTENT)
    bad[-1] ^= 0x01
    error = expect_corrupt(bytes(bad), "CRC mismatch: stored 0x585a17a9, computed 0x")
    assert (error.position, error.base_offset) == (BAD_AT, 42)


def test_truncated_batch() -> None:
    cut = IDEMPOTENT[:100]
    with pytest.raises(TornTailError, match="batch of 123 bytes but only 100 remain") as info:
        decode_all(cut)
    assert WHERE_42 in str(info.value)
    assert [b.base_offset for b in iter_batches(FIRST + cut, SOURCE, tail="stop")] == [0]
    with pytest.raises(CorruptRecordError, match="runs past the 100 bytes available") as info2:
        RecordBatch(cut, SOURCE, BAD_AT)
    assert WHERE_42 in str(info2.value)


@pytest.mark.parametrize("left", [1, 11, 12, 16])
def test_tail_too_short_for_a_header(left: int) -> None:
    with pytest.raises(TornTailError, match=f"{left} bytes left, too few for an entry header"):
        decode_all(IDEMPOTENT[:left])
    assert len(list(iter_batches(FIRST + IDEMPOTENT[:left], tail="stop"))) == 1


def test_batch_length_below_the_header() -> None:
    expect_corrupt(
        with_header(IDEMPOTENT, batch_length=40), "entry size 40 is below the minimum 49"
    )
    with pytest.raises(CorruptRecordError, match="batch length 40 is below the v2 header size"):
        RecordBatch(with_header(IDEMPOTENT, batch_length=40))


def test_forged_huge_batch_length() -> None:
    forged = with_header(IDEMPOTENT, batch_length=0x7FFFFFF0)
    with pytest.raises(TornTailError, match="batch of 2147483644 bytes but only 123 remain"):
        decode_all(forged)
    with pytest.raises(CorruptRecordError, match="batch of 2147483644 bytes runs past"):
        RecordBatch(forged, SOURCE, BAD_AT)


def test_forged_huge_record_length() -> None:
    bad = with_records(IDEMPOTENT, encode_varint(0x7FFFFFFF) + b"\x00" * 20, 1)
    expect_corrupt(bad, "record length 2147483647 at records byte 0 runs past batch")


def test_forged_negative_record_length() -> None:
    expect_corrupt(with_records(IDEMPOTENT, encode_varint(-7) + b"\x00" * 8, 1), "length -7")


def test_forged_huge_key_length() -> None:
    body = b"\x00" + encode_varlong(0) + encode_varint(0) + encode_varint(2**31 - 1) + b"k" * 4
    expect_corrupt(with_records(IDEMPOTENT, record(body), 1), "length 2147483647 runs past")


def test_forged_negative_value_length() -> None:
    body = b"\x00\x00\x00" + encode_varint(-1) + encode_varint(-3) + encode_varint(0)
    expect_corrupt(with_records(IDEMPOTENT, record(body), 1), "negative length -3")


def test_forged_header_count() -> None:
    body = b"\x00\x00\x00\x01\x01" + encode_varint(1_000_000)
    expect_corrupt(with_records(IDEMPOTENT, record(body), 1), "impossible header count 1000000")


def test_null_header_key() -> None:
    body = b"\x00\x00\x00\x01\x01" + encode_varint(1) + encode_varint(-1) + encode_varint(-1)
    expect_corrupt(with_records(IDEMPOTENT, record(body), 1), "null header key")


def test_record_with_stray_bytes() -> None:
    body = b"\x00\x00\x00\x01\x01\x00" + b"junk"
    expect_corrupt(with_records(IDEMPOTENT, record(body), 1), "has 4 stray bytes")


def test_offset_delta_beyond_last_offset_delta() -> None:
    body = b"\x00\x00" + encode_varint(9) + b"\x01\x01\x00"
    expect_corrupt(with_records(IDEMPOTENT, record(body), 1), r"offset delta 9 outside \[0, 3\]")


def test_over_long_varint() -> None:
    bad = with_records(IDEMPOTENT, b"\x80\x80\x80\x80\x80\x01" + b"\x00" * 10, 1)
    expect_corrupt(bad, "varint longer than 5 bytes in record at records byte 0")


def test_truncated_varint_at_the_end_of_the_records() -> None:
    body = b"\x00\x00\x00\x01\x01\x00"
    bad = with_records(IDEMPOTENT, record(body) + b"\x80", 2)
    expect_corrupt(bad, "varint truncated in record at records byte 7")


def test_unknown_magic() -> None:
    expect_corrupt(with_header(IDEMPOTENT, magic=3), "unknown magic 3")
    with pytest.raises(CorruptRecordError, match="magic 1 is not a v2 record batch"):
        RecordBatch(with_header(IDEMPOTENT, magic=1))


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_codec(codec: int) -> None:
    bad = recrc(with_header(IDEMPOTENT, attributes=codec))
    expect_corrupt(bad, f"unknown compression codec id {codec}")
    with pytest.raises(CorruptRecordError, match=f"unknown compression codec id {codec}"):
        _ = RecordBatch(bad).compression


def test_compressed_garbage() -> None:
    bad = recrc(with_header(IDEMPOTENT, attributes=CompressionType.GZIP))
    expect_corrupt(bad, "gzip data does not decompress")


def test_decompression_bomb_in_a_batch() -> None:
    bomb = compress(CompressionType.ZSTD, bytes(64 * 1024 * 1024))
    bad = with_records(IDEMPOTENT, bomb, 1)
    bad = recrc(with_header(bad, attributes=CompressionType.ZSTD))
    batch = RecordBatch(bad, SOURCE, BAD_AT)
    with pytest.raises(CorruptRecordError, match="limit of 1048576 bytes") as info:
        batch.records_bytes(max_size=1 << 20)
    assert WHERE_42 in str(info.value)


def test_records_count_larger_than_the_records() -> None:
    expect_corrupt(recrc(with_header(IDEMPOTENT, records_count=5)), "declares 5 records but")
    huge = recrc(with_header(IDEMPOTENT, records_count=2**31 - 1))
    expect_corrupt(huge, "declares 2147483647 records but holds only 4")


def test_records_count_smaller_than_the_records() -> None:
    expect_corrupt(recrc(with_header(IDEMPOTENT, records_count=3)), "left over after 3 records")


def test_negative_header_fields() -> None:
    expect_corrupt(with_header(IDEMPOTENT, records_count=-1), "negative record count -1")
    expect_corrupt(with_header(IDEMPOTENT, last_offset_delta=-2), "negative last offset delta -2")


def test_unknown_magic_of_a_legacy_position_in_the_middle() -> None:
    legacy_body = struct.pack(">bb", 0, 0) + struct.pack(">ii", -1, -1)
    legacy = struct.pack(">qiI", 7, len(legacy_body) + 4, zlib.crc32(legacy_body)) + legacy_body
    forged = legacy[:8] + struct.pack(">i", 2) + legacy[12:]
    expect_corrupt(
        forged, "entry size 2 is below the minimum 14 for magic 0", where=f"at byte {BAD_AT}"
    )


# -- fuzzing: nothing but CorruptRecordError ------------------------------------------------------


def _legacy_wrapper() -> bytes:
    inner = b""
    for offset in range(3):
        body = struct.pack(">bbq", 1, 0, 10 + offset) + struct.pack(">i", 1) + b"k"
        body += struct.pack(">i", 2) + b"v%d" % offset
        inner += struct.pack(">qiI", offset, len(body) + 4, zlib.crc32(body)) + body
    value = compress(CompressionType.GZIP, inner)
    body = struct.pack(">bbq", 1, 1, 12) + struct.pack(">i", -1) + struct.pack(">i", len(value))
    body += value
    return struct.pack(">qiI", 2, len(body) + 4, zlib.crc32(body)) + body


def _corpus() -> bytes:
    parts = [(JAVA_REF / "filerecords_00000000000000000000.log").read_bytes()]
    parts += [
        BATCHES_BY_NAME[n].data() for n in ("batch_snappy", "batch_lz4", "batch_control_commit")
    ]
    builder = MemoryRecordsBuilder(100, CompressionType.ZSTD)
    builder.append(None, 1, b"k", b"v" * 50, [("h", b"x")])
    parts += [builder.build(), _legacy_wrapper()]
    return b"".join(parts)


CORPUS = _corpus()


def _walk_everything(data: bytes, tail: Tail) -> None:
    try:
        for batch in iter_batches(data, "fuzz", tail=tail):
            batch.is_valid()
            _ = (batch.base_offset, batch.last_offset, batch.records_count, batch.compression)
            for rec in batch.records():
                assert rec.offset >= -(2**63)
    except CorruptRecordError as e:
        assert e.source == "fuzz" and e.position is not None and "in fuzz at byte" in str(e)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.tuples(st.integers(0, len(CORPUS) - 1), st.integers(0, 255)), max_size=6),
    st.integers(0, len(CORPUS)),
    st.sampled_from(["stop", "error"]),
)
def test_mutations_raise_only_corrupt_record_error(
    flips: list[tuple[int, int]], cut: int, tail: Tail
) -> None:
    data = bytearray(CORPUS)
    for pos, value in flips:
        data[pos] = value
    _walk_everything(bytes(data[:cut]), tail)


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=0, max_size=300))
def test_random_bytes_raise_only_corrupt_record_error(data: bytes) -> None:
    _walk_everything(data, "error")
    _walk_everything(b"\x00" * 8 + struct.pack(">i", len(data) - 4) + data, "error")
