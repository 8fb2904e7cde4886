"""Legacy message sets (magic 0 and 1): other writers' bytes, real fetch captures, Kafka's rules."""

from __future__ import annotations

import struct
import zlib

import kafka.codec
import pytest
from aiokafka.record.legacy_records import LegacyRecordBatchBuilder as AioLegacyBuilder
from kafka.record.legacy_records import LegacyRecordBatchBuilder as KafkaPythonLegacyBuilder

from broker_embedded.errors import CorruptRecordError, TornTailError
from broker_embedded.record.compression import CompressionType, compress, xxh32
from broker_embedded.record.legacy_record import LegacyRecordBatch
from broker_embedded.record.memory_records_builder import MemoryRecordsBuilder
from broker_embedded.record.record_batch import (
    CREATE_TIME,
    LOG_APPEND_TIME,
    NO_TIMESTAMP_TYPE,
    Record,
    RecordBatch,
)
from broker_embedded.record.records import iter_batches

from ._java_ref import KAFKA_GO
from ._peers import aiokafka_read_records, kafka_python_read_records

GZIP, SNAPPY, LZ4, ZSTD = (CompressionType(i) for i in range(1, 5))
ROWS = [
    (1_600_000_000_000, b"k0", b"v0"),
    (1_600_000_000_007, None, b"v1"),
    (1_600_000_000_003, b"k2", None),
    (1_600_000_000_004, b"", b""),
]


def _bytes32(data: bytes | None) -> bytes:
    return struct.pack(">i", -1) if data is None else struct.pack(">i", len(data)) + data


def message(
    offset: int,
    magic: int,
    key: bytes | None,
    value: bytes | None,
    *,
    attributes: int = 0,
    timestamp: int = -1,
) -> bytes:
    """One legacy message, encoded here from the format's definition."""
    body = struct.pack(">bb", magic, attributes)
    if magic == 1:
        body += struct.pack(">q", timestamp)
    body += _bytes32(key) + _bytes32(value)
    return struct.pack(">qiI", offset, len(body) + 4, zlib.crc32(body)) + body


def wrapper(
    offset: int, magic: int, codec: int, inner: bytes, *, timestamp: int = 0, lat: bool = False
) -> bytes:
    value = compress(CompressionType(codec), inner)
    attributes = codec | (0x08 if lat else 0)
    return message(offset, magic, None, value, attributes=attributes, timestamp=timestamp)


def inner_set(magic: int, offsets: list[int]) -> bytes:
    return b"".join(message(o, magic, b"k%d" % o, b"v%d" % o, timestamp=1000 + o) for o in offsets)


def read(data: bytes, source: str = "<buffer>") -> list[Record]:
    return [r for b in iter_batches(data, source, tail="error") for r in b.records()]


def expected_rows(magic: int, first_offset: int = 0) -> list[Record]:
    return [
        Record(first_offset + i, ts if magic == 1 else -1, key, value)
        for i, (ts, key, value) in enumerate(ROWS)
    ]


# -- other writers --------------------------------------------------------------------------------


def _kafka_python_missing(magic: int, codec: int) -> str | None:
    if codec == 2 and not kafka.codec.has_snappy():
        return "kafka-python has no snappy codec here (python-snappy is not installed)"
    if (magic, codec) == (0, 3) and kafka.codec.xxhash is None:
        return "kafka-python writes magic 0 lz4 (KAFKA-3160 checksum) only with xxhash installed"
    return None


@pytest.mark.parametrize("codec", [0, 1, 2, 3])
@pytest.mark.parametrize("magic", [0, 1])
def test_kafka_python_legacy_writer(magic: int, codec: int) -> None:
    if reason := _kafka_python_missing(magic, codec):
        pytest.skip(reason)
    builder = KafkaPythonLegacyBuilder(magic, codec, 1 << 20)
    for offset, (ts, key, value) in enumerate(ROWS):
        builder.append(offset, ts, key, value)
    data = bytes(builder.build())
    batches = list(iter_batches(data, "kafka-python", tail="error"))
    assert len(batches) == (1 if codec else 4)
    assert all(isinstance(b, LegacyRecordBatch) and b.is_valid() for b in batches)
    assert [int(b.compression) for b in batches] == [codec] * len(batches)
    assert read(data) == expected_rows(magic) == kafka_python_read_records(data)


