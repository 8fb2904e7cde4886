"""A read-only view of a Kafka log dir (one entry of a broker's ``log.dirs``).

Layout::

    <log dir>/
      meta.properties                    cluster.id, node.id, directory.id, version (key=value)
      replication-offset-checkpoint      high watermark per partition
      recovery-point-offset-checkpoint   recovery point per partition
      log-start-offset-checkpoint        log start offset per partition
      cleaner-offset-checkpoint          first dirty offset per partition (compacted topics)
      bootstrap.checkpoint, .lock, .kafka_cleanshutdown, ...   (not read here)
      <topic>-<partition>/               one directory per partition, e.g. __cluster_metadata-0

Every directory whose name parses as ``<topic>-<partition>`` (topic_partition.py) is a
partition; anything else (files, ``...-delete``/``-future``/``-stray`` directories) is skipped.
Checkpoint files (checkpoint_file.py) are read once when the view is made: a missing file is no
entries; a malformed one is a :class:`CheckpointError`. How a partition's offsets follow from
them, including the last stable offset (from the producer snapshots and batches in the partition
directory), is in partition_reader.py, and how a fetch is bounded by isolation in local_log.py
(the reader the broker's log uses too): callers open a partition and call its ``fetch``, keeping
the view for their reads (its LSO is computed once per view). :func:`open_partition_with` opens
one partition with checkpoint entries read earlier (``PartitionCheckpoints``, e.g. by a planner
in another process), reading neither the checkpoint files nor the log dir's listing.

What is a log dir: a directory holding ``meta.properties`` or at least one partition directory
(:func:`is_log_dir`). :func:`check_log_dir` refuses anything else (a missing path, a file, an
empty or unrelated directory) with :class:`NotALogDirError` naming the path; reading commands
call it so that they never take an ordinary directory for an empty log dir.

Never writes. Thread safety: immutable after construction apart from the partitions opened
through it, which are themselves thread-safe.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from broker_embedded.errors import KafkaLogError
from broker_embedded.storage.commit_journal import COMMITS_DIR
from broker_embedded.storage.log_dir_lock import CLEANING_DIR, LOCK_FILE_NAME
from broker_embedded.storage.offset_checkpoint import (
    CLEANER_OFFSET_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_OFFSET_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    OffsetCheckpointFile,
)
from broker_embedded.storage.partition_reader import PartitionReader
from broker_embedded.storage.segment_indexer import DEFAULT_INDEX_INTERVAL_BYTES
from broker_embedded.storage.staging_area import STAGING_DIR
from broker_embedded.storage.topic_config_file import TOPIC_CONFIG_FILE
from broker_embedded.storage.topic_partition import TopicPartition

# the SASL users of `kafkalog serve` (server/security/scram_credentials.py), which `kafkalog
# users add` may write before the log dir's first start
SCRAM_CREDENTIALS_FILE = "scram-credentials.json"
SCRAM_CREDENTIALS_LOCK = "scram-credentials.lock"
ACLS_FILE = "acls.json"  # server/security/authorizer.py
ACLS_LOCK = "acls.lock"

META_PROPERTIES = "meta.properties"


class NotALogDirError(KafkaLogError):
    """A path given as a log dir that is missing, not a directory, or not a Kafka log dir."""


def is_log_dir(path: Path) -> bool:
    """True when the directory ``path`` holds ``meta.properties`` or a partition directory."""
    if (path / META_PROPERTIES).is_file():
        return True
    with os.scandir(path) as entries:
        return any(
            TopicPartition.try_parse_dir_name(e.name) is not None and e.is_dir() for e in entries
        )


def check_log_dir(path: Path, context: str = "") -> None:
    """:class:`NotALogDirError` naming ``path`` (followed by ``context``, e.g. where the path was
    given) unless it is a Kafka log dir."""
    if not path.exists():
        raise NotALogDirError(f"log dir {path}{context} does not exist")
    if not path.is_dir():
        raise NotALogDirError(f"log dir {path}{context} is not a directory")
    if not is_log_dir(path):
        raise NotALogDirError(
            f"{path}{context} is not a Kafka log dir: it holds neither meta.properties nor a "
            "partition directory (<topic>-<partition>)"
        )


def _holds_only_log_dir_files(path: Path) -> bool:
    """True when every entry of the directory ``path`` is one a log dir's own machinery makes
    (locks, checkpoints, the topic file, staging and commit directories, the SASL users, the ACLs):
    nothing of a user's."""
    own = {
        LOCK_FILE_NAME,
        CLEANING_DIR,
        STAGING_DIR,
        COMMITS_DIR,
        TOPIC_CONFIG_FILE,
        REPLICATION_OFFSET_CHECKPOINT,
        RECOVERY_POINT_OFFSET_CHECKPOINT,
        LOG_START_OFFSET_CHECKPOINT,
        CLEANER_OFFSET_CHECKPOINT,
        SCRAM_CREDENTIALS_FILE,
        SCRAM_CREDENTIALS_LOCK,
        ACLS_FILE,
        ACLS_LOCK,
    }
    return all(name in own for name in os.listdir(path))


