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
from datasource.errors import InvalidOptionError
from datasource.kafka_source_options import KafkaSourceOptions


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

    Options (names ignore case; values are strings; unknown options, malformed values and
    contradictions are rejected with a message naming the option and the value):

    ``path`` | ``kafka.bootstrap.servers`` (exactly one)
        ``path``: the log dir, e.g. ``load("/data/kafka-logs")`` or ``.option("path", ...)``. It
        must be readable at the same path by the driver and every executor (a shared file
        system on a cluster); an absolute path is safest. ``kafka.bootstrap.servers``:
        ``"host1:9092,host2:9092"``, a cluster read over the Kafka protocol (no path): the
        driver plans with Metadata and ListOffsets, each executor fetches its range from the
        partition's leader (broker_embedded/client/wire_fetch_source.py) with the next fetch in
        flight while Spark takes the previous rows; a leader that moves or dies is followed from
        the same offset, within ``kafka.default.api.timeout.ms`` (default 60000), then the read
        fails naming the cluster, broker, partition and offset. Over the wire the bytes of the
        log are unknown: ``maxBytesPerPartition`` and ``maxBytesPerTrigger`` then cut nothing
        (the offset limits still apply). Plaintext only.
    ``assign`` | ``subscribe`` | ``subscribePattern`` (exactly one)
        Which partitions to read. ``assign``: JSON ``{"topicA":[0,1],"topicB":[2]}``;
        ``subscribe``: comma-separated topics ``"topicA,topicB"``; ``subscribePattern``: a regex
        found anywhere in the topic name, as Spark 4.x finds it (anchor it to match whole
        names: ``"^events-.*$"``; internal topics, names starting with ``__``, are left out;
        name them in subscribe or assign). A subscribed or assigned topic that
        does not exist is an error naming it; an assigned partition its topic does not have is
        left out with a warning (as Spark's Kafka source leaves it out); a pattern may match
        nothing (an empty result).
    ``startingOffsets`` (default ``earliest``)
        ``earliest`` (the log start offset), or per-partition JSON
        ``{"topicA":{"0":23,"1":-2}}`` with -2 for earliest; every partition read must be named.
        ``latest`` and -1 are rejected: a batch query starting at the latest offset reads
        nothing. An offset below the log start offset is data loss (see ``failOnDataLoss``).
    ``startingTimestamp`` / ``startingOffsetsByTimestamp`` (default: not set)
        Start at the first offset whose record timestamp is at or after a timestamp (ms since the
        epoch), found through the time index as Kafka's ListOffsets does:
        ``startingTimestamp`` ``"1700000000000"`` for every partition, or per partition
        ``{"topicA":{"0":1700000000000}}``. Precedence: startingTimestamp >
        startingOffsetsByTimestamp > startingOffsets (Spark's rule; the others are ignored).
    ``startingOffsets=group:<group id>`` (kafkalog's own)
        Start at a consumer group's committed offsets, read from the log dir's
        ``__consumer_offsets`` (only the group's partition, found as Kafka finds it; a log dir
        copied from Kafka works), in a batch or a streaming query. A committed offset below the
        log start offset or past the latest offset is data loss (see ``failOnDataLoss``). An
        error when the group has no committed offset, when the log dir has no
        ``__consumer_offsets``, and with ``startingTimestamp`` or
        ``startingOffsetsByTimestamp`` (which start elsewhere). Spark's ``kafka.group.id`` and
        ``groupIdPrefix`` do not set offsets; this does.
    ``startingOffsetsByGroupFallback`` (default ``latest``; only with ``group:``)
        Where a partition the group has no commit for starts: ``earliest``, ``latest`` (as a
        Kafka consumer's ``auto.offset.reset``) or ``none`` (fail, naming those partitions).
    ``startingOffsetsByTimestampStrategy`` (default ``error``)
        When no record is at or after the starting timestamp: ``error`` fails the query,
        ``latest`` starts at the latest offset (reads nothing from that partition).
    ``endingOffsets`` (default ``latest``)
        ``latest`` (the high watermark, or the last stable offset under read_committed), or
        per-partition JSON ``{"topicA":{"0":50,"1":-1}}`` with -1 for latest; exclusive.
        ``earliest`` and -2 are rejected. An ending offset past the latest one is data loss (see
        ``failOnDataLoss``); one before the starting offset is an error.
    ``endingTimestamp`` / ``endingOffsetsByTimestamp`` (default: not set)
        End (exclusive) at the first offset whose record timestamp is at or after a timestamp,
        as for the starting ones; the latest offset when there is none. Precedence as above.
    ``failOnDataLoss`` (default ``true``)
        Offsets a query asks for that are no longer in the log (below the log start offset after
        retention or DeleteRecords, also when that happens between planning and reading) or not
        available (an ending offset past the high watermark): ``true`` fails the query with an
        error naming the partition and the offsets; ``false`` logs a warning and reads what is
        there (from the log start offset; up to the latest offset).
    ``includeHeaders`` (default ``false``)
        Add the column ``headers``: null for a record without headers (as Spark reads it).
    ``minPartitions`` (default: not set)
        About at least this many Spark partitions: large offset ranges are cut into equal pieces,
        in proportion to their size (Spark's rule, a hint: its rounding may give a few more or
        fewer). Without it (and without the two options below) one range reads one topic
        partition (small ranges are then packed into tasks, ``packBytesPerPartition``).
    ``maxRecordsPerPartition`` (default: not set)
        At most this many offsets per Spark partition: larger ranges are cut into equal pieces.
    ``maxBytesPerPartition`` (default: not set; kafkalog's own)
        About this many bytes of the log per Spark partition (``1048576``, ``512k``, ``64m``,
        ``1g``): a range is cut at batch boundaries found through the offset index, so that a
        skewed partition spreads over several tasks. Applied before the two options above.
    ``packBytesPerPartition`` (default ``128m``; Spark's ``spark.sql.files.maxPartitionBytes``)
        Small ranges are packed into one Spark task, as Spark's file sources pack small files
        (Spark's Python data source pays tens of milliseconds per task whatever it reads). Only
        ranges smaller than ``packOpenCostInBytes`` are small: a larger one stays a task of its own
        (one task per topic partition, as Spark's Kafka source plans), so packing never takes
        parallelism from partitions of real size. The small ranges, largest first, fill a task while
        its bytes stay within this size, each range counting its bytes of the log plus
        ``packOpenCostInBytes``; a range is never cut by this (``maxBytesPerPartition`` cuts). Over
        ``kafka.bootstrap.servers`` a range's bytes are unknown and counted as 1 KiB per offset.
        With ``minPartitions`` the task size is at most the total / ``minPartitions`` and a packing
        into fewer tasks is not made; with ``maxRecordsPerPartition`` a task holds at most that many
        offsets. ``0``: one task per range. Whole partitions are packed under ``view=latest`` too.
    ``packOpenCostInBytes`` (default ``4m``; Spark's ``spark.sql.files.openCostInBytes``)
        What opening one range costs, counted in bytes, and the size below which a range is
        packed: 10,000 ranges of a few records make about 313 tasks with the defaults. ``0``:
        no range is small, one task per range.
    ``kafka.isolation.level`` (default ``read_uncommitted``)
        ``read_committed`` reads up to the last stable offset and skips aborted transactions.
    ``kafka.max.partition.fetch.bytes`` (default ``1048576``)
        Bytes one fetch of a partition returns (a larger batch still comes whole): an executor
        decodes one fetch at a time, so its memory is bounded by this, whatever the partition's
        size. A task reading a log dir fetches at least 8 MiB at a time (one Arrow batch's
        worth), decoded in place from the segment's mapping without a copy.
    ``kafka.fetch.max.bytes`` (default ``52428800``)
        Caps the bytes of one fetch too (the smaller of the two applies).

    ``narrowByFilters`` (default ``false``; kafkalog's own)
        With ``spark.sql.python.filterPushdown.enabled=true``, let the query's filters on
        ``topic``, ``partition``, ``offset`` and lower bounds on ``timestamp`` (found through the
        time index) narrow what is read: ``df.where("partition = 1 AND offset >= 1000")`` then
        reads only those offsets. Spark still evaluates every filter. Caution (a Spark 4.3
        limitation): Spark plans the read of a Python data source once per loaded DataFrame and
        shares that plan between all its scans, so a plan narrowed for one filter is reused for
        another scan of the same DataFrame (a self-join or union with other filters, a later
        query on the same DataFrame or temporary view) and rows go missing. Turn it on only for
        DataFrames that are loaded for one query and scanned once.

    ``view`` (default ``records``; kafkalog's own, batch only)
        ``latest``: a table of the latest record of every key, per topic partition (a compacted
        topic read as a table; latest_view.py): the record with the largest offset of each key
        in the planned range, with its value, offset, timestamp and headers; no row for a key
        whose latest record is a tombstone, nor for records without a key (counted in one
        warning per task). The same rows as ``groupBy("partition", "key")`` keeping the row of
        ``max("offset")`` without tombstones, computed by each task with the cleaner's offset map
        (two reads of its range, memory bounded by ``view.mapSize``), without a shuffle. A topic
        partition is never cut (``minPartitions``, ``maxRecordsPerPartition`` and
        ``maxBytesPerPartition`` are ignored with a warning; whole partitions are packed into
        tasks by ``packBytesPerPartition``) and no narrowing by pushed filters.
        ``endingOffsets``/``endingTimestamp`` give the table as of that point. A key found in
        several partitions gives the latest of each (Kafka's default partitioner keeps a key in
        one partition). Refused by streaming queries.
    ``view.keepTombstones`` (default ``false``)
        With ``view=latest``: a key whose latest record is a tombstone gives a row with a null
        value (for CDC merges) instead of none.
    ``view.mapSize`` (default ``64m``; at least ``1k``)
        With ``view=latest``: the bytes of each task's offset map, 32 per key (the cleaner's
        24-byte slot and an 8-byte fingerprint), filled to 90%: 64 MiB hold 1.88 M keys. More
        keys in a partition: rounds of keys split by hash, two more reads of the range each.

    ``kafka.client.id``, ``kafka.request.timeout.ms``, ``kafka.socket.connection.setup.timeout.ms``,
    ``kafka.retry.backoff.ms``, ``kafka.default.api.timeout.ms``
        The wire client's settings (Kafka consumer's meanings), for ``kafka.bootstrap.servers``.

    The streaming limits (``maxOffsetsPerTrigger``, ``minOffsetsPerTrigger``,
    ``maxTriggerDelay``, ``maxBytesPerTrigger``) are ignored in a batch query with Spark's
    warning ("... option ignored in batch queries"). Other ``kafka.*``
    consumer settings follow Spark's Kafka source: ``kafka.auto.offset.reset``,
    ``kafka.key.deserializer``, ``kafka.value.deserializer``, ``kafka.enable.auto.commit`` and
    ``kafka.interceptor.classes`` are rejected with Spark's messages, ``kafka.group.id`` logs
    Spark's warning, ``kafka.security.protocol``, ``kafka.ssl.*`` and ``kafka.sasl.*`` go to the
    wire client (TLS, SASL PLAIN and SCRAM; README "Security"), and the rest
    (and Spark's ``kafkaConsumer.pollTimeoutMs``, ``fetchOffset.numRetries``,
    ``fetchOffset.retryIntervalMs``, ``groupIdPrefix``) are accepted with one warning each that
    they have no effect.

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
        # runs for batch and streaming reads alike: the kind-specific checks come later
        options = KafkaSourceOptions.parse(self.options, streaming=None)
        return schema_ddl(options.include_headers)

    def reader(self, schema: StructType) -> DataSourceReader:
        options = KafkaSourceOptions.parse(self.options, streaming=False)
        check_schema(schema, options.include_headers)
        from datasource.kafka_batch_reader import KafkaBatchReader

        return KafkaBatchReader(options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802
        options = KafkaSourceOptions.parse(self.options, streaming=True)
        check_schema(schema, options.include_headers)
        from datasource.kafka_stream_reader import KafkaStreamReader

        return KafkaStreamReader(options)

    def writer(self, schema, overwrite):
        from datasource.kafka_writer import KafkaLogWriter

        return KafkaLogWriter.create(self.options, schema, overwrite)

    def streamWriter(self, schema, overwrite):  # noqa: N802
        from datasource.kafka_stream_writer import KafkaLogStreamWriter

        return KafkaLogStreamWriter.create(self.options, schema, overwrite)


def check_schema(schema: StructType, include_headers: bool) -> None:
    """Reject a user-specified schema other than the fixed one."""
    expected = simple_string(include_headers)
    if schema.simpleString() != expected:
        raise InvalidOptionError(
            f"the kafkalog source has a fixed schema ({schema_ddl(include_headers)}); a "
            f"user-specified schema is not supported, got {schema.simpleString()}"
        )
