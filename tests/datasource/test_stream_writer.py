"""``df.writeStream.format("kafkalog")`` with a real SparkSession and real log dirs: every
micro-batch appended once (read back by kafka-python's record parser), the query's id and last
batch recorded in the sink's log dir, a batch Spark runs again (its commit-log entry gone) not
appended twice, a query reading kafkalog and writing kafkalog, refused options and output
modes; the writer driven without Spark (``create``, ``write``, ``commit`` called as Spark calls
them) for a batch committed twice, inconsistent commit messages and abort; and a query process
SIGKILLed mid-stream and restarted on its checkpoint: nothing lost, nothing duplicated."""

from __future__ import annotations

import json
import os
import pickle
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.errors import PySparkException
from pyspark.sql.datasource import DataSource
from pyspark.sql.types import BinaryType, StringType, StructField, StructType

from broker_embedded.broker import Broker
from broker_embedded.common.producer_record import ProducerRecord
from broker_embedded.storage import commit_journal, staging_area
from datasource.errors import InvalidOptionError
from datasource.kafka_stream_writer import (
    KafkaLogStreamCommitMessage,
    KafkaLogStreamWriter,
    StreamWriteError,
)
from datasource.kafkalog_data_source import KafkaLogDataSource
from tests.datasource._logdirs import checkpoint, partition_facts
from tests.datasource.test_writer import BrokerProcess, kafka_python_partition

REPO = Path(__file__).resolve().parents[2]
HW = "replication-offset-checkpoint"
# DataSource itself defines streamReader (raising "not implemented"): is it kafkalog's own?
HAS_STREAM_READER = KafkaLogDataSource.streamReader is not DataSource.streamReader
SCHEMA = StructType([StructField("key", StringType()), StructField("value", BinaryType())])


@pytest.fixture
def sink(tmp_path: Path) -> Path:
    """A log dir with topic ``sink`` (3 partitions) and ``other`` (1 partition)."""
    d = tmp_path / "sink"
    with Broker(d, create=True) as b:
        b.create_topic("sink", 3)
        b.create_topic("other", 1)
    return d


def sink_records(log_dir: Path, topic: str = "sink", partitions: int = 3) -> list:
    """Every record below the published HW, by kafka-python, partition by partition."""
    return [r for p in range(partitions) for r in partition_facts(log_dir, topic, p).rows]


def commits(log_dir: Path) -> dict[str, int]:
    """The last committed batch of each streaming writer."""
    root = log_dir / commit_journal.COMMITS_DIR
    if not root.exists():
        return {}
    return {p.stem: json.loads(p.read_text())["batch"] for p in root.glob("*.json")}


def rate_stream(spark, rows_per_batch: int = 100):
    """Spark's ``rate-micro-batch`` source: batch ``b`` holds the values ``b*n .. b*n+n-1``,
    fixed by the batch's offsets (a replay has the same rows); as key and value strings."""
    return (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", str(rows_per_batch))
        .option("numPartitions", "2")
        .load()
        .selectExpr("CAST(value AS STRING) AS key", "CAST(value AS STRING) AS value")
    )


def run_once(df, sink: Path, ckpt: Path, **options: str):
    """Run one micro-batch (Trigger.AvailableNow over a source that has one batch ready)."""
    q = (
        df.writeStream.format("kafkalog")
        .options(**options)
        .option("checkpointLocation", str(ckpt))
        .trigger(availableNow=True)
        .start(str(sink))
    )
    q.awaitTermination(120)
    assert q.exception() is None, q.exception()
    return q


# -- a query writing kafkalog ---------------------------------------------------------------------


