"""The protocol sink with ``transactionalIdPrefix``: exactly once with Kafka transactions
(datasource/wire_writer.py), against a real in-process BrokerServer on 127.0.0.1 (port 0), a
real SparkSession and, for task retries, a Spark session of its own in a child process
(``local[2,3]``). Read back by confluent-kafka (read_committed and read_uncommitted) and
kafka-python's parser of the log files (the COMMIT / ABORT markers):

- a batch write: every row once, each task's transaction committed (a COMMIT marker of the
  transactional id ``<prefix>-<partition id>``), nothing visible to read_committed before;
- a batch write whose task fails after producing part of its rows: its transaction aborted,
  read_committed sees nothing of the job;
- a task that fails and Spark retries: the retry fences the first attempt and aborts its
  transaction; read_committed sees every row exactly once, read_uncommitted also the aborted
  attempt's rows;
- a micro-batch Spark runs again after the driver died past the commit (its commit-log entry
  gone): the tasks find the batch committed in their groups and produce nothing, so even
  read_uncommitted sees every row once;
- a micro-batch whose driver commit stopped half way (one task's transaction committed, the
  other aborted by its timeout): the re-run writes only the missing task's rows;
- the options refused, naming them.
(The SIGKILL test with the option is in test_wire_sink_kill.py.)
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from pyspark.errors import PySparkException

from tests.broker_embedded.server._consume import consume
from tests.broker_embedded.server._serve import Served, log_batches, served
from tests.datasource.conftest import sql_conf
from tests.datasource.test_stream_writer import rate_stream
from tests.datasource.test_wire_writer import run_stream, write

REPO = Path(__file__).resolve().parents[2]
TOPIC, PARTITIONS = "sink", 3
PREFIX = "eos-test"
COMMIT_KEY = b"\x00\x00\x00\x01"


@contextmanager
def sink_cluster(log_dir: Path) -> Iterator[Served]:
    with served(log_dir) as running:
        running.broker.create_topic(TOPIC, PARTITIONS)
        yield running


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Served]:
    with sink_cluster(tmp_path / "broker") as running:
        yield running


def values(cluster, isolation: str) -> Counter:
    return Counter(v for _, _, v, _, _ in consume(cluster.bootstrap, TOPIC, PARTITIONS, isolation))


def markers(log_dir: Path) -> Counter:
    """(producer id, COMMIT?) of every transaction marker of the topic, by kafka-python."""
    return Counter(
        (b.producer_id, b.records[0].key == COMMIT_KEY)
        for p in range(PARTITIONS)
        for b in log_batches(log_dir, TOPIC, p)
        if b.is_control
    )


def data_producers(log_dir: Path) -> set[tuple[int, bool]]:
    """(producer id, transactional?) of every data batch of the topic."""
    return {
        (b.producer_id, b.is_transactional)
        for p in range(PARTITIONS)
        for b in log_batches(log_dir, TOPIC, p)
        if not b.is_control
    }


def test_a_batch_write_commits_each_task_transaction(spark, cluster) -> None:
    df = spark.range(3000).selectExpr("CAST(id AS STRING) AS key", "CAST(id AS STRING) AS value")
    write(df.repartition(2), cluster.bootstrap, topic=TOPIC, transactionalIdPrefix=PREFIX)
    want = Counter(b"%d" % i for i in range(3000))
    assert values(cluster, "read_committed") == want
    assert values(cluster, "read_uncommitted") == want
    producers = data_producers(cluster.log_dir)
    assert len(producers) == 2 and all(transactional for _, transactional in producers)
    # one COMMIT marker per task and partition it wrote, no ABORT
    assert markers(cluster.log_dir) == Counter({(pid, True): PARTITIONS for pid, _ in producers})


def test_a_failed_batch_write_is_aborted(spark, cluster) -> None:
    rows = [(b"%d" % i, 0) for i in range(200)] + [(b"bad", 7)]  # partition 7: there is none
    df = spark.createDataFrame(rows, "value binary, partition int").coalesce(1)
    with (
        sql_conf(spark, "spark.sql.execution.arrow.maxRecordsPerBatch", "50"),
        pytest.raises(PySparkException, match="row with partition 7 for topic 'sink'"),
    ):
        write(df, cluster.bootstrap, topic=TOPIC, transactionalIdPrefix=PREFIX)
    assert values(cluster, "read_committed") == Counter()
    # the 200 rows were produced in the failed task's transaction, then aborted
    assert values(cluster, "read_uncommitted") == Counter(b"%d" % i for i in range(200))
    assert [commit for (_, commit) in markers(cluster.log_dir)] == [False]


# task 0 holds ids 0..9999; its first attempt dies at 9000, well past the first 64 KiB the JVM
# buffers before the writer sees any row, once the topic holds task 1's rows and 1,000 of its
RETRY_ROWS, RETRY_FAIL_AT = 20_000, 9000


@pytest.fixture(scope="module")
def retried(tmp_path_factory) -> Iterator[dict[str, Served]]:
    """Two clusters, each written once by the retry child (tests/datasource/_retry_child.py, one
    Spark session for both jobs): ``"txn"`` with ``transactionalIdPrefix``, ``"plain"``
    without."""
    base = tmp_path_factory.mktemp("retried")
    with sink_cluster(base / "txn") as txn, sink_cluster(base / "plain") as plain:
        targets = [f"{txn.bootstrap}={PREFIX}", plain.bootstrap]
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "tests.datasource._retry_child",
                str(RETRY_ROWS),
                str(RETRY_FAIL_AT),
                *targets,
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=360,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout.split() == ["done", txn.bootstrap, "done", plain.bootstrap]
        yield {"txn": txn, "plain": plain}


def test_a_task_spark_retries_leaves_no_duplicate(retried) -> None:
    cluster, rows, fail_at = retried["txn"], RETRY_ROWS, RETRY_FAIL_AT
    want = Counter(b"%d" % i for i in range(rows))
    assert values(cluster, "read_committed") == want
    aborted = values(cluster, "read_uncommitted") - want
    # what the first attempt produced before the failure (rows: its UDF fails once the topic
    # holds some of them, _retry_child.py) is in the log, aborted
    assert set(aborted) <= {b"%d" % i for i in range(fail_at)}
    ended = [commit for (_, commit) in markers(cluster.log_dir)]
    assert ended.count(True) == 2  # task 0's retry and task 1 committed
    assert bool(aborted) == (False in ended)


def test_without_the_option_a_retried_task_duplicates(retried) -> None:
    cluster, rows, fail_at = retried["plain"], RETRY_ROWS, RETRY_FAIL_AT
    got = values(cluster, "read_committed")
    duplicates = got - Counter(b"%d" % i for i in range(rows))
    assert set(got) == {b"%d" % i for i in range(rows)}
    assert duplicates and set(duplicates) <= {b"%d" % i for i in range(fail_at)}


def test_a_micro_batch_run_again_after_its_commit_is_not_written_again(
    spark, cluster, tmp_path: Path
) -> None:
    ckpt = tmp_path / "ckpt"
    options = {"transactionalIdPrefix": PREFIX}
    run_stream(rate_stream(spark), cluster.bootstrap, ckpt, **options)  # batch 0: 0..99
    run_stream(rate_stream(spark), cluster.bootstrap, ckpt, **options)  # batch 1: 100..199
    # as if the driver died after committing batch 1's transactions and before Spark's commit
    # log entry: Spark runs batch 1 again at the restart, then batch 2
    for name in ("1", ".1.crc"):
        (ckpt / "commits" / name).unlink()
    again = run_stream(rate_stream(spark), cluster.bootstrap, ckpt, **options)
    assert {p["batchId"]: p["numInputRows"] for p in again.recentProgress} == {1: 100, 2: 100}
    want = Counter(b"%d" % i for i in range(300))
    assert values(cluster, "read_committed") == want
    assert values(cluster, "read_uncommitted") == want  # batch 1's tasks produced nothing again


def slow_first_partition(spark, seconds: float):
    """The rate stream with task 0 held ``seconds`` before its first row reaches the writer."""
    import time

    from pyspark.sql.functions import udf

    held: list[int] = []  # per task: the UDF is deserialized for each task

    @udf("string")
    def hold(v: str) -> str:
        from pyspark import TaskContext

        if TaskContext.get().partitionId() == 0 and not held:
            held.append(1)
            time.sleep(seconds)
        return v

    return rate_stream(spark).select("key", hold("value").alias("value"))


def test_a_micro_batch_whose_commit_failed_half_way_is_completed_by_its_rerun(
    spark, cluster, tmp_path: Path
) -> None:
    ckpt = tmp_path / "ckpt"
    options = {"transactionalIdPrefix": PREFIX}
    run_stream(rate_stream(spark), cluster.bootstrap, ckpt, **options)  # batch 0: 0..99
    # batch 1: task 1 ends at once, task 0 starts producing 5 s later; task 1's transaction
    # passes its 2 s timeout meanwhile and the coordinator aborts it. The driver's EndTxn
    # loop commits task 0's transaction, then fails on task 1's: as a driver killed in the
    # middle of the loop, one transaction of the batch committed and one not.
    q = (
        slow_first_partition(spark, 5.0)
        .writeStream.format("kafkalog")
        .option("kafka.bootstrap.servers", cluster.bootstrap)
        .option("topic", TOPIC)
        .option("checkpointLocation", str(ckpt))
        .options(**options)
        .option("kafka.transaction.timeout.ms", "2000")
        .trigger(availableNow=True)
        .start()
    )
    with pytest.raises(PySparkException, match="failed after 1 of 2 were committed"):
        q.awaitTermination(120)
    partial = values(cluster, "read_committed")
    assert sum(partial.values()) > 100 and partial - Counter(b"%d" % i for i in range(200)) == {}
    # the restart runs batch 1 again: task 0 finds it committed and writes nothing, task 1
    # writes its rows again; then batch 2
    again = run_stream(rate_stream(spark), cluster.bootstrap, ckpt, **options)
    assert {p["batchId"]: p["numInputRows"] for p in again.recentProgress} == {1: 100, 2: 100}
    want = Counter(b"%d" % i for i in range(300))
    assert values(cluster, "read_committed") == want
    aborted = values(cluster, "read_uncommitted") - want
    assert aborted and aborted == Counter(set(aborted))  # task 1's first rows, aborted, once
    # batch 1's 100 rows: task 0's committed by the failed run, task 1's aborted in it
    assert sum(partial.values()) - 100 + sum(aborted.values()) == 100


@pytest.mark.parametrize(
    "options, message",
    [
        ({"transactionalIdPrefix": " "}, "transactionalIdPrefix=' ' must be a non-blank string"),
        ({"transactionalIdPrefix": "x" * 201}, "of at most 200 characters"),
        (
            {"transactionalIdPrefix": "p", "kafka.transaction.timeout.ms": "0"},
            "kafka.transaction.timeout.ms='0' must be a positive integer",
        ),
    ],
)
def test_bad_options_are_refused_naming_them(spark, cluster, options, message) -> None:
    with pytest.raises(PySparkException, match=message):
        write(spark.createDataFrame([], "value string"), cluster.bootstrap, topic=TOPIC, **options)


def test_the_option_is_refused_for_a_log_dir_and_needs_a_topic_in_a_stream(
    spark, cluster, tmp_path: Path
) -> None:
    df = spark.createDataFrame([("a",)], "value string")
    with pytest.raises(PySparkException, match="is for writes over the Kafka protocol"):
        df.write.format("kafkalog").mode("append").option("topic", TOPIC).option(
            "transactionalIdPrefix", PREFIX
        ).save(str(cluster.log_dir))
    stream = rate_stream(spark).selectExpr("'sink' AS topic", "value")
    q = (
        stream.writeStream.format("kafkalog")
        .option("kafka.bootstrap.servers", cluster.bootstrap)
        .option("transactionalIdPrefix", PREFIX)
        .trigger(availableNow=True)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .start()
    )
    try:
        with pytest.raises(PySparkException, match="needs the option topic in a streaming write"):
            q.awaitTermination(120)
    finally:
        q.stop()
