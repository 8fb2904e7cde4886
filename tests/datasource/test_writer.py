"""``df.write.format("kafkalog")`` end to end with a real SparkSession and real log dirs: what is
written is read back exactly by kafka-python's record parser (values, keys, headers, string and
binary columns), keyed records land where kafka-python's DefaultPartitioner (murmur2) puts them,
the partition and topic columns and the topic option, a job whose task fails leaves nothing
visible, and refused writes (mode, columns, options, a broker owning the log dir) as the user
sees them. The writer is also driven without Spark jobs (``create``, ``write``, ``commit`` called
directly, as Spark calls them) for the commit-time lock check, pickling and every refused column,
option and row; those tests take the ``spark`` fixture only for Spark's DDL parser."""

from __future__ import annotations

import os
import pickle
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
from kafka.partitioner.default import DefaultPartitioner
from pyspark.errors import PySparkException
from pyspark.sql.types import BinaryType, StringType, StructField, StructType

from broker_embedded.broker import Broker
from broker_embedded.common.producer_record import ProducerRecord
from broker_embedded.errors import (
    InvalidRecordError,
    LogDirLockedError,
    RecordTooLargeError,
    UnknownTopicOrPartitionError,
)
from broker_embedded.storage import staging_area
from datasource.errors import InvalidOptionError
from datasource.kafka_write_options import KafkaWriteOptions
from datasource.kafka_writer import InvalidWriteError, KafkaLogCommitMessage, KafkaLogWriter
from tests.datasource._logdirs import checkpoint, partition_facts, spark_rows
from tests.datasource.conftest import sql_conf

REPO = Path(__file__).resolve().parents[2]
HW = "replication-offset-checkpoint"
HEADERS_DDL = "array<struct<key:string,value:binary>>"


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    """``events`` (4 partitions, partition 1 holding 2 records), ``other`` (2 partitions),
    ``compacted`` (1 partition, cleanup.policy=compact), ``small`` (max.message.bytes 500)."""
    d = tmp_path / "logdir"
    with Broker(d, create=True) as b:
        b.create_topic("events", 4)
        b.create_topic("other", 2)
        b.create_topic("compacted", 1, config={"cleanup.policy": "compact"})
        b.create_topic("small", 1, config={"max.message.bytes": 500})
        b.produce("events", 1, [ProducerRecord(b"before-0"), ProducerRecord(b"before-1")])
    return d


def write(df, log_dir: Path, **options: str) -> None:
    df.write.format("kafkalog").mode("append").options(**options).save(str(log_dir))


def records(log_dir: Path, topic: str, partitions: int) -> dict[int, list]:
    """Per partition, the records below the published HW as kafka-python parses them."""
    return {p: list(partition_facts(log_dir, topic, p).rows) for p in range(partitions)}


class _Cluster:
    """The cluster metadata kafka-python's partitioner asks for: one topic, all available."""

    def __init__(self, topic: str, partitions: int) -> None:
        self.topic, self.partitions = topic, set(range(partitions))

    def topics(self):
        return {self.topic}

    def partitions_for_topic(self, topic):
        return self.partitions

    def available_partitions_for_topic(self, topic):
        return self.partitions


def kafka_python_partition(key: bytes, topic: str, partitions: int) -> int:
    return DefaultPartitioner().partition(topic, key, key, None, None, _Cluster(topic, partitions))


def staging_jobs(log_dir: Path) -> list[str]:
    """The write jobs with a staging directory in the log dir."""
    root = log_dir / staging_area.STAGING_DIR
    return sorted(e.name for e in os.scandir(root) if e.is_dir()) if root.exists() else []


# -- what is written ------------------------------------------------------------------------------


