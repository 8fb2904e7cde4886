"""Tiered storage (KIP-405) against a real S3 server (SeaweedFS, the session's ``s3`` fixture):
the remote log manager copies a remote-enabled topic's closed segments in part 1's layout, part
1's reader reads them as the local log holds them, a ``kafkalog serve`` killed mid-copy resumes
without a manifest for incomplete data or a segment stored twice, and the topic configs are
validated with Kafka's messages."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from broker_embedded.broker import Broker
from broker_embedded.broker_config import BrokerConfig
from broker_embedded.errors import OffsetMovedToTieredStorageError
from broker_embedded.record.records import iter_batches
from broker_embedded.storage.fetch_data_info import IsolationLevel
from broker_embedded.storage.fetch_source import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from broker_embedded.storage.log_config import InvalidConfigError
from broker_embedded.storage.log_dir_fetch_source import LogDirSource
from broker_embedded.storage.log_file_utils import segment_file_stem
from broker_embedded.storage.object_store import StoreLocation, StoreSettings
from broker_embedded.storage.object_store_fetch_source import ObjectStoreSource
from broker_embedded.storage.partition_metadata import topic_id_to_string
from broker_embedded.storage.remote_log_segment_metadata import (
    RemoteLogSegmentMetadata,
    read_manifest,
)
from broker_embedded.storage.topic_partition import TopicPartition
from tests.seaweedfs import S3Server

if TYPE_CHECKING:
    from tests.spark_kafkalog._serve_proc import ServeProcess

UNCOMMITTED = IsolationLevel.READ_UNCOMMITTED
TIERED = {"remote.storage.enable": "true", "segment.bytes": "1024"}


def tiering_config(location: str, s3: S3Server, interval_ms: int = 3_600_000) -> BrokerConfig:
    rsm = (("location", location), *s3.options().items())
    return BrokerConfig(
        remote_log_storage_system_enable=True,
        rsm_config=rsm,
        remote_log_manager_task_interval_ms=interval_ms,
    )


def batches(source, tp: TopicPartition, end: int | None = None) -> list[tuple[int, int, int]]:
    """(base offset, last offset, CRC) of every batch of ``tp`` from its start to ``end``
    (default: its high watermark), fetched through a FetchSource."""
    offset = source.list_offset(tp, EARLIEST_TIMESTAMP, UNCOMMITTED)
    end = source.list_offset(tp, LATEST_TIMESTAMP, UNCOMMITTED) if end is None else end
    seen = []
    while offset < end:
        fetched = source.fetch(tp, offset, 1 << 20, UNCOMMITTED)
        got = [
            (b.base_offset, b.last_offset, b.compute_crc())
            for b in iter_batches(fetched.records)
            if b.base_offset < end
        ]
        assert got, f"no batch at {offset}"
        seen += got
        offset = got[-1][1] + 1
    return seen


def manifests(location: StoreLocation, tp: TopicPartition) -> dict[int, RemoteLogSegmentMetadata]:
    store = location.open()
    prefix = tp.dir_name + "/"
    found = {}
    for name in store.list(prefix):
        base = RemoteLogSegmentMetadata.base_offset_of(name[len(prefix) :])
        if base is None:
            continue
        try:
            found[base] = read_manifest(store, name)
        except FileNotFoundError:
            continue  # deleted since the listing (remote retention under way)
    return found


def local_bases(log_dir: Path, tp: TopicPartition) -> list[int]:
    return sorted(int(p.name[:20]) for p in (log_dir / tp.dir_name).glob("*.log"))


def test_closed_segments_are_tiered_and_read_back_as_the_local_log(
    s3: S3Server, tmp_path: Path
) -> None:
    uri = f"s3://{s3.new_bucket('tier')}/cluster/broker-0"
    location = StoreLocation(uri, s3.settings)
    tp, local_only = TopicPartition("tiered", 0), TopicPartition("local-only", 0)
    logs = tmp_path / "logs"
    with Broker(logs, config=tiering_config(uri, s3), create=True) as broker:
        broker.create_topic("tiered", config=TIERED)
        broker.create_topic("local-only", config={"segment.bytes": "1024"})
        for i in range(40):
            for topic in ("tiered", "local-only"):
                broker.produce(topic, 0, [f"record {i:03d} ".encode() * 8])
        rlm = broker.remote_log_manager
        rlm.run_once()  # the startup pass may have copied some already: this one does the rest
        bases = local_bases(logs, tp)
        assert len(bases) >= 5
        assert rlm.run_once() == 0  # nothing left: nothing copied twice
        stored = manifests(location, tp)
        assert sorted(stored) == bases[:-1]  # every closed segment, never the active one
        assert [m.next_offset for m in stored.values()] == bases[1:]
        assert location.open().list(local_only.dir_name + "/") == {}
        names = {f.name for f in stored[bases[1]].files}
        stem = segment_file_stem(bases[1])
        assert names == {
            stem + ".log",
            stem + ".index",
            stem + ".timeindex",
            stem + ".leader-epoch-checkpoint",
            segment_file_stem(bases[2]) + ".snapshot",
        }
    remote = ObjectStoreSource(location).open()
    assert remote.list_offset(tp, LATEST_TIMESTAMP, UNCOMMITTED) == bases[-1]
    local = LogDirSource(str(logs)).open()
    assert batches(remote, tp) == batches(local, tp, bases[-1])
    assert len(batches(remote, tp)) == bases[-1] > 0  # one record a batch


def test_an_abandoned_copy_keeps_every_object_the_stored_segments_name(
    s3: S3Server, tmp_path: Path
) -> None:
    """A segment whose files go during its copy has what the copy wrote deleted, but not the
    producer snapshot at its base offset: that is the previous stored segment's (at its end),
    and that segment's manifest names it."""
    uri = f"s3://{s3.new_bucket('abandon')}/cluster/broker-0"
    location = StoreLocation(uri, s3.settings)
    tp = TopicPartition("abandoned", 0)
    logs = tmp_path / "logs"
    with Broker(logs, config=tiering_config(uri, s3), create=True) as broker:
        broker.create_topic("abandoned", config=TIERED)
        for i in range(20):
            broker.produce("abandoned", 0, [f"record {i:03d} ".encode() * 8])
        rlm = broker.remote_log_manager
        rlm.run_once()
        first_uncopied = local_bases(logs, tp)[-1]
        for i in range(20, 40):
            broker.produce("abandoned", 0, [f"record {i:03d} ".encode() * 8])
        assert local_bases(logs, tp)[-1] > first_uncopied  # it is closed now
        stem = segment_file_stem(first_uncopied)
        (logs / tp.dir_name / f"{stem}.log").unlink()  # gone during its copy
        assert rlm.run_once() == 0
        stored = manifests(location, tp)
        assert sorted(stored)[-1] < first_uncopied
        assert stored[sorted(stored)[-1]].next_offset == first_uncopied
        names = set(location.open().list(tp.dir_name + "/"))
        named = {f"{tp.dir_name}/{f.name}" for m in stored.values() for f in m.files}
        assert f"{tp.dir_name}/{stem}.snapshot" in named
        assert named <= names
        assert not [n for n in names - named if not n.endswith(".segment.json")]


