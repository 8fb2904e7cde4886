"""Topic auto-creation (``auto.create.topics.enable``, ``num.partitions``,
``default.replication.factor``) through Metadata, as Kafka's ``AutoTopicCreationManager``:
confluent-kafka producing to a topic nobody created, and raw Metadata requests for the answers
(created topic, illegal name, internal topic, creation disabled by the request or the broker)."""

from __future__ import annotations

import uuid

import confluent_kafka
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12 import request as mreq
from kio.schema.metadata.v12 import response as mresp
from kio.schema.produce.v9 import response as resp9

from tests.broker_embedded.server._net import RawClient
from tests.broker_embedded.server._serve import decode_response, log_records, served
from tests.broker_embedded.server.test_produce_api import batch, produce9

TIMEOUT_S = 10


def produce_one(bootstrap: str, topic: str, value: bytes, **conf) -> tuple:
    """One record through confluent-kafka: its delivery report (error, partition, offset)."""
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 0, "message.timeout.ms": 3000, **conf}
    )
    reports: list = []
    producer.produce(
        topic, value, on_delivery=lambda e, m: reports.append((e, m.partition(), m.offset()))
    )
    assert producer.flush(TIMEOUT_S) == 0
    return reports[0]


def metadata12(client: RawClient, names: list[str], allow: bool = True) -> dict:
    message = mreq.MetadataRequest(
        topics=tuple(mreq.MetadataRequestTopic(topic_id=uuid.UUID(int=0), name=n) for n in names),
        allow_auto_topic_creation=allow,
        include_topic_authorized_operations=False,
    )
    response = decode_response(mresp.MetadataResponse, client.call(message), True)
    return {t.name: t for t in response.topics}


def test_confluent_producer_creates_the_topic(tmp_path):
    with served(tmp_path) as s:
        error, partition, offset = produce_one(s.bootstrap, "fresh", b"v0")
        assert (error, partition, offset) == (None, 0, 0)
        meta = s.broker.describe_topic("fresh")
        assert (len(meta.partitions), meta.partitions[0].replicas) == (1, (0,))
        assert s.broker.topic_config("fresh") == s.broker.config.topic_defaults.to_properties()
    assert [(o, v) for o, _, v, _ in log_records(tmp_path, "fresh", 0)] == [(0, b"v0")]


def test_confluent_producer_fails_when_disabled(tmp_path):
    with served(tmp_path, auto_create_topics_enable=False) as s:
        error, _, _ = produce_one(
            s.bootstrap, "absent", b"v", **{"topic.metadata.propagation.max.ms": 500}
        )
        assert error.code() in (
            confluent_kafka.KafkaError.UNKNOWN_TOPIC_OR_PART,
            confluent_kafka.KafkaError._UNKNOWN_TOPIC,
        )
        assert "absent" not in s.broker.list_topics()


def test_metadata_answers(tmp_path):
    with served(tmp_path, num_partitions=3) as s:
        with RawClient(s.server) as c:
            no = metadata12(c, ["quiet"], allow=False)["quiet"]
            topics = metadata12(c, ["made", "bad name!", "__consumer_offsets", "a" * 250])
            again = metadata12(c, ["made"], allow=False)["made"]
        assert no.error_code == ErrorCode.unknown_topic_or_partition
        made = topics["made"]
        assert made.error_code == ErrorCode.none and made.topic_id != uuid.UUID(int=0)
        assert [
            (p.partition_index, p.leader_id, p.leader_epoch, p.replica_nodes, p.isr_nodes)
            for p in made.partitions
        ] == [(i, 0, 0, (0,), (0,)) for i in range(3)]
        assert again == made  # what the next Metadata says: the topic as it was created
        assert topics["bad name!"].error_code == ErrorCode.invalid_topic_exception
        assert topics["a" * 250].error_code == ErrorCode.invalid_topic_exception
        internal = topics["__consumer_offsets"]
        expected = (ErrorCode.unknown_topic_or_partition, True, ())
        assert (internal.error_code, internal.is_internal, internal.partitions) == expected
        assert s.broker.list_topics() == ["made"]


def test_produce_does_not_create(tmp_path):
    with served(tmp_path) as s:
        with RawClient(s.server) as c:
            p = produce9(c, "never", batch())
        assert isinstance(p, resp9.PartitionProduceResponse)
        assert (p.error_code, p.base_offset) == (ErrorCode.unknown_topic_or_partition, -1)
        assert s.broker.list_topics() == []


def test_replication_factor_above_the_live_brokers(tmp_path):
    with served(tmp_path, default_replication_factor=2) as s:
        with RawClient(s.server) as c:
            t = metadata12(c, ["two"])["two"]
        assert t.error_code == ErrorCode.invalid_replication_factor
        assert s.broker.list_topics() == []


def test_create_topics_minus_one_takes_the_broker_defaults(tmp_path):
    from confluent_kafka.admin import AdminClient, NewTopic

    with served(tmp_path, num_partitions=3) as s:
        client = AdminClient({"bootstrap.servers": s.bootstrap})
        client.create_topics([NewTopic("d")])["d"].result(TIMEOUT_S)  # -1, -1
        meta = s.broker.describe_topic("d")
    assert (len(meta.partitions), meta.replication_factor) == (3, 1)
