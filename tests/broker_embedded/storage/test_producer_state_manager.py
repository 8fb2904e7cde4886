"""Producer state: idempotence (duplicates, sequences, epochs), transactions and the LSO, snapshot
files (checked byte for byte against snapshots written by Kafka), recovery by replay."""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_embedded.errors import (
    CorruptSnapshotError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    ProducerStateError,
    TransactionCoordinatorFencedError,
)
from broker_embedded.record.record_batch import RecordBatch
from broker_embedded.record.records import iter_batches
from broker_embedded.storage.producer_state_entry import (
    INT32_MAX,
    BatchMetadata,
    decrement_sequence,
)
from broker_embedded.storage.producer_state_manager import (
    AppendOrigin,
    BatchInfo,
    CompletedTxn,
    DuplicateSequence,
    ProducerStateManager,
)
from broker_embedded.storage.snapshot_file import (
    ProducerSnapshotEntry,
    decode_snapshot,
    encode_snapshot,
    list_snapshots,
    read_snapshot,
    snapshot_file_name,
    write_snapshot,
)
from broker_embedded.storage.transaction_index import AbortedTxn
from tests.fixture_paths import FIXTURES

LOGDIRS = FIXTURES / "kafka-logdirs"
CONSUMER_OFFSETS_6 = LOGDIRS / "kafka-3.7-ldi-poc" / "__consumer_offsets-6"
PATIENT_0 = LOGDIRS / "kafka-3.7-ldi-poc" / "TestTopicPatient-0"
METADATA_0 = LOGDIRS / "kafka-bitnami-rolled" / "__cluster_metadata-0"
JAVA_REF = FIXTURES / "kafka-java-ref"
TP = "orders-3"
CLIENT, COORDINATOR, REPLICATION = (
    AppendOrigin.CLIENT,
    AppendOrigin.COORDINATOR,
    AppendOrigin.REPLICATION,
)


def data(pid, epoch, seq, offset, count=1, *, txn=False, ts=1000) -> BatchInfo:
    last_seq = (seq + count - 1) & INT32_MAX
    return BatchInfo(offset, offset + count - 1, pid, epoch, seq, last_seq, ts, txn)


def marker(pid, epoch, offset, *, commit, coordinator_epoch=0, ts=2000) -> BatchInfo:
    return BatchInfo(
        offset, offset, pid, epoch, -1, -1, ts, True, True, int(commit), coordinator_epoch
    )


def java_batch(name: str) -> RecordBatch:
    return RecordBatch((JAVA_REF / f"{name}.bin").read_bytes(), source=name)


def log_batches(partition_dir: Path, segment: int = 0) -> list[RecordBatch]:
    raw = (partition_dir / f"{segment:020d}.log").read_bytes()
    return list(iter_batches(raw, str(partition_dir), tail="error"))


@pytest.fixture
def psm(tmp_path: Path) -> ProducerStateManager:
    return ProducerStateManager(TP, tmp_path)


# -- snapshot files: ground truth from Kafka ----------------------------------------------------


@pytest.mark.parametrize(
    ("partition_dir", "offset"), [(CONSUMER_OFFSETS_6, 13), (METADATA_0, 14667)]
)
def test_kafka_snapshot_fixture_layout(tmp_path: Path, partition_dir: Path, offset: int) -> None:
    name = snapshot_file_name(offset)
    assert len(name) == 29 and name.endswith(".snapshot")
    copy = tmp_path / name
    shutil.copyfile(partition_dir / name, copy)
    raw = copy.read_bytes()
    assert raw == bytes.fromhex("0001 48674bc7 00000000")  # version 1, crc, 0 entries
    version, crc, count = struct.unpack(">hIi", raw)
    assert (version, crc, count) == (1, 0x48674BC7, 0)
    assert crc == crc32c.crc32c(raw[6:])  # the CRC covers the entry count onwards
    assert read_snapshot(copy) == []
    assert encode_snapshot([]) == raw
    psm = ProducerStateManager(partition_dir.name, tmp_path)
    psm.load_snapshot(copy)
    assert psm.map_end_offset == offset and dict(psm.producers) == {}


