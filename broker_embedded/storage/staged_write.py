"""The staging area of a write job: record batches staged beside a log dir by the tasks of a
Spark write (``df.write.format("kafkalog")``), appended by the job's commit, or dropped.

Layout::

    <log dir>/.kafkalog-staging/                  the staging root (the leading dot: never a
                                                  partition directory; LogDir, LogManager skip it)
      <job id>/                                   one write job ([A-Za-z0-9_-], 1 to 100 chars)
        <attempt>.<topic>-<partition>.batches     staged by one task attempt for one partition
        <attempt>.<topic>-<partition>.batches.tmp the same while the task is still writing it
        COMMITTING                                the commit's journal, while it appends
    <log dir>/.kafkalog-commits/                  the last batch committed by each streaming writer
      <writer id>.json                            ([A-Za-z0-9_-], 1 to 100 chars; a streaming
                                                  query's id, kafka_stream_writer.py)

A staged file holds complete record batches v2, back to back as in a segment file, with offsets
counting from 0 in the file (the commit assigns the real ones) and partition leader epoch -1. A
task writes its files as ``.tmp`` (open files per partition, appended to as its input arrives,
so that a task's memory does not grow with its data), then fsyncs and renames them when it
finishes (:meth:`StagedTask.finish`); it returns a :class:`StagedFile` per file, small picklable
values (path, topic, partition, batch, record and byte counts) for the driver.

The journal ``COMMITTING`` (each touched partition's log end offset before the commit) and a
streaming writer's commits file ``.kafkalog-commits/<writer id>.json`` (its last committed
batch; a commit of a batch at or below it is a replay: nothing appended): their layout and
reading in commit_journal.py. The commits file is written under the log dir's lock, in the
same commit as the records, so that it says ``B`` exactly when batch ``B``'s records are
published.

The commit (:func:`commit`, on the driver side), with nothing visible until its step 6:

1. opens the log dir with a :class:`LogManager`, which takes its ``.lock`` (one writer per log
   dir; a running broker owns it -> :class:`LogDirLockedError` naming the owner: writes through a
   running broker come with its network listener, later) and resolves interrupted commits (below);
   a lock held by another write job's commit is waited for (up to ``lock_timeout_s``), and so
   is, for a few seconds, a lock whose holder names no one (another writer's
   ``LogDirLock.is_locked`` probe); for a streaming writer's batch, it reads the writer's
   commits file: a replay stops here (nothing appended, the staged files dropped);
2. checks everything it can before appending anything: every topic partition is registered
   (UNKNOWN_TOPIC_OR_PARTITION), every staged file is there with the size its task staged, no
   batch is above the topic's ``max.message.bytes`` (RECORD_TOO_LARGE), no keyless record goes
   to a compacted topic (INVALID_RECORD), and the log dir's filesystem has room for the
   appends (:func:`space_needed`: the records, 1/64 more for indexes, ``SPACE_RESERVE_BYTES``
   for checkpoint files; else KAFKA_STORAGE_ERROR with ``ENOSPC``'s words, naming the log dir
   and the partitions, before anything is written);
3. writes the checkpoint files (so that no published HW is above the LEO it journals: a log
   recovered after a crash may end below the HW its last owner published), then the journal;
4. appends the files in the order given, each in appends of whole batches of at most
   ``APPEND_CHUNK_BYTES`` (a larger batch goes alone), as a leader with the log's latest leader
   epoch (0 for a log without one): Kafka's append validation (CRC, counts) applies;
5. flushes (fsyncs) every touched log; for a streaming writer's batch, writes its commits file
   (the batch id; fsynced);
6. publishes: moves every touched log's high watermark (HW) to its LEO and writes
   ``replication-offset-checkpoint`` once, atomically for all partitions at once
   (:meth:`LogManager.publish_high_watermarks`). This is the commit point: readers read only
   below the published HW, so they see all of the job or nothing of it;
7. deletes the journal, closes the log manager (clean shutdown, lock released) and deletes the
   job directory.

A failure before step 6 in the committing process deletes the staged files (their space is the
rollback's: on a full disk the checkpoint files it rewrites need room), truncates every touched
log back to its journaled LEO and deletes the journal; then the error propagates, an ``OSError``
(a full disk: ``ENOSPC``) as a :class:`KafkaStorageError` naming the job, the log dir and the
staged file or step. A task that cannot write its staged files (a full disk) deletes them and
fails with a :class:`KafkaStorageError` naming the log dir, the topic partition and the file.
When the process dies instead, the next :class:`LogManager` to open the log dir (a broker, the
CLI, the next commit) finishes the job (staging_area.py, ``resolve_interrupted_commits``): for each
job directory holding a journal (which only a dead commit leaves: a live one holds the lock), if the
published HW of every journaled partition is still at or below its journaled LEO, the commit
never published and every such partition is truncated to its journaled LEO (the truncation
fsynced before the journal goes) and a streaming writer's commits file is set back to the
journaled previous batch (deleted if there was none); otherwise it published (step 6 writes all
HWs in one file) and is kept, and the commits file is set to the journaled batch (already so:
step 5 wrote it). A failure before step 6 in the committing process sets the commits file back
the same way. Either way the job directory is then deleted: the records of a batch and its id in
the commits file are published together or not at all.

:func:`abort` leaves the marker ``<staging root>/<job id>.aborted``, then deletes the job's
staging directory (a journal in it, left by a dead commit, is resolved first by opening the log
dir, when no one holds it). A task still running when its job was aborted (Spark aborts a failed
job without waiting for its other tasks) finds the marker when it starts staging or once it has
renamed its files, deletes them and fails: its files never outlive the abort, which matters on
a full disk. Staging directories of jobs that never committed (a killed driver or task) are
harmless leftovers: nothing reads them. Opening a log manager deletes those of aborted jobs,
markers older than ``ABORTED_MARKER_AGE_S`` (one hour: no task of theirs still runs), and those
without a journal in which nothing changed for ``STALE_JOB_AGE_S`` (one day).

A commit that ends with the staging root empty removes it (:func:`_remove_empty_root`): Apache
Kafka refuses to start on a log dir holding a directory that is not a partition directory
("'.kafkalog-staging' is not in the form of topic-partition"), so a batch write leaves a log dir
that Kafka wrote readable by Kafka again. (A task of another job creating its job directory at
that instant fails on the vanished root, and Spark retries it.) ``.kafkalog-commits/`` stays:
a log dir a streaming writer wrote to is not one Kafka opens.

Thread safety: a :class:`StagedTask` belongs to one task (one thread); separate tasks write
separate files. :func:`commit` and :func:`resolve_interrupted_commits` run under the log dir's
lock, and so do all writes of a commits file. :class:`StagedFile` is immutable.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from broker_embedded.errors import (
    CorruptRecordError,
    InvalidRecordError,
    KafkaLogError,
    KafkaStorageError,
    LogDirLockedError,
    RecordTooLargeError,
    UnknownTopicOrPartitionError,
)
from broker_embedded.record.batch_layout import BATCH_LENGTH_OFFSET, LOG_OVERHEAD
from broker_embedded.storage import log_dir_lock
from broker_embedded.storage.checkpoint_file import fsync_dir
from broker_embedded.storage.cleaning_lock import WriterGate
from broker_embedded.storage.commit_journal import (
    WriterMark,
    checked_batch_id,
    checked_name,
    commits_file,
    committed_batch,
    set_committed_batch,
    write_journal,
)
from broker_embedded.storage.log_manager import LogManager
from broker_embedded.storage.staging_area import (
    JOURNAL,
    aborted_marker,
    job_dir,
    staging_root,
    truncate_back,
)
from broker_embedded.storage.topic_partition import TopicPartition

log = logging.getLogger(__name__)

STAGED_SUFFIX = ".batches"
TMP_SUFFIX = ".tmp"
APPEND_CHUNK_BYTES = 8 << 20
MAX_OPEN_FILES = 32  # per task: least recently used staged files beyond this are closed
DEFAULT_LOCK_TIMEOUT_S = 120.0
UNKNOWN_HOLDER_WAIT_S = 5.0  # a lock whose holder names no one yet: a probe or a fresh holder
COMMIT_OWNER = "kafkalog write job"  # how a commit names itself in the .lock file
SPACE_RESERVE_BYTES = 1 << 20  # free space a commit keeps beyond its records (space_needed)
MAX_NAMED_PARTITIONS = 10  # partitions an error lists by name


@dataclass(frozen=True, slots=True)
class StagedFile:
    """One staged file: ``records`` records in ``batches`` complete batches (``size`` bytes, the
    largest batch ``max_batch_size`` bytes, ``null_keys`` records without a key) for
    ``topic``/``partition``."""

    path: str
    topic: str
    partition: int
    batches: int
    records: int
    size: int
    max_batch_size: int
    null_keys: int = 0

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


# -- executors: staging ---------------------------------------------------------------------------


class _OpenStage:
    """The counts of one staged file being written, and its file while it is open."""

    __slots__ = (
        "tmp",
        "final",
        "tp",
        "file",
        "batches",
        "records",
        "size",
        "max_batch",
        "null_keys",
    )

    def __init__(self, tmp: Path, final: Path, tp: TopicPartition) -> None:
        self.tmp, self.final, self.tp = tmp, final, tp
        self.file: IO[bytes] | None = None
        self.batches = self.records = self.size = self.max_batch = self.null_keys = 0


class StagedTask:
    """The staged files of one task attempt of write job ``job_id`` (see the module docstring):
    :meth:`append` batches, then :meth:`finish` (or :meth:`discard` on failure)."""

    def __init__(self, log_dir: str | Path, job_id: str, attempt: str) -> None:
        self.log_dir, self.job_id = Path(log_dir), job_id
        self.directory = job_dir(log_dir, job_id)
        self.attempt = checked_name(attempt, "task attempt id")
        self._files: dict[TopicPartition, _OpenStage] = {}
        self._open: dict[TopicPartition, None] = {}  # insertion order: least recently used first
        self._done = False

    def append(
        self,
        topic: str,
        partition: int,
        data: bytes | bytearray | memoryview,
        *,
        batches: int,
        records: int,
        max_batch_size: int,
        null_keys: int = 0,
    ) -> None:
        """Append ``batches`` complete record batches (``records`` records, the largest
        ``max_batch_size`` bytes) to this task's staged file of ``topic``/``partition``."""
        if self._done:
            raise KafkaLogError(f"task {self.attempt} of {self.directory} already finished")
        if not len(data):
            return
        tp = TopicPartition(topic, partition)
        stage = self._files.get(tp)
        if stage is None:
            name = f"{self.attempt}.{tp.dir_name}{STAGED_SUFFIX}"
            stage = _OpenStage(self.directory / (name + TMP_SUFFIX), self.directory / name, tp)
            self._check_not_aborted()
            with self._naming_failures(stage):
                self.directory.mkdir(parents=True, exist_ok=True)
            self._files[tp] = stage
        if stage.file is None:
            while len(self._open) >= MAX_OPEN_FILES:
                self._close(next(iter(self._open)))
            with self._naming_failures(stage):
                stage.file = open(stage.tmp, "ab")  # noqa: SIM115 (closed by _close / finish)
        self._open.pop(tp, None)
        self._open[tp] = None
        with self._naming_failures(stage):
            stage.file.write(data)
        stage.batches += batches
        stage.records += records
        stage.size += len(data)
        stage.max_batch = max(stage.max_batch, max_batch_size)
        stage.null_keys += null_keys

    @contextmanager
    def _naming_failures(self, stage: _OpenStage) -> Iterator[None]:
        """An ``OSError`` (a full disk: ``ENOSPC``) as a :class:`KafkaStorageError` naming the
        log dir, the topic partition and the staged file."""
        try:
            yield
        except OSError as e:
            raise KafkaStorageError(
                f"write job {self.job_id}: staging records of topic {stage.tp.topic!r} partition "
                f"{stage.tp.partition} ({stage.tp.dir_name}) in log dir {self.log_dir} failed: "
                f"writing {stage.tmp}: [Errno {e.errno}] {e.strerror}; the task's staged files "
                "are deleted and nothing of the job is committed"
            ) from e

    def _close(self, tp: TopicPartition) -> None:
        self._open.pop(tp, None)
        stage = self._files[tp]
        if stage.file is not None:
            file, stage.file = stage.file, None
            with self._naming_failures(stage):
                file.close()  # buffered bytes are written here: it can fail as a write does

    def finish(self) -> tuple[StagedFile, ...]:
        """fsync and rename every staged file; their descriptions, by topic and partition."""
        self._done = True
        out = []
        for tp in sorted(self._files):
            stage = self._files[tp]
            self._close(tp)
            with self._naming_failures(stage):
                with open(stage.tmp, "rb+") as f:
                    os.fsync(f.fileno())
                os.replace(stage.tmp, stage.final)
            out.append(
                StagedFile(
                    str(stage.final),
                    tp.topic,
                    tp.partition,
                    stage.batches,
                    stage.records,
                    stage.size,
                    stage.max_batch,
                    stage.null_keys,
                )
            )
        if out:
            fsync_dir(self.directory)
        self._check_not_aborted()
        return tuple(out)

    def _check_not_aborted(self) -> None:
        """Delete this task's files and fail when its job was aborted meanwhile."""
        if not aborted_marker(self.log_dir, self.job_id).exists():
            return
        self.discard()
        with suppress(OSError):  # other tasks' files may still be there
            self.directory.rmdir()
        raise KafkaLogError(
            f"write job {self.job_id} in log dir {self.log_dir} was aborted while task "
            f"{self.attempt} staged; its staged files are deleted"
        )

    def discard(self) -> None:
        """Close and delete this task's files (a failed task; never raises)."""
        self._done = True
        for tp, stage in self._files.items():
            try:
                self._close(tp)
            except KafkaStorageError:
                pass
            for path in (stage.tmp, stage.final):
                try:
                    path.unlink(missing_ok=True)
                except OSError:
                    pass


