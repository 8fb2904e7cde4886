"""The rows a Kafka sink writes (Spark's ``KafkaRowWriter`` and its query check), shared by the
writers to a log dir (kafka_writer.py, kafka_stream_writer.py) and over the protocol
(wire_writer.py): :func:`check_columns` checks a DataFrame's columns as Spark's Kafka sink does
(names are exact; other columns are ignored), and :class:`RowPlacer` places one task's rows into
(topic, partition) and hands each partition's run of rows, encoded as record batches, to a write
port's :class:`PartitionAppender` (broker_embedded/storage/produce_sink.py).

Placement of a row without a partition: a keyed record goes where Kafka's default partitioner puts
it (``toPositive(murmur2(key)) % partitions``, broker_embedded/client/default_partitioner.py), so
Kafka clients and kafkalog agree on where a key lives; a task deals its keyless records
round-robin over the topic's partitions, starting at a random partition (kafka_writer.py's
docstring says why). Rows keep their input order within a partition.

Thread safety: a :class:`RowPlacer` belongs to one task; it holds no Python object per row (the
placement is numpy over the batch's columns).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
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
    RecordTooLargeError,
    UnknownTopicOrPartitionError,
)
from broker_embedded.record.kafka_schema import HEADERS_SQL_TYPE
from broker_embedded.storage.produce_sink import PartitionAppender, TopicLimits
from datasource.errors import KafkaSourceError
from datasource.write_timestamps import TIMESTAMP, record_timestamps

if TYPE_CHECKING:
    from broker_embedded.record.columnar_encoder import EncodedBatches

VALUE, KEY, TOPIC, PARTITION, HEADERS = "value", "key", "topic", "partition", "headers"


class InvalidWriteError(KafkaSourceError, ValueError):
    """A write the ``kafkalog`` sink refuses: a bad column, an unsupported mode, a row it cannot
    place."""


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
                topic,
                int(part[order[lo]]),
                self._limits(topic),
                None if keys is None else keys.slice(lo, m),
                values.slice(lo, m),
                None if headers is None else headers.slice(lo, m),
                None if stamps is None else stamps.slice(lo, m),
            )

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
            self.keys,
            self.values,
            record_timestamps(self.timestamps, self.rows, now_ms),
            self.headers,
            max_batch_bytes=self.limits.max_batch_bytes,
            **producer,
        )
        largest = int(np.diff(enc.positions).max())
        if largest > self.limits.max_message_bytes:
            raise RecordTooLargeError(
                f"topic {self.topic!r} partition {self.partition}: a record makes a batch of "
                f"{largest} bytes, above the topic's max.message.bytes "
                f"{self.limits.max_message_bytes}"
            )
        return enc
