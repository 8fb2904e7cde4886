"""``spark.read.format("kafkalog")`` end to end with a real SparkSession: the schema, every option
and combinations of them against an independent reading of the same files (kafka-python and the
checkpoint files, tests/datasource/_logdirs.py), real Kafka log dirs, byte splitting and filter
pushdown giving the same rows as the plain plan, read_committed, data loss with both settings of
failOnDataLoss, and rejected options as the user sees them. Tests taking ``read_source`` run
twice: reading the log dir in place, and over the Kafka protocol from a server (conftest.py);
those marked ``ALSO_ON_TANSU`` a third time against Tansu, skipped where it answers otherwise
than Kafka (the reason names the gap)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest
from chispa import assert_df_equality
from pyspark.errors import PySparkException
from pyspark.sql.datasource import GreaterThanOrEqual
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

import spark_kafkalog
from datasource.kafka_batch_reader import KafkaBatchReader
from datasource.kafka_source_options import KafkaSourceOptions
from tests.datasource._logdirs import (
    EVENTS_PARTITIONS,
    T0,
    TRIMMED_LOG_START,
    expected_rows,
    first_offset_at,
    partition_facts,
    spark_rows,
)
from tests.datasource.conftest import (
    ALSO_ON_TANSU,
    KAFKA_TOPICS,
    ReadSource,
    skip_on_tansu,
    sql_conf,
)

PUSHDOWN = "spark.sql.python.filterPushdown.enabled"
TIMESTAMP_GAP = "ListOffsets by timestamp answers offset 0 whatever the timestamp"
ORDER = ["topic", "partition", "offset"]
SCHEMA = StructType(
    [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
)
HEADERS = StructField(
    "headers",
    ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())])),
)


def load(spark, where: Path | ReadSource, **options: str):
    """A batch read of a log dir, or of a :class:`ReadSource` (a log dir or a server)."""
    if isinstance(where, ReadSource):
        return where.load(spark, **options)
    return spark.read.format("kafkalog").options(**options).load(str(where))


def facts_of(log_dir: Path, topic: str, partitions: int = 1) -> list:
    return [partition_facts(log_dir, topic, p) for p in range(partitions)]


@ALSO_ON_TANSU
def test_schema_is_sparks_kafka_schema(spark, read_source: ReadSource) -> None:
    assert load(spark, read_source, subscribe="events").schema == SCHEMA
    with_headers = load(spark, read_source, subscribe="events", includeHeaders="true")
    assert with_headers.schema == StructType([*SCHEMA.fields, HEADERS])


@ALSO_ON_TANSU
def test_every_topic_equals_the_files(spark, read_source: ReadSource) -> None:
    skip_on_tansu(
        read_source,
        "the topics appendtime (LogAppendTime is not applied), trimmed "
        "(DeleteRecords) and txn (transactions) are not loaded",
    )
    topics = [
        ("appendtime", 1),
        ("empty", 1),
        ("events", EVENTS_PARTITIONS),
        ("trimmed", 1),
        ("txn", 1),
    ]
    pattern = ".*"
    if read_source.transport == "kafka":  # not loaded: LogAppendTime, transactions
        topics = [(t, n) for t, n in topics if t in KAFKA_TOPICS]
        pattern = "|".join(KAFKA_TOPICS)  # the broker holds other tests' topics too
    df = load(spark, read_source, subscribePattern=pattern, includeHeaders="true")
    expected = []
    for topic, n in topics:
        for facts in facts_of(read_source.log_dir, topic, n):
            expected += expected_rows(facts, include_headers=True)
    got = spark_rows(df)
    assert got == expected
    if read_source.transport != "kafka":
        assert {r.timestamp_type for r in got if r.topic == "appendtime"} == {1}
    assert df.rdd.getNumPartitions() == 1  # small ranges, packed (packBytesPerPartition)


def _events_rows(log_dir: Path, bounds, **kw) -> list:
    """Expected rows of events, ``bounds[p]`` = (start, end) per partition."""
    out = []
    for p, facts in enumerate(facts_of(log_dir, "events", EVENTS_PARTITIONS)):
        if p in bounds:
            out += expected_rows(facts, *bounds[p], **kw)
    return out


@ALSO_ON_TANSU
def test_assign_with_specific_offsets(spark, read_source: ReadSource) -> None:
    df = load(
        spark,
        read_source,
        assign='{"events":[2,0]}',
        startingOffsets='{"events":{"0":100,"2":-2}}',
        endingOffsets='{"events":{"0":-1,"2":300}}',
    )
    assert spark_rows(df) == _events_rows(read_source.log_dir, {0: (100, None), 2: (0, 300)})


@ALSO_ON_TANSU
def test_starting_and_ending_timestamps(spark, read_source: ReadSource) -> None:
    skip_on_tansu(read_source, TIMESTAMP_GAP)
    lo, hi = T0 + 200_000, T0 + 500_000
    df = load(
        spark, read_source, subscribe="events", startingTimestamp=str(lo), endingTimestamp=str(hi)
    )
    bounds = {}
    for p, facts in enumerate(facts_of(read_source.log_dir, "events", EVENTS_PARTITIONS)):
        bounds[p] = (first_offset_at(facts, lo), first_offset_at(facts, hi))
    assert spark_rows(df) == _events_rows(read_source.log_dir, bounds)
    # per partition, and a timestamp past every record: the end is the latest offset
    facts1 = partition_facts(read_source.log_dir, "events", 1)
    df = load(
        spark,
        read_source,
        assign='{"events":[1]}',
        startingOffsetsByTimestamp=f'{{"events":{{"1":{lo}}}}}',
        endingOffsetsByTimestamp=f'{{"events":{{"1":{T0 + 10**9}}}}}',
    )
    assert spark_rows(df) == expected_rows(facts1, first_offset_at(facts1, lo))


@ALSO_ON_TANSU
def test_timestamp_strategy_latest_reads_nothing_past_the_end(spark, read_source) -> None:
    skip_on_tansu(read_source, TIMESTAMP_GAP)
    df = load(
        spark,
        read_source,
        subscribe="events",
        startingTimestamp=str(T0 + 10**9),
        startingOffsetsByTimestampStrategy="latest",
    )
    assert df.count() == 0


@pytest.mark.parametrize("include_headers", ["false", "true"])
def test_read_committed_hides_aborted_and_open_transactions(
    spark, read_source: ReadSource, include_headers: str
) -> None:
    facts = partition_facts(read_source.log_dir, "txn", 0)
    headers = include_headers == "true"
    committed = load(
        spark,
        read_source,
        subscribe="txn",
        includeHeaders=include_headers,
        **{"kafka.isolation.level": "read_committed"},
    )
    got = spark_rows(committed)
    assert got == expected_rows(facts, read_committed=True, include_headers=headers)
    values = {r.value for r in got}
    # plain-d follows the transaction left open, hidden while it is open (a server opening the
    # log dir aborts it: see the served_source fixture; its upload to a store keeps it open)
    still_open = facts.last_stable < facts.high_watermark
    hidden = (b"abort", b"open") + ((b"plain-d",) if still_open else ())
    assert not any(v.startswith(hidden) for v in values)
    assert still_open == (read_source.transport in ("logdir", "s3"))
    assert {b"commit-1-0", b"commit-3-1", b"plain-b-2", b"plain-c-0"} <= values
    uncommitted = spark_rows(load(spark, read_source, subscribe="txn"))
    assert uncommitted == expected_rows(facts)
    assert any(r.value.startswith(b"abort-2b") for r in uncommitted)


@ALSO_ON_TANSU
def test_data_loss_with_both_settings(spark, read_source: ReadSource) -> None:
    skip_on_tansu(
        read_source,
        "no OFFSET_OUT_OF_RANGE for a Fetch past the log end; the "
        "trimmed topic (DeleteRecords) is not loaded",
    )
    options = {"subscribe": "trimmed", "startingOffsets": '{"trimmed":{"0":10}}'}
    with pytest.raises(
        PySparkException,
        match=r"asks for offset 10 of trimmed-0, below its log "
        r"start offset 95",
    ):
        load(spark, read_source, **options).collect()
    df = load(spark, read_source, failOnDataLoss="false", **options)
    facts = partition_facts(read_source.log_dir, "trimmed", 0)
    assert spark_rows(df) == expected_rows(facts, TRIMMED_LOG_START)
    with pytest.raises(PySparkException, match="trimmed-0 up to 999, past its high watermark 300"):
        load(
            spark, read_source, subscribe="trimmed", endingOffsets='{"trimmed":{"0":999}}'
        ).collect()


@ALSO_ON_TANSU
def test_splitting_options_keep_the_rows(spark, read_source: ReadSource) -> None:
    plain = load(spark, read_source, subscribe="events", includeHeaders="true")
    expected = spark_rows(plain)
    assert expected == _events_rows(
        read_source.log_dir, {0: (), 1: (), 2: ()}, include_headers=True
    )
    variants = [  # (options, fewest and most Spark partitions expected)
        ({"maxRecordsPerPartition": "400"}, 6, 6),
        # over the wire the bytes of the log are unknown: no split by bytes (fetch_source.py)
        ({"maxBytesPerPartition": "32k"}, *((6, 12) if read_source.bootstrap is None else (3, 3))),
        (
            {
                "maxBytesPerPartition": "48k",
                "maxRecordsPerPartition": "500",
                "minPartitions": "9",
                "kafka.max.partition.fetch.bytes": "1000",
                "kafka.fetch.max.bytes": "300",
            },
            8,
            14,
        ),
    ]
    for options, low, high in variants:  # the cuts themselves, not packed
        df = load(
            spark,
            read_source,
            subscribe="events",
            includeHeaders="true",
            packBytesPerPartition="0",
            **options,
        )
        assert low <= df.rdd.getNumPartitions() <= high, (options, df.rdd.getNumPartitions())
        assert spark_rows(df) == expected, options
    split = load(
        spark,
        read_source,
        subscribe="events",
        includeHeaders="true",
        maxBytesPerPartition="24k",
        minPartitions="6",
    )
    assert split.rdd.getNumPartitions() > EVENTS_PARTITIONS
    assert_df_equality(split.orderBy(ORDER), plain.orderBy(ORDER))


PUSHDOWN_QUERIES = [
    "partition = 1",
    "topic = 'txn' OR partition = 2",  # an OR is not pushed: nothing narrowed
    "topic IN ('events', 'empty') AND partition <> 0 AND offset IN (3, 5, 400)",
    "topic LIKE 'ev%' AND offset >= 100 AND offset < 250",
    "timestamp > timestamp'2023-11-14 22:20:00.5' AND timestamp < timestamp'2023-11-14 22:25:00'"
    " AND partition <= 1",
]


def test_pushdown_gives_the_same_rows(spark, source_log_dir: Path) -> None:
    def load_all(**options: str):
        return load(spark, source_log_dir, subscribePattern=".*", includeHeaders="true", **options)

    with sql_conf(spark, PUSHDOWN, "false"):
        baseline = load_all(narrowByFilters="true")  # harmless without pushdown
        plain = {where: spark_rows(baseline.where(where)) for where in PUSHDOWN_QUERIES}
    with sql_conf(spark, PUSHDOWN, "true"):
        for where in PUSHDOWN_QUERIES:
            # a DataFrame loaded for each query: see test_spark_shares_one_plan_between_scans
            assert spark_rows(load_all(narrowByFilters="true").where(where)) == plain[where], where


def test_pushdown_narrows_the_plan(spark, source_log_dir: Path) -> None:
    def partitions(where: str, **options: str) -> int:
        return (
            load(spark, source_log_dir, subscribe="events", packBytesPerPartition="0", **options)
            .where(where)
            .rdd.getNumPartitions()
        )

    with sql_conf(spark, PUSHDOWN, "false"):
        assert partitions("partition = 1", narrowByFilters="true") == EVENTS_PARTITIONS
    with sql_conf(spark, PUSHDOWN, "true"):
        assert partitions("partition = 1") == EVENTS_PARTITIONS  # narrowing is opt-in
        assert partitions("partition = 1", narrowByFilters="true") == 1
        assert partitions("offset >= 100000", narrowByFilters="true") == 1  # Spark's placeholder
    # timestamps: the plan starts at the first offset at or after the bound (the time index)
    bound = dt.datetime(2023, 11, 14, 22, 20, tzinfo=dt.timezone.utc)
    options = {"path": str(source_log_dir), "subscribe": "events", "narrowByFilters": "true"}
    reader = KafkaBatchReader(KafkaSourceOptions.parse(options))
    pushed = [GreaterThanOrEqual(("timestamp",), bound)]
    assert reader.push_filters(pushed) == pushed  # Spark evaluates it again
    ms = int(bound.timestamp() * 1000)
    starts = {r.partition: r.start for r in reader.offset_ranges()}
    for p, facts in enumerate(facts_of(source_log_dir, "events", EVENTS_PARTITIONS)):
        assert starts[p] == first_offset_at(facts, ms) > 0


SPARK_SHARES_READ_INFO = (
    "Spark 4.3 keeps one planned read per Python data source relation (PythonDataSourceV2."
    "readInfo, set by the last pushFilters) and hands it to every scan of that relation"
)


@pytest.mark.xfail(strict=True, reason=SPARK_SHARES_READ_INFO)
def test_spark_shares_one_plan_between_scans(spark, source_log_dir: Path) -> None:
    with sql_conf(spark, PUSHDOWN, "true"):
        df = load(spark, source_log_dir, subscribe="events", narrowByFilters="true")
        both = df.where("partition = 1").union(df.where("partition = 2"))
        assert both.count() == sum(len(f.rows) for f in facts_of(source_log_dir, "events", 3)[1:])


@pytest.mark.xfail(strict=True, reason=SPARK_SHARES_READ_INFO)
def test_spark_reuses_a_narrowed_plan_for_a_later_query(spark, source_log_dir: Path) -> None:
    with sql_conf(spark, PUSHDOWN, "true"):
        df = load(spark, source_log_dir, subscribe="events", narrowByFilters="true")
        events = facts_of(source_log_dir, "events", EVENTS_PARTITIONS)
        assert df.where("partition = 1").count() == len(events[1].rows)
        assert df.count() == sum(len(f.rows) for f in events)


@pytest.mark.parametrize("name", ["kafka-3.7-ldi-poc", "kafka-bitnami-rolled"])
def test_real_kafka_log_dirs(spark, kafka_log_dirs: dict[str, Path], name: str) -> None:
    log_dir = kafka_log_dirs[name]
    partitions = sorted(p.name for p in log_dir.iterdir() if p.is_dir())
    assign: dict[str, list[int]] = {}
    expected = []
    for dir_name in partitions:
        topic, _, part = dir_name.rpartition("-")
        assign.setdefault(topic, []).append(int(part))
    for topic in sorted(assign):
        for p in sorted(assign[topic]):
            expected += expected_rows(partition_facts(log_dir, topic, p), include_headers=True)
    df = load(spark, log_dir, assign=json.dumps(assign), includeHeaders="true")
    got = spark_rows(df)
    assert got == expected and len(got) > 10
    user_topics = {t for t in assign if not t.startswith("__")}
    by_pattern = spark_rows(load(spark, log_dir, subscribePattern=".*", includeHeaders="true"))
    assert by_pattern == [r for r in expected if r.topic in user_topics]


REJECTED = [  # one of each kind; test_kafka_source_options.py has them all
    ({"subscribe": "events", "bogus": "1"}, "unknown option bogus='1'"),
    (
        {"subscribe": "events", "maxOffsetsPerTrigger": "5", "minOffsetsPerTrigger": "6"},
        "option minOffsetsPerTrigger=6 is larger than maxOffsetsPerTrigger=5",
    ),
    ({"assign": '{"nope":[0]}'}, "topic nope does not exist"),
    ({"subscribe": "events", "endingOffsets": '{"events":{"0":'}, "not valid JSON"),
    (
        {"subscribe": "events", "startingOffsets": '{"events":{"0":800,"1":0,"2":0}}'},
        "events-0: the ending offset 708",
    ),
    (
        {"subscribe": "events", "kafka.auto.offset.reset": "earliest"},
        "Kafka option 'auto.offset.reset' is not supported",
    ),
]


@pytest.mark.parametrize(("options", "message"), REJECTED)
def test_rejected_options_reach_the_user(spark, read_source, options, message) -> None:
    with pytest.raises(PySparkException, match=message):
        load(spark, read_source, **options).collect()


def test_user_schema_and_missing_path_rejected(spark, source_log_dir: Path) -> None:
    with pytest.raises(PySparkException, match="fixed schema"):
        spark.read.format("kafkalog").schema("value string").option("subscribe", "events").load(
            str(source_log_dir)
        ).collect()
    with pytest.raises(PySparkException, match="option path is missing"):
        spark.read.format("kafkalog").option("subscribe", "events").load().collect()
    with pytest.raises(PySparkException, match="are both given: pick one"):
        spark.read.format("kafkalog").option("subscribe", "events").option(
            "kafka.bootstrap.servers", "127.0.0.1:9092"
        ).load(str(source_log_dir)).collect()


def test_register_works_too(spark, source_log_dir: Path) -> None:
    # in a session of its own: a registered source runs in other Python workers than the
    # discovered one, which the other tests would then pay to start
    other = spark.newSession()
    spark_kafkalog.register(other)
    assert load(other, source_log_dir, subscribe="appendtime").schema == SCHEMA


@pytest.mark.parametrize("transport", ["logdir", "wire"])
def test_a_record_larger_than_the_fetch_size(spark, tmp_path: Path, transport: str) -> None:
    """KIP-74: a 5 MB record read with fetches of 1 MB comes whole, between small ones."""
    from broker_embedded.common.producer_record import ProducerRecord
    from tests.broker_embedded.server._serve import served

    big = bytes(range(256)) * (5 * 4096)
    with served(tmp_path / "big") as running:
        running.broker.create_topic("big", 1, config={"max.message.bytes": 8 << 20})
        for value in (b"before", big, b"after"):
            running.broker.produce("big", 0, [ProducerRecord(value)])
        running.broker.log_manager.checkpoint()  # publish the high watermark now
        wire = transport == "wire"
        source = ReadSource(transport, running.log_dir, running.bootstrap if wire else None)
        df = source.load(spark, subscribe="big", **{"kafka.max.partition.fetch.bytes": "1048576"})
        got = [(r.offset, bytes(r.value)) for r in df.orderBy("offset").collect()]
    assert got == [(0, b"before"), (1, big), (2, b"after")]
