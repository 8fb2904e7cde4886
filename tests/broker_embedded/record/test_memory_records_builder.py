"""Building record batches v2: byte for byte what Kafka's Java client wrote, and Kafka's rules."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_embedded.record.compression import CompressionType
from broker_embedded.record.memory_records_builder import (
    MemoryRecordsBuilder,
    build_empty_batch,
    build_record_batch,
)
from broker_embedded.record.record_batch import (
    CREATE_TIME,
    LOG_APPEND_TIME,
    Record,
    RecordBatch,
)
from broker_embedded.record.records import iter_batches

from ._java_ref import BATCHES_BY_NAME, MANIFEST_BATCHES, ManifestBatch
from ._peers import PeerBatch, aiokafka_read, kafka_python_has, kafka_python_read

COMPRESSED = {"batch_gzip", "batch_snappy", "batch_lz4", "batch_zstd"}


def _builder_for(expected: ManifestBatch) -> MemoryRecordsBuilder:
    lat = expected.timestamp_type == LOG_APPEND_TIME
    return MemoryRecordsBuilder(
        expected.base_offset,
        CompressionType(expected.codec),
        expected.timestamp_type,
        log_append_time=expected.max_timestamp if lat else None,
        producer_id=expected.producer_id,
        producer_epoch=expected.producer_epoch,
        base_sequence=expected.base_sequence,
        is_transactional=expected.is_transactional,
        is_control=expected.is_control,
        partition_leader_epoch=expected.partition_leader_epoch,
    )


def _rebuild(expected: ManifestBatch) -> bytes:
    """The batch from the manifest's fields, as the Java client was asked to build it."""
    builder = _builder_for(expected)
    records = expected.records
    if expected.timestamp_type == LOG_APPEND_TIME:
        # The LogAppendTime batch holds batch_none's records: readers see maxTimestamp instead
        # of the record timestamps, which the manifest therefore cannot list.
        records = BATCHES_BY_NAME["batch_none"].records
    for r in records:
        builder.append(r.offset, r.timestamp, r.key, r.value, r.headers)
    return builder.build()


@pytest.mark.parametrize("expected", MANIFEST_BATCHES, ids=lambda b: b.name)
def test_rebuilds_java_batches_byte_for_byte(expected: ManifestBatch) -> None:
    assert _rebuild(expected).hex() == expected.hex


@pytest.mark.parametrize("expected", MANIFEST_BATCHES, ids=lambda b: b.name)
def test_rebuilt_batches_decode_as_the_manifest_says(expected: ManifestBatch) -> None:
    # Independent of the compressors' exact output: the decoded view must match.
    batch = RecordBatch(_rebuild(expected))
    assert batch.is_valid()
    assert (batch.base_offset, batch.last_offset, batch.records_count) == (
        expected.base_offset,
        expected.last_offset,
        expected.count,
    )
    assert (batch.compression, batch.timestamp_type, batch.max_timestamp) == (
        expected.codec,
        expected.timestamp_type,
        expected.max_timestamp,
    )
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (
        expected.producer_id,
        expected.producer_epoch,
        expected.base_sequence,
    )
    assert (batch.is_transactional, batch.is_control, batch.partition_leader_epoch) == (
        expected.is_transactional,
        expected.is_control,
        expected.partition_leader_epoch,
    )
    assert tuple(batch.records()) == expected.records


@pytest.mark.parametrize("expected", MANIFEST_BATCHES, ids=lambda b: b.name)
@pytest.mark.parametrize("reader", [kafka_python_read, aiokafka_read], ids=["kafka-python", "aio"])
def test_kafka_style_readers_read_rebuilt_batches(
    expected: ManifestBatch, reader: Callable[[bytes], list[PeerBatch]]
) -> None:
    if reader is kafka_python_read and not kafka_python_has(CompressionType(expected.codec)):
        pytest.skip("kafka-python has no snappy codec here (python-snappy is not installed)")
    (peer,) = reader(_rebuild(expected))
    assert peer.crc_valid
    assert (peer.base_offset, peer.last_offset, peer.compression) == (
        expected.base_offset,
        expected.last_offset,
        expected.codec,
    )
    assert (peer.timestamp_type, peer.max_timestamp) == (
        expected.timestamp_type,
        expected.max_timestamp,
    )
    assert (peer.producer_id, peer.producer_epoch, peer.base_sequence) == (
        expected.producer_id,
        expected.producer_epoch,
        expected.base_sequence,
    )
    assert (peer.is_transactional, peer.is_control) == (
        expected.is_transactional,
        expected.is_control,
    )
    assert peer.records == expected.records