def test_a_topic_created_again_is_not_tiered_over_the_old_topic_s_segments(
    s3: S3Server, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The store's keys carry the topic's name; the manifests carry its id. Deleting a topic
    deletes its objects; should they stay (a broker that stopped before deleting them: here
    put back), the topic created again (a new id) is not tiered while the old topic's
    segments are there: no copy, one error naming both ids; once they are deleted, the new
    topic is tiered."""
    uri = f"s3://{s3.new_bucket('again')}/p"
    location, tp = StoreLocation(uri, s3.settings), TopicPartition("again", 0)
    with Broker(tmp_path / "l", config=tiering_config(uri, s3), create=True) as broker:
        broker.create_topic("again", config=TIERED)
        for i in range(12):
            broker.produce("again", 0, [f"record {i:03d} ".encode() * 8])
        broker.remote_log_manager.run_once()
        old = manifests(location, tp)
        old_id = topic_id_to_string(broker.log_manager.get_log(tp).topic_id)
        assert old and {m.topic_id for m in old.values()} == {old_id}
        store = location.open()
        saved = {name: store.read(name) for name in store.list("again-0/")}
        broker.delete_topic("again")
        wait_for("the deleted topic's objects deleted", lambda: store.list("again-0/") == {})
        for name, data in saved.items():
            store.write(name, data)
        broker.create_topic("again", config=TIERED)
        for i in range(12):
            broker.produce("again", 0, [f"again {i:03d} ".encode() * 8])
        new_id = topic_id_to_string(broker.log_manager.get_log(tp).topic_id)
        with caplog.at_level(logging.ERROR, "broker_embedded.storage.remote_log_manager"):
            assert broker.remote_log_manager.run_once() == 0
            assert broker.remote_log_manager.run_once() == 0
        assert manifests(location, tp) == old
        refusals = [r.getMessage() for r in caplog.records if "not tiered" in r.getMessage()]
        assert refusals == [
            f"remote log manager: {location.open().location.describe('again-0/')} holds segments "
            f"of topic id {old_id}, not of again-0's topic id {new_id} (a topic deleted and "
            "created again): again-0 is not tiered until they are deleted"
        ]
        store = location.open()
        for name in store.list("again-0/"):
            store.delete(name)
        assert broker.remote_log_manager.run_once() > 0
        assert {m.topic_id for m in manifests(location, tp).values()} == {new_id}


def test_local_retention_deletes_only_tiered_segments(s3: S3Server, tmp_path: Path) -> None:
    """``local.retention.ms`` deletes local segments only once they are in the store (Kafka's
    ``isSegmentEligibleForDeletion``); the log start stays at the store's first offset (-2, the
    log-start-offset-checkpoint, Fetch's log start), ListOffsets -4 (earliest-local) and -5
    (latest-tiered) answer the local start and the highest tiered offset, a restart recovers
    both, and the store holds the rest."""
    uri = f"s3://{s3.new_bucket('local')}/p"
    location, tp, logs = StoreLocation(uri, s3.settings), TopicPartition("tiered", 0), tmp_path
    with Broker(logs / "l", config=tiering_config(uri, s3), create=True) as broker:
        broker.create_topic("tiered", config={**TIERED, "local.retention.ms": "0"})
        for i in range(30):
            broker.produce("tiered", 0, [f"record {i:03d} ".encode() * 8])
        unified = broker.log_manager.get_log(tp)
        later = broker.clock_ms() + 1000  # every closed segment past local.retention.ms
        unified.delete_old_segments(later)  # races the startup pass: what goes was copied
        first_local = local_bases(logs / "l", tp)[0]
        stored = manifests(location, tp)
        assert first_local == 0 or first_local in {m.next_offset for m in stored.values()}
        broker.remote_log_manager.run_once()
        unified.delete_old_segments(later)
        (active,) = local_bases(logs / "l", tp)  # every closed segment was tiered, then deleted
        assert active > 0 and unified.log_start_offset == 0
        assert unified.local_log_start_offset == active
        assert broker.list_offsets("tiered", 0, -2).offset == 0
        assert broker.list_offsets("tiered", 0, -4).offset == active
        assert broker.list_offsets("tiered", 0, -5).offset == active - 1
        assert broker.list_offsets("tiered", 0, -1).offset == 30
        assert unified.read(active, 1 << 20).log_start_offset == 0
        with pytest.raises(OffsetMovedToTieredStorageError, match=f"below {active}, the first"):
            unified.read(active - 1, 1 << 20)
    with Broker(logs / "l", config=tiering_config(uri, s3)) as broker:  # Kafka's LogLoader
        assert broker.list_offsets("tiered", 0, -2).offset == 0  # from the checkpoint
        assert broker.list_offsets("tiered", 0, -4).offset == active  # the first segment
        assert broker.list_offsets("tiered", 0, -1).offset == 30
    view = LogDirSource(str(logs / "l")).open()  # reads the dir only: starts at its first segment
    assert view.list_offset(tp, EARLIEST_TIMESTAMP, UNCOMMITTED) == active
    assert [b[0] for b in batches(view, tp)] == list(range(active, 30))
    remote = ObjectStoreSource(location).open()
    assert [b[0] for b in batches(remote, tp)] == list(range(active))  # one record a batch


def test_remote_storage_configs_are_validated_as_kafka_validates_them(
    s3: S3Server, tmp_path: Path
) -> None:
    # Kafka 3.9 (asked: kafka-topics --create against the peer) refuses remote storage on a
    # broker without remote.log.storage.system.enable with this message, and accepts
    # local.retention.ms above retention.ms on a topic that does not tier
    with Broker(tmp_path / "plain", create=True) as plain:
        with pytest.raises(
            InvalidConfigError,
            match=r"^Tiered Storage functionality is "
            r"disabled in the broker\. Topic cannot be configured with remote "
            r"log storage\. \(topic 't'\)$",
        ):
            plain.create_topic("t", config={"remote.storage.enable": "true"})
        plain.create_topic("ok", config={"local.retention.ms": "5000", "retention.ms": "1000"})
        with pytest.raises(InvalidConfigError, match=r"local.retention.bytes.*must be in \[-2, "):
            plain.create_topic("bad", config={"local.retention.bytes": "-3"})
    uri = f"s3://{s3.new_bucket('validate')}/p"
    with Broker(tmp_path / "tiering", config=tiering_config(uri, s3), create=True) as broker:
        # LogConfig.validateNoRemoteStorageForCompactedTopic, validateRemoteStorageRetention*
        for config, message in (
            (
                {"cleanup.policy": "compact"},
                "Remote log storage is unsupported for the compacted topics (topic 'c')",
            ),
            (
                {"retention.bytes": "100", "local.retention.bytes": "-1"},
                "Invalid value -1 for configuration local.retention.bytes: Value must not be -1 as "
                "retention.bytes value is set as 100. (topic 'c')",
            ),
            (
                {"retention.ms": "1000", "local.retention.ms": "5000"},
                "Invalid value 5000 for configuration local.retention.ms: Value must not be more "
                "than retention.ms property value: 1000 (topic 'c')",
            ),
        ):
            with pytest.raises(InvalidConfigError) as refused:
                broker.create_topic("c", config={"remote.storage.enable": "true", **config})
            assert str(refused.value) == message
        broker.create_topic(
            "t",
            config={
                "remote.storage.enable": "true",
                "retention.ms": "9000",
                "local.retention.ms": "1000",
            },
        )
        with pytest.raises(InvalidConfigError, match="compacted topics"):
            broker.alter_topic_config(
                "t", {"remote.storage.enable": "true", "cleanup.policy": "compact"}
            )
        config = broker.log_manager.get_log(TopicPartition("t", 0)).config
        assert (config.effective_local_retention_ms, config.effective_local_retention_bytes) == (
            1000,
            -1,
        )


def wait_for(what: str, done, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def write_broker_config(path: Path, location: str, options: dict[str, str]) -> Path:
    rsm = "".join(f'"{k}" = "{v}"\n' for k, v in {"location": location, **options}.items())
    broker = '"remote.log.storage.system.enable" = true\n'
    broker += '"remote.log.manager.task.interval.ms" = 100'
    path.write_text(f"[broker]\n{broker}\n[rsm_config]\n{rsm}")
    return path


@contextlib.contextmanager
def serving_tiered(
    tmp_path: Path, logs: Path, location: str, options: dict[str, str]
) -> Iterator[ServeProcess]:
    """``kafkalog serve`` on ``logs`` tiering to ``location`` (store settings ``options``,
    a pass every 100 ms): topic ``tiered`` (:data:`TIERED`) created, 30 records produced (one
    batch each), and every closed segment in the store."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from tests.spark_kafkalog._serve_proc import ServeProcess

    stored = StoreLocation(location, StoreSettings.parse(options))
    tp = TopicPartition("tiered", 0)
    config = write_broker_config(tmp_path / "serving.toml", location, options)
    with ServeProcess(logs, "--broker-config", config, stderr=tmp_path / "err1") as serve:
        admin = AdminClient({"bootstrap.servers": serve.bootstrap})
        admin.create_topics([NewTopic("tiered", 1, 1, config=TIERED)])["tiered"].result(30)
        produce(serve.bootstrap, 0, 30)
        wait_for(
            "the closed segments in the store",
            lambda: sorted(manifests(stored, tp)) == local_bases(logs, tp)[:-1],
        )
        yield serve


def produce(bootstrap: str, first: int, count: int) -> None:
    """``count`` records, one batch each (flushed one by one)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "all"})
    for i in range(first, first + count):
        producer.produce("tiered", f"record {i:03d} ".encode() * 8, partition=0)
        assert producer.flush(30) == 0


@pytest.mark.slow  # two kafkalog serve starts: 7 s alone, 13-15 s beside a CPU hog
def test_a_serve_killed_mid_copy_resumes_and_stores_each_segment_once(
    s3: S3Server, tmp_path: Path
) -> None:
    """``kafkalog serve`` SIGKILLed while a segment's ``.log`` PUT is on the wire (held by a
    proxy, after the segment's first objects went): no manifest names it; restarted, the
    broker copies it and the rest, each closed segment once, and the store reads as the log."""
    from tests.s3_proxy import FaultProxy
    from tests.spark_kafkalog._serve_proc import ServeProcess

    uri = f"s3://{s3.new_bucket('killed')}/cluster/broker-0"
    location, tp = StoreLocation(uri, s3.settings), TopicPartition("tiered", 0)
    logs = tmp_path / "logs"

    def all_closed_stored() -> bool:
        return sorted(manifests(location, tp)) == local_bases(logs, tp)[:-1]

    with FaultProxy(s3.endpoint) as proxy:
        proxied = {**s3.options(), "fs.s3a.endpoint": proxy.endpoint}
        with serving_tiered(tmp_path, logs, uri, proxied) as serve:
            before = manifests(location, tp)
            assert len(before) >= 3
            seen = len(proxy.requests)
            proxy.inject("stall", matching=".log")  # the next segment's .log upload
            produce(serve.bootstrap, 30, 30)
            wait_for("a copy held mid-segment", lambda: proxy.injected == 1, 30)
            serve.kill()
        held = next(r for r in proxy.requests[seen:] if ".log" in r)
    stalled = sorted(manifests(location, tp))
    assert stalled == sorted(before)  # no manifest for the segment whose copy was killed
    next_base = before[max(before)].next_offset
    stem = segment_file_stem(next_base)
    assert f"tiered-0/{stem}.log" in held
    assert f"tiered-0/{stem}.index" in location.open().list("tiered-0/")  # copied before the kill
    direct = write_broker_config(tmp_path / "direct.toml", uri, s3.options())
    with ServeProcess(logs, "--broker-config", direct, stderr=tmp_path / "err2") as serve:
        wait_for("every closed segment in the store", all_closed_stored)
        assert serve.terminate() == 0
    bases = local_bases(logs, tp)
    stored = manifests(location, tp)
    assert sorted(stored) == bases[:-1] and next_base < bases[-1]
    assert [m.next_offset for _, m in sorted(stored.items())] == bases[1:]
    assert all(before[b] == stored[b] for b in before)  # the first copies were kept, not redone
    remote = ObjectStoreSource(location).open()
    local = LogDirSource(str(logs)).open()
    assert batches(remote, tp) == batches(local, tp, bases[-1])


def test_one_partition_s_failure_stops_no_other_partition(s3: S3Server, tmp_path: Path) -> None:
    """A corrupt manifest in a deleted topic's partition and in a led partition is logged and
    retried later; the pass still deletes the other deleted partition and tiers the other
    led partition."""
    uri = f"s3://{s3.new_bucket('isolated')}/b0"
    with Broker(tmp_path / "l", config=tiering_config(uri, s3), create=True) as broker:
        rlm = broker.remote_log_manager
        store = rlm.location.open()
        corrupt = RemoteLogSegmentMetadata.name_of(0)
        for prefix in ("gone-0", "a-0"):
            store.write(f"{prefix}/{corrupt}", b"{not json")
        store.write("gone2-0/00000000000000000000.log", b"left by a copy")
        for topic in ("a", "b"):
            broker.create_topic(topic, config=TIERED)
            for i in range(20):
                broker.produce(topic, 0, [f"record {i:03d} ".encode() * 8])
        rlm.stop_partitions([(TopicPartition("gone", 0), None), (TopicPartition("gone2", 0), None)])
        rlm.run_once()  # the scheduled pass may have done it already
        assert rlm.run_once() == 0
        assert (
            sorted(manifests(rlm.location, TopicPartition("b", 0)))
            == local_bases(tmp_path / "l", TopicPartition("b", 0))[:-1]
        )
        assert store.list("gone2-0/") == {} and list(store.list("a-0/")) == [f"a-0/{corrupt}"]
        pending = (tmp_path / "l" / "remote-log-pending-deletions").read_text()
        assert pending == "0\ngone 0 -\n"


def test_a_malformed_pending_deletions_line_is_skipped_naming_file_and_line(
    s3: S3Server, tmp_path: Path, caplog
) -> None:
    """A damaged remote-log-pending-deletions line is logged with the file and line number and
    skipped: the broker starts and deletes the partitions of the other lines."""
    from broker_embedded.storage.remote_log_manager import RemoteLogManager
    from broker_embedded.storage.remote_log_pending_deletions import PENDING_FILE

    uri = f"s3://{s3.new_bucket('pending')}/b0"
    location = StoreLocation(uri, s3.settings)
    location.open().write("gone-0/00000000000000000000.log", b"left by a copy")
    pending = tmp_path / PENDING_FILE
    pending.write_text("0\nbroken line\ngone 0 -\n")
    rlm = RemoteLogManager(0, tmp_path, location, dict, 3_600_000)
    with caplog.at_level(logging.ERROR, "broker_embedded.storage.remote_log_manager"):
        rlm.startup()
        try:
            wait_for("the pending deletions done", lambda: not pending.exists(), 30)
        finally:
            rlm.close()
    assert location.open().list("gone-0/") == {}
    logged = [r.getMessage() for r in caplog.records]
    assert any(f"{pending} line 2 is not" in m and "'broken line'" in m for m in logged)