def test_binary_columns_read_back_exactly_and_keys_placed_as_kafka_places_them(
    spark, log_dir: Path
) -> None:
    rows = []
    for i in range(600):
        key = None if i % 10 == 0 else b"user-%d" % (i % 37)
        value = None if i == 5 else bytes([i % 256]) * (i % 50)
        headers = [("trace", b"t%d" % i), ("n", None)] if i % 3 == 0 else None
        rows.append((key, value, headers))
    schema = f"key binary, value binary, headers {HEADERS_DDL}"
    df = spark.createDataFrame(rows, schema)  # local[2]: two tasks
    began = time.time() * 1000
    write(df, log_dir, topic="events")
    got = records(log_dir, "events", 4)
    assert [r.value for r in got[1][:2]] == [b"before-0", b"before-1"]
    written = [r for p in range(4) for r in (got[p][2:] if p == 1 else got[p])]
    want = Counter((k, v, tuple(h or ())) for k, v, h in rows)
    assert Counter((r.key, r.value, r.headers) for r in written) == want
    for p in range(4):
        for r in got[p]:
            if r.key is not None:
                assert p == kafka_python_partition(r.key, "events", 4), r.key
        offsets = [r.offset for r in got[p]]
        assert offsets == list(range(len(offsets)))  # contiguous from the old log end
    assert {r.timestamp_type for r in written} == {0}  # CreateTime, stamped at the write
    assert all(began - 1000 <= r.timestamp / 1000 <= time.time() * 1000 for r in written)
    # keyless records spread round-robin: each task deals over every partition
    keyless = Counter(p for p in range(4) for r in got[p] if r.key is None and r.offset >= 2)
    assert len(keyless) == 4 and max(keyless.values()) - min(keyless.values()) <= 3
    # and the kafkalog reader reads the same rows
    df = spark.read.format("kafkalog").option("subscribe", "events").load(str(log_dir))
    assert [r.without_headers() for p in range(4) for r in got[p]] == spark_rows(df)
    assert staging_jobs(log_dir) == []


def test_string_columns_are_written_as_utf8(spark, log_dir: Path) -> None:
    df = spark.createDataFrame(
        [("clé-1", "héllo wörld ✓"), (None, ""), ("k", None)], "key string, value string"
    ).coalesce(1)
    write(df, log_dir, topic="other")
    got = [r for rs in records(log_dir, "other", 2).values() for r in rs]
    assert Counter((r.key, r.value) for r in got) == Counter(
        [("clé-1".encode(), "héllo wörld ✓".encode()), (None, b""), (b"k", None)]
    )
    placed = {r.key: r.partition for r in got if r.key}
    assert placed == {k: kafka_python_partition(k, "other", 2) for k in placed}


def test_the_partition_column_places_rows_and_null_falls_back(spark, log_dir: Path) -> None:
    rows = [
        (b"a", b"to-3", 3),
        (b"a", b"to-0", 0),
        (b"key-x", b"by-key", None),
        (None, b"x0", None),
        (None, b"x1", None),
    ]
    df = spark.createDataFrame(rows, "key binary, value binary, partition int").coalesce(1)
    write(df, log_dir, topic="events")
    got = records(log_dir, "events", 4)
    where = {r.value: p for p, rs in got.items() for r in rs}
    assert where[b"to-3"] == 3 and where[b"to-0"] == 0
    assert where[b"by-key"] == kafka_python_partition(b"key-x", "events", 4)
    assert where[b"x1"] == (where[b"x0"] + 1) % 4  # round-robin
    bad = spark.createDataFrame([(b"v", 4)], "value binary, partition int")
    with pytest.raises(PySparkException, match=r"partition 4 for topic 'events': the topic has 4"):
        write(bad, log_dir, topic="events")


def test_the_topic_column_and_the_option_overriding_it(spark, log_dir: Path) -> None:
    rows = [("events", b"e1", 2), ("other", b"o1", 1), ("events", b"e2", 2), ("other", b"o2", 0)]
    df = spark.createDataFrame(rows, "topic string, value binary, partition int").coalesce(1)
    write(df, log_dir)
    assert [r.value for r in records(log_dir, "events", 4)[2]] == [b"e1", b"e2"]
    other = records(log_dir, "other", 2)
    assert [r.value for r in other[0]] == [b"o2"] and [r.value for r in other[1]] == [b"o1"]
    write(df, log_dir, topic="events")  # the option wins over the column
    assert [r.value for r in records(log_dir, "events", 4)[0]] == [b"o2"]
    assert [r.value for r in records(log_dir, "events", 4)[2]] == [b"e1", b"e2", b"e1", b"e2"]
    assert len(records(log_dir, "other", 2)[1]) == 1


