"""Produce through the standalone broker: records and prebuilt batches, acks, errors, the
min.insync.replicas rules, idempotent producers, LogAppendTime; what kafka-python decodes from
the log files equals what was produced."""

from __future__ import annotations

import pytest

from broker_embedded.broker import Broker, parse_acks
from broker_embedded.common.producer_record import ProducerRecord, build_batch
from broker_embedded.errors import (
    BrokerClosedError,
    CorruptMessageError,
    InvalidRecordError,
    InvalidRequiredAcksError,
    NotEnoughReplicasError,
    OutOfOrderSequenceError,
    RecordTooLargeError,
    UnknownTopicOrPartitionError,
)
from broker_embedded.record.compression import CompressionType
from broker_embedded.record.control_record import EndTransactionMarker
from broker_embedded.storage.topic_partition import TopicPartition
from tests.broker_embedded._broker_util import (
    NOW,
    checkpoint,
    fetch_one,
    log_bytes,
    peer_batches,
    peer_values,
)


def leo(broker: Broker, topic: str, partition: int = 0) -> int:
    return broker.log_manager.get_log(TopicPartition(topic, partition)).log_end_offset


def hw(broker: Broker, topic: str, partition: int = 0) -> int:
    return broker.log_manager.get_log(TopicPartition(topic, partition)).high_watermark


RECORDS = [
    ProducerRecord(b"v0", key=b"k0", headers=(("h", b"1"), ("h", b"2")), timestamp=NOW),
    ProducerRecord(None, key=b"tombstone", timestamp=NOW + 5),
    ProducerRecord(b"", key=None, headers=(("empty", None),), timestamp=NOW - 3),
    ProducerRecord("text \u00e9".encode(), key=b"k3", timestamp=NOW + 1),
]


