"""Spark's own Kafka connector as the reference of the ``kafkalog`` source: the same options given
to ``format("kafka")`` and to ``format("kafkalog")``, both reading Apache Kafka 3.9 (conftest.py's
``kafka_source``: events, empty and trimmed at the offsets of the source log dir) in the same
SparkSession, give the same rows (every column) or both fail. The differences kafkalog keeps on
purpose are asserted as such, each named (docs/user-guide/spark-connector.md).
Streaming: one skewed topic read by both under ``maxOffsetsPerTrigger`` (the same micro-batches,
the same progress offsets, the lag metrics), and an aggregation written in update and complete
mode. Skipped without the connector's jars or Kafka 3.9 (``KAFKALOG_PEERS``)."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest
from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkException

from datasource.offsets_behind_latest import offsets_behind_latest
from tests.datasource._logdirs import T0, TRIMMED_LOG_START, spark_rows
from tests.datasource.conftest import ReadSource, await_available_now, sql_conf


@pytest.fixture(scope="module")
def kafka(spark, kafka_source: ReadSource) -> str:
    if "spark-sql-kafka" not in spark.conf.get("spark.jars", ""):
        pytest.skip("needs Spark's Kafka connector under KAFKALOG_PEERS (spark-kafka/)")
    return kafka_source.bootstrap


def outcome(spark, fmt: str, bootstrap: str, options: dict[str, str]):
    """The rows a batch read gives, or ``"error"`` when it fails (at load or at collect)."""
    try:
        df = spark.read.format(fmt).option("kafka.bootstrap.servers", bootstrap)
        return spark_rows(df.options(**options).load())
    except (PySparkException, Py4JJavaError):
        return "error"


SAME = {  # options both give the same answer to
    "subscribe": {"subscribe": "events", "includeHeaders": "true"},
    "pattern": {"subscribePattern": "e.*"},
    "assign and offsets": {
        "assign": '{"events":[2,0]}',
        "startingOffsets": '{"events":{"0":100,"2":-2}}',
        "endingOffsets": '{"events":{"0":-1,"2":300}}',
    },
    "timestamps": {
        "subscribe": "events",
        "startingTimestamp": str(T0 + 200_000),
        "endingTimestamp": str(T0 + 500_000),
    },
    "timestamps per partition": {
        "assign": '{"events":[1]}',
        "startingOffsetsByTimestamp": f'{{"events":{{"1":{T0 + 300_000}}}}}',
    },
    "timestamp past the end, strategy latest": {
        "subscribe": "events",
        "startingTimestamp": str(T0 + 10**9),
        "startingOffsetsByTimestampStrategy": "latest",
    },
    "below the log start": {"subscribe": "trimmed", "startingOffsets": '{"trimmed":{"0":10}}'},
    # the connector polls for offset 999 until kafkaConsumer.pollTimeoutMs (default 120 s)
    # before it fails; 5 s is as good an answer (kafkalog takes the option and ignores it)
    "ending past the end": {
        "subscribe": "trimmed",
        "endingOffsets": '{"trimmed":{"0":999}}',
        "kafkaConsumer.pollTimeoutMs": "5000",
    },
    "empty topic": {"subscribe": "empty"},
    "read_committed": {"subscribe": "events", "kafka.isolation.level": "read_committed"},
    "no such topic": {"subscribe": "nope"},
    "two strategies": {"subscribe": "events", "assign": '{"events":[0]}'},
}


@pytest.mark.parametrize("case", sorted(SAME))
def test_same_options_same_rows(spark, kafka: str, case: str) -> None:
    options = SAME[case]
    theirs = outcome(spark, "kafka", kafka, options)
    ours = outcome(spark, "kafkalog", kafka, options)
    assert ours == theirs


def test_below_the_log_start_without_failing(spark, kafka: str) -> None:
    """The connector (4.0, on this Spark 4.3) fails where it would warn of the lost offsets
    (``NoClassDefFoundError`` of a logging key Spark 4.3 no longer has); kafkalog reads from the
    log start offset, as the connector does on Spark 4.0."""
    options = {
        "subscribe": "trimmed",
        "startingOffsets": '{"trimmed":{"0":10}}',
        "failOnDataLoss": "false",
    }
    with pytest.raises(Py4JJavaError, match="NoClassDefFoundError.*LogKeys"):
        spark.read.format("kafka").option("kafka.bootstrap.servers", kafka).options(
            **options
        ).load().collect()
    ours = outcome(spark, "kafkalog", kafka, options)
    every = outcome(spark, "kafkalog", kafka, {"subscribe": "trimmed"})
    assert ours == every and ours[0].offset == TRIMMED_LOG_START and len(ours) == 300 - 95


def failure(spark, fmt: str, bootstrap: str, options: dict[str, str]) -> str:
    """Where a batch read fails: ``"load"`` or ``"collect"`` (``"none"`` when it does not)."""
    try:
        df = spark.read.format(fmt).option("kafka.bootstrap.servers", bootstrap)
        df = df.options(**options).load()
    except (PySparkException, Py4JJavaError):
        return "load"
    try:
        df.collect()
    except (PySparkException, Py4JJavaError):
        return "collect"
    return "none"


def test_an_unknown_option_is_refused_where_the_connector_ignores_it(spark, kafka) -> None:
    """Deliberate: a misspelt option (``startingOffset``) would read from the default."""
    options = {"subscribe": "events", "startingOffset": "earliest"}
    assert failure(spark, "kafka", kafka, options) == "none"
    with pytest.raises(PySparkException, match="unknown option startingoffset='earliest'"):
        spark.read.format("kafkalog").option("kafka.bootstrap.servers", kafka).options(
            **options
        ).load()


@pytest.mark.parametrize(
    "options",
    [
        {"startingOffsets": "latest"},
        {"endingOffsets": "earliest"},
        {"startingOffsets": '{"events":"earliest"}'},
    ],
)
def test_offsets_a_batch_cannot_have_fail_at_load_or_at_the_first_action(spark, kafka, options):
    """PySpark's data source API tells a source whether it is read as a batch or a stream only
    when the query runs, not at ``load()``: an error that depends on it comes at the first
    action, where the connector raises it at ``load()``."""
    options = {"subscribe": "events", **options}
    assert failure(spark, "kafka", kafka, options) == "load"
    at_load = "endingOffsets" in options or "{" in options.get("startingOffsets", "")
    assert failure(spark, "kafkalog", kafka, options) == ("load" if at_load else "collect")


# -- streaming: the same stream read by both ------------------------------------------------------

SKEWED = "parity-skewed"
BACKLOGS = (57, 9, 2, 0, 1)  # records per partition: a hot one, small ones, an empty one
PER_TRIGGER = "10"
# the sink tests' limit: two micro-batches, (33, 5, 1, 0, 1) then the rest (35 offsets, under the
# limit), enough for complete mode to append a result twice where update appends once; each
# micro-batch of a stateful query costs seconds (PER_TRIGGER's would be 8)
SINK_PER_TRIGGER = "40"
SINK_BATCHES = 2


@dataclass(frozen=True)
class Run:
    """One availableNow run over :data:`SKEWED`: the ``sources[0]`` of each batch's progress."""

    sources: list[dict]

    def offsets(self, key: str) -> list[dict | None]:
        return [None if s[key] is None else json.loads(s[key]) for s in self.sources]


