"""Transactions through the standalone broker: the LSO while transactions are open,
read_committed fetches (LSO bound, aborted transactions, decoded with the columnar decoder),
.txnindex entries, fencing by a second producer with the same transactional id, and the same
state after close and reopen. kafka-python checks the markers independently."""

from __future__ import annotations

import struct

import pytest

from broker_embedded.broker import Broker
from broker_embedded.common.producer_record import build_batch
from broker_embedded.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    ProducerFencedError,
    UnknownTopicOrPartitionError,
)
from broker_embedded.record.columnar_decoder import decode
from broker_embedded.storage.topic_partition import TopicPartition
from broker_embedded.storage.transaction_index import AbortedTxn
from tests.broker_embedded._broker_util import (
    NOW,
    fetch_one,
    log_bytes,
    peer_batches,
    peer_values,
    read_committed,
)

ABORT_KEY, COMMIT_KEY = b"\x00\x00\x00\x00", b"\x00\x00\x00\x01"  # version 0, type 0 / 1
MARKER_VALUE = b"\x00" * 6  # version 0, coordinator epoch 0


def lso(broker: Broker, topic: str, partition: int = 0) -> int:
    return broker.log_manager.get_log(TopicPartition(topic, partition)).last_stable_offset


def committed_values(broker: Broker, topic: str, partition: int = 0) -> list[bytes]:
    """The values a read_committed consumer sees from offset 0, decoded by the columnar
    decoder with the fetch's aborted transactions."""
    r = read_committed(broker, topic, partition, 0)
    assert r.error is None
    aborted = [(a.producer_id, a.first_offset) for a in r.aborted_transactions]
    decoded = decode(r.records, topic=topic, partition=partition, aborted_transactions=aborted)
    return [v for b in decoded.batches for v in b.column("value").to_pylist()]


def txnindex_entries(broker: Broker, topic: str, partition: int = 0) -> list[tuple]:
    """The raw 34-byte entries of the partition's .txnindex files, parsed here: (version,
    producer id, first offset, last offset, last stable offset)."""
    directory = broker.log_dir / f"{topic}-{partition}"
    out = []
    for path in sorted(directory.glob("*.txnindex")):
        data = path.read_bytes()
        assert len(data) % 34 == 0, path
        out += [struct.unpack_from(">hqqqq", data, i) for i in range(0, len(data), 34)]
    return out


def markers(broker: Broker, topic: str, partition: int = 0) -> list[tuple]:
    """(offset, producer id, epoch, key, value) of every control batch, by kafka-python."""
    out = []
    for b in peer_batches(log_bytes(broker, topic, partition)):
        if b.is_control:
            assert b.is_transactional and len(b.records) == 1
            r = b.records[0]
            out.append((b.base_offset, b.producer_id, b.producer_epoch, r.key, r.value))
    return out