# -- the driver: commit and abort -----------------------------------------------------------------


UNKNOWN_HOLDER = "an unknown process"


def lock_holder(log_dir: str | Path) -> str:
    """Who holds (or last held) the ``.lock`` of ``log_dir``, as its holder wrote it (or the
    compaction jobs holding it shared)."""
    return log_dir_lock.lock_holder(log_dir) or UNKNOWN_HOLDER


def held_by_a_commit(holder: str) -> bool:
    """Whether a :func:`lock_holder` text names a write job's commit or compaction jobs (both
    hold the lock briefly: wait for them)."""
    return f"({COMMIT_OWNER} " in holder or log_dir_lock.held_by_compaction(holder)


def _open_log_manager(log_dir: Path, job_id: str, lock_timeout_s: float) -> LogManager:
    """A log manager on ``log_dir`` for a commit: waits while another write job commits or a
    compaction job cleans partitions (closing the writer gate meanwhile, so that no new
    cleaning starts: cleaning_lock.py), refuses (naming the owner) while anyone else owns the
    log dir. A lock whose holder names no one (``LogDirLock.is_locked``'s probe of another
    writer, or a holder that has not written its name yet: both last an instant) is retried
    for up to ``UNKNOWN_HOLDER_WAIT_S``."""
    began = time.monotonic()
    deadline = began + lock_timeout_s
    unknown_deadline = began + min(lock_timeout_s, UNKNOWN_HOLDER_WAIT_S)
    delay = 0.05
    gate = WriterGate()
    try:
        while True:
            try:
                return LogManager(log_dir, owner=f"{COMMIT_OWNER} {job_id}, committing as node")
            except LogDirLockedError:
                holder = lock_holder(log_dir)
                now = time.monotonic()
                if (held_by_a_commit(holder) and now < deadline) or (
                    holder == UNKNOWN_HOLDER and now < unknown_deadline
                ):
                    if log_dir_lock.held_by_compaction(holder):
                        gate.close(log_dir)
                    time.sleep(delay)  # another job's commit, a partition's cleaning: short
                    delay = min(delay * 2, 1.0)
                    continue
                raise LogDirLockedError(
                    f"cannot commit write job {job_id} to log dir {log_dir}: a running broker "
                    f"or another writer owns it ({holder}). A write job appends only to a log "
                    "dir no broker owns; writing through a running broker comes with its "
                    "network listener (a later release): stop the broker first, or produce "
                    "through it"
                ) from None
    finally:
        gate.open()


