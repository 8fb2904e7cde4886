"""Control records: Kafka's COMMIT marker byte for byte, KRaft control types, bad input."""

from __future__ import annotations

import pytest

from broker_embedded.errors import CorruptRecordError
from broker_embedded.record.control_record import ControlRecordType, EndTransactionMarker
from broker_embedded.record.memory_records_builder import MemoryRecordsBuilder
from broker_embedded.record.record_batch import RecordBatch
from broker_embedded.record.records import iter_batches

from ._java_ref import BATCHES_BY_NAME, LOG_DIRS
from ._peers import aiokafka_read, kafka_python_read

COMMIT = BATCHES_BY_NAME["batch_control_commit"]


def test_java_commit_marker_parses() -> None:
    batch = RecordBatch(COMMIT.data(), "commit.bin", 0)
    marker = EndTransactionMarker.from_batch(batch)
    assert marker == EndTransactionMarker(
        version=0, type=ControlRecordType.COMMIT, coordinator_epoch=5
    )
    assert marker == EndTransactionMarker.commit(5)
    (record,) = COMMIT.records
    assert record.key == b"\x00\x00\x00\x01" == marker.key()
    assert record.value == b"\x00\x00\x00\x00\x00\x05" == marker.value()
    assert ControlRecordType.parse_key(record.key) is ControlRecordType.COMMIT


def test_java_commit_marker_round_trips_byte_for_byte() -> None:
    data = EndTransactionMarker.commit(5).build_batch(
        base_offset=104,
        timestamp=1700000000100,
        producer_id=2000,
        producer_epoch=1,
        partition_leader_epoch=2,
    )
    assert data.hex() == COMMIT.hex


def test_abort_marker_batch() -> None:
    data = EndTransactionMarker.abort(-1).build_batch(
        base_offset=7, timestamp=42, producer_id=3, producer_epoch=0
    )
    batch = RecordBatch(data)
    assert (batch.is_control, batch.is_transactional, batch.attributes) == (True, True, 0x30)
    assert (batch.base_offset, batch.last_offset, batch.records_count) == (7, 7, 1)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (3, 0, -1)
    assert batch.partition_leader_epoch == -1
    assert EndTransactionMarker.from_batch(batch) == EndTransactionMarker.abort(-1)
    for read in (kafka_python_read, aiokafka_read):
        (peer,) = read(data)
        assert peer.crc_valid and peer.is_control and peer.is_transactional
        assert [(r.offset, r.key, r.value) for r in peer.records] == [
            (7, b"\x00\x00\x00\x00", b"\x00\x00\xff\xff\xff\xff")
        ]


def test_kafka_python_sees_our_markers_as_control_records() -> None:
    from kafka.record.default_records import DefaultRecordBatch

    for marker in (EndTransactionMarker.commit(1), EndTransactionMarker.abort(2)):
        data = marker.build_batch(base_offset=0, timestamp=1, producer_id=1, producer_epoch=1)
        (record,) = DefaultRecordBatch(bytearray(data))
        assert (record.commit, record.abort) == (
            marker.type is ControlRecordType.COMMIT,
            marker.type is ControlRecordType.ABORT,
        )


def test_kraft_control_records_in_a_real_metadata_log() -> None:
    path = LOG_DIRS / "kafka-3.7-ldi-poc" / "__cluster_metadata-0" / "00000000000000000000.log"
    controls = [b for b in iter_batches(path.read_bytes(), str(path)) if b.is_control]
    assert len(controls) == 1
    (record,) = controls[0].records()
    assert ControlRecordType.parse_key(record.key) is ControlRecordType.LEADER_CHANGE
    assert not controls[0].is_transactional
    with pytest.raises(CorruptRecordError, match="LEADER_CHANGE is not an end transaction marker"):
        EndTransactionMarker.from_batch(controls[0])


def test_record_keys() -> None:
    assert ControlRecordType.ABORT.record_key() == b"\x00\x00\x00\x00"
    assert ControlRecordType.SNAPSHOT_HEADER.record_key() == b"\x00\x00\x00\x03"
    assert ControlRecordType.parse_key(b"\x00\x00\x00\x63") is ControlRecordType.UNKNOWN
    assert ControlRecordType.parse_key(b"\x00\x01\x00\x01extra") is ControlRecordType.COMMIT
    with pytest.raises(ValueError, match="UNKNOWN"):
        ControlRecordType.UNKNOWN.record_key()


def test_newer_marker_value_versions_read_by_their_prefix() -> None:
    marker = EndTransactionMarker.parse(b"\x00\x00\x00\x00", b"\x00\x01\x00\x00\x00\x09tail")
    assert marker == EndTransactionMarker(
        version=1, type=ControlRecordType.ABORT, coordinator_epoch=9
    )
    with pytest.raises(ValueError, match="cannot write marker value version 1"):
        marker.value()


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        (None, b"\x00\x00\x00\x00\x00\x05", "control record with a null key"),
        (b"\x00\x00\x01", b"\x00\x00\x00\x00\x00\x05", "key of 3 bytes, needs at least 4"),
        (b"\xff\xff\x00\x01", b"\x00\x00\x00\x00\x00\x05", "invalid control record key version -1"),
        (b"\x00\x00\x00\x07", b"\x00\x00\x00\x00\x00\x05", "UNKNOWN is not an end transaction"),
        (b"\x00\x00\x00\x01", None, "marker value is null, needs at least 6 bytes"),
        (b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x05", "value is 5 bytes, needs at least 6"),
        (
            b"\x00\x00\x00\x01",
            b"\x80\x00\x00\x00\x00\x05",
            "invalid end transaction marker version",
        ),
    ],
)
def test_bad_markers_are_corrupt(key: bytes | None, value: bytes | None, message: str) -> None:
    with pytest.raises(CorruptRecordError, match=message) as info:
        EndTransactionMarker.parse(key, value, source="00.log", position=4096, base_offset=104)
    assert "in 00.log at byte 4096 (batch base offset 104)" in str(info.value)


def test_from_batch_needs_a_single_record_control_batch() -> None:
    with pytest.raises(CorruptRecordError, match="not a control batch") as info:
        EndTransactionMarker.from_batch(RecordBatch(BATCHES_BY_NAME["batch_txn_none"].data(), "t"))
    assert "in t at byte 0 (batch base offset 100)" in str(info.value)
    builder = MemoryRecordsBuilder(0, producer_id=1, producer_epoch=0, is_control=True)
    builder.append(None, 1, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x01")
    builder.append(None, 1, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x01")
    with pytest.raises(CorruptRecordError, match="control batch holds 2 records, not 1"):
        EndTransactionMarker.from_batch(RecordBatch(builder.build()))


def test_marker_values_are_validated() -> None:
    with pytest.raises(ValueError, match="not an end transaction marker type"):
        EndTransactionMarker(type=ControlRecordType.LEADER_CHANGE, coordinator_epoch=1)
    with pytest.raises(ValueError, match="outside int32"):
        EndTransactionMarker.commit(2**31)
    with pytest.raises(ValueError, match="outside int16"):
        EndTransactionMarker(version=-1, type=ControlRecordType.COMMIT, coordinator_epoch=1)
    with pytest.raises(AttributeError):
        EndTransactionMarker.commit(1).coordinator_epoch = 2  # type: ignore[misc]
