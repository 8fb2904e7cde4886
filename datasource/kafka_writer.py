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
``kafka.bootstrap.servers`` instead of a path) share the columns check and :class:`RowPlacer`.
"""

from __future__ import annotations

import logging
import random
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    DoubleType,
    IntegerType,
    StringType,
    StructType,
    TimestampType,
)

from broker_embedded.errors import (
    InvalidRecordError,
    LogDirLockedError,
    RecordTooLargeError,
    UnknownTopicOrPartitionError,
)
from broker_embedded.record.kafka_schema import HEADERS_SQL_TYPE
from broker_embedded.storage.log_dir_produce_sink import (
    LogDirSink,
    StagedFile,
    held_by_a_commit,
)
from broker_embedded.storage.produce_sink import PartitionAppender, TopicLimits
from datasource.errors import KafkaSourceError
from datasource.kafka_write_options import KafkaWriteOptions
from datasource.write_timestamps import TIMESTAMP, record_timestamps

if TYPE_CHECKING:
    from broker_embedded.record.columnar_encoder import EncodedBatches

log = logging.getLogger(__name__)

VALUE, KEY, TOPIC, PARTITION, HEADERS = "value", "key", "topic", "partition", "headers"


class InvalidWriteError(KafkaSourceError, ValueError):
    """A write the ``kafkalog`` sink refuses: a bad column, an unsupported mode, a row it cannot
    place."""


@dataclass(frozen=True)
class KafkaLogCommitMessage(WriterCommitMessage):
    """What one task staged: its files, by topic and partition."""

    files: tuple[StagedFile, ...]


def _same_type(t: DataType, ddl: str) -> bool:
    return t.simpleString() == ddl


def check_columns(schema: StructType, topic_option: str | None) -> tuple[str, ...]:
    """The names of the columns written (value first), checked as Spark's Kafka sink checks
    them; :class:`InvalidWriteError` naming the column and its type."""
    fields = {f.name: f.dataType for f in schema.fields}
    if VALUE not in fields:
        raise InvalidWriteError(
            f"the kafkalog sink needs a column 'value' (string or binary); the DataFrame has "
            f"{', '.join(fields) or 'no columns'}"
        )
    for name in (VALUE, KEY):
        t = fields.get(name)
        if t is not None and not isinstance(t, (StringType, BinaryType)):
            raise InvalidWriteError(
                f"column '{name}' has type {t.simpleString()}: the kafkalog sink takes string or "
                f"binary; cast it, e.g. CAST({name} AS STRING)"
            )
    if topic_option is None:
        t = fields.get(TOPIC)
        if t is None:
            raise InvalidWriteError(
                "no topic: the DataFrame has no column 'topic' and the option topic is not set; "
                'set it with .option("topic", "<name>") or add a string column topic'
            )
        if not isinstance(t, StringType):
            raise InvalidWriteError(
                f"column 'topic' has type {t.simpleString()}: the kafkalog sink takes string"
            )
    t = fields.get(PARTITION)
    if t is not None and not isinstance(t, IntegerType):
        raise InvalidWriteError(
            f"column 'partition' has type {t.simpleString()}: the kafkalog sink takes int; cast "
            "it, e.g. CAST(partition AS INT)"
        )
    t = fields.get(HEADERS)
    if t is not None and not (isinstance(t, ArrayType) and _same_type(t, HEADERS_SQL_TYPE)):
        raise InvalidWriteError(
            f"column 'headers' has type {t.simpleString()}: the kafkalog sink takes "
            f"{HEADERS_SQL_TYPE}"
        )
    t = fields.get(TIMESTAMP)
    if t is not None and not isinstance(t, (TimestampType, DoubleType)):
        raise InvalidWriteError(
            f"column 'timestamp' has type {t.simpleString()}: the kafkalog sink takes timestamp "
            "or double (seconds since the epoch), as Spark's Kafka sink does"
        )
    wanted = (VALUE, KEY, PARTITION, HEADERS, TIMESTAMP) + (
        (TOPIC,) if topic_option is None else ()
    )
    return tuple(name for name in wanted if name in fields)


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


class RowPlacer:
    """One task's placement of rows into (topic, partition) and their encoding and staging.

    ``topic``: the option topic (None: the column); ``topic_limits(name)``: a topic's limits,
    None for a topic that does not exist (a sink's, produce_sink.py); ``unknown_topic(name)``:
    the error for such a topic."""

    def __init__(
        self,
        topic: str | None,
        topic_limits: Callable[[str], TopicLimits | None],
        unknown_topic: Callable[[str], Exception],
    ) -> None:
        self.topic = topic
        self.topic_limits = topic_limits
        self.unknown_topic = unknown_topic
        self._next_keyless: dict[str, int] = {}  # round-robin position per topic
        self._rng = random.Random()

    def _limits(self, topic: str) -> TopicLimits:
        limits = self.topic_limits(topic)
        if limits is None:
            raise self.unknown_topic(topic)
        return limits

    def _topic_codes(self, batch: pa.RecordBatch) -> tuple[list[str], np.ndarray]:
        """The distinct topics of the batch and each row's index into them."""
        n = batch.num_rows
        if self.topic is not None:
            return [self.topic], np.zeros(n, np.int64)
        column = batch.column(TOPIC)
        if column.null_count:
            raise InvalidWriteError(
                "a row has a null topic: fill the column topic, or set the option topic for "
                "every row"
            )
        encoded = column.dictionary_encode()
        names = [str(t) for t in encoded.dictionary.to_pylist()]
        return names, encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)

    def _partitions(self, batch, names, codes) -> np.ndarray:
        """Each row's partition: explicit, by key (murmur2) or round-robin (module docstring)."""
        from broker_embedded.client.default_partitioner import partitions_for_keys

        n = batch.num_rows
        counts = np.array([self._limits(t).partitions for t in names], np.int64)
        names_of = batch.schema.names
        part = np.full(n, -1, np.int64)
        need = np.ones(n, bool)
        if PARTITION in names_of:
            column = batch.column(PARTITION)
            explicit = np.asarray(column.is_valid().to_numpy(zero_copy_only=False), bool)
            values = column.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
            bad = np.flatnonzero(explicit & ((values < 0) | (values >= counts[codes])))
            if len(bad):
                i = bad[0]
                topic = names[codes[i]]
                raise UnknownTopicOrPartitionError(
                    f"row with partition {values[i]} for topic {topic!r}: the topic has "
                    f"{counts[codes[i]]} partitions (0 to {counts[codes[i]] - 1})"
                )
            part[explicit] = values[explicit]
            need = ~explicit
        if KEY in names_of and need.any():
            keys = batch.column(KEY)
            keyed = need & np.asarray(keys.is_valid().to_numpy(zero_copy_only=False), bool)
            for c in range(len(names)):
                rows = keyed & (codes == c) if len(names) > 1 else keyed
                if rows.all():
                    part[:] = partitions_for_keys(keys, int(counts[c]))
                elif rows.any():
                    idx = np.flatnonzero(rows)
                    part[idx] = partitions_for_keys(keys.take(pa.array(idx)), int(counts[c]))
            need &= ~keyed
        for c, topic in enumerate(names):
            rows = np.flatnonzero(need & (codes == c)) if len(names) > 1 else np.flatnonzero(need)
            if len(rows):
                count = int(counts[c])
                start = self._next_keyless.get(topic)
                if start is None:
                    start = self._rng.randrange(count)
                part[rows] = (start + np.arange(len(rows))) % count
                self._next_keyless[topic] = (start + len(rows)) % count
        return part

    def groups(self, batch: pa.RecordBatch) -> Iterator[RowGroup]:
        """The rows of one Arrow batch placed and grouped by (topic, partition), input order
        kept within each group (Arrow slices of the columns: no Python object per row)."""
        n = batch.num_rows
        if n == 0:
            return
        names, codes = self._topic_codes(batch)
        part = self._partitions(batch, names, codes)
        group = codes * (1 << 32) + part
        order = np.argsort(group, kind="stable")  # input order within each partition
        sorted_group = group[order]
        bounds = [0, *(np.flatnonzero(np.diff(sorted_group)) + 1).tolist(), n]
        taken = pa.array(order)
        names_of = batch.schema.names
        values = batch.column(VALUE).take(taken)
        keys = batch.column(KEY).take(taken) if KEY in names_of else None
        headers = batch.column(HEADERS).take(taken) if HEADERS in names_of else None
        stamps = batch.column(TIMESTAMP).take(taken) if TIMESTAMP in names_of else None
        for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
            topic = names[int(codes[order[lo]])]
            m = hi - lo
            yield RowGroup(
                topic, int(part[order[lo]]), self._limits(topic),
                None if keys is None else keys.slice(lo, m), values.slice(lo, m),
                None if headers is None else headers.slice(lo, m),
                None if stamps is None else stamps.slice(lo, m),
            )  # fmt: skip

    def append(self, batch: pa.RecordBatch, appender: PartitionAppender) -> None:
        """Place and encode the rows of one Arrow batch, and append them through ``appender``
        (a task's: staged in a log dir, produced to a cluster)."""
        now = int(time.time() * 1000)
        for g in self.groups(batch):
            enc = g.encode(now, **appender.producer_fields(g.topic, g.partition))
            appender.append(g.topic, g.partition, enc, null_keys=g.null_keys)