def test_replaying_kafka_logs_reproduces_kafkas_snapshots(tmp_path: Path) -> None:
    # Kafka wrote 00000000000000000013.snapshot after the 13 batches of __consumer_offsets-6
    # (written by the group coordinator, no producer id): replaying them gives the same file.
    psm = ProducerStateManager("__consumer_offsets-6", tmp_path / "a")
    (tmp_path / "a").mkdir()
    psm.replay(log_batches(CONSUMER_OFFSETS_6))
    assert psm.map_end_offset == 13
    path = psm.take_snapshot()
    assert path is not None and path.name == "00000000000000000013.snapshot"
    assert path.read_bytes() == (CONSUMER_OFFSETS_6 / path.name).read_bytes()
    # The KRaft metadata log's first segment ends where its second segment's snapshot starts.
    meta = ProducerStateManager("__cluster_metadata-0", tmp_path / "b")
    (tmp_path / "b").mkdir()
    batches = log_batches(METADATA_0)
    controls = [BatchInfo.of(b) for b in batches if b.is_control]  # KRaft's, not txn markers
    assert len(controls) == 3 and {c.control_type for c in controls} == {None}
    meta.replay(batches)
    assert meta.map_end_offset == 14667
    path = meta.take_snapshot()
    assert path.read_bytes() == (METADATA_0 / path.name).read_bytes()


def test_replaying_idempotent_producers_of_a_kafka_log(psm: ProducerStateManager) -> None:
    # TestTopicPatient-0 holds three batches from idempotent producers 1, 2 and 3 (epoch 0).
    psm.replay(log_batches(PATIENT_0))
    assert psm.map_end_offset == 3
    assert psm.snapshot_entries() == [
        ProducerSnapshotEntry(1, 0, 0, 0, 0, 1769792698283, -1, -1),
        ProducerSnapshotEntry(2, 0, 0, 1, 0, 1769793423115, -1, -1),
        ProducerSnapshotEntry(3, 0, 0, 2, 0, 1769793578165, -1, -1),
    ]
    # A producer retrying its batch gets the original offset back.
    retry = BatchInfo.of(log_batches(PATIENT_0)[1])
    dup = psm.analyze([retry]).duplicate
    assert dup == DuplicateSequence(2, 0, BatchMetadata(0, 1, 0, 1769793423115))
    assert (dup.first_offset, dup.last_offset, dup.timestamp) == (1, 1, 1769793423115)


def test_snapshot_entry_layout_known_bytes(tmp_path: Path) -> None:
    entry = ProducerSnapshotEntry(
        producer_id=0x0102030405060708,
        producer_epoch=7,
        last_sequence=41,
        last_offset=1000,
        offset_delta=9,
        timestamp=1700000000000,
        coordinator_epoch=3,
        current_txn_first_offset=990,
    )
    body = bytes.fromhex(
        "00000001"  # entry count
        "0102030405060708"  # producerId int64
        "0007"  # producerEpoch int16
        "00000029"  # lastSequence int32 = 41
        "00000000000003e8"  # lastOffset int64 = 1000
        "00000009"  # offsetDelta int32
        "0000018bcfe56800"  # timestamp int64 = 1700000000000
        "00000003"  # coordinatorEpoch int32
        "00000000000003de"  # currentTxnFirstOffset int64 = 990
    )
    expected = b"\x00\x01" + struct.pack(">I", crc32c.crc32c(body)) + body
    assert len(expected) == 10 + 46
    assert encode_snapshot([entry]) == expected
    path = tmp_path / snapshot_file_name(1001)
    write_snapshot(path, [entry])
    assert path.read_bytes() == expected and read_snapshot(path) == [entry]
    assert not list(tmp_path.glob("*.tmp"))


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda b: b[:8], "only 8 bytes"),
        (lambda b: b"\x00\x02" + b[2:], "unknown version 2"),
        (lambda b: b[:-1] + bytes([b[-1] ^ 1]), "stored crc"),
        (lambda b: b[:6] + struct.pack(">i", 2) + b[10:], "stored crc"),
    ],
)
def test_corrupt_snapshots(mutate, match: str) -> None:
    good = encode_snapshot([ProducerSnapshotEntry(1, 0, 4, 10, 4, 5, -1, -1)])
    with pytest.raises(CorruptSnapshotError, match=match):
        decode_snapshot(mutate(good), "x.snapshot")


def test_snapshot_with_trailing_bytes_is_corrupt() -> None:
    body = struct.pack(">i", 0) + b"\x00" * 3
    raw = struct.pack(">hI", 1, crc32c.crc32c(body)) + body
    with pytest.raises(CorruptSnapshotError, match="declares 0 entries but holds 13 bytes"):
        decode_snapshot(raw)