def produce_skewed(bootstrap: str) -> None:
    from confluent_kafka import Producer

    from broker_embedded.client.kafka_client import KafkaClient

    with KafkaClient(bootstrap) as client:
        client.create_topic(SKEWED, len(BACKLOGS), 1, {})
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for partition, n in enumerate(BACKLOGS):
        for i in range(n):
            producer.produce(SKEWED, b"v%d-%d" % (partition, i), partition=partition)
    assert producer.flush(60) == 0


# The connector's micro-batch stream (KafkaMicroBatchStream, 4.0) fails on Spark 4.3 at a new
# query's second initialOffset (NoSuchMethodError: SerializedOffset.<init>(String), the class Spark
# 4.3 moved); its V1 source (KafkaSource: the same rateLimit, offsets and progress, but no source
# metrics) runs, so the connector's streams here are V1 ones.
V1_KAFKA = (
    "spark.sql.streaming.disabledV2MicroBatchReaders",
    "org.apache.spark.sql.kafka010.KafkaSourceProvider",
)


def run_stream(spark, fmt: str, bootstrap: str, checkpoint: Path, **options: str) -> Run:
    if fmt == "kafka":
        with sql_conf(spark, *V1_KAFKA):
            return _run_stream(spark, fmt, bootstrap, checkpoint, **options)
    return _run_stream(spark, fmt, bootstrap, checkpoint, **options)


