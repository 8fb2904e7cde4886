"""Fetch and ListOffsets of a tiered partition served from the store (KIP-405), against a real
S3 server (SeaweedFS, the session's ``s3`` fixture): a consumer over the protocol reads from
offset 0 of a topic whose early segments are only in the store, ListOffsets answers -2/-4/-1
and timestamps exactly, and a store that fails answers the partition's error, not a hang."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker_embedded.broker import Broker
from broker_embedded.common.fetch_request import FetchRequest, PartitionFetch
from broker_embedded.common.producer_record import ProducerRecord
from broker_embedded.errors import RemoteStorageError
from broker_embedded.record.records import iter_batches
from broker_embedded.server.handlers import broker_server
from broker_embedded.storage.remote_log_segment_metadata import RemoteLogSegmentMetadata
from broker_embedded.storage.topic_partition import TopicPartition
from tests.broker_embedded.storage.test_remote_log_manager import (
    TIERED,
    local_bases,
    manifests,
    tiering_config,
)
from tests.seaweedfs import S3Server

# the records' timestamps: T0 + 10 * offset, an hour ago (within the default retention.ms)
T0 = int(time.time()) * 1000 - 3_600_000
COUNT = 60


def value(i: int) -> bytes:
    return f"record {i:03d} ".encode() * 8


@contextlib.contextmanager
def tiered_broker(
    log_dir: Path, uri: str, s3: S3Server, endpoint: str | None = None, **config: int
) -> Iterator[Broker]:
    """A broker whose topic ``tiered`` holds :data:`COUNT` records (one a batch), its closed
    segments copied to the store (through ``endpoint`` when given) and then deleted locally
    (``local.retention.ms`` 0)."""
    cfg = tiering_config(uri, s3)
    if endpoint is not None:
        rsm = tuple((k, endpoint if k == "fs.s3a.endpoint" else v) for k, v in cfg.rsm_config)
        cfg = dataclasses.replace(cfg, rsm_config=rsm)
    cfg = dataclasses.replace(cfg, num_network_threads=2, num_io_threads=2, **config)
    with Broker(log_dir, config=cfg, create=True) as broker:
        broker.create_topic("tiered", config={**TIERED, "local.retention.ms": "0"})
        for i in range(COUNT):
            broker.produce("tiered", 0, [ProducerRecord(value(i), timestamp=T0 + 10 * i)])
        broker.remote_log_manager.run_once()
        broker.log_manager.get_log(TopicPartition("tiered", 0)).delete_old_segments()
        yield broker


def quick_tiering_config(uri: str, s3: S3Server):
    """:func:`tiering_config` for a 2-broker cluster whose follower falls out of the ISR and
    fetches again within a second."""
    fast = {
        "replica_lag_time_max_ms": 500,
        "replica_fetch_wait_max_ms": 50,
        "replica_fetch_backoff_ms": 50,
    }
    return dataclasses.replace(tiering_config(uri, s3), **fast)


@contextlib.contextmanager
def wire(broker: Broker) -> Iterator[str]:
    """``broker`` served on 127.0.0.1 (port 0): its bootstrap address."""
    server = broker_server(broker, ["PLAINTEXT://127.0.0.1:0"])
    server.start()
    try:
        endpoint = server.endpoints[0]
        yield f"{endpoint.host}:{endpoint.port}"
    finally:
        server.shutdown(5.0)


def test_a_consumer_reads_from_offset_0_through_the_store(s3: S3Server, tmp_path: Path) -> None:
    """Kafka's consumer (confluent-kafka) from the beginning: every record once, in order,
    equal to what was produced, the early ones served from the store; ListOffsets -2 is the
    store's first offset, -4 the first local one, -1 the end, and a timestamp finds its record
    in the store and in the local log."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer
    from confluent_kafka import TopicPartition as KafkaTopicPartition

    uri = f"s3://{s3.new_bucket('fetch')}/b0"
    tp = TopicPartition("tiered", 0)
    with tiered_broker(tmp_path / "l", uri, s3) as broker:
        (local_start,) = local_bases(tmp_path / "l", tp)
        stored = manifests(broker.remote_log_manager.location, tp)
        assert local_start > 20 and sorted(stored)[0] == 0
        assert max(m.next_offset for m in stored.values()) == local_start
        assert [broker.list_offsets("tiered", 0, t).offset for t in (-2, -4, -1)] == [
            0,
            local_start,
            COUNT,
        ]
        for offset in (0, 7, local_start - 1, local_start, COUNT - 1):  # store, then local
            found = broker.list_offsets("tiered", 0, T0 + 10 * offset - 5)
            assert (found.offset, found.timestamp) == (offset, T0 + 10 * offset)
        assert broker.list_offsets("tiered", 0, T0 + 10 * COUNT).offset == -1
        with wire(broker) as bootstrap:
            consumer = Consumer(
                {
                    "bootstrap.servers": bootstrap,
                    "group.id": "remote-fetch",
                    "enable.auto.commit": False,
                    "max.partition.fetch.bytes": 1024,
                }
            )
            try:
                consumer.assign([KafkaTopicPartition("tiered", 0, OFFSET_BEGINNING)])
                low, high = consumer.get_watermark_offsets(KafkaTopicPartition("tiered", 0), 10)
                assert (low, high) == (0, COUNT)
                seen: list[tuple[int, bytes, int]] = []
                deadline = time.monotonic() + 30
                while len(seen) < COUNT and time.monotonic() < deadline:
                    m = consumer.poll(0.5)
                    if m is not None:
                        assert m.error() is None, m.error()
                        seen.append((m.offset(), m.value(), m.timestamp()[1]))
            finally:
                consumer.close()
    assert seen == [(i, value(i), T0 + 10 * i) for i in range(COUNT)]