# -- idempotence ---------------------------------------------------------------------------------


def test_in_sequence_appends_and_duplicates_of_the_last_five(psm: ProducerStateManager) -> None:
    offset = 0
    for seq in range(0, 30, 5):  # six batches of 5 records: sequences 0-4, ..., 25-29
        psm.append([data(7, 0, seq, offset, 5, ts=seq)])
        offset += 5
    entry = psm.last_entry(7)
    assert [(b.first_seq, b.last_seq) for b in entry.batches] == [
        (5, 9),
        (10, 14),
        (15, 19),
        (20, 24),
        (25, 29),
    ]
    assert (entry.first_data_offset, entry.last_data_offset, entry.last_timestamp) == (5, 29, 25)
    for seq in range(5, 30, 5):
        update = psm.analyze([data(7, 0, seq, 999, 5)])
        assert update.duplicate is not None
        assert (update.duplicate.first_offset, update.duplicate.last_offset) == (seq, seq + 4)
        with pytest.raises(ProducerStateError, match="duplicate"):
            psm.apply(update)
    # The first batch fell out of the cache: a retry of it is out of order.
    with pytest.raises(OutOfOrderSequenceError) as e:
        psm.analyze([data(7, 0, 0, 999, 5)])
    assert (e.value.code, e.value.name) == (45, "OUT_OF_ORDER_SEQUENCE_NUMBER")
    assert "0 (incoming sequence), 29 (current end sequence)" in str(e.value)
    # A partial overlap is no duplicate either.
    with pytest.raises(OutOfOrderSequenceError):
        psm.analyze([data(7, 0, 25, 999, 3)])


def test_sequence_gap_names_producer_partition_and_offset(psm: ProducerStateManager) -> None:
    psm.append([data(7, 2, 0, 0, 3)])
    with pytest.raises(OutOfOrderSequenceError) as e:
        psm.analyze([data(7, 2, 4, 3)])
    assert f"producer 7 at offset 3 in partition {TP} (epoch 2): 4 (incoming" in str(e.value)
    psm.append([data(7, 2, 3, 3)])  # exactly the next sequence
    assert psm.last_entry(7).last_seq == 3


def test_unknown_producer_may_start_anywhere(psm: ProducerStateManager) -> None:
    psm.append([data(8, 4, 1234, 0, 2)])
    assert psm.last_entry(8).last_seq == 1235
    psm.append([data(8, 4, 1236, 2)])
    assert psm.last_entry(8).last_seq == 1236


def test_new_epoch_starts_at_zero_and_forgets_old_batches(psm: ProducerStateManager) -> None:
    psm.append([data(9, 1, 0, 0, 3)])
    with pytest.raises(OutOfOrderSequenceError, match="new epoch.*sequence 3.*current epoch 1"):
        psm.analyze([data(9, 2, 3, 3)])
    psm.append([data(9, 2, 0, 3, 2)])
    entry = psm.last_entry(9)
    assert entry.producer_epoch == 2 and [b.last_seq for b in entry.batches] == [1]
    with pytest.raises(InvalidProducerEpochError) as e:
        psm.analyze([data(9, 1, 0, 9, 3)])
    assert (e.value.code, e.value.name) == (47, "INVALID_PRODUCER_EPOCH")
    assert "epoch of producer 9 at offset 9" in str(e.value) and "last seen epoch 2" in str(e.value)


def test_replication_skips_sequence_checks_and_tolerates_stale_epochs(psm) -> None:
    psm.append([data(9, 3, 0, 0)])
    psm.append([data(9, 3, 17, 1)], REPLICATION)  # a gap: the leader already decided
    psm.append([data(9, 2, 0, 2)], REPLICATION)  # a stale epoch: logged only
    assert psm.last_entry(9).producer_epoch == 2
    assert psm.map_end_offset == 3


def test_sequence_wraps_around_int32(psm: ProducerStateManager) -> None:
    assert decrement_sequence(1, 3) == INT32_MAX - 1
    psm.append([data(5, 0, INT32_MAX - 1, 0, 2)])
    assert psm.last_entry(5).last_seq == INT32_MAX
    psm.append([data(5, 0, 0, 2, 1)])  # 2**31 - 1 is followed by 0
    psm.append([data(5, 0, 1, 3, 4)])
    # A batch that itself wraps: sequences 2**31 - 2 .. 1 at a fresh producer.
    psm.append([data(6, 0, INT32_MAX - 1, 10, 4)])
    batch = psm.last_entry(6).batches[-1]
    assert (batch.first_seq, batch.last_seq) == (INT32_MAX - 1, 1)
    dup = psm.analyze([data(6, 0, INT32_MAX - 1, 50, 4)]).duplicate
    assert dup is not None and (dup.first_offset, dup.last_offset) == (10, 13)
    psm.append([data(6, 0, 2, 14)])