def _check_before_appending(lm: LogManager, files: Sequence[StagedFile]) -> None:
    """Everything that can refuse the commit, checked before anything is appended."""
    for f in files:
        tp = f.topic_partition
        entry = lm.topics.get(tp.topic)
        if entry is None or tp.partition >= entry.partitions:
            count = "" if entry is None else f" (it has {entry.partitions} partitions)"
            raise UnknownTopicOrPartitionError(
                f"topic {tp.topic!r} partition {tp.partition} does not exist in log dir "
                f"{lm.log_dir}{count}: nothing of the write job was appended"
            )
        try:
            size = os.stat(f.path).st_size
        except FileNotFoundError:
            raise KafkaLogError(
                f"staged file {f.path} of topic {tp.topic!r} partition {tp.partition} is "
                "missing: nothing of the write job was appended"
            ) from None
        if size != f.size:
            raise KafkaLogError(
                f"staged file {f.path} of topic {tp.topic!r} partition {tp.partition} holds "
                f"{size} bytes, its task staged {f.size}: nothing of the write job was appended"
            )
        config = entry.log_config(lm.defaults, tp.topic)
        if f.max_batch_size > config.max_message_bytes:
            raise RecordTooLargeError(
                f"topic {tp.topic!r} partition {tp.partition}: a staged batch of "
                f"{f.max_batch_size} bytes exceeds max.message.bytes {config.max_message_bytes} "
                f"({f.path}): nothing of the write job was appended"
            )
        if config.compact and f.null_keys:
            raise InvalidRecordError(
                f"compacted topic {tp.topic!r} partition {tp.partition} does not accept records "
                f"without a key ({f.null_keys} staged in {f.path}): nothing of the write job "
                "was appended"
            )


