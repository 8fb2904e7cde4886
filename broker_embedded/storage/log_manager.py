"""The logs of one log dir, owned for writing by one broker (Kafka's ``LogManager``).

Files at the top of the log dir (layouts in offset_checkpoint.py, topic_config_file.py):

    .lock                              held (flock) while this manager is open: one writer
    .kafka_cleanshutdown               written by a clean close, removed on open
    meta.properties                    node.id, cluster.id, directory.id (written once)
    kafkalog-topics.json               topics, ids, partition counts, config overrides
    replication-offset-checkpoint      high watermarks
    recovery-point-offset-checkpoint   recovery points
    log-start-offset-checkpoint        log start offsets
    cleaner-offset-checkpoint          first dirty offsets of compacted logs (the log cleaner)
    .kafkalog-staging/                 record batches staged by Spark write jobs (staged_write.py)
    .kafkalog-commits/                 the last micro-batch each streaming query committed

Opening refuses a path that is not a log dir (log_dir.py: meta.properties or partition
directories) with ``NotALogDirError``: only ``create=True`` makes one, of a missing path or an
empty directory, as Kafka's ``kafka-storage format`` does (Kafka refuses an unformatted dir).
Then it takes the lock (:class:`LogDirLockedError` names the owner), then opens every partition
directory, on :data:`OPEN_THREADS` threads (Kafka's ``num.recovery.threads.per.data.dir``),
the files they rewrite made durable by one sync at the end (checkpoint_file.one_sync):
without the clean-shutdown marker each log recovers from its recovery point. New logs are
created in batches the same way (:meth:`LogManager.create_logs`: one sync, one write of each
checkpoint file per batch; a batch that fails, a full disk, removes the directories it made).
A log opened without a high watermark in ``replication-offset-checkpoint`` (a copied log dir
that lacks the file) is left out of that file until its high watermark moves: readers take
such a log whole, and a write job's commit, which rewrites the file, must not hide it.
Without ``kafkalog-topics.json``, a log dir Kafka wrote in KRaft mode has its topics, partition
counts and config overrides read from Kafka's metadata log (topic_config_file.py,
cluster_metadata_log.py). Partition directories of topics missing from both (a log dir copied
from a ZooKeeper-mode Kafka broker) are opened with the broker defaults and registered.
``__cluster_metadata-0`` (a KRaft broker's metadata log) is not a topic: as Kafka's log manager
does, it is left alone.
Then it resolves what a Spark write job's commit left when its process died (staged_write.py):
logs appended to by a commit that never published its high watermarks are truncated back, a
commit that published is kept, and staging directories untouched for a day are deleted.

Publishing: any change of a log's high watermark, log start offset or recovery point wakes the
checkpoint thread, which rewrites the changed checkpoint files atomically, at most once per
``checkpoint_interval_ms`` (default 100 ms): a reader in another process sees a new high
watermark within that interval. A new log's entries are written before the log is handed out,
so no reader meets a partition without a high watermark entry (read-only views read such a
partition to its log end). The scheduler applies retention every
``retention_check_interval_ms`` and the ``flush.ms`` policy every ``flush_check_interval_ms``.
With a ``cleaner_config`` (``LogCleanerConfig``, from the broker's ``log.cleaner.*`` settings)
the log cleaner's threads (broker_embedded/cleaner/log_cleaner_manager.py) start once a log of
a compacted topic exists (checked every ``log.cleaner.backoff.ms``) and stop before the logs
close; without one (the default, e.g. a Spark job's commit) nothing is compacted here. The
cleaner package sits above storage (it cleans storage's logs): the manager knows the config and
the threads only as :class:`LogCleanerSettings` and :class:`LogCleanerThreads`, and the config
makes the threads.

A full disk: a checkpoint write that fails keeps the old file (checkpoint_file.py) and is
retried after ``checkpoint_interval_ms``; one log line per episode for the whole log dir
(``health``, storage_health.py, shared with its logs). Closing writes the last checkpoints and
the clean-shutdown marker only when every log closed cleanly and they fit; otherwise the next
start recovers the logs from the recovery points on disk.

Thread safety: the manager's lock guards its maps; each log has its own lock. Lock order: log
lock, then manager lock (a log's change callback takes the manager's condition), so the manager
never calls into a log others can reach while it holds its own lock. Checkpoint writes are
serialised by a third lock (they share ``.tmp`` names), taken before the others (only the
creation lock, which serialises creations of logs, comes before it)
(:meth:`publish_high_watermarks` moves high watermarks under it, so that one checkpoint write
publishes all of them).
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Protocol

from broker_embedded.errors import (
    BrokerClosedError,
    KafkaStorageError,
    UnknownTopicOrPartitionError,
)
from broker_embedded.scheduler import KafkaScheduler, ScheduledTask
from broker_embedded.storage.checkpoint_file import fsync_dir, one_sync, within_this_sync
from broker_embedded.storage.log_config import LogConfig
from broker_embedded.storage.log_dir import prepare_log_dir
from broker_embedded.storage.log_dir_lock import LogDirLock
from broker_embedded.storage.offset_checkpoint import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_OFFSET_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    OffsetCheckpointFile,
)
from broker_embedded.storage.open_files import is_too_many_open_files, too_many_open_files
from broker_embedded.storage.partition_metadata import (
    PARTITION_METADATA_FILE,
    PartitionMetadataFile,
    new_topic_id,
    topic_id_to_string,
)
from broker_embedded.storage.segment_writer import wall_clock_ms
from broker_embedded.storage.staging_area import resolve_interrupted_commits
from broker_embedded.storage.storage_health import StorageHealth
from broker_embedded.storage.topic_config_file import TopicConfigFile, TopicEntry
from broker_embedded.storage.topic_partition import TopicPartition
from broker_embedded.storage.unified_log import UnifiedLog

log = logging.getLogger(__name__)

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
METADATA_TOPIC = "__cluster_metadata"
META_PROPERTIES = "meta.properties"
DEFAULT_CHECKPOINT_INTERVAL_MS = 100
DEFAULT_RETENTION_CHECK_INTERVAL_MS = 300_000
DEFAULT_FLUSH_CHECK_INTERVAL_MS = 1_000
OPEN_THREADS = 8


class LogCleanerThreads(Protocol):
    """The log cleaner's threads as the manager drives them (the cleaner's ``LogCleaner``)."""

    @property
    def is_started(self) -> bool: ...

    def startup(self) -> None: ...

    def shutdown(self) -> None: ...

    def forget(self, partitions: Iterable[TopicPartition]) -> None:
        """Drop deleted partitions' cleaning state."""