def test_multi_batch_append_is_all_or_nothing(psm: ProducerStateManager) -> None:
    psm.append([data(1, 0, 0, 0)])
    with pytest.raises(OutOfOrderSequenceError):
        psm.analyze([data(1, 0, 1, 1), data(2, 0, 0, 2), data(1, 0, 5, 3)])
    assert psm.last_entry(1).last_seq == 0 and psm.last_entry(2) is None
    assert psm.map_end_offset == 1
    # Later batches are checked against the earlier ones of the same request.
    update = psm.analyze([data(1, 0, 1, 1), data(2, 0, 0, 2), data(1, 0, 2, 3)])
    assert psm.last_entry(1).last_seq == 0  # analyze changes nothing
    psm.apply(update)
    assert psm.last_entry(1).last_seq == 2 and psm.map_end_offset == 4


def test_stale_update_is_refused(psm: ProducerStateManager) -> None:
    first = psm.analyze([data(1, 0, 0, 0)])
    second = psm.analyze([data(1, 0, 0, 0)])
    psm.apply(first)
    with pytest.raises(ProducerStateError, match="changed since"):
        psm.apply(second)


def test_non_producer_batches_only_move_the_map_end(psm: ProducerStateManager) -> None:
    psm.append([BatchInfo(0, 9, -1, -1, -1, -1, 5)])
    assert psm.map_end_offset == 10 and dict(psm.producers) == {}


def test_real_idempotent_batch_from_kafkas_java_client(psm: ProducerStateManager) -> None:
    # MANIFEST: pid 1000, epoch 3, baseSeq 5, offsets 42..45, maxTs 1700000000005.
    batch = java_batch("batch_idempotent_none")
    psm.append([batch])
    entry = psm.last_entry(1000)
    assert entry.producer_epoch == 3
    assert entry.batches == (BatchMetadata(8, 45, 3, 1700000000005),)
    assert (entry.first_seq, entry.first_data_offset) == (5, 42)
    dup = psm.analyze([batch]).duplicate
    assert (dup.producer_id, dup.first_offset, dup.last_offset) == (1000, 42, 45)


# -- transactions ----------------------------------------------------------------------------------


def test_transaction_lifecycle_and_lso(psm: ProducerStateManager) -> None:
    psm.append([data(1, 0, 0, 0, 2)])  # plain idempotent data at 0-1
    psm.append([data(2, 0, 0, 2, 3, txn=True)])  # txn of producer 2 from offset 2
    assert psm.ongoing_transactions() == {2: 2}
    assert psm.last_entry(2).current_txn_first_offset == 2
    assert psm.first_unstable_offset() == 2
    assert psm.last_stable_offset(high_watermark=1) == 1  # capped by the HW
    assert psm.last_stable_offset(high_watermark=5) == 2
    psm.append([data(2, 0, 3, 5, 1, txn=True)])  # same txn continues
    assert psm.ongoing_transactions() == {2: 2}
    with pytest.raises(InvalidTxnStateError) as e:
        psm.analyze([data(2, 0, 4, 6)])
    assert (e.value.code, e.value.name) == (48, "INVALID_TXN_STATE")
    assert "producer 2 at offset 6" in str(e.value) and "offset 2" in str(e.value)
    done = psm.append([marker(2, 0, 6, commit=False, coordinator_epoch=4)], COORDINATOR)
    assert done == [CompletedTxn(2, 2, 6, True, 7)]
    assert done[0].aborted_txn() == AbortedTxn(2, 2, 6, 7)
    assert psm.ongoing_transactions() == {}
    entry = psm.last_entry(2)
    assert entry.current_txn_first_offset is None and entry.coordinator_epoch == 4
    assert entry.last_timestamp == 2000
    # The marker is not below the HW yet: the transaction still holds the LSO back.
    assert psm.last_stable_offset(high_watermark=6) == 2
    assert psm.last_stable_offset(high_watermark=7) == 7
    psm.on_high_watermark_updated(7)
    assert psm.first_unstable_offset() is None
    # After the marker, non-transactional data is fine again; the sequence continues.
    psm.append([data(2, 0, 4, 7)])