def test_a_fetch_in_the_store_is_bounded_and_one_partition_a_request(
    s3: S3Server, tmp_path: Path
) -> None:
    """A remote read returns whole batches of one stored segment within the partition's max
    bytes (the first batch whole when it is alone: KIP-74); a request reads one partition's
    remote data (Kafka's rule): a second partition in the store answers no records."""
    uri = f"s3://{s3.new_bucket('bounds')}/b0"
    tp = TopicPartition("tiered", 0)
    with tiered_broker(tmp_path / "l", uri, s3) as broker:
        batch = len(broker.log_manager.get_log(tp).batches(COUNT - 1)[0].buffer)
        segment = broker.remote_log_manager.remote_segments(tp, broker.log_manager.get_log(tp))
        first_end = segment[0].next_offset
        for max_bytes, want in ((1, [0]), (2 * batch + 1, [0, 1]), (1 << 20, range(first_end))):
            r = broker.fetch(FetchRequest((PartitionFetch(tp, 0, max_bytes),), max_wait_ms=0))
            part = r.partitions[0]
            assert part.error is None and part.log_start_offset == 0
            assert [b.base_offset for b in iter_batches(part.records)] == list(want)
        twice = (PartitionFetch(tp, 3, 1 << 20), PartitionFetch(tp, 5, 1 << 20))
        r = broker.fetch(FetchRequest(twice, max_wait_ms=0))
        assert [b.base_offset for b in iter_batches(r.partitions[0].records)] == list(
            range(3, first_end)
        )
        assert r.partitions[1].error is None and r.partitions[1].records == b""


@pytest.mark.slow  # the store's retries twice and a 3 s remote wait: 7-8 s
def test_a_failing_store_answers_the_error_naming_the_key(
    s3: S3Server, tmp_path: Path, caplog
) -> None:
    """The store gone (connections refused): the fetch answers UNKNOWN_SERVER_ERROR (Kafka's
    answer to a RemoteStorageException) within the store's retry bound, and the broker's log
    names the key; ListOffsets by timestamp too. Back, the same fetch reads. A store that
    stops answering: the fetch answers after remote.fetch.max.wait.ms, no records and no
    error (the consumer asks again), as Kafka's DelayedRemoteFetch expires."""
    from tests.s3_proxy import FaultProxy

    tp = TopicPartition("tiered", 0)
    uri = f"s3://{s3.new_bucket('failing')}/b0"
    with (
        FaultProxy(s3.endpoint) as proxy,
        tiered_broker(
            tmp_path / "l", uri, s3, proxy.endpoint, remote_fetch_max_wait_ms=3_000
        ) as broker,
    ):
        request = FetchRequest((PartitionFetch(tp, 0, 1 << 20),), max_wait_ms=0)
        assert r_ok(broker, request)
        proxy.stop()
        began = time.monotonic()
        with caplog.at_level(logging.ERROR, "broker_embedded.storage.remote_log_manager"):
            r = broker.fetch(request).partitions[0]
            assert time.monotonic() - began < 8
            assert r.error_name == "UNKNOWN_SERVER_ERROR" and r.records == b""
            assert "tiered-0/00000000000000000000." in str(r.error)
            with pytest.raises(RemoteStorageError, match="tiered-0/00000000000000000000"):
                broker.replica_manager.list_offsets(tp, T0 + 5)
        logged = [r.getMessage() for r in caplog.records]
        assert any("fetching offset 0 of tiered-0" in m and "tiered-0/0000" in m for m in logged)
        proxy.start()
        assert r_ok(broker, request)
        proxy.inject("stall", matching="tiered-0/00000000000000000000.")
        began = time.monotonic()
        r = broker.fetch(request).partitions[0]
        assert 2.9 < time.monotonic() - began < 8
        assert r.error is None and r.records == b"" and r.high_watermark == COUNT


def r_ok(broker: Broker, request: FetchRequest) -> bool:
    part = broker.fetch(request).partitions[0]
    return part.error is None and len(part.records) > 0


