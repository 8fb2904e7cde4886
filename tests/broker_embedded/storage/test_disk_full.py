"""The broker's own writes on a real full filesystem (a size-limited tmpfs, tmpfs_mount.py): a
failed append is cut back and answered KAFKA_STORAGE_ERROR, the producer state and the high
watermark do not move, and once space is back the same idempotent batch lands once; a roll that
fails leaves no segment a later append would follow torn bytes in; checkpoint files keep their
old contents and catch up; the log dir reopens clean and verifies."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from broker_embedded.broker import Broker
from broker_embedded.common.producer_record import ProducerRecord, build_batch
from broker_embedded.errors import KafkaStorageError
from broker_embedded.storage.log_segment import LogSegment
from broker_embedded.storage.log_segments import LogSegments
from broker_embedded.storage.offset_checkpoint import (
    REPLICATION_OFFSET_CHECKPOINT,
    OffsetCheckpointFile,
)
from broker_embedded.storage.storage_health import QUIET_S
from broker_embedded.storage.topic_partition import TopicPartition
from tests.tmpfs_mount import fill_leaving, tmpfs

TOPIC = "t"
TP = TopicPartition(TOPIC, 0)
STORAGE_ERROR = 56
DEADLINE_S = 30.0


def _batch(first: int, count: int, size: int, producer: tuple[int, int] | None = None) -> bytes:
    values = [
        ProducerRecord(f"{i:08d}".encode() * (size // 8), f"k{i}".encode())
        for i in range(first, first + count)
    ]
    if producer is None:
        return build_batch(values, now_ms=1_700_000_000_000)
    pid, epoch = producer
    return build_batch(
        values, now_ms=1_700_000_000_000, producer_id=pid, producer_epoch=epoch, base_sequence=first
    )


def _open(log_dir: Path, **config: object) -> Broker:
    broker = Broker(log_dir, create=True)
    if TOPIC not in broker.list_topics():
        broker.create_topic(TOPIC, 1, config=config)
    return broker


def _keys_on_disk(directory: Path) -> list[bytes]:
    """Every record key of the partition's segments, each segment verified (CRCs, indexes)."""
    keys = []
    for base in LogSegments.list_dir(directory).base_offsets:
        with LogSegment.open(directory, base) as seg:
            seg.verify()
            keys += [r.key for b in seg.batches() for r in b.records()]
    return keys


def test_an_append_on_a_full_disk_is_cut_back_and_the_retry_lands_once_space_is_back(
    tmp_path: Path,
) -> None:
    with tmpfs(8 << 20) as mount:
        log_dir = mount / "logs"
        broker = _open(log_dir)
        try:
            pid, epoch = broker.init_producer_id()
            assert broker.append(TP, _batch(0, 4, 1000, (pid, epoch))).error is None
            log = broker.log_manager.get_log(TP)
            segment = log_dir / "t-0" / "00000000000000000000.log"
            size, leo = segment.stat().st_size, log.log_end_offset
            filler = fill_leaving(mount, 64 << 10)
            big = _batch(4, 16, 8192, (pid, epoch))  # 128 KiB: half of it fits
            for attempt in (1, 2):
                result = broker.append(TP, big)
                assert type(result.error) is KafkaStorageError  # not offline: it recovers
                assert result.error.code == STORAGE_ERROR
                assert segment.stat().st_size == size and log.log_end_offset == leo
                assert log.high_watermark == leo
                assert broker.log_manager.health.failures >= attempt
            assert broker.log_manager.health.episodes == 1
            filler.unlink()
            landed = broker.append(TP, big)  # the same sequence: accepted, not out of order
            assert landed.error is None and not landed.duplicate
            assert (landed.base_offset, landed.last_offset) == (leo, leo + 15)
            again = broker.append(TP, big)
            assert again.error is None and again.duplicate
            assert (again.base_offset, again.last_offset) == (leo, leo + 15)
        finally:
            broker.close()
        assert (log_dir / ".kafka_cleanshutdown").exists()
        reopened = _open(log_dir)
        try:
            assert reopened.log_manager.get_log(TP).log_end_offset == leo + 16
        finally:
            reopened.close()
        assert _keys_on_disk(log_dir / "t-0") == [f"k{i}".encode() for i in range(20)]


