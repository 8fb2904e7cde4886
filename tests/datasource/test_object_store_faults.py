"""Reads and uploads of a log dir on object storage while the S3 server fails: throttled, erring,
cutting an answer mid-body, stalling, gone (its port refusing) and back, its bucket deleted or an
object replaced between planning and reading. The faults come from a real TCP proxy in front of
the session's SeaweedFS (tests/s3_proxy.py). Each read either returns exactly the log dir's
batches or fails, in bounded time, with an error naming bucket, key and offset."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from broker_embedded.storage.fetch_data_info import IsolationLevel
from broker_embedded.storage.log_dir_fetch_source import LogDirSource
from broker_embedded.storage.log_dir_upload import upload_log_dir
from broker_embedded.storage.object_store import (
    ATTEMPTS,
    ObjectChangedError,
    ObjectStoreError,
    StoreLocation,
)
from broker_embedded.storage.object_store_fetch_source import ObjectStoreSource
from broker_embedded.storage.topic_partition import TopicPartition
from tests.datasource.test_object_store_read import batches
from tests.s3_proxy import FaultProxy
from tests.seaweedfs import S3Server

UNCOMMITTED = IsolationLevel.READ_UNCOMMITTED
EVENTS1 = TopicPartition("events", 1)


@pytest.fixture(scope="module")
def stored(s3: S3Server, source_log_dir: Path) -> StoreLocation:
    location = StoreLocation(f"s3://{s3.new_bucket('faults')}/logs", s3.settings)
    upload_log_dir(source_log_dir, location.open())
    return location


@pytest.fixture
def proxy(s3: S3Server) -> Iterator[FaultProxy]:
    with FaultProxy(s3.endpoint) as p:
        yield p


def via(proxy: FaultProxy, location: StoreLocation, timeout_s: float = 2.0) -> StoreLocation:
    """``location`` reached through ``proxy``, a request failing after ``timeout_s`` of silence."""
    settings = replace(location.settings, endpoint=proxy.endpoint, request_timeout_s=timeout_s)
    return StoreLocation(location.uri, settings)


def log_key(location: StoreLocation, tp: TopicPartition, base: int) -> str:
    return location.key(f"{tp.dir_name}/{base:020d}.log")


def planned_task(s3: S3Server, source_log_dir: Path, bucket: str):
    """The log dir uploaded to a new bucket, and a task planned over its events-1 there."""
    location = StoreLocation(f"s3://{s3.new_bucket(bucket)}/l", s3.settings)
    store = location.open()
    upload_log_dir(source_log_dir, store)
    return location, store, ObjectStoreSource(location).open().task_source([EVENTS1]).open()


def first_segment(task, source_log_dir: Path) -> tuple[str, bytes]:
    """The key of events-1's first stored ``.log`` (below the prefix), and its bytes."""
    name = f"events-1/{task.partition(EVENTS1).bases[0]:020d}.log"
    return name, (source_log_dir / name).read_bytes()


def test_throttling_errors_and_a_cut_body_are_retried_to_the_exact_batches(
    stored, proxy, source_log_dir
) -> None:
    expected = batches(LogDirSource(str(source_log_dir)).open(), EVENTS1, 3000)
    remote = ObjectStoreSource(via(proxy, stored)).open()
    remote.partition(EVENTS1)  # planned; the faults hit the reads of the segments
    proxy.inject("status", 503, times=2, matching=".log")
    proxy.inject("status", 500, matching=".log")
    proxy.inject("cut", 100, matching="GET")  # a ranged GET cut mid-body
    began = time.monotonic()  # 4 failed tries of one read: the 5th answers
    assert batches(remote, EVENTS1, 3000) == expected
    assert proxy.injected == 4
    assert time.monotonic() - began < 10