def test_remote_retention_deletes_the_oldest_segments_and_moves_the_log_start(
    s3: S3Server, tmp_path: Path
) -> None:
    """retention.ms (by the manifests' max timestamps) and retention.bytes (remote plus local
    bytes, as Kafka's RLMExpirationTask counts) delete exactly the oldest stored segments
    past them, objects and manifest, and move the log start; a fetch below it is then
    OFFSET_OUT_OF_RANGE. DeleteRecords into the store deletes the segments wholly below it.
    Deleting the topic deletes its objects, and the topic created again is tiered."""
    uri = f"s3://{s3.new_bucket('expire')}/b0"
    tp = TopicPartition("tiered", 0)
    base_config = {**TIERED, "local.retention.ms": "0"}
    with tiered_broker(tmp_path / "l", uri, s3) as broker:
        rlm, unified = broker.remote_log_manager, broker.log_manager.get_log(tp)
        location = rlm.location
        stored = [m for _, m in sorted(manifests(location, tp).items())]
        assert len(stored) >= 7 and unified.log_start_offset == 0
        broker.alter_topic_config("tiered", {**base_config, "retention.ms": "1000"})
        rlm.run_once(now_ms=stored[1].max_timestamp_ms + 1000)  # 0 and 1 past it, not 2
        assert sorted(manifests(location, tp)) == [m.base_offset for m in stored[2:]]
        assert broker.list_offsets("tiered", 0, -2).offset == stored[2].base_offset
        r = broker.fetch(FetchRequest((PartitionFetch(tp, 0, 1 << 20),), max_wait_ms=0))
        assert r.partitions[0].error_name == "OFFSET_OUT_OF_RANGE"
        at = stored[2].base_offset
        r = broker.fetch(FetchRequest((PartitionFetch(tp, at, 1 << 20),), max_wait_ms=0))
        assert next(iter_batches(r.partitions[0].records)).base_offset == at
        names = location.open().list("tiered-0/")
        gone = tuple("tiered-0/" + _stem(m) for m in stored[:2])
        assert [n for n in names if n.startswith(gone)] == []
        (active,) = local_bases(tmp_path / "l", tp)
        local = (tmp_path / "l" / tp.dir_name / f"{active:020d}.log").stat().st_size
        total = sum(m.size_in_bytes for m in stored[2:]) + local
        keep = total - stored[2].size_in_bytes - stored[3].size_in_bytes  # 2 and 3 go
        broker.alter_topic_config("tiered", {**base_config, "retention.bytes": str(keep)})
        rlm.run_once()
        assert sorted(manifests(location, tp)) == [m.base_offset for m in stored[4:]]
        assert unified.log_start_offset == stored[4].base_offset
        assert rlm.deleted == 4
        at = stored[5].base_offset + 1  # DeleteRecords into the store: what lies below goes
        assert broker.replica_manager.delete_records(tp, at) == at
        rlm.run_once()
        assert sorted(manifests(location, tp)) == [m.base_offset for m in stored[5:]]
        assert broker.list_offsets("tiered", 0, -2).offset == at
        r = broker.fetch(FetchRequest((PartitionFetch(tp, at, 1 << 20),), max_wait_ms=0))
        assert next(iter_batches(r.partitions[0].records)).base_offset == at  # one record each
        broker.delete_topic("tiered")
        deadline = time.monotonic() + 30
        while location.open().list("tiered-0/") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert location.open().list("tiered-0/") == {}
        broker.create_topic("tiered", config=base_config)
        for i in range(12):
            broker.produce("tiered", 0, [value(i)])
        assert rlm.run_once() > 0


def _stem(m) -> str:
    return f"{m.base_offset:020d}."


