"""``df.write.format("kafkalog")`` on a real full disk (a size-limited tmpfs, tests/tmpfs_mount.py):
the job fails with an error naming the log dir, the partition, the file and "No space left on
device"; the log dir is left exactly as before the job (every file byte for byte, no staged file
left); and once space is back the same write succeeds and every row reads back exactly once.

Two places the disk can run out: while the tasks stage their batches (the staged files do not
fit), and in the driver's commit (the staged files fit, the log's copy of them does not)."""

from __future__ import annotations

import os
import shutil
from collections import Counter
from pathlib import Path

import pytest
from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkException

from broker_embedded.broker import Broker
from broker_embedded.common.producer_record import ProducerRecord
from broker_embedded.storage import staging_area
from tests.datasource._logdirs import partition_facts
from tests.tmpfs_mount import fill_inodes_leaving, fill_leaving, tmpfs

MiB = 1 << 20
ROWS = 1500
VALUE_BYTES = 4000  # ROWS rows: about 6 MB staged, and the same again in the log
PARTITIONS = 2


@pytest.fixture
def disk(tmp_path: Path):
    with tmpfs(24 * MiB, parent=tmp_path) as point:
        yield point


BEFORE = [(0, b"b0", b"x" * 600_000), (0, b"b1", b"y" * 600_000), (1, b"b2", b"before-2")]


def _log_dir(disk: Path) -> Path:
    """``events``: partition 0's segment full (its next append rolls), partition 1 not."""
    d = disk / "logdir"
    with Broker(d, create=True) as b:
        b.create_topic("events", PARTITIONS, config={"segment.bytes": str(MiB)})
        for p, k, v in BEFORE:
            b.produce("events", p, [ProducerRecord(v, key=k)])
    return d


def _rows() -> list[tuple[bytes, bytes]]:
    return [(b"k%05d" % i, bytes([i % 251]) * VALUE_BYTES) for i in range(ROWS)]


def _write(spark, log_dir: Path) -> None:
    df = spark.createDataFrame(_rows(), "key binary, value binary").repartition(2)
    df.write.format("kafkalog").mode("append").option("topic", "events").save(str(log_dir))


def _files(log_dir: Path) -> dict[str, bytes]:
    """Every file of the log dir with its bytes (the lock file's holder text left out)."""
    out = {}
    for root, _, names in os.walk(log_dir):
        for name in names:
            p = Path(root) / name
            rel = str(p.relative_to(log_dir))
            if not rel.endswith(staging_area.ABORTED_SUFFIX):  # an aborted job's marker
                out[rel] = b"" if rel == ".lock" else p.read_bytes()
    return out


def _staged(log_dir: Path) -> list[str]:
    root = log_dir / staging_area.STAGING_DIR
    if not root.exists():
        return []
    return sorted(
        str(p.relative_to(root))
        for p in root.rglob("*")
        if not p.name.endswith(staging_area.ABORTED_SUFFIX)
    )


def _read_back(log_dir: Path) -> Counter:
    out: Counter = Counter()
    for p in range(PARTITIONS):
        for r in partition_facts(log_dir, "events", p).rows:
            out[(r.key, r.value)] += 1
    return out


def _fails_cleanly_then_succeeds(spark, log_dir: Path, filler: Path) -> None:
    before = _files(log_dir)
    with pytest.raises((PySparkException, Py4JJavaError)) as info:
        _write(spark, log_dir)
    message = str(info.value)
    assert "No space left on device" in message
    assert _staged(log_dir) == []
    assert _files(log_dir) == before
    assert str(log_dir) in message
    assert "events-" in message, message[-2000:]
    if filler.is_dir():
        shutil.rmtree(filler)
    else:
        filler.unlink()
    _write(spark, log_dir)
    want = Counter(_rows())
    want.update((k, v) for _, k, v in BEFORE)
    assert _read_back(log_dir) == want
    assert _staged(log_dir) == []


def test_a_full_disk_while_tasks_stage_fails_the_job_and_leaves_the_log_dir_as_it_was(
    spark, disk: Path
) -> None:
    log_dir = _log_dir(disk)
    filler = fill_leaving(disk, 2 * MiB)  # the staged files (6 MB) do not fit
    _fails_cleanly_then_succeeds(spark, log_dir, filler)


STAGED = ROWS * VALUE_BYTES  # about: 4 staged files (2 tasks x 2 partitions) of 1.5 MB


@pytest.mark.parametrize(
    "room",
    [STAGED + MiB // 2, STAGED + 2 * MiB + MiB // 4, STAGED + 3 * MiB + 3 * MiB // 4],
    ids=["room-for-the-staged-files", "and-one-more-file", "and-two-more-files"],
)
def test_a_full_disk_in_the_commit_fails_the_job_and_leaves_the_log_dir_as_it_was(
    spark, disk: Path, room: int
) -> None:
    """The staged files fit, their copy in the log does not: without the commit's free-space
    check its appends (in file order: task 0's partition 0 and 1, then task 1's) would run out
    in the first (partition 0, into a new segment: the torn bytes stayed there), the second
    (partition 1, its existing segment) or the third (partition 0 again) staged file; with it
    the commit refuses before appending anything."""
    log_dir = _log_dir(disk)
    filler = fill_leaving(disk, room)
    _fails_cleanly_then_succeeds(spark, log_dir, filler)


INODES = 200


@pytest.fixture
def inode_disk(tmp_path: Path):
    with tmpfs(24 * MiB, parent=tmp_path, inodes=INODES) as point:
        yield point


@pytest.mark.parametrize("inodes_left", [8, 10, 12, 14, 16])
def test_a_filesystem_out_of_inodes_in_the_commit_fails_the_job_and_leaves_the_log_dir_as_it_was(
    spark, inode_disk: Path, inodes_left: int
) -> None:
    """Bytes are free (the commit's space check passes) but no file can be created: the
    commit's appends fail where a new segment is rolled, after some were appended."""
    log_dir = _log_dir(inode_disk)
    filler = fill_inodes_leaving(inode_disk, inodes_left)
    _fails_cleanly_then_succeeds(spark, log_dir, filler)