def test_a_stalled_server_fails_after_the_request_timeout_naming_the_offset(stored, proxy) -> None:
    remote = ObjectStoreSource(via(proxy, stored, timeout_s=0.5)).open()
    base = remote.partition(EVENTS1).bases[0]
    proxy.inject("stall", matching=".log")  # once: the retry answers
    assert remote.fetch(EVENTS1, base, 1000, UNCOMMITTED).records
    remote.store.release()
    proxy.inject("stall", times=ATTEMPTS, matching=".log")
    began = time.monotonic()
    key = log_key(stored, EVENTS1, base)
    with pytest.raises(ObjectStoreError, match=rf"after {ATTEMPTS} tries at bucket "
                       rf"'{stored.bucket}' key '{key}'.*"):  # fmt: skip
        remote.fetch(EVENTS1, base + 1, 1000, UNCOMMITTED)
    took = time.monotonic() - began  # curl counts the silence in whole seconds: 1 s a try
    assert took < ATTEMPTS * 1.0 + 1.5 + 5, took


def test_the_server_gone_mid_fetch_loop_fails_naming_the_offset_or_resumes_when_back(
    stored, proxy, source_log_dir
) -> None:
    expected = batches(LogDirSource(str(source_log_dir)).open(), EVENTS1, 3000)
    task = ObjectStoreSource(via(proxy, stored)).open().task_source([EVENTS1]).open()
    first = task.fetch(EVENTS1, expected[0][0], 3000, UNCOMMITTED)
    assert first.records
    offset = expected[3][0]
    proxy.stop()  # refused: the server is gone
    began = time.monotonic()
    with pytest.raises(ObjectStoreError, match=rf"offset {offset} of events-1\) failed after "
                       rf"{ATTEMPTS} tries at bucket '{stored.bucket}' key 'logs/events-1/"
                       r"\d{20}\.(log|index)'"):  # fmt: skip
        task.fetch(EVENTS1, offset, 3000, UNCOMMITTED)
    assert time.monotonic() - began < 10
    back = threading.Timer(0.3, proxy.start)  # back within the retry window (about 1.5 s)
    back.start()
    try:
        assert batches(task, EVENTS1, 3000) == expected
    finally:
        back.join(5)


def test_a_bucket_deleted_after_planning_is_named(s3: S3Server, source_log_dir) -> None:
    location, _, task = planned_task(s3, source_log_dir, "vanish")
    base = task.partition(EVENTS1).bases[0]
    s = location.settings
    admin = pafs.S3FileSystem(access_key=s.access_key, secret_key=s.secret_key, scheme="http",
                              endpoint_override=s.endpoint.removeprefix("http://"),
                              region="us-east-1", allow_bucket_deletion=True)  # fmt: skip
    admin.delete_dir(location.bucket)
    with pytest.raises(FileNotFoundError, match=rf"offset {base} of events-1\): no bucket "
                       rf"'{location.bucket}'.*\(reading bucket '{location.bucket}' key "
                       rf"'{log_key(location, EVENTS1, base)}'\): it was deleted"):  # fmt: skip
        task.fetch(EVENTS1, base, 1000, UNCOMMITTED)


def test_an_object_replaced_after_planning_is_detected_by_size_or_etag(
    s3: S3Server, source_log_dir
) -> None:
    location, store, task = planned_task(s3, source_log_dir, "replaced")
    p = task.partition(EVENTS1)
    name, original = first_segment(task, source_log_dir)
    store.write(name, original + original[:61])  # another size: seen at the first open
    with pytest.raises(
        ObjectChangedError,
        match=rf"key '{location.key(name)}' .*changed since "
        rf"it was planned \(size {len(original) + 61}, planned size {len(original)}\)",
    ):
        task.fetch(EVENTS1, p.bases[0], 1000, UNCOMMITTED)
    store.write(name, original)
    assert task.fetch(EVENTS1, p.bases[0], 1000, UNCOMMITTED).records  # ETag pinned here
    task.store.release()
    store.write(name, original[:-1] + bytes([original[-1] ^ 1]))  # same size, other bytes
    with pytest.raises(ObjectChangedError, match=r"changed since it was planned \(ETag "):
        task.fetch(EVENTS1, p.bases[0] + 1, 1000, UNCOMMITTED)