def _run_stream(spark, fmt: str, bootstrap: str, checkpoint: Path, **options: str) -> Run:
    q = (
        spark.readStream.format(fmt)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", SKEWED)
        .option("startingOffsets", "earliest")
        .options(**options)
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert await_available_now(q), f"{fmt}: availableNow did not stop"
    assert q.exception() is None
    return Run([_source(p.sources[0]) for p in q.recentProgress])


def _source(progress) -> dict:
    """A ``SourceProgress`` as a dict (its offsets the JSON text Spark holds)."""
    keys = ("startOffset", "endOffset", "latestOffset", "numInputRows", "metrics")
    return {key: getattr(progress, key) for key in keys}


@pytest.fixture(scope="module")
def skewed_runs(spark, kafka: str, tmp_path_factory) -> dict[str, Run]:
    """Both formats' runs over :data:`SKEWED` with ``maxOffsetsPerTrigger`` (one setup for the
    streaming comparisons below)."""
    produce_skewed(kafka)
    work = tmp_path_factory.mktemp("skewed")
    return {
        fmt: run_stream(spark, fmt, kafka, work / fmt, maxOffsetsPerTrigger=PER_TRIGGER)
        for fmt in ("kafka", "kafkalog")
    }


def test_max_offsets_per_trigger_cuts_the_same_batches(skewed_runs: dict[str, Run]) -> None:
    """Spark's ``rateLimit``: each partition ``limit * backlog / total``, rounded down, or up below
    1 (a batch may take fewer or more offsets than the limit)."""
    theirs, ours = skewed_runs["kafka"], skewed_runs["kafkalog"]
    assert ours.offsets("endOffset") == theirs.offsets("endOffset")
    ends = [[e[SKEWED][str(p)] for p in range(len(BACKLOGS))] for e in ours.offsets("endOffset")]
    assert ends[0] == [8, 1, 1, 0, 1]  # 10*57/69 = 8.3 down, 10*9/69 = 1.3 down, 10*2/69 up
    assert ends[-1] == list(BACKLOGS)
    rows = [s["numInputRows"] for s in ours.sources]
    assert rows == [s["numInputRows"] for s in theirs.sources]
    assert sum(rows) == sum(BACKLOGS)


def test_progress_offsets_are_the_connectors(skewed_runs: dict[str, Run]) -> None:
    """Batch by batch the same start, end and latest offsets in ``sources[0]``, the same JSON."""
    theirs, ours = skewed_runs["kafka"], skewed_runs["kafkalog"]
    for key in ("startOffset", "endOffset", "latestOffset"):
        assert [s[key] for s in ours.sources] == [s[key] for s in theirs.sources], key


def test_offsets_behind_latest_are_worked_out_from_the_progress(skewed_runs) -> None:
    """A Python data source cannot report source metrics (datasource/offsets_behind_latest.py):
    kafkalog's ``sources[0].metrics`` stays empty, and :func:`offsets_behind_latest` gives the
    connector's three metrics (KafkaMicroBatchStream.metrics) from the progress instead."""
    theirs, ours = skewed_runs["kafka"], skewed_runs["kafkalog"]
    assert [s["metrics"] for s in ours.sources] == [{}] * len(ours.sources)
    behind = [offsets_behind_latest(s) for s in ours.sources]
    assert behind == [offsets_behind_latest(s) for s in theirs.sources]
    # latest (57, 9, 2, 0, 1), first batch up to (8, 1, 1, 0, 1): 49, 8, 1, 0, 0 behind
    assert behind[0] == {
        "minOffsetsBehindLatest": "0",
        "maxOffsetsBehindLatest": "49",
        "avgOffsetsBehindLatest": "11.6",
    }
    assert behind[-1] == {
        "minOffsetsBehindLatest": "0",
        "maxOffsetsBehindLatest": "0",
        "avgOffsetsBehindLatest": "0.0",
    }


def counts_by_partition(spark, fmt: str, bootstrap: str, mode: str):
    """A streaming count of :data:`SKEWED`'s records by partition (``fmt`` reading), as key and
    value strings, ready to start in output mode ``mode`` (availableNow), in
    :data:`SINK_BATCHES` micro-batches."""
    return (
        spark.readStream.format(fmt)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", SKEWED)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", SINK_PER_TRIGGER)
        .load()
        .groupBy("partition")
        .count()
        .selectExpr("CAST(partition AS STRING) AS key", "CAST(count AS STRING) AS value")
        .writeStream.outputMode(mode)
        .trigger(availableNow=True)
    )


