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

from broker_embedded.record.records import iter_batches
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


def via(
    proxy: FaultProxy, location: StoreLocation, timeout_s: float = 2.0, attempt_s: float = 30.0
) -> StoreLocation:
    """``location`` reached through ``proxy``, a request failing after ``timeout_s`` of silence
    or ``attempt_s`` in all."""
    settings = replace(
        location.settings,
        endpoint=proxy.endpoint,
        request_timeout_s=timeout_s,
        attempt_timeout_s=attempt_s,
    )
    return StoreLocation(location.uri, settings)


def hung_requests_end(proxy: FaultProxy, before: int) -> None:
    """Stop ``proxy`` (ending the answers it trickles or holds) and wait until the requests left
    running past their deadline have ended (at most 30 s)."""
    from broker_embedded.storage import object_store

    proxy.stop()
    deadline = time.monotonic() + 30
    while object_store._HUNG.count > before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert object_store._HUNG.count == before


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
    with pytest.raises(
        ObjectStoreError,
        match=rf"after {ATTEMPTS} tries at bucket "
        rf"'{stored.bucket}' key '{key}'.*",
    ):
        remote.fetch(EVENTS1, base + 1, 1000, UNCOMMITTED)
    took = time.monotonic() - began  # curl counts the silence in whole seconds: 1 s a try
    assert took < ATTEMPTS * 1.0 + 1.5 + 5, took


def test_a_trickled_or_stalled_body_is_retried_then_fails_within_the_attempt_timeout(
    stored, proxy, source_log_dir
) -> None:
    """A server sending a body 8 bytes every 0.1 s (faster than curl's low-speed limit, so no
    socket timeout fires: pyarrow alone waits for the whole body, hours for a segment), or
    100 bytes of it and then nothing (curl's low-speed timeout fires, but only after about
    7 s with fs.s3a.connection.timeout at 1 s): each try ends after
    fs.s3a.connection.request.timeout, retried as transient; once, the retry reads the exact
    batches; always, the error names bucket, key and offset within the tries' bound."""
    from broker_embedded.storage import object_store

    before = object_store._HUNG.count
    expected = batches(LogDirSource(str(source_log_dir)).open(), EVENTS1, 3000)
    remote = ObjectStoreSource(via(proxy, stored, timeout_s=1.0, attempt_s=1.0)).open()
    base = remote.partition(EVENTS1).bases[0]
    proxy.inject("trickle", 8, matching=".log", method="GET")
    proxy.inject("stall_body", 100, matching=".log", method="GET")
    assert batches(remote, EVENTS1, 3000) == expected
    assert proxy.injected == 2
    remote.store.release()
    for i in range(ATTEMPTS):
        proxy.inject("trickle" if i % 2 else "stall_body", 8, matching=".log", method="GET")
    key = log_key(stored, EVENTS1, base)
    began = time.monotonic()
    with pytest.raises(ObjectStoreError) as failed:
        remote.fetch(EVENTS1, base + 1, 1000, UNCOMMITTED)
    took = time.monotonic() - began
    assert re.fullmatch(
        rf"reading bytes 0 to \d+ \(fetch at offset {base + 1} of events-1\) failed after "
        rf"{ATTEMPTS} tries at bucket '{stored.bucket}' key '{key}' \(endpoint "
        rf"{proxy.endpoint}\): no whole answer within 1 s \(fs.s3a.connection.request.timeout\)"
        ": the server stalled or trickled it",
        str(failed.value),
    ), str(failed.value)
    assert ATTEMPTS * 1.0 <= took < ATTEMPTS * 1.0 + 1.5 + 5, took
    assert object_store._HUNG.count >= before + ATTEMPTS // 2  # the trickled ones still run
    began = time.monotonic()  # pyarrow makes no new S3 client while they run: one is shared
    fresh = ObjectStoreSource(via(proxy, stored, timeout_s=1.0, attempt_s=1.0)).open()
    first = next(iter_batches(fresh.fetch(EVENTS1, base, 1000, UNCOMMITTED).records))
    assert (first.base_offset, first.last_offset, first.compute_crc()) == expected[0]
    assert time.monotonic() - began < 5
    hung_requests_end(proxy, before)


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
    with pytest.raises(
        ObjectStoreError,
        match=rf"offset {offset} of events-1\) failed after "
        rf"{ATTEMPTS} tries at bucket '{stored.bucket}' key 'logs/events-1/"
        r"\d{20}\.(log|index)'",
    ):
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
    admin = pafs.S3FileSystem(
        access_key=s.access_key,
        secret_key=s.secret_key,
        scheme="http",
        endpoint_override=s.endpoint.removeprefix("http://"),
        region="us-east-1",
        allow_bucket_deletion=True,
    )
    admin.delete_dir(location.bucket)
    with pytest.raises(
        FileNotFoundError,
        match=rf"offset {base} of events-1\): no bucket "
        rf"'{location.bucket}'.*\(reading bucket '{location.bucket}' key "
        rf"'{log_key(location, EVENTS1, base)}'\): it was deleted",
    ):
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

    with pytest.raises(
        ObjectStoreError,
        match=rf"after {ATTEMPTS} tries at bucket "
        f"'{location.bucket}' key 'l/",
    ):
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

    s = StoreSettings.parse(
        {"fs.s3a.connection.timeout": "1500", "FS.S3A.CONNECTION.ESTABLISH.TIMEOUT": "2s"}
    )
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


