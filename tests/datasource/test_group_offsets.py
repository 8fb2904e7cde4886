"""Consumer groups and the ``kafkalog`` source: ``startingOffsets=group:<group id>`` (batch and
streaming, with ``startingOffsetsByGroupFallback``) and ``commitOffsetsToGroup`` (a streaming
query's progress as a group's committed offsets, read back by ``kafkalog groups describe``).

Log dirs: one built here with the embedded broker (``orders``: 3 partitions of 10, 6 and 4
records; ``short``: 1 partition of 5 records whose log start offset DeleteRecords moved to 3),
whose groups are committed in Kafka's record format by group_commit.py (offset commit key v1,
value v3) and checked record by record; and copies of Kafka 3.7's log dir, whose group
``DEVSmileCDR`` Kafka committed (``TestTopicPatient-0`` at 3, its high watermark). Every
expected row, offset and line is exact."""

from __future__ import annotations

import io
import json
import shutil
import time
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException

from broker_embedded.broker import Broker
from broker_embedded.client.kafka_client import KafkaClient
from broker_embedded.common.producer_record import ProducerRecord
from broker_embedded.coordinator.coordinator_partition import partition_for
from broker_embedded.coordinator.group_metadata_record import (
    OffsetCommitKey,
    OffsetCommitValue,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from broker_embedded.storage.fetch_data_info import IsolationLevel
from broker_embedded.storage.log_dir import LogDir
from broker_embedded.storage.log_dir_fetch_source import LogDirSource
from broker_embedded.storage.topic_partition import TopicPartition
from datasource import group_offsets
from datasource.errors import DataLossError, GroupOffsetsError, InvalidOptionError
from datasource.group_commit import commit_group_offsets
from datasource.kafka_offset_reader import KafkaOffsetReader, source_of
from datasource.kafka_source_options import KafkaSourceOptions
from datasource.offset_spec import GroupOffsets
from spark_kafkalog import groups_command
from tests.datasource.conftest import await_available_now
from tests.fixture_paths import FIXTURES

SIZES = {0: 10, 1: 6, 2: 4}  # records of orders-<partition>
NOW = 1_700_000_000_000
KAFKA_37 = FIXTURES / "kafka-logdirs" / "kafka-3.7-ldi-poc"


def orders(p: int) -> TopicPartition:
    return TopicPartition("orders", p)


def value(p: int, i: int) -> bytes:
    return b"o%d-%02d" % (p, i)


def build(path: Path) -> Path:
    with Broker(path, create=True) as broker:
        broker.create_topic("orders", 3, config={"retention.ms": -1})
        for p, n in SIZES.items():
            broker.produce("orders", p, [ProducerRecord(value(p, i)) for i in range(n)])
        broker.create_topic("short", 1)
        broker.produce("short", 0, [ProducerRecord(b"s%d" % i) for i in range(5)])
        assert broker.delete_records("short", 0, 3) == 3
    return path


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory) -> Path:
    """``orders`` and ``short`` with groups: ``all`` (orders 4, 6, 1), ``some`` (orders-0 at
    7), ``past`` (orders-2 at 9, past its end 4), ``below`` (short-0 at 1, below its start 3).
    Read-only for the tests: copy it to change it."""
    path = build(tmp_path_factory.mktemp("groups") / "logdir")
    commit_group_offsets(path, "all", {orders(0): 4, orders(1): 6, orders(2): 1}, now_ms=NOW)
    commit_group_offsets(path, "some", {orders(0): 7}, now_ms=NOW)
    commit_group_offsets(path, "past", {orders(0): 0, orders(1): 0, orders(2): 9}, now_ms=NOW)
    commit_group_offsets(path, "below", {TopicPartition("short", 0): 1}, now_ms=NOW)
    return path


@pytest.fixture
def kafka37(tmp_path: Path) -> Path:
    return Path(shutil.copytree(KAFKA_37, tmp_path / "kafka-3.7"))


def read(spark, path: Path, **options: str) -> list[tuple[int, int, bytes]]:
    df = spark.read.format("kafkalog").options(**options).load(str(path))
    rows = df.select("partition", "offset", "value").collect()
    return sorted((r.partition, r.offset, bytes(r.value)) for r in rows)


