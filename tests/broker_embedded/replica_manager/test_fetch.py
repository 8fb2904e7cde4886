"""Fetch through the standalone broker, as reference C describes it: byte limits per partition
and per response, KIP-74, partial batches, the HW bound, offset errors, leader epochs, and
delayed fetches (min_bytes, max_wait, wake-up by appends). Expected bytes are slices of the
partition's .log file; kafka-python decodes them."""

from __future__ import annotations

import threading
import time

from broker_embedded.broker import Broker
from broker_embedded.broker_config import BrokerConfig
from broker_embedded.common.fetch_request import FetchRequest, PartitionFetch
from broker_embedded.common.producer_record import ProducerRecord, build_batch
from broker_embedded.storage.topic_partition import TopicPartition
from tests.broker_embedded._broker_util import NOW, fetch_one, log_bytes, peer_batches

BATCH = build_batch([ProducerRecord(bytes(100), timestamp=NOW)] * 2, now_ms=NOW)
S = len(BATCH)  # every batch produced here: 2 records, S bytes


def fill(broker: Broker, topic: str, partitions: int = 2, batches: int = 3, **config) -> None:
    """``topic`` with ``batches`` batches of S bytes (offsets 0, 2, 4, ...) in each partition."""
    broker.create_topic(topic, partitions, config=config or None)
    for p in range(partitions):
        for _ in range(batches):
            broker.produce(topic, p, BATCH, acks=1)


def fetch(broker: Broker, *parts: tuple[str, int, int, int], **request) -> list[tuple]:
    """Fetch (topic, partition, offset, partition max bytes) ...; (error, records) each."""
    request.setdefault("max_wait_ms", 0)
    pfs = tuple(PartitionFetch(TopicPartition(t, p), o, m) for t, p, o, m in parts)
    response = broker.fetch(FetchRequest(pfs, **request))
    assert [r.topic_partition for r in response.partitions] == [pf.topic_partition for pf in pfs]
    return [(r.error and r.error_name, r.records) for r in response.partitions]


def offsets(records: bytes) -> list[tuple[int, int]]:
    """(base, last offset) of the complete batches kafka-python finds."""
    return [(b.base_offset, b.last_offset) for b in peer_batches(records)]


BIG = 1 << 20


# -- one and several partitions, byte limits -------------------------------------------------------


def test_one_partition(broker):
    fill(broker, "t", 1)
    log = log_bytes(broker, "t", 0)
    assert len(log) == 3 * S
    for offset, expected in ((0, log), (1, log), (2, log[S:]), (3, log[S:]), (5, log[2 * S :])):
        r = fetch_one(broker, "t", 0, offset)
        assert (r.error, r.records) == (None, expected), offset
        assert (r.high_watermark, r.last_stable_offset, r.log_start_offset) == (6, 6, 0)
        assert r.aborted_transactions is None  # read_uncommitted
    assert offsets(log) == [(0, 1), (2, 3), (4, 5)]
    at_end = fetch_one(broker, "t", 0, 6)
    assert (at_end.error, at_end.records, at_end.high_watermark) == (None, b"", 6)
    beyond = fetch_one(broker, "t", 0, 7)
    assert (beyond.error_name, beyond.error_code, beyond.records) == ("OFFSET_OUT_OF_RANGE", 1, b"")
    assert (beyond.high_watermark, beyond.last_stable_offset, beyond.log_start_offset) == (6, 6, 0)
    negative = fetch_one(broker, "t", 0, -1)
    assert negative.error_name == "OFFSET_OUT_OF_RANGE"


def test_several_partitions_in_request_order(broker):
    fill(broker, "a", 2)
    fill(broker, "b", 1)
    a0, a1, b0 = log_bytes(broker, "a", 0), log_bytes(broker, "a", 1), log_bytes(broker, "b", 0)
    got = fetch(broker, ("b", 0, 2, BIG), ("a", 1, 0, BIG), ("a", 0, 4, BIG))
    assert got == [(None, b0[S:]), (None, a1), (None, a0[2 * S :])]