def test_a_roll_on_a_full_disk_leaves_an_empty_segment_the_next_append_fills(
    tmp_path: Path,
) -> None:
    with tmpfs(8 << 20) as mount:
        log_dir = mount / "logs"
        broker = _open(log_dir, **{"segment.bytes": 200_000})
        try:
            for i in range(0, 18, 6):  # 3 batches of about 49 KB
                assert broker.append(TP, _batch(i, 6, 8192)).error is None
            filler = fill_leaving(mount, 32 << 10)
            result = broker.append(TP, _batch(18, 12, 8192))  # 96 KiB, rolls at 18: torn
            assert result.error is not None and result.error.code == STORAGE_ERROR
            directory = log_dir / "t-0"
            rolled = directory / "00000000000000000018.log"
            assert not rolled.exists() or rolled.stat().st_size == 0
            filler.unlink()
            landed = broker.append(TP, _batch(18, 12, 8192))
            assert landed.error is None and landed.base_offset == 18
            assert LogSegments.list_dir(directory).base_offsets == [0, 18]
            assert rolled.stat().st_size == len(_batch(18, 12, 8192))
        finally:
            broker.close()
        assert _keys_on_disk(log_dir / "t-0") == [f"k{i}".encode() for i in range(30)]


def test_a_roll_without_a_free_inode_creates_no_file_and_the_old_segment_stays_active(
    tmp_path: Path,
) -> None:
    with tmpfs(16 << 20, inodes=200) as mount:
        log_dir = mount / "logs"
        broker = _open(log_dir, **{"segment.bytes": 100_000})
        try:
            assert broker.append(TP, _batch(0, 6, 8192)).error is None
            spare = mount / "spare"
            spare.mkdir()
            made = []
            for i in range(1000):  # bounded: far more than the 200 inodes
                try:
                    (spare / str(i)).touch()
                except OSError:
                    break
                made.append(spare / str(i))
            result = broker.append(TP, _batch(6, 12, 8192))  # rolls at offset 6
            assert result.error is not None and result.error.code == STORAGE_ERROR
            directory = log_dir / "t-0"
            assert sorted(p.name for p in directory.glob("00000000000000000006.*")) == []
            for p in made[:10]:
                p.unlink()
            landed = broker.append(TP, _batch(6, 12, 8192))
            assert landed.error is None and landed.base_offset == 6
            assert LogSegments.list_dir(directory).base_offsets == [0, 6]
        finally:
            broker.close()
        assert _keys_on_disk(log_dir / "t-0") == [f"k{i}".encode() for i in range(18)]


def test_checkpoints_on_a_full_disk_keep_the_old_file_and_catch_up_once_space_is_back(
    tmp_path: Path,
) -> None:
    with tmpfs(8 << 20) as mount:
        log_dir = mount / "logs"
        broker = _open(log_dir)
        hw_file = OffsetCheckpointFile(log_dir / REPLICATION_OFFSET_CHECKPOINT)
        try:
            assert broker.append(TP, _batch(0, 3, 100)).error is None
            _wait_for(lambda: hw_file.read_or_empty().get(TP) == 3)
            filler = fill_leaving(mount, 0)
            before = (log_dir / REPLICATION_OFFSET_CHECKPOINT).read_bytes()
            assert broker.append(TP, _batch(3, 2, 100)).error is None  # fits the page
            _wait_for(lambda: broker.log_manager.health.failing)
            assert (log_dir / REPLICATION_OFFSET_CHECKPOINT).read_bytes() == before
            assert sorted(p.name for p in log_dir.glob("*.tmp")) == []
            filler.unlink()
            _wait_for(lambda: hw_file.read_or_empty().get(TP) == 5)
        finally:
            broker.close()
        assert (log_dir / ".kafka_cleanshutdown").exists()


def _wait_for(condition) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, "not reached in time"
        time.sleep(0.02)