@pytest.mark.parametrize(
    ("magic", "codec"), [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2), (1, 3)]
)
def test_aiokafka_legacy_writer(magic: int, codec: int) -> None:
    builder = AioLegacyBuilder(magic, codec, 1 << 20)
    for offset, (ts, key, value) in enumerate(ROWS):
        builder.append(offset, ts, key, value)
    data = bytes(builder.build())
    assert all(b.is_valid() for b in iter_batches(data, tail="error"))
    assert read(data) == expected_rows(magic) == aiokafka_read_records(data)


def test_plain_messages_header_fields() -> None:
    data = message(41, 0, b"k", b"v") + message(42, 1, None, b"v", timestamp=77, attributes=8)
    v0, v1 = iter_batches(data, "plain.log", tail="error")
    assert (v0.magic, v0.base_offset, v0.last_offset, v0.next_offset) == (0, 41, 41, 42)
    assert (v0.timestamp_type, v0.max_timestamp, v0.records_count) == (NO_TIMESTAMP_TYPE, -1, 1)
    assert (v0.position, v0.size_in_bytes, v0.source) == (0, 12 + 14 + 2, "plain.log")
    assert (v1.position, v1.size_in_bytes) == (28, 12 + 22 + 1)
    assert (v1.timestamp_type, v1.max_timestamp, v1.attributes) == (LOG_APPEND_TIME, 77, 8)
    assert v0.crc == zlib.crc32(bytes(v0.buffer[16:])) == v0.compute_crc()
    for b in (v0, v1):
        assert (b.producer_id, b.producer_epoch, b.base_sequence, b.last_sequence) == (-1,) * 4
        assert (b.partition_leader_epoch, b.delete_horizon_ms) == (-1, None)
        assert not (b.is_transactional or b.is_control or b.has_delete_horizon or b.is_compressed)
    assert read(data) == [Record(41, -1, b"k", b"v"), Record(42, 77, None, b"v")]


# -- wrappers -------------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", [1, 2, 3])
def test_magic1_wrapper_offsets_are_relative(codec: int) -> None:
    data = wrapper(102, 1, codec, inner_set(1, [0, 1, 2]), timestamp=1002)
    (batch,) = iter_batches(data, tail="error")
    assert (batch.base_offset, batch.last_offset, batch.records_count) == (100, 102, 3)
    assert (batch.timestamp_type, batch.max_timestamp) == (CREATE_TIME, 1002)
    assert read(data) == [Record(100 + i, 1000 + i, b"k%d" % i, b"v%d" % i) for i in range(3)]
    assert read(data) == aiokafka_read_records(data)


def test_magic1_wrapper_with_offset_zero_keeps_inner_offsets() -> None:
    # Produce data from some librdkafka versions: Kafka keeps the inner offsets as they are.
    data = wrapper(0, 1, 1, inner_set(1, [0, 1, 2]))
    (batch,) = iter_batches(data, tail="error")
    assert (batch.base_offset, batch.last_offset) == (0, 0)
    assert [r.offset for r in batch.records()] == [0, 1, 2]


def test_magic0_wrapper_offsets_are_absolute() -> None:
    data = wrapper(52, 0, 1, inner_set(0, [50, 51, 52]))
    (batch,) = iter_batches(data, tail="error")
    assert (batch.base_offset, batch.last_offset, batch.max_timestamp) == (50, 52, -1)
    assert read(data) == [
        Record(50 + i, -1, b"k%d" % (50 + i), b"v%d" % (50 + i)) for i in range(3)
    ]
    assert read(data) == kafka_python_read_records(data) == aiokafka_read_records(data)


def test_log_append_time_wrapper_stamps_every_inner_record() -> None:
    data = wrapper(2, 1, 1, inner_set(1, [0, 1, 2]), timestamp=5555, lat=True)
    (batch,) = iter_batches(data, tail="error")
    assert (batch.timestamp_type, batch.max_timestamp) == (LOG_APPEND_TIME, 5555)
    assert [r.timestamp for r in batch.records()] == [5555, 5555, 5555]
    assert read(data) == kafka_python_read_records(data)


def test_inner_magic_may_differ_from_the_wrapper() -> None:
    v0_in_v1 = wrapper(1, 1, 1, inner_set(0, [0, 1]), timestamp=9, lat=True)
    assert [(r.offset, r.timestamp) for r in read(v0_in_v1)] == [(0, -1), (1, -1)]
    v1_in_v0 = wrapper(6, 0, 1, inner_set(1, [5, 6]))
    assert [(r.offset, r.timestamp) for r in read(v1_in_v0)] == [(5, 1005), (6, 1006)]


