"""Reading record batch v2: every batch Kafka's Java library wrote, field by field; real logs."""

from __future__ import annotations

import struct

import pytest

from broker_embedded.errors import CorruptRecordError
from broker_embedded.record.memory_records_builder import MemoryRecordsBuilder
from broker_embedded.record.record_batch import (
    CREATE_TIME,
    LOG_APPEND_TIME,
    Record,
    RecordBatch,
    TimestampType,
    crc32c_of,
    set_base_offset,
    set_max_timestamp,
    set_partition_leader_epoch,
)
from broker_embedded.record.records import iter_batches

from ._java_ref import (
    BATCHES_BY_NAME,
    JAVA_REF,
    LOG_DIRS,
    MANIFEST_BATCHES,
    MANIFEST_FILES,
    ManifestBatch,
)


def test_manifest_lists_every_fixture() -> None:
    assert len(MANIFEST_BATCHES) == 12
    assert {b.name for b in MANIFEST_BATCHES} | set(MANIFEST_FILES) == {
        p.stem if p.suffix == ".bin" else p.name
        for p in JAVA_REF.iterdir()
        if p.name != "MANIFEST.txt"
    }
    assert MANIFEST_FILES == {"filerecords_00000000000000000000.log": 392}


def test_crc32c_known_answers() -> None:
    assert crc32c_of(b"Some String") == 608512271
    assert crc32c_of(b"123456789") == 0xE3069283


@pytest.mark.parametrize("expected", MANIFEST_BATCHES, ids=lambda b: b.name)
def test_java_batch_header(expected: ManifestBatch) -> None:
    data = expected.data()
    assert data.hex() == expected.hex
    batch = RecordBatch(data, expected.name, 0)
    assert batch.size_in_bytes == expected.size == len(data)
    assert batch.crc == expected.crc
    assert batch.compute_crc() == expected.crc
    assert batch.is_valid()
    batch.ensure_valid()
    assert batch.magic == 2
    assert batch.compression == expected.codec
    assert batch.base_offset == expected.base_offset
    assert batch.last_offset == expected.last_offset
    assert batch.next_offset == expected.last_offset + 1
    assert batch.records_count == expected.count
    assert batch.max_timestamp == expected.max_timestamp
    assert batch.timestamp_type == expected.timestamp_type
    assert batch.producer_id == expected.producer_id
    assert batch.producer_epoch == expected.producer_epoch
    assert batch.base_sequence == expected.base_sequence
    assert batch.is_transactional is expected.is_transactional
    assert batch.is_control is expected.is_control
    assert batch.partition_leader_epoch == expected.partition_leader_epoch
    assert batch.has_delete_horizon is False
    assert batch.delete_horizon_ms is None
    if expected.timestamp_type == CREATE_TIME:
        assert batch.base_timestamp == expected.records[0].timestamp
    assert bytes(batch.buffer) == data


@pytest.mark.parametrize("expected", MANIFEST_BATCHES, ids=lambda b: b.name)
def test_java_batch_records(expected: ManifestBatch) -> None:
    batch = RecordBatch(expected.data(), expected.name, 0)
    assert tuple(batch.records()) == expected.records


def test_java_idempotent_sequence_numbers() -> None:
    batch = RecordBatch(BATCHES_BY_NAME["batch_idempotent_none"].data())
    assert (batch.base_sequence, batch.last_sequence) == (5, 8)
    assert RecordBatch(BATCHES_BY_NAME["batch_none"].data()).last_sequence == -1


def test_java_log_append_time_batch_keeps_record_deltas() -> None:
    batch = RecordBatch(BATCHES_BY_NAME["batch_logappendtime_none"].data())
    assert batch.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert batch.base_timestamp == 1700000000000
    assert {r.timestamp for r in batch.records()} == {1700000009999}


