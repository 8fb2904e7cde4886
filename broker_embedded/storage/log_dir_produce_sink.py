"""The :class:`ProduceSink` of a log dir no broker owns: :class:`LogDirSink`.

Topics and their limits come from the log dir's ``kafkalog-topics.json`` (or Kafka's metadata
log), each topic's config over the broker's default topic config (log_config.py), read once per
sink, at the first use (a snapshot, as a FetchSource's offsets are).

Writing is staged_write.py's, in three steps:

1. each task stages complete record batches with a :class:`StagedAppender`
   (``<log dir>/.kafkalog-staging/<job id>/``, one file per task attempt and partition); its
   :meth:`~StagedAppender.finish` fsyncs and renames them and returns their descriptions
   (:class:`StagedFile`, picklable: what a task sends to the driver);
2. the driver's :meth:`LogDirSink.commit` takes the log dir's ``.lock`` (waiting while another
   write job's commit or a compaction job holds it briefly), checks the free space, appends the
   files in order as the partitions' leader, flushes, then publishes the new high watermarks all
   at once; with a writer id and a batch id (a streaming writer's micro-batch) it records the
   batch id in the same step and appends nothing for a batch at or below the one recorded;
3. or :meth:`LogDirSink.abort` deletes the job's staged files (and makes its tasks still staging
   fail).

A failed or aborted job leaves nothing visible; an ``OSError`` (a full disk) is a
KAFKA_STORAGE_ERROR naming the log dir, the partition and the file. The producer fields are
none: batches are staged without a producer id.

Who owns the log dir: :meth:`LogDirSink.locked` and :meth:`LogDirSink.lock_holder` (the holder's
own words in ``.lock``); :func:`held_by_a_commit` tells the brief holders (a commit, compaction
jobs) from an owner (a running broker). Thread safety: a sink and an appender are used by one
thread; concurrent commits to one log dir, from any process, are serialized by its lock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from broker_embedded.storage import staged_write
from broker_embedded.storage.log_config import LogConfig
from broker_embedded.storage.log_dir_lock import LogDirLock
from broker_embedded.storage.produce_sink import TopicLimits
from broker_embedded.storage.topic_config_file import TopicConfigFile
from broker_embedded.storage.topic_partition import TopicPartition

if TYPE_CHECKING:
    from broker_embedded.record.columnar_encoder import EncodedBatches

StagedFile = staged_write.StagedFile  # what a task staged: a task's receipt
UNKNOWN_HOLDER = staged_write.UNKNOWN_HOLDER  # a .lock whose holder names no one (yet)
DEFAULT_LOCK_TIMEOUT_S = staged_write.DEFAULT_LOCK_TIMEOUT_S


def held_by_a_commit(holder: str) -> bool:
    """Whether a :meth:`LogDirSink.lock_holder` text names a write job's commit or compaction
    jobs (both hold the lock briefly: wait for them)."""
    return staged_write.held_by_a_commit(holder)


def read_topic_limits(log_dir: str | Path) -> dict[str, TopicLimits]:
    """Every topic of the log dir with its partition count and limits, under the broker's
    default topic config (``FileNotFoundError`` without the log dir)."""
    defaults = LogConfig()
    out = {}
    for name, entry in TopicConfigFile(log_dir).read().items():
        config = entry.log_config(defaults, name)
        out[name] = TopicLimits(entry.partitions, config.max_message_bytes, config.compact)
    return out


class StagedAppender:
    """One task attempt's staged batches of write job ``job_id`` (module docstring, step 1)."""

    def __init__(self, log_dir: str | Path, job_id: str, attempt: str) -> None:
        self._task = staged_write.StagedTask(log_dir, job_id, attempt)

    def producer_fields(self, topic: str, partition: int) -> Mapping[str, int]:
        return {}

    def append(
        self, topic: str, partition: int, encoded: EncodedBatches, *, null_keys: int = 0
    ) -> None:
        self._task.append(
            topic,
            partition,
            encoded.data,
            batches=len(encoded),
            records=encoded.num_rows,
            max_batch_size=int(np.diff(encoded.positions).max()),
            null_keys=null_keys,
        )

    def append_batch(self, topic: str, partition: int, batch: bytes, *, records: int) -> None:
        """Append one complete record batch of ``records`` records made elsewhere."""
        self._task.append(
            topic, partition, batch, batches=1, records=records, max_batch_size=len(batch)
        )

    def finish(self) -> tuple[StagedFile, ...]:
        """fsync and rename the staged files; their descriptions, by topic and partition."""
        return self._task.finish()

    def discard(self) -> None:
        """Close and delete this task's files (a failed task; never raises)."""
        self._task.discard()


class LogDirSink:
    """Writes the log dir at ``path`` (module docstring)."""

    def __init__(self, path: str | Path) -> None:
        self.path = path
        self._topics: dict[str, TopicLimits] | None = None

    @property
    def location(self) -> str:
        return f"log dir {self.path}"

    def topics(self) -> dict[str, TopicLimits]:
        """Every topic's limits, by name (read at the first call)."""
        if self._topics is None:
            self._topics = read_topic_limits(self.path)
        return self._topics

    def topic_limits(self, topic: str) -> TopicLimits | None:
        return self.topics().get(topic)

    def has_topic(self, topic: str) -> bool:
        """Whether ``kafkalog-topics.json`` lists ``topic`` (read now, not the snapshot)."""
        topics = TopicConfigFile(self.path)
        return topics.path.exists() and topic in topics.read()

    def locked(self) -> bool:
        """Whether a process holds the log dir's ``.lock`` now."""
        return LogDirLock.is_locked(self.path)

    def lock_holder(self) -> str:
        """Who holds (or last held) the ``.lock``, in its own words."""
        return staged_write.lock_holder(self.path)

    def appender(self, job_id: str, attempt: str) -> StagedAppender:
        """A task attempt's appender for write job ``job_id`` (step 1)."""
        return StagedAppender(self.path, job_id, attempt)

    def commit(
        self,
        job_id: str,
        files: Iterable[StagedFile],
        *,
        writer_id: str | None = None,
        batch_id: int | None = None,
        lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S,
    ) -> dict[TopicPartition, tuple[int, int]]:
        """Append and publish the staged ``files`` (step 2); each touched partition's (first
        offset, log end offset) of what was appended (``{}`` for nothing, a replay included)."""
        return staged_write.commit(
            self.path,
            job_id,
            files,
            lock_timeout_s=lock_timeout_s,
            writer_id=writer_id,
            batch_id=batch_id,
        )

    def abort(self, job_id: str) -> None:
        """Delete write job ``job_id``'s staged files (step 3)."""
        staged_write.abort(self.path, job_id)
