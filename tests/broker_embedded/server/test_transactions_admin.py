"""The operators' transaction APIs against a real server: ListTransactions (with its state,
producer id and duration filters), DescribeTransactions and DescribeProducers, asked by
kafka-python's admin client (an independent implementation of KIP-664's requests) while
confluent-kafka producers hold one transaction open and have committed another."""

from __future__ import annotations

import pytest

from broker_embedded.storage.topic_partition import TopicPartition
from tests.broker_embedded.server._serve import log_batches, served

confluent_kafka = pytest.importorskip("confluent_kafka")
kafka_admin = pytest.importorskip("kafka.admin")
from confluent_kafka import Producer  # noqa: E402
from kafka import TopicPartition as KTP  # noqa: E402
from kafka.admin._transactions import (  # noqa: E402
    ProducerState,
    TransactionListing,
    TransactionState,
)
from kafka.errors import TransactionalIdNotFoundError, UnknownTopicOrPartitionError  # noqa: E402

TIMEOUT_S = 20.0


def producer(bootstrap: str, transactional_id: str) -> Producer:
    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": transactional_id,
            "socket.timeout.ms": 10_000,
            "message.timeout.ms": 15_000,
        }
    )


def batch_times(log_dir, topic: str, partition: int) -> dict[int, int]:
    """The max timestamp of each producer's last batch (a marker's too, as Kafka's producer
    state takes it), by kafka-python."""
    return {
        b.producer_id: max(r.timestamp for r in b.records)
        for b in log_batches(log_dir, topic, partition)
    }


def test_list_describe_transactions_and_producers(tmp_path):
    with served(tmp_path, transaction_state_log_num_partitions=3) as s:
        s.broker.create_topic("tx", 2)
        s.broker.produce("tx", 0, [b"plain"])  # no producer id: no producer state
        done = producer(s.bootstrap, "app-done")
        done.init_transactions(TIMEOUT_S)
        done.begin_transaction()
        done.produce("tx", value=b"d", partition=1)
        done.commit_transaction(TIMEOUT_S)
        opened = producer(s.bootstrap, "app-open")
        opened.init_transactions(TIMEOUT_S)
        opened.begin_transaction()
        opened.produce("tx", value=b"o1", partition=0)
        opened.produce("tx", value=b"o2", partition=0)
        assert opened.flush(TIMEOUT_S) == 0
        opened.produce("tx", value=b"o3", partition=1)
        assert opened.flush(TIMEOUT_S) == 0
        coordinator = s.broker.controller.transaction_coordinator
        assert coordinator.wait_completed("app-done", TIMEOUT_S)
        o, d = coordinator.state("app-open"), coordinator.state("app-done")
        admin = kafka_admin.KafkaAdminClient(
            bootstrap_servers=s.bootstrap, request_timeout_ms=10_000
        )
        try:
            listed = admin.list_transactions()
            ongoing = admin.list_transactions(state_filters=["Ongoing"])
            by_pid = admin.list_transactions(producer_id_filters=[d.producer_id])
            old = admin.list_transactions(duration_filter_ms=600_000)
            described = admin.describe_transactions(["app-open", "app-done"])
            with pytest.raises(TransactionalIdNotFoundError):
                admin.describe_transactions(["nobody"])
            producers = admin.describe_producers([KTP("tx", 0), KTP("tx", 1)])
            with pytest.raises(UnknownTopicOrPartitionError):
                admin.describe_producers([KTP("missing", 0)], broker_id=0)
        finally:
            admin.close()
        t0, t1 = batch_times(tmp_path, "tx", 0), batch_times(tmp_path, "tx", 1)
        opened.abort_transaction(TIMEOUT_S)
    both = [
        TransactionListing("app-done", d.producer_id, TransactionState.COMPLETE_COMMIT),
        TransactionListing("app-open", o.producer_id, TransactionState.ONGOING),
    ]
    assert listed == {0: both}
    assert ongoing == {0: both[1:]}
    assert by_pid == {0: both[:1]}
    assert old == {0: []}  # both started less than 10 minutes ago
    desc_open, desc_done = described["app-open"], described["app-done"]
    assert (desc_open.state, desc_open.producer_id, desc_open.producer_epoch) == (
        TransactionState.ONGOING,
        o.producer_id,
        0,
    )
    assert (desc_open.transaction_timeout_ms, desc_open.transaction_start_time_ms) == (
        60_000,
        o.start_ms,
    )
    assert desc_open.topic_partitions == {KTP("tx", 0), KTP("tx", 1)}
    assert o.partitions == [TopicPartition("tx", 0), TopicPartition("tx", 1)]
    assert (desc_done.state, desc_done.producer_id, desc_done.topic_partitions) == (
        TransactionState.COMPLETE_COMMIT,
        d.producer_id,
        set(),
    )
    assert desc_done.transaction_start_time_ms == d.start_ms > 0  # kept after the commit
    # tx-0: offset 0 "plain", 1-2 the open transaction; tx-1: 0 "d", 1 its COMMIT, 2 "o3"
    assert producers[KTP("tx", 0)].active_producers == [
        ProducerState(o.producer_id, 0, 1, t0[o.producer_id], -1, 1),
    ]
    assert producers[KTP("tx", 1)].active_producers == sorted(
        [
            ProducerState(d.producer_id, 0, 0, t1[d.producer_id], 0, -1),
            ProducerState(o.producer_id, 0, 0, t1[o.producer_id], -1, 2),
        ]
    )


def test_filters_and_errors_kafka_python_does_not_show(tmp_path):
    """Raw kio requests: ListTransactions names the state filters it does not know (and
    lists nothing before any transaction), DescribeTransactions of an empty id is
    INVALID_REQUEST, DescribeProducers of a partition without producers lists none."""
    from kio.schema.describe_producers.v0.request import DescribeProducersRequest, TopicRequest
    from kio.schema.describe_producers.v0.response import DescribeProducersResponse
    from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest
    from kio.schema.describe_transactions.v0.response import DescribeTransactionsResponse
    from kio.schema.list_transactions.v1.request import ListTransactionsRequest
    from kio.schema.list_transactions.v1.response import ListTransactionsResponse

    from tests.broker_embedded.server._net import RawClient
    from tests.broker_embedded.server._serve import decode_response

    with served(tmp_path) as s, RawClient(s.server) as raw:
        s.broker.create_topic("tx", 1)
        s.broker.produce("tx", 0, [b"plain"])
        request = ListTransactionsRequest(state_filters=("Bogus", "Ongoing"))
        listed = decode_response(ListTransactionsResponse, raw.call(request), True)
        request = DescribeTransactionsRequest(transactional_ids=("",))
        described = decode_response(DescribeTransactionsResponse, raw.call(request), True)
        topics = (TopicRequest(name="tx", partition_indexes=(0,)),)
        request = DescribeProducersRequest(topics=topics)
        producers = decode_response(DescribeProducersResponse, raw.call(request), True)
    assert (listed.error_code, listed.unknown_state_filters, listed.transaction_states) == (
        0,
        ("Bogus",),
        (),
    )
    (state,) = described.transaction_states
    assert (state.error_code, state.transactional_id, state.transaction_state) == (42, "", "")
    assert (state.producer_id, state.transaction_start_time.timestamp()) == (0, 0)
    (topic,) = producers.topics
    (partition,) = topic.partitions
    assert (topic.name, partition.partition_index, partition.error_code) == ("tx", 0, 0)
    assert partition.active_producers == ()
