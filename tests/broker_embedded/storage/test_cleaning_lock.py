"""The partition cleaning lock of compaction jobs (cleaning_lock.py): one cleaner per partition,
several partitions of a log dir at once, no broker meanwhile and no cleaning while a broker owns
the dir (each refusal naming the other side), released by a SIGKILL, and the shared
cleaner-offset-checkpoint updated entry by entry. (A write commit waiting for cleanings:
test_staged_write.py.)"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from broker_embedded.cleaner.log_cleaner_manager import (
    read_cleaner_checkpoint,
    record_cleaner_checkpoint,
)
from broker_embedded.errors import LogDirLockedError
from broker_embedded.storage.cleaning_lock import (
    BEING_CLEANED,
    OWNED,
    CleaningRefusedError,
    PartitionCleaningLock,
)
from broker_embedded.storage.log_dir_lock import LogDirLock, held_cleanings, lock_holder
from broker_embedded.storage.log_manager import LogManager
from broker_embedded.storage.offset_checkpoint import OffsetCheckpointFile
from broker_embedded.storage.topic_partition import TopicPartition

REPO = Path(__file__).resolve().parents[3]
ME = f"pid {os.getpid()} on host {socket.gethostname()}"
T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)


def test_one_cleaner_per_partition_many_per_log_dir(tmp_path: Path) -> None:
    a = PartitionCleaningLock.acquire(tmp_path, T0, "run A")
    try:
        with pytest.raises(CleaningRefusedError) as e:
            PartitionCleaningLock.acquire(tmp_path, T0, "run B")
        assert e.value.reason == BEING_CLEANED
        assert str(e.value) == (
            f"topic 't' partition 0 in log dir {tmp_path} is being cleaned by {ME} (run A, "
            "cleaning t-0)"
        )
        with PartitionCleaningLock.acquire(tmp_path, T1, "run B") as b:
            assert b.is_held
            assert held_cleanings(tmp_path) == [
                f"{ME} (run A, cleaning t-0)",
                f"{ME} (run B, cleaning t-1)",
            ]
        assert not b.is_held
    finally:
        a.release()
    a.release()  # idempotent
    assert held_cleanings(tmp_path) == []
    PartitionCleaningLock.acquire(tmp_path, T0, "run B").release()


def test_no_broker_while_cleaning_and_no_cleaning_while_a_broker_owns(tmp_path: Path) -> None:
    with PartitionCleaningLock.acquire(tmp_path, T0, "kafkalog compact run R"):
        assert not LogDirLock.is_locked(tmp_path)  # shared holders: readers and probes go on
        with pytest.raises(LogDirLockedError) as e:
            LogManager(tmp_path, create=True)
        assert str(e.value) == (
            f"log dir {tmp_path} is locked by a compaction job cleaning partitions: {ME} "
            "(kafkalog compact run R, cleaning t-0): another process owns it for writing"
        )
        assert lock_holder(tmp_path).startswith("a compaction job cleaning partitions: ")
    lm = LogManager(tmp_path, owner="kafkalog broker", create=True)
    try:
        with pytest.raises(CleaningRefusedError) as e:
            PartitionCleaningLock.acquire(tmp_path, T0, "run R")
        assert e.value.reason == OWNED
        assert "(kafkalog broker 0)" in str(e.value)
        assert held_cleanings(tmp_path) == []  # the partition's lock was let go
    finally:
        lm.close()


HOLDER = """
import sys
from broker_embedded.storage.cleaning_lock import PartitionCleaningLock
from broker_embedded.storage.topic_partition import TopicPartition
lock = PartitionCleaningLock.acquire(sys.argv[1], TopicPartition("t", 0), "child run")
print("held", flush=True)
sys.stdin.readline()
"""


def test_a_killed_holder_lets_go(tmp_path: Path) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(tmp_path)],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline().strip() == "held"
        with pytest.raises(CleaningRefusedError, match=f"pid {child.pid} on host .*child run"):
            PartitionCleaningLock.acquire(tmp_path, T0, "run R")
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
        PartitionCleaningLock.acquire(tmp_path, T0, "run R").release()
        LogManager(tmp_path, create=True).close()
    finally:
        child.kill()
        child.wait()
        child.stdin.close()
        child.stdout.close()


def test_checkpoint_entries_of_concurrent_tasks_are_all_kept(tmp_path: Path) -> None:
    OffsetCheckpointFile(tmp_path / "cleaner-offset-checkpoint").write({TopicPartition("u", 0): 7})
    partitions = [TopicPartition("t", p) for p in range(8)]

    def task(tp: TopicPartition) -> None:
        for offset in range(1, 51):
            record_cleaner_checkpoint(tmp_path, tp, offset * 10 + tp.partition)

    threads = [threading.Thread(target=task, args=(tp,)) for tp in partitions]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    got = OffsetCheckpointFile(tmp_path / "cleaner-offset-checkpoint").read()
    assert got == {TopicPartition("u", 0): 7, **{tp: 500 + tp.partition for tp in partitions}}
    assert read_cleaner_checkpoint(tmp_path, T1) == 501
    assert read_cleaner_checkpoint(tmp_path, TopicPartition("v", 0)) is None
