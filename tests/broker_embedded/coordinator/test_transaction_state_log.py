"""The transaction coordinator's state in ``__transaction_state``: each transition Kafka writes
is a record in Kafka's schema on the id's partition, before it takes effect; a failed write
leaves the state as it was; a broker reopened on the log dir loads it back (a prepared commit
is completed, an open transaction is fenced by the next instance or aborted at its timeout,
producer ids and epochs continue). Real brokers on tmp log dirs; the records are decoded with
transaction_log_record.py (checked against Kafka 3.7's bytes) and the markers by kafka-python."""

from __future__ import annotations

import dataclasses
import time

import pytest

from broker_embedded.broker import Broker
from broker_embedded.broker_config import BrokerConfig
from broker_embedded.client.transactional_producer import TransactionalProducer
from broker_embedded.coordinator.coordinator_partition import (
    TRANSACTION_STATE_TOPIC,
    partition_for,
)
from broker_embedded.coordinator.transaction_coordinator import TransactionCoordinator, TxnStatus
from broker_embedded.coordinator.transaction_log_record import (
    TransactionLogValue,
    TransactionStatus,
    TxnPartitions,
    decode_key,
    decode_value,
)
from broker_embedded.coordinator.transaction_state_manager import InMemoryTransactionStore
from broker_embedded.errors import (
    ConcurrentTransactionsError,
    CoordinatorNotAvailableError,
    ProducerFencedError,
)
from broker_embedded.storage.topic_partition import TopicPartition
from tests.broker_embedded._broker_util import log_bytes, peer_batches

PARTITIONS = 3
TIMEOUT_S = 10.0
COMMIT_KEY, ABORT_KEY = b"\x00\x00\x00\x01", b"\x00\x00\x00\x00"


def config() -> BrokerConfig:
    return dataclasses.replace(
        BrokerConfig(), transaction_state_log_num_partitions=PARTITIONS, log_cleaner_threads=0
    )


def open_broker(log_dir) -> Broker:
    broker = Broker(log_dir, create=True, config=config())
    broker.controller.use_transaction_log()  # what serving the wire API does
    assert broker.controller.transaction_log_partitions(wait_s=30.0) == PARTITIONS
    return broker


def state_records(broker: Broker, transactional_id: str) -> list[tuple[str, TransactionLogValue]]:
    """(transactional id, value) of every record of the id's partition, in offset order."""
    tp = TopicPartition(TRANSACTION_STATE_TOPIC, partition_for(transactional_id, PARTITIONS))
    out = []
    for batch in broker.log_manager.get_log(tp).batches():
        assert batch.producer_id == -1 and not batch.is_transactional
        for r in batch.records():
            out.append((decode_key(r.key).transactional_id, decode_value(r.value)))
    return out


def markers(broker: Broker, topic: str, partition: int = 0) -> list[tuple[int, int, bool]]:
    """(producer id, epoch, commit?) of each control batch, by kafka-python."""
    return [
        (b.producer_id, b.producer_epoch, b.records[0].key == COMMIT_KEY)
        for b in peer_batches(log_bytes(broker, topic, partition))
        if b.is_control
    ]


def wait_for(predicate, what: str) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not predicate():
        assert time.monotonic() < deadline, f"{what} within {TIMEOUT_S} s"
        time.sleep(0.05)


def test_each_transition_is_written_in_kafkas_schema(log_dir):
    with open_broker(log_dir) as broker:
        broker.create_topic("tx", 2)
        p = broker.transactional_producer("app")
        p.begin()
        p.send("tx", 1, [b"a"])
        p.send("tx", 0, [b"b"])
        p.send("tx", 1, [b"c"])  # already in the transaction: nothing written
        p.commit()
        p.begin()
        p.send("tx", 0, [b"d"])
        p.abort()
        pid = p.producer_id
        # the abort is answered once PrepareAbort is written; CompleteAbort follows the markers
        coordinator = broker.controller.transaction_coordinator
        assert coordinator.wait_completed("app", TIMEOUT_S)
        got = state_records(broker, "app")
        assert broker.controller.describe(TRANSACTION_STATE_TOPIC).config == {
            "cleanup.policy": "compact",
            "compression.type": "uncompressed",
            "unclean.leader.election.enable": "false",
            "segment.bytes": str(100 << 20),
            "min.insync.replicas": "1",
        }
    assert {tid for tid, _ in got} == {"app"}
    values = [v for _, v in got]
    tx = lambda *ps: (TxnPartitions("tx", ps),)  # noqa: E731
    S = TransactionStatus
    expected = [
        (S.EMPTY, None),
        (S.ONGOING, tx(1)),
        (S.ONGOING, tx(1, 0)),
        (S.PREPARE_COMMIT, tx(1, 0)),
        (S.COMPLETE_COMMIT, ()),
        (S.ONGOING, tx(0)),
        (S.PREPARE_ABORT, tx(0)),
        (S.COMPLETE_ABORT, ()),
    ]
    assert [(v.status, v.partitions) for v in values] == expected
    assert {
        (v.producer_id, v.producer_epoch, v.transaction_timeout_ms, v.version) for v in values
    } == {(pid, 0, 60_000, 0)}
    starts = [v.start_timestamp_ms for v in values]
    first, second = values[1].last_update_timestamp_ms, values[5].last_update_timestamp_ms
    # Kafka's txnStartTimestamp: -1 when Empty, set when Ongoing begins, kept until the next
    assert starts == [-1, first, first, first, first, second, second, second]
    updates = [v.last_update_timestamp_ms for v in values]
    assert updates == sorted(updates) and updates[0] > 0