def test_magic0_lz4_with_kafka_3160_header_checksum() -> None:
    inner = inner_set(0, [7, 8])
    frame = bytearray(compress(LZ4, inner))
    frame[6] = (xxh32(bytes(frame[:6])) >> 8) & 0xFF  # what Kafka 0.8/0.9 wrote
    data = message(8, 0, None, bytes(frame), attributes=3)
    assert read(data) == [Record(7, -1, b"k7", b"v7"), Record(8, -1, b"k8", b"v8")]
    # Magic 1 frames must carry the right checksum, as in Kafka.
    v1 = message(1, 1, None, bytes(frame), attributes=3)
    with pytest.raises(CorruptRecordError, match="lz4 data does not decompress"):
        read(v1)


def test_mixed_magics_in_one_run() -> None:
    v2 = MemoryRecordsBuilder(3)
    v2.append(None, 2000, b"k3", b"v3")
    data = message(0, 0, b"a", b"0") + wrapper(2, 1, 1, inner_set(1, [0, 1])) + v2.build()
    batches = list(iter_batches(data, tail="error"))
    assert [(type(b).__name__, b.magic) for b in batches] == [
        ("LegacyRecordBatch", 0),
        ("LegacyRecordBatch", 1),
        ("RecordBatch", 2),
    ]
    assert [r.offset for r in read(data)] == [0, 1, 2, 3]
    assert isinstance(batches[2], RecordBatch)


def test_torn_legacy_tail() -> None:
    data = message(0, 1, b"a", b"0", timestamp=1) + message(1, 1, b"b", b"1", timestamp=2)
    cut = data[:-3]
    assert [r.offset for b in iter_batches(cut, "t.log") for r in b.records()] == [0]
    with pytest.raises(TornTailError, match="in t.log at byte 36 .batch base offset 1."):
        list(iter_batches(cut, "t.log", tail="error"))


# -- corrupt wrappers -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "message_"),
    [
        (
            wrapper(1, 1, 1, wrapper(1, 1, 1, inner_set(1, [0, 1]))),
            "inner message at byte 0 is compressed",
        ),
        (wrapper(0, 1, 1, b""), "compressed message set holds no inner messages"),
        (message(5, 1, None, None, attributes=1), "compressed message with a null value"),
        (wrapper(5, 1, 2, inner_set(1, [0, 1])[:-2]), "inner message at byte 38"),
        (message(5, 1, None, b"\x00" * 30, attributes=4), "zstd compression in a magic 1"),
        (message(5, 0, None, b"\x00" * 30, attributes=5), "unknown compression codec id 5"),
        (message(5, 1, None, b"garbage", attributes=1), "gzip data does not decompress"),
        (wrapper(1, 1, 1, inner_set(1, [0, 1, 2])), "wrapper offset 1 is below the last inner"),
        (wrapper(1, 1, 1, inner_set(1, [0])[:16] + b"\x02" + inner_set(1, [0])[17:]), "magic 2"),
    ],
)
def test_corrupt_wrappers(data: bytes, message_: str) -> None:
    (batch,) = iter_batches(b"\x00" * 10 + data, "w.log", start=10, base_position=1000)
    with pytest.raises(CorruptRecordError, match=message_) as info:
        list(batch.records())
    offset = struct.unpack_from(">q", data)[0]
    assert f"in w.log at byte 1010 (batch base offset {offset})" in str(info.value)


@pytest.mark.parametrize(
    ("data", "message_"),
    [
        (message(3, 1, b"k", b"v") + b"v", "1 stray bytes after the value"),
        (
            message(3, 0, b"key", b"v").replace(b"\x00\x00\x00\x03key", b"\x7f\x00\x00\x03key"),
            "key length 2130706435 runs past the message",
        ),
        (message(3, 1, b"k", None)[:-4] + b"\xff\xff\xff\xfe", "value length -2 runs past"),
    ],
)
def test_corrupt_plain_messages(data: bytes, message_: str) -> None:
    with pytest.raises(CorruptRecordError, match=message_) as info:
        LegacyRecordBatch(_fix_size(data), "m.log", 64)
    assert "in m.log at byte 64 (batch base offset 3)" in str(info.value)


def _fix_size(data: bytes) -> bytes:
    return data[:8] + struct.pack(">i", len(data) - 12) + data[12:]