def prepare_log_dir(path: Path, *, create: bool) -> None:
    """Check ``path`` as a log dir before a broker opens it. With ``create``, a missing path or
    an empty directory (or one holding only a log dir's own lock and checkpoint files) is made
    one (the explicit create, as ``kafka-storage format``); a directory holding anything else
    is refused all the same."""
    if create and (not path.exists() or (path.is_dir() and _holds_only_log_dir_files(path))):
        path.mkdir(parents=True, exist_ok=True)
        return
    try:
        check_log_dir(path)
    except NotALogDirError as e:
        if not create or not path.is_dir():
            raise
        raise NotALogDirError(
            f"{e}; not making a log dir of a directory holding other files"
        ) from None


@dataclass(frozen=True, slots=True)
class PartitionCheckpoints:
    """What the log dir's checkpoint files say of one partition (``None``: no entry): its
    high watermark, log start offset and recovery point, as :meth:`LogDir.open_partition` hands
    them to the read-only view. Small and picklable: a planner that read the files once gives
    them to the tasks that open the partition (:func:`open_partition_with`)."""

    high_watermark: int | None
    log_start_offset: int | None
    recovery_point: int | None


class LogDir:
    """The partitions and checkpoint files of one log dir."""

    __slots__ = (
        "path",
        "high_watermarks",
        "recovery_points",
        "log_start_offsets",
        "cleaner_offsets",
    )

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if not self.path.is_dir():
            raise FileNotFoundError(f"log dir {self.path} is not a directory")
        self.high_watermarks = self._checkpoint(REPLICATION_OFFSET_CHECKPOINT)
        self.recovery_points = self._checkpoint(RECOVERY_POINT_OFFSET_CHECKPOINT)
        self.log_start_offsets = self._checkpoint(LOG_START_OFFSET_CHECKPOINT)
        self.cleaner_offsets = self._checkpoint(CLEANER_OFFSET_CHECKPOINT)

    def _checkpoint(self, name: str) -> dict[TopicPartition, int]:
        return OffsetCheckpointFile(self.path / name).read_or_empty()

    def partitions(self) -> list[TopicPartition]:
        """Every partition directory, sorted by topic then partition."""
        found = []
        for entry in os.scandir(self.path):
            tp = TopicPartition.try_parse_dir_name(entry.name)
            if tp is not None and entry.is_dir():
                found.append(tp)
        return sorted(found)

    def partition_dir(self, tp: TopicPartition) -> Path:
        return self.path / tp.dir_name

    def checkpoints(self, tp: TopicPartition) -> PartitionCheckpoints:
        """The checkpoint entries of ``tp``, as read when this view was made."""
        return PartitionCheckpoints(
            self.high_watermarks.get(tp),
            self.log_start_offsets.get(tp),
            self.recovery_points.get(tp),
        )

    def open_partition(
        self, tp: TopicPartition, *, index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES
    ) -> PartitionReader:
        """The read-only view of ``tp`` (a ``LocalLog`` with the re-listing policy) with this log
        dir's high watermark, log start offset and recovery point."""
        return open_partition_with(self.path, tp, self.checkpoints(tp), index_interval_bytes)

    def meta_properties(self) -> dict[str, str]:
        """``meta.properties`` as key/value pairs ({} when absent); comments skipped."""
        path = self.path / META_PROPERTIES
        if not path.is_file():
            return {}
        props = {}
        for line in path.read_text("utf-8").splitlines():
            line = line.strip()
            if line and line[0] not in "#!":
                key, _, value = line.partition("=")
                props[key.strip()] = value.strip()
        return props

    def __repr__(self) -> str:
        return f"LogDir({str(self.path)!r})"


def open_partition_with(
    log_dir: Path,
    tp: TopicPartition,
    checkpoints: PartitionCheckpoints,
    index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
) -> PartitionReader:
    """The read-only view of ``tp`` in ``log_dir`` with the given checkpoint entries, without
    reading the log dir's checkpoint files nor listing it: one partition directory is read (a
    task handed what its planner read, log_dir_fetch_source.py)."""
    directory = log_dir / tp.dir_name
    try:  # the view's listing finds a missing directory: no stat of it before
        return PartitionReader(
            directory,
            high_watermark=checkpoints.high_watermark,
            log_start_offset=checkpoints.log_start_offset,
            recovery_point=checkpoints.recovery_point or 0,
            index_interval_bytes=index_interval_bytes,
        )
    except (FileNotFoundError, NotADirectoryError):
        if directory.is_dir():
            raise
        raise FileNotFoundError(
            f"no partition directory {directory} for {tp} in {log_dir}"
        ) from None
