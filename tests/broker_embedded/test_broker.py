"""The standalone Broker (``Broker(log_dir)``): topics (create, describe, list, delete, grow),
metadata, lifecycle and reopening, list offsets, delete records and retention through the
broker. Real broker on a temporary log dir, files checked on disk."""

from __future__ import annotations

import base64
import json
import threading
import uuid

import pytest

from broker_embedded.broker import Broker
from broker_embedded.common.fetch_request import FetchRequest, PartitionFetch
from broker_embedded.common.producer_record import ProducerRecord, build_batch
from broker_embedded.errors import (
    BrokerClosedError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    InvalidTopicError,
    LogDirLockedError,
    OffsetOutOfRangeError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from broker_embedded.replication.topic_metadata import PartitionMetadata
from broker_embedded.storage.log_config import InvalidConfigError
from broker_embedded.storage.topic_partition import TopicPartition
from tests.broker_embedded._broker_util import NOW, checkpoint, fetch_one, peer_values


def partition_metadata_text(topic_id: uuid.UUID) -> str:
    """Kafka's partition.metadata, built here from its documented layout."""
    encoded = base64.urlsafe_b64encode(topic_id.bytes).rstrip(b"=").decode()
    return f"version: 0\ntopic_id: {encoded}"


# -- topics ----------------------------------------------------------------------------------------


def test_create_topic_metadata_and_files(broker, log_dir):
    md = broker.create_topic("orders", 3, config={"segment.bytes": 4096, "retention.ms": "1000"})
    assert md.name == "orders"
    assert md.replication_factor == 1
    assert md.partitions == tuple(PartitionMetadata(p, 0, 0, (0,), (0,), ()) for p in range(3))
    assert dict(md.config) == {"segment.bytes": "4096", "retention.ms": "1000"}
    assert broker.describe_topic("orders") == md
    assert broker.metadata() == [md]
    assert broker.metadata(["orders"]) == [md]
    effective = broker.topic_config("orders")
    assert effective["segment.bytes"] == "4096"
    assert effective["retention.ms"] == "1000"
    assert effective["max.message.bytes"] == "1048588"  # broker default
    for p in range(3):
        d = log_dir / f"orders-{p}"
        assert (d / "00000000000000000000.log").stat().st_size == 0
        assert (d / "partition.metadata").read_text() == partition_metadata_text(md.topic_id)
    topics = json.loads((log_dir / "kafkalog-topics.json").read_text())["topics"]
    assert topics["orders"]["partitions"] == 3
    assert topics["orders"]["config"] == {"segment.bytes": "4096", "retention.ms": "1000"}


def test_topics_colliding_in_metric_names_are_refused(broker, log_dir):
    """Issue 11 defect 7: ``a.b`` and ``a_b`` were both accepted (Kafka refuses the second)."""
    broker.create_topic("a.b", 2)
    with pytest.raises(InvalidTopicError) as e:
        broker.create_topic("a_b")
    assert str(e.value) == "Topic 'a_b' collides with existing topic: a.b"
    assert e.value.code == 17
    assert broker.list_topics() == ["a.b"]
    assert not (log_dir / "a_b-0").exists()
    broker.delete_topic("a.b")
    broker.create_topic("a_b")
    assert broker.list_topics() == ["a_b"]


def test_create_topic_errors(broker):
    broker.create_topic("a")
    with pytest.raises(TopicAlreadyExistsError, match="'a' already exists"):
        broker.create_topic("a", 2)
    assert broker.describe_topic("a").partitions[-1].partition == 0  # unchanged
    for name in ("", ".", "..", "has space", "a/b", "x" * 250, "ü"):
        with pytest.raises(InvalidTopicError):
            broker.create_topic(name)
    broker.create_topic("x" * 249)  # the longest legal name
    with pytest.raises(InvalidPartitionsError):
        broker.create_topic("zero", 0)
    with pytest.raises(InvalidReplicationFactorError, match=r"\[1, 1\]"):
        broker.create_topic("rf2", 1, replication_factor=2)
    bad = [
        ({"no.such.config": 1}, "no.such.config"),
        ({"segment.bytes": "abc"}, "segment.bytes"),
        ({"segment.bytes": 10}, "segment.bytes"),  # below Kafka's minimum of 14
        ({"retention.ms": -2}, "retention.ms"),
        ({"cleanup.policy": "keep"}, "cleanup.policy"),
        ({"min.insync.replicas": 0}, "min.insync.replicas"),
        ({"message.timestamp.type": "Now"}, "message.timestamp.type"),
    ]
    for config, name in bad:
        with pytest.raises(InvalidConfigError, match=name.replace(".", r"\.")):
            broker.create_topic("bad", 1, config=config)
    assert broker.list_topics() == ["a", "x" * 249]


def test_list_describe_and_unknown_topics(broker):
    for name in ("b", "a", "c"):
        broker.create_topic(name)
    assert broker.list_topics() == ["a", "b", "c"]
    assert [m.name for m in broker.metadata()] == ["a", "b", "c"]
    for call in (
        lambda: broker.describe_topic("nope"),
        lambda: broker.delete_topic("nope"),
        lambda: broker.create_partitions("nope", 2),
        lambda: broker.metadata(["nope"]),
    ):
        with pytest.raises(UnknownTopicOrPartitionError, match="'nope'"):
            call()


def test_delete_topic_removes_dirs_and_checkpoint_entries(broker, log_dir):
    broker.create_topic("keep", 1)
    doomed = broker.create_topic("gone", 2)
    broker.produce("keep", 0, [b"k"])
    broker.produce("gone", 1, [b"g1", b"g2"])
    broker.log_manager.checkpoint()
    assert checkpoint(log_dir, "replication-offset-checkpoint") == {
        ("gone", 0): 0,
        ("gone", 1): 2,
        ("keep", 0): 1,
    }
    broker.delete_topic("gone")
    assert not (log_dir / "gone-0").exists() and not (log_dir / "gone-1").exists()
    assert (log_dir / "keep-0").is_dir()
    assert broker.list_topics() == ["keep"]
    with pytest.raises(UnknownTopicOrPartitionError):
        broker.describe_topic("gone")
    with pytest.raises(UnknownTopicOrPartitionError):
        broker.produce("gone", 0, [b"x"])
    assert fetch_one(broker, "gone", 0, 0).error_name == "UNKNOWN_TOPIC_OR_PARTITION"
    broker.log_manager.checkpoint()
    for name in (
        "replication-offset-checkpoint",
        "recovery-point-offset-checkpoint",
        "log-start-offset-checkpoint",
    ):
        assert set(checkpoint(log_dir, name)) == {("keep", 0)}, name
    topics = json.loads((log_dir / "kafkalog-topics.json").read_text())["topics"]
    assert set(topics) == {"keep"}
    # the name can be used again: a new id, an empty log
    again = broker.create_topic("gone", 1)
    assert again.topic_id != doomed.topic_id
    assert broker.list_offsets("gone", 0, -1).offset == 0
    assert broker.produce("gone", 0, [b"new"]).base_offset == 0


def test_create_partitions(broker, log_dir):
    broker.create_topic("t", 1, config={"retention.bytes": 12345})
    broker.produce("t", 0, [b"a"])
    md = broker.create_partitions("t", 3)
    assert md.partitions == tuple(PartitionMetadata(p, 0, 0, (0,), (0,), ()) for p in range(3))
    assert broker.describe_topic("t") == md
    assert (log_dir / "t-2").is_dir()
    assert broker.produce("t", 2, [b"c"]).base_offset == 0
    assert broker.log_manager.get_log(TopicPartition("t", 2)).config.retention_bytes == 12345
    for total in (3, 2):
        with pytest.raises(InvalidPartitionsError, match="can only be increased"):
            broker.create_partitions("t", total)
    with pytest.raises(UnknownTopicOrPartitionError):
        broker.produce("t", 3, [b"x"])
    assert broker.list_offsets("t", 0, -1).offset == 1  # partition 0 untouched


def test_topics_survive_close_and_reopen(log_dir):
    with Broker(log_dir, create=True) as b:
        a = b.create_topic("a", 2, config={"segment.bytes": 1000, "cleanup.policy": "compact"})
        c = b.create_topic("c", 1)
        b.produce("a", 0, [ProducerRecord(b"v", key=b"k")] * 3)
        b.produce("c", 0, [b"x"])
        b.create_partitions("c", 2)
    with Broker(log_dir, create=True) as b:
        assert b.list_topics() == ["a", "c"]
        a2, c2 = b.describe_topic("a"), b.describe_topic("c")
        assert (a2.topic_id, c2.topic_id) == (a.topic_id, c.topic_id)
        assert dict(a2.config) == {"segment.bytes": "1000", "cleanup.policy": "compact"}
        assert b.topic_config("a")["cleanup.policy"] == "compact"
        assert len(c2.partitions) == 2
        # A partition whose log holds epoch 0 is led at epoch 1 after the restart (one above
        # the highest epoch on disk, as after an election); empty logs start at epoch 0.
        assert [(p.leader, p.leader_epoch, p.isr) for p in a2.partitions] == [
            (0, 1, (0,)),
            (0, 0, (0,)),
        ]
        assert b.list_offsets("a", 0, -1).offset == 3  # the HW came back
        assert b.list_offsets("c", 0, -1).offset == 1
        r = b.produce("a", 0, [ProducerRecord(b"w", key=b"k")])
        assert r.base_offset == 3
        batches = b.log_manager.get_log(TopicPartition("a", 0)).batches()
        assert [bt.partition_leader_epoch for bt in batches] == [0, 1]


def test_lifecycle(log_dir):
    b = Broker(log_dir, create=True)
    b.create_topic("t")
    with pytest.raises(LogDirLockedError):
        Broker(log_dir, create=True)
    b.close()
    b.close()  # idempotent
    assert b.is_closed
    calls = [
        lambda: b.create_topic("u"),
        lambda: b.describe_topic("t"),
        lambda: b.list_topics(),
        lambda: b.metadata(),
        lambda: b.topic_config("t"),
        lambda: b.produce("t", 0, [b"x"]),
        lambda: b.fetch(FetchRequest((PartitionFetch(TopicPartition("t", 0), 0),))),
        lambda: b.list_offsets("t", 0, -1),
        lambda: b.delete_records("t", 0, 0),
        lambda: b.init_producer_id(),
        lambda: b.delete_topic("t"),
        lambda: b.create_partitions("t", 2),
    ]
    for call in calls:
        with pytest.raises(BrokerClosedError):
            call()
    assert (log_dir / ".kafka_cleanshutdown").exists()
    with Broker(log_dir, create=True) as again:  # the lock was released
        assert again.list_topics() == ["t"]
        assert not (log_dir / ".kafka_cleanshutdown").exists()


# -- list offsets ----------------------------------------------------------------------------------


def test_list_offsets_earliest_latest_and_by_timestamp(broker):
    broker.create_topic("t")
    assert broker.list_offsets("t", 0, -2).offset == 0  # empty: earliest = latest = 0
    assert broker.list_offsets("t", 0, -1).offset == 0
    stamps = [NOW + 10, NOW + 30, NOW + 20, NOW + 50]  # offset 2 goes back in time
    broker.produce("t", 0, [ProducerRecord(b"v", timestamp=ts) for ts in stamps[:2]])
    broker.produce("t", 0, [ProducerRecord(b"v", timestamp=ts) for ts in stamps[2:]])
    assert broker.list_offsets("t", 0, -2).offset == 0
    latest = broker.list_offsets("t", 0, -1)
    assert (latest.offset, latest.timestamp, latest.leader_epoch) == (4, -1, 0)
    expected = {
        0: (0, NOW + 10),
        NOW: (0, NOW + 10),
        NOW + 10: (0, NOW + 10),
        NOW + 11: (1, NOW + 30),
        NOW + 20: (1, NOW + 30),  # the FIRST offset with a timestamp >= 20 is 1, not 2
        NOW + 30: (1, NOW + 30),
        NOW + 31: (3, NOW + 50),
        NOW + 50: (3, NOW + 50),
    }
    for target, (offset, ts) in expected.items():
        r = broker.list_offsets("t", 0, target)
        assert (r.offset, r.timestamp, r.leader_epoch) == (offset, ts, 0), target
    beyond = broker.list_offsets("t", 0, NOW + 51)
    assert (beyond.offset, beyond.timestamp) == (-1, -1)
    with pytest.raises(InvalidRequestError):
        broker.list_offsets("t", 0, -7)
    with pytest.raises(UnknownTopicOrPartitionError):
        broker.list_offsets("t", 1, -1)
    with pytest.raises(UnknownTopicOrPartitionError):
        broker.list_offsets("nope", 0, -1)


def test_list_offsets_by_timestamp_across_segments(broker):
    broker.create_topic("t", config={"segment.bytes": 200})
    for i in range(6):
        broker.produce("t", 0, [ProducerRecord(bytes(60), timestamp=NOW + 100 * i)])
    lg = broker.log_manager.get_log(TopicPartition("t", 0))
    assert len(lg.segment_base_offsets) >= 3
    for i in range(6):
        assert broker.list_offsets("t", 0, NOW + 100 * i - 50).offset == i
        assert broker.list_offsets("t", 0, NOW + 100 * i).offset == i
    broker.delete_records("t", 0, 4)
    assert broker.list_offsets("t", 0, NOW).offset == 4  # nothing below the log start offset
    assert broker.list_offsets("t", 0, -2).offset == 4


# -- delete records and retention ------------------------------------------------------------------


def test_delete_records(broker, log_dir):
    broker.create_topic("t", config={"segment.bytes": 200})
    for i in range(5):
        broker.produce("t", 0, [ProducerRecord(bytes(60), timestamp=NOW + i)])
    lg = broker.log_manager.get_log(TopicPartition("t", 0))
    bases = lg.segment_base_offsets
    assert bases == [0, 1, 2, 3, 4]  # one batch a segment (each is > 200 - 80 bytes)
    assert broker.delete_records("t", 0, 2) == 2
    assert broker.list_offsets("t", 0, -2).offset == 2
    assert lg.segment_base_offsets == [2, 3, 4]
    assert not (log_dir / "t-0" / "00000000000000000000.log").exists()
    assert not (log_dir / "t-0" / "00000000000000000001.log").exists()
    assert broker.delete_records("t", 0, 1) == 2  # never moves back
    assert broker.delete_records("t", 0, 5) == 5  # up to the HW (= LEO here)
    assert lg.segment_base_offsets == [4]  # the active segment stays, as in Kafka
    with pytest.raises(OffsetOutOfRangeError, match="before offset 6"):
        broker.delete_records("t", 0, 6)
    with pytest.raises(UnknownTopicOrPartitionError):
        broker.delete_records("t", 3, 0)
    below = fetch_one(broker, "t", 0, 4)
    assert below.error_name == "OFFSET_OUT_OF_RANGE"
    assert (below.log_start_offset, below.high_watermark) == (5, 5)
    assert broker.produce("t", 0, [b"after"]).base_offset == 5
    assert peer_values(fetch_one(broker, "t", 0, 5).records) == [(5, b"after")]
    broker.log_manager.checkpoint()
    assert checkpoint(log_dir, "log-start-offset-checkpoint") == {("t", 0): 5}


def test_delete_records_above_the_high_watermark(broker):
    broker.create_topic("t", config={"min.insync.replicas": 2})
    broker.produce("t", 0, [b"a", b"b"], acks=1)  # appended, but the HW stays at 0
    with pytest.raises(OffsetOutOfRangeError, match=r"\[0, 0\]"):
        broker.delete_records("t", 0, 1)
    assert broker.delete_records("t", 0, 0) == 0
    assert broker.delete_records("t", 0, -1) == 0  # -1: up to the HW
    with pytest.raises(OffsetOutOfRangeError):
        broker.delete_records("t", 0, -2)


def test_delete_records_to_the_high_watermark(broker):
    broker.create_topic("t")
    broker.produce("t", 0, [b"a", b"b", b"c"])
    assert broker.delete_records("t", 0, -1) == 3
    assert broker.list_offsets("t", 0, -2).offset == 3
    assert fetch_one(broker, "t", 0, 2).error_name == "OFFSET_OUT_OF_RANGE"


def test_retention_by_size_through_the_broker(broker, log_dir):
    batch = build_batch([ProducerRecord(bytes(100), timestamp=NOW)], now_ms=NOW)
    size = len(batch)
    # segment.bytes rolls before every batch; retention.bytes keeps the newest 2.5 batches
    broker.create_topic("r", config={"segment.bytes": size + 10, "retention.bytes": size * 5 // 2})
    broker.create_topic("keep", config={"segment.bytes": size + 10})
    for _ in range(6):
        broker.produce("r", 0, batch)
        broker.produce("keep", 0, batch)
    lg = broker.log_manager.get_log(TopicPartition("r", 0))
    assert lg.segment_base_offsets == [0, 1, 2, 3, 4, 5]
    assert lg.size_in_bytes == 6 * size
    # 6 segments of `size` bytes over a 2.5-segment budget: the 3 oldest go (after that the
    # log is 3 * size, and deleting a 4th would take it below the budget)
    assert broker.log_manager.cleanup_logs() == 3
    assert lg.log_start_offset == 3
    assert lg.segment_base_offsets == [3, 4, 5]
    assert sorted(p.name for p in (log_dir / "r-0").glob("*.log")) == [
        f"{b:020d}.log" for b in (3, 4, 5)
    ]
    assert broker.list_offsets("r", 0, -2).offset == 3
    assert fetch_one(broker, "r", 0, 2).error_name == "OFFSET_OUT_OF_RANGE"
    # a read stays within one segment, as Kafka's does
    assert [o for o, _ in peer_values(fetch_one(broker, "r", 0, 3).records)] == [3]
    assert [o for o, _ in peer_values(fetch_one(broker, "r", 0, 5).records)] == [5]
    assert broker.log_manager.cleanup_logs() == 0  # stable
    broker.log_manager.checkpoint()
    assert checkpoint(log_dir, "log-start-offset-checkpoint") == {("keep", 0): 0, ("r", 0): 3}
    assert broker.list_offsets("keep", 0, -2).offset == 0


def test_retention_by_time_through_the_broker(log_dir):
    now = [NOW]
    with Broker(log_dir, clock_ms=lambda: now[0], create=True) as broker:
        broker.create_topic("r", config={"segment.bytes": 100, "retention.ms": 1000})
        for i in range(4):
            broker.produce("r", 0, [ProducerRecord(bytes(50), timestamp=NOW + 400 * i)])
        lg = broker.log_manager.get_log(TopicPartition("r", 0))
        assert lg.segment_base_offsets == [0, 1, 2, 3]
        now[0] = NOW + 1500  # segments with timestamps <= NOW + 499 are older than 1000 ms
        assert broker.log_manager.cleanup_logs() == 2
        assert lg.log_start_offset == 2
        now[0] = NOW + 10_000  # everything expired; the active segment stays
        assert broker.log_manager.cleanup_logs() == 1
        assert lg.segment_base_offsets == [3]
    assert checkpoint(log_dir, "log-start-offset-checkpoint") == {("r", 0): 3}


def test_pause_blocks_requests_until_resume(broker):
    broker.create_topic("t")
    results = []
    broker.pause()
    writer = threading.Thread(target=lambda: results.append(broker.produce("t", 0, [b"x"])))
    writer.start()
    writer.join(0.3)
    assert writer.is_alive() and results == []  # blocked while paused
    broker.resume()
    writer.join(5)
    assert [r.base_offset for r in results] == [0]
    broker.pause()
    failures = []

    def blocked_fetch():
        try:
            fetch_one(broker, "t", 0, 0)
        except BrokerClosedError as e:
            failures.append(e)

    reader = threading.Thread(target=blocked_fetch)
    reader.start()
    reader.join(0.2)
    assert reader.is_alive()
    broker.close()  # a paused broker that stops fails its blocked requests
    reader.join(5)
    assert len(failures) == 1


def test_crash_and_recover(log_dir):
    b = Broker(log_dir, create=True)
    b.create_topic("t", config={"segment.bytes": 200})
    for i in range(5):
        b.produce("t", 0, [ProducerRecord(bytes(60), timestamp=NOW + i)])
    b.crash()
    assert not (log_dir / ".kafka_cleanshutdown").exists()
    with pytest.raises(BrokerClosedError):
        b.produce("t", 0, [b"x"])
    with Broker(log_dir, create=True) as again:  # the lock was released; the logs are recovered
        assert again.list_offsets("t", 0, -1).offset == 5  # the HW catches up with the LEO
        assert [o for o, _ in peer_values(fetch_one(again, "t", 0, 0).records)] == [0]
        assert [o for o, _ in peer_values(fetch_one(again, "t", 0, 4).records)] == [4]
        assert again.produce("t", 0, [b"after"]).base_offset == 5