def test_crc_mismatch() -> None:
    data = bytearray(message(9, 1, b"k", b"v", timestamp=4))
    data[-1] ^= 0xFF
    batch = LegacyRecordBatch(bytes(data), "c.log", 128)
    assert not batch.is_valid()
    with pytest.raises(CorruptRecordError, match="CRC mismatch") as info:
        batch.ensure_valid()
    assert "in c.log at byte 128 (batch base offset 9)" in str(info.value)


# -- real fetch responses (kafka-go captures) -----------------------------------------------------

GO_MESSAGES = {
    "a": (b"alpha", b'{"count":0,"filler":"aaaaaaaaaa"}'),
    "b": (b"beta", b'{"count":0,"filler":"bbbbbbbbbb"}'),
    "c": (b"gamma", b'{"count":0,"filler":"cccccccccc"}'),
    "d": (b"delta", b'{"count":0,"filler":"dddddddddd"}'),
    "e": (b"epsilon", b'{"count":0,"filler":"eeeeeeeeee"}'),
    "f": (b"zeta", b'{"count":0,"filler":"ffffffffff"}'),
    "g": (b"eta", b'{"count":0,"filler":"gggggggggg"}'),
    "h": (b"theta", b'{"count":0,"filler":"hhhhhhhhhh"}'),
}
# kafka-go's TestMessageFixtures: which messages each capture holds, in order.
GO_FIXTURES = {
    "v2b-v1": "abab",
    "v2bc-v1c": "abab",
    "v2bc-v1": "abcd",
    "v2bc-v1-v1c": "abcdef",
    "v1-v1": "abcd",
    "v1c-v1c": "abcd",
    "v1c-v1-v1c": "abcdef",
    "v2-v2": "abcd",
    "v2c-v2c": "abcd",
    "v2c-v2-v2c": "abcdef",
    "v1-v1c-v2-v2c-v2b-v2b-v2b-v2bc-v1b-v1bc": "ababcdcdefefghghghgh",
}


def fetch_v10_record_set(data: bytes) -> bytes:
    """The records of a one-topic, one-partition Fetch v10 response (with its size prefix)."""
    pos = 4 + 4 + 4 + 2 + 4  # size, correlation id, throttle time, error code, session id
    topics, name_len = struct.unpack_from(">ih", data, pos)
    pos += 6 + name_len
    (partitions,) = struct.unpack_from(">i", data, pos)
    pos += 4 + 4 + 2 + 8 + 8 + 8  # count, index, error, high watermark, LSO, log start offset
    aborted, size = struct.unpack_from(">ii", data, pos)
    pos += 8
    assert (topics, partitions, aborted, pos + size) == (1, 1, -1, len(data))
    return data[pos:]


@pytest.mark.parametrize("name", sorted(GO_FIXTURES))
def test_kafka_go_fetch_captures(name: str) -> None:
    records_set = fetch_v10_record_set((KAFKA_GO / f"{name}.bin").read_bytes())
    batches = list(iter_batches(records_set, name, tail="stop"))
    assert all(b.is_valid() for b in batches)
    magics = "".join(f"v{b.magic}" + ("c" if int(b.compression) else "") for b in batches)
    assert {1, 2} >= {b.magic for b in batches}
    assert "v1" in magics or "v2" in magics
    records = [r for b in batches for r in b.records()]
    assert [(r.key, r.value) for r in records] == [GO_MESSAGES[m] for m in GO_FIXTURES[name]]
    assert [r.offset for r in records] == list(range(len(records)))
    assert all(r.timestamp > 1_633_000_000_000 and r.headers == () for r in records)
    assert records == kafka_python_read_records(records_set)


def test_kafka_go_mixed_capture_layout() -> None:
    name = "v1-v1c-v2-v2c-v2b-v2b-v2b-v2bc-v1b-v1bc"
    records_set = fetch_v10_record_set((KAFKA_GO / f"{name}.bin").read_bytes())
    layout = [
        (b.magic, int(b.compression), b.base_offset, b.last_offset)
        for b in iter_batches(records_set, name, tail="error")
    ]
    assert layout == [
        (1, 0, 0, 0),
        (1, 0, 1, 1),
        (1, 1, 2, 2),
        (1, 1, 3, 3),
        (2, 0, 4, 4),
        (2, 0, 5, 5),
        (2, 1, 6, 6),
        (2, 1, 7, 7),
        (2, 0, 8, 9),
        (2, 1, 10, 11),
        (2, 0, 12, 13),
        (2, 1, 14, 15),
        (1, 0, 16, 16),
        (1, 0, 17, 17),
        (1, 1, 18, 19),
    ]


