"""Metadata, admin APIs, ListOffsets and the group-offset APIs over the wire, with
confluent-kafka's AdminClient and Consumer (librdkafka) against a real Broker behind a real
BrokerServer on 127.0.0.1."""

from __future__ import annotations

import confluent_kafka
from confluent_kafka import TopicPartition as CTP
from confluent_kafka.admin import (
    AdminClient,
    ConfigResource,
    NewPartitions,
    NewTopic,
    ResourceType,
)

from broker_embedded.common.producer_record import ProducerRecord
from tests.broker_embedded.server._serve import log_batches, served

TIMEOUT_S = 10


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def results(futures: dict) -> dict:
    out = {}
    for key, future in futures.items():
        try:
            out[key] = future.result(TIMEOUT_S)
        except confluent_kafka.KafkaException as e:
            out[key] = e.args[0].code()
    return out


def test_metadata(tmp_path):
    with served(tmp_path) as s:
        s.broker.create_topic("m", 3)
        s.broker.create_topic("__consumer_offsets", 1)
        md = admin(s.bootstrap).list_topics(timeout=TIMEOUT_S)
        port = s.server.endpoints[0].port
        topic_id = s.broker.describe_topic("m").topic_id
        cluster_id = s.broker.log_manager.log_dir.joinpath("meta.properties").read_text()
    assert [(b.id, b.host, b.port) for b in md.brokers.values()] == [(0, "127.0.0.1", port)]
    assert md.controller_id == 0
    assert f"cluster.id={md.cluster_id}\n" in cluster_id
    assert sorted(md.topics) == ["__consumer_offsets", "m"]
    parts = md.topics["m"].partitions
    assert [(p.id, p.leader, p.replicas, p.isrs) for p in parts.values()] == [
        (i, 0, [0], [0]) for i in range(3)
    ]
    assert topic_id is not None


def test_metadata_unknown_topic(tmp_path):
    # librdkafka's admin handle asks Metadata to auto-create: off here (test_auto_create_topics)
    with served(tmp_path, auto_create_topics_enable=False) as s:
        md = admin(s.bootstrap).list_topics("absent", timeout=TIMEOUT_S)
    assert md.topics["absent"].error.code() == confluent_kafka.KafkaError.UNKNOWN_TOPIC_OR_PART


def test_create_and_delete_topics(tmp_path):
    with served(tmp_path) as s:
        a = admin(s.bootstrap)
        created = results(
            a.create_topics(
                [
                    NewTopic("c1", 2, 1, config={"retention.ms": "1000"}),
                    NewTopic("c2"),  # -1: the broker's defaults
                    NewTopic("bad name!", 1, 1),
                    NewTopic("c3", 1, 2),
                    NewTopic("c4", 1, 1, config={"no.such.config": "1"}),
                ],
                request_timeout=TIMEOUT_S,
            )
        )
        again = results(a.create_topics([NewTopic("c1", 2, 1)], request_timeout=TIMEOUT_S))
        checked = results(a.create_topics([NewTopic("v", 4, 1)], validate_only=True))
        assert s.broker.list_topics() == ["c1", "c2"]
        assert len(s.broker.describe_topic("c2").partitions) == 1
        assert s.broker.topic_config("c1")["retention.ms"] == "1000"
        deleted = results(a.delete_topics(["c2", "nope"], request_timeout=TIMEOUT_S))
        remaining = s.broker.list_topics()
    E = confluent_kafka.KafkaError
    assert created == {
        "c1": None,
        "c2": None,
        "bad name!": E.TOPIC_EXCEPTION,
        "c3": E.INVALID_REPLICATION_FACTOR,
        "c4": E.INVALID_CONFIG,
    }
    assert again == {"c1": E.TOPIC_ALREADY_EXISTS}
    assert checked == {"v": None}
    assert deleted == {"c2": None, "nope": E.UNKNOWN_TOPIC_OR_PART}
    assert remaining == ["c1"]


def test_create_partitions(tmp_path):
    with served(tmp_path) as s:
        s.broker.create_topic("p", 2)
        a = admin(s.bootstrap)
        grown = results(a.create_partitions([NewPartitions("p", 5)], request_timeout=TIMEOUT_S))
        same = results(a.create_partitions([NewPartitions("p", 5)], request_timeout=TIMEOUT_S))
        unknown = results(a.create_partitions([NewPartitions("q", 2)], request_timeout=TIMEOUT_S))
        count = len(s.broker.describe_topic("p").partitions)
    E = confluent_kafka.KafkaError
    assert (grown, same, unknown) == (
        {"p": None},
        {"p": E.INVALID_PARTITIONS},
        {"q": E.UNKNOWN_TOPIC_OR_PART},
    )
    assert count == 5