def test_a_failed_task_leaves_nothing_visible(spark, log_dir: Path) -> None:
    from pyspark.sql.functions import udf

    def fail_on_row_350(value: bytes) -> bytes:
        if value == b"v-350":
            raise ValueError("boom on row 350")
        return value

    boom = udf(fail_on_row_350, BinaryType())
    hws = checkpoint(log_dir, HW)
    before = {
        p: (log_dir / f"events-{p}" / "00000000000000000000.log").read_bytes() for p in range(4)
    }
    df = (
        spark.range(400, numPartitions=2)
        .selectExpr(
            "CAST(CONCAT('k-', id) AS BINARY) AS key", "CAST(CONCAT('v-', id) AS BINARY) AS value"
        )
        .select("key", boom("value").alias("value"))
    )
    with sql_conf(spark, "spark.sql.execution.arrow.maxRecordsPerBatch", "50"):
        with pytest.raises(PySparkException, match="boom on row 350"):
            write(df, log_dir, topic="events")
    assert checkpoint(log_dir, HW) == hws
    after = {
        p: (log_dir / f"events-{p}" / "00000000000000000000.log").read_bytes() for p in range(4)
    }
    assert after == before  # nothing appended, not even beyond the HW
    # Spark's abort deleted the job's staging dir (a task Spark was still killing may leave a
    # file behind: nothing ever commits it); the next job writes only its own rows
    assert not list((log_dir / staging_area.STAGING_DIR).glob(f"*/{staging_area.JOURNAL}"))
    write(spark.createDataFrame([(b"next",)], "value binary"), log_dir, topic="events")
    assert [
        r.value
        for rs in records(log_dir, "events", 4).values()
        for r in rs
        if r.value != b"before-0" and r.value != b"before-1"
    ] == [b"next"]


# -- refused writes -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "ddl, options, message",
    [
        ("key binary", {"topic": "events"}, "needs a column 'value'"),
        ("value binary, key int", {"topic": "events"}, "column 'key' has type int"),
        (
            "value binary",
            {"topic": "events", "kafka.bootstrap.servers": "h:9092"},
            "and kafka.bootstrap.servers='h:9092' are both given: pick one",
        ),
    ],
)
def test_bad_columns_and_options_are_refused_naming_them(
    spark, log_dir: Path, ddl: str, options: dict, message: str
) -> None:
    df = spark.createDataFrame([], ddl)
    with pytest.raises(PySparkException, match=message):
        write(df, log_dir, **options)


def test_producer_settings_are_taken_as_spark_s_kafka_sink_takes_them(
    spark, log_dir: Path, caplog
) -> None:
    """Spark's Kafka sink hands ``kafka.*`` to its producer; a log-dir write has none: acks is
    checked (any value: the commit fsyncs before it publishes), the others noted, once."""
    df = spark.createDataFrame([(b"a",), (b"b",)], "value binary")
    settings = {"kafka.acks": "all", "kafka.linger.ms": "5", "kafka.compression.type": "lz4"}
    write(df, log_dir, topic="events", **settings)
    values = [r.value for rs in records(log_dir, "events", 4).values() for r in rs]
    assert sorted(v for v in values if not v.startswith(b"before-")) == [b"a", b"b"]
    with caplog.at_level("WARNING", logger="datasource.kafka_write_options"):
        for _ in range(2):
            KafkaWriteOptions.parse({"path": "/x", "kafka.acks": "0", "kafka.batch.size": "1"})
    assert [r.getMessage() for r in caplog.records] == [
        "option kafka.batch.size='1' has no effect on a write into a log dir: the records go "
        "straight into the log's segments, not through a Kafka producer"
    ]


def test_overwrite_and_the_default_mode_are_refused(spark, log_dir: Path) -> None:
    df = spark.createDataFrame([(b"v",)], "value binary")
    with pytest.raises(PySparkException, match="save mode overwrite is not supported: Kafka"):
        df.write.format("kafkalog").mode("overwrite").option("topic", "events").save(str(log_dir))
    with pytest.raises(PySparkException, match='"Append"'):  # Spark's own check
        df.write.format("kafkalog").option("topic", "events").save(str(log_dir))
    assert checkpoint(log_dir, HW)[("events", 0)] == 0


BROKER_CHILD = """
import sys
from broker_embedded.broker import Broker
broker = Broker(sys.argv[1], create=True)
print("open", flush=True)
sys.stdin.readline()
broker.close()
"""