def into_topic(spark, fmt: str, bootstrap: str, mode: str, checkpoint: Path) -> Counter:
    """Run :func:`counts_by_partition` into a new topic through ``fmt``'s sink; its records."""
    topic = f"parity-{mode}-{fmt}"
    create_topic(bootstrap, topic)
    writer = counts_by_partition(spark, fmt, bootstrap, mode).format(fmt)
    q = (
        writer.option("kafka.bootstrap.servers", bootstrap)
        .option("topic", topic)
        .option("checkpointLocation", str(checkpoint))
        .start()
    )
    finish(q)
    return written(spark, bootstrap, topic)


def create_topic(bootstrap: str, topic: str) -> None:
    from broker_embedded.client.kafka_client import KafkaClient

    with KafkaClient(bootstrap) as client:
        client.create_topic(topic, 1, 1, {})


def finish(q) -> None:
    assert await_available_now(q), "availableNow did not stop"
    assert q.exception() is None


def written(spark, bootstrap: str, topic: str) -> Counter:
    rows = outcome(spark, "kafkalog", bootstrap, {"subscribe": topic})
    return Counter((r.key, r.value) for r in rows)


FINAL_COUNTS = {(b"0", b"57"), (b"1", b"9"), (b"2", b"2"), (b"4", b"1")}


def test_complete_mode_appends_each_batch_s_result(spark, kafka: str, skewed_runs, tmp_path):
    """The connector's sink takes complete mode (its ``truncate`` does nothing): every batch's
    whole result is appended; so does kafkalog's."""
    with sql_conf(spark, *V1_KAFKA):
        theirs = into_topic(spark, "kafka", kafka, "complete", tmp_path / "k")
    ours = into_topic(spark, "kafkalog", kafka, "complete", tmp_path / "l")
    assert ours == theirs and FINAL_COUNTS <= set(ours)
    assert ours[(b"4", b"1")] == SINK_BATCHES  # complete: every batch


def test_update_mode_goes_through_foreach_batch(spark, kafka: str, skewed_runs, tmp_path) -> None:
    """The connector's sink takes ``outputMode("update")``; a Python data source's cannot: Spark
    4.3's ``PythonWriteBuilder`` implements ``SupportsTruncate`` but not
    ``SupportsStreamingUpdateAsAppend``, so Spark refuses update before kafkalog is asked.
    ``foreachBatch`` with a kafkalog batch write of each micro-batch gives the connector's rows."""
    with sql_conf(spark, *V1_KAFKA):
        theirs = into_topic(spark, "kafka", kafka, "update", tmp_path / "k")
    with pytest.raises(PySparkException, match="kafkalog does not support Update mode"):
        into_topic(spark, "kafkalog", kafka, "update", tmp_path / "r")
    ours = "parity-update-foreach-batch"
    create_topic(kafka, ours)

    def each_batch(df, _batch_id: int) -> None:
        df.write.format("kafkalog").mode("append").option("kafka.bootstrap.servers", kafka).option(
            "topic", ours
        ).save()

    q = counts_by_partition(spark, "kafkalog", kafka, "update").foreachBatch(each_batch)
    finish(q.option("checkpointLocation", str(tmp_path / "l")).start())
    assert written(spark, kafka, ours) == theirs and FINAL_COUNTS <= set(theirs)
    assert theirs[(b"4", b"1")] == 1  # update: partition 4 only in the batch that read it


def test_min_and_max_offsets_per_trigger_available_now(spark, kafka: str, skewed_runs, tmp_path):
    """Under availableNow the connector still delays a trigger with fewer new offsets than
    ``minOffsetsPerTrigger`` (delayBatch), and Spark then ends the run: the last offsets are left
    unread. kafkalog ignores the minimum under availableNow and reads up to the latest offsets:
    the same batches, and one more."""
    limits = {"maxOffsetsPerTrigger": PER_TRIGGER, "minOffsetsPerTrigger": "6"}
    theirs = run_stream(spark, "kafka", kafka, tmp_path / "k", **limits).offsets("endOffset")
    ours = run_stream(spark, "kafkalog", kafka, tmp_path / "l", **limits).offsets("endOffset")
    assert ours[:-1] == theirs
    left = sum(BACKLOGS) - sum(theirs[-1][SKEWED].values())
    assert 0 < left < 6 and ours[-1] == {SKEWED: {str(p): n for p, n in enumerate(BACKLOGS)}}