def _whole_batches(path: str, limit: int) -> Iterator[memoryview]:
    """The file's bytes in chunks of whole batches of at most ``limit`` bytes (or one batch)."""
    with open(path, "rb") as f:
        pending = b""
        while True:
            data = f.read(limit)
            if not data:
                break
            buf = pending + data if pending else data
            pos = 0
            while pos + LOG_OVERHEAD <= len(buf):
                length = buf[pos + BATCH_LENGTH_OFFSET : pos + LOG_OVERHEAD]
                end = pos + LOG_OVERHEAD + int.from_bytes(length, "big")
                if end > len(buf):
                    break
                pos = end
            if pos:
                yield memoryview(buf)[:pos]
            pending = buf[pos:]
        if pending:
            raise CorruptRecordError(
                f"{len(pending)} bytes after the last complete batch", source=path
            )


# -- streaming writers: the last committed batch --------------------------------------------------


@contextmanager
def _failure_named(job_id: str, log_dir: Path, what: str) -> Iterator[None]:
    """An ``OSError`` or :class:`KafkaStorageError` of a commit's step (a full disk) as a
    :class:`KafkaStorageError` naming the job, the log dir and ``what`` it was doing."""
    try:
        yield
    except (OSError, KafkaStorageError) as e:
        cause = f"[Errno {e.errno}] {e.strerror}" if isinstance(e, OSError) else str(e)
        raise KafkaStorageError(
            f"write job {job_id}: {what} in log dir {log_dir} failed: {cause}; the job is rolled "
            "back: nothing of it is published"
        ) from e