def test_partition_max_bytes_ends_after_the_last_whole_batch(broker):
    fill(broker, "t", 2)
    p0, p1 = log_bytes(broker, "t", 0), log_bytes(broker, "t", 1)
    got = fetch(broker, ("t", 0, 0, S + 10), ("t", 1, 2, 2 * S + 1))
    # Kafka would add the first bytes of the batch the limit cut, which clients drop
    assert got == [(None, p0[:S]), (None, p1[S : 3 * S])]
    assert offsets(got[0][1]) == [(0, 1)]
    assert offsets(got[1][1]) == [(2, 3), (4, 5)]


def test_total_max_bytes(broker):
    fill(broker, "t", 2)
    p0, p1 = log_bytes(broker, "t", 0), log_bytes(broker, "t", 1)
    # the response budget ends inside partition 0's second batch: its first batch, and the 50
    # bytes left are too few for partition 1's first batch
    assert fetch(broker, ("t", 0, 0, BIG), ("t", 1, 0, BIG), max_bytes=S + 50) == [
        (None, p0[:S]),
        (None, b""),
    ]
    # partition 0 takes one whole batch of its limit, partition 1 one whole batch of the rest
    assert fetch(broker, ("t", 0, 0, S + 10), ("t", 1, 0, BIG), max_bytes=2 * S + 10) == [
        (None, p0[:S]),
        (None, p1[:S]),
    ]
    # what remains is one byte short of partition 1's first batch: no records, not a fragment
    assert fetch(broker, ("t", 0, 0, S), ("t", 1, 0, BIG), max_bytes=2 * S - 1) == [
        (None, p0[:S]),
        (None, b""),
    ]


def test_kip74_first_partition_with_data_returns_one_whole_batch(broker):
    fill(broker, "t", 3)
    p0, p1, p2 = (log_bytes(broker, "t", p) for p in range(3))
    # above both limits: the first partition still returns its first batch whole
    assert fetch(broker, ("t", 0, 0, 10), ("t", 1, 0, 10), max_bytes=10) == [
        (None, p0[:S]),
        (None, b""),
    ]
    # with a zero budget too
    assert fetch(broker, ("t", 0, 2, 0), ("t", 1, 0, BIG), max_bytes=0) == [
        (None, p0[S : 2 * S]),
        (None, b""),
    ]
    # later partitions strictly respect what remains, even when they had nothing to return
    assert fetch(broker, ("t", 0, 0, 10), ("t", 1, 0, 10), ("t", 2, 0, 10)) == [
        (None, p0[:S]),
        (None, b""),
        (None, b""),
    ]
    # the rule follows the first partition that returns data, not the first partition
    assert fetch(broker, ("t", 0, 6, 10), ("t", 1, 0, 10), ("t", 2, 0, 10), max_bytes=10) == [
        (None, b""),
        (None, p1[:S]),
        (None, b""),
    ]
    # an error does not use the budget or the rule either
    got = fetch(broker, ("nope", 0, 0, 10), ("t", 0, 99, 10), ("t", 2, 0, 10), max_bytes=10)
    assert got == [
        ("UNKNOWN_TOPIC_OR_PARTITION", b""),
        ("OFFSET_OUT_OF_RANGE", b""),
        (None, p2[:S]),
    ]


def test_broker_fetch_max_bytes_caps_the_request(log_dir):
    with Broker(log_dir, config=BrokerConfig(fetch_max_bytes=S + 20), create=True) as broker:
        fill(broker, "t", 2)
        p0 = log_bytes(broker, "t", 0)
        assert fetch(broker, ("t", 0, 0, BIG), ("t", 1, 0, BIG), max_bytes=BIG) == [
            (None, p0[:S]),
            (None, b""),
        ]
        # min_bytes is capped by it too: more than the cap is never waited for
        start = time.monotonic()
        got = fetch(broker, ("t", 0, 0, BIG), max_wait_ms=5000, min_bytes=10 * S)
        assert time.monotonic() - start < 1
        assert got == [(None, p0[:S])]


def test_min_bytes_is_capped_by_the_request_max_bytes(broker):
    fill(broker, "t", 1)
    log = log_bytes(broker, "t", 0)
    start = time.monotonic()
    got = fetch(broker, ("t", 0, 0, BIG), max_wait_ms=5000, min_bytes=100 * S, max_bytes=2 * S)
    assert time.monotonic() - start < 1
    assert got == [(None, log[: 2 * S])]


# -- the high watermark bound and offset errors ----------------------------------------------------