def test_interleaved_transactions_lso_of_completion(psm: ProducerStateManager) -> None:
    psm.append([data(1, 0, 0, 10, 2, txn=True)])  # 10-11
    psm.append([data(2, 0, 0, 12, 2, txn=True)])  # 12-13
    psm.append([data(1, 0, 2, 14, 1, txn=True)])  # 14
    assert psm.ongoing_transactions() == {1: 10, 2: 12}
    assert psm.last_stable_offset(100) == 10
    # Producer 1 aborts at 15: producer 2's transaction from 12 is the LSO right after.
    (done,) = psm.append([marker(1, 0, 15, commit=False)], COORDINATOR)
    assert done == CompletedTxn(1, 10, 15, True, 12)
    assert psm.last_stable_offset(15) == 10  # the marker is not below the HW yet
    assert psm.last_stable_offset(16) == 12
    psm.on_high_watermark_updated(16)
    assert psm.first_unstable_offset() == 12
    (done,) = psm.append([marker(2, 0, 16, commit=True)], COORDINATOR)
    assert done == CompletedTxn(2, 12, 16, False, 17)
    with pytest.raises(ValueError, match="committed"):
        done.aborted_txn()
    psm.on_high_watermark_updated(17)
    assert psm.last_stable_offset(17) == 17


def test_marker_of_an_empty_transaction_completes_nothing(psm: ProducerStateManager) -> None:
    assert psm.append([marker(3, 1, 0, commit=True, coordinator_epoch=2)], COORDINATOR) == []
    entry = psm.last_entry(3)
    assert (entry.producer_epoch, entry.coordinator_epoch, entry.is_empty) == (1, 2, True)
    assert psm.map_end_offset == 1


def test_markers_are_fenced_by_epochs(psm: ProducerStateManager) -> None:
    psm.append([data(4, 5, 0, 0, txn=True)])
    psm.append([marker(4, 5, 1, commit=True, coordinator_epoch=3)], COORDINATOR)
    psm.append([data(4, 5, 1, 2, txn=True)])
    with pytest.raises(TransactionCoordinatorFencedError) as e:
        psm.analyze([marker(4, 5, 3, commit=True, coordinator_epoch=2)], COORDINATOR)
    assert (e.value.code, e.value.name) == (52, "TRANSACTION_COORDINATOR_FENCED")
    assert "2 (zombie), 3 (current)" in str(e.value)
    with pytest.raises(InvalidProducerEpochError):
        psm.analyze([marker(4, 4, 3, commit=True, coordinator_epoch=3)], COORDINATOR)
    # An epoch bump by the coordinator's abort clears the cached batches.
    (done,) = psm.append([marker(4, 6, 3, commit=False, coordinator_epoch=3)], COORDINATOR)
    assert done.first_offset == 2 and psm.last_entry(4).producer_epoch == 6
    assert psm.last_entry(4).is_empty


def test_real_transaction_and_commit_marker_from_kafkas_java_client(psm) -> None:
    # MANIFEST: txn batch pid 2000 epoch 1 seq 0 at 100-103; COMMIT marker at 104 with
    # coordinator epoch 5 in its value (00 00 | 00 00 00 05).
    txn, commit = java_batch("batch_txn_none"), java_batch("batch_control_commit")
    info = BatchInfo.of(commit)
    assert (info.is_control, info.control_type, info.coordinator_epoch) == (True, 1, 5)
    psm.append([txn])
    assert psm.ongoing_transactions() == {2000: 100}
    assert psm.append([commit], COORDINATOR) == [CompletedTxn(2000, 100, 104, False, 105)]
    assert psm.last_entry(2000).coordinator_epoch == 5


def test_real_abort_marker(psm: ProducerStateManager) -> None:
    raw = bytearray((JAVA_REF / "batch_control_commit.bin").read_bytes())
    key_type_at = raw.index(bytes.fromhex("0800000001")) + 3  # key: version 0, type 1 (COMMIT)
    raw[key_type_at + 1] = 0  # ABORT
    struct.pack_into(">I", raw, 17, crc32c.crc32c(bytes(raw[21:])))
    abort = RecordBatch(bytes(raw))
    abort.ensure_valid()
    assert BatchInfo.of(abort).control_type == 0
    psm.append([java_batch("batch_txn_none")])
    (done,) = psm.append([abort], COORDINATOR)
    assert done.aborted_txn() == AbortedTxn(2000, 100, 104, 105)


