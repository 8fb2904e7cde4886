"""Batch writes over the protocol in a Spark session of its own whose tasks Spark retries
(master ``local[2,3]``: three attempts per task), for test_wire_sink_exactly_once.py.

    python -m tests.datasource._retry_child ROWS FAIL_AT BOOTSTRAP[=PREFIX] [BOOTSTRAP[=PREFIX] ...]

One write job per BOOTSTRAP, one after the other in the same session (one JVM start serves
every case): ``spark.range(ROWS)`` in two partitions (value: the decimal id) to topic ``sink``
of BOOTSTRAP, 50 rows an Arrow batch, with ``transactionalIdPrefix`` PREFIX when given; the
first attempt of partition 0's task of each job fails at id FAIL_AT (a Python UDF raises once
the topic holds more records than task 1 writes, so that the writer of that attempt has produced
some of the rows before FAIL_AT whatever the load; at most :data:`WAIT_S`). The retry
succeeds. (A third attempt is allowed: an attempt whose writer starts after the
next attempt's fences that one, which Spark then retries.) Prints ``done BOOTSTRAP`` when a
write job succeeded, and exits 0 when all did.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

WAIT_S = 120.0


def _failing_once(bootstrap: str, fail_at: int, records: int):
    """The UDF's function: the id as text, except that the first attempt of partition 0's task
    raises at ``fail_at`` once the topic ``sink`` of ``bootstrap`` holds ``records`` (task 1's
    rows and some of this attempt's; at most :data:`WAIT_S`)."""

    def value(i: int) -> str:
        from pyspark import TaskContext

        task = TaskContext.get()
        if i == fail_at and task.partitionId() == 0 and task.attemptNumber() == 0:
            _wait_for_records(bootstrap, records)
            raise RuntimeError(f"injected failure of the first attempt at id {i}")
        return str(i)

    return value


def _wait_for_records(bootstrap: str, records: int) -> None:
    from broker_embedded.client.kafka_client import LATEST, KafkaClient

    deadline = time.monotonic() + WAIT_S
    with KafkaClient(bootstrap) as client:
        partitions = [p.partition for p in client.topic("sink").partitions]
        while time.monotonic() < deadline:
            if sum(client.list_offset("sink", p, LATEST) for p in partitions) >= records:
                return
            time.sleep(0.1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("rows", type=int)
    parser.add_argument("fail_at", type=int)
    parser.add_argument("targets", nargs="+", metavar="BOOTSTRAP[=PREFIX]")
    args = parser.parse_args(argv)

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession
    from pyspark.sql.functions import udf

    spark = (
        SparkSession.builder.master("local[2,3]")
        .appName("kafkalog-retry-child")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "50")
        .config("spark.sql.execution.pythonUDF.arrow.enabled", "false")
        .config("spark.python.worker.reuse", "true")
        # the UDF worker's results reach the writer as they are made, not when its 64 KiB
        # output buffer fills: with the default the first attempt's 9,000 results (about 60 KB)
        # stayed in that buffer, the writer produced none of them, and the wait below ran out
        .config("spark.buffer.size", "1024")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    fail_at = args.fail_at

    for target in args.targets:
        bootstrap, _, prefix = target.partition("=")
        value = udf(_failing_once(bootstrap, fail_at, args.rows // 2 + 1000), "string")
        df = spark.range(0, args.rows, numPartitions=2).select(value("id").alias("value"))
        writer = df.write.format("kafkalog").mode("append").option("topic", "sink")
        writer = writer.option("kafka.bootstrap.servers", bootstrap)
        if prefix:
            writer = writer.option("transactionalIdPrefix", prefix)
        writer.save()
        print("done", bootstrap, flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
