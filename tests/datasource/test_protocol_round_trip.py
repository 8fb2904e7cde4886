"""A streaming ``availableNow`` read on every transport (the log dir, ``kafkalog serve`` and
Tansu: conftest.py's ``read_source``) against the log dir's rows, and a write through the wire
sink into Tansu read back by confluent-kafka (an independent client) and by the kafkalog
reader: the same rows, at the same offsets."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from tests.datasource._logdirs import EVENTS_PARTITIONS, expected_rows, partition_facts, spark_rows
from tests.datasource.conftest import ALSO_ON_TANSU, ReadSource, await_available_now

PER_TRIGGER = 500
CONSUME_S = 30.0


@ALSO_ON_TANSU
def test_an_available_now_stream_reads_every_row_in_bounded_batches(
    spark, read_source: ReadSource, tmp_path: Path
) -> None:
    batches: dict[int, list] = {}

    def sink(df, batch_id: int) -> None:
        batches.setdefault(batch_id, spark_rows(df))

    df = read_source.read_stream(
        spark,
        subscribe="events",
        startingOffsets="earliest",
        includeHeaders="true",
        maxOffsetsPerTrigger=str(PER_TRIGGER),
    )
    query = (
        df.writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    assert await_available_now(query), "availableNow did not stop"
    assert query.exception() is None
    want = []
    for p in range(EVENTS_PARTITIONS):
        want += expected_rows(
            partition_facts(read_source.log_dir, "events", p), include_headers=True
        )
    got = sorted((r for b in batches.values() for r in b), key=lambda r: (r.partition, r.offset))
    assert got == want
    assert all(len(rows) <= PER_TRIGGER for rows in batches.values())
    assert len(batches) >= -(-len(want) // PER_TRIGGER)


def test_a_wire_sink_write_into_tansu_reads_back_the_same(spark, tansu_source) -> None:
    topic, partitions = f"written-{uuid.uuid4().hex[:8]}", 3
    rows = [
        (
            f"k{i % 7}",
            f"value-{i}" if i % 11 else None,
            i % partitions,
            [("i", b"%d" % i)] + ([("n", None)] if i % 5 == 0 else []),
        )
        for i in range(300)
    ]
    # Tansu's ListOffsets(latest) counts the last batch as one record (tests/datasource/_tansu.py):
    # a second write of one row per partition makes each partition end with a one-record batch
    tail = [(f"last-{p}", f"tail-{p}", p, [("t", b"%d" % p)]) for p in range(partitions)]
    schema = (
        "key string, value string, partition int, headers array<struct<key:string,value:binary>>"
    )
    _create(tansu_source.bootstrap, topic, partitions)
    for chunk in (rows, tail):
        (
            spark.createDataFrame(chunk, schema)
            .coalesce(1)
            .write.format("kafkalog")
            .mode("append")
            .option("kafka.bootstrap.servers", tansu_source.bootstrap)
            .option("topic", topic)
            .save()
        )
    written = Counter((p, k.encode(), v and v.encode(), tuple(h)) for k, v, p, h in rows + tail)
    consumed = _consume_all(tansu_source.bootstrap, topic, partitions, sum(written.values()))
    assert Counter((p, k, v, h) for p, _, k, v, h in consumed) == written
    back = spark_rows(tansu_source.load(spark, subscribe=topic, includeHeaders="true"))
    assert [(r.partition, r.offset, r.key, r.value, r.headers) for r in back] == consumed


def _create(bootstrap: str, topic: str, partitions: int) -> None:
    from broker_embedded.client.kafka_client import KafkaClient

    with KafkaClient(bootstrap) as client:
        client.create_topic(topic, partitions, 1, {})


def _consume_all(bootstrap: str, topic: str, partitions: int, count: int) -> list[tuple]:
    """(partition, offset, key, value, headers) of ``count`` records, by confluent-kafka,
    sorted by partition and offset; fails after :data:`CONSUME_S` seconds."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{uuid.uuid4()}",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out, deadline = [], time.monotonic() + CONSUME_S
    try:
        while len(out) < count and time.monotonic() < deadline:
            for m in consumer.consume(count - len(out), 0.5):
                assert m.error() is None, m.error()
                headers = tuple(m.headers() or ())
                out.append((m.partition(), m.offset(), m.key(), m.value(), headers))
    finally:
        consumer.close()
    assert len(out) == count, f"confluent-kafka consumed {len(out)} of {count} records"
    return sorted(out, key=lambda r: r[:2])