class LogCleanerSettings(Protocol):
    """The cleaner settings a manager takes (the cleaner's ``LogCleanerConfig``): how many
    threads, how often to look for a compacted log to start them, and the threads themselves."""

    @property
    def threads(self) -> int: ...

    @property
    def backoff_ms(self) -> int: ...

    def new_log_cleaner(
        self,
        log_dir: Path,
        logs: Callable[[], Mapping[TopicPartition, UnifiedLog]],
        *,
        clock_ms: Callable[[], int],
    ) -> LogCleanerThreads: ...


_CHECKPOINTS = {
    REPLICATION_OFFSET_CHECKPOINT: lambda lg: lg.high_watermark,
    RECOVERY_POINT_OFFSET_CHECKPOINT: lambda lg: lg.recovery_point,
    LOG_START_OFFSET_CHECKPOINT: lambda lg: lg.log_start_offset,
}


class LogManager:
    """Opens, creates, deletes and checkpoints the logs of one log dir."""

    def __init__(
        self,
        log_dir: str | Path,
        defaults: LogConfig | None = None,
        *,
        node_id: int = 0,
        owner: str = "kafkalog broker",
        clock_ms: Callable[[], int] = wall_clock_ms,
        checkpoint_interval_ms: int = DEFAULT_CHECKPOINT_INTERVAL_MS,
        retention_check_interval_ms: int = DEFAULT_RETENTION_CHECK_INTERVAL_MS,
        flush_check_interval_ms: int = DEFAULT_FLUSH_CHECK_INTERVAL_MS,
        cleaner_config: LogCleanerSettings | None = None,
        create: bool = False,
        remote_storage_system_enable: bool = True,
    ) -> None:
        self.log_dir = Path(log_dir)
        self._remote_storage_system_enable = remote_storage_system_enable
        prepare_log_dir(self.log_dir, create=create)
        self.defaults = defaults or LogConfig()
        self.node_id = node_id
        self._clock = clock_ms
        self._interval_s = checkpoint_interval_ms / 1000
        self._lock_file = LogDirLock.acquire(self.log_dir, f"{owner} {node_id}")
        self._cond = threading.Condition()
        self._checkpoint_lock = threading.Lock()
        self._create_lock = threading.Lock()  # one creation of logs at a time
        self._dirty = False
        self._closed = False
        self._written: dict[str, dict[TopicPartition, int]] = {}
        # logs opened without a high watermark in the checkpoint (a copied Kafka log dir), with
        # the one they started at: left out of the checkpoint until it moves (_write_checkpoints)
        self._hw_unknown: dict[TopicPartition, int] = {}
        self.logs: dict[TopicPartition, UnifiedLog] = {}
        self.health = StorageHealth(self.log_dir)
        try:
            self._write_meta_properties()
            marker = self.log_dir / CLEAN_SHUTDOWN_FILE
            self.had_clean_shutdown = marker.exists()
            marker.unlink(missing_ok=True)
            self._topic_file = TopicConfigFile(self.log_dir)
            self.topics = self._topic_file.read()
            with one_sync():  # the logs' rewritten files (leader epochs, ...): one sync
                self._load_logs()
            published = self._written[REPLICATION_OFFSET_CHECKPOINT]
            if resolve_interrupted_commits(self, published):
                self.checkpoint()
        except BaseException:
            self._close_logs(clean=False)
            self._lock_file.release()
            raise
        self._checkpointer = threading.Thread(
            target=self._checkpoint_loop, name=f"checkpoint-{self.log_dir.name}", daemon=True
        )
        self._checkpointer.start()
        self.scheduler = KafkaScheduler(f"log-manager-{node_id}")
        self.scheduler.startup()
        self.scheduler.schedule(
            "retention", self.cleanup_logs, retention_check_interval_ms, retention_check_interval_ms
        )
        self.scheduler.schedule(
            "flush", self.flush_dirty_logs, flush_check_interval_ms, flush_check_interval_ms
        )
        self.cleaner: LogCleanerThreads | None = None
        self._cleaner_startup: ScheduledTask | None = None
        if cleaner_config is not None and cleaner_config.threads > 0:
            self.cleaner = cleaner_config.new_log_cleaner(
                self.log_dir, self._current_logs, clock_ms=clock_ms
            )
            self._cleaner_startup = self.scheduler.schedule(
                "log-cleaner-startup", self._maybe_start_cleaner, 0, cleaner_config.backoff_ms
            )

    # -- opening -----------------------------------------------------------------------------------

    def _write_meta_properties(self) -> None:
        path = self.log_dir / META_PROPERTIES
        if path.exists():
            return
        text = (
            f"#kafkalog embedded broker on {socket.gethostname()}\nversion=1\n"
            f"node.id={self.node_id}\ncluster.id={topic_id_to_string(uuid.uuid4())}\n"
            f"directory.id={topic_id_to_string(new_topic_id())}\n"
        )
        path.write_text(text, "utf-8")
        fsync_dir(self.log_dir)

    def _load_logs(self) -> None:
        points = read_offset_checkpoints(self.log_dir)
        found = sorted(
            tp
            for e in os.scandir(self.log_dir)
            if e.is_dir()
            and (tp := TopicPartition.try_parse_dir_name(e.name)) is not None
            and tp.topic != METADATA_TOPIC
        )
        unknown = {tp.topic: tp for tp in found if tp.topic not in self.topics}  # highest last
        for topic, tp in unknown.items():
            self.topics[topic] = TopicEntry(self._topic_id_on_disk(tp), tp.partition + 1)
        if unknown:
            self._topic_file.write(self.topics)
        registered = [tp for tp in found if tp.partition < self.topics[tp.topic].partitions]

        def open_one(tp: TopicPartition) -> UnifiedLog:
            return self._open_log(
                tp,
                recovery_point=points[RECOVERY_POINT_OFFSET_CHECKPOINT].get(tp, 0),
                log_start_offset=points[LOG_START_OFFSET_CHECKPOINT].get(tp),
                high_watermark=points[REPLICATION_OFFSET_CHECKPOINT].get(tp),
            )

        _open_in_parallel(registered, open_one, self.logs)
        self._hw_unknown = {
            tp: self.logs[tp].high_watermark
            for tp in registered
            if tp not in points[REPLICATION_OFFSET_CHECKPOINT]
        }
        self._written = points

    def _topic_id_on_disk(self, tp: TopicPartition) -> uuid.UUID:
        f = PartitionMetadataFile(self.log_dir / tp.dir_name / PARTITION_METADATA_FILE)
        return f.read().topic_id if f.exists() else new_topic_id()

    def _open_log(self, tp: TopicPartition, **offsets: int | None) -> UnifiedLog:
        return _open_log(
            self.log_dir,
            tp,
            self.topics[tp.topic],
            self.defaults,
            had_clean_shutdown=self.had_clean_shutdown,
            clock_ms=self._clock,
            on_offsets_changed=self._on_offsets_changed,
            health=self.health,
            remote_storage_system_enable=self._remote_storage_system_enable,
            **offsets,
        )

    # -- topics and logs ---------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise BrokerClosedError(f"the log manager of {self.log_dir} is closed")

    def put_topic(self, topic: str, entry: TopicEntry) -> None:
        """Register or update a topic (persisted at once; an unchanged entry writes nothing).
        A write that fails (a full disk) changes nothing: :class:`KafkaStorageError`. Changed
        config overrides (AlterConfigs) are taken by the topic's open logs once written."""
        with self._cond:
            self._check_open()
            previous = self.topics.get(topic)
            if previous == entry:
                return
            try:
                self._topic_file.write({**self.topics, topic: entry})
            except OSError as e:
                self.health.failed(f"registering topic {topic!r}", e)
                raise KafkaStorageError(
                    f"registering topic {topic!r} in {self._topic_file.path} failed: {e}"
                ) from e
            self.health.succeeded()
            self.topics[topic] = entry
            logs = [lg for tp, lg in self.logs.items() if tp.topic == topic]
        if previous is not None and previous.config != entry.config:
            # outside the lock: a log calls back into it (offsets changed) under its own
            config = entry.log_config(self.defaults, topic)
            for lg in logs:
                lg.update_config(config)

    def get_or_create_log(self, tp: TopicPartition) -> UnifiedLog:
        """The log of ``tp`` (its topic must be registered), created empty if needed (see
        :meth:`create_logs`)."""
        existing = self.logs.get(tp)
        if existing is not None and not self._closed:
            return existing
        return self.create_logs([tp])[tp]

    def create_logs(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, UnifiedLog]:
        """The logs of ``tps`` (their topics must be registered), the missing ones created
        empty: their files made durable by one sync (checkpoint_file.one_sync) and their
        checkpoint entries written (one write of each checkpoint file for all of them) before
        any is published, so a reader never meets a partition without a high watermark entry
        (which it would read to its log end). Creations are serialised; checkpoint writes go on
        while the logs are opened."""
        wanted = list(dict.fromkeys(tps))
        with self._create_lock:
            with self._cond:
                self._check_open()
                found = {tp: lg for tp in wanted if (lg := self.logs.get(tp)) is not None}
                missing = [tp for tp in wanted if tp not in found]
                for tp in missing:
                    entry = self.topics.get(tp.topic)
                    if entry is None or tp.partition >= entry.partitions:
                        raise UnknownTopicOrPartitionError(
                            f"topic {tp.topic!r} partition {tp.partition} is not registered in "
                            f"{self.log_dir}"
                        )
            if not missing:
                return found
            created: dict[TopicPartition, UnifiedLog] = {}
            try:
                with one_sync():
                    _open_in_parallel(missing, self._open_log, created)
                    self._publish_created(created)
            except BaseException:
                for lg in created.values():
                    if self.logs.get(lg.topic_partition) is not lg:
                        lg.close()
                self._remove_unpublished(missing)
                raise
            return {**found, **created}

    def _remove_unpublished(self, tps: list[TopicPartition]) -> None:
        """Remove the directories a failed :meth:`create_logs` made (a full disk): no half
        log dir stays behind; the partitions are created anew by the next try."""
        with self._cond:
            unpublished = [tp for tp in tps if tp not in self.logs]
        for tp in unpublished:
            shutil.rmtree(self.log_dir / tp.dir_name, ignore_errors=True)

    def _publish_created(self, created: dict[TopicPartition, UnifiedLog]) -> None:
        with self._checkpoint_lock:  # no checkpoint write in between
            with self._cond:
                self._check_open()
                logs = {**self.logs, **created}
            self._write_checkpoints(logs)
            with self._cond:
                self._check_open()
                self.logs.update(created)

    def get_log(self, tp: TopicPartition) -> UnifiedLog | None:
        return self.logs.get(tp)

    def _current_logs(self) -> dict[TopicPartition, UnifiedLog]:
        with self._cond:
            return dict(self.logs)

    def _maybe_start_cleaner(self) -> None:
        """The scheduler's check: start the cleaner threads once a compacted log exists."""
        cleaner = self.cleaner
        if cleaner is None:
            return
        if not cleaner.is_started and any(
            lg.config.compact for lg in self._current_logs().values()
        ):
            cleaner.startup()
        if cleaner.is_started and self._cleaner_startup is not None:
            self._cleaner_startup.cancel()

    def delete_topic(self, topic: str) -> None:
        """Close and delete every partition of ``topic`` and forget it."""
        self._delete_partitions(topic, None)

    def remove_partitions(self, topic: str, entry: TopicEntry) -> None:
        """Close and delete the partitions of ``topic`` from ``entry.partitions`` on, and
        register ``entry`` (a growth of the topic undone)."""
        self._delete_partitions(topic, entry)

    def _delete_partitions(self, topic: str, keep: TopicEntry | None) -> None:
        """The directories go first, then the topic's entry: a crash in between leaves the
        topic registered with directories missing, which its next opening creates (never
        directories of an unregistered topic, which the opening would adopt as a topic); on a
        full disk their space lets the topic file's rewrite fit (how an operator frees a full
        disk). A rewrite that still fails is :class:`KafkaStorageError` with the partitions
        deleted and the topic still registered; deleting it again finishes."""
        first = 0 if keep is None else keep.partitions
        with self._cond:
            self._check_open()
            doomed = [
                (tp, self.logs.pop(tp))
                for tp in list(self.logs)
                if tp.topic == topic and tp.partition >= first
            ]
        for _, lg in doomed:  # outside the manager's lock: closing takes each log's lock
            lg.close()
        for e in os.scandir(self.log_dir):  # also those a failed creation left unopened
            tp = TopicPartition.try_parse_dir_name(e.name)
            if tp is not None and tp.topic == topic and tp.partition >= first and e.is_dir():
                shutil.rmtree(e.path, ignore_errors=True)
        with self._cond:
            self._check_open()
            rest = {name: entry for name, entry in self.topics.items() if name != topic}
            if keep is not None:
                rest[topic] = keep
            try:
                fsync_dir(self.log_dir)
                self._topic_file.write(rest)
            except OSError as e:
                self.health.failed(f"deleting partitions of topic {topic!r}", e)
                raise KafkaStorageError(
                    f"deleting partitions of topic {topic!r}: they are deleted but rewriting "
                    f"{self._topic_file.path} failed: {e}"
                ) from e
            if keep is None:
                self.topics.pop(topic, None)
            else:
                self.topics[topic] = keep
        if self.cleaner is not None:
            self.cleaner.forget(tp for tp, _ in doomed)
        self._on_offsets_changed(None)

    # -- background work ---------------------------------------------------------------------------

    def _on_offsets_changed(self, _log: UnifiedLog | None) -> None:
        if self._dirty:
            # Already due: the checkpoint thread clears the flag before it reads the offsets,
            # so it reads this change too. Waking it again would only cost a thread switch
            # on every produce request.
            return
        with self._cond:
            self._dirty = True
            self._cond.notify_all()

    def _checkpoint_loop(self) -> None:
        while True:
            with self._cond:
                while not self._dirty and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return
            try:
                self.checkpoint()
            except OSError as e:  # a full disk: the old files stay; retried after the interval
                self.health.failed("writing a checkpoint file", e)
                with self._cond:
                    self._dirty = True
            except Exception:  # keep publishing: the next change retries
                log.exception("writing the checkpoint files of %s failed", self.log_dir)
            with self._cond:  # coalesce: at most one write per interval
                self._cond.wait_for(lambda: self._closed, timeout=self._interval_s)

    def checkpoint(self) -> None:
        """Write the checkpoint files whose contents changed."""
        with self._checkpoint_lock:
            self._checkpoint_locked()

    def _checkpoint_locked(self) -> None:
        with self._cond:
            self._dirty = False
            logs = dict(self.logs)
        self._write_checkpoints(logs)

    def publish_high_watermarks(self, high_watermarks: Mapping[TopicPartition, int]) -> None:
        """Set the high watermarks of several logs and publish them with one (atomic) write of
        ``replication-offset-checkpoint``: a reader sees all of them moved or none (the commit
        point of a Spark write job). Each is clamped to its log's [log start, log end]."""
        with self._checkpoint_lock:  # no checkpoint write sees some of them moved
            for tp in high_watermarks:
                if self.logs.get(tp) is None:
                    raise UnknownTopicOrPartitionError(
                        f"topic {tp.topic!r} partition {tp.partition} has no log in {self.log_dir}"
                    )
            for tp, hw in high_watermarks.items():
                self.logs[tp].update_high_watermark(hw)
            self._checkpoint_locked()

    def _write_checkpoints(self, logs: dict[TopicPartition, UnifiedLog]) -> None:
        """Under the checkpoint lock."""
        for tp, hw in list(self._hw_unknown.items()):
            if tp not in logs or logs[tp].high_watermark != hw:
                del self._hw_unknown[tp]  # it moved (a leader, a write): known from now on
        for name, value in _CHECKPOINTS.items():
            offsets = {
                tp: value(lg)
                for tp, lg in sorted(logs.items())
                if name != REPLICATION_OFFSET_CHECKPOINT or tp not in self._hw_unknown
            }
            if offsets != self._written.get(name):
                OffsetCheckpointFile(self.log_dir / name).write(offsets)
                self._written[name] = offsets
                self.health.succeeded()

    def cleanup_logs(self) -> int:
        """Retention over every log; returns the segments deleted."""
        deleted = 0
        for lg in list(self.logs.values()):
            if not lg.is_closed and lg.failure is None:
                deleted += lg.delete_old_segments(self._clock())
        return deleted

    def flush_dirty_logs(self) -> None:
        now = self._clock()
        for lg in list(self.logs.values()):
            lg.maybe_flush_by_time(now)

    # -- closing -----------------------------------------------------------------------------------

    def close(self, *, clean: bool = True) -> None:
        """Stop background work, close every log and release the lock. ``clean=False`` leaves
        the files as a killed process would (no flush, no clean-shutdown marker)."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._cond.notify_all()
        self.scheduler.shutdown()
        if self.cleaner is not None:
            self.cleaner.shutdown()
        self._checkpointer.join()
        try:
            self._close_logs(clean)
            if clean and not self._failed_logs():
                self._close_cleanly()
        finally:
            self._lock_file.release()

    def _close_logs(self, clean: bool) -> None:
        for lg in self.logs.values():
            if clean:
                lg.close()  # a log that failed is closed as a crash leaves it (unified_log.py)
            else:
                lg.close_without_flush()

    def _failed_logs(self) -> list[TopicPartition]:
        failed = [tp for tp, lg in self.logs.items() if lg.failure is not None]
        if failed:
            log.warning(
                "log dir %s: %d logs went offline after failed writes (%s): no clean "
                "shutdown marker, the next start recovers them",
                self.log_dir,
                len(failed),
                ", ".join(map(str, failed[:5])),
            )
        return failed

    def _close_cleanly(self) -> None:
        """The last checkpoints, then the clean-shutdown marker; on a full disk neither (the
        old checkpoints stay): the next start recovers from the recovery points on disk."""
        try:
            self.checkpoint()
            (self.log_dir / CLEAN_SHUTDOWN_FILE).write_bytes(b"")
            fsync_dir(self.log_dir)
        except OSError as e:
            (self.log_dir / CLEAN_SHUTDOWN_FILE).unlink(missing_ok=True)
            log.warning(
                "log dir %s: closing without a clean shutdown marker, the next start "
                "recovers its logs: %s",
                self.log_dir,
                e,
            )

    def __enter__(self) -> LogManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _open_in_parallel(
    tps: list[TopicPartition],
    open_one: Callable[[TopicPartition], UnifiedLog],
    into: dict[TopicPartition, UnifiedLog],
) -> None:
    """``open_one`` of each of ``tps`` into ``into``, on up to :data:`OPEN_THREADS` threads
    (Kafka's recovery threads: opening or creating a log waits on the disk more than on the
    CPU), inside the caller's sync. The first failure is raised once every opening ended; the
    logs opened are in ``into`` then (the caller closes them)."""
    if len(tps) < 2 * OPEN_THREADS:
        for tp in tps:
            into[tp] = open_one(tp)
        return
    run = within_this_sync(open_one)
    with ThreadPoolExecutor(OPEN_THREADS, thread_name_prefix="log-open") as pool:
        futures = {tp: pool.submit(run, tp) for tp in tps}
    failure = None
    for tp, future in futures.items():
        if future.exception() is None:
            into[tp] = future.result()
        elif failure is None:
            failure = future.exception()
    if failure is not None:
        raise failure


def read_offset_checkpoints(log_dir: Path) -> dict[str, dict[TopicPartition, int]]:
    """The high watermark, recovery point and log start offset checkpoints of ``log_dir``."""
    return {name: OffsetCheckpointFile(log_dir / name).read_or_empty() for name in _CHECKPOINTS}


def _open_log(
    log_dir: Path, tp: TopicPartition, entry: TopicEntry, defaults: LogConfig, **kwargs: object
) -> UnifiedLog:
    try:
        return UnifiedLog(
            log_dir, tp, entry.log_config(defaults, tp.topic), topic_id=entry.topic_id, **kwargs
        )
    except OSError as e:  # one not opened through open_files.open_file
        if is_too_many_open_files(e):
            raise too_many_open_files(e.filename or log_dir / tp.dir_name, e) from e
        raise


def shut_down_cleanly(log_dir: str | Path) -> bool:
    """Whether the last owner of ``log_dir`` closed it cleanly (its logs need no recovery)."""
    return (Path(log_dir) / CLEAN_SHUTDOWN_FILE).exists()


def open_log_for_cleaning(
    log_dir: str | Path,
    tp: TopicPartition,
    defaults: LogConfig | None = None,
    *,
    clock_ms: Callable[[], int] = wall_clock_ms,
) -> UnifiedLog:
    """The log of ``tp`` alone, for a compaction job that holds its partition cleaning lock
    (cleaning_lock.py) in a log dir no one owns and that was shut down cleanly: no recovery, no
    log manager (an interrupted cleaner swap is settled by the log's opening). Nothing outside
    the partition's directory is written; its checkpoint entries are read, not changed."""
    log_dir = Path(log_dir)
    entry = TopicConfigFile(log_dir).read().get(tp.topic)
    if entry is None or tp.partition >= entry.partitions:
        raise UnknownTopicOrPartitionError(
            f"topic {tp.topic!r} partition {tp.partition} is not registered in {log_dir}"
        )
    points = read_offset_checkpoints(log_dir)
    return _open_log(
        log_dir,
        tp,
        entry,
        defaults or LogConfig(),
        clock_ms=clock_ms,
        recovery_point=points[RECOVERY_POINT_OFFSET_CHECKPOINT].get(tp, 0),
        log_start_offset=points[LOG_START_OFFSET_CHECKPOINT].get(tp),
        high_watermark=points[REPLICATION_OFFSET_CHECKPOINT].get(tp),
    )