def expected(starts: dict[int, int], ends: dict[int, int] | None = None) -> list[tuple]:
    ends = ends or SIZES
    return [(p, i, value(p, i)) for p in sorted(starts) for i in range(starts[p], ends[p])]


def describe(path: Path, group: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    groups_command.run("describe", path, out, err, [group])
    return out.getvalue(), err.getvalue()


def find_group(path: Path, group: str):
    with LogDirSource(str(path)).open() as source:
        return group_offsets.find_group(source, group)


def read_committed_offsets(path: Path, group: str) -> dict[TopicPartition, int]:
    with LogDirSource(str(path)).open() as source:
        return group_offsets.read_committed_offsets(source, group)


def commit_records(path: Path, group: str) -> list[tuple[str, int, int, int]]:
    """(topic, partition, committed offset, value version) of every offset commit record of
    ``group`` in its partition, in log order, decoded with Kafka's schemas."""
    tp, _ = find_group(path, group)
    out = []
    with LogDir(path).open_partition(tp) as reader:
        for batch in reader.batches(reader.log_start_offset, reader.log_end_offset):
            for record in batch.records():
                key = decode_key(record.key)
                if isinstance(key, OffsetCommitKey) and key.group == group:
                    v = decode_value(key, record.value)
                    assert isinstance(v, OffsetCommitValue) and key.version == 1
                    out.append((key.topic, key.partition, v.offset, v.version))
    return out


# -- options ---------------------------------------------------------------------------------------


def parse_wire(bootstrap: str, starting: str) -> KafkaSourceOptions:
    return KafkaSourceOptions.parse(
        {"kafka.bootstrap.servers": bootstrap, "subscribe": "orders", "startingOffsets": starting}
    )


def parse(streaming: bool | None = False, **options: str) -> KafkaSourceOptions:
    return KafkaSourceOptions.parse(
        {"path": "/l", "subscribe": "orders", **options}, streaming=streaming
    )


def test_group_options_parse() -> None:
    assert parse(startingOffsets="group:app-1").starting == GroupOffsets("app-1", "latest")
    assert parse(startingOffsets=" GROUP:My Group ").starting == GroupOffsets("My Group")
    for fallback in ("earliest", "latest", "none"):
        o = parse(True, startingOffsets="group:g", startingOffsetsByGroupFallback=fallback.upper())
        assert o.starting == GroupOffsets("g", fallback)
    o = parse(True, commitOffsetsToGroup="spark-q")
    assert o.commit_to_group == "spark-q" and o.starting == parse(True).starting
    assert parse().commit_to_group is None


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"startingOffsets": "group:g", "startingOffsetsByTimestamp": '{"orders":{"0":5}}'},
            "option startingOffsets='group:g' cannot be combined with "
            "startingOffsetsByTimestamp: a query starts at a consumer group's committed offsets "
            "or at a timestamp, not both; remove one of them",
        ),
        (
            {"startingOffsets": "group:g", "startingTimestamp": "5"},
            "option startingOffsets='group:g' cannot be combined with startingTimestamp: a "
            "query starts at a consumer group's committed offsets or at a timestamp, not both; "
            "remove one of them",
        ),
        (
            {"startingOffsetsByGroupFallback": "earliest"},
            "option startingOffsetsByGroupFallback='earliest' applies only with "
            "startingOffsets=group:<group id>; startingOffsets is not set",
        ),
        (
            {"startingOffsets": "earliest", "startingOffsetsByGroupFallback": "none"},
            "option startingOffsetsByGroupFallback='none' applies only with "
            "startingOffsets=group:<group id>; startingOffsets is 'earliest'",
        ),
        (
            {"startingOffsets": "group:g", "startingOffsetsByGroupFallback": "error"},
            "option startingOffsetsByGroupFallback='error' is invalid: expected one of earliest, "
            "latest, none",
        ),
        (
            {"endingOffsets": "group:g"},
            "option endingOffsets='group:g' is invalid: a consumer group's committed offsets can "
            "only be where a query starts (startingOffsets=group:<group id>)",
        ),
        (
            {"startingOffsets": "group:"},
            "option startingOffsets='group:' is invalid: the group id is empty (expected "
            "group:<group id>)",
        ),
        (
            {"commitOffsetsToGroup": "g"},
            "option commitOffsetsToGroup='g' applies to streaming queries (spark.readStream) only; "
            "remove it from this batch query",
        ),
    ],
)
def test_group_option_errors(options: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidOptionError) as e:
        parse(**options)
    assert str(e.value) == message