def test_lso_aborted_transactions_and_read_committed(broker, log_dir):
    broker.create_topic("tx")
    broker.produce("tx", 0, [b"n0"])  # 0
    a = broker.transactional_producer("A")
    b = broker.transactional_producer("B")
    assert (a.producer_id, a.producer_epoch, b.producer_id, b.producer_epoch) == (0, 0, 1, 0)
    a.begin()
    assert (a.send("tx", 0, [b"a1", b"a2"]).base_offset, a.in_transaction) == (1, True)  # 1-2
    b.begin()
    assert b.send("tx", 0, [b"b1"]).base_offset == 3
    assert broker.produce("tx", 0, [b"n1"]).base_offset == 4
    log = log_bytes(broker, "tx", 0)
    first_batch = log[: len(build_batch([b"n0"], now_ms=NOW))]  # offset 0 alone

    # A's transaction is open from offset 1: the LSO stays there
    assert lso(broker, "tx") == 1
    assert broker.list_offsets("tx", 0, -1, "read_committed").offset == 1
    assert broker.list_offsets("tx", 0, -1).offset == 5
    r = read_committed(broker, "tx", 0, 0)
    assert (r.records, r.high_watermark, r.last_stable_offset) == (first_batch, 5, 1)
    assert r.aborted_transactions == ()
    r = read_committed(broker, "tx", 0, 1)  # at the LSO: nothing yet, no error
    assert (r.error, r.records, r.aborted_transactions) == (None, b"", ())
    assert fetch_one(broker, "tx", 0, 0).records == log  # read_uncommitted sees everything
    assert peer_values(log) == [(0, b"n0"), (1, b"a1"), (2, b"a2"), (3, b"b1"), (4, b"n1")]

    a.abort()  # marker at 5; B's transaction (from 3) is still open
    assert not a.in_transaction
    assert lso(broker, "tx") == 3
    aborted_a = AbortedTxn(producer_id=0, first_offset=1, last_offset=5, last_stable_offset=3)
    r = read_committed(broker, "tx", 0, 0)
    assert (r.last_stable_offset, r.aborted_transactions) == (3, (aborted_a,))
    assert [(o, v) for o, v in peer_values(r.records)] == [(0, b"n0"), (1, b"a1"), (2, b"a2")]
    assert committed_values(broker, "tx") == [b"n0"]

    b.commit()  # marker at 6: everything is stable
    assert lso(broker, "tx") == 7
    assert broker.list_offsets("tx", 0, -1, "read_committed").offset == 7
    r = read_committed(broker, "tx", 0, 0)
    assert (r.records, r.high_watermark, r.last_stable_offset) == (log_bytes(broker, "tx", 0), 7, 7)
    assert r.aborted_transactions == (aborted_a,)
    assert committed_values(broker, "tx") == [b"n0", b"b1", b"n1"]
    # a read_committed fetch after the aborted transaction lists no aborted transaction
    r = read_committed(broker, "tx", 0, 6)
    assert r.aborted_transactions == ()
    assert markers(broker, "tx") == [
        (5, 0, 0, ABORT_KEY, MARKER_VALUE),
        (6, 1, 0, COMMIT_KEY, MARKER_VALUE),
    ]
    assert txnindex_entries(broker, "tx") == [(0, 0, 1, 5, 3)]

    # close and reopen: the same LSO, aborted transactions and index
    broker.close()
    with Broker(log_dir, create=True) as again:
        assert lso(again, "tx") == 7
        r = read_committed(again, "tx", 0, 0)
        assert (r.last_stable_offset, r.aborted_transactions) == (7, (aborted_a,))
        assert committed_values(again, "tx") == [b"n0", b"b1", b"n1"]
        assert txnindex_entries(again, "tx") == [(0, 0, 1, 5, 3)]


def test_transaction_left_open_is_aborted_when_the_log_dir_reopens(log_dir):
    """Its producer died with the process, so nothing could ever end it: the leader aborts it
    on start (Kafka's coordinator would after transaction.timeout.ms) and read_committed
    readers move on."""
    with Broker(log_dir, create=True) as broker:
        broker.create_topic("tx", 2)
        p = broker.transactional_producer("T")
        p.begin()
        p.send("tx", 0, [b"committed"])
        p.send("tx", 1, [b"one"])
        p.commit()  # markers at tx-0:1, tx-1:1
        p.begin()
        p.send("tx", 0, [b"x1", b"x2"])  # 2-3
        p.abort()  # marker at 4
        p.begin()
        assert p.send("tx", 0, [b"open"]).base_offset == 5
        broker.produce("tx", 0, [b"after"])  # 6
        assert (lso(broker, "tx"), lso(broker, "tx", 1)) == (5, 2)
    with Broker(log_dir, create=True) as broker:
        # the ABORT marker takes offset 7; the LSO is the HW again
        assert (lso(broker, "tx"), lso(broker, "tx", 1)) == (8, 2)
        after = read_committed(broker, "tx", 0, 0)
        assert (after.last_stable_offset, after.high_watermark) == (8, 8)
        assert after.aborted_transactions == (AbortedTxn(0, 2, 4, 5), AbortedTxn(0, 5, 7, 8))
        assert committed_values(broker, "tx") == [b"committed", b"after"]
        assert txnindex_entries(broker, "tx") == [(0, 0, 2, 4, 5), (0, 0, 5, 7, 8)]
        assert broker.list_offsets("tx", 0, -1, "read_committed").offset == 8
    with Broker(log_dir, create=True) as broker:  # nothing left to abort: no second marker
        assert broker.log_manager.get_log(TopicPartition("tx", 0)).log_end_offset == 8