def test_consumers_stop_at_the_high_watermark(broker):
    # acks=1 appends while min.insync.replicas=2 keeps the HW at 0: HW 0 < LEO 6
    broker.create_topic("m", config={"min.insync.replicas": 2})
    for _ in range(3):
        broker.produce("m", 0, BATCH, acks=1)
    lg = broker.log_manager.get_log(TopicPartition("m", 0))
    assert (lg.high_watermark, lg.log_end_offset) == (0, 6)
    for offset in range(7):  # every offset in [HW, LEO]: empty, no error
        r = fetch_one(broker, "m", 0, offset)
        assert (r.error, r.records, r.high_watermark, r.log_start_offset) == (None, b"", 0, 0)
    r = fetch_one(broker, "m", 0, 7)
    assert (r.error_name, r.high_watermark, r.log_start_offset) == ("OFFSET_OUT_OF_RANGE", 0, 0)
    # move the HW to 4 through the partition log: consumers see offsets below it, no more
    assert lg.maybe_increment_high_watermark(4)
    log = log_bytes(broker, "m", 0)
    r = fetch_one(broker, "m", 0, 0)
    assert (r.records, r.high_watermark, r.last_stable_offset) == (log[: 2 * S], 4, 4)
    assert fetch_one(broker, "m", 0, 2).records == log[S : 2 * S]
    for offset in (4, 5, 6):
        r = fetch_one(broker, "m", 0, offset)
        assert (r.error, r.records) == (None, b""), offset
    assert fetch_one(broker, "m", 0, 7).error_name == "OFFSET_OUT_OF_RANGE"
    assert broker.list_offsets("m", 0, -1).offset == 4


def test_offset_out_of_range_below_the_log_start(broker):
    fill(broker, "t", 1)
    log = log_bytes(broker, "t", 0)
    assert broker.delete_records("t", 0, 3) == 3
    for offset in (0, 1, 2):
        r = fetch_one(broker, "t", 0, offset)
        assert (r.error_name, r.records) == ("OFFSET_OUT_OF_RANGE", b"")
        assert (r.high_watermark, r.last_stable_offset, r.log_start_offset) == (6, 6, 3)
    r = fetch_one(broker, "t", 0, 3)  # the batch holding offset 3 begins at offset 2
    assert (r.error, r.records, r.log_start_offset) == (None, log[S:], 3)


def test_unknown_topic_or_partition(broker):
    fill(broker, "t", 1)
    for topic, partition in (("nope", 0), ("t", 1)):
        r = fetch_one(broker, topic, partition, 0)
        assert (r.error_name, r.error_code, r.records) == ("UNKNOWN_TOPIC_OR_PARTITION", 3, b"")
        assert (r.high_watermark, r.log_start_offset) == (-1, -1)


def test_current_leader_epoch(log_dir):
    with Broker(log_dir, create=True) as broker:
        fill(broker, "t", 1)
        assert fetch_one(broker, "t", 0, 0, current_leader_epoch=0).error is None
        assert fetch_one(broker, "t", 0, 0, current_leader_epoch=1).error_name == (
            "UNKNOWN_LEADER_EPOCH"
        )
    with Broker(log_dir, create=True) as broker:  # led at epoch 1 after the restart
        assert broker.describe_topic("t").partitions[0].leader_epoch == 1
        log = log_bytes(broker, "t", 0)
        for epoch, error in (
            (-1, None),
            (1, None),
            (0, "FENCED_LEADER_EPOCH"),
            (2, "UNKNOWN_LEADER_EPOCH"),
        ):
            r = fetch_one(broker, "t", 0, 0, current_leader_epoch=epoch)
            assert (r.error_name if r.error else None) == error, epoch
            assert r.records == (log if error is None else b"")
            assert (r.high_watermark, r.last_stable_offset, r.log_start_offset) == (6, 6, 0)
        fenced = fetch_one(broker, "t", 0, 0, current_leader_epoch=0)
        assert fenced.error_code == 74
        assert "epoch 0 is older than the current 1" in str(fenced.error)


# -- delayed fetch ---------------------------------------------------------------------------------


def timed(broker: Broker, *parts, **request) -> tuple[float, list[tuple]]:
    start = time.monotonic()
    got = fetch(broker, *parts, **request)
    return time.monotonic() - start, got


def later(seconds: float, action) -> threading.Thread:
    t = threading.Thread(target=lambda: (time.sleep(seconds), action()))
    t.start()
    return t


