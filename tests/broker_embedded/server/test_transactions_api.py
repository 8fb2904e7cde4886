"""Transactions over the wire with confluent-kafka (librdkafka)'s transactional producer:
FindCoordinator, InitProducerId, AddPartitionsToTxn, EndTxn against a real server; committed
records reach a read_committed consumer and aborted ones never do, a zombie is fenced, and a
transaction whose producer stops past ``transaction.timeout.ms`` is aborted by the
coordinator. The log is then read back by kafka-python (an independent decoder)."""

from __future__ import annotations

import time

import pytest

from tests.broker_embedded.server._serve import log_batches, served

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, KafkaException, Producer  # noqa: E402
from confluent_kafka import TopicPartition as CTP  # noqa: E402

from tests.broker_embedded.server._consume import consume  # noqa: E402

TIMEOUT_S = 20.0


def producer(bootstrap: str, transactional_id: str, **extra) -> Producer:
    settings = {
        "bootstrap.servers": bootstrap,
        "transactional.id": transactional_id,
        "socket.timeout.ms": 10_000,
        "message.timeout.ms": 15_000,
    }
    return Producer({**settings, **extra})


def committed_values(bootstrap: str, topic: str, partitions: int) -> list[tuple[int, bytes]]:
    """(partition, value) of every record a read_committed consumer gets up to the LSO."""
    got = consume(bootstrap, topic, partitions, "read_committed", TIMEOUT_S)
    return sorted((p, v) for p, _, v, _, _ in got)


def control_batches(log_dir, topic: str, partition: int) -> list[tuple[int, int, bool]]:
    """(producer id, epoch, commit?) of each transaction marker, by kafka-python."""
    out = []
    for b in log_batches(log_dir, topic, partition):
        if b.is_control:
            (r,) = b.records
            out.append((b.producer_id, b.producer_epoch, r.key == b"\x00\x00\x00\x01"))
    return out


def test_commit_and_abort_reach_read_committed_readers_exactly(tmp_path):
    with served(tmp_path) as s:
        s.broker.create_topic("tx", 2)
        p = producer(s.bootstrap, "app-1")
        p.init_transactions(TIMEOUT_S)
        p.begin_transaction()
        for i in range(4):
            p.produce("tx", value=b"c%d" % i, partition=i % 2)
        p.commit_transaction(TIMEOUT_S)
        p.begin_transaction()
        for i in range(3):
            p.produce("tx", value=b"a%d" % i, partition=i % 2)
        assert p.flush(TIMEOUT_S) == 0  # appended (not just queued) before the abort
        p.abort_transaction(TIMEOUT_S)
        p.begin_transaction()
        p.produce("tx", value=b"c-last", partition=1)
        p.commit_transaction(TIMEOUT_S)  # answered once PrepareCommit; markers follow
        coordinator = s.broker.controller.transaction_coordinator
        assert coordinator.wait_completed("app-1", TIMEOUT_S)
        state = coordinator.state("app-1")
        got = committed_values(s.bootstrap, "tx", 2)
    assert got == [(0, b"c0"), (0, b"c2"), (1, b"c-last"), (1, b"c1"), (1, b"c3")]
    assert (state.status.value, state.partitions) == ("CompleteCommit", [])
    pid, epoch = state.producer_id, state.producer_epoch
    assert control_batches(tmp_path, "tx", 0) == [(pid, epoch, True), (pid, epoch, False)]
    assert control_batches(tmp_path, "tx", 1) == [
        (pid, epoch, True),
        (pid, epoch, False),
        (pid, epoch, True),
    ]


def test_a_second_instance_fences_the_zombie_and_aborts_its_transaction(tmp_path):
    with served(tmp_path) as s:
        s.broker.create_topic("tx", 1)
        zombie = producer(s.bootstrap, "same")
        zombie.init_transactions(TIMEOUT_S)
        zombie.begin_transaction()
        zombie.produce("tx", value=b"zombie", partition=0)
        assert zombie.flush(TIMEOUT_S) == 0
        fresh = producer(s.bootstrap, "same")
        fresh.init_transactions(TIMEOUT_S)  # aborts the zombie's transaction first
        fresh.begin_transaction()
        fresh.produce("tx", value=b"fresh", partition=0)
        fresh.commit_transaction(TIMEOUT_S)
        with pytest.raises(KafkaException) as e:
            zombie.commit_transaction(TIMEOUT_S)
        assert e.value.args[0].fatal() or e.value.args[0].txn_requires_abort()
        coordinator = s.broker.controller.transaction_coordinator
        assert coordinator.wait_completed("same", TIMEOUT_S)
        got = committed_values(s.bootstrap, "tx", 1)
        state = coordinator.state("same")
    assert got == [(0, b"fresh")]
    pid = state.producer_id
    # the zombie's transaction aborted with the fencing epoch 1, the fresh one committed with 2
    assert control_batches(tmp_path, "tx", 0) == [(pid, 1, False), (pid, 2, True)]


