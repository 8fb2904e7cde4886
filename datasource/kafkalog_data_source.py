"""The PySpark data source ``kafkalog``: :class:`KafkaLogDataSource`, whose docstring is the
user manual.

Found by Spark without any ``register`` call through the top-level module ``pyspark_kafkalog``
(its ``DefaultSource``), or registered with ``spark_kafkalog.register(spark)``. This module is
imported when Spark looks data sources up, so it imports nothing heavy at module level: the
reader (and, on executors, the numba-compiled decoder) is imported when first needed.
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader
from pyspark.sql.types import StructType

from broker_embedded.record.kafka_schema import schema_ddl, simple_string
from datasource import option_table
from datasource.errors import InvalidOptionError
from datasource.kafka_source_options import KafkaSourceOptions
from datasource.worker_heap import call_started


class KafkaLogDataSource(DataSource):
    """Read and write Kafka topics in a Kafka log dir with Spark: ``format("kafkalog")``.

    A drop-in for Spark's built-in Kafka source (``format("kafka")``) that reads the files of a
    log dir (one entry of a broker's ``log.dirs``: kafkalog's embedded broker, or a copy of a
    real Kafka broker's) in place, with the option ``path``, or fetches from a cluster over the
    Kafka protocol, with ``kafka.bootstrap.servers`` as in Spark (``kafkalog serve``, Apache
    Kafka, any Kafka-compatible broker). Same schema, same option names.

    Usage::

        # after `pip install spark-kafkalog` the source is found by name; or, explicitly:
        #   import spark_kafkalog; spark_kafkalog.register(spark)
        df = (spark.read.format("kafkalog")
              .option("subscribe", "events")
              .option("startingOffsets", "earliest")
              .load("/data/kafka-logs"))
        df.selectExpr("CAST(key AS STRING)", "CAST(value AS STRING)", "offset").show()

    Schema (Spark's Kafka source schema)::

        key binary, value binary, topic string, partition int, offset bigint,
        timestamp timestamp, timestampType int
        + headers array<struct<key: string, value: binary>>   with includeHeaders=true

    ``timestamp`` is the record's timestamp (UTC); ``timestampType`` 0 for CreateTime, 1 for
    LogAppendTime (-1 for a record of the oldest message format, which has no timestamp). Tombstones
    have a null value. A user-specified schema is rejected: the schema is fixed.

    What a query sees: only committed data, as a Kafka consumer does. Each partition is read up to
    its high watermark, which the broker owning the log dir publishes in
    ``replication-offset-checkpoint`` (the end of the log when the log dir has no entry for it);
    with ``kafka.isolation.level=read_committed`` up to the last stable offset, without the records
    of aborted transactions. Transaction markers are never rows. Offsets are not contiguous
    (compaction, markers, aborted records): gaps are normal and never an error. Planning reads the
    log dir's published state once, at a DataFrame's first action, and Spark keeps that plan for
    the DataFrame's later actions: a DataFrame reads a consistent snapshot even while a broker
    appends ("latest" is the high watermark at that moment; load it again to see newer data).

    Options: the table at the end of this docstring, generated from the one option table
    (datasource/option_table.py), as is the docs' option reference. Names ignore case; values
    are strings; unknown options, malformed values and contradictions are rejected with a
    message naming the option and the value.

    Streaming (``spark.readStream.format("kafkalog")``, kafka_stream_reader.py has the details)::

        q = (spark.readStream.format("kafkalog")
             .option("subscribePattern", "events-.*")
             .option("maxOffsetsPerTrigger", "100000")
             .load("/data/kafka-logs")
             .writeStream.format("parquet").option("path", "/data/events")
             .option("checkpointLocation", "/data/checkpoints/events")
             .trigger(processingTime="10 seconds")   # or availableNow=True
             .start())

    Micro-batches of offset ranges, as Spark's Kafka source: the same options as a batch query
    except the ending ones and ``narrowByFilters``; offsets in Spark's JSON
    (``{"events-a":{"0":42}}``) in the query's progress and checkpoint. Each trigger reads up to
    the high watermark the broker has published by then (the last stable offset under
    read_committed), with the same executor reads and the same splitting of ranges into tasks.

    - Start: ``startingOffsets`` (default ``latest`` here: only new records) or the timestamp
      options, for a query without a checkpoint. A restarted query (same
      ``checkpointLocation``) resumes where its checkpoint says, whatever the starting options
      say; a batch Spark runs again after a failure reads the same offsets.
    - New partitions, and new topics matching ``subscribePattern``, are read from their
      earliest offset in a later batch.
    - ``failOnDataLoss`` also covers what happens between batches: records deleted before the
      query read them (retention, DeleteRecords), a deleted topic, a high watermark moving back.
      Offset gaps (compaction, transaction markers, aborted records) never count as loss.
    - ``maxOffsetsPerTrigger`` (default: not set): about this many offsets per batch, shared
      over the partitions in proportion to their backlog by Spark's Kafka source's rule (the
      same batches as ``format("kafka")``): each share rounded down, or up to one offset so that
      a busy partition does not starve the others.
    - ``maxBytesPerTrigger`` (default: not set; kafkalog's own): at most about this many bytes
      of the log per batch (``64m``), whole record batches shared out by backlog; a record
      batch larger than the limit is still read (alone, on its partition's turn).
    - ``minOffsetsPerTrigger`` (default: not set) with ``maxTriggerDelay`` (default ``15m``):
      skip a trigger while fewer new offsets are there, unless the delay has passed since the
      last batch. The first trigger after a (re)start is never delayed.
    - ``trigger(availableNow=True)`` reads what is there when the query starts, in batches
      bounded by the limits above (``minOffsetsPerTrigger`` does not apply), then stops.
    - The progress of each batch (``query.lastProgress``) shows the partitions' latest offsets
      beside the batch's end offsets: how far behind the query is.
    - ``commitOffsetsToGroup=<group id>`` (default: not set; kafkalog's own): commit the
      query's progress, the end offsets of its completed batches, as that consumer group's
      committed offsets in the log dir's ``__consumer_offsets`` (Kafka's record format; the
      topic is created with Kafka's settings when missing), so ``kafkalog groups describe``
      and Kafka's lag tools show the query's lag. The log dir must not be owned by a running
      broker (``kafkalog serve``): the query then fails at its start naming the option. The
      checkpoint, not the group, is where a restarted query resumes.

    Writing (``df.write.format("kafkalog")``, kafka_writer.py has the details)::

        (df.selectExpr("CAST(user AS STRING) AS key", "to_json(struct(*)) AS value")
           .write.format("kafkalog").mode("append")
           .option("topic", "enriched")          # or a `topic` column
           .save("/data/kafka-logs"))

    Columns as Spark's Kafka sink: ``value`` (required, string or binary), optional ``key``,
    ``topic``, ``partition``, ``headers`` and ``timestamp`` (timestamp or double seconds: the
    record's CreateTime; otherwise the write's time). The ``topic`` option is trimmed, as Spark
    trims it. A keyed record without a partition goes where
    Kafka's default partitioner (murmur2 of the key) puts it. The topic must exist (create it
    with ``kafkalog topics create`` or the embedded broker). A write job is atomic: nothing is
    visible before its commit publishes the new high watermarks, nothing of a failed job ever.
    Only ``mode("append")``; options ``path`` and ``topic``, and Kafka producer settings
    (``kafka.*``) as Spark's sink takes them: ``kafka.acks`` checked (any of Kafka's values: the
    commit fsyncs before it publishes), the serializers rejected, the rest noted as having no
    effect (kafka_write_options.py). A log dir owned by a running broker process is refused,
    naming the owner.

    With ``kafka.bootstrap.servers`` (and no path) the rows are produced to a cluster over the
    Kafka protocol instead (wire_writer.py), batch and streaming, with the same columns and an
    idempotent producer (acks=all); the guarantee is then AT LEAST ONCE, as Spark's Kafka sink:
    a retried task or a replayed micro-batch is written again. With ``transactionalIdPrefix``
    each task writes in a Kafka transaction the driver commits: exactly once for read_committed
    readers.

    Streaming writes (``df.writeStream.format("kafkalog")``, kafka_stream_writer.py)::

        (stream.selectExpr("key", "value")
           .writeStream.format("kafkalog").option("topic", "enriched")
           .option("checkpointLocation", "/data/checkpoints/enrich")
           .start("/data/kafka-logs"))

    Same columns, options and checks as a write job; output modes append and complete (each
    batch's whole result appended, as Spark's Kafka sink does). Spark refuses update for Python
    sinks: ``foreachBatch`` with a ``df.write.format("kafkalog")`` of each micro-batch writes
    what Spark's Kafka sink writes in update mode. Spark requires a checkpoint location.
    Each micro-batch is committed atomically and exactly once: the commit records
    the query's id and the batch id in ``.kafkalog-commits/`` of the log dir with the records,
    and a batch Spark runs again after a failure (same id) appends nothing. With a checkpoint
    location and a replayable source (kafkalog itself), a query is exactly-once end to end.

    Example with most read options::

        spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
        df = (spark.read.format("kafkalog")
              .option("assign", '{"orders":[0,1,2]}')
              .option("startingOffsets", '{"orders":{"0":-2,"1":100,"2":-2}}')
              .option("endingTimestamp", "1700000000000")
              .option("kafka.isolation.level", "read_committed")
              .option("includeHeaders", "true")
              .option("failOnDataLoss", "false")
              .option("maxBytesPerPartition", "64m")
              .option("minPartitions", "8")
              .option("narrowByFilters", "true")
              .load("/data/kafka-logs")
              .where("timestamp >= timestamp'2023-11-14 00:00:00'"))
    """

    @classmethod
    def name(cls) -> str:
        return "kafkalog"

    def schema(self) -> str:
        call_started()
        # runs for batch and streaming reads alike: the kind-specific checks come later
        options = KafkaSourceOptions.parse(self.options, streaming=None)
        return schema_ddl(options.include_headers)

    def reader(self, schema: StructType) -> DataSourceReader:
        call_started()
        options = KafkaSourceOptions.parse(self.options, streaming=False)
        check_schema(schema, options.include_headers)
        from datasource.kafka_batch_reader import KafkaBatchReader

        return KafkaBatchReader(options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802
        call_started()
        options = KafkaSourceOptions.parse(self.options, streaming=True)
        check_schema(schema, options.include_headers)
        from datasource.kafka_stream_reader import KafkaStreamReader

        return KafkaStreamReader(options)

    def writer(self, schema, overwrite):
        call_started()
        from datasource.kafka_writer import KafkaLogWriter

        return KafkaLogWriter.create(self.options, schema, overwrite)

    def streamWriter(self, schema, overwrite):  # noqa: N802
        call_started()
        from datasource.kafka_stream_writer import KafkaLogStreamWriter

        return KafkaLogStreamWriter.create(self.options, schema, overwrite)


KafkaLogDataSource.__doc__ = (KafkaLogDataSource.__doc__ or "") + option_table.plain_text()


def check_schema(schema: StructType, include_headers: bool) -> None:
    """Reject a user-specified schema other than the fixed one."""
    expected = simple_string(include_headers)
    if schema.simpleString() != expected:
        raise InvalidOptionError(
            f"the kafkalog source has a fixed schema ({schema_ddl(include_headers)}); a "
            f"user-specified schema is not supported, got {schema.simpleString()}"
        )