# -- the records -----------------------------------------------------------------------------------


def test_commits_are_kafkas_records_in_the_groups_partition(log_dir: Path) -> None:
    for group in ("all", "some", "past", "below"):
        assert find_group(log_dir, group)[0].partition == partition_for(group, 50)
    assert commit_records(log_dir, "all") == [
        ("orders", 0, 4, 3),
        ("orders", 1, 6, 3),
        ("orders", 2, 1, 3),
    ]
    assert read_committed_offsets(log_dir, "some") == {orders(0): 7}
    out, err = describe(log_dir, "all")
    assert err == "\nConsumer group 'all' has no active members.\n"
    assert out == (
        "\nGROUP           TOPIC           PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG      "
        "       CONSUMER-ID     HOST            CLIENT-ID"
        "\nall             orders          0          4               10              6        "
        "       -               -               -"
        "\nall             orders          1          6               6               0        "
        "       -               -               -"
        "\nall             orders          2          1               4               3        "
        "       -               -               -\n"
    )


# -- batch reads -----------------------------------------------------------------------------------


def test_batch_read_starts_at_the_groups_offsets(spark, log_dir: Path) -> None:
    rows = read(spark, log_dir, subscribe="orders", startingOffsets="group:all")
    assert rows == expected({0: 4, 1: 6, 2: 1})
    rows = read(
        spark,
        log_dir,
        assign='{"orders":[0]}',
        startingOffsets="group:all",
        endingOffsets='{"orders":{"0":6}}',
    )
    assert rows == expected({0: 4}, {0: 6})


@pytest.mark.parametrize(
    ("fallback", "starts"),
    [("latest", {0: 7, 1: 6, 2: 4}), ("earliest", {0: 7, 1: 0, 2: 0})],
)
def test_batch_fallback(spark, log_dir: Path, fallback: str, starts: dict[int, int]) -> None:
    rows = read(
        spark,
        log_dir,
        subscribe="orders",
        startingOffsets="group:some",
        startingOffsetsByGroupFallback=fallback,
    )
    assert rows == expected(starts)


def test_fallback_latest_is_the_default(spark, log_dir: Path) -> None:
    rows = read(spark, log_dir, subscribe="orders", startingOffsets="group:some")
    assert rows == expected({0: 7})


def test_fallback_none_names_the_partitions_without_a_commit(spark, log_dir: Path) -> None:
    with pytest.raises(Exception) as e:
        read(
            spark,
            log_dir,
            subscribe="orders",
            startingOffsets="group:some",
            startingOffsetsByGroupFallback="none",
        )
    assert (
        "GroupOffsetsError: startingOffsets=group:some with startingOffsetsByGroupFallback=none: "
        "group 'some' has no committed offset for orders-1, orders-2"
    ) in str(e.value)


def plan(log_dir: Path, streaming: bool = False, **options: str) -> dict[TopicPartition, int]:
    """The starting offsets the planner resolves (driver side, without Spark)."""
    from datasource.kafka_offset_reader import KafkaOffsetReader

    o = KafkaSourceOptions.parse({"path": str(log_dir), **options}, streaming=streaming)
    with KafkaOffsetReader(o.path, o.isolation_level) as reader:
        return reader.starting_offsets(
            o.starting, reader.partitions(o.subscription), fail_on_data_loss=o.fail_on_data_loss
        )


