"""The shared kernel primitives and the named entry layout: the layout against Kafka's field
order and sizes, the compiled CRC-32C against the crc32c package, varints against varint.py."""

from __future__ import annotations

import itertools
import random
import struct

import crc32c as crc32c_package
import numpy as np
import pytest
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from broker_embedded.record import batch_layout as layout
from broker_embedded.record import kernel_primitives as kp
from broker_embedded.record.entry_scan import last_offset, last_offsets, scan_window
from broker_embedded.record.memory_records_builder import MemoryRecordsBuilder
from broker_embedded.record.record_batch import HEADER_STRUCT
from broker_embedded.record.varint import encode_varint, encode_varlong


def _field_starts(fmt: str) -> list[int]:
    """Where each field of a big-endian struct format starts, then where the struct ends."""
    starts = [0]
    for code in fmt:
        starts.append(starts[-1] + struct.calcsize(">" + code))
    return starts


def test_v2_header_layout_is_kafkas() -> None:
    # baseOffset int64, batchLength int32, partitionLeaderEpoch int32, magic int8, crc uint32,
    # attributes int16, lastOffsetDelta int32, baseTimestamp, maxTimestamp, producerId int64,
    # producerEpoch int16, baseSequence int32, recordsCount int32
    assert _field_starts("qiibIhiqqqhii") == [
        layout.BASE_OFFSET_OFFSET,
        layout.BATCH_LENGTH_OFFSET,
        layout.PARTITION_LEADER_EPOCH_OFFSET,
        layout.MAGIC_OFFSET,
        layout.CRC_OFFSET,
        layout.ATTRIBUTES_OFFSET,
        layout.LAST_OFFSET_DELTA_OFFSET,
        layout.BASE_TIMESTAMP_OFFSET,
        layout.MAX_TIMESTAMP_OFFSET,
        layout.PRODUCER_ID_OFFSET,
        layout.PRODUCER_EPOCH_OFFSET,
        layout.BASE_SEQUENCE_OFFSET,
        layout.RECORDS_COUNT_OFFSET,
        layout.RECORD_BATCH_OVERHEAD,
    ]
    assert [0, 8, 12, 16, 17, 21, 23, 27, 35, 43, 51, 53, 57, 61] == _field_starts("qiibIhiqqqhii")
    assert HEADER_STRUCT.size == layout.RECORD_BATCH_OVERHEAD == 61
    assert layout.LOG_OVERHEAD == layout.BATCH_LENGTH_OFFSET + 4 == 12


def test_legacy_entry_layout_is_kafkas() -> None:
    # offset int64, size int32, crc uint32, magic int8, attributes int8, timestamp int64
    assert _field_starts("qiIbbq") == [
        layout.LEGACY_OFFSET_OFFSET,
        layout.LEGACY_SIZE_OFFSET,
        layout.LEGACY_CRC_OFFSET,
        layout.MAGIC_OFFSET,
        layout.LEGACY_ATTRIBUTES_OFFSET,
        layout.LEGACY_TIMESTAMP_OFFSET,
        26,
    ]


def test_entry_last_offset_on_ints_arrays_and_compiled() -> None:
    assert layout.entry_last_offset(100, 4) == 104
    got = layout.entry_last_offset(np.array([0, 7], np.int64), np.array([2, 0], np.int64))
    assert got.tolist() == [2, 7]
    assert kp.last_offset(100, 4) == 104


def test_last_offsets_of_a_scan_table_v2_and_legacy() -> None:
    builder = MemoryRecordsBuilder(5)
    for i in range(3):
        builder.append(None, 1_000 + i, b"k", b"v", [])
    legacy = LegacyRecordBatchBuilder(1, 0, 1 << 20)
    legacy.append(8, 2_000, b"k", b"v")
    data = np.frombuffer(builder.build() + bytes(legacy.build()), np.uint8)
    table = scan_window(data, 0, len(data), "<test>", 0).table
    assert last_offsets(table).tolist() == [7, 8]
    assert [last_offset(table, 0), last_offset(table, 1), last_offset(table, -1)] == [7, 8, 8]


def test_compiled_crc32c_equals_the_package() -> None:
    rng = random.Random(11)
    data = np.frombuffer(bytes(rng.randrange(256) for _ in range(1_000)), np.uint8)
    for start, end in itertools.product([0, 1, 3, 8], [8, 9, 15, 16, 17, 100, 1_000]):
        expected = crc32c_package.crc32c(data[start:end].tobytes())
        assert kp.crc32c(data, start, end) == expected, (start, end)
    assert kp.crc32c(np.frombuffer(b"123456789", np.uint8), 0, 9) == 0xE3069283


VALUES = [0, 1, -1, 63, -64, 64, 300, -300, 2**31 - 1, -(2**31)]
LONGS = [*VALUES, 2**31, 2**40, 2**63 - 1, -(2**63)]


@pytest.mark.parametrize("value", VALUES)
def test_varint_round_trip(value: int) -> None:
    encoded = encode_varint(value)
    buf = np.frombuffer(encoded, np.uint8)
    assert kp.read_varint(buf, 0, len(buf)) == (value, len(encoded))
    assert kp.varint_size(value) == len(encoded)
    out = np.zeros(10, np.uint8)
    assert kp.write_varint(out, 0, value) == len(encoded)
    assert out[: len(encoded)].tobytes() == encoded


@pytest.mark.parametrize("value", LONGS)
def test_varlong_round_trip(value: int) -> None:
    encoded = encode_varlong(value)
    buf = np.frombuffer(encoded, np.uint8)
    assert kp.read_varlong(buf, 0, len(buf)) == (value, len(encoded))
    out = np.zeros(10, np.uint8)
    assert kp.write_varint(out, 0, value) == len(encoded)
    assert out[: len(encoded)].tobytes() == encoded


def test_varint_errors() -> None:
    truncated = np.frombuffer(b"\x80", np.uint8)
    too_long = np.frombuffer(b"\x80\x80\x80\x80\x80\x01", np.uint8)
    assert kp.read_varint(truncated, 0, 1) == (kp.VARINT_TRUNCATED, -1)
    assert kp.read_varint(too_long, 0, 6) == (kp.VARINT_TOO_LONG, -1)
    assert kp.read_varint(truncated, -1, 1) == (kp.VARINT_TRUNCATED, -1)
    assert kp.read_varlong(truncated, 0, 1) == (kp.VARINT_TRUNCATED, -1)
    eleven = np.frombuffer(b"\xff" * 10 + b"\x01", np.uint8)
    assert kp.read_varlong(eleven, 0, 11) == (kp.VARINT_TOO_LONG, -1)


def test_big_endian_reads_and_writes() -> None:
    out = np.zeros(8, np.uint8)
    kp.put_be(out, 1, -2, 4)
    assert out.tobytes() == b"\x00\xff\xff\xff\xfe\x00\x00\x00"
    assert kp.be(out, 1, 4) == 0xFFFFFFFE
    assert kp.be_signed(out, 1, 4) == -2
    assert kp.be_signed(out, 0, 2) == 0xFF
    assert kp.le32(out, 1) == 0xFEFFFFFF