def test_returns_at_once_when_min_bytes_are_there(broker):
    fill(broker, "t", 2)
    p0, p1 = log_bytes(broker, "t", 0), log_bytes(broker, "t", 1)
    # together the two partitions hold 2 S >= min_bytes, neither alone
    elapsed, got = timed(
        broker, ("t", 0, 4, BIG), ("t", 1, 4, BIG), max_wait_ms=5000, min_bytes=2 * S
    )
    assert elapsed < 1
    assert got == [(None, p0[2 * S :]), (None, p1[2 * S :])]
    # no partitions: at once
    start = time.monotonic()
    assert broker.fetch(FetchRequest((), max_wait_ms=5000)).partitions == ()
    assert time.monotonic() - start < 1
    # an error: at once, with the other partitions' data
    elapsed, got = timed(broker, ("t", 0, 6, BIG), ("nope", 0, 0, BIG), max_wait_ms=5000)
    assert elapsed < 1
    assert got == [(None, b""), ("UNKNOWN_TOPIC_OR_PARTITION", b"")]


def test_waits_max_wait_then_returns_what_is_there(broker):
    fill(broker, "t", 1)
    log = log_bytes(broker, "t", 0)
    max_wait_ms = 300
    elapsed, got = timed(broker, ("t", 0, 4, BIG), max_wait_ms=max_wait_ms, min_bytes=S + 1)
    assert max_wait_ms / 1000 * 0.9 <= elapsed < max_wait_ms / 1000 + 1
    assert got == [(None, log[2 * S :])]
    elapsed, got = timed(broker, ("t", 0, 6, BIG), max_wait_ms=max_wait_ms)  # at the end
    assert max_wait_ms / 1000 * 0.9 <= elapsed < max_wait_ms / 1000 + 1
    assert got == [(None, b"")]
    assert broker.replica_manager.fetch_purgatory.pending == 0


def test_woken_early_by_an_append_from_another_thread(broker):
    fill(broker, "t", 2)
    writer = later(0.2, lambda: broker.produce("t", 1, BATCH))
    elapsed, got = timed(broker, ("t", 0, 6, BIG), ("t", 1, 6, BIG), max_wait_ms=10_000)
    writer.join()
    assert 0.15 < elapsed < 3  # much less than max_wait
    assert got == [(None, b""), (None, log_bytes(broker, "t", 1)[3 * S :])]
    assert offsets(got[1][1]) == [(6, 7)]


def test_min_bytes_waits_for_enough_appends(broker):
    fill(broker, "t", 1)

    def two_appends():
        broker.produce("t", 0, BATCH)  # S bytes: not enough, keep waiting
        time.sleep(0.3)
        broker.produce("t", 0, BATCH)  # 2 S: done

    writer = later(0.1, two_appends)
    elapsed, got = timed(broker, ("t", 0, 6, BIG), max_wait_ms=10_000, min_bytes=2 * S)
    writer.join()
    assert 0.35 < elapsed < 3
    assert got == [(None, log_bytes(broker, "t", 0)[3 * S :])]
    assert offsets(got[0][1]) == [(6, 7), (8, 9)]


def test_delete_topic_wakes_a_waiting_fetch(broker):
    fill(broker, "t", 1)
    deleter = later(0.2, lambda: broker.delete_topic("t"))
    elapsed, got = timed(broker, ("t", 0, 6, BIG), max_wait_ms=10_000)
    deleter.join()
    assert elapsed < 3
    assert got == [("UNKNOWN_TOPIC_OR_PARTITION", b"")]


def test_waiting_fetch_ends_on_close(log_dir):
    broker = Broker(log_dir, create=True)
    fill(broker, "t", 1)

    def close_once_parked() -> None:  # a close before the fetch's first read fails the read
        deadline = time.monotonic() + 30
        while broker.replica_manager.fetch_purgatory.pending == 0:
            assert time.monotonic() < deadline, "the fetch never waited in the purgatory"
            time.sleep(0.01)
        broker.close()

    closer = later(0, close_once_parked)
    elapsed, got = timed(broker, ("t", 0, 6, BIG), max_wait_ms=10_000)
    closer.join()
    assert elapsed < 8  # the close answers it, not its 10 s wait
    assert got == [(None, b"")]
