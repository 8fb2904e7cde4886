"""Spark's own Kafka connector as the reference of the ``kafkalog`` source: the same options given
to ``format("kafka")`` and to ``format("kafkalog")``, both reading Apache Kafka 3.9 (conftest.py's
``kafka_source``: events, empty and trimmed at the offsets of the source log dir) in the same
SparkSession, give the same rows (every column) or both fail. The differences kafkalog keeps on
purpose are asserted as such, each named (README: "Differences from Spark's Kafka connector").
Skipped without the connector's jars or Kafka 3.9 (``KAFKALOG_PEERS``)."""

from __future__ import annotations

import pytest
from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkException

from tests.datasource._logdirs import T0, TRIMMED_LOG_START, spark_rows
from tests.datasource.conftest import ReadSource


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
    options = {"subscribe": "trimmed", "startingOffsets": '{"trimmed":{"0":10}}',
               "failOnDataLoss": "false"}  # fmt: skip
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


@pytest.mark.parametrize("options", [{"startingOffsets": "latest"}, {"endingOffsets": "earliest"},
                                     {"startingOffsets": '{"events":"earliest"}'}])  # fmt: skip
def test_offsets_a_batch_cannot_have_fail_at_load_or_at_the_first_action(spark, kafka, options):
    """PySpark's data source API tells a source whether it is read as a batch or a stream only
    when the query runs, not at ``load()``: an error that depends on it comes at the first
    action, where the connector raises it at ``load()``."""
    options = {"subscribe": "events", **options}
    assert failure(spark, "kafka", kafka, options) == "load"
    at_load = "endingOffsets" in options or "{" in options.get("startingOffsets", "")
    assert failure(spark, "kafkalog", kafka, options) == ("load" if at_load else "collect")
