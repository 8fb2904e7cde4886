"""The ``kafkalog`` source and sink on Apache Kafka 3.9 (the data source tests' own broker,
conftest.py's ``datasource_kafka``; skipped without it), checked against confluent-kafka's reads
of the same topics (read_committed and read_uncommitted): what the protocol sink writes, at least
once and with transactions; a streaming query from one Kafka topic into another; transactions
that confluent-kafka committed, aborted and left open; LogAppendTime. Each test has topics of
its own. (The peer subset of conftest.py and the group tests run on this broker too.)"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest
from pyspark.errors import PySparkException

from broker_embedded.client.kafka_client import KafkaClient
from tests.broker_embedded.server._consume import consume
from tests.datasource._logdirs import spark_rows
from tests.datasource.conftest import await_available_now, sql_conf
from tests.datasource.test_wire_writer import ROWS, write
from tests.datasource.test_writer import kafka_python_partition

PARTITIONS = 3


def new_topic(bootstrap: str, name: str, partitions: int = PARTITIONS) -> str:
    with KafkaClient(bootstrap) as client:
        client.create_topic(name, partitions, 1, {})
    return name


def await_markers(bootstrap: str, topic: str, timeout_s: float = 60.0) -> None:
    """Wait until no transaction is open on ``topic``: each partition's last stable offset is
    its log end offset. Kafka 3.9 answers EndTxn once the commit is decided and writes the
    partitions' markers after, so a read_committed read right after a transactional write may
    end below its records until then."""
    deadline = time.monotonic() + timeout_s
    with KafkaClient(bootstrap) as client:
        while True:
            ends = [
                (
                    client.list_offset(topic, p, -1, isolation_level=1),
                    client.list_offset(topic, p, -1),
                )
                for p in range(PARTITIONS)
            ]
            if all(stable == end for stable, end in ends):
                return
            assert time.monotonic() < deadline, f"{topic}: transactions still open: {ends}"
            time.sleep(0.05)


def read_back(spark, bootstrap: str, topic: str, **options: str) -> list:
    return spark_rows(
        spark.read.format("kafkalog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("includeHeaders", "true")
        .options(**options)
        .load()
    )


def test_a_batch_write_reads_back_exactly(spark, datasource_kafka: str) -> None:
    topic = new_topic(datasource_kafka, "k39-sink-exact")
    df = spark.createDataFrame(
        ROWS,
        "key string, value string, partition int, headers array<struct<key:string,value:binary>>",
    ).coalesce(1)
    before = int(time.time() * 1000)
    write(df, datasource_kafka, topic=topic)
    after = int(time.time() * 1000)

    def where(k, p):
        return p if p is not None else kafka_python_partition(k.encode(), topic, PARTITIONS)

    expected = Counter(
        (where(k, p), k and k.encode(), v and v.encode(), tuple(h)) for k, v, p, h in ROWS
    )
    by_kafka = consume(datasource_kafka, topic, PARTITIONS, "read_uncommitted")
    assert Counter((p, k, v) for p, k, v, _, _ in by_kafka) == Counter(
        (p, k, v) for p, k, v, _ in expected.elements()
    )
    assert all(t == 1 and before <= ts <= after for *_, t, ts in by_kafka)  # CreateTime
    got = read_back(spark, datasource_kafka, topic)
    assert Counter((r.partition, r.key, r.value, r.headers) for r in got) == expected
    for p in range(PARTITIONS):  # one task, one producer: offsets from 0 in input order
        offsets = [r.offset for r in got if r.partition == p]
        assert offsets == list(range(len(offsets)))


def test_transactions_commit_each_task_and_abort_a_failed_write(spark, datasource_kafka) -> None:
    topic = new_topic(datasource_kafka, "k39-sink-txn")
    df = spark.range(3000).selectExpr("CAST(id AS STRING) AS key", "CAST(id AS STRING) AS value")
    write(df.repartition(2), datasource_kafka, topic=topic, transactionalIdPrefix="k39-eos")
    await_markers(datasource_kafka, topic)
    want = Counter(b"%d" % i for i in range(3000))

    def values(isolation: str) -> Counter:
        return Counter(
            v for _, _, v, _, _ in consume(datasource_kafka, topic, PARTITIONS, isolation)
        )

    assert values("read_committed") == want
    rows = [(b"bad-%d" % i, 0) for i in range(200)] + [(b"bad", 7)]  # partition 7: none
    bad = spark.createDataFrame(rows, "value binary, partition int").coalesce(1)
    with (
        sql_conf(spark, "spark.sql.execution.arrow.maxRecordsPerBatch", "50"),
        pytest.raises(PySparkException, match=f"row with partition 7 for topic '{topic}'"),
    ):
        write(bad, datasource_kafka, topic=topic, transactionalIdPrefix="k39-eos")
    await_markers(datasource_kafka, topic)
    assert values("read_committed") == want
    assert values("read_uncommitted") == want + Counter(b"bad-%d" % i for i in range(200))
    committed = read_back(
        spark, datasource_kafka, topic, **{"kafka.isolation.level": "read_committed"}
    )
    assert Counter(r.value for r in committed) == want


def test_a_stream_from_one_kafka_topic_into_another(spark, datasource_kafka, tmp_path: Path):
    source = new_topic(datasource_kafka, "k39-stream-in")
    target = new_topic(datasource_kafka, "k39-stream-out")
    df = spark.range(900).selectExpr("CAST(id AS STRING) AS key", "CAST(id AS STRING) AS value")
    write(df.repartition(3), datasource_kafka, topic=source)
    q = (
        spark.readStream.format("kafkalog")
        .option("kafka.bootstrap.servers", datasource_kafka)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "250")
        .load()
        .selectExpr("key", "value", "partition")
        .writeStream.format("kafkalog")
        .option("kafka.bootstrap.servers", datasource_kafka)
        .option("topic", target)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    assert await_available_now(q), "availableNow did not stop"
    assert q.exception() is None
    assert sum(p["numInputRows"] for p in q.recentProgress) == 900
    assert len(q.recentProgress) >= 4  # 250 offsets a trigger
    copied = consume(datasource_kafka, target, PARTITIONS, "read_uncommitted")
    original = consume(datasource_kafka, source, PARTITIONS, "read_uncommitted")
    assert Counter((p, k, v) for p, k, v, _, _ in copied) == Counter(
        (p, k, v) for p, k, v, _, _ in original
    )
    assert len(copied) == 900


def test_read_committed_hides_aborted_and_open_transactions(spark, datasource_kafka) -> None:
    """Written by confluent-kafka: plain records, a committed and an aborted transaction, and
    one left open (its producer gone): read_committed stops at the last stable offset."""
    from confluent_kafka import Producer

    topic = new_topic(datasource_kafka, "k39-txn", partitions=1)
    settings = {"bootstrap.servers": datasource_kafka, "message.timeout.ms": 30_000}
    plain = Producer(settings)
    txn = Producer({**settings, "transactional.id": "k39-txn-a"})
    txn.init_transactions(60)
    for name, end in (("commit", txn.commit_transaction), ("abort", txn.abort_transaction)):
        txn.begin_transaction()
        for i in range(3):
            txn.produce(topic, value=b"%s-%d" % (name.encode(), i), partition=0)
        assert txn.flush(60) == 0  # an abort purges what is not sent yet
        end(60)
        plain.produce(topic, value=b"plain-" + name.encode(), partition=0)
        assert plain.flush(60) == 0
    left = Producer(
        {**settings, "transactional.id": "k39-txn-open", "transaction.timeout.ms": 900_000}
    )
    left.init_transactions(60)
    left.begin_transaction()
    left.produce(topic, value=b"open-0", partition=0)
    assert left.flush(60) == 0  # produced, never committed while the test runs
    plain.produce(topic, value=b"plain-after", partition=0)
    assert plain.flush(60) == 0

    def by_spark(isolation: str) -> list[bytes]:
        rows = read_back(spark, datasource_kafka, topic, **{"kafka.isolation.level": isolation})
        return [r.value for r in rows]

    def by_kafka(isolation: str) -> list[bytes]:
        return [v for _, _, v, _, _ in consume(datasource_kafka, topic, 1, isolation)]

    committed = [b"commit-0", b"commit-1", b"commit-2", b"plain-commit", b"plain-abort"]
    assert by_kafka("read_committed") == committed
    assert by_spark("read_committed") == committed
    everything = by_kafka("read_uncommitted")
    assert everything == committed[:4] + [
        b"abort-0",
        b"abort-1",
        b"abort-2",
        b"plain-abort",
        b"open-0",
        b"plain-after",
    ]
    assert by_spark("read_uncommitted") == everything


def test_log_append_time_is_the_brokers(spark, datasource_kafka) -> None:
    with KafkaClient(datasource_kafka) as client:
        client.create_topic("k39-appendtime", 1, 1, {"message.timestamp.type": "LogAppendTime"})
    df = spark.createDataFrame([("a",), ("b",)], "value string").coalesce(1)
    write(df, datasource_kafka, topic="k39-appendtime")
    by_kafka = consume(datasource_kafka, "k39-appendtime", 1, "read_uncommitted")
    got = read_back(spark, datasource_kafka, "k39-appendtime")
    assert [(r.value, r.timestamp_type, r.timestamp) for r in got] == [
        (v, 1, ts * 1000)
        for _, _, v, t, ts in by_kafka
        if t == 2  # LOG_APPEND_TIME
    ]
    assert len(got) == 2