@pytest.mark.slow  # two kafkalog serve starts
def test_a_serve_killed_mid_deletion_finishes_it_after_a_restart(
    s3: S3Server, tmp_path: Path
) -> None:
    """``kafkalog serve`` SIGKILLed while remote retention deletes a segment (its ``.log``
    DELETE held by a proxy, after its manifest was marked and its first objects went): a
    reader of the store skips the marked segment and reads the rest whole; restarted, the
    broker finishes the deletion (and the next segment's, past retention.bytes too) and its
    log start is the first stored offset."""
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as KafkaTopicPartition
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    from broker_embedded.storage.object_store import StoreLocation
    from broker_embedded.storage.object_store_fetch_source import ObjectStoreSource
    from tests.broker_embedded.storage.test_remote_log_manager import (
        batches,
        serving_tiered,
        wait_for,
        write_broker_config,
    )
    from tests.s3_proxy import FaultProxy
    from tests.spark_kafkalog._serve_proc import ServeProcess

    bucket = s3.new_bucket("killdel")
    uri = f"s3://{bucket}/b0"
    location, tp = StoreLocation(uri, s3.settings), TopicPartition("tiered", 0)
    logs = tmp_path / "l"
    with FaultProxy(s3.endpoint) as proxy:
        proxied = {**s3.options(), "fs.s3a.endpoint": proxy.endpoint}
        with serving_tiered(tmp_path, logs, uri, proxied) as serve:
            admin = AdminClient({"bootstrap.servers": serve.bootstrap})
            stored = [m for _, m in sorted(manifests(location, tp).items())]
            (active,) = local_bases(logs, tp)[-1:]
            local = (logs / tp.dir_name / f"{active:020d}.log").stat().st_size
            total = sum(m.size_in_bytes for m in stored) + local
            keep = total - stored[0].size_in_bytes - stored[1].size_in_bytes
            held = f"DELETE /{bucket}/b0/tiered-0/{_stem(stored[0])}log"
            proxy.inject("stall", times=3, matching=held)  # its retries held too
            entry = ConfigEntry(
                "retention.bytes", str(keep), incremental_operation=AlterConfigOpType.SET
            )
            resource = ConfigResource(ResourceType.TOPIC, "tiered", incremental_configs=[entry])
            for future in admin.incremental_alter_configs([resource]).values():
                future.result(30)
            wait_for("the deletion held at the first .log", lambda: proxy.injected >= 1, 30)
            serve.kill()
    store = location.open()
    first = f"tiered-0/{stored[0].name_of(stored[0].base_offset)}"
    assert b'"DELETE_SEGMENT_STARTED"' in store.read(first)
    assert f"tiered-0/{_stem(stored[0])}log" in store.list("tiered-0/")  # half deleted
    remote = ObjectStoreSource(location).open()  # a reader of the store skips it
    end = stored[-1].next_offset
    assert [b[0] for b in batches(remote, tp)] == list(range(stored[1].base_offset, end))
    direct = write_broker_config(tmp_path / "direct.toml", uri, s3.options())
    with ServeProcess(logs, "--broker-config", direct, stderr=tmp_path / "err2") as serve:
        wait_for(
            "the deletion finished",
            lambda: sorted(manifests(location, tp)) == [m.base_offset for m in stored[2:]],
        )
        consumer = Consumer({"bootstrap.servers": serve.bootstrap, "group.id": "killdel"})
        try:
            low, high = consumer.get_watermark_offsets(KafkaTopicPartition("tiered", 0), 10)
        finally:
            consumer.close()
        assert (low, high) == (stored[2].base_offset, 30)
        assert serve.terminate() == 0
    gone = tuple(f"tiered-0/{_stem(m)}" for m in stored[:2])
    assert [n for n in location.open().list("tiered-0/") if n.startswith(gone)] == []


def test_read_committed_from_the_store_skips_the_aborted_transactions(
    s3: S3Server, tmp_path: Path
) -> None:
    """Kafka's read_committed consumer from offset 0 of a topic whose transactions are only in
    the store: the committed records, in order, none of the aborted ones (the aborted
    transactions come from the stored ``.txnindex``)."""
    from confluent_kafka import Producer

    from tests.broker_embedded.server._consume import consume

    uri = f"s3://{s3.new_bucket('txn')}/b0"
    tp = TopicPartition("tx", 0)
    cfg = dataclasses.replace(tiering_config(uri, s3), num_network_threads=2, num_io_threads=2)
    with Broker(tmp_path / "l", config=cfg, create=True) as broker, wire(broker) as bootstrap:
        broker.create_topic("tx", config={**TIERED, "local.retention.ms": "0"})
        producer = Producer(
            {"bootstrap.servers": bootstrap, "transactional.id": "tiered-tx", "linger.ms": 0}
        )
        producer.init_transactions(30)
        committed = []
        for t in range(8):
            producer.begin_transaction()
            values = [f"txn {t} record {i} ".encode() * 6 for i in range(3)]
            for v in values:
                producer.produce("tx", v, partition=0)
            assert producer.flush(30) == 0
            if t % 3 == 1:
                producer.abort_transaction(30)
            else:
                producer.commit_transaction(30)
                committed += values
        assert broker.controller.transaction_coordinator.wait_completed("tiered-tx", 30)
        unified = broker.log_manager.get_log(tp)
        unified.roll()  # the last transaction's marker closes its segment
        broker.remote_log_manager.run_once()
        unified.delete_old_segments()
        assert unified.local_log_start_offset == unified.log_end_offset  # all in the store
        assert unified.log_start_offset == 0
        got = consume(bootstrap, "tx", 1, "read_committed", 30)
    assert [v for _, _, v, _, _ in got] == committed


def test_a_deleted_topic_s_objects_are_deleted_after_a_restart(
    s3: S3Server, tmp_path: Path
) -> None:
    """The store unreachable when a tiered topic is deleted: the partitions still to delete are
    recorded in the log dir, and the broker started again (the store back) deletes them."""
    from broker_embedded.storage.object_store import StoreLocation
    from broker_embedded.storage.partition_metadata import topic_id_to_string
    from broker_embedded.storage.remote_log_pending_deletions import PENDING_FILE
    from tests.s3_proxy import FaultProxy

    uri = f"s3://{s3.new_bucket('gone')}/b0"
    tp, logs = TopicPartition("tiered", 0), tmp_path / "l"
    with FaultProxy(s3.endpoint) as proxy:
        with tiered_broker(logs, uri, s3, proxy.endpoint) as broker:
            location = StoreLocation(uri, s3.settings)  # not through the proxy
            topic_id = topic_id_to_string(broker.log_manager.get_log(tp).topic_id)
            assert manifests(location, tp)
            proxy.stop()
            broker.delete_topic("tiered")
            assert (logs / PENDING_FILE).read_text() == f"0\ntiered 0 {topic_id}\n"
    assert manifests(location, tp)  # nothing could be deleted
    with Broker(logs, config=tiering_config(uri, s3)) as broker:
        deadline = time.monotonic() + 30
        while (logs / PENDING_FILE).exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not (logs / PENDING_FILE).exists()
        assert location.open().list("tiered-0/") == {}