def test_a_prepared_commit_is_completed_when_the_log_dir_reopens(log_dir):
    with open_broker(log_dir) as broker:
        broker.create_topic("tx", 1)
        p = broker.transactional_producer("app")
        p.begin()
        p.send("tx", 0, [b"kept"])
        # EndTxn answered (PrepareCommit written), then the process dies before the markers
        broker.controller.transaction_coordinator.end_txn("app", p.producer_id, 0, True)
        broker.crash()
    with Broker(log_dir, config=config()) as broker:  # loaded when the broker opens
        coordinator = broker.controller.transaction_coordinator
        assert coordinator.wait_completed("app", TIMEOUT_S)
        state = coordinator.state("app")
        assert (state.status, state.producer_epoch) == (TxnStatus.COMPLETE_COMMIT, 0)
        assert markers(broker, "tx") == [(p.producer_id, 0, True)]  # no orphan ABORT first
        last = state_records(broker, "app")[-1][1]
        assert (last.status, last.partitions) == (TransactionStatus.COMPLETE_COMMIT, ())


def test_an_open_transaction_is_fenced_by_the_next_instance_after_a_restart(log_dir):
    with open_broker(log_dir) as broker:
        broker.create_topic("tx", 1)
        p = broker.transactional_producer("app")
        p.begin()
        p.send("tx", 0, [b"lost"])
        pid = p.producer_id
        broker.crash()
    with open_broker(log_dir) as broker:
        coordinator = broker.controller.transaction_coordinator
        state = coordinator.state("app")
        assert (state.status, state.partitions) == (TxnStatus.ONGOING, [TopicPartition("tx", 0)])
        assert markers(broker, "tx") == []  # not an orphan: the coordinator knows it
        fresh = broker.transactional_producer("app")  # aborts it with the epoch bumped
        assert (fresh.producer_id, fresh.producer_epoch) == (pid, 2)
        assert markers(broker, "tx") == [(pid, 1, False)]
        other = broker.transactional_producer("other")
        assert other.producer_id > pid  # never a reused producer id
        with pytest.raises(ProducerFencedError):
            coordinator.add_partitions("app", pid, 0, [TopicPartition("tx", 0)])


def test_an_open_transaction_is_aborted_at_its_timeout_after_a_restart(log_dir):
    with open_broker(log_dir) as broker:
        broker.create_topic("tx", 1)
        p = TransactionalProducer(broker, "slow", transaction_timeout_ms=500)
        p.begin()
        p.send("tx", 0, [b"lost"])
        broker.crash()
    with Broker(log_dir, config=config()) as broker:
        coordinator = broker.controller.transaction_coordinator
        wait_for(
            lambda: coordinator.state("slow").status is TxnStatus.COMPLETE_ABORT,
            "the timed-out transaction aborted",
        )
        assert markers(broker, "tx") == [(p.producer_id, 1, False)]
        statuses = [v.status for _, v in state_records(broker, "slow")]
        assert statuses[-2:] == [TransactionStatus.PREPARE_ABORT, TransactionStatus.COMPLETE_ABORT]


def test_the_orphan_abort_still_serves_log_dirs_without_the_topic(log_dir):
    """The embedded producer's in-memory default: nothing in __transaction_state, the open
    transaction is aborted as an orphan when the log dir reopens."""
    with Broker(log_dir, create=True, config=config()) as broker:
        broker.create_topic("tx", 1)
        p = broker.transactional_producer("app")
        p.begin()
        p.send("tx", 0, [b"lost"])
        broker.crash()
    with Broker(log_dir, config=config()) as broker:
        assert TRANSACTION_STATE_TOPIC not in broker.list_topics()
        assert markers(broker, "tx") == [(p.producer_id, 0, False)]


class FailingStore(InMemoryTransactionStore):
    """The in-memory store, failing the appends while ``failing`` is set (as a log append
    fails without a leader)."""

    failing = False

    def append(self, transactional_id, value):
        if self.failing:
            raise CoordinatorNotAvailableError(f"{transactional_id}: no leader")
        super().append(transactional_id, value)


def test_a_failed_write_leaves_the_state_as_it_was():
    store = FailingStore()
    ids = iter(range(100))
    coordinator = TransactionCoordinator(lambda: next(ids), store=store)
    tp = TopicPartition("tx", 0)
    store.failing = True
    with pytest.raises(CoordinatorNotAvailableError):
        coordinator.init_producer_id("app")
    assert coordinator.state("app") is None  # not persisted: forgotten
    store.failing = False
    assert coordinator.init_producer_id("app") == (1, 0)
    store.failing = True
    with pytest.raises(CoordinatorNotAvailableError):
        coordinator.add_partitions("app", 1, 0, [tp])
    assert coordinator.state("app").status is TxnStatus.EMPTY
    store.failing = False
    coordinator.add_partitions("app", 1, 0, [tp])
    store.failing = True
    with pytest.raises(CoordinatorNotAvailableError):
        coordinator.end_txn("app", 1, 0, True)
    assert coordinator.state("app").status is TxnStatus.ONGOING
    store.failing = False
    completion = coordinator.end_txn("app", 1, 0, True)
    store.failing = True
    with pytest.raises(CoordinatorNotAvailableError):
        coordinator.complete(completion)
    assert coordinator.state("app").status is TxnStatus.PREPARE_COMMIT
    with pytest.raises(ConcurrentTransactionsError):
        coordinator.init_producer_id("app")
    store.failing = False
    coordinator.complete(completion)
    assert store.value("app").status is TransactionStatus.COMPLETE_COMMIT
    assert coordinator.state("app").status is TxnStatus.COMPLETE_COMMIT