def test_java_file_records_log() -> None:
    data = (JAVA_REF / "filerecords_00000000000000000000.log").read_bytes()
    assert len(data) == 392
    batches = list(iter_batches(data, "filerecords.log", tail="error"))
    assert [(b.position, b.size_in_bytes) for b in batches] == [(0, 123), (123, 134), (257, 135)]
    assert [(b.base_offset, b.last_offset) for b in batches] == [(0, 3), (4, 7), (8, 11)]
    assert [int(b.compression) for b in batches] == [0, 1, 4]
    assert all(b.is_valid() and b.source == "filerecords.log" for b in batches)
    template = BATCHES_BY_NAME["batch_none"].records
    for i, batch in enumerate(batches):
        shifted = tuple(
            Record(r.offset + 4 * i, r.timestamp, r.key, r.value, r.headers) for r in template
        )
        assert tuple(batch.records()) == shifted


def test_invalid_crc_fixture() -> None:
    # Apache's DefaultRecordBatchTest.testInvalidCrc builds this batch, then overwrites
    # lastOffsetDelta with 23: the fixture is the form before that, with a valid CRC.
    expected = BATCHES_BY_NAME["apache_test_invalidCrc_valid_form"]
    data = bytearray(expected.data())
    batch = RecordBatch(bytes(data), "invalid-crc.bin")
    assert batch.crc == expected.crc == 0xEFD2117E
    assert batch.is_valid()
    struct.pack_into(">i", data, 23, 23)
    broken = RecordBatch(bytes(data), "invalid-crc.bin", 0)
    assert broken.crc == 0xEFD2117E
    assert broken.compute_crc() != 0xEFD2117E
    assert not broken.is_valid()
    with pytest.raises(CorruptRecordError, match="CRC mismatch: stored 0xefd2117e") as info:
        broken.ensure_valid()
    assert "in invalid-crc.bin at byte 0 (batch base offset 0)" in str(info.value)


def test_real_log_dirs_read_completely() -> None:
    totals = {}
    for path in sorted(LOG_DIRS.glob("*/*/*.log")):
        batches = list(iter_batches(path.read_bytes(), str(path), tail="error"))
        for batch in batches:
            batch.ensure_valid()
            got = [r.offset for r in batch.records()]
            assert len(got) == batch.records_count
            assert got == sorted(set(got))
            assert batch.base_offset <= got[0] and got[-1] <= batch.last_offset
        totals[str(path.relative_to(LOG_DIRS))] = (
            len(batches),
            sum(b.records_count for b in batches),
            batches[-1].next_offset if batches else None,
        )
    assert totals == {
        "kafka-3.7-ldi-poc/TestTopicPatient-0/00000000000000000000.log": (3, 3, 3),
        "kafka-3.7-ldi-poc/__cluster_metadata-0/00000000000000000000.log": (4814, 4929, 4929),
        "kafka-3.7-ldi-poc/__consumer_offsets-6/00000000000000000000.log": (13, 13, 13),
        "kafka-bitnami-rolled/__cluster_metadata-0/00000000000000000000.log": (14660, 14667, 14667),
        "kafka-bitnami-rolled/__cluster_metadata-0/00000000000000014667.log": (9085, 9100, 23767),
        "kafka-bitnami-rolled/product-created-events-topic-0/00000000000000000000.log": (
            0,
            0,
            None,
        ),
        "kafka-bitnami-rolled/product-created-events-topic-1/00000000000000000000.log": (
            0,
            0,
            None,
        ),
        "kafka-bitnami-rolled/product-created-events-topic-2/00000000000000000000.log": (5, 5, 5),
    }


# -- in-place rewrites ----------------------------------------------------------------------------


def test_set_base_offset_and_epoch_keep_the_crc() -> None:
    data = bytearray(BATCHES_BY_NAME["batch_gzip"].data())
    crc = RecordBatch(bytes(data)).crc
    set_base_offset(data, 1_000_000)
    set_partition_leader_epoch(data, 17)
    batch = RecordBatch(bytes(data))
    assert (batch.base_offset, batch.last_offset, batch.partition_leader_epoch) == (
        1_000_000,
        1_000_003,
        17,
    )
    assert batch.crc == crc and batch.is_valid()
    assert [r.offset for r in batch.records()] == [1_000_000, 1_000_001, 1_000_002, 1_000_003]