def test_closing_on_a_full_disk_recovers_at_the_next_start(tmp_path: Path) -> None:
    with tmpfs(8 << 20) as mount:
        log_dir = mount / "logs"
        broker = _open(log_dir)
        try:
            assert broker.append(TP, _batch(0, 3, 100)).error is None
            fill_leaving(mount, 0)
            assert broker.append(TP, _batch(3, 2, 100)).error is None  # fits the page
        finally:
            broker.close()  # the last checkpoints cannot be written
        assert not (log_dir / ".kafka_cleanshutdown").exists()
        for p in mount.glob("filler"):
            os.unlink(p)
        reopened = _open(log_dir)
        try:
            log = reopened.log_manager.get_log(TP)
            assert log.log_end_offset == 5
        finally:
            reopened.close()
        assert _keys_on_disk(log_dir / "t-0") == [f"k{i}".encode() for i in range(5)]


def test_an_abort_whose_txnindex_entry_does_not_fit_takes_the_log_offline_until_a_restart(
    tmp_path: Path,
) -> None:
    """The marker is in the log but its ``.txnindex`` entry is not: read_committed readers
    would see the aborted records, so the log goes offline (KAFKA_STORAGE_ERROR, as Kafka's
    failed log dir) and the next start recovers it, rebuilding the entry."""
    from broker_embedded.coordinator.transaction_coordinator import TxnCompletion
    from broker_embedded.errors import LogDirFailureError
    from broker_embedded.storage.producer_state_manager import AppendOrigin

    with tmpfs(8 << 20) as mount:
        log_dir = mount / "logs"
        broker = _open(log_dir)
        pid, epoch = broker.init_producer_id()
        try:
            txn = build_batch(
                [ProducerRecord(b"x" * 100, b"k0")],
                now_ms=1_700_000_000_000,
                producer_id=pid,
                producer_epoch=epoch,
                base_sequence=0,
                is_transactional=True,
            )
            assert broker.append(TP, txn).error is None  # 180 bytes: the page has room
            log = broker.log_manager.get_log(TP)
            hw_file = OffsetCheckpointFile(log_dir / REPLICATION_OFFSET_CHECKPOINT)
            _wait_for(lambda: hw_file.read_or_empty().get(TP) == 1)  # no write under way
            filler = fill_leaving(mount, 0)  # not even a page for the new .txnindex
            marker = TxnCompletion("app", pid, epoch, False, (TP,)).marker_batch(1)
            assert broker.append(TP, marker, origin=AppendOrigin.COORDINATOR).error is None
            assert log.failure is not None
            result = broker.append(TP, _batch(2, 1, 100))
            assert type(result.error) is LogDirFailureError and result.error.code == 56
        finally:
            broker.close()
        assert not (log_dir / ".kafka_cleanshutdown").exists()
        filler.unlink()
        reopened = _open(log_dir)
        try:
            log = reopened.log_manager.get_log(TP)
            assert log.log_end_offset == 2 and log.failure is None
            aborted = log.collect_aborted_transactions(0, 2)
            assert [(a.producer_id, a.first_offset, a.last_offset) for a in aborted] == [
                (pid, 0, 1)
            ]
            assert reopened.append(TP, _batch(2, 1, 100)).error is None
        finally:
            reopened.close()


def test_a_broker_started_on_a_full_disk_answers_56_until_space_is_back(tmp_path: Path) -> None:
    """Becoming leader again cannot record the new leader epoch; the first append of the
    epoch does (before its bytes, as Kafka), so it answers 56 until the checkpoint fits."""
    with tmpfs(8 << 20) as mount:
        log_dir = mount / "logs"
        broker = _open(log_dir)
        try:
            assert broker.append(TP, _batch(0, 3, 100)).error is None
        finally:
            broker.close()
        epochs = log_dir / "t-0" / "leader-epoch-checkpoint"
        assert epochs.read_text() == "0\n1\n0 0\n"
        filler = fill_leaving(mount, 0)
        broker = _open(log_dir)
        try:
            result = broker.append(TP, _batch(3, 3, 100))
            assert result.error is not None and result.error.code == STORAGE_ERROR
            assert epochs.read_text() == "0\n1\n0 0\n"
            filler.unlink()
            assert broker.append(TP, _batch(3, 3, 100)).base_offset == 3
            assert epochs.read_text() == "0\n2\n0 0\n1 3\n"
        finally:
            broker.close()
        assert _keys_on_disk(log_dir / "t-0") == [f"k{i}".encode() for i in range(6)]