@dataclass(frozen=True)
class RowGroup:
    """The rows of one Arrow batch that go to one topic partition, as Arrow arrays."""

    topic: str
    partition: int
    limits: TopicLimits
    keys: pa.Array | None
    values: pa.Array
    headers: pa.Array | None
    timestamps: pa.Array | None = None  # the ``timestamp`` column (null: the write's time)

    @property
    def rows(self) -> int:
        return len(self.values)

    @property
    def null_keys(self) -> int:
        return self.rows if self.keys is None else self.keys.null_count

    def encode(self, now_ms: int, **producer: int) -> EncodedBatches:
        """The rows as uncompressed record batches within the topic's limits, each record
        stamped with its ``timestamp`` column value or ``now_ms`` (``producer``: the producer
        fields of ``encode_batches``);
        :class:`InvalidRecordError` for keyless rows of a compacted topic,
        :class:`RecordTooLargeError` for a record above ``max.message.bytes``."""
        from broker_embedded.record.columnar_encoder import encode_batches

        if self.limits.compact and self.null_keys:
            raise InvalidRecordError(
                f"compacted topic {self.topic!r} does not accept records without a key "
                f"({self.null_keys} rows for partition {self.partition} have a null key)"
            )
        enc = encode_batches(
            self.keys, self.values, record_timestamps(self.timestamps, self.rows, now_ms),
            self.headers,
            max_batch_bytes=self.limits.max_batch_bytes, **producer,
        )  # fmt: skip
        largest = int(np.diff(enc.positions).max())
        if largest > self.limits.max_message_bytes:
            raise RecordTooLargeError(
                f"topic {self.topic!r} partition {self.partition}: a record makes a batch of "
                f"{largest} bytes, above the topic's max.message.bytes "
                f"{self.limits.max_message_bytes}"
            )
        return enc
