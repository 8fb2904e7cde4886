"""The staging area of a write job on real log dirs: staging, commit (appended in order, HW
published at once, read back by kafka-python), abort, the checks made before anything is
appended, a failed append rolled back, the crash windows of a commit resolved by the next
LogManager (before the HW is published: rolled back; after: kept), a broker owning the log dir
in another process, another commit's lock waited for, stale staging directories."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from broker_embedded.broker import Broker
from broker_embedded.common.producer_record import ProducerRecord
from broker_embedded.errors import (
    CheckpointError,
    CorruptMessageError,
    InvalidRecordError,
    KafkaLogError,
    KafkaStorageError,
    LogDirLockedError,
    RecordTooLargeError,
    UnknownTopicOrPartitionError,
)
from broker_embedded.record.columnar_encoder import encode_batches
from broker_embedded.storage import commit_journal, staging_area
from broker_embedded.storage import staged_write as sw
from broker_embedded.storage.log_dir import LogDir
from broker_embedded.storage.log_dir_lock import LogDirLock
from broker_embedded.storage.log_manager import LogManager
from broker_embedded.storage.offset_checkpoint import OffsetCheckpointFile
from broker_embedded.storage.topic_partition import TopicPartition

from ..record._peers import kafka_python_read

REPO = Path(__file__).resolve().parents[3]
TS = 1_700_000_000_000
T0, T1, T2 = (TopicPartition("t", p) for p in range(3))


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    """Topic ``t`` (3 partitions, partition 0 holding 3 records), ``small`` (max.message.bytes
    200), ``compacted``."""
    d = tmp_path / "logdir"
    with Broker(d, create=True) as b:
        b.create_topic("t", 3)
        b.create_topic("small", 1, config={"max.message.bytes": 200})
        b.create_topic("compacted", 1, config={"cleanup.policy": "compact"})
        b.produce("t", 0, [ProducerRecord(b"old-%d" % i, key=b"k", timestamp=TS) for i in range(3)])
    return d


def stage(
    log_dir: Path,
    job: str,
    attempt: str,
    parts: list[tuple[str, int, list[bytes]]],
    *,
    keys: bool = True,
    max_batch_bytes: int = 1 << 20,
) -> tuple[sw.StagedFile, ...]:
    """Stage values per (topic, partition), in the order given, as one task attempt."""
    task = sw.StagedTask(log_dir, job, attempt)
    for topic, partition, values in parts:
        n = len(values)
        key_col = pa.array([b"key-%d" % i for i in range(n)]) if keys else None
        enc = encode_batches(
            key_col,
            pa.array(values, pa.binary()),
            np.full(n, TS, np.int64),
            max_batch_bytes=max_batch_bytes,
        )
        task.append(
            topic,
            partition,
            enc.data,
            batches=len(enc),
            records=n,
            max_batch_size=int(np.diff(enc.positions).max()),
            null_keys=0 if keys else n,
        )
    return task.finish()


def log_records(log_dir: Path, tp: TopicPartition) -> list[tuple[int, bytes | None, bytes]]:
    """(offset, key, value) of every record on disk (beyond the HW too), by kafka-python."""
    data = b"".join(p.read_bytes() for p in sorted((log_dir / tp.dir_name).glob("*.log")))
    return [(r.offset, r.key, r.value) for b in kafka_python_read(data) for r in b.records]


def leo(log_dir: Path, tp: TopicPartition) -> int:
    records = log_records(log_dir, tp)
    return records[-1][0] + 1 if records else 0


def published(log_dir: Path) -> dict[TopicPartition, int]:
    return LogDir(log_dir).high_watermarks


def values(n: int, tag: str = "v") -> list[bytes]:
    return [b"%s-%d" % (tag.encode(), i) for i in range(n)]


# -- staging --------------------------------------------------------------------------------------


def test_staged_files_hold_complete_batches_renamed_when_the_task_finishes(log_dir: Path) -> None:
    task = sw.StagedTask(log_dir, "job", "a1")
    enc = encode_batches(None, pa.array(values(4)), np.full(4, TS, np.int64))
    task.append("t", 1, enc.data, batches=1, records=4, max_batch_size=len(enc.data))
    job = log_dir / staging_area.STAGING_DIR / "job"
    assert sorted(os.listdir(job)) == ["a1.t-1.batches.tmp"]
    task.append("t", 1, enc.data, batches=1, records=4, max_batch_size=len(enc.data))
    (f,) = task.finish()
    assert sorted(os.listdir(job)) == ["a1.t-1.batches"]
    assert (f.topic, f.partition, f.batches, f.records, f.size) == ("t", 1, 2, 8, 2 * len(enc.data))
    assert [r.value for b in kafka_python_read(Path(f.path).read_bytes()) for r in b.records] == (
        values(4) * 2
    )
    with pytest.raises(KafkaLogError, match="already finished"):
        task.append("t", 1, enc.data, batches=1, records=4, max_batch_size=1)


def test_a_task_keeps_a_bounded_number_of_files_open(log_dir: Path, monkeypatch) -> None:
    monkeypatch.setattr(sw, "MAX_OPEN_FILES", 2)
    parts = [("t", p % 3, values(2, f"r{r}p{p}")) for r in range(3) for p in range(3)]
    files = stage(log_dir, "job", "a1", parts)
    assert [(f.partition, f.records) for f in files] == [(0, 6), (1, 6), (2, 6)]
    sw.commit(log_dir, "job", files)
    for p in range(3):
        got = [v for _, _, v in log_records(log_dir, TopicPartition("t", p))]
        want = [v for r in range(3) for v in values(2, f"r{r}p{p}")]
        assert got[-6:] == want


def test_discard_deletes_the_tasks_files(log_dir: Path) -> None:
    task = sw.StagedTask(log_dir, "job", "a1")
    enc = encode_batches(None, pa.array(values(2)), np.full(2, TS, np.int64))
    task.append("t", 0, enc.data, batches=1, records=2, max_batch_size=len(enc.data))
    other = stage(log_dir, "job", "a2", [("t", 1, values(1))])
    task.discard()
    assert os.listdir(log_dir / staging_area.STAGING_DIR / "job") == [Path(other[0].path).name]


def test_names_are_checked() -> None:
    with pytest.raises(ValueError, match="write job id '../x'"):
        sw.job_dir("/tmp", "../x")
    with pytest.raises(ValueError, match="task attempt id 'a.b'"):
        sw.StagedTask("/tmp", "job", "a.b")


def test_the_staging_dir_is_not_a_partition(log_dir: Path) -> None:
    stage(log_dir, "job", "a1", [("t", 0, values(1))])
    assert TopicPartition.try_parse_dir_name(staging_area.STAGING_DIR) is None
    assert LogDir(log_dir).partitions() == [
        TopicPartition("compacted", 0),
        TopicPartition("small", 0),
        T0,
        T1,
        T2,
    ]
    LogManager(log_dir, create=True).close()  # opens fine beside it, leaves a fresh job alone
    assert (log_dir / staging_area.STAGING_DIR / "job").is_dir()


# -- commit ---------------------------------------------------------------------------------------


def test_commit_appends_in_order_and_publishes_every_hw(log_dir: Path) -> None:
    a = stage(log_dir, "job", "a1", [("t", 0, values(3, "a0")), ("t", 2, values(2, "a2"))])
    b = stage(log_dir, "job", "a2", [("t", 0, values(2, "b0"))])
    c = stage(log_dir, "job", "a3", [("t", 1, values(1000, "c1"))], max_batch_bytes=1000)
    result = sw.commit(log_dir, "job", [*b, *a, *c])
    assert result == {T0: (3, 8), T1: (0, 1000), T2: (0, 2)}
    assert published(log_dir)[T0] == 8 and published(log_dir)[T1] == 1000
    assert published(log_dir)[T2] == 2
    got = log_records(log_dir, T0)
    assert [o for o, _, _ in got] == list(range(8))
    assert [v for _, _, v in got] == [*values(3, "old"), *values(2, "b0"), *values(3, "a0")]
    assert [k for _, k, _ in got][3:] == [b"key-0", b"key-1", b"key-0", b"key-1", b"key-2"]
    assert [v for _, _, v in log_records(log_dir, T1)] == values(1000, "c1")
    assert not (log_dir / staging_area.STAGING_DIR / "job").exists()
    assert not LogDirLock.is_locked(log_dir)
    assert (log_dir / ".kafka_cleanshutdown").exists()


def test_a_commit_removes_the_staging_root_left_empty(log_dir: Path) -> None:
    """Kafka refuses to start beside a directory that is not a partition's: a log dir a batch
    write used has no staging root left, unless another job still stages in it."""
    first = stage(log_dir, "job1", "a1", [("t", 0, values(2))])
    second = stage(log_dir, "job2", "a1", [("t", 1, values(2))])
    sw.commit(log_dir, "job1", first)
    assert sorted(p.name for p in (log_dir / staging_area.STAGING_DIR).iterdir()) == ["job2"]
    sw.commit(log_dir, "job2", second)
    assert not (log_dir / staging_area.STAGING_DIR).exists()
    assert [v for _, _, v in log_records(log_dir, T1)] == values(2)


def test_committed_batches_carry_the_logs_leader_epoch(log_dir: Path) -> None:
    files = stage(log_dir, "job", "a1", [("t", 0, values(2)), ("t", 1, values(2))])
    with LogManager(log_dir, create=True) as lm:
        lm.get_or_create_log(T0).leader_epoch_cache.assign(7, 2)  # as a later leader would
    sw.commit(log_dir, "job", files)
    data = {
        tp: (log_dir / tp.dir_name / "00000000000000000000.log").read_bytes() for tp in (T0, T1)
    }
    epochs = {
        tp: [int.from_bytes(d[p + 12 : p + 16], "big", signed=True) for p in _batch_positions(d)]
        for tp, d in data.items()
    }
    assert epochs[T0][-1] == 7
    assert epochs[T1] == [0]


def _batch_positions(data: bytes) -> list[int]:
    out, pos = [], 0
    while pos < len(data):
        out.append(pos)
        pos += 12 + int.from_bytes(data[pos + 8 : pos + 12], "big")
    return out


def test_an_empty_commit_changes_nothing(log_dir: Path) -> None:
    before = published(log_dir)
    assert sw.commit(log_dir, "job", []) == {}
    assert published(log_dir) == before
    assert not (log_dir / staging_area.STAGING_DIR / "job").exists()


def test_files_are_appended_in_chunks_of_whole_batches(log_dir: Path, monkeypatch) -> None:
    monkeypatch.setattr(sw, "APPEND_CHUNK_BYTES", 700)
    big = [b"x" * 2000]  # one batch larger than a chunk: goes alone
    parts = [("t", 1, values(300)), ("t", 1, big), ("t", 1, values(5, "z"))]
    files = stage(log_dir, "job", "a1", parts, max_batch_bytes=200)
    assert files[0].batches > 20
    sw.commit(log_dir, "job", files)
    assert [v for _, _, v in log_records(log_dir, T1)] == [*values(300), *big, *values(5, "z")]


@pytest.mark.parametrize("topic, partition", [("t", 3), ("nope", 0)])
def test_an_unknown_partition_appends_nothing_anywhere(log_dir: Path, topic, partition) -> None:
    before = {tp: log_records(log_dir, tp) for tp in (T0, T1)}
    hws = published(log_dir)
    good = stage(log_dir, "job", "a1", [("t", 0, values(2)), ("t", 1, values(2))])
    bad = stage(log_dir, "job", "a2", [(topic, partition, values(2))])
    with pytest.raises(
        UnknownTopicOrPartitionError, match=f"topic '{topic}' partition {partition}"
    ):
        sw.commit(log_dir, "job", [*good, *bad])
    assert {tp: log_records(log_dir, tp) for tp in (T0, T1)} == before
    assert published(log_dir) == hws
    assert not LogDirLock.is_locked(log_dir)
    assert not (log_dir / staging_area.STAGING_DIR / "job").exists()


def test_a_batch_above_max_message_bytes_is_refused_up_front(log_dir: Path) -> None:
    good = stage(log_dir, "job", "a1", [("t", 0, values(2))])
    bad = stage(log_dir, "job", "a2", [("small", 0, [b"y" * 300])])
    with pytest.raises(
        RecordTooLargeError, match=r"topic 'small' partition 0: .* max.message.bytes"
    ):
        sw.commit(log_dir, "job", [*good, *bad])
    assert leo(log_dir, T0) == 3


def test_keyless_records_to_a_compacted_topic_are_refused_up_front(log_dir: Path) -> None:
    good = stage(log_dir, "job", "a1", [("t", 0, values(2))])
    bad = stage(log_dir, "job", "a2", [("compacted", 0, values(2))], keys=False)
    with pytest.raises(InvalidRecordError, match="compacted topic 'compacted' partition 0"):
        sw.commit(log_dir, "job", [*good, *bad])
    assert leo(log_dir, T0) == 3


def test_a_staged_file_that_changed_is_refused_up_front(log_dir: Path) -> None:
    (f,) = stage(log_dir, "job", "a1", [("t", 1, values(2))])
    with open(f.path, "ab") as out:
        out.write(b"junk")
    with pytest.raises(KafkaLogError, match=r"holds \d+ bytes, its task staged"):
        sw.commit(log_dir, "job", [f])
    (g,) = stage(log_dir, "job2", "a1", [("t", 1, values(2))])
    os.unlink(g.path)
    with pytest.raises(KafkaLogError, match="is missing"):
        sw.commit(log_dir, "job2", [g])
    assert leo(log_dir, T1) == 0


def test_a_failed_append_is_rolled_back_before_the_error(log_dir: Path) -> None:
    files = stage(
        log_dir, "job", "a1", [("t", 0, values(5)), ("t", 1, values(5)), ("t", 2, values(5))]
    )
    path = Path(files[2].path)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF  # the CRC no longer matches: Kafka's validation refuses the batch
    path.write_bytes(data)
    hws = published(log_dir)
    with pytest.raises(CorruptMessageError, match="topic 't' partition 2"):
        sw.commit(log_dir, "job", files)
    assert [leo(log_dir, tp) for tp in (T0, T1, T2)] == [3, 0, 0]  # partitions 0, 1 rolled back
    assert published(log_dir) == hws
    assert not (log_dir / staging_area.STAGING_DIR / "job").exists()
    files = stage(log_dir, "job3", "a1", [("t", 1, values(2, "again"))])
    sw.commit(log_dir, "job3", files)  # the log is fine afterwards
    assert [v for _, _, v in log_records(log_dir, T1)] == values(2, "again")


# -- crash windows --------------------------------------------------------------------------------


class Died(BaseException):
    """The committing process 'dies' here."""


def _commit_until(
    log_dir: Path, job: str, files, monkeypatch, *, publish: bool, **commit_args
) -> None:
    """Run the real commit (``commit_args``: a streaming writer's ``writer_id`` and
    ``batch_id``) until it has appended and flushed (and, with ``publish``, published the HWs),
    then 'die': the commit keeps its journal and closes the log manager as a killed process
    leaves the files (no clean shutdown)."""
    real = LogManager.publish_high_watermarks

    def dying(self, hws):
        if publish:
            real(self, hws)
        raise Died

    monkeypatch.setattr(LogManager, "publish_high_watermarks", dying)
    with pytest.raises(Died):
        sw.commit(log_dir, job, files, **commit_args)
    monkeypatch.setattr(LogManager, "publish_high_watermarks", real)
    assert (log_dir / staging_area.STAGING_DIR / job / staging_area.JOURNAL).exists()
    assert not (log_dir / ".kafka_cleanshutdown").exists()


def test_a_commit_dead_before_publishing_is_rolled_back_on_the_next_open(
    log_dir: Path, monkeypatch
) -> None:
    files = stage(log_dir, "job", "a1", [("t", 0, values(4)), ("t", 1, values(3000))])
    hws = published(log_dir)
    _commit_until(log_dir, "job", files, monkeypatch, publish=False)
    assert leo(log_dir, T1) == 3000 and published(log_dir) == hws  # on disk, not visible
    assert LogDir(log_dir).open_partition(T1).high_watermark == 0
    with LogManager(log_dir, create=True) as lm:
        assert lm.get_log(T0).log_end_offset == 3 and lm.get_log(T1).log_end_offset == 0
    assert [leo(log_dir, tp) for tp in (T0, T1)] == [3, 0]
    assert published(log_dir) == hws
    assert not (log_dir / staging_area.STAGING_DIR / "job").exists()
    later = stage(log_dir, "job2", "a1", [("t", 1, values(2, "later"))])
    sw.commit(log_dir, "job2", later)  # the rolled-back records never resurface
    assert [v for _, _, v in log_records(log_dir, T1)] == values(2, "later")


def test_a_commit_dead_after_publishing_is_kept_on_the_next_open(
    log_dir: Path, monkeypatch
) -> None:
    files = stage(log_dir, "job", "a1", [("t", 0, values(4)), ("t", 1, values(3))])
    _commit_until(log_dir, "job", files, monkeypatch, publish=True)
    assert published(log_dir)[T0] == 7 and published(log_dir)[T1] == 3
    with LogManager(log_dir, create=True) as lm:
        assert lm.get_log(T0).high_watermark == 7 and lm.get_log(T1).log_end_offset == 3
    assert [v for _, _, v in log_records(log_dir, T0)] == [*values(3, "old"), *values(4)]
    assert not (log_dir / staging_area.STAGING_DIR / "job").exists()


def test_a_stale_published_hw_above_the_log_end_does_not_count_as_published(
    log_dir: Path, monkeypatch
) -> None:
    # a log dir whose last owner published HW 50 for t-1 but whose log ends at 0 (its unflushed
    # records were lost in a crash): the commit republishes the HWs before journaling
    OffsetCheckpointFile(log_dir / "replication-offset-checkpoint").write(
        {**published(log_dir), T1: 50}
    )
    files = stage(log_dir, "job", "a1", [("t", 1, values(5))])
    _commit_until(log_dir, "job", files, monkeypatch, publish=False)
    assert published(log_dir)[T1] == 0
    LogManager(log_dir, create=True).close()
    assert leo(log_dir, T1) == 0


def test_a_broker_opening_the_log_dir_resolves_a_dead_commit(log_dir: Path, monkeypatch) -> None:
    files = stage(log_dir, "job", "a1", [("t", 2, values(4))])
    _commit_until(log_dir, "job", files, monkeypatch, publish=False)
    with Broker(log_dir, create=True) as b:
        assert b.log_manager.get_log(T2).log_end_offset == 0
    assert not (log_dir / staging_area.STAGING_DIR / "job").exists()


def test_abort_resolves_a_dead_commits_journal_first(log_dir: Path, monkeypatch) -> None:
    files = stage(log_dir, "job", "a1", [("t", 2, values(4))])
    _commit_until(log_dir, "job", files, monkeypatch, publish=False)
    sw.abort(log_dir, "job")
    assert leo(log_dir, T2) == 0
    assert not (log_dir / staging_area.STAGING_DIR / "job").exists()


def test_a_malformed_journal_stops_the_open_naming_it(log_dir: Path) -> None:
    job = log_dir / staging_area.STAGING_DIR / "job"
    job.mkdir(parents=True)
    (job / staging_area.JOURNAL).write_text(
        json.dumps({"version": 1, "partitions": [{"topic": "t"}]})
    )
    with pytest.raises(CheckpointError, match=f"journal {job / staging_area.JOURNAL} is malformed"):
        LogManager(log_dir, create=True)
    assert not LogDirLock.is_locked(log_dir)


# -- abort and leftovers --------------------------------------------------------------------------


def test_abort_deletes_the_staging_dir_and_nothing_else(log_dir: Path) -> None:
    stage(log_dir, "job", "a1", [("t", 0, values(2))])
    stage(log_dir, "other", "a1", [("t", 0, values(2))])
    before = log_records(log_dir, T0)
    sw.abort(log_dir, "job")
    sw.abort(log_dir, "never-staged")
    assert not (log_dir / staging_area.STAGING_DIR / "job").exists()
    assert (log_dir / staging_area.STAGING_DIR / "other").is_dir()
    assert log_records(log_dir, T0) == before


def test_stale_staging_dirs_go_when_a_log_manager_opens(log_dir: Path) -> None:
    stage(log_dir, "old", "a1", [("t", 0, values(2))])
    stage(log_dir, "fresh", "a1", [("t", 0, values(2))])
    old = log_dir / staging_area.STAGING_DIR / "old"
    past = time.time() - staging_area.STALE_JOB_AGE_S - 60
    for p in [old, *old.iterdir()]:
        os.utime(p, (past, past))
    LogManager(log_dir, create=True).close()
    assert sorted(os.listdir(log_dir / staging_area.STAGING_DIR)) == ["fresh"]


# -- who owns the log dir -------------------------------------------------------------------------

BROKER_CHILD = """
import sys
from broker_embedded.broker import Broker
broker = Broker(sys.argv[1], create=True)
print("open", flush=True)
sys.stdin.readline()
broker.close()
"""


def test_a_running_broker_in_another_process_refuses_the_commit(log_dir: Path) -> None:
    files = stage(log_dir, "job", "a1", [("t", 1, values(2))])
    child = subprocess.Popen(
        [sys.executable, "-c", BROKER_CHILD, str(log_dir)],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline().strip() == "open"
        with pytest.raises(LogDirLockedError) as e:
            sw.commit(log_dir, "job", files, lock_timeout_s=0.2)
        text = str(e.value)
        assert f"pid {child.pid} on host" in text and "(kafkalog broker 0)" in text
        assert "running broker" in text and "network listener" in text
    finally:
        child.stdin.close()  # the broker closes on EOF
        child.wait(timeout=30)
        child.stdout.close()
    assert leo(log_dir, T1) == 0
    assert (log_dir / staging_area.STAGING_DIR / "job").is_dir()  # Spark's abort removes it


def test_a_task_still_running_when_its_job_is_aborted_leaves_no_files(log_dir: Path) -> None:
    """Spark aborts a failed job without waiting for its other tasks: one that renames its
    files after the abort, or starts staging after it, deletes them and fails."""
    enc = encode_batches(None, pa.array(values(4)), np.full(4, TS, np.int64))
    running = sw.StagedTask(log_dir, "job", "a1")
    running.append("t", 1, enc.data, batches=1, records=4, max_batch_size=len(enc.data))
    sw.abort(log_dir, "job")  # the job directory goes; the task's open file with it
    late = sw.StagedTask(log_dir, "job", "a2")
    with pytest.raises(KafkaLogError, match="was aborted while task a2 staged"):
        late.append("t", 0, enc.data, batches=1, records=4, max_batch_size=len(enc.data))
    with pytest.raises(KafkaStorageError):  # its directory is gone: the rename fails
        running.finish()
    renaming = sw.StagedTask(log_dir, "job2", "a1")
    renaming.append("t", 1, enc.data, batches=1, records=4, max_batch_size=len(enc.data))
    (log_dir / staging_area.STAGING_DIR / "job2.aborted").touch()  # aborted between its checks
    with pytest.raises(KafkaLogError, match="was aborted while task a1 staged"):
        renaming.finish()
    root = log_dir / staging_area.STAGING_DIR
    assert sorted(os.listdir(root)) == ["job.aborted", "job2.aborted"]
    os.makedirs(root / "job" / "leftover")  # a killed task's: the next opening deletes it
    old = time.time() - staging_area.ABORTED_MARKER_AGE_S - 60
    os.utime(root / "job2.aborted", (old, old))
    LogManager(log_dir).close()
    assert sorted(os.listdir(root)) == ["job.aborted"]


def test_a_commit_waits_for_another_jobs_commit(log_dir: Path) -> None:
    files = stage(log_dir, "job", "a1", [("t", 1, values(2))])
    other = LogDirLock.acquire(log_dir, f"{sw.COMMIT_OWNER} other, committing as node 0")
    timer = threading.Timer(0.3, other.release)
    timer.start()
    try:
        began = time.monotonic()
        sw.commit(log_dir, "job", files, lock_timeout_s=30)
        assert time.monotonic() - began >= 0.25
    finally:
        timer.cancel()
        other.release()
    assert leo(log_dir, T1) == 2
    held = LogDirLock.acquire(log_dir, f"{sw.COMMIT_OWNER} other, committing as node 0")
    try:
        files = stage(log_dir, "job2", "a1", [("t", 1, values(2))])
        with pytest.raises(LogDirLockedError, match="kafkalog write job other"):
            sw.commit(log_dir, "job2", files, lock_timeout_s=0.2)
    finally:
        held.release()


def test_a_lock_whose_holder_names_no_one_is_waited_for_a_moment(log_dir: Path) -> None:
    # another writer's LogDirLock.is_locked probe: a shared flock, no text in the .lock file
    import fcntl

    files = stage(log_dir, "job", "a1", [("t", 1, values(2))])
    assert sw.lock_holder(log_dir) == sw.UNKNOWN_HOLDER  # cleared by the last release
    fd = os.open(log_dir / ".lock", os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_SH)
    timer = threading.Timer(0.3, os.close, (fd,))
    timer.start()
    try:
        sw.commit(log_dir, "job", files, lock_timeout_s=30)
    finally:
        timer.join()
    assert leo(log_dir, T1) == 2
    fd = os.open(log_dir / ".lock", os.O_RDONLY)  # held for good: refused after a while
    fcntl.flock(fd, fcntl.LOCK_SH)
    try:
        files = stage(log_dir, "job2", "a1", [("t", 1, values(2))])
        began = time.monotonic()
        with pytest.raises(LogDirLockedError, match="an unknown process"):
            sw.commit(log_dir, "job2", files, lock_timeout_s=0.5)
        assert 0.4 <= time.monotonic() - began < 5
    finally:
        os.close(fd)


# -- streaming writers: batch ids recorded with the records ---------------------------------------

W = "3f2c5a1e-0b7d-4c9e-8f61-2d4b6a8c0e13"  # a streaming query's id


def commits(log_dir: Path) -> dict[str, dict]:
    root = log_dir / commit_journal.COMMITS_DIR
    if not root.exists():
        return {}
    return {p.stem: json.loads(p.read_text()) for p in sorted(root.glob("*.json"))}


def test_a_streaming_batch_is_recorded_and_its_replay_appends_nothing(log_dir: Path) -> None:
    assert commit_journal.committed_batch(log_dir, W) is None
    files = stage(log_dir, "b0", "a1", [("t", 1, values(3, "b0")), ("t", 2, values(1, "b0"))])
    assert sw.commit(log_dir, "b0", files, writer_id=W, batch_id=0) == {T1: (0, 3), T2: (0, 1)}
    assert commit_journal.committed_batch(log_dir, W) == 0
    assert commits(log_dir) == {W: {"version": 1, "writer": W, "batch": 0}}
    # Spark runs batch 0 again (other task attempts, maybe other rows): dropped, files too
    again = stage(log_dir, "b0-again", "a7", [("t", 1, values(5, "again"))])
    hws = published(log_dir)
    assert sw.commit(log_dir, "b0-again", again, writer_id=W, batch_id=0) == {}
    assert published(log_dir) == hws and leo(log_dir, T1) == 3
    assert not (log_dir / staging_area.STAGING_DIR / "b0-again").exists()
    files = stage(log_dir, "b1", "a1", [("t", 1, values(2, "b1"))])
    assert sw.commit(log_dir, "b1", files, writer_id=W, batch_id=1) == {T1: (3, 5)}
    older = stage(log_dir, "b0-late", "a1", [("t", 1, values(2, "late"))])
    assert sw.commit(log_dir, "b0-late", older, writer_id=W, batch_id=0) == {}
    assert [v for _, _, v in log_records(log_dir, T1)] == [*values(3, "b0"), *values(2, "b1")]
    assert commit_journal.committed_batch(log_dir, W) == 1
    # batch ids may skip (Spark's empty batches are not committed here)
    files = stage(log_dir, "b9", "a1", [("t", 1, values(1, "b9"))])
    assert sw.commit(log_dir, "b9", files, writer_id=W, batch_id=9) == {T1: (5, 6)}
    assert commit_journal.committed_batch(log_dir, W) == 9


def test_writers_are_independent_and_plain_jobs_record_nothing(log_dir: Path) -> None:
    other = "query-2"
    sw.commit(
        log_dir, "j1", stage(log_dir, "j1", "a1", [("t", 1, values(1))]), writer_id=W, batch_id=4
    )
    sw.commit(
        log_dir,
        "j2",
        stage(log_dir, "j2", "a1", [("t", 1, values(1))]),
        writer_id=other,
        batch_id=0,
    )
    sw.commit(log_dir, "j3", stage(log_dir, "j3", "a1", [("t", 1, values(1))]))
    assert {k: v["batch"] for k, v in commits(log_dir).items()} == {W: 4, other: 0}
    assert leo(log_dir, T1) == 3
    assert TopicPartition.try_parse_dir_name(commit_journal.COMMITS_DIR) is None
    LogManager(log_dir, create=True).close()  # opens fine beside it, leaves it alone
    assert {k: v["batch"] for k, v in commits(log_dir).items()} == {W: 4, other: 0}


def test_an_empty_streaming_batch_records_nothing(log_dir: Path) -> None:
    assert sw.commit(log_dir, "b0", [], writer_id=W, batch_id=0) == {}
    assert commit_journal.committed_batch(log_dir, W) is None


def test_writer_and_batch_ids_are_checked(log_dir: Path) -> None:
    files = stage(log_dir, "job", "a1", [("t", 1, values(1))])
    with pytest.raises(ValueError, match="writer_id and batch_id together"):
        sw.commit(log_dir, "job", files, writer_id=W)
    with pytest.raises(ValueError, match="writer id 'a/b'"):
        sw.commit(log_dir, "job", files, writer_id="a/b", batch_id=0)
    with pytest.raises(ValueError, match="batch_id -1 is not a batch id"):
        sw.commit(log_dir, "job", files, writer_id=W, batch_id=-1)
    assert leo(log_dir, T1) == 0


def test_a_malformed_commits_file_stops_the_commit_naming_it(log_dir: Path) -> None:
    path = commit_journal.commits_file(log_dir, W)
    path.parent.mkdir()
    path.write_text(json.dumps({"version": 1, "writer": "someone-else", "batch": 3}))
    files = stage(log_dir, "job", "a1", [("t", 1, values(1))])
    with pytest.raises(CheckpointError, match=f"commits file {path} is malformed"):
        sw.commit(log_dir, "job", files, writer_id=W, batch_id=4)
    assert leo(log_dir, T1) == 0
    assert not LogDirLock.is_locked(log_dir)


def test_a_failed_streaming_append_rolls_the_batch_id_back(log_dir: Path) -> None:
    sw.commit(
        log_dir, "b0", stage(log_dir, "b0", "a1", [("t", 1, values(1))]), writer_id=W, batch_id=0
    )
    files = stage(log_dir, "b1", "a1", [("t", 1, values(5)), ("t", 2, values(5))])
    path = Path(files[1].path)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(data)
    with pytest.raises(CorruptMessageError):
        sw.commit(log_dir, "b1", files, writer_id=W, batch_id=1)
    assert commit_journal.committed_batch(log_dir, W) == 0
    assert [leo(log_dir, tp) for tp in (T1, T2)] == [1, 0]
    files = stage(log_dir, "b1-again", "a1", [("t", 1, values(5, "again"))])
    assert sw.commit(log_dir, "b1-again", files, writer_id=W, batch_id=1) == {T1: (1, 6)}


def test_a_commits_file_write_that_fails_rolls_the_records_back(log_dir: Path, monkeypatch) -> None:
    files = stage(log_dir, "b0", "a1", [("t", 1, values(3))])
    real = commit_journal.write_atomically

    def failing(path, data):
        if Path(path).parent.name == commit_journal.COMMITS_DIR:
            raise OSError(28, "No space left on device")
        return real(path, data)

    monkeypatch.setattr(commit_journal, "write_atomically", failing)
    with pytest.raises(KafkaStorageError, match=r"writing .*\.kafkalog-commits.*No space left"):
        sw.commit(log_dir, "b0", files, writer_id=W, batch_id=0)
    assert leo(log_dir, T1) == 0 and published(log_dir)[T1] == 0
    assert commit_journal.committed_batch(log_dir, W) is None


@pytest.mark.parametrize("previous", [None, 6])
def test_a_streaming_commit_dead_before_publishing_rolls_its_batch_id_back(
    log_dir: Path, monkeypatch, previous
) -> None:
    if previous is not None:
        files = stage(log_dir, "old", "a1", [("t", 1, values(1, "old"))])
        sw.commit(log_dir, "old", files, writer_id=W, batch_id=previous)
    files = stage(log_dir, "b7", "a1", [("t", 1, values(4)), ("t", 2, values(2))])
    _commit_until(log_dir, "b7", files, monkeypatch, publish=False, writer_id=W, batch_id=7)
    # written, not published: the next open decides
    assert commit_journal.committed_batch(log_dir, W) == 7
    with LogManager(log_dir, create=True) as lm:
        assert lm.get_log(T1).log_end_offset == (0 if previous is None else 1)
    assert commit_journal.committed_batch(log_dir, W) == previous
    assert (W in commits(log_dir)) == (previous is not None)
    files = stage(log_dir, "b7-again", "a1", [("t", 1, values(4, "again"))])
    assert sw.commit(log_dir, "b7-again", files, writer_id=W, batch_id=7)  # not a replay
    assert [v for _, _, v in log_records(log_dir, T1)][-4:] == values(4, "again")


def test_a_streaming_commit_dead_after_publishing_keeps_its_batch_id(
    log_dir: Path, monkeypatch
) -> None:
    files = stage(log_dir, "b3", "a1", [("t", 1, values(4))])
    _commit_until(log_dir, "b3", files, monkeypatch, publish=True, writer_id=W, batch_id=3)
    commit_journal.commits_file(log_dir, W).unlink()  # as if the process died before writing it
    assert sw.abort(log_dir, "b3") is None  # Spark aborts after a failed commit: resolves first
    assert commit_journal.committed_batch(log_dir, W) == 3 and leo(log_dir, T1) == 4
    again = stage(log_dir, "b3-again", "a1", [("t", 1, values(4, "again"))])
    assert sw.commit(log_dir, "b3-again", again, writer_id=W, batch_id=3) == {}
    assert [v for _, _, v in log_records(log_dir, T1)] == values(4)


def test_a_malformed_writer_entry_in_a_journal_stops_the_open(log_dir: Path) -> None:
    job = log_dir / staging_area.STAGING_DIR / "job"
    job.mkdir(parents=True)
    body = {"version": 2, "job": "job", "partitions": [], "writer": {"id": W, "batch": "7"}}
    (job / staging_area.JOURNAL).write_text(json.dumps(body))
    with pytest.raises(CheckpointError, match="malformed"):
        LogManager(log_dir, create=True)


def test_a_commit_waits_for_a_compaction_job_and_closes_the_writer_gate(log_dir: Path) -> None:
    from broker_embedded.storage.cleaning_lock import (
        WRITER_WAITING,
        CleaningRefusedError,
        PartitionCleaningLock,
    )

    files = stage(log_dir, "job", "a1", [("t", 1, values(2))])
    cleaning = PartitionCleaningLock.acquire(log_dir, TopicPartition("compacted", 0), "run R")
    done = threading.Event()
    commit = threading.Thread(target=lambda: (sw.commit(log_dir, "job", files), done.set()))
    commit.start()
    try:
        time.sleep(0.5)
        assert not done.is_set()  # waiting for the cleaning
        # no new cleaning starts while a writer waits
        with pytest.raises(CleaningRefusedError, match="a write job waits") as e:
            PartitionCleaningLock.acquire(log_dir, T0, "run S")
        assert e.value.reason == WRITER_WAITING
    finally:
        cleaning.release()
    commit.join(timeout=30)
    assert done.is_set()
    assert leo(log_dir, T1) == 2
    PartitionCleaningLock.acquire(log_dir, T0, "run S").release()  # the gate is open again