def test_describe_configs(tmp_path):
    with served(tmp_path) as s:
        s.broker.create_topic("d", config={"cleanup.policy": "compact"})
        a = admin(s.bootstrap)
        topic = ConfigResource(ResourceType.TOPIC, "d")
        broker = ConfigResource(ResourceType.BROKER, "0")
        got = results(a.describe_configs([topic, broker], request_timeout=TIMEOUT_S))
        expected = s.broker.topic_config("d")
        missing = results(a.describe_configs([ConfigResource(ResourceType.TOPIC, "nope")]))
    topic_configs = got[topic]
    assert {k: v.value for k, v in topic_configs.items()} == expected
    policy = topic_configs["cleanup.policy"]
    assert (policy.value, policy.source, policy.is_read_only) == ("compact", 1, False)
    assert topic_configs["retention.ms"].source == 5  # DEFAULT_CONFIG
    assert got[broker]["num.io.threads"].value == "2"
    assert got[broker]["num.io.threads"].source == 4  # STATIC_BROKER_CONFIG (set in the test)
    assert list(missing.values()) == [confluent_kafka.KafkaError.UNKNOWN_TOPIC_OR_PART]


def test_delete_records_and_list_offsets(tmp_path):
    times = [1_000, 2_000, 5_000, 3_000, 4_000]
    with served(tmp_path) as s:
        s.broker.create_topic("o")
        for i, t in enumerate(times):
            s.broker.produce("o", 0, [ProducerRecord(value=b"%d" % i, timestamp=t)])
        consumer = confluent_kafka.Consumer({"bootstrap.servers": s.bootstrap, "group.id": "g"})
        try:
            marks = consumer.get_watermark_offsets(CTP("o", 0), timeout=TIMEOUT_S)
            by_time = [
                consumer.offsets_for_times([CTP("o", 0, t)], timeout=TIMEOUT_S)[0].offset
                for t in (0, 2_000, 2_500, 5_000, 6_000)
            ]
            a = admin(s.bootstrap)  # kept: a collected client cancels its futures
            deleted = a.delete_records([CTP("o", 0, 2)])
            low = results(deleted)[CTP("o", 0, 2)]
            after = consumer.get_watermark_offsets(CTP("o", 0), timeout=TIMEOUT_S)
        finally:
            consumer.close()
    assert marks == (0, 5)
    assert by_time == [0, 1, 2, 2, -1]
    assert low.low_watermark == 2
    assert after == (2, 5)


def test_max_timestamp_over_the_wire(tmp_path):
    from kio.schema.list_offsets.v7 import request as req
    from kio.schema.list_offsets.v7 import response as resp

    from tests.broker_embedded.server._net import RawClient
    from tests.broker_embedded.server._serve import decode_response

    with served(tmp_path) as s:
        s.broker.create_topic("mx")
        for i, t in enumerate([1_000, 9_000, 3_000]):
            s.broker.produce("mx", 0, [ProducerRecord(value=b"%d" % i, timestamp=t)])
        wanted = tuple(
            req.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=t)
            for t in (-3, -2, -1, 3_000)
        )
        message = req.ListOffsetsRequest(
            replica_id=-1,
            isolation_level=0,
            topics=(req.ListOffsetsTopic(name="mx", partitions=wanted),),
        )
        with RawClient(s.server) as c:
            answer = decode_response(resp.ListOffsetsResponse, c.call(message), True)
    got = [(p.error_code, p.offset, p.timestamp) for p in answer.topics[0].partitions]
    assert got == [(0, 1, 9_000), (0, 0, -1), (0, 3, -1), (0, 1, 9_000)]


def test_describe_cluster(tmp_path):
    with served(tmp_path) as s:
        a = admin(s.bootstrap)  # kept: a collected client cancels its futures
        result = a.describe_cluster(request_timeout=TIMEOUT_S).result(TIMEOUT_S)
        port = s.server.endpoints[0].port
    assert [(n.id, n.host, n.port) for n in result.nodes] == [(0, "127.0.0.1", port)]
    assert result.controller.id == 0


def test_consumer_group_offsets_in_memory(tmp_path):
    with served(tmp_path) as s:
        s.broker.create_topic("g", 2)
        conf = {"bootstrap.servers": s.bootstrap, "group.id": "grp", "enable.auto.commit": False}
        consumer = confluent_kafka.Consumer(conf)
        try:
            before = consumer.committed([CTP("g", 0), CTP("g", 1)], timeout=TIMEOUT_S)
            consumer.commit(offsets=[CTP("g", 0, 7)], asynchronous=False)
            after = consumer.committed([CTP("g", 0), CTP("g", 1)], timeout=TIMEOUT_S)
        finally:
            consumer.close()
    assert [p.offset for p in before] == [confluent_kafka.OFFSET_INVALID] * 2
    assert [p.offset for p in after] == [7, confluent_kafka.OFFSET_INVALID]


def test_init_producer_id_hands_out_new_ids(tmp_path):
    """Two idempotent producers: the broker gives each its own producer id (0, then 1)."""
    with served(tmp_path) as s:
        s.broker.create_topic("ip")
        for _ in range(2):
            conf = {"bootstrap.servers": s.bootstrap, "enable.idempotence": True}
            p = confluent_kafka.Producer(conf)
            p.produce("ip", b"x", partition=0)
            assert p.flush(TIMEOUT_S) == 0
    assert {b.producer_id for b in log_batches(tmp_path, "ip", 0)} == {0, 1}
