"""The soak's streaming reader (benchmarks/soak.py ``SparkReader``) stopped in the middle of a
batch, in a process of its own so that the driver JVM it starts is new and its stderr is the
soak's capture (tests/test_soak.py).

    python -m tests._soak_child WORK_DIR

Writes 30 records to each partition of the soak's topics (``soak-del`` 0 and 1, ``soak-cmp``
0) in a log dir under ``WORK_DIR`` and runs three queries on one SparkSession, each with a
first batch that holds all 90 records and whose check first runs small Spark jobs for a while
(so that a stop lands in a Py4J call of the foreachBatch function):

- ``unguarded``: ``query.stop()`` called directly mid-batch, as the soak did before it stopped
  between batches;
- ``stop``: ``SparkReader.stop()`` mid-batch (the batch takes 3 s: the stop waits for it);
- ``interrupted``: ``SparkReader.stop()`` mid-batch with a stop wait of 0.5 s (the batch would
  take 10 minutes: the stop interrupts it).

Prints one JSON line: per query its violations, batches checked and records checked.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

from benchmarks.soak import PARTITIONS, Invariants, SparkReader, spark_session
from broker_embedded.broker import Broker
from broker_embedded.common.producer_record import ProducerRecord
from broker_embedded.storage.log_dir import LogDir
from broker_embedded.storage.topic_partition import TopicPartition

RECORDS = 30


class SlowReader(SparkReader):
    """Runs Spark jobs for ``slow_s`` seconds at the start of each batch's check."""

    def __init__(self, *args, slow_s: float, **kwargs) -> None:
        self.slow_s = slow_s
        self.in_batch = threading.Event()
        super().__init__(*args, **kwargs)

    def check_batch(self, df, batch_id: int) -> None:
        self.in_batch.set()
        until = time.monotonic() + self.slow_s
        while time.monotonic() < until:
            df.sparkSession.range(10).count()
        super().check_batch(df, batch_id)


def build_log_dir(path: Path) -> None:
    with Broker(path, create=True) as broker:
        for topic in sorted({tp.topic for tp in PARTITIONS}):
            partitions = sum(tp.topic == topic for tp in PARTITIONS)
            broker.create_topic(topic, partitions, config={"retention.ms": -1})
        for tp in PARTITIONS:
            records = [ProducerRecord(b"v%d" % i, b"k%d" % i) for i in range(RECORDS)]
            broker.produce(tp.topic, tp.partition, records)


def high_watermark_of(log_dir: Path):
    def high_watermark(tp: TopicPartition) -> int:
        reader = LogDir(log_dir).open_partition(tp)
        try:
            return reader.high_watermark
        finally:
            reader.close()

    return high_watermark


def run(spark, log_dir: Path, work: Path, how: str) -> dict:
    inv = Invariants()
    slow_s = 3.0 if how == "stop" else 600.0
    reader = SlowReader(spark, log_dir, work, inv, high_watermark_of(log_dir), slow_s=slow_s)
    if how == "interrupted":
        reader.STOP_WAIT_S = 0.5
    if not reader.in_batch.wait(120):
        raise SystemExit(f"{how}: no batch within 2 minutes")
    time.sleep(0.5)
    if how == "unguarded":
        reader.query.stop()
        time.sleep(1.0)
    reader.stop()
    return {
        "violations": inv.violations,
        "batches": reader.batches,
        "records": inv.records.get("spark stream", 0),
    }


def main(argv: list[str]) -> int:
    work = Path(argv[0])
    log_dir = work / "logs"
    build_log_dir(log_dir)
    spark = spark_session("kafkalog-soak-child")
    try:
        results = {
            how: run(spark, log_dir, work / how, how)
            for how in ("unguarded", "stop", "interrupted")
        }
    finally:
        spark.stop()
    print(json.dumps(results), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