def test_second_producer_fences_the_first(broker):
    broker.create_topic("tx", 3)
    old = broker.transactional_producer("same")
    old.begin()
    old.send("tx", 0, [b"zombie0"])  # tx-0: 0
    old.send("tx", 1, [b"zombie1"])  # tx-1: 0
    assert (lso(broker, "tx", 0), lso(broker, "tx", 1)) == (0, 0)

    new = broker.transactional_producer("same")
    # Kafka's fencing: the open transaction is aborted with the epoch bumped once (the markers
    # carry epoch 1), and the new instance gets it bumped again
    assert (new.producer_id, new.producer_epoch) == (old.producer_id, old.producer_epoch + 2)
    # the fenced producer's open transaction was aborted, with the fencing epoch
    for p in (0, 1):
        assert lso(broker, "tx", p) == 2
        assert markers(broker, "tx", p) == [(1, 0, 1, ABORT_KEY, MARKER_VALUE)]
        assert txnindex_entries(broker, "tx", p) == [(0, 0, 0, 1, 2)]
        assert read_committed(broker, "tx", p, 0).aborted_transactions == (AbortedTxn(0, 0, 1, 2),)
    # the old instance is fenced at the coordinator...
    for call in (lambda: old.send("tx", 2, [b"late"]), old.commit, old.abort):
        with pytest.raises(ProducerFencedError, match="epoch 0 was fenced by producer 0 epoch 2"):
            call()
    # ... and at a partition of its transaction, which saw the fencing epoch in the marker
    with pytest.raises(InvalidProducerEpochError, match="smaller than the last seen epoch 1"):
        old.send("tx", 0, [b"late"])
    # ... and at the partition, for a batch that races the abort
    stale = build_batch(
        [b"late"],
        now_ms=NOW,
        producer_id=0,
        producer_epoch=0,
        base_sequence=1,
        is_transactional=True,
    )
    with pytest.raises(InvalidProducerEpochError, match="smaller than the last seen epoch 1"):
        broker.produce("tx", 0, stale)
    assert lso(broker, "tx") == 2 and broker.list_offsets("tx", 0, -1).offset == 2

    new.begin()
    assert new.send("tx", 0, [b"fresh"]).base_offset == 2
    new.commit()
    assert committed_values(broker, "tx", 0) == [b"fresh"]
    assert committed_values(broker, "tx", 1) == []
    assert markers(broker, "tx", 0)[-1] == (3, 0, 2, COMMIT_KEY, MARKER_VALUE)
    # a third instance fences the second, which had no transaction open: nothing is written
    third = broker.transactional_producer("same")
    assert third.producer_epoch == 3
    assert broker.list_offsets("tx", 0, -1).offset == 4
    new.begin()
    with pytest.raises(ProducerFencedError):
        new.send("tx", 0, [b"x"])
    assert broker.list_offsets("tx", 0, -1).offset == 4


def test_transaction_state_errors(broker):
    broker.create_topic("tx")
    p = broker.transactional_producer("S")
    with pytest.raises(InvalidTxnStateError, match="outside a transaction"):
        p.send("tx", 0, [b"x"])
    for end in (p.commit, p.abort):
        with pytest.raises(InvalidTxnStateError, match="no open transaction"):
            end()
    p.begin()
    with pytest.raises(InvalidTxnStateError, match="already open"):
        p.begin()
    assert p.commit() == []  # an empty transaction writes nothing
    assert broker.list_offsets("tx", 0, -1).offset == 0
    p.begin()
    with pytest.raises(UnknownTopicOrPartitionError):
        p.send("tx", 1, [b"nowhere"])  # not added to the transaction
    p.send("tx", 0, [b"x"])
    # a non-transactional batch of the producer while its transaction is open
    plain = build_batch(
        [b"y"],
        now_ms=NOW,
        producer_id=p.producer_id,
        producer_epoch=p.producer_epoch,
        base_sequence=1,
    )
    with pytest.raises(InvalidTxnStateError, match="still ongoing"):
        broker.produce("tx", 0, plain)
    (result,) = p.commit()
    assert (result.base_offset, result.last_offset) == (1, 1)
    assert committed_values(broker, "tx") == [b"x"]
    # sequences continue per partition across transactions
    p.begin()
    assert p.send("tx", 0, [b"z"]).base_offset == 2
    p.abort()
    assert [
        (b.base_offset, b.base_sequence, b.is_transactional)
        for b in peer_batches(log_bytes(broker, "tx", 0))
        if not b.is_control
    ] == [
        (0, 0, True),
        (2, 1, True),
    ]
    assert committed_values(broker, "tx") == [b"x"]