def test_each_micro_batch_is_appended_once_and_its_query_recorded(
    spark, sink: Path, tmp_path: Path
) -> None:
    ckpt = tmp_path / "ckpt"
    q = run_once(rate_stream(spark), sink, ckpt, topic="sink")
    assert commits(sink) == {q.id: 0}
    q = run_once(rate_stream(spark), sink, ckpt, topic="sink")  # restarted: same query id
    assert commits(sink) == {q.id: 1}
    got = sink_records(sink)
    assert Counter(r.value for r in got) == Counter(b"%d" % i for i in range(200))
    for r in got:
        assert r.key == r.value and r.partition == kafka_python_partition(r.key, "sink", 3)
    assert not list((sink / staging_area.STAGING_DIR).glob("*/*"))


def test_a_batch_spark_runs_again_is_not_appended_twice(spark, sink: Path, tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    run_once(rate_stream(spark), sink, ckpt, topic="sink")
    q = run_once(rate_stream(spark), sink, ckpt, topic="sink")
    hws = checkpoint(sink, HW)
    # as if the driver died after the sink's commit of batch 1 and before Spark's: Spark plans
    # batch 1 again (the same offsets) at the restart, new tasks stage it, the commit drops it
    for name in ("1", ".1.crc"):
        (ckpt / "commits" / name).unlink()
    again = run_once(rate_stream(spark), sink, ckpt, topic="sink")
    # availableNow: batch 1 again (dropped), then batch 2, the one new batch ready at the start
    runs = {p["batchId"]: p["numInputRows"] for p in again.recentProgress}
    assert again.id == q.id and runs == {1: 100, 2: 100}
    got = sink_records(sink)
    assert Counter(r.value for r in got) == Counter(b"%d" % i for i in range(300))
    assert sorted(checkpoint(sink, HW).values()) != sorted(hws.values())
    assert commits(sink) == {q.id: 2}
    assert not list((sink / staging_area.STAGING_DIR).glob("*/*"))  # its staged files dropped


def test_two_queries_write_one_log_dir_independently(spark, sink: Path, tmp_path: Path) -> None:
    a = run_once(rate_stream(spark, 10), sink, tmp_path / "a", topic="sink")
    b = run_once(rate_stream(spark, 20), sink, tmp_path / "b", topic="other")
    assert commits(sink) == {a.id: 0, b.id: 0}
    assert len(sink_records(sink)) == 10 and len(sink_records(sink, "other", 1)) == 20


def test_the_topic_column_places_rows_in_several_topics(spark, sink: Path, tmp_path: Path) -> None:
    df = rate_stream(spark, 50).selectExpr(
        "IF(CAST(value AS INT) % 2 = 0, 'sink', 'other') AS topic", "value"
    )
    run_once(df, sink, tmp_path / "ckpt")
    assert sorted(int(r.value) for r in sink_records(sink)) == list(range(0, 50, 2))
    assert sorted(int(r.value) for r in sink_records(sink, "other", 1)) == list(range(1, 50, 2))


@pytest.mark.skipif(not HAS_STREAM_READER, reason="the kafkalog stream reader is not there yet")
def test_a_query_reading_kafkalog_and_writing_kafkalog(spark, sink: Path, tmp_path: Path) -> None:
    src = tmp_path / "src"
    with Broker(src, create=True) as b:
        b.create_topic("src", 2)
        for p in range(2):
            b.produce(
                "src", p, [ProducerRecord(b"v-%d-%d" % (p, i), key=b"k-%d" % i) for i in range(300)]
            )
    df = (
        spark.readStream.format("kafkalog")
        .option("subscribe", "src")
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "200")
        .load(str(src))
        .selectExpr("key", "value", "CAST(partition AS INT) AS partition")
    )
    q = run_once(df, sink, tmp_path / "ckpt", topic="sink")
    assert commits(sink) == {q.id: 2}  # 600 offsets, 200 a batch
    got = sink_records(sink)
    assert Counter((r.partition, r.key, r.value) for r in got) == Counter(
        (p, b"k-%d" % i, b"v-%d-%d" % (p, i)) for p in range(2) for i in range(300)
    )
    with Broker(src, create=True) as b:  # more data: the restarted query takes only the new records
        b.produce("src", 1, [ProducerRecord(b"late")])
    run_once(df, sink, tmp_path / "ckpt", topic="sink")
    assert len(sink_records(sink)) == 601 and commits(sink) == {q.id: 3}


