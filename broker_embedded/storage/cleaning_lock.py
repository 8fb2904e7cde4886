"""A compaction job's hold on one partition of a log dir that no broker owns (the partition
cleaning lock), and the gate a waiting writer closes.

Files::

    <log dir>/.lock                                flock(LOCK_SH) while cleaning (log_dir_lock.py)
    <log dir>/.kafkalog-cleaning/<topic>-<p>.lock  flock(LOCK_EX); one UTF-8 line naming the
                                                   holder ("pid 4242 on host h (kafkalog
                                                   compact run R), cleaning t-0")
    <log dir>/.kafkalog-cleaning/writer-gate       flock(LOCK_EX) held by a write commit that
                                                   waits for the cleanings to end
    <log dir>/.kafkalog-cleaning/checkpoint.lock   flock(LOCK_EX) around a holder's update of
                                                   cleaner-offset-checkpoint (shared by all)

``.kafkalog-cleaning/`` is no topic-partition name, so Kafka and the log manager skip it. Files
are created on first use and never deleted; their text is advice, the flocks are the locks.

Acquiring (:meth:`PartitionCleaningLock.acquire`), without ever blocking:

1. the partition's lock, exclusive: refused -> :class:`CleaningRefusedError` ``BEING_CLEANED``
   naming the other cleaner (two job runs never clean one partition at once);
2. the writer gate, shared, for the instant of step 3: refused -> ``WRITER_WAITING`` (a write
   commit is waiting for the log dir: no new cleaning starts, so it waits at most for the
   cleanings in progress; a write commit is short, retry after it);
3. ``.lock``, shared: refused -> ``OWNED`` naming the owner (a running broker, whose own cleaner
   handles its logs, or a write commit in progress).

While held, no broker and no write commit opens the log dir (they take ``.lock`` exclusively),
other partitions of it may be cleaned by other holders, and readers go on (they take no lock).
A holder killed at any moment releases everything (flocks belong to the open files).

Thread safety: one holder object per thread; :meth:`release` is idempotent.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType

from broker_embedded.errors import KafkaStorageError, LogDirLockedError
from broker_embedded.storage.log_dir_lock import (
    CLEANING_DIR,
    CLEANING_LOCK_SUFFIX,
    LogDirLock,
    open_lock_file,
    read_text,
    try_flock,
    write_owner,
)
from broker_embedded.storage.topic_partition import TopicPartition

WRITER_GATE = "writer-gate"
CHECKPOINT_LOCK = "checkpoint.lock"
CHECKPOINT_LOCK_TIMEOUT_S = 30.0  # its holders keep it for one small file write

OWNED = "owned"
BEING_CLEANED = "being cleaned"
WRITER_WAITING = "writer waiting"


class CleaningRefusedError(LogDirLockedError):
    """A partition the caller may not clean now; ``reason`` is ``OWNED``, ``BEING_CLEANED`` or
    ``WRITER_WAITING``."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


def cleaning_dir(log_dir: str | Path) -> Path:
    return Path(log_dir) / CLEANING_DIR


def _open_in_cleaning_dir(log_dir: Path, name: str) -> int:
    d = cleaning_dir(log_dir)
    d.mkdir(exist_ok=True)
    return open_lock_file(d / name, log_dir)


class PartitionCleaningLock:
    """A held cleaning lock of one partition; see the module docstring."""

    __slots__ = ("log_dir", "topic_partition", "_fd", "_dir_lock")

    def __init__(self, log_dir: Path, tp: TopicPartition, fd: int, dir_lock: LogDirLock) -> None:
        """Use :meth:`acquire`."""
        self.log_dir = log_dir
        self.topic_partition = tp
        self._fd: int | None = fd
        self._dir_lock = dir_lock

    @classmethod
    def acquire(cls, log_dir: str | Path, tp: TopicPartition, owner: str) -> PartitionCleaningLock:
        """Hold ``tp`` of ``log_dir`` for cleaning, or raise :class:`CleaningRefusedError`."""
        log_dir = Path(log_dir)
        where = f"topic {tp.topic!r} partition {tp.partition} in log dir {log_dir}"
        fd = _open_in_cleaning_dir(log_dir, tp.dir_name + CLEANING_LOCK_SUFFIX)
        try:
            if not try_flock(fd, fcntl.LOCK_EX):
                holder = read_text(fd)
                raise CleaningRefusedError(
                    f"{where} is being cleaned by {holder or 'another process'}", BEING_CLEANED
                )
            dir_lock = _shared_dir_lock(log_dir, where)
            try:
                write_owner(fd, f"{owner}, cleaning {tp.dir_name}")
            except OSError as e:  # a full disk: no page for the holder's line
                dir_lock.release()
                path = cleaning_dir(log_dir) / (tp.dir_name + CLEANING_LOCK_SUFFIX)
                raise KafkaStorageError(
                    f"{where}: writing the holder of cleaning lock {path} failed: "
                    f"[Errno {e.errno}] {e.strerror}"
                ) from e
            except BaseException:
                dir_lock.release()
                raise
        except BaseException:
            os.close(fd)
            raise
        return cls(log_dir, tp, fd, dir_lock)

    @property
    def is_held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Release the partition's lock and the shared ``.lock``. Idempotent."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
            self._dir_lock.release()

    def __enter__(self) -> PartitionCleaningLock:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


def _shared_dir_lock(log_dir: Path, where: str) -> LogDirLock:
    """``.lock`` shared, taken while holding the writer gate shared (steps 2 and 3)."""
    gate = _open_in_cleaning_dir(log_dir, WRITER_GATE)
    try:
        if not try_flock(gate, fcntl.LOCK_SH):
            raise CleaningRefusedError(
                f"{where} is not cleaned now: a write job waits to commit to the log dir",
                WRITER_WAITING,
            )
        try:
            return LogDirLock.acquire_shared(log_dir)
        except LogDirLockedError as e:
            raise CleaningRefusedError(f"{where} is not cleaned here: {e}", OWNED) from None
    finally:
        os.close(gate)


class WriterGate:
    """A write commit's closed gate (flock(LOCK_EX) on ``writer-gate``) while it waits for the
    cleanings holding ``.lock``; :meth:`close` returns False when another writer holds it
    (it waits too: the gate is closed either way)."""

    __slots__ = ("_fd",)

    def __init__(self) -> None:
        self._fd: int | None = None

    def close(self, log_dir: str | Path) -> bool:
        if self._fd is not None:
            return True
        fd = _open_in_cleaning_dir(Path(log_dir), WRITER_GATE)
        if try_flock(fd, fcntl.LOCK_EX):
            self._fd = fd
            return True
        os.close(fd)
        return False

    def open(self) -> None:
        """Let cleanings start again. Idempotent."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


@contextmanager
def checkpoint_lock(
    log_dir: str | Path, timeout_s: float = CHECKPOINT_LOCK_TIMEOUT_S
) -> Iterator[None]:
    """Hold ``checkpoint.lock`` (cleaning holders updating ``cleaner-offset-checkpoint`` one
    entry each); :class:`LogDirLockedError` after ``timeout_s``."""
    log_dir = Path(log_dir)
    fd = _open_in_cleaning_dir(log_dir, CHECKPOINT_LOCK)
    try:
        deadline = time.monotonic() + timeout_s
        while not try_flock(fd, fcntl.LOCK_EX):
            if time.monotonic() > deadline:
                raise LogDirLockedError(
                    f"{cleaning_dir(log_dir) / CHECKPOINT_LOCK} stayed locked for {timeout_s} s"
                )
            time.sleep(0.01)
        yield
    finally:
        os.close(fd)
