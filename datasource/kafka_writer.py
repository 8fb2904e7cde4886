"""The batch writer of the ``kafkalog`` data source: ``df.write.format("kafkalog")`` appends the
rows of a DataFrame to topics of a log dir, as Spark's Kafka sink produces them to a cluster.

Columns (Spark's Kafka sink; names are exact, other columns are ignored as
Spark's sink ignores them, so a DataFrame read with ``format("kafkalog")`` writes back as is):

- ``value`` (required): string or binary; null is a tombstone;
- ``key`` (optional): string or binary; null is no key;
- ``topic`` (optional): string; the option ``topic`` overrides it; one of the two is required
  and a row with a null topic (without the option) is an error;
- ``partition`` (optional): int; null means "place the record" (below); a partition outside the
  topic is an error naming the topic and the partition;
- ``headers`` (optional): ``array<struct<key: string, value: binary>>``; null means none;
- ``timestamp`` (optional; Spark 4.x's Kafka sink): timestamp, or double seconds; the record's
  CreateTime (datasource/write_timestamps.py); null means the write's wall-clock time.

A column of another type is an error naming the column and its type, raised when the write
starts (before any task runs). Strings are written as their UTF-8 bytes. A record without a
``timestamp`` value gets the write's wall-clock time as its CreateTime timestamp (LogAppendTime
topics overwrite it at append, as Kafka does).

Placement of a row without a partition: a keyed record goes where Kafka's default partitioner puts
it (``toPositive(murmur2(key)) % partitions``, broker_embedded/client/default_partitioner.py), so
Kafka clients and kafkalog agree on where a key lives. A keyless record: Kafka 3.x producers use
sticky partitioning (fill a batch for one partition, then switch); here each task deals its keyless
records round-robin over the topic's partitions, starting at a random partition, which spreads them
evenly while every partition still gets large batches (records are grouped per partition before they
are encoded). The partition counts come from the log dir's ``kafkalog-topics.json``.

Atomicity (the log dir's write port, broker_embedded/storage/log_dir_produce_sink.py, over
staged_write.py): each task stages complete record batches in
``<log dir>/.kafkalog-staging/<job id>/`` (one file per task attempt and partition), one Arrow batch
at a time (its memory is bounded by Spark's Arrow batch size, whatever the task's data); the job's
commit, on the driver side, takes the log dir's lock, appends the staged batches in task order and
only then publishes the new high watermarks, all at once. A failed or aborted job leaves nothing
visible. On a full disk the job fails with a KAFKA_STORAGE_ERROR naming the log dir, the partition,
the file and ``No space left on device`` (a task's staging, or the commit's free-space check before
it appends anything), and the log dir is left as it was. Batches are encoded uncompressed, at most
``max.message.bytes - 61`` bytes (and 1 MiB) each, so no batch is refused; a single record above the
topic's ``max.message.bytes`` is an error naming the topic and partition, as is a keyless record for
a compacted topic.

Modes: ``append`` only (``.mode("append")``: Spark refuses its default mode, ErrorIfExists, for
Python data sources); overwrite is refused: Kafka has no overwrite. A log dir owned
by a running broker process is refused with an error naming the owner: writing through a running
broker goes through its network listener (``kafka.bootstrap.servers``, wire_writer.py). Writes
are exactly-once per job (Spark's Kafka sink promises at-least-once).

Picklable: the writer holds the parsed options and the job id only. The streaming writer
(kafka_stream_writer.py) shares the checks, placement and staging: :func:`check_write`,
:func:`stage_task`; the writers over the Kafka protocol (wire_writer.py, with the option
``kafka.bootstrap.servers`` instead of a path) share the columns check and the placement
(kafka_row_writer.py).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import (
    StructType,
)

from broker_embedded.errors import (
    LogDirLockedError,
    UnknownTopicOrPartitionError,
)
from broker_embedded.storage.log_dir_produce_sink import (
    LogDirSink,
    StagedFile,
    held_by_a_commit,
)
from datasource.kafka_row_writer import InvalidWriteError, RowPlacer, check_columns
from datasource.kafka_write_options import KafkaWriteOptions
from datasource.worker_heap import call_started

if TYPE_CHECKING:
    pass

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class KafkaLogCommitMessage(WriterCommitMessage):
    """What one task staged: its files, by topic and partition."""

    files: tuple[StagedFile, ...]


def _owner_error(sink: LogDirSink) -> LogDirLockedError:
    return LogDirLockedError(
        f"cannot write to log dir {sink.path}: a running broker or another writer owns it "
        f"({sink.lock_holder()}). The kafkalog sink appends only to a log dir no "
        "broker owns; to write through a running broker, produce to its network listener "
        'instead: .option("kafka.bootstrap.servers", "<host:port>") and no path (at least '
        "once, wire_writer.py), or stop the broker first"
    )


def check_write(options: KafkaWriteOptions, schema: StructType) -> None:
    """What a write (batch or streaming) checks on the driver before any task runs: the
    columns, the topics, and that no broker owns the log dir."""
    check_columns(schema, options.topic)
    sink = LogDirSink(options.path)
    try:
        topics = sink.topics()
    except FileNotFoundError:
        topics = {}
    if not topics:
        raise UnknownTopicOrPartitionError(
            f"log dir {options.path} holds no topics (no kafkalog-topics.json, no Kafka "
            "metadata log __cluster_metadata-0): create the "
            "topics first, e.g. kafkalog topics create <topic> --log-dir <dir>"
        )
    if options.topic is not None and options.topic not in topics:
        raise _unknown_topic(options.topic, options.path, topics)
    # fail early; the commit's lock is the real check. Another write job's commit holds the
    # lock for a moment: not an owner to refuse (the commit waits for it)
    if sink.locked() and not held_by_a_commit(sink.lock_holder()):
        raise _owner_error(sink)


def new_job_id() -> str:
    """A fresh write job id: UTC time and 64 random bits (``staged_write`` job id rules)."""
    return f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:16]}"


def task_attempt_name() -> str:
    """This task attempt's name for its staged files (unique within a Spark application)."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        return f"local-{uuid.uuid4().hex[:16]}"
    return f"p{ctx.partitionId()}-a{ctx.attemptNumber()}-t{ctx.taskAttemptId()}"