# -- refused --------------------------------------------------------------------------------------


def start(df, sink: Path, ckpt: Path, mode: str = "append", **options: str) -> None:
    """Run a query until it ends; its failure raised as Spark raises it."""
    q = (
        df.writeStream.format("kafkalog")
        .outputMode(mode)
        .options(**options)
        .option("checkpointLocation", str(ckpt))
        .trigger(availableNow=True)
        .start(str(sink))
    )
    q.awaitTermination(120)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"topic": "sink", "kafka.acks": "2"}, "option kafka.acks='2' is not one of Kafka's"),
        ({"topic": "sink", "maxOffsetsPerTrigger": "5"}, "(?i)unknown option maxOffsetsPerTrigger"),
        ({"topic": "nope"}, "topic 'nope' does not exist"),
        ({}, "no topic: the DataFrame has no column 'topic'"),
    ],
)
def test_bad_options_are_refused_naming_them(
    spark, sink: Path, tmp_path: Path, options, message
) -> None:
    with pytest.raises(PySparkException, match=message):
        start(rate_stream(spark, 5).select("value"), sink, tmp_path / "c", **options)
    assert sink_records(sink) == []


def test_complete_mode_appends_the_whole_result_at_every_batch(
    spark, sink: Path, tmp_path: Path
) -> None:
    """As Spark's Kafka sink (whose truncate does nothing; test_spark_connector_parity.py)."""
    counts = rate_stream(spark, 5).groupBy("value").count().selectExpr("value")
    q = (
        counts.writeStream.format("kafkalog")
        .outputMode("complete")
        .option("topic", "sink")
        .option("checkpointLocation", str(tmp_path / "c"))
        .trigger(availableNow=True)
        .start(str(sink))
    )
    assert q.awaitTermination(120) is not False and q.exception() is None
    batches = sum(1 for p in q.recentProgress if p.numInputRows)
    got = Counter(int(r.value) for r in sink_records(sink))
    assert batches >= 1 and got == Counter({v: batches - v // 5 for v in range(5 * batches)})


def test_update_mode_and_bad_columns_are_refused(spark, sink: Path, tmp_path: Path) -> None:
    counts = rate_stream(spark, 5).groupBy("value").count().selectExpr("value")
    with pytest.raises(PySparkException, match="kafkalog does not support Update mode"):
        start(counts, sink, tmp_path / "u", "update", topic="sink")  # Spark's own check
    with pytest.raises(PySparkException, match="column 'key' has type int"):
        start(
            rate_stream(spark, 5).selectExpr("1 AS key", "value"),
            sink,
            tmp_path / "d",
            topic="sink",
        )
    assert sink_records(sink) == []


def test_a_log_dir_owned_by_a_running_broker_fails_the_query(
    spark, sink: Path, tmp_path: Path
) -> None:
    broker = BrokerProcess(sink)
    try:
        with pytest.raises(PySparkException) as e:
            start(rate_stream(spark, 5), sink, tmp_path / "c", topic="sink")
    finally:
        broker.stop()
    text = str(e.value)
    assert f"pid {broker.proc.pid} on host" in text and "(kafkalog broker 0)" in text
    assert "network listener" in text
    assert sink_records(sink) == [] and commits(sink) == {}
    # fine once it is gone: the failed batch 0 runs again, then batch 1 (availableNow)
    start(rate_stream(spark, 5), sink, tmp_path / "c", topic="sink")
    assert sorted(int(r.value) for r in sink_records(sink)) == list(range(10))


# -- the writer without Spark ---------------------------------------------------------------------

W = "2b1f8d4e-6a3c-4e7f-9b10-5c2d7e8f9a01"


def writer_for(sink: Path, writer_id: str | None = W) -> KafkaLogStreamWriter:
    options = {"path": str(sink), "topic": "sink", "checkpointLocation": "/x", "queryName": "q"}
    writer = KafkaLogStreamWriter.create(options, SCHEMA, False, writer_id=writer_id)
    return pickle.loads(pickle.dumps(writer))  # as Spark ships it


def task(writer: KafkaLogStreamWriter, values: list[bytes]) -> KafkaLogStreamCommitMessage:
    """One task's write, outside Spark, and its commit message as the driver gets it."""
    batch = pa.record_batch(
        [pa.array([None] * len(values), pa.string()), pa.array(values)], ["key", "value"]
    )
    return pickle.loads(pickle.dumps(writer.write(iter([batch]))))


def test_committing_a_batch_twice_appends_it_once(sink: Path) -> None:
    first = writer_for(sink)
    messages = [task(first, [b"a", b"b"]), task(first, [b"c"]), None]
    writer_for(sink).commit(messages, 0)  # the commit runs in a writer of its own
    assert Counter(r.value for r in sink_records(sink)) == Counter([b"a", b"b", b"c"])
    assert commits(sink) == {W: 0}
    # batch 0 again, from other task attempts after a failure: only the batch id matters
    second = writer_for(sink)
    replay = [task(second, [b"a", b"b", b"c", b"d"])]
    writer_for(sink).commit(replay, 0)
    assert Counter(r.value for r in sink_records(sink)) == Counter([b"a", b"b", b"c"])
    assert not list((sink / staging_area.STAGING_DIR).glob("*/*"))
    writer_for(sink).commit([task(writer_for(sink), [b"e"])], 1)
    assert len(sink_records(sink)) == 4 and commits(sink) == {W: 1}


def test_an_empty_batch_takes_no_lock_and_records_nothing(sink: Path) -> None:
    writer, committer = writer_for(sink), writer_for(sink)
    messages = [task(writer, []), task(writer, [])]
    broker = BrokerProcess(sink)  # would refuse any commit
    try:
        committer.commit(messages, 0)
    finally:
        broker.stop()
    assert commits(sink) == {}


def test_inconsistent_commit_messages_append_nothing(sink: Path) -> None:
    a, b = task(writer_for(sink), [b"a"]), task(writer_for(sink, "other-query"), [b"b"])
    with pytest.raises(StreamWriteError, match="one job of one query for batch 0 expected"):
        writer_for(sink).commit([a, b], 0)
    assert sink_records(sink) == [] and commits(sink) == {}


def test_abort_drops_the_staged_files(sink: Path) -> None:
    writer = writer_for(sink)
    messages = [task(writer, [b"a"]), None]
    assert list((sink / staging_area.STAGING_DIR).glob("*/*"))
    writer_for(sink).abort(messages, 0)
    assert not list((sink / staging_area.STAGING_DIR).glob("*/*"))
    assert sink_records(sink) == []


def test_a_writer_outside_a_streaming_query_refuses_to_stage(sink: Path) -> None:
    with pytest.raises(StreamWriteError, match="outside a streaming query"):
        task(writer_for(sink, writer_id=None), [b"a"])
    assert not list((sink / staging_area.STAGING_DIR).glob("*/*"))


def test_the_writer_refuses_before_any_task_runs(sink: Path) -> None:
    with pytest.raises(InvalidOptionError, match="option path"):
        KafkaLogStreamWriter.create({"topic": "sink"}, SCHEMA, False)
    with pytest.raises(InvalidOptionError, match="option topic='a/b'"):
        KafkaLogStreamWriter.create({"path": str(sink), "topic": "a/b"}, SCHEMA, True)


# -- a query process killed mid-stream ------------------------------------------------------------


class StreamChild:
    """``tests/datasource/_stream_child.py`` in a new process group (the Python driver, its
    JVM and the JVM's Python workers), so that it can be killed as a whole. ``held``: the
    child starts its Spark session and waits for :meth:`go` to start its query."""

    def __init__(self, *args: str, log: Path, held: bool = False) -> None:
        self.log = open(log, "ab")  # noqa: SIM115 (closed by wait / kill)
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.datasource._stream_child",
                *args,
                *(["--held"] if held else []),
            ],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            start_new_session=True,
        )
        if not held:
            self.go()

    def go(self) -> None:
        """Start the query (a held child's; at once for the others): its id in ``query_id``."""
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        guard = threading.Timer(120, os.killpg, (self.proc.pid, signal.SIGKILL))
        guard.start()  # a child that hangs before its query runs fails the test, not hangs it
        try:
            line = self.proc.stdout.readline().strip()
        finally:
            guard.cancel()
        assert line.startswith("query "), self._failure(line)
        self.query_id = line.split()[1]

    def _failure(self, line: str) -> str:
        self.proc.wait(timeout=60)
        self.log.flush()
        return f"child said {line!r}; its log: {self.log.name}"

    def log_tail(self, chars: int = 4000) -> str:
        """The end of the child's stderr log (what a failure says)."""
        self.log.flush()
        return Path(self.log.name).read_text(errors="replace")[-chars:]

    def kill(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)
        self.proc.stdin.close()
        self.proc.stdout.close()
        self.log.close()

    def __enter__(self) -> StreamChild:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:  # a test that failed before the end: no child left behind
            self.kill()

    def wait(self, timeout: float) -> str:
        try:
            out, _ = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise
        self.log.close()
        assert self.proc.returncode == 0, f"exit {self.proc.returncode}; log: {self.log.name}"
        return out