# -- inner offsets a v2 batch cannot hold: both decoders reject them alike -------------------------

BAD_INNER_OFFSETS = [
    # (wrapper magic, wrapper offset, inner offsets, the reason)
    (1, 10, [5, 3, 7], "inner message 1: offset 6 follows 8: offsets must increase strictly"),
    (1, 0, [3, 1], "inner message 1: offset 1 follows 3: offsets must increase strictly"),
    (0, 5, [2, 2], "inner message 1: offset 2 follows 2: offsets must increase strictly"),
    (
        0,
        2**31,
        [0, 2**31],
        "inner message 1: offset 2147483648 is not within int32 range above base offset 0",
    ),
    (1, 5, [-100, 0], "inner message 0: base offset -95 outside [0, 2^63)"),
    (0, 3, [-2, 3], "inner message 0: base offset -2 outside [0, 2^63)"),
]


@pytest.mark.parametrize("codec", [GZIP, SNAPPY])
@pytest.mark.parametrize(("magic", "offset", "inner", "reason"), BAD_INNER_OFFSETS)
def test_inner_offsets_a_batch_cannot_hold_fail_both_decoders(
    codec: CompressionType, magic: int, offset: int, inner: list[int], reason: str
) -> None:
    """Issue 11's fuzz campaign: a recompressed wrapper (valid CRC) whose inner offsets do not
    increase or leave int32 was read by the Python decoder and refused by the columnar one."""
    _both_decoders_refuse(wrapper(offset, magic, codec, inner_set(magic, inner)), offset, reason)


def _both_decoders_refuse(entry: bytes, offset: int, reason: str) -> None:
    """``entry`` after a 36-byte message: both decoders raise the same error about it."""
    from broker_embedded.record.columnar_decoder import decode

    data = message(0, 1, b"k", b"v") + entry
    expected = f"corrupt record data in w.log at byte 36 (batch base offset {offset}): {reason}"
    with pytest.raises(CorruptRecordError) as python:
        read(data, "w.log")
    assert str(python.value) == expected
    with pytest.raises(CorruptRecordError) as columnar:
        decode(data, topic="t", partition=0, source="w.log", tail="error")
    assert str(columnar.value) == expected


def test_inner_offsets_a_batch_can_hold_still_read() -> None:
    assert [r.offset for r in read(wrapper(9, 0, 1, inner_set(0, [4, 6, 2**31 + 3])))] == [
        4,
        6,
        2**31 + 3,
    ]
    assert [r.offset for r in read(wrapper(9, 1, 1, inner_set(1, [0, 2, 5])))] == [4, 6, 9]


BAD_TIMESTAMPS = [
    # (the entry, the reason)
    (message(7, 1, b"k", b"v", timestamp=-5), "invalid negative timestamp -5"),
    (
        wrapper(
            7,
            1,
            1,
            message(0, 1, b"a", b"1", timestamp=10) + message(1, 1, b"b", b"2", timestamp=-7),
        ),
        "inner message 1: invalid negative timestamp -7",
    ),
    (
        wrapper(7, 1, 2, inner_set(1, [0, 1]), timestamp=-3, lat=True),
        "inner message 0: invalid negative timestamp -3",
    ),
    (
        wrapper(
            7, 1, 1, message(0, 0, b"a", b"1") + message(1, 1, b"b", b"2", timestamp=2**63 - 1)
        ),
        "inner message 1: timestamp 9223372036854775807 is not within int64 of base timestamp -1",
    ),
]


@pytest.mark.parametrize(
    ("entry", "reason"),
    BAD_TIMESTAMPS,
    ids=["plain-negative", "inner-negative", "log-append-time-negative", "delta-beyond-int64"],
)
def test_timestamps_a_batch_cannot_hold_fail_both_decoders(entry: bytes, reason: str) -> None:
    """Issue 11's fuzz campaign: a magic 1 timestamp below -1 (valid CRC) was read by the Python
    decoder and refused by the columnar one, which re-encodes legacy records as v2."""
    _both_decoders_refuse(entry, 7, reason)


def test_timestamps_a_batch_can_hold_still_read() -> None:
    inner = message(0, 0, b"a", b"1") + message(1, 1, b"b", b"2", timestamp=2**62)
    assert [r.timestamp for r in read(wrapper(7, 1, 1, inner))] == [-1, 2**62]
    assert [r.timestamp for r in read(message(3, 1, b"k", b"v", timestamp=-1))] == [-1]