def test_rewrites_at_a_position_inside_a_bigger_buffer() -> None:
    log = bytearray((JAVA_REF / "filerecords_00000000000000000000.log").read_bytes())
    set_base_offset(log, 500, position=123)
    set_partition_leader_epoch(log, 3, position=123)
    batches = list(iter_batches(bytes(log), tail="error"))
    assert [(b.base_offset, b.partition_leader_epoch) for b in batches] == [
        (0, 0),
        (500, 3),
        (8, 1),
    ]
    assert all(b.is_valid() for b in batches)


def test_set_max_timestamp_recomputes_the_crc() -> None:
    data = bytearray(BATCHES_BY_NAME["batch_none"].data())
    set_max_timestamp(data, LOG_APPEND_TIME, 1700000009999)
    batch = RecordBatch(bytes(data))
    assert batch.is_valid()
    assert batch.timestamp_type == LOG_APPEND_TIME and batch.max_timestamp == 1700000009999
    assert bytes(data) == BATCHES_BY_NAME["batch_logappendtime_none"].data()
    set_max_timestamp(data, CREATE_TIME, 1700000000005)
    assert bytes(data) == BATCHES_BY_NAME["batch_none"].data()


def test_rewrites_refuse_read_only_and_non_v2_buffers() -> None:
    data = BATCHES_BY_NAME["batch_none"].data()
    with pytest.raises(TypeError, match="writable"):
        set_base_offset(data, 1)  # type: ignore[arg-type]
    legacy = bytearray(data)
    legacy[16] = 1
    with pytest.raises(ValueError, match="magic 1 at position 0 is not v2"):
        set_partition_leader_epoch(legacy, 1)
    with pytest.raises(ValueError, match="no record batch header at position 100"):
        set_base_offset(bytearray(data), 1, position=100)


# -- builder-made batches the fixtures do not cover ------------------------------------------------


def test_delete_horizon_batch() -> None:
    builder = MemoryRecordsBuilder(10, delete_horizon_ms=1_000_000)
    builder.append(None, 1_000_500, b"k", b"v")
    builder.append(None, 999_000, b"k2", None)
    batch = RecordBatch(builder.build())
    assert batch.has_delete_horizon and batch.delete_horizon_ms == 1_000_000
    assert batch.attributes == 0x40
    assert batch.base_timestamp == 1_000_000
    assert batch.max_timestamp == 1_000_500
    assert [(r.offset, r.timestamp) for r in batch.records()] == [(10, 1_000_500), (11, 999_000)]


def test_records_with_offset_gaps_as_compaction_leaves_them() -> None:
    builder = MemoryRecordsBuilder(100)
    for offset in (100, 103, 150):
        builder.append(offset, 5, b"k%d" % offset, b"v")
    batch = RecordBatch(builder.build())
    assert (batch.base_offset, batch.last_offset, batch.records_count) == (100, 150, 3)
    assert [r.offset for r in batch.records()] == [100, 103, 150]


def test_view_is_cut_to_the_batch_and_big_batches_decode_linearly() -> None:
    builder = MemoryRecordsBuilder(0)
    for i in range(20_000):
        builder.append(None, i, None, b"%d" % i)
    data = builder.build() + b"trailing bytes of the next batch"
    batch = RecordBatch(data, "big", 0)
    assert batch.size_in_bytes == len(data) - 32 == len(batch.buffer)
    values = [r.value for r in batch.records()]
    assert values[0] == b"0" and values[-1] == b"19999" and len(values) == 20_000
    assert "RecordBatch(source='big', position=0, offsets=[0, 19999], count=20000" in repr(batch)