@pytest.mark.slow  # two Spark children, a kill between them
def test_a_query_killed_mid_stream_and_restarted_loses_and_duplicates_nothing(
    sink: Path, tmp_path: Path
) -> None:
    ckpt = tmp_path / "ckpt"
    if HAS_STREAM_READER:
        src = tmp_path / "src"
        with Broker(src, create=True) as b:
            b.create_topic("src", 2)
            for p in range(2):
                b.produce(
                    "src",
                    p,
                    [ProducerRecord(b"%d-%d" % (p, i), key=b"%d" % i) for i in range(1200)],
                )
        expected = Counter(b"%d-%d" % (p, i) for p in range(2) for i in range(1200))
        args = [
            str(sink),
            str(ckpt),
            "--source",
            "kafkalog",
            "--source-dir",
            str(src),
            "--max-offsets",
            "400",
        ]
    else:
        args = [
            str(sink),
            str(ckpt),
            "--source",
            "rate",
            "--rows-per-batch",
            "400",
            "--until-rows",
            "2400",
        ]
    with (
        StreamChild(*args, log=tmp_path / "child.log") as child,
        StreamChild(*args, log=tmp_path / "again.log", held=True) as again,
    ):
        deadline = time.monotonic() + 300  # a hang guard: a loaded machine is slow, not red
        while commits(sink).get(child.query_id, -1) < 1:  # some batches committed
            assert child.proc.poll() is None, f"the child ended: {child.log_tail()}"
            assert time.monotonic() < deadline, f"no commit in 300 s: {child.log_tail()}"
            time.sleep(0.01)
        time.sleep(random.uniform(0, 0.4))  # anywhere in the next batch: staging, committing...
        child.kill()
        killed_at = commits(sink)[child.query_id]
        again.go()  # the restart on the same checkpoint
        assert again.query_id == child.query_id  # the checkpoint keeps the query's id
        assert "done" in again.wait(timeout=150)
    got = Counter(r.value for r in sink_records(sink))
    if HAS_STREAM_READER:
        assert got == expected
    else:
        n = sum(got.values())
        assert n >= 2400 and got == Counter(b"%d" % i for i in range(n))
    assert commits(sink)[child.query_id] > killed_at
    assert not list((sink / staging_area.STAGING_DIR).glob(f"*/{staging_area.JOURNAL}"))