def test_creating_a_topic_on_a_full_disk_fails_whole_and_works_once_space_is_back(
    tmp_path: Path,
) -> None:
    with tmpfs(8 << 20) as mount:
        broker = _open(mount / "logs")
        try:
            filler = fill_leaving(mount, 0)
            try:
                broker.create_topic("b", 2)
            except KafkaStorageError as e:
                assert "registering topic 'b'" in str(e) and e.code == STORAGE_ERROR
            else:
                raise AssertionError("created a topic on a full disk")
            assert broker.list_topics() == [TOPIC]
            filler.unlink()
            broker.create_topic("b", 2)
            assert sorted(broker.list_topics()) == ["b", TOPIC]
            assert broker.produce("b", 1, [b"x"]).base_offset == 0
        finally:
            broker.close()


def test_a_second_full_disk_episode_after_a_quiet_spell_is_logged_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The disk fills, is freed, one append succeeds at once and the partition goes quiet; when
    the disk fills again later, that new episode gets its own line (it was counted silently in
    the old episode, which no later success had ended)."""
    caplog.set_level(logging.INFO, logger="broker_embedded.storage.storage_health")
    with tmpfs(8 << 20) as mount:
        broker = _open(mount / "logs")
        try:
            health = broker.log_manager.health
            filler = fill_leaving(mount, 16 << 10)
            assert broker.append(TP, _batch(0, 8, 8192)).error.code == STORAGE_ERROR
            filler.unlink()
            assert broker.append(TP, _batch(0, 1, 100)).error is None  # within QUIET_S
            time.sleep(QUIET_S + 0.5)  # quiet: no write at all
            filler = fill_leaving(mount, 16 << 10)
            assert broker.append(TP, _batch(1, 8, 8192)).error.code == STORAGE_ERROR
            filler.unlink()
        finally:
            broker.close()
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2, [r.getMessage() for r in caplog.records]
    assert health.episodes == 2


def _segments_deleted_on_a_full_disk(delete: Callable[[Broker], int], start: int) -> None:
    """Six segments of 12 records (0..71), the disk filled to the last byte, ``delete`` moves
    the log start offset to ``start``: it must delete the segments below (that is how an
    operator frees a full disk) though the leader epoch checkpoint cannot be rewritten; the
    space they held takes appends again, and a restart starts the log at ``start``."""
    with tmpfs(8 << 20) as mount:
        log_dir = mount / "logs"
        broker = _open(
            log_dir, **{"segment.bytes": 100_000, "retention.bytes": 350_000, "retention.ms": -1}
        )
        directory = log_dir / "t-0"
        try:
            for i in range(0, 72, 6):  # 12 batches of about 49 KB, two a segment
                assert broker.append(TP, _batch(i, 6, 8192)).error is None
            log = broker.log_manager.get_log(TP)
            assert LogSegments.list_dir(directory).base_offsets == [0, 12, 24, 36, 48, 60]
            filler = fill_leaving(mount, 0)
            assert delete(broker) == start
            assert log.log_start_offset == start
            assert LogSegments.list_dir(directory).base_offsets == [24, 36, 48, 60]
            assert broker.append(TP, _batch(72, 6, 8192)).error is None  # the space freed
            filler.unlink()
        finally:
            broker.close()
        reopened = _open(log_dir)
        try:
            assert reopened.log_manager.get_log(TP).log_start_offset == start
        finally:
            reopened.close()
        assert _keys_on_disk(directory) == [f"k{i}".encode() for i in range(24, 78)]


def test_delete_records_on_a_full_disk_deletes_segments_and_frees_their_space(
    tmp_path: Path,
) -> None:
    _segments_deleted_on_a_full_disk(lambda b: b.delete_records(TOPIC, 0, 30), 30)


def test_retention_on_a_full_disk_deletes_segments_and_frees_their_space(tmp_path: Path) -> None:
    def retention(b: Broker) -> int:  # retention.bytes 350,000: two segments of 98,594 go
        assert b.log_manager.cleanup_logs() == 2
        return b.log_manager.get_log(TP).log_start_offset

    _segments_deleted_on_a_full_disk(retention, 24)


def test_deleting_a_topic_on_a_full_disk_frees_its_space_and_it_stays_deleted(
    tmp_path: Path,
) -> None:
    """Deleting a topic is how an operator frees a full disk: its partitions are deleted first,
    so the topic file's rewrite fits in the space they held; the topic is gone, also after a
    restart (before, the failed rewrite left the logs open and their directories on disk, and
    a restart adopted them again)."""
    with tmpfs(8 << 20) as mount:
        log_dir = mount / "logs"
        broker = _open(log_dir)
        try:
            broker.create_topic("other", 2)
            for p in range(2):
                other = TopicPartition("other", p)
                assert broker.append(other, _batch(0, 6, 8192)).error is None
            filler = fill_leaving(mount, 0)
            broker.delete_topic("other")
            assert broker.list_topics() == [TOPIC]
            assert not (log_dir / "other-0").exists() and not (log_dir / "other-1").exists()
            assert broker.append(TP, _batch(0, 6, 8192)).error is None  # the space freed
            filler.unlink()
        finally:
            broker.close()
        reopened = _open(log_dir)
        try:
            assert reopened.list_topics() == [TOPIC]
        finally:
            reopened.close()


def test_a_follower_truncation_on_a_full_disk_changes_nothing_until_space_is_back(
    tmp_path: Path,
) -> None:
    """A follower truncating divergent history (epoch 1 from offset 12) while its disk is full:
    the leader epoch checkpoint cannot be rewritten (the cut frees no page), so the truncation
    is refused with KAFKA_STORAGE_ERROR before any segment is touched (before: a raw OSError
    after the log was cut, the cache in memory still naming epoch 1 past the log end, and the
    replica fetcher logged a traceback per retry); once space is back
    the same truncation works, and the checkpoint holds the epochs of what the log holds."""
    with tmpfs(8 << 20) as mount:
        log_dir = mount / "logs"
        broker = _open(log_dir)
        try:
            log = broker.log_manager.get_log(TP)
            for i, epoch in ((0, 0), (6, 0), (12, 1), (18, 1)):
                log.append_as_leader(_batch(i, 6, 8), leader_epoch=epoch)  # in one page
            assert [(e.epoch, e.start_offset) for e in log.leader_epoch_cache.entries()] == [
                (0, 0),
                (1, 12),
            ]
            filler = fill_leaving(mount, 0)
            with pytest.raises(KafkaStorageError):
                log.truncate_to(12)
            assert log.log_end_offset == 24
            assert [e.epoch for e in log.leader_epoch_cache.entries()] == [0, 1]
            filler.unlink()
            assert log.truncate_to(12)
            assert log.log_end_offset == 12
            assert [e.epoch for e in log.leader_epoch_cache.entries()] == [0]
        finally:
            broker.close()
        assert (log_dir / "t-0" / "leader-epoch-checkpoint").read_text() == "0\n1\n0 0\n"
        reopened = _open(log_dir)
        try:
            assert reopened.log_manager.get_log(TP).log_end_offset == 12
        finally:
            reopened.close()
        assert _keys_on_disk(log_dir / "t-0") == [f"k{i}".encode() for i in range(12)]


def test_a_broker_restarted_without_appends_starts_again_on_a_full_disk(tmp_path: Path) -> None:
    """Each start leads with a new leader epoch starting at the log end; a second start finds
    that entry with nothing after it and drops it, which rewrites the leader epoch checkpoint.
    On a full disk that rewrite fails: the broker starts anyway (before: OSError, the broker
    could not start), answers 56 while the disk is full, and appends once space is back."""
    with tmpfs(8 << 20) as mount:
        log_dir = mount / "logs"
        broker = _open(log_dir)
        assert broker.append(TP, _batch(0, 6, 8)).error is None
        broker.close()
        _open(log_dir).close()  # leads at a new epoch from offset 6, appends nothing
        filler = fill_leaving(mount, 0)
        broker = _open(log_dir)
        try:
            assert broker.append(TP, _batch(6, 6, 8192)).error.code == STORAGE_ERROR
            filler.unlink()
            landed = broker.append(TP, _batch(6, 6, 8))
            assert landed.error is None and landed.base_offset == 6
        finally:
            broker.close()
        assert _keys_on_disk(log_dir / "t-0") == [f"k{i}".encode() for i in range(12)]