def test_a_follower_behind_the_leader_s_local_log_start_restarts_there(
    s3: S3Server, tmp_path: Path
) -> None:
    """A follower that was down while its leader tiered and deleted locally fetches below the
    leader's local log start: OFFSET_MOVED_TO_TIERED_STORAGE, and it restarts its log empty at
    that local start with the leader's log start offset, then catches up and rejoins the ISR."""
    from broker_embedded.cluster import EmbeddedCluster

    uri = f"s3://{s3.new_bucket('follow')}/c"
    tp = TopicPartition("tiered", 0)
    cluster = EmbeddedCluster(tmp_path / "c", 2, config=quick_tiering_config(uri, s3))
    try:
        cluster.create_topic("tiered", 1, 2, config={**TIERED, "local.retention.ms": "0"})
        leader = cluster.leader_for(tp)
        (follower_id,) = {0, 1} - {leader.broker_id}
        cluster.stop_broker(follower_id)
        for i in range(COUNT):
            leader.produce("tiered", 0, [value(i)], acks=1)
        led = leader.log_manager.get_log(tp)
        deadline = time.monotonic() + 20
        while led.high_watermark < COUNT and time.monotonic() < deadline:
            time.sleep(0.05)  # the stopped follower leaves the ISR
        assert led.high_watermark == COUNT
        leader.remote_log_manager.run_once()
        led.delete_old_segments()
        local_start = led.local_log_start_offset
        assert local_start > 0 and led.log_start_offset == 0
        follower = cluster.restart_broker(follower_id)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            lg = follower.log_manager.get_log(tp)
            if lg is not None and lg.log_end_offset == COUNT:
                break
            time.sleep(0.05)
        lg = follower.log_manager.get_log(tp)
        assert (lg.log_start_offset, lg.local_log_start_offset, lg.log_end_offset) == (
            0,
            local_start,
            COUNT,
        )
        assert [b.base_offset for b in lg.batches()] == list(range(local_start, COUNT))
    finally:
        cluster.close()


@pytest.mark.slow  # four rounds of the broker's 3 s remote wait: 12-20 s
def test_the_wire_source_asks_again_when_a_remote_read_answers_nothing_in_time(
    s3: S3Server, tmp_path: Path
) -> None:
    """A remote read that outlives ``remote.fetch.max.wait.ms`` answers no records and no
    error, and a store that fails answers UNKNOWN_SERVER_ERROR. The wire source (a Spark task's
    reader) asks again, as Kafka's consumer does, rather than take the empty answer for the end
    of the data (taken so, it once ended Spark tasks' ranges early, their rows silently missing)
    or fail the task at once. A read that never finishes fails after
    ``kafkaConsumer.pollTimeoutMs``, naming the partition, the offset and the last answer."""
    import threading

    from broker_embedded.client.wire_fetch_source import WireSource
    from broker_embedded.errors import KafkaLogError
    from broker_embedded.storage.fetch_data_info import IsolationLevel
    from tests.s3_proxy import FaultProxy

    tp = TopicPartition("tiered", 0)
    bucket = s3.new_bucket("again")
    first_log = f"GET /{bucket}/b0/tiered-0/00000000000000000000.log"

    def fetch_at_0(poll_timeout_ms: int) -> bytes:
        source = WireSource(bootstrap, poll_timeout_ms=poll_timeout_ms).open()
        try:
            return source.fetch(tp, 0, 1 << 20, IsolationLevel.READ_UNCOMMITTED).records
        finally:
            source.close()

    with (
        FaultProxy(s3.endpoint) as proxy,
        tiered_broker(
            tmp_path / "l", f"s3://{bucket}/b0", s3, proxy.endpoint, remote_fetch_max_wait_ms=200
        ) as broker,
        wire(broker) as bootstrap,
    ):
        proxy.inject("stall", matching=first_log)
        assert next(iter_batches(fetch_at_0(30_000))).base_offset == 0
        assert proxy.injected == 1
        proxy.stop()  # the store gone: UNKNOWN_SERVER_ERROR, until it is back
        back = threading.Timer(2.0, proxy.start)
        back.start()
        assert next(iter_batches(fetch_at_0(30_000))).base_offset == 0
        back.join()
        proxy.inject("stall", times=20, matching=first_log)
        began = time.monotonic()
        with pytest.raises(KafkaLogError, match="no records for tiered-0 at offset 0 in 1500 ms"):
            fetch_at_0(1_500)
        assert time.monotonic() - began < 15
        proxy.stop()
        with pytest.raises(KafkaLogError, match="no records for tiered-0 at offset 0 in 1500 ms"):
            fetch_at_0(1_500)  # the store's errors or the remote wait, whichever came last


