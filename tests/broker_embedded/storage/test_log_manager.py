"""LogManager on real log dirs: the .lock, the clean-shutdown marker and recovery, checkpoint
files (exact bytes, coalescing, what a LogDir reader sees), kafkalog-topics.json, a log dir
copied from a real Kafka broker, and deleting topics."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from broker_embedded.broker import Broker
from broker_embedded.errors import (
    BrokerClosedError,
    LogDirLockedError,
    UnknownTopicOrPartitionError,
)
from broker_embedded.record.memory_records_builder import MemoryRecordsBuilder
from broker_embedded.storage.fetch_data_info import FetchIsolation
from broker_embedded.storage.log_dir import LogDir, NotALogDirError
from broker_embedded.storage.log_manager import CLEAN_SHUTDOWN_FILE, LogManager
from broker_embedded.storage.offset_checkpoint import OffsetCheckpointFile
from broker_embedded.storage.partition_metadata import (
    PartitionMetadataFile,
    topic_id_from_string,
    topic_id_to_string,
)
from broker_embedded.storage.topic_config_file import TopicEntry
from broker_embedded.storage.topic_partition import TopicPartition
from spark_kafkalog.dump_log import dump

from ..record._peers import kafka_python_read
from .conftest import BITNAMI, KAFKA_37

T0 = 1_700_000_000_000
HW_FILE, RP_FILE, LSO_FILE = (
    "replication-offset-checkpoint",
    "recovery-point-offset-checkpoint",
    "log-start-offset-checkpoint",
)
REPO = Path(__file__).resolve().parents[3]


def batch(*values: bytes, ts: int = T0) -> bytes:
    builder = MemoryRecordsBuilder(0)
    for v in values:
        builder.append(None, ts, b"k", v)
    return builder.build()


def entry(partitions: int, **config: str) -> TopicEntry:
    return TopicEntry(uuid.uuid4(), partitions, 1, config)


def manager(log_dir: Path, **kw) -> LogManager:
    kw.setdefault("checkpoint_interval_ms", 20)
    return LogManager(log_dir, **kw, create=True)


def wait_for(predicate, timeout: float = 5.0) -> float:
    """Poll ``predicate`` until it holds; return the seconds it took (fails after timeout)."""
    start = time.monotonic()
    while not predicate():
        assert time.monotonic() - start < timeout, "condition not reached in time"
        time.sleep(0.002)
    return time.monotonic() - start


# -- the lock --------------------------------------------------------------------------------------


def test_second_manager_is_refused_naming_the_owner_in_and_out_of_process(tmp_path: Path) -> None:
    lm = manager(tmp_path, owner="broker A", node_id=3)
    owner = f"pid {os.getpid()} on host"
    with pytest.raises(LogDirLockedError, match=f"{owner} .*\\(broker A 3\\)") as e:
        manager(tmp_path)
    assert str(tmp_path) in str(e.value) and "another LogDirLock in this process" in str(e.value)
    child = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys\nfrom broker_embedded.storage.log_manager import "
            "LogManager\ntry:\n    LogManager(sys.argv[1], create=True)\nexcept Exception as e:\n"
            "    print(type(e).__name__, e)\n    sys.exit(3)",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert child.returncode == 3, child.stderr
    assert child.stdout.startswith("LogDirLockedError ")
    assert f"locked by {owner}" in child.stdout and "(broker A 3)" in child.stdout
    assert "another process owns it" in child.stdout
    lm.close()
    manager(tmp_path).close()  # released on close


# -- clean shutdown and recovery ---------------------------------------------------------------


def test_clean_shutdown_marker_is_written_on_close_and_removed_on_open(tmp_path: Path) -> None:
    marker = tmp_path / CLEAN_SHUTDOWN_FILE
    lm = manager(tmp_path)
    assert lm.had_clean_shutdown is False and not marker.exists()
    lm.put_topic("t", entry(1))
    lm.get_or_create_log(TopicPartition("t", 0)).append_as_leader(batch(b"a"), 0)
    lm.close()
    assert marker.read_bytes() == b""
    lm = manager(tmp_path)
    assert lm.had_clean_shutdown is True and not marker.exists()
    lm.close(clean=False)
    assert not marker.exists()
    lm = manager(tmp_path)
    assert lm.had_clean_shutdown is False
    lm.close()
    assert marker.exists()


def test_unclean_open_recovers_every_log(tmp_path: Path) -> None:
    tp = TopicPartition("t", 0)
    lm = manager(tmp_path)
    lm.put_topic("t", entry(1))
    lg = lm.get_or_create_log(tp)
    for i in range(3):
        lg.append_as_leader(batch(b"v%d" % i, b"w%d" % i), 0)
    lg.update_high_watermark(6)
    lm.checkpoint()
    lm.close(clean=False)
    segment = tmp_path / "t-0" / "00000000000000000000.log"
    valid = segment.read_bytes()
    with open(segment, "ab") as f:
        f.write(batch(b"torn")[:30])
    lm = manager(tmp_path)
    lg = lm.get_log(tp)
    assert lm.had_clean_shutdown is False
    assert (lg.log_end_offset, lg.high_watermark, lg.recovery_point) == (6, 6, 6)
    assert segment.read_bytes() == valid
    assert dump([tmp_path], io.StringIO(), verify=True, summary_only=True) == 0
    lm.checkpoint()
    assert (tmp_path / RP_FILE).read_text() == "0\n1\nt 0 6\n"
    lm.close()


# -- checkpoint files ------------------------------------------------------------------------------


def test_checkpoint_files_hold_exact_offsets_after_changes(tmp_path: Path) -> None:
    lm = manager(tmp_path)
    lm.put_topic("t", entry(2, **{"segment.bytes": "200"}))
    lm.put_topic("u", entry(1))
    t0, t1, u0 = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("u", 0)
    logs = {tp: lm.get_or_create_log(tp) for tp in (t0, t1, u0)}
    for i in range(4):
        logs[t0].append_as_leader(batch(b"x" * 100, b"y%d" % i), 0)  # rolls at each batch
    logs[t1].append_as_leader(batch(b"a", b"b", b"c"), 0)
    logs[t0].update_high_watermark(6)
    logs[t1].update_high_watermark(2)
    logs[t0].delete_records_before(4)
    logs[t1].flush()

    expected = {
        HW_FILE: "0\n3\nt 0 6\nt 1 2\nu 0 0\n",
        RP_FILE: "0\n3\nt 0 6\nt 1 3\nu 0 0\n",  # t-0: its last roll, at 6; t-1: flushed
        LSO_FILE: "0\n3\nt 0 4\nt 1 0\nu 0 0\n",
    }
    # Published by the checkpoint thread, without calling checkpoint().
    wait_for(
        lambda: all(
            (tmp_path / n).exists() and (tmp_path / n).read_text() == text
            for n, text in expected.items()
        )
    )
    lm.close()  # the final checkpoint also records the recovery points of the flushed logs
    assert (tmp_path / HW_FILE).read_text() == expected[HW_FILE]
    assert (tmp_path / RP_FILE).read_text() == "0\n3\nt 0 8\nt 1 3\nu 0 0\n"
    assert (tmp_path / LSO_FILE).read_text() == expected[LSO_FILE]
    lm = manager(tmp_path)
    lg = lm.get_log(t0)
    assert (lg.log_start_offset, lg.high_watermark, lg.recovery_point) == (4, 6, 8)
    assert not (tmp_path / f"{HW_FILE}.tmp").exists()
    lm.close()


def test_hw_checkpoints_coalesce_and_reach_a_log_dir_reader_promptly(tmp_path: Path) -> None:
    interval_ms = 100
    tp = TopicPartition("t", 0)
    lm = manager(tmp_path, checkpoint_interval_ms=interval_ms)
    lm.put_topic("t", entry(1))
    lg = lm.get_or_create_log(tp)
    path = tmp_path / HW_FILE
    wait_for(lambda: path.exists())  # the new log's first checkpoint (HW 0) is not counted
    seen: set[bytes] = set()
    stop = threading.Event()

    def poll() -> None:  # every HW value that the file ever showed to a reader
        while not stop.is_set():
            try:
                seen.add(path.read_bytes())
            except FileNotFoundError:
                pass
            time.sleep(0.0005)

    reader = threading.Thread(target=poll, daemon=True)
    reader.start()
    start = time.monotonic()
    for i in range(200):  # 200 HW moves, 5 ms apart: a write per move would show ~200 values
        lg.append_as_leader(batch(b"%d" % i), 0)
        lg.update_high_watermark(lg.log_end_offset)
        time.sleep(0.005)
    wait_for(lambda: path.read_bytes() == b"0\n1\nt 0 200\n")
    elapsed = time.monotonic() - start  # until the last write: at most 1 + elapsed / interval
    stop.set()
    reader.join()
    values = {s for s in seen if s.startswith(b"0\n1\nt 0 ")} - {b"0\n1\nt 0 0\n"}
    assert 2 <= len(values) <= elapsed / (interval_ms / 1000) + 2, (len(values), elapsed)

    # One more HW move: a reader opening the log dir sees it within half a second.
    lg.append_as_leader(batch(b"last"), 0)
    moved = time.monotonic()
    lg.update_high_watermark(201)
    wait_for(lambda: LogDir(tmp_path).high_watermarks.get(tp) == 201, timeout=0.5)
    assert time.monotonic() - moved < 0.5
    fetched = LogDir(tmp_path).open_partition(tp).fetch(199, 1 << 20)
    assert [r.value for b in kafka_python_read(fetched.records) for r in b.records] == [
        b"199",
        b"last",
    ]
    lm.close()


def test_a_new_log_is_published_with_its_hw_before_it_is_handed_out(tmp_path: Path) -> None:
    lm = manager(tmp_path, checkpoint_interval_ms=60_000)
    lm.put_topic("t", entry(2))
    lm.get_or_create_log(TopicPartition("t", 0))
    wait_for(lambda: (tmp_path / HW_FILE).exists())  # the thread wrote, then waits a minute
    lg = lm.get_or_create_log(TopicPartition("t", 1))
    assert (tmp_path / HW_FILE).read_text() == "0\n2\nt 0 0\nt 1 0\n"
    lg.append_as_leader(batch(b"not yet committed"), 0)
    reader = LogDir(tmp_path).open_partition(TopicPartition("t", 1))
    assert (reader.high_watermark, reader.fetch(0, 1 << 20).records) == (0, b"")
    lm.close()


# -- topics ----------------------------------------------------------------------------------------


def test_topics_file_is_persisted_and_reloaded(tmp_path: Path) -> None:
    topic_id = uuid.UUID("0b4e8f4c-5a2d-4f0e-9d6b-3c2a1f0e9d8c")
    config = {"segment.bytes": "1048576", "cleanup.policy": "compact"}
    lm = manager(tmp_path)
    lm.put_topic("events", TopicEntry(topic_id, 2, 1, config))
    text = (tmp_path / "kafkalog-topics.json").read_text()
    assert json.loads(text) == {
        "version": 1,
        "topics": {
            "events": {
                "topic_id": topic_id_to_string(topic_id),
                "partitions": 2,
                "replication_factor": 1,
                "config": {"cleanup.policy": "compact", "segment.bytes": "1048576"},
            }
        },
    }
    lg = lm.get_or_create_log(TopicPartition("events", 1))
    assert (lg.config.compact, lg.config.segment_bytes) == (True, 1048576)
    with pytest.raises(UnknownTopicOrPartitionError, match="topic 'events' partition 2"):
        lm.get_or_create_log(TopicPartition("events", 2))
    lm.close()
    metadata = PartitionMetadataFile(tmp_path / "events-1" / "partition.metadata").read()
    assert metadata.topic_id == topic_id
    lm = manager(tmp_path)
    assert lm.topics == {"events": TopicEntry(topic_id, 2, 1, config)}
    assert set(lm.logs) == {TopicPartition("events", 1)}
    assert lm.get_log(TopicPartition("events", 1)).config.segment_bytes == 1048576
    lm.close()


def test_delete_topic_removes_dirs_and_checkpoint_entries(tmp_path: Path) -> None:
    lm = manager(tmp_path)
    lm.put_topic("gone", entry(2))
    lm.put_topic("kept", entry(1))
    for tp in (TopicPartition("gone", 0), TopicPartition("gone", 1), TopicPartition("kept", 0)):
        lg = lm.get_or_create_log(tp)
        lg.append_as_leader(batch(b"a", b"b"), 0)
        lg.update_high_watermark(2)
    lm.checkpoint()
    assert (tmp_path / HW_FILE).read_text() == "0\n3\ngone 0 2\ngone 1 2\nkept 0 2\n"
    gone = lm.get_log(TopicPartition("gone", 0))
    lm.delete_topic("gone")
    assert not (tmp_path / "gone-0").exists() and not (tmp_path / "gone-1").exists()
    assert lm.get_log(TopicPartition("gone", 0)) is None and set(lm.topics) == {"kept"}
    assert gone.is_closed
    with pytest.raises(BrokerClosedError):
        gone.append_as_leader(batch(b"late"), 0)
    wait_for(
        lambda: (
            [(tmp_path / n).read_text() for n in (HW_FILE, RP_FILE, LSO_FILE)]
            == ["0\n1\nkept 0 2\n", "0\n1\nkept 0 0\n", "0\n1\nkept 0 0\n"]
        )
    )
    assert set(json.loads((tmp_path / "kafkalog-topics.json").read_text())["topics"]) == {"kept"}
    with pytest.raises(UnknownTopicOrPartitionError):
        lm.get_or_create_log(TopicPartition("gone", 0))
    lm.close()
    lm = manager(tmp_path)
    assert set(lm.logs) == {TopicPartition("kept", 0)}
    lm.close()


def test_delete_topic_while_its_logs_are_busy_does_not_deadlock(tmp_path: Path) -> None:
    lm = manager(tmp_path)
    errors: list[BaseException] = []
    for round_ in range(15):  # the lock-order inversion this guards against hung in round 0
        topic = f"busy{round_}"
        lm.put_topic(topic, entry(1))
        lg = lm.get_or_create_log(TopicPartition(topic, 0))
        go = threading.Event()

        def hammer(lg=lg, go=go) -> None:  # HW moves take the log's lock, then the manager's
            go.set()
            try:
                for i in range(100_000):
                    lg.update_high_watermark(i % 2)
                    lg.append_as_leader(batch(b"x"), 0)
            except BrokerClosedError:
                return
            except BaseException as e:  # anything else fails the test
                errors.append(e)

        worker = threading.Thread(target=hammer, daemon=True)
        worker.start()
        go.wait()
        deleter = threading.Thread(target=lm.delete_topic, args=(topic,), daemon=True)
        deleter.start()
        deleter.join(10)
        worker.join(10)
        assert not deleter.is_alive() and not worker.is_alive(), f"deadlock in round {round_}"
    assert errors == [] and set(lm.topics) == set() and lm.logs == {}
    lm.close()


def test_cleanup_and_flush_apply_to_every_log(tmp_path: Path) -> None:
    now = [T0 + 10_000]
    lm = manager(tmp_path, clock_ms=lambda: now[0])
    lm.put_topic(
        "t", entry(1, **{"segment.bytes": "100", "retention.ms": "5000", "flush.ms": "1000"})
    )
    lg = lm.get_or_create_log(TopicPartition("t", 0))
    for i in range(4):
        lg.append_as_leader(batch(b"v" * 80, ts=T0 + 3000 * i), 0)  # one segment each
    lg.update_high_watermark(4)
    assert lm.cleanup_logs() == 2  # ts T0 and T0 + 3000 are older than 5 s; T0 + 6000 is not
    assert (lg.log_start_offset, lg.segment_base_offsets) == (2, [2, 3])
    lg.append_as_leader(batch(b"w"), 0)  # rolls: the recovery point moves to the new segment
    assert (lg.segment_base_offsets, lg.recovery_point) == ([2, 3, 4], 4)
    now[0] += 1000
    lm.flush_dirty_logs()
    assert lg.recovery_point == 5
    lm.close()


# -- a log dir written by Kafka --------------------------------------------------------------------


def test_opens_a_log_dir_copied_from_a_kafka_broker(bitnami_copy: Path) -> None:
    topic = "product-created-events-topic"
    hw = OffsetCheckpointFile(BITNAMI / HW_FILE).read()
    rp = OffsetCheckpointFile(BITNAMI / RP_FILE).read()
    metadata_before = {
        p.name: p.read_bytes() for p in (bitnami_copy / "__cluster_metadata-0").iterdir()
    }
    lm = manager(bitnami_copy)
    assert lm.had_clean_shutdown is False  # Kafka left no marker: every log is recovered
    topic_id = topic_id_from_string("zcBnIA7CRl29wXuh_gnLoQ")
    assert lm.topics == {topic: TopicEntry(topic_id, 3, 1, {})}
    assert sorted(lm.logs) == [TopicPartition(topic, p) for p in range(3)]
    for tp, lg in lm.logs.items():
        assert lg.config == lm.defaults
        assert (lg.high_watermark, lg.recovery_point, lg.log_start_offset) == (hw[tp], rp[tp], 0)
        original = (BITNAMI / tp.dir_name / "00000000000000000000.log").read_bytes()
        assert lg.read(0, 1 << 20, FetchIsolation.LOG_END).records == original
        assert lg.log_end_offset == len(kafka_python_read(original))
    p2 = lm.get_log(TopicPartition(topic, 2))
    assert (p2.log_end_offset, p2.leader_epoch_cache.latest_epoch) == (5, 2)
    original = (BITNAMI / f"{topic}-2" / "00000000000000000000.log").read_bytes()
    starts = [0]
    while starts[-1] < len(original):  # batch starts, walked by batchLength
        starts.append(starts[-1] + 12 + int.from_bytes(original[starts[-1] + 8 : starts[-1] + 12]))
    assert p2.read(3, 1 << 20).records == original[starts[3] :]
    lm.checkpoint()
    assert OffsetCheckpointFile(bitnami_copy / HW_FILE).read() == hw
    assert OffsetCheckpointFile(bitnami_copy / RP_FILE).read() == rp
    lm.close()
    after = {p.name: p.read_bytes() for p in (bitnami_copy / "__cluster_metadata-0").iterdir()}
    assert after == metadata_before  # the KRaft metadata log is not a topic: left alone
    assert dump([bitnami_copy / f"{topic}-2"], io.StringIO(), verify=True) == 0
    lm = manager(bitnami_copy)
    assert lm.had_clean_shutdown is True
    assert lm.get_log(TopicPartition(topic, 2)).high_watermark == 5
    lm.close()


def tree(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*")) if path.exists() else []


def test_a_path_that_is_not_a_log_dir_is_refused_unless_created(tmp_path: Path) -> None:
    """Issue 11 defect 6: opening an ordinary directory wrote meta.properties, .lock and the
    clean-shutdown marker into it. Only create=True makes a log dir, of a missing or empty path."""
    missing, empty, other = tmp_path / "missing", tmp_path / "empty", tmp_path / "other"
    empty.mkdir()
    other.mkdir()
    (other / "notes.txt").write_text("mine\n")
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    reason = "is not a Kafka log dir: it holds neither meta.properties nor a partition directory "
    reason += "(<topic>-<partition>)"
    refused = {
        missing: f"log dir {missing} does not exist",
        empty: f"{empty} {reason}",
        other: f"{other} {reason}",
        a_file: f"log dir {a_file} is not a directory",
    }
    for path, message in refused.items():
        before = tree(path)
        with pytest.raises(NotALogDirError) as e:
            LogManager(path)
        assert str(e.value) == message
        with pytest.raises(NotALogDirError) as e:
            Broker(path)
        assert str(e.value) == message
        assert tree(path) == before and path.exists() == (path != missing)
    with pytest.raises(NotALogDirError) as e:
        LogManager(other, create=True)
    assert str(e.value) == (
        f"{other} {reason}; not making a log dir of a directory holding other files"
    )
    assert tree(other) == ["notes.txt"]
    for path in (missing, empty):
        LogManager(path, create=True).close()
        assert (path / "meta.properties").is_file()
        LogManager(path).close()  # a log dir now, opened without create


def test_a_kafka_log_dir_opens_without_create(tmp_path: Path) -> None:
    copy = tmp_path / "bitnami"
    shutil.copytree(BITNAMI, copy)
    (copy / "meta.properties").unlink()  # partition directories alone make a log dir
    lm = LogManager(copy)
    try:
        assert TopicPartition("product-created-events-topic", 2) in lm.logs
    finally:
        lm.close()


def test_a_log_without_a_checkpointed_high_watermark_is_not_hidden_by_a_publish(tmp_path):
    """Kafka 3.7's log dir has no replication-offset-checkpoint: a write job's commit, which
    rewrites the file, leaves the logs it did not write out of it (readers take them whole),
    where it wrote their high watermark at the log start and hid their records."""
    copy = Path(shutil.copytree(KAFKA_37, tmp_path / "d"))
    patients = TopicPartition("TestTopicPatient", 0)
    offsets = TopicPartition("__consumer_offsets", 6)
    lm = LogManager(copy)
    try:
        lm.publish_high_watermarks({offsets: lm.logs[offsets].log_end_offset})
    finally:
        lm.close()
    written = OffsetCheckpointFile(copy / "replication-offset-checkpoint").read()
    assert written == {offsets: 13}
    assert LogDir(copy).checkpoints(patients).high_watermark is None
    with Broker(copy) as broker:  # a broker leading it moves it: known from then on
        assert broker.replica_manager.leader_partition(patients).log.high_watermark == 3
    written = OffsetCheckpointFile(copy / "replication-offset-checkpoint").read()
    assert written[patients] == 3