# -- Kafka's rules --------------------------------------------------------------------------------


def test_default_offsets_and_state() -> None:
    builder = MemoryRecordsBuilder(7)
    assert (builder.num_records, builder.last_offset, builder.next_offset) == (0, None, 7)
    assert builder.append(None, 10, b"a", b"1") == 7
    assert builder.append(None, 30, b"b", b"2") == 8
    assert builder.append(12, 20, b"c", b"3") == 12
    assert builder.append(None, 30, b"d", b"4") == 13
    assert (builder.num_records, builder.last_offset, builder.next_offset) == (4, 13, 14)
    assert (builder.max_timestamp, builder.offset_of_max_timestamp) == (30, 8)
    batch = RecordBatch(builder.build())
    assert [r.offset for r in batch.records()] == [7, 8, 12, 13]
    assert (batch.last_offset, batch.base_timestamp, batch.max_timestamp) == (13, 10, 30)


def test_no_timestamps_give_max_timestamp_minus_one() -> None:
    builder = MemoryRecordsBuilder(0)
    builder.append(None, -1, None, b"x")
    batch = RecordBatch(builder.build())
    assert (batch.base_timestamp, batch.max_timestamp) == (-1, -1)
    assert [r.timestamp for r in batch.records()] == [-1]


def test_log_append_time_sets_max_timestamp_only() -> None:
    builder = MemoryRecordsBuilder(0, timestamp_type=LOG_APPEND_TIME, log_append_time=99_999)
    builder.append(None, 5, None, b"x")
    builder.append(None, 7, None, b"y")
    batch = RecordBatch(builder.build())
    assert (batch.timestamp_type, batch.base_timestamp, batch.max_timestamp) == (
        LOG_APPEND_TIME,
        5,
        99_999,
    )
    assert [r.timestamp for r in batch.records()] == [99_999, 99_999]


