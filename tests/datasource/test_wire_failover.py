"""Leader failover under a read over the Kafka protocol: ``kafkalog serve --brokers 3`` in a
child process, a topic replicated on the three brokers, and the partition leader killed
(``kill ID`` on the child's stdin, then ``start ID`` once another broker leads) in the middle of
a read:

- the wire fetch source alone, between two fetches of one range;
- a batch query's executor read (``KafkaBatchReader.read``, what Spark runs on executors),
  planned before the kill and read after it;
- a streaming query over the wire whose leader is killed between micro-batches while records
  keep arriving;
- a whole ``spark.read`` job whose task is held after its first Arrow batch while the leader of
  its partition is killed.

Each time every record is read exactly once, in offset order, with the values produced. Every
wait is bounded (the helpers' timeouts; the client's retries are bounded in count and time)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from broker_embedded.client.kafka_client import KafkaClient
from broker_embedded.client.wire_fetch_source import WireSource
from broker_embedded.common.producer_record import ProducerRecord, build_batch
from broker_embedded.record.columnar_decoder import decode
from broker_embedded.storage.fetch_data_info import IsolationLevel
from broker_embedded.storage.topic_partition import TopicPartition
from datasource import offset_range_reader
from datasource.kafka_batch_reader import KafkaBatchReader
from datasource.kafka_source_options import KafkaSourceOptions
from tests.spark_kafkalog._serve_proc import ServeProcess

pytest.importorskip("kio", reason="kafkalog serve needs kio (Python 3.11+)")

TOPIC, PARTITIONS, BROKERS = "failover", 2, 3
ISR_TIMEOUT_S = 30.0
PER_BATCH = 50  # records per produced batch


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ServeProcess]:
    with ServeProcess(tmp_path / "c", brokers=BROKERS, stderr=tmp_path / "err") as server:
        with KafkaClient(server.bootstrap) as client:
            client.create_topic(TOPIC, PARTITIONS, BROKERS, {"min.insync.replicas": "2"})
        wait_for_full_isr(server.bootstrap)
        yield server


def wait_for_full_isr(bootstrap: str) -> dict[int, int]:
    """Wait (bounded) until every partition has every broker in its ISR; the leaders."""
    deadline = time.monotonic() + ISR_TIMEOUT_S
    while True:
        with KafkaClient(bootstrap) as client:
            (info,) = client.metadata([TOPIC])
        if all(len(p.isr) == BROKERS and p.leader >= 0 for p in info.partitions):
            return {p.partition: p.leader for p in info.partitions}
        assert time.monotonic() < deadline, f"ISR not full after {ISR_TIMEOUT_S} s: {info}"
        time.sleep(0.2)


def value(partition: int, i: int, repeat: int = 4) -> bytes:
    return b"p%d-%06d" % (partition, i) * repeat


def produce(
    bootstrap: str, first: int, count: int, per_batch: int = PER_BATCH, repeat: int = 4
) -> None:
    """Records ``first .. first+count-1`` of every partition, acks=all, in batches."""
    with KafkaClient(bootstrap) as client:
        for p in range(PARTITIONS):
            for lo in range(first, first + count, per_batch):
                records = [
                    ProducerRecord(value(p, i, repeat))
                    for i in range(lo, min(lo + per_batch, first + count))
                ]
                client.produce(
                    TOPIC, p, build_batch(records, now_ms=int(time.time() * 1000)), acks=-1
                )


def wait_for_full_isr_without(server: ServeProcess, gone: int) -> dict[int, int]:
    """The leaders once the brokers but ``gone`` are in sync (``gone`` no longer leads)."""
    deadline = time.monotonic() + ISR_TIMEOUT_S
    while True:
        with KafkaClient(server.bootstrap) as client:
            (info,) = client.metadata([TOPIC])
        if all(gone not in p.isr and p.leader >= 0 for p in info.partitions):
            return {p.partition: p.leader for p in info.partitions}
        assert time.monotonic() < deadline, f"{gone} still in the ISR: {info}"
        time.sleep(0.2)


def kill_leader(server: ServeProcess, partition: int = 0) -> int:
    """Kill the leader of ``partition`` (once every replica is in sync), wait until another
    broker leads, then start it again (it catches up as a follower); the killed broker."""
    leader = wait_for_full_isr(server.bootstrap)[partition]
    assert server.control(f"kill {leader}").startswith(f"broker {leader} ")
    assert wait_for_full_isr_without(server, leader)[partition] != leader
    assert server.control(f"start {leader}").startswith(f"broker {leader} listening")
    return leader


def test_a_fetch_goes_on_at_the_new_leader_from_the_same_offset(cluster: ServeProcess) -> None:
    produce(cluster.bootstrap, 0, 600)
    tp, isolation = TopicPartition(TOPIC, 0), IsolationLevel.READ_UNCOMMITTED
    values: list[bytes] = []
    offset, killed = 0, None
    with WireSource(cluster.bootstrap, retry_timeout_ms=20_000).open() as source:
        while offset < 600:
            if offset >= 300 and killed is None:
                killed = kill_leader(cluster)
            fetched = source.fetch(tp, offset, 2048, isolation)
            decoded = decode(fetched.records, topic=TOPIC, partition=0, start_offset=offset)
            values += [v for b in decoded.batches for v in b.column("value").to_pylist()]
            assert decoded.next_offset > offset
            offset = decoded.next_offset
    assert values == [value(0, i) for i in range(600)]
    assert killed is not None


def test_a_planned_batch_read_survives_the_leader_killed(
    cluster: ServeProcess, monkeypatch
) -> None:
    # rows handed out after each fetch (not joined into one Arrow batch), so that the kill
    # falls between two fetches of the range
    monkeypatch.setattr(offset_range_reader, "COALESCE_ROWS", 20)
    produce(cluster.bootstrap, 0, 400)
    options = KafkaSourceOptions.parse(
        {
            "kafka.bootstrap.servers": cluster.bootstrap,
            "subscribe": TOPIC,
            "kafka.max.partition.fetch.bytes": "1024",
            "kafka.default.api.timeout.ms": "20000",
            "packBytesPerPartition": "0",  # a task per partition: a kill under each
        }
    )
    reader = KafkaBatchReader(options)
    planned = reader.partitions()
    assert [(p.partition, p.start, p.end) for p in planned] == [(0, 0, 400), (1, 0, 400)]
    got: dict[int, list[bytes]] = {}
    for part in planned:
        batches = reader.read(part)
        first = next(batches)  # the read has begun: kill the leader under it
        kill_leader(cluster, part.partition)
        assert first.num_rows == PER_BATCH  # one fetch: one produced batch (KIP-74)
        rows = [first, *batches]
        got[part.partition] = [v for b in rows for v in b.column("value").to_pylist()]
    assert got == {p: [value(p, i) for i in range(400)] for p in range(PARTITIONS)}


def test_a_streaming_query_survives_the_leader_killed(spark, cluster, tmp_path: Path) -> None:
    produce(cluster.bootstrap, 0, 200)
    seen: dict[int, list[tuple[int, int, bytes]]] = {}

    def sink(df, batch_id: int) -> None:
        rows = df.select("partition", "offset", "value").collect()
        seen[batch_id] = [(r.partition, r.offset, bytes(r.value)) for r in rows]

    df = (
        spark.readStream.format("kafkalog")
        .option("kafka.bootstrap.servers", cluster.bootstrap)
        .option("subscribe", TOPIC)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "150")
        .option("kafka.default.api.timeout.ms", "20000")
        .load()
    )
    query = (
        df.writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        wait_for(lambda: len(seen) >= 1, 60, "a first batch")
        kill_leader(cluster, 0)
        produce(cluster.bootstrap, 200, 200)
        kill_leader(cluster, 1)
        produce(cluster.bootstrap, 400, 100)
        wait_for(lambda: sum(map(len, seen.values())) >= 1000, 90, "every record")
        time.sleep(0.5)  # nothing more may come
    finally:
        query.stop()
    assert query.exception() is None
    rows = [r for b in sorted(seen) for r in seen[b]]
    for p in range(PARTITIONS):
        mine = [(o, v) for q, o, v in rows if q == p]
        assert [v for _, v in mine] == [value(p, i) for i in range(500)]
        assert [o for o, _ in mine] == sorted(o for o, _ in mine)


def wait_for(check, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(0.1)


def test_a_spark_batch_job_survives_the_leader_killed(spark, cluster, tmp_path: Path) -> None:
    """A whole ``spark.read`` job: partition 0's task stops at the first row of its second
    Arrow batch (of four; ``COALESCE_BYTES`` each) until the test has killed that
    partition's leader, so the rest of its range is fetched from the new leader through the
    executor's retry."""
    from pyspark.sql import functions as F

    per_partition, repeat = 65536, 12  # 432-byte values: Arrow batches of 16384 rows (8 MiB)
    produce(cluster.bootstrap, 0, per_partition, per_batch=4096, repeat=repeat)
    started, resumed = tmp_path / "started", tmp_path / "resumed"

    def gate(partition, offset):
        if (partition, offset) == (0, per_partition // 4):
            started.touch()
            deadline = time.monotonic() + 120
            while not resumed.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
        return 0

    df = (
        spark.read.format("kafkalog")
        .option("kafka.bootstrap.servers", cluster.bootstrap)
        .option("subscribe", TOPIC)
        .option("kafka.default.api.timeout.ms", "20000")
        .load()
    )
    expected = F.repeat(F.format_string("p%d-%06d", "partition", "offset"), repeat)
    job = (
        df.withColumn("gate", F.udf(gate, "int", useArrow=False)("partition", "offset"))
        .groupBy("partition")
        .agg(
            F.count("*").alias("n"),
            F.count_distinct("offset").alias("distinct"),
            F.min("offset").alias("lo"),
            F.max("offset").alias("hi"),
            F.sum((F.col("value").cast("string") != expected).cast("int") + F.col("gate")).alias(
                "wrong"
            ),
        )
    )
    result: list = []
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(lambda: result.extend(job.orderBy("partition").collect()))
        wait_for(lambda: started.exists() or running.done(), 120, "the first Arrow batch")
        assert not running.done(), running.exception()
        kill_leader(cluster, 0)
        resumed.touch()
        running.result(timeout=180)
    assert [tuple(r) for r in result] == [
        (p, per_partition, per_partition, 0, per_partition - 1, 0) for p in range(PARTITIONS)
    ]
