"""PartitionReader's last stable offset, aborted transactions and isolation-bounded fetches.

Partition directories are written with the real writer classes (SegmentWriter, the batch
builders, TransactionIndex, ProducerStateManager snapshots, offset checkpoints); the real Kafka
log dirs of the shared fixtures are read from copies.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from broker_embedded.errors import OffsetOutOfRangeError
from broker_embedded.record.control_record import EndTransactionMarker
from broker_embedded.record.memory_records_builder import build_record_batch
from broker_embedded.record.record_batch import Record, RecordBatch
from broker_embedded.record.records import iter_batches
from broker_embedded.storage import local_log
from broker_embedded.storage.fetch_data_info import FetchIsolation
from broker_embedded.storage.log_dir import LogDir
from broker_embedded.storage.offset_checkpoint import (
    LOG_START_OFFSET_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    OffsetCheckpointFile,
)
from broker_embedded.storage.partition_reader import PartitionReader
from broker_embedded.storage.producer_state_manager import AppendOrigin, ProducerStateManager
from broker_embedded.storage.segment_writer import SegmentWriter
from broker_embedded.storage.topic_partition import TopicPartition
from broker_embedded.storage.transaction_index import AbortedTxn, TransactionIndex

from .conftest import BITNAMI, KAFKA_37, copy_tree

TOPIC = "orders"
TP = TopicPartition(TOPIC, 0)
TS = 1_700_000_000_000
LOG_END, HIGH_WATERMARK, TXN_COMMITTED = FetchIsolation
BIG = 10**8


# -- building partition directories ----------------------------------------------------------------


def plain(offset: int, count: int = 1) -> bytes:
    """A non-transactional batch (no producer id) of ``count`` records from ``offset``."""
    records = [Record(o, TS + o, b"k%d" % o, b"v%d" % o) for o in range(offset, offset + count)]
    return build_record_batch(records)


def txn_data(pid: int, offset: int, count: int = 1, *, seq: int = 0) -> bytes:
    """A transactional data batch of producer ``pid`` (epoch 0) from ``offset``."""
    records = [Record(o, TS + o, b"k%d" % o, b"t%d" % o) for o in range(offset, offset + count)]
    return build_record_batch(
        records, producer_id=pid, producer_epoch=0, base_sequence=seq, is_transactional=True
    )


def commit(pid: int, offset: int) -> bytes:
    return EndTransactionMarker.commit(0).build_batch(
        base_offset=offset, timestamp=TS + offset, producer_id=pid, producer_epoch=0
    )


def abort(pid: int, offset: int) -> bytes:
    return EndTransactionMarker.abort(0).build_batch(
        base_offset=offset, timestamp=TS + offset, producer_id=pid, producer_epoch=0
    )


def base_of(batch: bytes) -> int:
    return next(iter_batches(batch)).base_offset


def write_log(log_dir: Path, batches: Sequence[bytes], *, roll_at: Sequence[int] = ()) -> Path:
    """Append ``batches`` (one append each), starting a segment at each offset of ``roll_at``;
    return the partition directory."""
    log_dir.mkdir(exist_ok=True)
    with SegmentWriter(log_dir, TP, clock_ms=lambda: TS) as writer:
        for batch in batches:
            if base_of(batch) in roll_at:
                writer.roll()
            writer.append(batch)
    return log_dir / TP.dir_name


def checkpoint(log_dir: Path, *, hw: int | None = None, log_start: int | None = None) -> None:
    for name, value in (
        (REPLICATION_OFFSET_CHECKPOINT, hw),
        (LOG_START_OFFSET_CHECKPOINT, log_start),
    ):
        path = log_dir / name
        if value is None:
            path.unlink(missing_ok=True)
        else:
            OffsetCheckpointFile(path).write({TP: value})


def open_reader(log_dir: Path, *, hw: int | None = None, log_start: int | None = None):
    checkpoint(log_dir, hw=hw, log_start=log_start)
    return LogDir(log_dir).open_partition(TP)


def lso(log_dir: Path, *, hw: int | None = None, log_start: int | None = None) -> int:
    with open_reader(log_dir, hw=hw, log_start=log_start) as reader:
        return reader.last_stable_offset


def snapshot(partition_dir: Path, batches: Sequence[bytes]) -> Path:
    """Write ``<offset after the batches>.snapshot`` of the producer state of ``batches``."""
    state = ProducerStateManager(TP, partition_dir)
    state.append([RecordBatch(b) for b in batches], AppendOrigin.REPLICATION)
    path = state.take_snapshot(sync=False)
    assert path is not None
    return path


def delete_segment(partition_dir: Path, base: int) -> None:
    for suffix in (".log", ".index", ".timeindex"):
        (partition_dir / f"{base:020d}{suffix}").unlink()


def listing(directory: Path) -> list[tuple[str, bytes]]:
    return sorted((p.name, p.read_bytes()) for p in directory.iterdir())


def bases(records: bytes) -> list[int]:
    return [b.base_offset for b in iter_batches(records)]


# -- last stable offset ----------------------------------------------------------------------------


def test_without_transactions_the_lso_is_the_hw(tmp_path: Path) -> None:
    idempotent = build_record_batch(
        [Record(3, TS, b"k", b"v")], producer_id=5, producer_epoch=0, base_sequence=0
    )
    write_log(tmp_path, [plain(0, 2), plain(2), idempotent, plain(4)])
    assert lso(tmp_path) == 5
    assert lso(tmp_path, hw=3) == 3
    assert lso(tmp_path, hw=0) == 0


def test_an_open_transaction_holds_the_lso_at_its_first_offset(tmp_path: Path) -> None:
    batches = [plain(0), txn_data(1, 1, 2), plain(3)]
    write_log(tmp_path, batches)
    with open_reader(tmp_path) as reader:
        assert (reader.high_watermark, reader.last_stable_offset) == (4, 1)
        got = reader.fetch(0, BIG, TXN_COMMITTED)
        assert (got.records, got.aborted_transactions) == (batches[0], ())
        assert (got.high_watermark, got.last_stable_offset, got.log_end_offset) == (4, 1, 4)
        at_lso = reader.fetch(1, BIG, TXN_COMMITTED)
        assert (at_lso.records, at_lso.aborted_transactions) == (b"", ())
        uncommitted = reader.fetch(0, BIG)
        assert uncommitted.records == b"".join(batches)
        assert uncommitted.aborted_transactions is None
    assert lso(tmp_path, hw=1) == 1
    assert lso(tmp_path, hw=0) == 0


def test_a_marker_at_or_above_the_hw_leaves_its_transaction_open(tmp_path: Path) -> None:
    write_log(tmp_path, [txn_data(1, 0, 2), commit(1, 2), plain(3)])
    assert lso(tmp_path, hw=2) == 0
    assert lso(tmp_path, hw=3) == 3
    assert lso(tmp_path) == 4
    with open_reader(tmp_path, hw=2) as reader:
        got = reader.fetch(0, BIG, TXN_COMMITTED)
        assert (got.records, got.aborted_transactions, got.last_stable_offset) == (b"", (), 0)
        assert bases(reader.fetch(0, BIG).records) == [0]


A2 = AbortedTxn(producer_id=2, first_offset=3, last_offset=7, last_stable_offset=6)
A1 = AbortedTxn(producer_id=1, first_offset=6, last_offset=8, last_stable_offset=9)
MIXED = [
    plain(0),  # segment 0
    txn_data(1, 1, 2),
    txn_data(2, 3, 2),
    commit(1, 5),
    txn_data(1, 6, seq=2),
    abort(2, 7),  # segment 7
    abort(1, 8),  # segment 8
    plain(9),
]


@pytest.fixture
def mixed(tmp_path: Path) -> Path:
    """Committed and aborted transactions, the aborts indexed in segments 7 and 8; segment 0 has
    no .txnindex."""
    directory = write_log(tmp_path, MIXED, roll_at=(7, 8))
    state = ProducerStateManager(TP)
    completed = state.append([RecordBatch(b) for b in MIXED], AppendOrigin.REPLICATION)
    assert [t.aborted_txn() for t in completed if t.is_aborted] == [A2, A1]  # as a writer indexes
    for base, txn in ((7, A2), (8, A1)):
        with TransactionIndex(directory / f"{base:020d}.txnindex", base) as index:
            index.append(txn)
    return tmp_path


def test_completed_transactions_below_the_hw_are_stable(mixed: Path) -> None:
    with open_reader(mixed) as reader:
        assert (reader.base_offsets, reader.high_watermark) == ([0, 7, 8], 10)
        assert reader.last_stable_offset == 10
        assert reader.aborted_transactions(0, 10) == (A2, A1)
        assert reader.aborted_transactions(8, 10) == (A1,)
        assert reader.aborted_transactions(0, 3) == ()  # A2's LSO 6 >= 3: the search stops
        assert reader.aborted_transactions(9, 10) == ()
    assert lso(mixed, hw=8) == 6  # pid 1's second transaction is aborted at 8, not below the HW
    assert lso(mixed, hw=7) == 3  # and pid 2's at 7
    assert lso(mixed, hw=5) == 1  # pid 1's first transaction commits at 5


@pytest.mark.parametrize(
    ("offset", "max_bytes", "records", "aborted"),
    [
        (0, BIG, [0, 1, 3, 5, 6], (A2, A1)),  # a read stays in its segment: end 7
        (0, 1, [0], ()),  # end 1: A2 starts at 3; its LSO 6 >= 1 completes the search
        (3, 1, [3], (A2,)),  # end 5
        (7, BIG, [7], (A2, A1)),  # end 8
        (8, BIG, [8, 9], (A1,)),  # end 10, the last segment: incomplete, nothing more
        (10, BIG, [], ()),  # at the HW: empty, the LSO as the end
    ],
)
def test_read_committed_lists_the_aborted_transactions_of_the_read(
    mixed: Path, offset: int, max_bytes: int, records: list[int], aborted: tuple
) -> None:
    with open_reader(mixed) as reader:
        got = reader.fetch(offset, max_bytes, TXN_COMMITTED)
        assert bases(got.records) == records
        assert got.aborted_transactions == aborted
        assert reader.fetch(offset, max_bytes, HIGH_WATERMARK).aborted_transactions is None
        assert reader.fetch(offset, max_bytes, LOG_END).aborted_transactions is None


# -- producer snapshots ----------------------------------------------------------------------------

ONGOING = [plain(0), txn_data(7, 1, 2), plain(3), plain(4), commit(7, 5), plain(6)]


def test_a_snapshot_below_the_hw_carries_an_ongoing_transaction(tmp_path: Path) -> None:
    directory = write_log(tmp_path, ONGOING, roll_at=(3,))
    assert snapshot(directory, ONGOING[:2]).name == "00000000000000000003.snapshot"
    assert [lso(tmp_path, hw=hw) for hw in (7, 6, 5, 4, 3, 1)] == [7, 6, 1, 1, 1, 1]
    delete_segment(directory, 0)  # retention: only the snapshot knows the transaction started
    before = listing(directory)
    assert lso(tmp_path, hw=5, log_start=3) == 3  # first offset 1, clamped to the log start
    assert lso(tmp_path, hw=6, log_start=3) == 6
    assert listing(directory) == before  # nothing written, nothing deleted


def test_the_snapshot_state_is_used_instead_of_the_log_before_it(tmp_path: Path) -> None:
    directory = write_log(tmp_path, [plain(o) for o in range(6)])
    snapshot(directory, [txn_data(9, 3)])  # at 4: producer 9's transaction from 3 is ongoing
    assert lso(tmp_path, hw=6) == 3
    assert lso(tmp_path, hw=4) == 3  # a snapshot at the HW itself is used
    assert lso(tmp_path, hw=3) == 3


def test_snapshots_outside_log_start_and_hw_are_ignored(tmp_path: Path) -> None:
    batches = [txn_data(7, 0, 2), commit(7, 2), plain(3)]
    directory = write_log(tmp_path, batches)
    snapshot(directory, batches)  # at 4, above the HW: it no longer knows the transaction
    assert lso(tmp_path, hw=2) == 0
    assert lso(tmp_path, hw=3) == 3
    assert lso(tmp_path, hw=4) == 4

    other = tmp_path / "other"
    directory = write_log(other, [plain(o) for o in range(6)])
    snapshot(directory, [txn_data(9, 1)])  # at 2, below the log start
    assert lso(other, hw=6, log_start=3) == 6
    assert lso(other, hw=6, log_start=2) == 2  # in range: producer 9 from 1, clamped


def test_a_corrupt_snapshot_is_skipped_and_left_in_place(tmp_path: Path) -> None:
    directory = write_log(tmp_path, ONGOING, roll_at=(3,))
    snapshot(directory, ONGOING[:2])
    corrupt = snapshot(directory, ONGOING[:4])
    assert corrupt.name == "00000000000000000005.snapshot"
    corrupt.write_bytes(corrupt.read_bytes()[:-1] + b"\xff")  # CRC mismatch
    (directory / "00000000000000000004.snapshot").write_bytes(b"not a snapshot")
    delete_segment(directory, 0)
    before = listing(directory)
    # 5 and 4 are unreadable; 3 knows producer 7's transaction from 1, its marker is at the HW
    assert lso(tmp_path, hw=5, log_start=3) == 3
    assert listing(directory) == before


# -- isolation bounds ------------------------------------------------------------------------------

BOUNDS = [plain(0), txn_data(1, 1), plain(2), commit(1, 3), plain(4), txn_data(2, 5), plain(6)]


@pytest.mark.parametrize("window", [64, 150, 4 << 20], ids=lambda w: f"window{w}")
def test_each_isolation_bounds_the_fetch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, window: int
) -> None:
    monkeypatch.setattr(local_log, "_SCAN_WINDOW_BYTES", window)  # windows cut batches
    write_log(tmp_path, BOUNDS)
    with open_reader(tmp_path, hw=6) as reader:
        assert (reader.high_watermark, reader.last_stable_offset, reader.log_end_offset) == (
            6,
            5,
            7,
        )
        for isolation, count in ((LOG_END, 7), (HIGH_WATERMARK, 6), (TXN_COMMITTED, 5)):
            got = reader.fetch(0, BIG, isolation)
            assert got.records == b"".join(BOUNDS[:count])
            assert type(got.records) is bytes
            lso = 5 if isolation is TXN_COMMITTED else -1  # only computed where it bounds
            assert (got.fetch_offset, got.high_watermark, got.last_stable_offset) == (0, 6, lso)
            assert (got.log_start_offset, got.log_end_offset) == (0, 7)
            assert got.first_entry_incomplete is False
        assert reader.fetch(0, BIG, TXN_COMMITTED).aborted_transactions == ()
        cut = reader.fetch(0, 100, LOG_END)
        assert cut.records == BOUNDS[0]  # the batch the limit cut is left out
        assert len(BOUNDS[0]) < 100 < len(BOUNDS[0]) + len(BOUNDS[1])
        first_only = reader.fetch(2, 10, HIGH_WATERMARK, min_one_message=False)
        assert (first_only.records, first_only.first_entry_incomplete) == (BOUNDS[2][:10], True)
        assert reader.fetch(5, BIG, TXN_COMMITTED).records == b""  # at the LSO
        assert reader.fetch(6, BIG).records == b""  # at the HW
        assert bases(reader.fetch(6, BIG, LOG_END).records) == [6]
        assert reader.fetch(7, BIG, LOG_END).records == b""  # at the log end


def test_offsets_outside_the_log_are_out_of_range(tmp_path: Path) -> None:
    write_log(tmp_path, [plain(o) for o in range(5)])
    with open_reader(tmp_path, hw=3, log_start=2) as reader:
        for offset in (1, 6):
            for isolation in FetchIsolation:
                with pytest.raises(OffsetOutOfRangeError) as e:
                    reader.fetch(offset, BIG, isolation)
                assert (e.value.code, e.value.name) == (1, "OFFSET_OUT_OF_RANGE")
                message = str(e.value)
                assert f"offset {offset} of topic '{TOPIC}' partition 0" in message
                assert "[2, 5] (log start, log end)" in message
        assert bases(reader.fetch(2, BIG).records) == [2]
        for isolation in FetchIsolation:
            at_hw = reader.fetch(3, BIG, isolation)
            assert bases(at_hw.records) == ([3, 4] if isolation is LOG_END else [])
            assert reader.fetch(5, BIG, isolation).records == b""


def test_a_reader_without_segments(tmp_path: Path) -> None:
    (tmp_path / TP.dir_name).mkdir()
    with PartitionReader(tmp_path / TP.dir_name) as reader:
        assert (reader.log_end_offset, reader.last_stable_offset) == (0, 0)
        got = reader.fetch(0, BIG, TXN_COMMITTED)
        assert (got.records, got.aborted_transactions) == (b"", ())


# -- real Kafka log dirs ---------------------------------------------------------------------------

REAL = [
    (KAFKA_37, TopicPartition("TestTopicPatient", 0)),  # idempotent producers
    (KAFKA_37, TopicPartition("__consumer_offsets", 6)),  # 00000000000000000013.snapshot
    (BITNAMI, TopicPartition("product-created-events-topic", 2)),  # checkpointed HW 5
    (BITNAMI, TopicPartition("__cluster_metadata", 0)),  # two segments, a snapshot at 14667
]


def raw_slice(log_file: Path, end_offset: int) -> bytes:
    """The bytes of the batches of a segment file whose base offset is below ``end_offset``."""
    data = log_file.read_bytes()
    end = 0
    for b in iter_batches(data):
        if b.base_offset >= end_offset:
            break
        end = b.position + b.size_in_bytes
    return data[:end]


@pytest.mark.parametrize(("source", "tp"), REAL, ids=lambda x: getattr(x, "name", str(x)))
def test_real_logs_have_no_transactions(tmp_path: Path, source: Path, tp: TopicPartition) -> None:
    log_dir = copy_tree(source, tmp_path / source.name)
    directory = log_dir / tp.dir_name
    before = listing(directory)
    with LogDir(log_dir).open_partition(tp) as reader:
        assert reader.last_stable_offset == reader.high_watermark == reader.log_end_offset
        for base in reader.base_offsets:
            log_file = directory / f"{base:020d}.log"
            for isolation in FetchIsolation:
                got = reader.fetch(base, BIG, isolation)
                assert got.records == log_file.read_bytes()
                assert got.aborted_transactions == (() if isolation is TXN_COMMITTED else None)
                batches = list(iter_batches(got.records, tail="error"))
                assert batches[0].base_offset == base
                assert all(b.is_valid() for b in batches)
    assert listing(directory) == before


def test_real_log_below_a_checkpointed_hw(tmp_path: Path) -> None:
    log_dir = copy_tree(BITNAMI, tmp_path / "bitnami")
    tp = TopicPartition("product-created-events-topic", 2)
    log_file = log_dir / tp.dir_name / "00000000000000000000.log"
    OffsetCheckpointFile(log_dir / REPLICATION_OFFSET_CHECKPOINT).write({tp: 3})
    with LogDir(log_dir).open_partition(tp) as reader:
        assert (reader.high_watermark, reader.last_stable_offset) == (3, 3)
        for isolation, end in ((LOG_END, 5), (HIGH_WATERMARK, 3), (TXN_COMMITTED, 3)):
            got = reader.fetch(0, BIG, isolation)
            assert got.records == raw_slice(log_file, end)
            assert bases(got.records) == list(range(end))


def test_threads_share_one_reader(mixed: Path) -> None:
    with open_reader(mixed, hw=8) as reader:
        with ThreadPoolExecutor(8) as pool:
            got = list(pool.map(lambda _: reader.fetch(0, BIG, TXN_COMMITTED), range(32)))
        assert {(g.last_stable_offset, g.records, g.aborted_transactions) for g in got} == {
            (6, b"".join(MIXED[:4]), (A2,))  # up to the commit at 5; end 6 = A2's LSO
        }