def test_requests_left_running_are_bounded(stored, proxy, monkeypatch) -> None:
    """Each try ended by its deadline leaves its request running (pyarrow cannot cancel it)
    with the memory of its answer: at most MAX_HUNG in a process, then reads fail at once,
    naming bucket and key, until those end."""
    from broker_embedded.storage import object_store

    before = object_store._HUNG.count
    monkeypatch.setattr(object_store, "MAX_HUNG", before + 2)
    remote = ObjectStoreSource(via(proxy, stored, attempt_s=1.0)).open()
    base = remote.partition(EVENTS1).bases[0]
    proxy.inject("trickle", 8, times=ATTEMPTS, matching=".log", method="GET")
    began = time.monotonic()
    with pytest.raises(
        ObjectStoreError,
        match=rf"\) failed at bucket '{stored.bucket}' key "
        rf"'{log_key(stored, EVENTS1, base)}' \(endpoint {proxy.endpoint}\): 2 "
        "requests to the object store still run past their "
        r"fs.s3a.connection.request.timeout \(a server stalling or trickling its "
        r"answers\): no more are sent until they end$",
    ):
        remote.fetch(EVENTS1, base, 1000, UNCOMMITTED)
    assert 2.0 <= time.monotonic() - began < 2.0 + 0.3 + 5
    assert proxy.injected == 2
    hung_requests_end(proxy, before)


@pytest.mark.slow  # five tries of 1 s each in a Spark task: 8-15 s
def test_a_spark_read_from_a_trickling_server_fails_in_bounded_time(
    spark, s3: S3Server, stored, proxy
) -> None:
    from tests.datasource.test_object_store_read import fingerprint

    proxy.inject("trickle", 8, times=1000, matching=".log", method="GET")
    options = {
        **s3.options(),
        "fs.s3a.endpoint": proxy.endpoint,
        "fs.s3a.connection.request.timeout": "1s",
    }
    df = spark.read.format("kafkalog").options(**options).option("subscribe", "events")
    began = time.monotonic()
    with pytest.raises(
        Exception,
        match=rf"offset \d+ of events-\d\) failed after {ATTEMPTS} tries at bucket "
        rf"'{stored.bucket}' key 'logs/events-\d/\d{{20}}\.log' \(endpoint {proxy.endpoint}\): "
        r"no whole answer within 1 s \(fs.s3a.connection.request.timeout\)",
    ):
        fingerprint(df.load(stored.uri))
    assert time.monotonic() - began < 60


@pytest.mark.slow  # a tiered broker, five tries of 1 s: 8-12 s
def test_the_broker_s_remote_read_from_a_trickling_store_answers_an_error_in_bounded_time(
    s3: S3Server, tmp_path: Path
) -> None:
    """kafkalog serve's remote read (the remote log manager's reader pool) of a store that
    trickles: UNKNOWN_SERVER_ERROR naming the key and the timeout, after the tries' bound, not
    a reader thread held forever; the store answering again, the same fetch reads."""
    from broker_embedded.broker import Broker
    from broker_embedded.common.fetch_request import FetchRequest, PartitionFetch
    from broker_embedded.common.producer_record import ProducerRecord
    from broker_embedded.storage import object_store
    from tests.broker_embedded.storage.test_remote_fetch import r_ok
    from tests.broker_embedded.storage.test_remote_log_manager import TIERED, tiering_config

    before = object_store._HUNG.count
    uri = f"s3://{s3.new_bucket('trickled')}/b0"
    tp = TopicPartition("tiered", 0)
    with FaultProxy(s3.endpoint) as proxy:
        rsm = (
            ("location", uri),
            *{
                **s3.options(),
                "fs.s3a.endpoint": proxy.endpoint,
                "fs.s3a.connection.request.timeout": "1000",
            }.items(),
        )
        config = replace(tiering_config(uri, s3), rsm_config=rsm, remote_fetch_max_wait_ms=30_000)
        with Broker(tmp_path / "l", config=config, create=True) as broker:
            broker.create_topic("tiered", config={**TIERED, "local.retention.ms": "0"})
            for i in range(30):
                broker.produce("tiered", 0, [ProducerRecord(f"record {i} ".encode() * 8)])
            broker.remote_log_manager.run_once()
            broker.log_manager.get_log(tp).delete_old_segments()
            assert broker.log_manager.get_log(tp).local_log_start_offset > 0
            request = FetchRequest((PartitionFetch(tp, 0, 1 << 20),), max_wait_ms=0)
            key = f"b0/tiered-0/{0:020d}.log"
            proxy.inject("trickle", 8, times=ATTEMPTS, matching=key, method="GET")
            began = time.monotonic()
            r = broker.fetch(request).partitions[0]
            took = time.monotonic() - began
            assert r.error_name == "UNKNOWN_SERVER_ERROR" and r.records == b""
            message = str(r.error)
            assert f"after {ATTEMPTS} tries at bucket" in message and key in message
            assert "no whole answer within 1 s (fs.s3a.connection.request.timeout)" in message
            assert ATTEMPTS * 1.0 <= took < ATTEMPTS * 1.0 + 1.5 + 5, took
            assert r_ok(broker, request)  # the store answering again
            hung_requests_end(proxy, before)
