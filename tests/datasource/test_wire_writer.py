"""The ``kafkalog`` sink over the Kafka protocol (``kafka.bootstrap.servers``), against a real
in-process BrokerServer on 127.0.0.1 (port 0) and a real SparkSession: a batch write read back
over the wire by the kafkalog reader and from the broker's log files by kafka-python (exact keys,
values, headers, partitions, timestamps), keyed rows in the partition kafka-python's
DefaultPartitioner picks, the producer's batches idempotent (producer id, sequences from 0),
refused columns and options, a streaming query with availableNow, and the at-least-once
guarantee: a micro-batch Spark runs again after a failure is in the topic twice, exactly it;
a ``timestamp`` column's values as the records' CreateTime, read back by confluent-kafka."""

from __future__ import annotations

import datetime as dt
import time
from collections import Counter
from pathlib import Path

import pytest
from pyspark.errors import PySparkException

from tests.broker_embedded.server._consume import consume
from tests.broker_embedded.server._serve import log_batches, log_records, served
from tests.datasource._logdirs import spark_rows
from tests.datasource.test_stream_writer import rate_stream
from tests.datasource.test_writer import kafka_python_partition

TOPIC = "sink"
PARTITIONS = 3


@pytest.fixture
def cluster(tmp_path: Path):
    with served(tmp_path / "broker") as running:
        running.broker.create_topic(TOPIC, PARTITIONS)
        running.broker.create_topic("other", 1)
        yield running


def write(df, bootstrap: str, **options: str) -> None:
    df.write.format("kafkalog").mode("append").option("kafka.bootstrap.servers", bootstrap).options(
        **options
    ).save()


def file_records(log_dir: Path, topic: str = TOPIC, partitions: int = PARTITIONS) -> list:
    """(partition, offset, key, value, headers) of every record in the log files, kafka-python."""
    return [(p, *r) for p in range(partitions) for r in log_records(log_dir, topic, p)]


ROWS = [  # key, value, explicit partition, headers
    ("k1", "v1", None, [("h", b"1")]),
    ("k2", "v2", None, [("h", b"2"), ("n", None)]),
    (None, "tomb-less", 2, [("h", b"3")]),
    ("k1", None, None, [("h", b"4")]),  # tombstone
    ("k3", "v5", 0, [("h", b"5")]),
]


def test_a_batch_write_reads_back_exactly(spark, cluster) -> None:
    df = spark.createDataFrame(
        [(k, v, p, h) for k, v, p, h in ROWS],
        "key string, value string, partition int, headers array<struct<key:string,value:binary>>",
    ).coalesce(1)
    before = int(time.time() * 1000)
    write(df, cluster.bootstrap, topic=TOPIC)
    after = int(time.time() * 1000)

    def where(k, p):
        return p if p is not None else kafka_python_partition(k.encode(), TOPIC, PARTITIONS)

    expected = Counter(
        (where(k, p), k and k.encode(), v and v.encode(), tuple(h)) for k, v, p, h in ROWS
    )
    on_disk = file_records(cluster.log_dir)
    assert Counter((p, k, v, h) for p, _, k, v, h in on_disk) == expected
    # one task, one producer: per partition offsets from 0 in input order
    for p in range(PARTITIONS):
        offsets = [o for q, o, *_ in on_disk if q == p]
        assert offsets == list(range(len(offsets)))
    # read back over the wire by the kafkalog reader: same rows, CreateTime of the write
    got = spark_rows(
        spark.read.format("kafkalog")
        .option("kafka.bootstrap.servers", cluster.bootstrap)
        .option("subscribe", TOPIC)
        .option("includeHeaders", "true")
        .load()
    )
    assert Counter((r.partition, r.key, r.value, r.headers) for r in got) == expected
    assert {(r.partition, r.offset) for r in got} == {(p, o) for p, o, *_ in on_disk}
    assert all(r.timestamp_type == 0 and before * 1000 <= r.timestamp <= after * 1000 for r in got)
    assert len({r.timestamp for r in got}) == 1  # one Arrow batch, one stamp


def test_the_batches_are_idempotent_and_keyed_rows_follow_murmur2(spark, cluster) -> None:
    n = 3000
    df = spark.range(n).selectExpr(
        "CAST(id AS STRING) AS key", "CAST(CAST(id AS STRING) AS BINARY) AS value"
    )
    write(df.repartition(2), cluster.bootstrap, topic=TOPIC)
    on_disk = file_records(cluster.log_dir)
    assert len(on_disk) == n
    for p, _, k, _, _ in on_disk:
        assert p == kafka_python_partition(k, TOPIC, PARTITIONS)
    for p in range(PARTITIONS):
        by_producer: dict[int, list] = {}
        for b in log_batches(cluster.log_dir, TOPIC, p):
            by_producer.setdefault(b.producer_id, []).append(b)
        assert len(by_producer) <= 2 and -1 not in by_producer  # a producer per task
        for batches in by_producer.values():  # sequences from 0, consecutive
            seq = 0
            for b in batches:
                assert b.base_sequence == seq and b.producer_epoch == 0
                seq += len(b.records)