def test_a_segment_without_timestamps_expires_by_its_file_s_time(
    s3: S3Server, tmp_path: Path
) -> None:
    """A stored segment whose records have no timestamp (-1) has its ``.log``'s modification
    time as its manifest's max timestamp (Kafka's ``LogSegment.largestTimestamp``): retention.ms
    counts from it, so it is not deleted right after its copy."""
    uri = f"s3://{s3.new_bucket('nots')}/b0"
    tp = TopicPartition("nots", 0)
    cfg = dataclasses.replace(tiering_config(uri, s3), num_network_threads=1, num_io_threads=1)
    with Broker(tmp_path / "l", config=cfg, create=True) as broker:
        broker.create_topic("nots", config={**TIERED, "retention.ms": "3600000"})
        for i in range(20):
            broker.produce("nots", 0, [ProducerRecord(value(i), timestamp=-1)])
        unified = broker.log_manager.get_log(tp)
        bases = unified.segment_base_offsets
        mtimes = {
            b: int((tmp_path / "l" / tp.dir_name / f"{b:020d}.log").stat().st_mtime * 1000)
            for b in bases[:-1]
        }
        copied = broker.remote_log_manager.run_once()
        assert copied == len(bases) - 1 >= 2
        stored = manifests(broker.remote_log_manager.location, tp)
        assert {b: m.max_timestamp_ms for b, m in stored.items()} == mtimes
        assert unified.log_start_offset == 0 and broker.remote_log_manager.deleted == 0


def test_a_failed_remote_deletion_is_finished_by_the_next_pass(
    s3: S3Server, tmp_path: Path
) -> None:
    """The store refusing a DELETE (past its retries) mid-retention leaves the segments in the
    store; the next pass lists the partition again and deletes them (they were dropped from
    the broker's tracking before their deletion)."""
    from tests.s3_proxy import FaultProxy

    uri = f"s3://{s3.new_bucket('delfail')}/b0"
    tp = TopicPartition("tiered", 0)
    with (
        FaultProxy(s3.endpoint) as proxy,
        tiered_broker(tmp_path / "l", uri, s3, proxy.endpoint) as broker,
    ):
        rlm, location = broker.remote_log_manager, broker.remote_log_manager.location
        stored = [m for _, m in sorted(manifests(location, tp).items())]
        broker.alter_topic_config(
            "tiered", {**TIERED, "local.retention.ms": "0", "retention.ms": "1000"}
        )
        proxy.inject("status", 503, times=5, matching="DELETE ")
        rlm.run_once(now_ms=stored[1].max_timestamp_ms + 1000)  # 0 and 1 past it: refused
        assert proxy.injected == 5
        assert broker.list_offsets("tiered", 0, -2).offset == stored[2].base_offset
        rlm.run_once(now_ms=stored[1].max_timestamp_ms + 1000)
        assert sorted(manifests(location, tp)) == [m.base_offset for m in stored[2:]]
        gone = tuple("tiered-0/" + _stem(m) for m in stored[:2])
        assert [n for n in location.open().list("tiered-0/") if n.startswith(gone)] == []
        assert rlm.deleted == 2


def test_a_partition_led_again_lists_the_store_again(s3: S3Server, tmp_path: Path) -> None:
    """A partition this broker stops leading forgets its cached stored segments: led again,
    its remote segments are the store's, not those of when it last led (another leader's
    retention deleted the first one meanwhile)."""
    from broker_embedded.storage.remote_log_manager import RemoteLogManager

    uri = f"s3://{s3.new_bucket('relead')}/b0"
    tp = TopicPartition("tiered", 0)
    with tiered_broker(tmp_path / "l", uri, s3) as broker:
        unified, location = broker.log_manager.get_log(tp), broker.remote_log_manager.location
        led = {tp: unified}
        rlm = RemoteLogManager(1, tmp_path / "other", location, lambda: dict(led), 3_600_000)
        try:
            rlm.run_once()
            stored = rlm.remote_segments(tp, unified)
            assert [m.base_offset for m in stored] == sorted(manifests(location, tp))
            led.clear()
            rlm.run_once()
            store = location.open()
            for f in stored[0].files:  # another leader's retention deleted the first segment
                store.delete(f"tiered-0/{f.name}")
            store.delete(f"tiered-0/{RemoteLogSegmentMetadata.name_of(0)}")
            led[tp] = unified
            assert rlm.remote_segments(tp, unified) == stored[1:]
        finally:
            rlm.close()