def test_an_upload_whose_server_goes_away_completes_on_a_rerun(
    s3: S3Server, proxy, source_log_dir
) -> None:
    location = StoreLocation(f"s3://{s3.new_bucket('cutupload')}/l", s3.settings)
    done: list[str] = []

    def gone_after_two(line: str) -> None:
        done.append(line)
        if len(done) == 2:
            proxy.stop()

    with pytest.raises(ObjectStoreError, match=rf"after {ATTEMPTS} tries at bucket "
                       f"'{location.bucket}' key 'l/"):  # fmt: skip
        upload_log_dir(source_log_dir, via(proxy, location).open(), progress=gone_after_two)
    report = upload_log_dir(source_log_dir, location.open())
    assert len(report.skipped) == 2 and report.uploaded and not report.repaired
    local = LogDirSource(str(source_log_dir)).open()
    remote = ObjectStoreSource(location).open()
    assert remote.topics() == local.topics()
    for topic, partitions in local.topics().items():
        for tp in (TopicPartition(topic, i) for i in partitions):
            assert batches(remote, tp, 3000) == batches(local, tp, 3000), tp


def test_timeouts_parse_as_hadoop_s3a_gives_them() -> None:
    from broker_embedded.storage.object_store import StoreSettings

    s = StoreSettings.parse({"fs.s3a.connection.timeout": "1500",
                             "FS.S3A.CONNECTION.ESTABLISH.TIMEOUT": "2s"})  # fmt: skip
    assert (s.request_timeout_s, s.connect_timeout_s) == (1.5, 2.0)
    with pytest.raises(ValueError, match=re.escape("fs.s3a.connection.timeout='soon'")):
        StoreSettings.parse({"fs.s3a.connection.timeout": "soon"})


def spark_load(spark, s3: S3Server, proxy: FaultProxy, stored: StoreLocation):
    """The events topic of ``stored`` read by Spark through ``proxy``."""
    options = {**s3.options(), "fs.s3a.endpoint": proxy.endpoint}
    return (
        spark.read.format("kafkalog")
        .options(**options)
        .option("subscribe", "events")
        .load(stored.uri)
    )


def test_a_spark_read_whose_server_keeps_failing_names_bucket_key_and_offset(
    spark, s3: S3Server, stored, proxy
) -> None:
    from tests.datasource.test_object_store_read import fingerprint

    proxy.inject("status", 503, times=1000, matching=".log")  # every try of every segment
    began = time.monotonic()
    with pytest.raises(
        Exception,
        match=rf"offset \d+ of events-\d\) failed after {ATTEMPTS} "
        rf"tries at bucket '{stored.bucket}' key 'logs/events-\d/\d{{20}}\.log'",
    ):
        fingerprint(spark_load(spark, s3, proxy, stored))
    assert time.monotonic() - began < 60


@pytest.mark.slow  # three Spark reads: 15-20 s on a loaded machine
def test_a_spark_read_rides_out_throttling_to_the_same_rows(
    spark, s3: S3Server, stored, proxy, source_log_dir
) -> None:
    from tests.datasource.test_object_store_read import fingerprint

    local = spark.read.format("kafkalog").option("subscribe", "events").load(str(source_log_dir))
    expected = fingerprint(local)
    proxy.inject("status", 503, times=3, matching=".log")  # within one request's tries
    assert fingerprint(spark_load(spark, s3, proxy, stored)) == expected
    assert proxy.injected == 3


def test_an_object_cut_short_while_a_task_reads_it_is_not_read_as_data(
    s3: S3Server, source_log_dir
) -> None:
    location, store, task = planned_task(s3, source_log_dir, "shrunk")
    p = task.partition(EVENTS1)
    name, original = first_segment(task, source_log_dir)
    first = task.fetch(EVENTS1, p.bases[0], 1, UNCOMMITTED)  # the segment read once
    cut = len(first.records) + 100  # inside the second batch
    store.write(name, original[:cut])  # a handle kept open would pad the short answer
    with pytest.raises(
        ObjectChangedError,
        match=rf"key '{location.key(name)}' .*changed since "
        rf"it was planned \(size {cut}, planned size {len(original)}\)",
    ):
        task.fetch(EVENTS1, p.bases[0] + 1, 1 << 20, UNCOMMITTED)