def test_headers_accept_bytes_keys_and_null_values() -> None:
    builder = MemoryRecordsBuilder(0)
    builder.append(None, 1, b"", None, [("ключ", b"v"), (b"raw", None), ("e", b"")])
    (record,) = RecordBatch(builder.build()).records()
    assert record == Record(0, 1, b"", None, (("ключ", b"v"), ("raw", None), ("e", b"")))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"is_transactional": True}, "transactional batch needs a producer id"),
        ({"producer_id": 5, "base_sequence": 0}, "negative epoch -1"),
        ({"producer_id": 5, "producer_epoch": 0}, "negative sequence -1"),
        ({"timestamp_type": LOG_APPEND_TIME}, "log_append_time is given exactly when"),
        ({"log_append_time": 5}, "log_append_time is given exactly when"),
        ({"timestamp_type": 2}, "neither CreateTime nor LogAppendTime"),
        ({"base_offset": -1}, "base offset -1"),
        ({"delete_horizon_ms": -5}, "negative delete horizon"),
    ],
)
def test_invalid_builder_options(options: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        MemoryRecordsBuilder(**options)


def test_control_batches_need_no_sequence() -> None:
    builder = MemoryRecordsBuilder(
        0, producer_id=5, producer_epoch=0, is_transactional=True, is_control=True
    )
    builder.append(None, 1, b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00")
    batch = RecordBatch(builder.build())
    assert (batch.is_control, batch.is_transactional, batch.base_sequence) == (True, True, -1)
    assert batch.attributes == 0x30


@pytest.mark.parametrize(
    ("offset", "timestamp", "message"),
    [
        (10, 1, "offset 10 follows 10: offsets must increase strictly"),
        (9, 1, "offset 9 follows 10"),
        (11, -2, "invalid negative timestamp -2"),
        (10 + 2**31, 1, "not within int32 range above base offset 10"),
    ],
)
def test_invalid_appends(offset: int, timestamp: int, message: str) -> None:
    builder = MemoryRecordsBuilder(10)
    builder.append(10, 1, None, None)
    with pytest.raises(ValueError, match=message):
        builder.append(offset, timestamp, None, None)
    with pytest.raises(ValueError, match="not within int32 range above base offset 10"):
        MemoryRecordsBuilder(10).append(9, 1, None, None)


def test_invalid_record_fields() -> None:
    builder = MemoryRecordsBuilder(0)
    with pytest.raises(TypeError, match="key must be bytes or None, not str"):
        builder.append(None, 1, "text", None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="null header key"):
        builder.append(None, 1, None, None, [(None, b"v")])  # type: ignore[list-item]
    assert builder.num_records == 0


def test_build_is_final_and_empty_builds_nothing() -> None:
    assert MemoryRecordsBuilder(0).build() == b""
    builder = MemoryRecordsBuilder(0)
    builder.append(None, 1, None, b"x")
    first = builder.build()
    assert builder.build() is first
    with pytest.raises(ValueError, match="already built"):
        builder.append(None, 1, None, b"y")


def test_build_record_batch_in_one_call() -> None:
    expected = BATCHES_BY_NAME["batch_idempotent_none"]
    data = build_record_batch(
        expected.records,
        producer_id=1000,
        producer_epoch=3,
        base_sequence=5,
        partition_leader_epoch=7,
    )
    assert data.hex() == expected.hex
    assert build_record_batch([]) == b""
    gzip = build_record_batch(expected.records, base_offset=40, compression=CompressionType.GZIP)
    batch = RecordBatch(gzip)
    assert (batch.base_offset, batch.last_offset, batch.compression) == (40, 45, 1)
    assert tuple(batch.records()) == expected.records


def test_empty_batch_as_the_cleaner_keeps_it() -> None:
    data = build_empty_batch(
        100,
        104,
        max_timestamp=1_700_000_000_000,
        producer_id=9,
        producer_epoch=2,
        base_sequence=30,
        is_transactional=True,
        partition_leader_epoch=4,
    )
    assert len(data) == 61
    batch = RecordBatch(data)
    assert batch.is_valid()
    assert (batch.base_offset, batch.last_offset, batch.next_offset, batch.records_count) == (
        100,
        104,
        105,
        0,
    )
    assert (batch.base_timestamp, batch.max_timestamp, batch.timestamp_type) == (
        -1,
        1_700_000_000_000,
        CREATE_TIME,
    )
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (9, 2, 30)
    assert (batch.attributes, batch.partition_leader_epoch) == (0x10, 4)
    assert list(batch.records()) == []
    (peer,) = aiokafka_read(data)
    assert (peer.crc_valid, peer.last_offset, peer.records) == (True, 104, ())


@pytest.mark.parametrize("codec", list(CompressionType), ids=lambda c: c.name.lower())
def test_many_records_over_several_compression_blocks(codec: CompressionType) -> None:
    builder = MemoryRecordsBuilder(1_000, codec, partition_leader_epoch=2)
    for i in range(3_000):
        builder.append(None, 1_700_000_000_000 + i, b"key-%d" % (i % 10), b"value %06d " % i * 5)
    data = builder.build()
    (batch,) = iter_batches(data, tail="error")
    assert batch.is_valid() and batch.records_count == 3_000
    records = list(batch.records())
    assert records[-1] == Record(3_999, 1_700_000_002_999, b"key-9", b"value 002999 " * 5)
    (peer,) = aiokafka_read(data)
    assert peer.records == tuple(records)


RECORDS = st.lists(
    st.tuples(
        st.integers(0, 3),  # offset gap
        st.integers(-1, 2**41),
        st.none() | st.binary(max_size=20),
        st.none() | st.binary(max_size=40),
        st.lists(st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=5)), max_size=3),
    ),
    min_size=1,
    max_size=15,
)


@settings(max_examples=80, deadline=None)
@given(RECORDS, st.sampled_from(list(CompressionType)), st.integers(0, 2**40))
def test_build_then_read_property(rows: list, codec: CompressionType, base: int) -> None:
    builder = MemoryRecordsBuilder(base, codec)
    expected = []
    offset = base - 1
    for gap, ts, key, value, headers in rows:
        offset += gap + 1
        builder.append(offset, ts, key, value, headers)
        expected.append(Record(offset, ts, key, value, tuple(headers)))
    batch = RecordBatch(builder.build())
    assert batch.is_valid()
    assert list(batch.records()) == expected
    assert batch.max_timestamp == max(r.timestamp for r in expected)