# -- snapshots, recovery, expiration -----------------------------------------------------------


def busy_history() -> list[BatchInfo]:
    return [
        data(1, 0, 0, 0, 3),
        data(2, 0, 0, 3, 2, txn=True),
        data(1, 0, 3, 5, 2),
        BatchInfo(7, 7, -1, -1, -1, -1, 5),
        data(3, 2, 0, 8, 1, txn=True),
        marker(2, 0, 9, commit=False, coordinator_epoch=1),
        data(2, 1, 0, 10, 4),
        data(1, 0, 5, 14, 1),
    ]


def test_snapshot_round_trip_and_replay_continue(tmp_path: Path) -> None:
    live = ProducerStateManager(TP, tmp_path)
    history = busy_history()
    live.replay(history[:5])
    path = live.take_snapshot()
    assert path == tmp_path / "00000000000000000009.snapshot"
    assert live.take_snapshot() is None  # no progress, no new snapshot
    live.replay(history[5:])

    recovered = ProducerStateManager(TP, tmp_path)
    recovered.load_snapshot(path)
    assert recovered.map_end_offset == 9
    assert recovered.ongoing_transactions() == {2: 3, 3: 8}
    assert recovered.last_entry(1).batches == (BatchMetadata(4, 6, 1, 1000),)
    completed = recovered.replay(history)  # batches below offset 9 are skipped
    assert completed == [CompletedTxn(2, 3, 9, True, 8)]
    assert recovered.snapshot_entries() == live.snapshot_entries()
    assert recovered.ongoing_transactions() == live.ongoing_transactions() == {3: 8}
    assert recovered.map_end_offset == live.map_end_offset == 15
    assert recovered.last_stable_offset(15) == live.last_stable_offset(15) == 8


def test_replay_from_scratch_equals_live_appends(psm: ProducerStateManager) -> None:
    live = ProducerStateManager(TP)
    for batch in busy_history():
        origin = COORDINATOR if batch.is_control else CLIENT
        live.append([batch], origin)
    psm.replay(busy_history())
    assert dict(psm.producers) == dict(live.producers)
    assert psm.snapshot_entries() == live.snapshot_entries()
    entry = psm.last_entry(3)
    assert ProducerSnapshotEntry.of(entry) == ProducerSnapshotEntry(3, 2, 0, 8, 0, 1000, -1, 8)
    assert ProducerSnapshotEntry.of(psm.last_entry(2)) == ProducerSnapshotEntry(
        2, 1, 3, 13, 3, 1000, 1, -1
    )


def test_entry_without_batches_in_a_snapshot(tmp_path: Path) -> None:
    psm = ProducerStateManager(TP, tmp_path)
    psm.append([marker(3, 1, 0, commit=True, coordinator_epoch=2)], COORDINATOR)
    (entry,) = psm.snapshot_entries()
    assert entry == ProducerSnapshotEntry(3, 1, -1, -1, 0, 2000, 2, -1)
    path = psm.take_snapshot()
    again = ProducerStateManager(TP, tmp_path)
    again.load_snapshot(path)
    assert again.last_entry(3) == psm.last_entry(3)


def test_truncate_and_reload(tmp_path: Path) -> None:
    psm = ProducerStateManager(TP, tmp_path)
    history = busy_history()
    snapshots = []
    for i in (3, 5, 8):
        psm.replay(history[:i])
        snapshots.append(psm.take_snapshot())
    assert [o for o, _ in list_snapshots(tmp_path)] == [7, 9, 15]
    # Truncate the log to end at 9: the snapshot at 15 goes, the one at 9 is loaded.
    psm.truncate_and_reload(0, 9)
    assert [o for o, _ in list_snapshots(tmp_path)] == [7, 9]
    assert psm.map_end_offset == 9 and psm.ongoing_transactions() == {2: 3, 3: 8}
    psm.replay(history)
    assert psm.map_end_offset == 15 and psm.ongoing_transactions() == {3: 8}
    # A corrupt latest snapshot is deleted and the previous one is used.
    snapshots[1].write_bytes(b"\x00\x01garbage!")
    psm.truncate_and_reload(0, 12)
    assert [o for o, _ in list_snapshots(tmp_path)] == [7]
    assert psm.map_end_offset == 7 and psm.ongoing_transactions() == {2: 3}
    psm.replay(history)
    assert psm.map_end_offset == 15
    # Log start beyond every snapshot: empty state at the log start.
    psm.truncate_and_reload(20, 25)
    assert list_snapshots(tmp_path) == [] and psm.map_end_offset == 20
    assert dict(psm.producers) == {}
    psm.truncate_fully_and_start_at(40)
    assert psm.map_end_offset == 40 and psm.take_snapshot() is None