def test_group_errors(log_dir: Path, tmp_path: Path) -> None:
    p = partition_for("nobody", 50)
    with pytest.raises(GroupOffsetsError) as e:
        plan(log_dir, subscribe="orders", startingOffsets="group:nobody")
    assert str(e.value) == (
        f"startingOffsets=group:nobody: group 'nobody' has no committed offsets in log dir "
        f"{log_dir} (partition {p} of __consumer_offsets)"
    )
    bare = build(tmp_path / "bare")
    with pytest.raises(GroupOffsetsError) as e:
        plan(bare, subscribe="orders", startingOffsets="group:all")
    assert str(e.value) == (
        f"startingOffsets=group:all: log dir {bare} has no __consumer_offsets partition, so no "
        "consumer group has committed offsets there"
    )


def test_committed_offsets_outside_the_log_are_data_loss(spark, log_dir: Path) -> None:
    with pytest.raises(DataLossError) as e:
        plan(log_dir, subscribe="orders", startingOffsets="group:past")
    assert str(e.value).startswith(
        "startingOffsets=group:past: group 'past' committed offset 9 of orders-2, past its "
        "latest offset 4: offsets [4, 9) are not in the log. Some data may have been lost"
    )
    with pytest.raises(DataLossError) as e:
        plan(log_dir, subscribe="short", startingOffsets="group:below")
    assert str(e.value).startswith(
        "startingOffsets=group:below: group 'below' committed offset 1 of short-0, below its log "
        "start offset 3: offsets [1, 3) are no longer in the log. Some data may have been lost"
    )
    assert plan(
        log_dir, subscribe="short", startingOffsets="group:below", failOnDataLoss="false"
    ) == {TopicPartition("short", 0): 3}
    rows = read(
        spark, log_dir, subscribe="orders", startingOffsets="group:past", failOnDataLoss="false"
    )
    assert rows == expected({0: 0, 1: 0})


# -- Kafka's own log dir ---------------------------------------------------------------------------


def test_kafka_37_group_start(spark, kafka37: Path) -> None:
    committed = read_committed_offsets(kafka37, "DEVSmileCDR")
    assert committed == {
        TopicPartition("Retry.TestTopicPatient", 0): 0,
        TopicPartition("TestTopicPatient", 0): 3,
        TopicPartition("batch2.work.notification.SHR_PROD.persistence", 0): 0,
        TopicPartition("subscription.matching.SHR_PROD.persistence", 0): 0,
    }
    df = spark.read.format("kafkalog").option("subscribe", "TestTopicPatient")
    everything = df.load(str(kafka37)).select("offset").collect()
    assert [r.offset for r in everything] == [0, 1, 2]
    at_group = df.option("startingOffsets", "group:DEVSmileCDR").load(str(kafka37))
    assert at_group.count() == 0  # committed 3: the high watermark
    # commit an earlier offset in Kafka's format into the copy: read from there on
    assert commit_group_offsets(
        kafka37, "DEVSmileCDR", {TopicPartition("TestTopicPatient", 0): 1}
    ) == TopicPartition("__consumer_offsets", 6)
    rows = df.option("startingOffsets", "group:DEVSmileCDR").load(str(kafka37))
    assert [r.offset for r in rows.select("offset").collect()] == [1, 2]
    assert (
        read_committed_offsets(kafka37, "DEVSmileCDR")[TopicPartition("TestTopicPatient", 0)] == 1
    )
    loaded = groups_command.load_log_dir(LogDir(kafka37)).groups["DEVSmileCDR"]
    rows_ = groups_command.offset_rows(
        groups_command.view_of(loaded), groups_command.LogEndOffsets(LogDir(kafka37))
    )
    mine = [
        (r.topic, r.partition, r.offset, r.log_end_offset, r.lag)
        for r in rows_
        if r.topic == "TestTopicPatient"
    ]
    assert mine == [("TestTopicPatient", 0, 1, 3, 2)]


def test_kafka_37_stream_from_group(spark, kafka37: Path, tmp_path: Path) -> None:
    commit_group_offsets(kafka37, "DEVSmileCDR", {TopicPartition("TestTopicPatient", 0): 2})
    got = run_stream(
        spark,
        kafka37,
        tmp_path / "ck",
        subscribe="TestTopicPatient",
        startingOffsets="group:DEVSmileCDR",
    )
    assert [(p, o) for p, o, _ in got] == [(0, 2)]