def space_needed(files: Sequence[StagedFile]) -> int:
    """Bytes a commit of ``files`` may take in the log dir: the records, their indexes (an
    offset and a time index entry per ``index.interval.bytes``, at most 1/64 of the records
    when every batch gets entries) and ``SPACE_RESERVE_BYTES`` for the files a commit rewrites
    (checkpoints, journal, producer snapshots, new segments' pages)."""
    size = sum(f.size for f in files)
    return size + size // 64 + SPACE_RESERVE_BYTES


def _check_space(log_dir: Path, job_id: str, files: Sequence[StagedFile]) -> None:
    """Refuse (``ENOSPC``'s words, naming the log dir and the partitions) a commit that does not
    fit in the log dir's free space, before anything is written."""
    try:
        st = os.statvfs(log_dir)
    except OSError:
        return  # unknown: the appends find out, and the job is rolled back
    free = st.f_bavail * st.f_frsize
    needed = space_needed(files)
    if free >= needed:
        return
    sizes: dict[TopicPartition, int] = {}
    for f in files:
        sizes[f.topic_partition] = sizes.get(f.topic_partition, 0) + f.size
    shown = sorted(sizes.items())
    named = ", ".join(f"{tp.dir_name} {size} bytes" for tp, size in shown[:MAX_NAMED_PARTITIONS])
    more = len(shown) - MAX_NAMED_PARTITIONS
    raise KafkaStorageError(
        f"write job {job_id}: [Errno {errno.ENOSPC}] {os.strerror(errno.ENOSPC)}: log dir "
        f"{log_dir} has {free} bytes free, the job needs {needed} ({named}"
        f"{f' and {more} more partitions' if more > 0 else ''}, their indexes and "
        f"{SPACE_RESERVE_BYTES} bytes of checkpoint files), staged in {job_dir(log_dir, job_id)}"
        ": nothing of the write job was appended; free space and run it again"
    )


