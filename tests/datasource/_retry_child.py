"""Batch writes over the protocol in a Spark session of its own whose tasks Spark retries
(master ``local[2,3]``: three attempts per task), for test_wire_sink_exactly_once.py.

    python -m tests.datasource._retry_child ROWS FAIL_AT BOOTSTRAP[=PREFIX] [BOOTSTRAP[=PREFIX] ...]

One write job per BOOTSTRAP, one after the other in the same session (one JVM start serves
every case): ``spark.range(ROWS)`` in two partitions (value: the decimal id) to topic ``sink``
of BOOTSTRAP, 50 rows an Arrow batch, with ``transactionalIdPrefix`` PREFIX when given; the
first attempt of partition 0's task of each job fails at id FAIL_AT (a Python UDF raises, 3 s
after reaching it: by then the writer of that attempt has produced the Arrow batches before
it). The retry succeeds. (A third attempt is allowed: an attempt whose writer starts after the
next attempt's fences that one, which Spark then retries.) Prints ``done BOOTSTRAP`` when a
write job succeeded, and exits 0 when all did.
"""

from __future__ import annotations

import argparse
import os
import sys
import time


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
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "50")
        .config("spark.sql.execution.pythonUDF.arrow.enabled", "false")
        .config("spark.python.worker.reuse", "true")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    fail_at = args.fail_at

    @udf("string")
    def value(i: int) -> str:
        from pyspark import TaskContext

        task = TaskContext.get()
        if i == fail_at and task.partitionId() == 0 and task.attemptNumber() == 0:
            time.sleep(3)
            raise RuntimeError(f"injected failure of the first attempt at id {i}")
        return str(i)

    df = spark.range(0, args.rows, numPartitions=2).select(value("id").alias("value"))
    for target in args.targets:
        bootstrap, _, prefix = target.partition("=")
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