@pytest.mark.parametrize(
    "codec", [CompressionType.NONE, CompressionType.GZIP, CompressionType.ZSTD]
)
def test_records_round_trip_through_kafka_python(broker, codec):
    broker.create_topic("t")
    r1 = broker.produce("t", 0, RECORDS, compression=codec)
    r2 = broker.produce("t", 0, [b"plain", "str value"], compression=codec)
    assert (r1.base_offset, r1.last_offset, r1.error, r1.log_append_time) == (0, 3, None, -1)
    assert (r2.base_offset, r2.last_offset, r1.log_start_offset) == (4, 5, 0)
    batches = peer_batches(log_bytes(broker, "t", 0))  # the segment file, read by kafka-python
    assert [(b.base_offset, b.last_offset) for b in batches] == [(0, 3), (4, 5)]
    assert all(b.crc_valid and b.compression == codec for b in batches)
    assert all((b.producer_id, b.producer_epoch, b.base_sequence) == (-1, -1, -1) for b in batches)
    first = batches[0]
    assert (first.timestamp_type, first.max_timestamp) == (0, NOW + 5)
    got = [(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in first.records]
    assert got == [
        (0, NOW, b"k0", b"v0", (("h", b"1"), ("h", b"2"))),
        (1, NOW + 5, b"tombstone", None, ()),
        (2, NOW - 3, None, b"", (("empty", None),)),
        (3, NOW + 1, b"k3", "text \u00e9".encode(), ()),
    ]
    assert [r.value for r in batches[1].records] == [b"plain", b"str value"]
    # the fetch returns the same bytes as the file holds
    assert fetch_one(broker, "t", 0, 0).records == log_bytes(broker, "t", 0)


def test_prebuilt_batches(broker):
    broker.create_topic("t")
    one = build_batch([ProducerRecord(b"a", timestamp=NOW)], now_ms=NOW)
    two = build_batch([b"b", b"c"], now_ms=NOW + 1)
    r = broker.produce("t", 0, one + two)  # two batches in one request
    assert (r.base_offset, r.last_offset) == (0, 2)
    r = broker.produce("t", 0, bytearray(one))
    assert (r.base_offset, r.last_offset) == (3, 3)
    stored = log_bytes(broker, "t", 0)
    assert len(stored) == 2 * len(one) + len(two)
    batches = peer_batches(stored)
    assert [(b.base_offset, b.last_offset, b.crc_valid) for b in batches] == [
        (0, 0, True),
        (1, 2, True),
        (3, 3, True),
    ]
    assert peer_values(stored) == [(0, b"a"), (1, b"b"), (2, b"c"), (3, b"a")]
    # only the base offset and the leader epoch (bytes 0-8 and 12-16) were rewritten
    n = len(one)
    assert (stored[8:12], stored[16:n]) == (one[8:12], one[16:])
    assert (stored[n + 8 : n + 12], stored[n + 16 : n + len(two)]) == (two[8:12], two[16:])
    assert stored[0:8] == one[0:8] == bytes(8)  # base offset 0 (the client sent 0 too)
    assert stored[n : n + 8] == (1).to_bytes(8, "big")
    assert stored[12:16] == stored[n + 12 : n + 16] == bytes(4)  # leader epoch 0 (client: -1)
    assert one[12:16] == b"\xff" * 4


def test_acks(broker):
    broker.create_topic("t")
    offsets = [
        broker.produce("t", 0, [b"x"], acks=a).base_offset
        for a in (0, 1, -1, "all", "1", "-1", "0")
    ]
    assert offsets == [0, 1, 2, 3, 4, 5, 6]
    assert (leo(broker, "t"), hw(broker, "t")) == (7, 7)
    for bad in (2, -2, "none", "ALL", True, 1.0, None):
        with pytest.raises(InvalidRequiredAcksError):
            broker.produce("t", 0, [b"x"], acks=bad)
        with pytest.raises(InvalidRequiredAcksError):
            broker.produce("nope", 0, [b"x"], acks=bad)  # acks are checked first
    assert leo(broker, "t") == 7
    assert [parse_acks(a) for a in (0, 1, -1, "all", "0", "1", "-1")] == [0, 1, -1, -1, 0, 1, -1]
    # append() answers the error in the result for a partition, and raises for bad acks
    tp = TopicPartition("t", 5)
    assert broker.append(tp, build_batch([b"x"], now_ms=NOW)).error_code == 3
    with pytest.raises(InvalidRequiredAcksError):
        broker.append(TopicPartition("t", 0), build_batch([b"x"], now_ms=NOW), acks=3)


def test_unknown_partitions(broker):
    broker.create_topic("t", 2)
    for topic, partition in (("nope", 0), ("t", 2), ("t", 100), ("t", -1), ("bad name", 0)):
        with pytest.raises(UnknownTopicOrPartitionError, match="does not exist"):
            broker.produce(topic, partition, [b"x"])
    assert (leo(broker, "t", 0), leo(broker, "t", 1)) == (0, 0)


def test_invalid_batches(broker):
    broker.create_topic("t", config={"max.message.bytes": 1000})
    broker.create_topic("c", config={"cleanup.policy": "compact"})
    ok = build_batch([bytes(900)], now_ms=NOW)
    big = build_batch([bytes(1000)], now_ms=NOW)
    assert len(ok) <= 1000 < len(big)
    with pytest.raises(RecordTooLargeError, match=f"{len(big)} bytes exceeds max.message.bytes"):
        broker.produce("t", 0, big)
    with pytest.raises(RecordTooLargeError):
        broker.produce("t", 0, ok + big)  # nothing of the request is appended
    assert leo(broker, "t") == 0
    assert broker.produce("t", 0, ok).base_offset == 0
    corrupt = bytearray(ok)
    corrupt[-1] ^= 1
    with pytest.raises(CorruptMessageError, match="CRC"):
        broker.produce("t", 0, bytes(corrupt))
    with pytest.raises(CorruptMessageError):
        broker.produce("t", 0, ok[:-1])  # torn
    with pytest.raises(InvalidRecordError, match="control"):
        broker.produce(
            "t",
            0,
            EndTransactionMarker.commit(0).build_batch(
                base_offset=0, timestamp=NOW, producer_id=1, producer_epoch=0
            ),
        )
    with pytest.raises(InvalidRecordError, match="without a key"):
        broker.produce("c", 0, [ProducerRecord(b"v", key=b"k"), ProducerRecord(b"v")])
    assert broker.produce("c", 0, [ProducerRecord(b"v", key=b"k")]).base_offset == 0
    assert leo(broker, "t") == 1


def test_produce_after_close(broker):
    broker.create_topic("t")
    broker.close()
    with pytest.raises(BrokerClosedError):
        broker.produce("t", 0, [b"x"])
    with pytest.raises(BrokerClosedError):
        broker.append(TopicPartition("t", 0), build_batch([b"x"], now_ms=NOW))


def test_min_insync_replicas_on_a_single_broker(broker, log_dir):
    broker.create_topic("m", config={"min.insync.replicas": 2})
    for acks in ("all", -1):
        with pytest.raises(NotEnoughReplicasError, match="min.insync.replicas 2"):
            broker.produce("m", 0, [b"x"], acks=acks)
    assert leo(broker, "m") == 0  # refused before the append
    r = broker.produce("m", 0, [b"a", b"b"], acks=1)
    assert (r.base_offset, r.last_offset) == (0, 1)
    assert broker.produce("m", 0, [b"c"], acks=0).base_offset == 2
    # appended, but the HW never advances while the ISR is smaller than min.insync.replicas
    assert (leo(broker, "m"), hw(broker, "m")) == (3, 0)
    assert broker.list_offsets("m", 0, -1).offset == 0
    assert peer_values(log_bytes(broker, "m", 0)) == [(0, b"a"), (1, b"b"), (2, b"c")]
    broker.close()
    assert checkpoint(log_dir, "replication-offset-checkpoint") == {("m", 0): 0}


def test_idempotent_producer(broker):
    broker.create_topic("t")
    assert broker.init_producer_id() == (0, 0)
    pid, epoch = broker.init_producer_id()
    assert (pid, epoch) == (1, 0)

    def batch(seq: int, *values: bytes, epoch: int = epoch) -> bytes:
        return build_batch(
            values, now_ms=NOW, producer_id=pid, producer_epoch=epoch, base_sequence=seq
        )

    b0, b1 = batch(0, b"a", b"b", b"c"), batch(3, b"d")
    assert broker.produce("t", 0, b0).base_offset == 0
    assert broker.produce("t", 0, b1).base_offset == 3
    broker.produce("t", 0, [b"plain"])  # offset 4, no producer
    for retry, (base, last) in ((b0, (0, 2)), (b1, (3, 3)), (b0, (0, 2))):
        r = broker.produce("t", 0, retry)
        assert (r.base_offset, r.last_offset, r.duplicate, r.error) == (base, last, True, None)
    with pytest.raises(OutOfOrderSequenceError, match="5 \\(incoming sequence\\), 3"):
        broker.produce("t", 0, batch(5, b"gap"))
    with pytest.raises(OutOfOrderSequenceError):
        broker.produce("t", 0, batch(2, b"overlap"))
    with pytest.raises(OutOfOrderSequenceError, match="must be 0 for a new epoch"):
        broker.produce("t", 0, batch(4, b"e", epoch=1))
    assert broker.produce("t", 0, batch(4, b"e")).base_offset == 5
    # stored once each
    batches = peer_batches(log_bytes(broker, "t", 0))
    assert [(b.base_offset, b.producer_id, b.base_sequence) for b in batches] == [
        (0, 1, 0),
        (3, 1, 3),
        (4, -1, -1),
        (5, 1, 4),
    ]
    assert [v for _, v in peer_values(log_bytes(broker, "t", 0))] == [
        b"a",
        b"b",
        b"c",
        b"d",
        b"plain",
        b"e",
    ]
    # a retry after a restart is still recognised (the last batch, from the producer snapshot)
    broker.close()
    with Broker(broker.log_dir, create=True) as again:
        r = again.produce("t", 0, batch(4, b"e"))
        assert (r.base_offset, r.duplicate) == (5, True)
        assert again.init_producer_id() == (2, 0)  # ids are not reused after a restart
        assert leo(again, "t") == 6


def test_log_append_time(log_dir):
    clock = NOW + 123_456
    with Broker(log_dir, clock_ms=lambda: clock, create=True) as broker:
        broker.create_topic("t", config={"message.timestamp.type": "LogAppendTime"})
        records = [ProducerRecord(b"a", timestamp=NOW), ProducerRecord(b"b", timestamp=1)]
        batch = build_batch(records, now_ms=NOW)
        r = broker.produce("t", 0, batch)
        assert (r.base_offset, r.log_append_time) == (0, clock)
        (stored,) = peer_batches(log_bytes(broker, "t", 0))
        assert (stored.timestamp_type, stored.max_timestamp, stored.crc_valid) == (1, clock, True)
        assert [r.timestamp for r in stored.records] == [clock, clock]
        assert broker.list_offsets("t", 0, clock).offset == 0


def test_produced_records_fetchable_at_once(broker):
    broker.create_topic("t", 3)
    for p in range(3):
        broker.produce("t", p, [f"p{p}".encode()])
    for p in range(3):
        assert peer_values(fetch_one(broker, "t", p, 0).records) == [(0, f"p{p}".encode())]
