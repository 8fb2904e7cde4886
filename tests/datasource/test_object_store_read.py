"""A log dir uploaded to a real S3 server (SeaweedFS, the session's ``s3``) reads exactly as the
same log dir read in place: fetch by fetch through the FetchSource, and as Spark rows, batch and
streaming."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker_embedded.record.records import iter_batches
from broker_embedded.storage.fetch_data_info import IsolationLevel
from broker_embedded.storage.fetch_source import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from broker_embedded.storage.log_dir_fetch_source import LogDirSource
from broker_embedded.storage.log_dir_upload import upload_log_dir
from broker_embedded.storage.object_store import StoreLocation
from broker_embedded.storage.object_store_fetch_source import ObjectStoreSource
from broker_embedded.storage.topic_partition import TopicPartition
from tests.seaweedfs import S3Server

UNCOMMITTED = IsolationLevel.READ_UNCOMMITTED
COMMITTED = IsolationLevel.READ_COMMITTED


@pytest.fixture(scope="module")
def stored(s3: S3Server, source_log_dir: Path) -> StoreLocation:
    """The source log dir uploaded to a bucket of its own."""
    location = StoreLocation(f"s3://{s3.new_bucket('read')}/logs/a", s3.settings)
    upload_log_dir(source_log_dir, location.open())
    return location


def batches(
    source, tp: TopicPartition, max_bytes: int, ahead: bool = False
) -> list[tuple[int, int, int]]:
    """(base offset, last offset, CRC) of every batch fetched from the log start to the HW,
    ``max_bytes`` a fetch (``ahead``: each fetch prefetched first, as a task's reader does)."""
    offset = source.list_offset(tp, EARLIEST_TIMESTAMP, UNCOMMITTED)
    end = source.list_offset(tp, LATEST_TIMESTAMP, UNCOMMITTED)
    seen = []
    while offset < end:
        if ahead:
            source.prefetch(tp, offset, max_bytes, UNCOMMITTED)
        fetched = source.fetch(tp, offset, max_bytes, UNCOMMITTED)
        got = [
            (b.base_offset, b.last_offset, b.compute_crc()) for b in iter_batches(fetched.records)
        ]
        assert got, f"no batch at {offset}"
        seen += [g for g in got if g[1] >= offset]
        offset = got[-1][1] + 1
    return seen


def test_fetches_from_the_store_equal_the_log_dir_s(stored, source_log_dir: Path) -> None:
    local = LogDirSource(str(source_log_dir)).open()
    remote = ObjectStoreSource(stored).open()
    assert remote.topics() == local.topics()
    for topic, partitions in local.topics().items():
        for p in partitions:
            tp = TopicPartition(topic, p)
            for which in (EARLIEST_TIMESTAMP, LATEST_TIMESTAMP):
                assert remote.list_offset(tp, which, UNCOMMITTED) == local.list_offset(
                    tp, which, UNCOMMITTED
                ), (tp, which)
            for max_bytes in (1, 3000):
                assert batches(remote, tp, max_bytes) == batches(local, tp, max_bytes), tp
            assert batches(remote, tp, 3000, ahead=True) == batches(local, tp, 3000), tp
            start, end = (
                local.list_offset(tp, w, UNCOMMITTED)
                for w in (EARLIEST_TIMESTAMP, LATEST_TIMESTAMP)
            )
            assert remote.byte_cuts(tp, start, end, 4096) == local.byte_cuts(tp, start, end, 4096)
            for lo, hi, limit, one in (
                (start, end, 1 << 40, False),
                (start, end, 5000, False),
                (start + 7, end - 3, 2500, False),
                (start, end, 0, True),
                (start + 1, end, 1, True),
            ):
                args = (tp, lo, hi, limit)
                assert remote.byte_cut(*args, min_one_batch=one) == local.byte_cut(
                    *args, min_one_batch=one
                ), args


def committed(source, tp: TopicPartition, max_bytes: int) -> list[tuple]:
    """Per read_committed fetch from the log start to the LSO: its offset, the batches it
    returned whole (base, last offset) and its aborted transactions."""
    offset = source.list_offset(tp, EARLIEST_TIMESTAMP, COMMITTED)
    end = source.list_offset(tp, LATEST_TIMESTAMP, COMMITTED)
    seen = []
    while offset < end:
        f = source.fetch(tp, offset, max_bytes, COMMITTED)
        got = [(b.base_offset, b.last_offset) for b in iter_batches(f.records)]
        seen.append((offset, got, f.last_stable_offset, sorted(f.aborted_transactions)))
        offset = got[-1][1] + 1
    return seen


def test_read_committed_from_the_store_equals_the_log_dir_s(stored, source_log_dir) -> None:
    local = LogDirSource(str(source_log_dir)).open()
    remote = ObjectStoreSource(stored).open()
    txn = TopicPartition("txn", 0)
    assert local.list_offset(txn, LATEST_TIMESTAMP, COMMITTED) < local.list_offset(
        txn, LATEST_TIMESTAMP, UNCOMMITTED
    )  # a transaction left open: the LSO is below the HW
    for tp in (txn, TopicPartition("events", 0), TopicPartition("trimmed", 0)):
        for max_bytes in (1, 2000):
            expected = committed(local, tp, max_bytes)
            assert committed(remote, tp, max_bytes) == expected, (tp, max_bytes)
    assert any(aborted for *_, aborted in committed(remote, txn, 2000))


def test_offsets_by_timestamp_from_the_store_equal_the_log_dir_s(stored, source_log_dir) -> None:
    from tests.datasource._logdirs import T0

    local = LogDirSource(str(source_log_dir)).open()
    remote = ObjectStoreSource(stored).open()
    times = [T0 - 1, *range(T0, T0 + 800_000, 9_973), 1 << 62]  # records are ms to minutes apart
    for topic in ("events", "trimmed", "appendtime", "empty"):
        for p in local.topics()[topic]:
            tp = TopicPartition(topic, p)
            got = [remote.list_offset(tp, t, UNCOMMITTED) for t in times]
            assert got == [local.list_offset(tp, t, UNCOMMITTED) for t in times], tp


def fingerprint(df) -> tuple[int, int]:
    """(rows, a hash over key, value, topic, partition, offset and timestamp of every row)."""
    from pyspark.sql import functions as F

    cols = [F.coalesce(F.hex(F.col(c)), F.lit("-")) for c in ("key", "value")]
    cols += [F.col(c).cast("string") for c in ("topic", "partition", "offset", "timestamp")]
    row_hash = F.xxhash64(F.concat_ws("|", *cols))
    got = df.agg(F.count(F.lit(1)).alias("n"), F.sum(row_hash.cast("decimal(38,0)")).alias("h"))
    n, h = got.first()
    return n, int(h or 0)


def test_spark_reads_the_store_as_the_log_dir(spark, s3: S3Server, stored, source_log_dir) -> None:
    topics = "events,trimmed,appendtime,empty"
    on_store = (
        spark.read.format("kafkalog")
        .options(**s3.options())
        .option("subscribe", topics)
        .option("maxBytesPerPartition", "65536")
        .load(stored.uri)
    )
    local = spark.read.format("kafkalog").option("subscribe", topics).load(str(source_log_dir))
    expected = fingerprint(local)
    assert expected[0] > 2000
    assert fingerprint(on_store) == expected  # planned in pieces cut by the stored indexes


@pytest.mark.slow  # a streaming query of several micro-batches: 20-30 s on a loaded machine
def test_stream_available_now_reads_the_store_once(
    spark, s3: S3Server, stored, source_log_dir, tmp_path: Path
) -> None:
    from tests.datasource.conftest import await_available_now

    collected: list[tuple] = []
    columns = ("topic", "partition", "offset", "timestamp", "key", "value")

    def sink(df, _batch_id: int) -> None:
        collected.extend(tuple(r) for r in df.select(*columns).collect())

    q = (
        spark.readStream.format("kafkalog")
        .options(**s3.options())
        .option("subscribe", "events,trimmed")
        .option("startingOffsets", "earliest")
        .option("maxBytesPerTrigger", "60000")
        .load(stored.uri)
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(availableNow=True)
        .start()
    )
    assert await_available_now(q), "availableNow did not stop"
    assert q.exception() is None and q.recentProgress and len(q.recentProgress) > 1
    local = (
        spark.read.format("kafkalog")
        .option("subscribe", "events,trimmed")
        .load(str(source_log_dir))
        .select(*columns)
        .collect()
    )
    assert len(collected) == len(set(collected)) == len(local)  # each row once
    assert sorted(collected) == sorted(tuple(r) for r in local)


def test_a_missing_bucket_fails_the_query_naming_it(spark, s3: S3Server) -> None:
    """(A wrong secret: tests/broker_embedded/storage/test_object_store.py, without Spark.)"""
    query = (
        spark.read.format("kafkalog")
        .options(**s3.options())
        .option("subscribe", "events")
        .load("s3://no-such-kafkalog-bucket/logs")
    )
    with pytest.raises(Exception, match="no bucket 'no-such-kafkalog-bucket'"):
        query.count()


def test_a_segment_gone_from_the_store_is_named_with_the_offset(s3, source_log_dir) -> None:
    location = StoreLocation(f"s3://{s3.new_bucket('gone')}/l", s3.settings)
    upload_log_dir(source_log_dir, location.open())
    tp = TopicPartition("events", 1)
    planner = ObjectStoreSource(location).open()
    task = planner.task_source([tp]).open()
    second = planner.partition(tp).bases[1]
    key = f"l/events-1/{second:020d}.log"
    location.open().delete(key.removeprefix("l/"))
    with pytest.raises(
        FileNotFoundError,
        match=rf"offset {second} of events-1\): no object at "
        rf"bucket '{location.bucket}' key '{key}'",
    ):
        task.fetch(tp, second, 1 << 20, UNCOMMITTED)
    with pytest.raises(
        FileNotFoundError,
        match=f"no object at bucket '{location.bucket}' key "
        f"'{key}', though its segment's manifest is there",
    ):
        ObjectStoreSource(location).open().partition(tp)


def test_a_wrong_prefix_is_named(s3: S3Server, stored) -> None:
    source = ObjectStoreSource(StoreLocation(f"s3://{stored.bucket}/logs/b", s3.settings)).open()
    with pytest.raises(
        FileNotFoundError,
        match=f"no log dir at bucket '{stored.bucket}' key "
        "'logs/b/': nothing is stored under that prefix",
    ):
        source.topics()
