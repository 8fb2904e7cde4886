"""A streaming query in a process of its own, for tests/datasource/test_stream_writer.py: the
test SIGKILLs it mid-stream and starts it again on the same checkpoint.

    python -m tests.datasource._stream_child SINK_DIR CHECKPOINT_DIR --source kafkalog \
        --source-dir SRC_DIR [--max-offsets N]
    python -m tests.datasource._stream_child SINK_DIR CHECKPOINT_DIR --source rate \
        [--rows-per-batch N] [--until-rows N]
    python -m tests.datasource._stream_child - CHECKPOINT_DIR --source kafkalog \
        --source-dir SRC_DIR --bootstrap HOST:PORT [--txn-prefix P] [--arrow-rows N]

Writes ``key`` and ``value`` of its source to topic ``sink`` of ``SINK_DIR`` with
``format("kafkalog")``, or with ``--bootstrap`` to topic ``sink`` of that cluster over the
protocol (``--txn-prefix``: the sink's ``transactionalIdPrefix``; ``--arrow-rows``: Spark's
``spark.sql.execution.arrow.maxRecordsPerBatch``, rows per Arrow batch a task gets):

- ``kafkalog``: topic ``src`` of ``SRC_DIR`` from the earliest offset, at most ``--max-offsets``
  offsets per micro-batch, ``Trigger.AvailableNow`` (the query ends when it has read all of
  ``src`` that was there when it started);
- ``rate``: Spark's ``rate-micro-batch`` source (``--rows-per-batch`` rows per batch, values
  0, 1, 2, ... fixed by the batch's offsets, so a replayed batch has the same rows), key and
  value the decimal value, a 100 ms processing-time trigger, until the sink holds
  ``--until-rows`` records.

Prints ``query <id>`` once the query runs and ``done`` when it ended by itself (exit code 0).
With ``--held`` it starts its Spark session and defines the query, then waits for a line ``go``
on stdin before starting it (exit code 4 at the end of stdin without one): the test starts it
while the query it restarts still runs, so that the JVM's start-up is not on the test's path.
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("sink")
    parser.add_argument("checkpoint")
    parser.add_argument("--source", choices=["kafkalog", "rate"], required=True)
    parser.add_argument("--source-dir")
    parser.add_argument("--max-offsets", type=int, default=1000)
    parser.add_argument("--rows-per-batch", type=int, default=500)
    parser.add_argument("--until-rows", type=int, default=10_000)
    parser.add_argument("--bootstrap")
    parser.add_argument("--txn-prefix")
    parser.add_argument("--arrow-rows", type=int, default=10_000)
    parser.add_argument("--held", action="store_true")
    args = parser.parse_args(argv)

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("kafkalog-stream-child")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", str(args.arrow_rows))
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    if args.source == "kafkalog":
        df = (
            spark.readStream.format("kafkalog")
            .option("subscribe", "src")
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", str(args.max_offsets))
            .load(args.source_dir)
            .select("key", "value")
        )
        trigger = {"availableNow": True}
    else:
        df = (
            spark.readStream.format("rate-micro-batch")
            .option("rowsPerBatch", str(args.rows_per_batch))
            .option("numPartitions", "2")
            .load()
            .selectExpr("CAST(value AS STRING) AS key", "CAST(value AS STRING) AS value")
        )
        trigger = {"processingTime": "100 milliseconds"}
    writer = (
        df.writeStream.format("kafkalog")
        .option("topic", "sink")
        .option("checkpointLocation", args.checkpoint)
        .trigger(**trigger)
    )
    if args.held and sys.stdin.readline().strip() != "go":
        return 4
    if args.bootstrap:
        writer = writer.option("kafka.bootstrap.servers", args.bootstrap)
        if args.txn_prefix:
            writer = writer.option("transactionalIdPrefix", args.txn_prefix)
        query = writer.start()
    else:
        query = writer.start(args.sink)
    print(f"query {query.id}", flush=True)
    if args.source == "kafkalog":
        query.awaitTermination()
    else:
        from broker_embedded.storage.log_dir import LogDir

        while sum(LogDir(args.sink).high_watermarks.values()) < args.until_rows:
            if query.exception() is not None:
                raise query.exception()
            time.sleep(0.1)
        query.stop()
    print("done", flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