# -- streaming -------------------------------------------------------------------------------------


def run_stream(spark, path: Path, checkpoint: Path, **options: str) -> list[tuple]:
    """Rows (partition, offset, value) of an availableNow query, in arrival order."""
    collected: list[tuple] = []

    def sink(df, _batch_id: int) -> None:
        rows = df.select("partition", "offset", "value").collect()
        collected.extend(sorted((r.partition, r.offset, bytes(r.value)) for r in rows))

    q = (
        spark.readStream.format("kafkalog")
        .options(**options)
        .load(str(path))
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert await_available_now(q), "availableNow did not stop"
    assert q.exception() is None
    run_stream.last_query = q  # type: ignore[attr-defined]
    return collected


@pytest.mark.parametrize(
    ("group", "fallback", "starts"),
    [
        ("all", None, {0: 4, 1: 6, 2: 1}),
        ("some", "earliest", {0: 7, 1: 0, 2: 0}),
        ("some", "latest", {0: 7, 1: 6, 2: 4}),
    ],
)
def test_stream_starts_at_the_group(
    spark, log_dir: Path, tmp_path: Path, group: str, fallback: str | None, starts: dict[int, int]
) -> None:
    extra = {} if fallback is None else {"startingOffsetsByGroupFallback": fallback}
    got = run_stream(
        spark,
        log_dir,
        tmp_path / "ck",
        subscribe="orders",
        startingOffsets=f"group:{group}",
        **extra,
    )
    assert sorted(got) == expected(starts)


def test_stream_fallback_none_fails_the_query(spark, log_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(StreamingQueryException) as e:
        run_stream(
            spark,
            log_dir,
            tmp_path / "ck",
            subscribe="orders",
            startingOffsets="group:some",
            startingOffsetsByGroupFallback="none",
        )
    assert "group 'some' has no committed offset for orders-1, orders-2" in str(e.value)


def test_stream_commits_its_progress_to_a_group(spark, tmp_path: Path) -> None:
    path = build(tmp_path / "logdir")
    got = run_stream(
        spark,
        path,
        tmp_path / "ck",
        subscribe="orders",
        startingOffsets="earliest",
        maxOffsetsPerTrigger="7",
        commitOffsetsToGroup="spark-orders",
    )
    assert sorted(got) == expected({0: 0, 1: 0, 2: 0})
    q = run_stream.last_query  # type: ignore[attr-defined]
    ends = [
        json.loads(p.sources[0].endOffset)["orders"] for p in q.recentProgress if p.numInputRows
    ]
    # the commits: the starting offsets, then each batch's end, only partitions that moved
    commits, before = [("orders", p, 0, 3) for p in range(3)], {"0": 0, "1": 0, "2": 0}
    for end in ends:
        commits += [("orders", int(p), end[p], 3) for p in sorted(end) if end[p] != before[p]]
        before = end
    assert ends[-1] == {"0": 10, "1": 6, "2": 4} and len(ends) == 4  # Spark's rateLimit
    assert commit_records(path, "spark-orders") == commits
    out, err = describe(path, "spark-orders")
    assert err == "\nConsumer group 'spark-orders' has no active members.\n"
    lines = out.splitlines()[2:]
    assert [line.split() for line in lines] == [
        ["spark-orders", "orders", "0", "10", "10", "0", "-", "-", "-"],
        ["spark-orders", "orders", "1", "6", "6", "0", "-", "-", "-"],
        ["spark-orders", "orders", "2", "4", "4", "0", "-", "-", "-"],
    ]
    with Broker(path) as broker:  # 3 new records: lag 3 until a query reads them
        broker.produce("orders", 1, [ProducerRecord(value(1, i)) for i in range(6, 9)])
    out, _ = describe(path, "spark-orders")
    assert out.splitlines()[3].split() == [
        "spark-orders",
        "orders",
        "1",
        "6",
        "9",
        "3",
        "-",
        "-",
        "-",
    ]
    # another query resumes where the group is
    got = run_stream(
        spark,
        path,
        tmp_path / "ck2",
        subscribe="orders",
        startingOffsets="group:spark-orders",
        commitOffsetsToGroup="spark-orders",
    )
    assert got == [(1, i, value(1, i)) for i in range(6, 9)]
    out, _ = describe(path, "spark-orders")
    assert out.splitlines()[3].split() == [
        "spark-orders",
        "orders",
        "1",
        "9",
        "9",
        "0",
        "-",
        "-",
        "-",
    ]


def test_commit_to_a_log_dir_a_broker_owns_fails(spark, tmp_path: Path) -> None:
    import os
    import socket

    path = build(tmp_path / "logdir")
    with Broker(path):
        with pytest.raises(Exception) as e:
            run_stream(spark, path, tmp_path / "ck", subscribe="orders", commitOffsetsToGroup="g")
    owner = f"pid {os.getpid()} on host {socket.gethostname()} (kafkalog broker 0)"
    assert (
        f"option commitOffsetsToGroup='g': cannot commit the query's offsets to log dir {path}: "
        f"another process owns it ({owner}), and a log dir takes one writer. Read through that "
        "server (kafka.bootstrap.servers), which commits over the protocol, or remove the option "
        "commitOffsetsToGroup"
    ) in str(e.value)


def commit_record(group: str, tp: TopicPartition, offset: int) -> ProducerRecord:
    """An offset commit record built here from the schemas (key v1, value v3)."""
    key = encode_key(OffsetCommitKey(group, tp.topic, tp.partition))
    return ProducerRecord(encode_value(OffsetCommitValue(offset, "", NOW)), key=key)


def test_transactional_commits_count_once_committed(log_dir: Path, tmp_path: Path) -> None:
    path = Path(shutil.copytree(log_dir, tmp_path / "copy"))
    p = partition_for("txg", 50)
    with Broker(path) as broker:
        broker.produce("__consumer_offsets", p, [commit_record("txg", orders(2), 3)])
        tx = broker.transactional_producer("tx")
        tx.begin()
        tx.send("__consumer_offsets", p, [commit_record("txg", orders(0), 5)])
        tx.commit()
        tx.begin()
        tx.send(
            "__consumer_offsets",
            p,
            [commit_record("txg", orders(0), 8), commit_record("txg", orders(1), 2)],
        )
        tx.abort()
    assert read_committed_offsets(path, "txg") == {orders(0): 5, orders(2): 3}
    starts = plan(
        path,
        subscribe="orders",
        startingOffsets="group:txg",
        startingOffsetsByGroupFallback="earliest",
    )
    assert starts == {orders(0): 5, orders(1): 0, orders(2): 3}


def test_a_large_commit_is_split_into_batches(log_dir: Path, tmp_path: Path) -> None:
    path = Path(shutil.copytree(log_dir, tmp_path / "copy"))
    offsets = {TopicPartition("big", i): i for i in range(12_000)}
    tp = commit_group_offsets(path, "big-group", offsets, now_ms=NOW)
    assert read_committed_offsets(path, "big-group") == offsets
    with LogDir(path).open_partition(tp) as reader:
        sizes = [len(list(b.records())) for b in reader.batches(0, reader.log_end_offset)]
    # a record: key 2 + (2 + 9) + (2 + 3) + 4 bytes, value 2 + 8 + 4 + 2 + 8: 46 bytes, and
    # 11397 * 46 = 524262 <= 512 KiB < 11398 * 46
    assert sizes == [11_397, 603]


# -- over the Kafka protocol: the cluster's group coordinator --------------------------------------


COMMIT_WAIT_S = 60.0
COORDINATOR_LOADING = ("NOT_COORDINATOR", "COORDINATOR_LOAD_IN_PROGRESS")


def commit_app_group(bootstrap: str) -> None:
    """Group ``app`` committed by confluent-kafka: orders-0 at 4, orders-1 at 6. A synchronous
    commit that Kafka 3.9 answers NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS (the group's
    partition still loading on a busy machine) is retried, for at most :data:`COMMIT_WAIT_S`."""
    import confluent_kafka as ck

    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "app"})
    deadline = time.monotonic() + COMMIT_WAIT_S
    try:
        offsets = [ck.TopicPartition("orders", 0, 4), ck.TopicPartition("orders", 1, 6)]
        while True:
            try:
                consumer.commit(offsets=offsets, asynchronous=False)
                return
            except ck.KafkaException as e:
                if e.args[0].name() not in COORDINATOR_LOADING or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    finally:
        consumer.close()