class BrokerProcess:
    """A Broker object holding the log dir in a child process until :meth:`stop`."""

    def __init__(self, log_dir: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", BROKER_CHILD, str(log_dir)],
            cwd=REPO,
            text=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert self.proc.stdout.readline().strip() == "open"

    def stop(self) -> None:
        self.proc.stdin.close()  # the broker closes on EOF
        self.proc.wait(timeout=30)
        self.proc.stdout.close()


def test_a_log_dir_owned_by_a_running_broker_is_refused(spark, log_dir: Path) -> None:
    df = spark.createDataFrame([(b"v",)], "value binary")
    broker = BrokerProcess(log_dir)
    try:
        with pytest.raises(PySparkException) as e:
            write(df, log_dir, topic="events")
    finally:
        broker.stop()
    text = str(e.value)
    assert f"pid {broker.proc.pid} on host" in text and "(kafkalog broker 0)" in text
    assert "running broker" in text and "network listener" in text
    write(df, log_dir, topic="events")  # fine once the broker is gone
    assert sum(len(rs) for rs in records(log_dir, "events", 4).values()) == 3


# -- the writer without Spark ---------------------------------------------------------------------

SCHEMA = StructType([StructField("key", StringType()), StructField("value", BinaryType())])


def test_a_broker_starting_before_the_commit_refuses_it(log_dir: Path) -> None:
    writer = KafkaLogWriter.create({"path": str(log_dir), "topic": "events"}, SCHEMA, False)
    writer = pickle.loads(pickle.dumps(writer))  # as Spark ships it
    batch = pa.record_batch([pa.array(["a", None]), pa.array([b"1", b"2"])], ["key", "value"])
    message = pickle.loads(pickle.dumps(writer.write(iter([batch, batch]))))
    assert isinstance(message, KafkaLogCommitMessage)
    assert sum(f.records for f in message.files) == 4
    broker = BrokerProcess(log_dir)
    try:
        with pytest.raises(LogDirLockedError, match=r"\(kafkalog broker 0\)\).*network listener"):
            writer.commit([message])
    finally:
        broker.stop()
    assert staging_jobs(log_dir) == [writer.job_id]
    writer.abort([message])
    assert staging_jobs(log_dir) == []
    assert checkpoint(log_dir, HW)[("events", 0)] == 0


def test_the_writer_refuses_before_any_task_runs() -> None:
    with pytest.raises(InvalidOptionError, match="option path"):
        KafkaLogWriter.create({"topic": "events"}, SCHEMA, False)
    with pytest.raises(InvalidOptionError, match="option topic='a/b'"):
        KafkaLogWriter.create({"path": "/nowhere", "topic": "a/b"}, SCHEMA, False)
    with pytest.raises(UnknownTopicOrPartitionError, match="log dir /nowhere holds no topics"):
        KafkaLogWriter.create({"path": "/nowhere", "topic": "t"}, SCHEMA, False)
    with pytest.raises(InvalidWriteError, match="overwrite"):
        KafkaLogWriter.create({"path": "/nowhere", "topic": "t"}, SCHEMA, True)


@pytest.mark.parametrize(
    "ddl, options, message",
    [
        ("key binary", {"topic": "events"}, "needs a column 'value'"),
        ("value int", {"topic": "events"}, "column 'value' has type int"),
        ("value binary, key int", {"topic": "events"}, "column 'key' has type int"),
        ("value binary, partition bigint", {"topic": "events"}, "column 'partition' has type bi"),
        (
            "value binary, headers map<string,binary>",
            {"topic": "events"},
            "column 'headers' has type map<string,binary>",
        ),
        (
            "value binary, headers array<struct<key:string,value:string>>",
            {"topic": "events"},
            "column 'headers' has type array<struct<key:string,value:string>>: the kafkalog sink "
            "takes array<struct<key:string,value:binary>>",
        ),
        ("value binary, topic binary", {}, "column 'topic' has type binary"),
        ("value binary", {}, "the option topic is not set"),
        ("value binary", {"topic": "nope"}, "topic 'nope' does not exist in log dir"),
        (
            "value binary",
            {"topic": "events", "kafka.bootstrap.servers": "h:9092"},
            "and kafka.bootstrap.servers='h:9092' are both given: pick one",
        ),
        (
            "value binary",
            {"topic": "events", "includeHeaders": "true"},
            "unknown option includeHeaders='true'",
        ),
        ("value binary", {"topic": "events", "TOPIC": "other"}, "option TOPIC is given twice"),
        (
            "value binary",
            {"topic": "events", "kafka.acks": "2"},
            "option kafka.acks='2' is not one of Kafka's acks values: all, -1, 0, 1",
        ),
        (
            "value binary",
            {"topic": "events", "kafka.value.serializer": "x"},
            "Kafka option 'value.serializer' is not supported as value are serialized with "
            "ByteArraySerializer.",
        ),
    ],
)
def test_every_bad_column_and_option(
    spark, log_dir: Path, ddl: str, options: dict, message
) -> None:
    schema = StructType.fromDDL(ddl)
    with pytest.raises(
        (InvalidWriteError, InvalidOptionError, UnknownTopicOrPartitionError),
        match=re.escape(message),
    ):
        KafkaLogWriter.create({"path": str(log_dir), **options}, schema, False)


def test_other_columns_are_ignored_as_sparks_kafka_sink_ignores_them(spark, log_dir: Path) -> None:
    schema = StructType.fromDDL("value binary, offset bigint, timestamp timestamp, topic string")
    writer = KafkaLogWriter.create({"path": str(log_dir)}, schema, False)
    batch = pa.record_batch(
        [
            pa.array([b"v"]),
            pa.array([7]),
            pa.array([None], pa.timestamp("us")),
            pa.array(["other"]),
        ],
        schema=pa.schema(
            [
                ("value", pa.binary()),
                ("offset", pa.int64()),
                ("timestamp", pa.timestamp("us")),
                ("topic", pa.string()),
            ]
        ),
    )
    writer.commit([writer.write(iter([batch]))])
    assert [r.value for rs in records(log_dir, "other", 2).values() for r in rs] == [b"v"]


def _write_rows(log_dir: Path, options: dict, rows: dict) -> None:
    """Create a writer, write one Arrow batch of ``rows`` (column -> array) and commit."""
    batch = pa.record_batch(list(rows.values()), list(rows))
    schema = StructType.fromDDL(
        ", ".join(
            f"{name} {'string' if pa.types.is_string(a.type) else 'binary'}"
            if name != "partition"
            else "partition int"
            for name, a in rows.items()
        )
    )
    writer = KafkaLogWriter.create({"path": str(log_dir), **options}, schema, False)
    try:
        writer.commit([writer.write(iter([batch]))])
    except BaseException:
        writer.abort([])
        raise


@pytest.mark.parametrize(
    "options, rows, error, message",
    [
        (
            {},
            {"topic": pa.array(["events", "nope"]), "value": pa.array([b"1", b"2"])},
            UnknownTopicOrPartitionError,
            "topic 'nope' does not exist in log dir",
        ),
        (
            {},
            {"topic": pa.array(["events", None]), "value": pa.array([b"1", b"2"])},
            InvalidWriteError,
            "a row has a null topic",
        ),
        (
            {"topic": "other"},
            {"value": pa.array([b"1"]), "partition": pa.array([-1], pa.int32())},
            UnknownTopicOrPartitionError,
            "row with partition -1 for topic 'other': the topic has 2",
        ),
        (
            {"topic": "compacted"},
            {"key": pa.array([b"k", None]), "value": pa.array([b"1", b"2"])},
            InvalidRecordError,
            "compacted topic 'compacted' does not accept records without a key",
        ),
        (
            {"topic": "small"},
            {"value": pa.array([b"x" * 600])},
            RecordTooLargeError,
            "topic 'small' partition 0: a record makes a batch of 670 bytes, "
            "above the topic's max.message.bytes 500",
        ),
    ],
)
def test_rows_that_cannot_be_written(spark, log_dir: Path, options, rows, error, message) -> None:
    hws = checkpoint(log_dir, HW)
    with pytest.raises(error, match=re.escape(message)):
        _write_rows(log_dir, options, rows)
    assert checkpoint(log_dir, HW) == hws
    assert staging_jobs(log_dir) == []


def test_small_topics_get_batches_within_max_message_bytes(spark, log_dir: Path) -> None:
    _write_rows(log_dir, {"topic": "small"}, {"value": pa.array([b"y" * 100] * 40)})
    data = (log_dir / "small-0" / "00000000000000000000.log").read_bytes()
    sizes, pos = [], 0
    while pos < len(data):
        sizes.append(12 + int.from_bytes(data[pos + 8 : pos + 12], "big"))
        pos += sizes[-1]
    assert len(sizes) > 5 and max(sizes) <= 500
    assert len(records(log_dir, "small", 1)[0]) == 40