def test_remote_retention_deletes_only_below_the_log_start_it_set(
    s3: S3Server, tmp_path: Path
) -> None:
    """The log start moves at most to the high watermark: a segment past retention that holds
    the high watermark stays in the store (readable from the log start), only those wholly
    below it go."""
    uri = f"s3://{s3.new_bucket('capped')}/b0"
    tp = TopicPartition("tiered", 0)
    with tiered_broker(tmp_path / "l", uri, s3) as broker:
        rlm, unified = broker.remote_log_manager, broker.log_manager.get_log(tp)
        stored = [m for _, m in sorted(manifests(rlm.location, tp).items())]
        broker.alter_topic_config(
            "tiered", {**TIERED, "local.retention.ms": "0", "retention.ms": "1000"}
        )
        hw = stored[1].base_offset + 1  # e.g. a new leader whose high watermark lags
        assert unified.update_high_watermark(hw) == hw
        rlm.run_once(now_ms=stored[1].max_timestamp_ms + 1000)  # 0 and 1 past retention
        assert unified.log_start_offset == hw
        assert sorted(manifests(rlm.location, tp)) == [m.base_offset for m in stored[1:]]
        assert [m.base_offset for m in rlm.remote_segments(tp, unified)] == [
            m.base_offset for m in stored[1:]
        ]


def test_a_topic_created_again_is_not_read_with_the_old_topic_s_index(
    s3: S3Server, tmp_path: Path
) -> None:
    """A broker that read a tiered topic (its ``.index`` cached), stopped leading it while the
    topic was deleted and created again with other record sizes, and leads it again reads the
    new topic's records: its index cache is keyed by topic id too, not by object name only."""
    from broker_embedded.storage.fetch_data_info import FetchIsolation
    from broker_embedded.storage.remote_log_manager import RemoteLogManager
    from broker_embedded.storage.remote_storage_fetch_info import RemoteStorageFetchInfo

    uri = f"s3://{s3.new_bucket('reindex')}/b0"
    tp = TopicPartition("again", 0)
    config = {**TIERED, "index.interval.bytes": "1"}  # an index entry a batch
    cfg = dataclasses.replace(tiering_config(uri, s3), num_network_threads=1, num_io_threads=1)
    with Broker(tmp_path / "l", config=cfg, create=True) as broker:
        location = broker.remote_log_manager.location

        def tiered(size: int) -> None:
            broker.create_topic("again", config=config)
            for i in range(20):
                broker.produce("again", 0, [ProducerRecord(b"%03d" % i * size)])
            broker.remote_log_manager.run_once()
            assert manifests(location, tp)

        def info(offset: int) -> RemoteStorageFetchInfo:
            return RemoteStorageFetchInfo(
                tp, offset, 1 << 20, True, FetchIsolation.HIGH_WATERMARK, 0
            )

        tiered(40)
        led = {tp: broker.log_manager.get_log(tp)}
        rlm = RemoteLogManager(1, tmp_path / "other", location, lambda: dict(led), 3_600_000)
        try:
            first = [b.base_offset for b in iter_batches(rlm.read(info(3), led[tp]).records)]
            assert first[0] == 3
            led.clear()
            rlm.run_once()
            broker.delete_topic("again")
            deadline = time.monotonic() + 30
            while location.open().list("again-0/") and time.monotonic() < deadline:
                time.sleep(0.05)
            assert location.open().list("again-0/") == {}
            tiered(5)
            led[tp] = broker.log_manager.get_log(tp)
            found = next(iter_batches(rlm.read(info(3), led[tp]).records))
            assert bytes(found.buffer) == bytes(led[tp].batches(3)[0].buffer)  # kept locally
        finally:
            rlm.close()


def test_a_broker_restarted_without_remote_storage_starts_the_log_at_its_first_segment(
    s3: S3Server, tmp_path: Path
) -> None:
    """remote.log.storage.system.enable off at a restart: the topic's remote.storage.enable
    does nothing (Kafka's isRemoteLogEnabled), so the log starts at its first local segment,
    not at the tiered log start below it (offsets no one can read then)."""
    uri = f"s3://{s3.new_bucket('sysoff')}/b0"
    tp = TopicPartition("tiered", 0)
    with tiered_broker(tmp_path / "l", uri, s3) as broker:
        local_start = broker.log_manager.get_log(tp).local_log_start_offset
        assert local_start > 0 and broker.list_offsets("tiered", 0, -2).offset == 0
    cfg = dataclasses.replace(tiering_config(uri, s3), remote_log_storage_system_enable=False)
    with Broker(tmp_path / "l", config=cfg) as broker:
        unified = broker.log_manager.get_log(tp)
        assert (unified.log_start_offset, unified.local_log_start_offset) == (
            local_start,
            local_start,
        )
        assert broker.list_offsets("tiered", 0, -2).offset == local_start