@pytest.fixture(scope="module")
def kafka_orders(datasource_kafka: str, tmp_path_factory) -> str:
    """``orders`` of :func:`build` loaded into Apache Kafka 3.9 at the same offsets, with the
    group ``app``."""
    from tests.datasource._tansu import load_log_dir_topics

    built = build(tmp_path_factory.mktemp("kafka-orders") / "logdir")
    with KafkaClient(datasource_kafka) as client:
        load_log_dir_topics(client, built, {"orders": 3}, split_last=False)
    commit_app_group(datasource_kafka)
    return datasource_kafka


@pytest.fixture(params=["serve", "kafka"])
def cluster(request, tmp_path: Path):
    """``orders`` of :func:`build` behind a ``kafkalog serve`` on 127.0.0.1, then in Apache
    Kafka 3.9; group ``app`` committed by confluent-kafka (orders-0 at 4, orders-1 at 6,
    nothing for orders-2)."""
    if request.param == "kafka":
        yield request.getfixturevalue("kafka_orders")
        return
    from tests.broker_embedded.server._serve import served

    with served(build(tmp_path / "served")) as running:
        commit_app_group(running.bootstrap)
        yield running.bootstrap


def committed_by_confluent(bootstrap: str, group: str) -> dict[int, int]:
    """What confluent-kafka reads back as ``group``'s committed offsets of ``orders``."""
    import confluent_kafka as ck

    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        got = consumer.committed([ck.TopicPartition("orders", p) for p in range(3)], timeout=30)
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in got if tp.offset >= 0}