def test_remove_expired_producers() -> None:
    psm = ProducerStateManager(TP, producer_id_expiration_ms=100)
    psm.append([data(1, 0, 0, 0, ts=1000)])
    psm.append([data(2, 0, 0, 1, ts=1050)])
    psm.append([data(3, 0, 0, 2, txn=True, ts=0)])  # ongoing transaction: never expires
    assert psm.remove_expired_producers(now_ms=1099) == []
    assert psm.remove_expired_producers(now_ms=1100) == [1]
    assert sorted(psm.producers) == [2, 3]
    assert psm.remove_expired_producers(now_ms=10_000) == [2]


def test_load_snapshot_drops_expired_producers(tmp_path: Path) -> None:
    path = tmp_path / snapshot_file_name(50)
    write_snapshot(
        path,
        [
            ProducerSnapshotEntry(1, 0, 4, 40, 4, 1000, -1, -1),
            ProducerSnapshotEntry(2, 0, 4, 45, 4, 5000, -1, -1),
            ProducerSnapshotEntry(3, 0, 0, 46, 0, 0, 7, 46),
        ],
    )
    psm = ProducerStateManager(TP, tmp_path, producer_id_expiration_ms=1000)
    psm.load_snapshot(path, now_ms=5500)
    assert sorted(psm.producers) == [2, 3]
    assert psm.ongoing_transactions() == {3: 46}
    assert psm.last_stable_offset(60) == 46
    with pytest.raises(CorruptSnapshotError, match="not named"):
        shutil.copyfile(path, tmp_path / "x.snapshot")
        psm.load_snapshot(tmp_path / "x.snapshot")


def test_snapshots_need_a_log_dir() -> None:
    with pytest.raises(ProducerStateError, match="no log dir"):
        ProducerStateManager(TP).take_snapshot()


# -- properties ----------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 3), st.integers(1, 5), st.booleans()), min_size=1, max_size=40
    ),
    st.integers(0, INT32_MAX),
)
def test_property_retries_return_original_offsets(steps, start_seq: int) -> None:
    """Producers send in-order batches and sometimes retry one of their last five: a retry is
    always a duplicate carrying the offsets first assigned, never an error."""
    psm = ProducerStateManager(TP)
    next_seq = {pid: start_seq for pid in range(4)}
    sent: dict[int, list[tuple[BatchInfo, int]]] = {pid: [] for pid in range(4)}
    offset = 0
    for pid, count, retry in steps:
        if retry and sent[pid]:
            original, first_offset = sent[pid][-1 - (count % min(5, len(sent[pid])))]
            again = BatchInfo(
                offset,
                offset + original.last_offset - original.base_offset,
                pid,
                0,
                original.base_sequence,
                original.last_sequence,
                0,
            )
            dup = psm.analyze([again]).duplicate
            assert dup is not None and dup.first_offset == first_offset
            assert dup.last_offset == original.last_offset
            continue
        batch = data(pid, 0, next_seq[pid], offset, count)
        psm.append([batch])
        sent[pid].append((batch, offset))
        next_seq[pid] = (next_seq[pid] + count) & INT32_MAX
        offset += count
    assert psm.map_end_offset == offset


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.builds(
            ProducerSnapshotEntry,
            st.integers(0, 2**63 - 1),
            st.integers(-1, 2**15 - 1),
            st.integers(-1, INT32_MAX),
            st.integers(-1, 2**63 - 1),
            st.integers(0, INT32_MAX),
            st.integers(-1, 2**63 - 1),
            st.integers(-1, INT32_MAX),
            st.integers(-1, 2**63 - 1),
        ),
        max_size=20,
    )
)
def test_property_snapshot_codec_round_trip(entries) -> None:
    raw = encode_snapshot(entries)
    assert len(raw) == 10 + 46 * len(entries)
    assert decode_snapshot(raw) == entries