def test_the_topic_column_and_a_bad_topic(spark, cluster) -> None:
    df = spark.createDataFrame([("sink", "a"), ("other", "b")], "topic string, value string")
    write(df, cluster.bootstrap)
    assert [r[3] for r in file_records(cluster.log_dir, "other", 1)] == [b"b"]
    assert [r[3] for r in file_records(cluster.log_dir)] == [b"a"]
    bad = spark.createDataFrame([("nope", "c")], "topic string, value string")
    with pytest.raises(PySparkException, match="topic 'nope' does not exist in Kafka cluster"):
        write(bad, cluster.bootstrap)


@pytest.mark.parametrize(
    "ddl, options, message",
    [
        ("value int", {"topic": TOPIC}, "column 'value' has type int"),
        ("value string, key bigint", {"topic": TOPIC}, "column 'key' has type bigint"),
        ("value string, partition bigint", {"topic": TOPIC}, "column 'partition' has type bigint"),
        ("value string", {"topic": "nope"}, "topic 'nope' does not exist in Kafka cluster"),
        ("value string", {"topic": TOPIC, "kafka.acks": "1"}, "kafka.acks='1' is not supported"),
        (
            "value string",
            {"topic": TOPIC, "kafka.key.serializer": "x"},
            "Kafka option 'key.serializer' is not supported",
        ),
        ("value string", {"topic": TOPIC, "path": "/tmp/x"}, "are both given: pick one"),
    ],
)
def test_bad_columns_and_options_are_refused_naming_them(
    spark, cluster, ddl: str, options: dict, message: str
) -> None:
    with pytest.raises(PySparkException, match=message):
        write(spark.createDataFrame([], ddl), cluster.bootstrap, **options)
    assert file_records(cluster.log_dir) == []


def run_stream(df, bootstrap: str, ckpt: Path, **options: str):
    q = (
        df.writeStream.format("kafkalog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", TOPIC)
        .option("checkpointLocation", str(ckpt))
        .options(**options)
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination(120)
    assert q.exception() is None, q.exception()
    return q


def test_a_stream_is_at_least_once_a_replayed_batch_is_there_twice(
    spark, cluster, tmp_path: Path
) -> None:
    ckpt = tmp_path / "ckpt"
    run_stream(rate_stream(spark), cluster.bootstrap, ckpt)  # batch 0: values 0..99
    run_stream(rate_stream(spark), cluster.bootstrap, ckpt)  # batch 1: 100..199
    values = Counter(v for *_, v, _ in file_records(cluster.log_dir))
    assert values == Counter(b"%d" % i for i in range(200))
    # as if the query died after its tasks produced batch 1 and before Spark's commit log
    # entry: Spark runs batch 1 again at the restart (same offsets, same rows), then batch 2
    for name in ("1", ".1.crc"):
        (ckpt / "commits" / name).unlink()
    again = run_stream(rate_stream(spark), cluster.bootstrap, ckpt)
    assert {p["batchId"]: p["numInputRows"] for p in again.recentProgress} == {1: 100, 2: 100}
    got = Counter(v for *_, v, _ in file_records(cluster.log_dir))
    # every row at least once; the duplicates are exactly batch 1's rows
    assert got - Counter(b"%d" % i for i in range(300)) == Counter(
        b"%d" % i for i in range(100, 200)
    )
    assert set(got) == {b"%d" % i for i in range(300)}
    for p, _, k, v, _ in file_records(cluster.log_dir):
        assert k == v and p == kafka_python_partition(k, TOPIC, PARTITIONS)


def test_a_timestamp_column_sets_create_time_over_the_protocol(spark, cluster) -> None:
    at = dt.datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=dt.UTC)
    rows = [(b"a", at), (b"b", dt.datetime(1970, 1, 1, 0, 0, 0, 999, tzinfo=dt.UTC)), (b"c", None)]
    df = spark.createDataFrame(rows, "value binary, timestamp timestamp").coalesce(1)
    before = int(time.time() * 1000)
    write(df, cluster.bootstrap, topic="other")
    after = int(time.time() * 1000)
    seconds = spark.createDataFrame([(b"d", 1_700_000_000.9876)], "value binary, timestamp double")
    write(seconds, cluster.bootstrap, topic="other")
    got = consume(cluster.bootstrap, "other", 1, "read_uncommitted")
    from confluent_kafka import TIMESTAMP_CREATE_TIME as create_time

    assert [(v, t) for _, _, v, t, _ in got] == [(v, create_time) for v in (b"a", b"b", b"c", b"d")]
    ms = {v: m for _, _, v, _, m in got}
    assert (ms[b"a"], ms[b"b"], ms[b"d"]) == (1_714_979_289_123, 0, 1_700_000_000_987)
    assert before <= ms[b"c"] <= after  # a null timestamp: the write's wall-clock time