def test_a_transaction_past_its_timeout_is_aborted(tmp_path):
    with served(tmp_path) as s:
        s.broker.create_topic("tx", 1)
        p = producer(
            s.bootstrap,
            "slow",
            **{
                "transaction.timeout.ms": 2_000,
                "socket.timeout.ms": 2_000,
                "message.timeout.ms": 2_000,
            },
        )
        p.init_transactions(TIMEOUT_S)
        p.begin_transaction()
        p.produce("tx", value=b"never", partition=0)
        assert p.flush(TIMEOUT_S) == 0
        coordinator = s.broker.controller.transaction_coordinator
        deadline = time.monotonic() + TIMEOUT_S
        while coordinator.state("slow").status.value != "CompleteAbort":
            assert time.monotonic() < deadline, coordinator.state("slow")
            time.sleep(0.1)
        with pytest.raises(KafkaException):
            p.commit_transaction(TIMEOUT_S)
        got = committed_values(s.bootstrap, "tx", 1)
    assert got == []
    assert control_batches(tmp_path, "tx", 0) == [(0, 1, False)]  # the epoch bumped: fenced


def test_offsets_sent_to_a_transaction_commit_with_it_and_not_with_an_abort(tmp_path):
    """Consume-transform-produce: ``send_offsets_to_transaction`` (AddOffsetsToTxn,
    TxnOffsetCommit) makes the group's offsets committed only when the transaction commits.
    On disk (kafka-python): each TxnOffsetCommit is a transactional batch of the producer in the
    group's ``__consumer_offsets`` partition, followed there by its COMMIT, then ABORT marker."""
    with served(tmp_path, group_initial_rebalance_delay_ms=0, offsets_topic_num_partitions=1) as s:
        s.broker.create_topic("in", 1)
        s.broker.create_topic("out", 1)
        for i in range(6):
            s.broker.produce("in", 0, [b"r%d" % i])
        c = Consumer(
            {
                "bootstrap.servers": s.bootstrap,
                "group.id": "ctp",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "isolation.level": "read_committed",
            }
        )
        p = producer(s.bootstrap, "ctp-app")
        p.init_transactions(TIMEOUT_S)
        try:
            c.assign([CTP("in", 0, 0)])
            for commit, count in ((True, 4), (False, 2)):
                records = c.consume(count, TIMEOUT_S)
                assert len(records) == count
                p.begin_transaction()
                for m in records:
                    p.produce("out", value=m.value().upper(), partition=0)
                position = [CTP("in", 0, records[-1].offset() + 1)]
                p.send_offsets_to_transaction(position, c.consumer_group_metadata(), TIMEOUT_S)
                (p.commit_transaction if commit else p.abort_transaction)(TIMEOUT_S)
                assert s.broker.controller.transaction_coordinator.wait_completed(
                    "ctp-app", TIMEOUT_S
                )
            (committed,) = c.committed([CTP("in", 0)], TIMEOUT_S)
        finally:
            c.close()
        got = committed_values(s.bootstrap, "out", 1)
    assert committed.offset == 4  # the aborted transaction's offset (6) was dropped
    assert got == [(0, b"R0"), (0, b"R1"), (0, b"R2"), (0, b"R3")]
    batches = [b for b in log_batches(tmp_path, "__consumer_offsets", 0) if b.producer_id >= 0]
    pid = batches[0].producer_id
    assert [(b.producer_id, b.is_transactional, b.is_control) for b in batches] == [
        (pid, True, False),
        (pid, True, True),
        (pid, True, False),
        (pid, True, True),
    ]
    assert control_batches(tmp_path, "__consumer_offsets", 0) == [(pid, 0, True), (pid, 0, False)]