def _drop_staged(files: Iterable[StagedFile]) -> None:
    for f in files:
        Path(f.path).unlink(missing_ok=True)


def commit(
    log_dir: str | Path,
    job_id: str,
    files: Iterable[StagedFile],
    *,
    lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S,
    writer_id: str | None = None,
    batch_id: int | None = None,
) -> dict[TopicPartition, tuple[int, int]]:
    """Append the staged ``files`` in order and publish them (module docstring, steps 1-7).

    With ``writer_id`` and ``batch_id`` (a streaming writer's micro-batch, both or neither), the
    batch id is recorded in the writer's commits file with the records, and a batch at or below
    the one recorded is a replay: nothing is appended.

    Returns each touched partition's (first offset, log end offset) of what was appended
    (``{}`` for nothing, a replay included).
    """
    if (writer_id is None) != (batch_id is None):
        raise ValueError("commit takes writer_id and batch_id together, or neither")
    if writer_id is not None:
        checked_name(writer_id, "writer id")
        checked_batch_id(batch_id, "batch_id")
    log_dir = Path(log_dir)
    directory = job_dir(log_dir, job_id)
    files = [f for f in files if f.records > 0]
    lm = _open_log_manager(log_dir, job_id, lock_timeout_s)
    keep_journal = False  # True when what is on disk must be left for the next open to resolve
    failed = False
    try:
        mark = None
        if writer_id is not None:
            previous = committed_batch(log_dir, writer_id)  # dead commits resolved: exact
            if previous is not None and batch_id <= previous:
                log.info(
                    "%s: batch %d of streaming writer %s is a replay (batch %d is "
                    "committed): %d staged files dropped",
                    log_dir,
                    batch_id,
                    writer_id,
                    previous,
                    len(files),
                )
                return {}
            mark = WriterMark(writer_id, batch_id, previous)
        _check_before_appending(lm, files)
        _check_space(log_dir, job_id, files)
        logs = {tp: lm.get_or_create_log(tp) for tp in sorted({f.topic_partition for f in files})}
        if not logs:
            return {}
        before = {tp: lg.log_end_offset for tp, lg in logs.items()}
        journal = directory / JOURNAL
        with _failure_named(job_id, log_dir, f"writing the checkpoint files and {journal}"):
            lm.checkpoint()  # published HWs on disk <= these LEOs (recovery may have cut a log)
            write_journal(journal, job_id, before, mark)
        try:
            for f in files:
                lg = logs[f.topic_partition]
                epoch = lg.leader_epoch_cache.latest_epoch
                with _failure_named(job_id, log_dir, f"appending {f.path} to {lg.directory}"):
                    for chunk in _whole_batches(f.path, APPEND_CHUNK_BYTES):
                        lg.append_as_leader(chunk, 0 if epoch is None else epoch)
            with _failure_named(job_id, log_dir, f"flushing {sorted(map(str, logs))}"):
                for lg in logs.values():
                    lg.flush()
            after = {tp: lg.log_end_offset for tp, lg in logs.items()}
            if mark is not None:
                with _failure_named(job_id, log_dir, f"writing {commits_file(log_dir, writer_id)}"):
                    set_committed_batch(log_dir, mark.writer_id, mark.batch)
        except BaseException:
            try:
                _drop_staged(files)  # not needed any more: their space helps the rollback
                truncate_back(lm, before)
                lm.checkpoint()
                if mark is not None:
                    set_committed_batch(log_dir, mark.writer_id, mark.previous)
                journal.unlink()
                fsync_dir(directory)
            except BaseException:
                keep_journal = True
                log.exception(
                    "rolling back write job %s in %s failed: the next log manager "
                    "to open the log dir rolls it back",
                    job_id,
                    log_dir,
                )
            raise
        try:
            lm.publish_high_watermarks(after)  # the commit point
        except BaseException:
            keep_journal = True  # published or not: the checkpoint file on disk says
            raise
        journal.unlink()
        fsync_dir(directory)
        return {tp: (before[tp], after[tp]) for tp in logs}
    except BaseException:
        failed = True
        raise
    finally:
        try:
            lm.close(clean=not keep_journal)
        except Exception as e:
            if not failed:
                raise
            # the job's own error is the one to report (a full disk fails this close too)
            log.warning("closing log dir %s after write job %s failed: %s", log_dir, job_id, e)
        if not keep_journal:
            shutil.rmtree(directory, ignore_errors=True)
            _remove_empty_root(log_dir)


def _remove_empty_root(log_dir: Path) -> None:
    """Remove the staging root when nothing is left in it (module docstring)."""
    with suppress(OSError):  # not empty (another job stages), or gone already
        staging_root(log_dir).rmdir()


def abort(log_dir: str | Path, job_id: str) -> None:
    """Mark write job ``job_id`` aborted and drop its staging directory (module docstring)."""
    directory = job_dir(log_dir, job_id)
    try:
        staging_root(log_dir).mkdir(exist_ok=True)
        aborted_marker(log_dir, job_id).touch()
    except OSError as e:  # not even an inode left: a task still running keeps its files
        log.warning("write job %s: marking it aborted in %s failed: %s", job_id, log_dir, e)
    if (directory / JOURNAL).exists():  # a dead commit's: resolve it before anything goes
        try:
            LogManager(log_dir, owner=f"{COMMIT_OWNER} {job_id}, aborting as node").close()
        except LogDirLockedError:
            log.warning(
                "write job %s: %s holds a journal and %s is locked; left for the next "
                "log manager to open it",
                job_id,
                directory,
                log_dir,
            )
            return
    shutil.rmtree(directory, ignore_errors=True)
