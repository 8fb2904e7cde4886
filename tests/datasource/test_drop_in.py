"""Switching ``format("kafka")`` to ``format("kafkalog")``: the cases where kafkalog used to differ
from Spark's Kafka connector (Spark 4.x, its Admin-based offset reader), each now as Spark does
it, checked end to end with a real SparkSession (reads on both transports, ``read_source``) and
against an independent reading of the files (kafka-python, tests/datasource/_logdirs.py):

- a record without headers reads back ``headers = null`` (KafkaRecordToRowConverter), also after
  a write of null or empty headers;
- the writer's ``topic`` option is trimmed (KafkaSourceProvider: ``.map(_.trim)``);
- streaming limits in a batch query only warn (KafkaSourceProvider.validateBatchOptions);
- ``assign`` naming a partition its topic does not have: left out (ConsumerStrategy's
  AssignStrategy filters the topic's partitions by the assignment);
- a ``timestamp`` column sets the record timestamp (KafkaWriteTask, SPARK-50160).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from pyspark.errors import PySparkException

from broker_embedded.broker import Broker
from datasource import kafka_source_options
from datasource.errors import InvalidOptionError
from datasource.kafka_source_options import KafkaSourceOptions
from datasource.kafka_write_options import KafkaWriteOptions
from datasource.offsets_behind_latest import java_double, offsets_behind_latest
from datasource.write_timestamps import InvalidTimestampError, record_timestamps
from tests.datasource._logdirs import (
    EVENTS_PARTITIONS,
    expected_rows,
    partition_facts,
    spark_rows,
)
from tests.datasource.conftest import ALSO_ON_TANSU, ReadSource, await_available_now

HEADERS_DDL = "array<struct<key:string,value:binary>>"
UTC = dt.timezone.utc


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    """``t`` (1 partition), empty."""
    d = tmp_path / "logdir"
    with Broker(d, create=True) as b:
        b.create_topic("t", 1)
    return d


def write(df, log_dir: Path, **options: str) -> None:
    df.coalesce(1).write.format("kafkalog").mode("append").options(**options).save(str(log_dir))


def read_back(spark, log_dir: Path) -> list:
    """(value, headers, timestamp ms) of topic t in offset order, as Spark reads them."""
    df = (
        spark.read.format("kafkalog")
        .option("subscribe", "t")
        .option("includeHeaders", "true")
        .load(str(log_dir))
    )
    table = df.sort("offset").toArrow()
    ms = table.column("timestamp").cast(pa.int64()).to_pylist()
    return list(
        zip(
            table.column("value").to_pylist(),
            table.column("headers").to_pylist(),
            [us // 1000 for us in ms],
            strict=True,
        )
    )


# -- headers = null -------------------------------------------------------------------------------


@ALSO_ON_TANSU
def test_a_record_without_headers_reads_back_null(spark, read_source: ReadSource) -> None:
    table = read_source.load(spark, subscribe="events", includeHeaders="true").toArrow()
    got = {
        (p, o): h
        for p, o, h in zip(
            table.column("partition").to_pylist(),
            table.column("offset").to_pylist(),
            table.column("headers").to_pylist(),
            strict=True,
        )
    }
    want = {}
    for p in range(EVENTS_PARTITIONS):
        facts = partition_facts(read_source.log_dir, "events", p)
        for r in expected_rows(facts, include_headers=True):
            headers = [{"key": k, "value": v} for k, v in r.headers]
            want[(p, r.offset)] = headers or None
    assert got == want
    assert sum(h is None for h in got.values()) > 100 and sum(h is not None for h in got.values())


def test_null_and_empty_headers_written_read_back_null(spark, log_dir: Path) -> None:
    rows = [(b"a", None), (b"b", []), (b"c", [("h", b"1"), ("n", None)])]
    write(spark.createDataFrame(rows, f"value binary, headers {HEADERS_DDL}"), log_dir, topic="t")
    got = [(v, h) for v, h, _ in read_back(spark, log_dir)]
    assert got == [
        (b"a", None),
        (b"b", None),
        (b"c", [{"key": "h", "value": b"1"}, {"key": "n", "value": None}]),
    ]


# -- the writer's topic option, trimmed -----------------------------------------------------------


def test_the_topic_option_is_trimmed_as_java_trims_it(spark, log_dir: Path) -> None:
    write(spark.createDataFrame([(b"v",)], "value binary"), log_dir, topic=" \t t\n\x00")
    assert [v for v, _, _ in read_back(spark, log_dir)] == [b"v"]
    assert KafkaWriteOptions.parse({"path": "/x", "topic": "\x1f t "}).topic == "t"
    # Java's trim stops at U+0020: a no-break space stays, and is no valid topic character
    with pytest.raises(InvalidOptionError, match=re.escape("option topic='\\xa0t'")):
        KafkaWriteOptions.parse({"path": "/x", "topic": "\u00a0t"})


# -- streaming limits in a batch query ------------------------------------------------------------

LIMITS = {
    "maxOffsetsPerTrigger": "5",
    "minOffsetsPerTrigger": "2",
    "maxTriggerDelay": "1m",
    "maxBytesPerTrigger": "1k",
}


def test_streaming_limits_in_a_batch_query_warn_once(caplog: pytest.LogCaptureFixture) -> None:
    kafka_source_options._WARNED.clear()
    with caplog.at_level(logging.WARNING):
        for _ in range(2):
            o = KafkaSourceOptions.parse(
                {"path": "/logs", "subscribe": "events", **LIMITS}, streaming=False
            )
    assert sorted(r.getMessage() for r in caplog.records) == [
        "maxBytesPerTrigger option ignored in batch queries",
        "maxOffsetsPerTrigger option ignored in batch queries",
        "maxTriggerDelay option ignored in batch queries",
        "minOffsetsPerTrigger option ignored in batch queries",
    ]
    default = KafkaSourceOptions.parse({"path": "/logs", "subscribe": "events"}, streaming=False)
    assert o == default


@ALSO_ON_TANSU
def test_streaming_limits_in_a_batch_query_read_every_row(spark, read_source: ReadSource) -> None:
    got = spark_rows(read_source.load(spark, subscribe="events", **LIMITS))
    want = []
    for p in range(EVENTS_PARTITIONS):
        want += expected_rows(partition_facts(read_source.log_dir, "events", p))
    assert got == want


# -- assign: a partition the topic does not have --------------------------------------------------


def test_assign_leaves_out_a_partition_the_topic_lacks(spark, read_source: ReadSource) -> None:
    got = spark_rows(read_source.load(spark, assign='{"events":[2,9],"txn":[0]}'))
    want = expected_rows(partition_facts(read_source.log_dir, "events", 2))
    want += expected_rows(partition_facts(read_source.log_dir, "txn", 0))
    assert got == want and len(want) > 700
    assert spark_rows(read_source.load(spark, assign='{"events":[7,9]}')) == []
    with pytest.raises(PySparkException, match="topic nope does not exist"):
        read_source.load(spark, assign='{"events":[0],"nope":[0]}').collect()


# -- a timestamp column ---------------------------------------------------------------------------


def test_a_timestamp_column_sets_the_record_timestamp(spark, log_dir: Path) -> None:
    at = dt.datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
    rows = [(b"a", at), (b"b", None), (b"c", dt.datetime(1970, 1, 1, 0, 0, 0, 999, tzinfo=UTC))]
    before = int(dt.datetime.now(UTC).timestamp() * 1000)
    write(spark.createDataFrame(rows, "value binary, timestamp timestamp"), log_dir, topic="t")
    after = int(dt.datetime.now(UTC).timestamp() * 1000)
    seconds = [(b"d", 1_700_000_000.9876), (b"e", None), (b"f", 0.0)]
    write(spark.createDataFrame(seconds, "value binary, timestamp double"), log_dir, topic="t")
    got = read_back(spark, log_dir)
    assert [(v, ms) for v, _, ms in got if v != b"b" and v != b"e"] == [
        (b"a", 1_714_979_289_123),  # microseconds dropped
        (b"c", 0),
        (b"d", 1_700_000_000_987),
        (b"f", 0),
    ]
    stamped = {v: ms for v, _, ms in got if v in (b"b", b"e")}
    assert before - 1000 <= stamped[b"b"] <= after and stamped[b"e"] >= stamped[b"b"]
    # facts from kafka-python's parser: CreateTime, the same timestamps
    facts = partition_facts(log_dir, "t", 0)
    assert [(r.value, r.timestamp // 1000, r.timestamp_type) for r in facts.rows] == [
        (v, ms, 0) for v, _, ms in got
    ]


@pytest.mark.parametrize(
    ("ddl", "value", "message"),
    [
        ("value binary, timestamp bigint", 5, "column 'timestamp' has type bigint"),
        ("value binary, timestamp string", "x", "column 'timestamp' has type string"),
        ("value binary, timestamp double", -1.5, "-1.5 is before 1970-01-01"),
        ("value binary, timestamp double", float("nan"), "nan is not a timestamp"),
    ],
)
def test_bad_timestamps_are_refused_naming_the_column(
    spark, log_dir: Path, ddl: str, value: object, message: str
) -> None:
    df = spark.createDataFrame([(b"v", value)], ddl)
    with pytest.raises(PySparkException, match=re.escape(message)):
        write(df, log_dir, topic="t")
    assert read_back(spark, log_dir) == []


def test_record_timestamps_truncate_toward_zero_as_spark() -> None:
    micros = pa.array([1_500, 999, -999, None, 2_000], pa.timestamp("us", "UTC"))
    got = record_timestamps(micros, 5, 77)
    assert got.dtype == np.int64 and got.tolist() == [1, 0, 0, 77, 2]
    seconds = pa.array([0.0015, 1e-7, -0.0009, None], pa.float64())
    assert record_timestamps(seconds, 4, 77).tolist() == [1, 0, 0, 77]
    assert record_timestamps(None, 3, 5).tolist() == [5, 5, 5]
    nanos = pa.array([1_234_567_890], pa.timestamp("ns"))
    assert record_timestamps(nanos, 1, 0).tolist() == [1234]
    with pytest.raises(InvalidTimestampError, match="out of range"):
        record_timestamps(pa.array([1e300]), 1, 0)


# -- offsets behind latest ------------------------------------------------------------------------


def test_progress_shows_the_latest_offsets_beside_the_end(
    spark, read_source: ReadSource, tmp_path: Path
) -> None:
    """Spark's Kafka source reports ``*OffsetsBehindLatest`` as source metrics; PySpark 4.3 gives
    a Python stream reader no way to report metrics, so the lag is read from each progress's
    ``latestOffset`` (``reportLatestOffset``, the uncapped latest offsets) minus ``endOffset``."""
    hw = {p: partition_facts(read_source.log_dir, "events", p).high_watermark for p in range(3)}
    df = read_source.read_stream(
        spark, subscribe="events", startingOffsets="earliest", maxOffsetsPerTrigger="800"
    )
    q = (
        df.writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    assert await_available_now(q)
    assert q.exception() is None
    sources = [p["sources"][0] for p in q.recentProgress if p["numInputRows"]]
    latest = {str(p): hw[p] for p in range(3)}
    assert [json.loads(s["latestOffset"]) for s in sources] == [{"events": latest}] * len(sources)
    behind = [
        sum(hw[int(p)] - o for p, o in json.loads(s["endOffset"])["events"].items())
        for s in sources
    ]
    # Spark's rateLimit rounds each share down: 800 * (708, 701, 710) / 2119 = 267 + 264 + 268
    assert behind[0] == sum(hw.values()) - 799 and behind[-1] == 0 and len(behind) == 3
    assert behind == sorted(behind, reverse=True)
    # the connector's metrics, worked out from the progress (datasource/offsets_behind_latest.py)
    assert offsets_behind_latest(sources[0]) == {
        "minOffsetsBehindLatest": "437",
        "maxOffsetsBehindLatest": "442",
        "avgOffsetsBehindLatest": "440.0",
    }


def test_java_double_writes_what_java_writes() -> None:
    """Java 17's ``Double.toString`` of these values (asked of jshell)."""
    values = [0.0, 11.6, 1e7, 12345678.0, 5e-4, 0.001, 9999999.5, 37 / 3, 1e20, 2.5e-5, 1 / 3]
    assert [java_double(x) for x in values] == [
        "0.0",
        "11.6",
        "1.0E7",
        "1.2345678E7",
        "5.0E-4",
        "0.001",
        "9999999.5",
        "12.333333333333334",
        "1.0E20",
        "2.5E-5",
        "0.3333333333333333",
    ]