def test_a_deleted_topic_without_a_live_leader_is_deleted_from_the_store(
    s3: S3Server, tmp_path: Path
) -> None:
    """A tiered topic deleted while its leader is down (its other replica, out of the ISR, is
    alive but cannot lead): the live replica records the deletion and deletes the objects."""
    from broker_embedded.cluster import EmbeddedCluster

    uri = f"s3://{s3.new_bucket('noleader')}/c"
    tp = TopicPartition("orphan", 0)
    cluster = EmbeddedCluster(tmp_path / "c", 2, config=quick_tiering_config(uri, s3))
    try:
        cluster.create_topic("orphan", 1, 2, config=TIERED)
        leader = cluster.leader_for(tp)
        (follower_id,) = {0, 1} - {leader.broker_id}
        for i in range(10):  # both replicas hold the topic
            cluster.produce("orphan", 0, [value(i)])
        cluster.stop_broker(follower_id)
        for i in range(10, 20):
            leader.produce("orphan", 0, [value(i)], acks=1)
        led = leader.log_manager.get_log(tp)
        deadline = time.monotonic() + 20
        while led.high_watermark < 20 and time.monotonic() < deadline:
            time.sleep(0.05)  # the stopped follower leaves the ISR
        assert led.high_watermark == 20
        assert leader.remote_log_manager.run_once() > 0
        location = leader.remote_log_manager.location
        cluster.stop_broker(leader.broker_id)
        cluster.restart_broker(follower_id)  # alive, out of the ISR: no leader
        cluster.controller.delete_topic("orphan")
        deadline = time.monotonic() + 30
        while location.open().list("orphan-0/") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert location.open().list("orphan-0/") == {}
    finally:
        cluster.close()


def test_the_tiered_storage_meters_count_as_kafka_s(s3: S3Server, tmp_path: Path) -> None:
    """Kafka's RemoteStorageMetrics as the metrics endpoint shows them (per topic and for all
    topics): a request and the ``.log``'s bytes per segment copied, a request and the records
    bytes per remote read, a request per stored segment deleted; RemoteLogSizeBytes the bytes
    still stored, RemoteCopyLagBytes / Segments the closed segments not copied yet."""
    from broker_embedded.replica_manager.broker_topic_stats import BrokerTopicStats
    from broker_embedded.server.metrics_endpoint import KafkaCollector

    uri = f"s3://{s3.new_bucket('meters')}/b0"
    tp = TopicPartition("tiered", 0)
    cfg = dataclasses.replace(tiering_config(uri, s3), remote_fetch_max_wait_ms=30_000)
    with Broker(tmp_path / "l", config=cfg, create=True) as broker:
        broker.replica_manager.topic_stats = BrokerTopicStats()
        broker.create_topic("tiered", config={**TIERED, "local.retention.ms": "0"})
        for i in range(COUNT):
            broker.produce("tiered", 0, [ProducerRecord(value(i), timestamp=T0 + 10 * i)])
        rlm = broker.remote_log_manager
        rlm.run_once()
        stored = [m for _, m in sorted(manifests(rlm.location, tp).items())]
        broker.log_manager.get_log(tp).delete_old_segments()
        r = broker.fetch(FetchRequest((PartitionFetch(tp, 0, 1 << 20),), max_wait_ms=0))
        fetched = len(r.partitions[0].records)
        assert fetched > 0 and r.partitions[0].error is None
        broker.alter_topic_config(
            "tiered", {**TIERED, "local.retention.ms": "0", "retention.ms": "1000"}
        )
        rlm.run_once(now_ms=stored[1].max_timestamp_ms + 1000)  # 0 and 1 go
        for i in range(COUNT, COUNT + 20):  # closed segments not copied yet: the copy lag
            broker.produce("tiered", 0, [ProducerRecord(value(i), timestamp=T0 + 10 * i)])
        closed = local_bases(tmp_path / "l", tp)[:-1]
        lag = sum((tmp_path / "l" / "tiered-0" / f"{b:020d}.log").stat().st_size for b in closed)
        assert closed[0] == stored[-1].next_offset
        server = broker_server(broker, ["PLAINTEXT://127.0.0.1:0"]).start()
        try:
            collector = KafkaCollector(lambda: server, lambda: broker)
            samples = {
                (s.name, tuple(s.labels.items())): s.value
                for m in collector.collect()
                for s in m.samples
                if "remote" in s.name
            }
        finally:
            server.shutdown(5.0)
    expected = {
        "remotecopyrequests": len(stored),
        "remotecopyerrors": 0,
        "remotecopybytes": sum(m.size_in_bytes for m in stored),
        "remotefetchrequests": 1,
        "remotefetcherrors": 0,
        "remotefetchbytes": fetched,
        "remotedeleterequests": 2,
        "remotedeleteerrors": 0,
        "buildremotelogauxstaterequests": 0,
        "buildremotelogauxstateerrors": 0,
    }
    prefix = "kafka_server_brokertopicmetrics_"
    for meter, count in expected.items():
        for labels in ((), (("topic", "tiered"),)):
            assert samples[(f"{prefix}{meter}_total", labels)] == count, meter
    gauges = {
        "remotelogsizebytes": sum(m.size_in_bytes for m in stored[2:]),
        "remotecopylagbytes": lag,
        "remotecopylagsegments": len(closed),
    }
    for meter, amount in gauges.items():
        for labels in ((), (("topic", "tiered"),)):
            assert samples[(f"{prefix}{meter}", labels)] == amount, meter