def test_a_read_over_the_wire_starts_at_the_coordinators_offsets(spark, cluster: str) -> None:
    df = (
        spark.read.format("kafkalog")
        .option("kafka.bootstrap.servers", cluster)
        .option("subscribe", "orders")
        .option("startingOffsets", "group:app")
        .option("startingOffsetsByGroupFallback", "earliest")
        .load()
    )
    rows = sorted((r.partition, r.offset, bytes(r.value)) for r in df.collect())
    assert rows == expected({0: 4, 1: 6, 2: 0})
    with pytest.raises(GroupOffsetsError) as e:
        cluster_source = source_of(parse_wire(cluster, "group:nobody"))
        with KafkaOffsetReader(cluster_source, IsolationLevel.READ_UNCOMMITTED) as offsets:
            offsets.committed_offsets("nobody")
    assert str(e.value) == (
        f"startingOffsets=group:nobody: group 'nobody' has no committed offsets at "
        f"Kafka cluster {cluster} (OffsetFetch from its coordinator)"
    )


def test_a_stream_over_the_wire_commits_its_progress_to_a_group(
    spark, cluster: str, tmp_path: Path
) -> None:
    def run(checkpoint: Path, **options: str) -> list[tuple]:
        collected: list[tuple] = []

        def sink(df, _batch_id: int) -> None:
            collected.extend(sorted((r.partition, r.offset) for r in df.collect()))

        q = (
            spark.readStream.format("kafkalog")
            .option("kafka.bootstrap.servers", cluster)
            .option("subscribe", "orders")
            .option("commitOffsetsToGroup", "spark-orders")
            .options(**options)
            .load()
            .writeStream.foreachBatch(sink)
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        assert await_available_now(q), "availableNow did not stop"
        assert q.exception() is None
        return collected

    got = run(
        tmp_path / "ck",
        startingOffsets="group:app",
        maxOffsetsPerTrigger="5",
        startingOffsetsByGroupFallback="earliest",
    )
    assert sorted(got) == [(p, o) for p, o, _ in expected({0: 4, 1: 6, 2: 0})]
    assert committed_by_confluent(cluster, "spark-orders") == SIZES
    assert committed_by_confluent(cluster, "app") == {0: 4, 1: 6}  # untouched