def stage_task(
    options: KafkaWriteOptions, job_id: str, iterator: Iterator[pa.RecordBatch]
) -> tuple[StagedFile, ...]:
    """One task's work: place, encode and stage every Arrow batch of ``iterator`` in write job
    ``job_id``'s staging directory; the staged files (deleted again if anything fails)."""
    sink = LogDirSink(options.path)
    appender = sink.appender(job_id, task_attempt_name())
    try:
        placer = RowPlacer(
            options.topic,
            sink.topic_limits,
            lambda name: _unknown_topic(name, options.path, sink.topics()),
        )
        for batch in iterator:
            placer.append(batch, appender)
        return appender.finish()
    except BaseException:
        appender.discard()
        raise


class KafkaLogWriter(DataSourceArrowWriter):
    """See the module docstring. Made by :meth:`create` on the driver; :meth:`write` runs in
    each task, :meth:`commit` / :meth:`abort` on the driver side."""

    def __init__(self, options: KafkaWriteOptions, job_id: str) -> None:
        self.options = options
        self.job_id = job_id

    @classmethod
    def create(cls, options: dict, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        """Check the options, mode, columns and log dir before any task runs."""
        if overwrite:
            raise InvalidWriteError(
                "save mode overwrite is not supported: Kafka topics are append-only logs, "
                'nothing in them can be replaced; use .mode("append")'
            )
        from datasource.wire_writer import WireWriter, wire_write_options

        wire = wire_write_options(options)  # kafka.bootstrap.servers: produce over the protocol
        if wire is not None:
            return WireWriter.create(wire, schema)
        parsed = KafkaWriteOptions.parse(options)
        check_write(parsed, schema)
        return cls(parsed, new_job_id())

    # -- tasks ---------------------------------------------------------------------------------

    def write(self, iterator: Iterator[pa.RecordBatch]) -> KafkaLogCommitMessage:
        call_started()
        return KafkaLogCommitMessage(stage_task(self.options, self.job_id, iterator))

    # -- the driver ----------------------------------------------------------------------------

    def commit(self, messages: Sequence[KafkaLogCommitMessage | None]) -> None:
        files = [f for m in messages if m is not None for f in m.files]
        done = LogDirSink(self.options.path).commit(self.job_id, files)
        log.info("write job %s appended %s to %s", self.job_id, done, self.options.path)

    def abort(self, messages: Sequence[KafkaLogCommitMessage | None]) -> None:
        LogDirSink(self.options.path).abort(self.job_id)


def _unknown_topic(topic: str, path: str, topics: dict) -> UnknownTopicOrPartitionError:
    return UnknownTopicOrPartitionError(
        f"topic {topic!r} does not exist in log dir {path} (its topics: "
        f"{', '.join(sorted(topics))}); create it first, e.g. kafkalog topics create {topic} "
        f"--log-dir {path} --partitions <n>"
    )
