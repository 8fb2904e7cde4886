"""AlterConfigs and IncrementalAlterConfigs on a real server: the operations, Kafka 3.9's
errors word for word (asked of the real broker with the same confluent-kafka calls), the
overrides persisted in the log dir and kept across a restart, and the new configs taking effect
on the topic's open logs (max.message.bytes, retention.ms, cleanup.policy)."""

from __future__ import annotations

import json
import time

import confluent_kafka
import pytest
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
from kio.schema.alter_configs.v2 import request as req2
from kio.schema.alter_configs.v2 import response as resp2
from kio.schema.incremental_alter_configs.v1 import request as ireq1
from kio.schema.incremental_alter_configs.v1 import response as iresp1
from kio.static.primitive import i8

from broker_embedded.broker import Broker
from broker_embedded.common.producer_record import ProducerRecord
from broker_embedded.errors import RecordTooLargeError, RecordValidationError
from broker_embedded.server.handlers.alter_configs import java_double
from broker_embedded.storage.topic_partition import TopicPartition
from tests.broker_embedded.server._net import RawClient
from tests.broker_embedded.server._serve import decode_response, served
from tests.broker_embedded.server.test_admin_api import TIMEOUT_S, admin

SET, DELETE, APPEND, SUBTRACT = (
    AlterConfigOpType.SET,
    AlterConfigOpType.DELETE,
    AlterConfigOpType.APPEND,
    AlterConfigOpType.SUBTRACT,
)
INVALID_CONFIG, INVALID_REQUEST = 40, 42


def incremental(
    bootstrap: str, topic: str, *ops: tuple[str, str | None, object], validate_only: bool = False
) -> str:
    """confluent-kafka's incremental_alter_configs of one topic: "ok" or the broker's error."""
    entries = [ConfigEntry(n, v, incremental_operation=op) for n, v, op in ops]
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries)
    client = admin(bootstrap)  # held until the answer (a dropped client fails its futures)
    (future,) = client.incremental_alter_configs([resource], validate_only=validate_only).values()
    try:
        future.result(TIMEOUT_S)
    except confluent_kafka.KafkaException as e:
        return e.args[0].str()
    return "ok"


def overrides_on_disk(s) -> dict[str, str]:
    return json.loads((s.log_dir / "kafkalog-topics.json").read_text())["topics"]["t"]["config"]


# (config, value, Kafka 3.9's answer): asked of the real broker with the same calls
KAFKA_ANSWERS = [
    (
        "retention.ms",
        "abc",
        "Invalid value abc for configuration retention.ms: Not a number of type LONG",
    ),
    (
        "retention.ms",
        "-5",
        "Invalid value -5 for configuration retention.ms: Value must be at least -1",
    ),
    (
        "segment.bytes",
        "99999999999999999999",
        "Invalid value 99999999999999999999 for "
        "configuration segment.bytes: Not a number of "
        "type INT",
    ),
    (
        "max.message.bytes",
        "1.5",
        "Invalid value 1.5 for configuration max.message.bytes: Not a number of type INT",
    ),
    (
        "min.cleanable.dirty.ratio",
        "-5",
        "Invalid value -5.0 for configuration min.cleanable.dirty.ratio: Value must be at least 0",
    ),
    (
        "min.cleanable.dirty.ratio",
        "99999999999999999999",
        "Invalid value 1.0E20 for configuration min.cleanable.dirty.ratio: Value must be no more "
        "than 1",
    ),
    (
        "cleanup.policy",
        "bogus",
        "Invalid value bogus for configuration cleanup.policy: String "
        "must be one of: compact, delete",
    ),
    (
        "compression.type",
        "x",
        "Invalid value x for configuration compression.type: String must "
        "be one of: uncompressed, zstd, lz4, snappy, gzip, producer",
    ),
    (
        "message.timestamp.type",
        "",
        "Invalid value  for configuration message.timestamp.type: "
        "String must be one of: CreateTime, LogAppendTime",
    ),
    (
        "unclean.leader.election.enable",
        "1",
        "Invalid value 1 for configuration "
        "unclean.leader.election.enable: Expected value to "
        "be either true or false",
    ),
    ("foo.bar", "1", "Unknown topic config name: foo.bar"),
    ("retention.bytes", "-5", "ok"),
    ("cleanup.policy", "", "ok"),
]


def test_errors_are_kafkas_and_validate_only_changes_nothing(tmp_path):
    with served(tmp_path) as s:
        s.broker.create_topic("t", config={"retention.ms": "5000"})
        got = [
            (n, v, incremental(s.bootstrap, "t", (n, v, SET), validate_only=True))
            for n, v, _ in KAFKA_ANSWERS
        ]
        assert got == KAFKA_ANSWERS
        assert incremental(s.bootstrap, "t", ("retention.ms", "5", APPEND)) == (
            "Can't APPEND to key retention.ms because its type is not LIST."
        )
        assert incremental(s.bootstrap, "nosuch", ("retention.ms", "5", SET)) == (
            "The topic 'nosuch' does not exist."
        )
        assert incremental(s.bootstrap, "t", ("segment.jitter.ms", "5", SET)) == (
            "Topic config segment.jitter.ms is not supported by kafkalog"
        )
        # a bad value among good ones: nothing of the resource changes
        assert incremental(
            s.bootstrap, "t", ("retention.ms", "7", SET), ("flush.ms", "x", SET)
        ).startswith("Invalid value x")
        assert s.broker.describe_topic("t").config == {"retention.ms": "5000"}
        assert overrides_on_disk(s) == {"retention.ms": "5000"}


def test_incremental_operations_persist_and_survive_a_restart(tmp_path):
    with served(tmp_path) as s:
        s.broker.create_topic("t", config={"retention.ms": "5000", "flush.ms": "10"})
        ops = [
            ("retention.ms", "60000", SET),
            ("flush.ms", None, DELETE),
            ("no.such", None, DELETE),
            ("cleanup.policy", "compact", APPEND),
        ]
        assert incremental(s.bootstrap, "t", *ops) == "ok"
        want = {"retention.ms": "60000", "cleanup.policy": "delete,compact"}
        assert dict(s.broker.describe_topic("t").config) == want
        assert overrides_on_disk(s) == dict(sorted(want.items()))
        assert incremental(s.bootstrap, "t", ("cleanup.policy", "delete", SUBTRACT)) == "ok"
        assert s.broker.topic_config("t")["cleanup.policy"] == "compact"
        log = s.broker.log_manager.get_log(TopicPartition("t", 0))
        assert log is not None and log.config.compact and not log.config.delete
    with Broker(tmp_path) as reopened:
        config = reopened.topic_config("t")
        assert (config["cleanup.policy"], config["retention.ms"]) == ("compact", "60000")


def test_alter_configs_replaces_every_override_and_checks_its_shape(tmp_path):
    with served(tmp_path) as s:
        s.broker.create_topic("t", config={"retention.ms": "5000", "flush.ms": "10"})
        resource = req2.AlterConfigsResource(
            resource_type=i8(2),
            resource_name="t",
            configs=(req2.AlterableConfig(name="segment.ms", value="3600000"),),
        )
        twice = req2.AlterConfigsResource(
            resource_type=i8(2),
            resource_name="t",
            configs=(
                req2.AlterableConfig(name="segment.ms", value="1"),
                req2.AlterableConfig(name="segment.ms", value="2"),
            ),
        )
        broker = req2.AlterConfigsResource(
            resource_type=i8(4),
            resource_name="0",
            configs=(req2.AlterableConfig(name="num.io.threads", value="4"),),
        )
        with RawClient(s.server) as c:

            def call(*resources, validate_only=False):
                message = req2.AlterConfigsRequest(resources=resources, validate_only=validate_only)
                answer = decode_response(resp2.AlterConfigsResponse, c.call(message), True)
                return [(r.resource_name, r.error_code, r.error_message) for r in answer.responses]

            assert call(resource) == [("t", 0, None)]
            assert dict(s.broker.describe_topic("t").config) == {"segment.ms": "3600000"}
            assert call(twice) == [("t", INVALID_REQUEST, "Error due to duplicate config keys")]
            assert (
                call(resource, resource)
                == [("t", INVALID_REQUEST, "Each resource must appear at most once.")] * 2
            )
            assert call(broker) == [
                (
                    "0",
                    INVALID_REQUEST,
                    "kafkalog's broker configs are "
                    "static (its config file): cannot update num.io.threads "
                    "dynamically",
                )
            ]
            null = ireq1.IncrementalAlterConfigsRequest(
                validate_only=False,
                resources=(
                    ireq1.AlterConfigsResource(
                        resource_type=i8(2),
                        resource_name="t",
                        configs=(
                            ireq1.AlterableConfig(
                                name="retention.ms", config_operation=i8(0), value=None
                            ),
                        ),
                    ),
                ),
            )
            answer = decode_response(iresp1.IncrementalAlterConfigsResponse, c.call(null), True)
            assert [(r.error_code, r.error_message) for r in answer.responses] == [
                (INVALID_REQUEST, "Null value not supported for : retention.ms")
            ]


def test_new_configs_take_effect_on_the_open_logs(tmp_path):
    with served(tmp_path) as s:
        s.broker.create_topic("t", config={"segment.bytes": "1024"})
        old = int(time.time() * 1000) - 2 * 3_600_000  # two hours ago: kept by the default
        for i in range(8):
            s.broker.produce("t", 0, [ProducerRecord(b"v" * 300, b"k%d" % i, timestamp=old)])
        log = s.broker.log_manager.get_log(TopicPartition("t", 0))
        assert log is not None and s.broker.log_manager.cleanup_logs() == 0
        big = [ProducerRecord(b"x" * 600, b"k")]
        assert (
            incremental(
                s.bootstrap,
                "t",
                ("max.message.bytes", "500", SET),
                ("retention.ms", "3600000", SET),
            )
            == "ok"
        )
        with pytest.raises(RecordTooLargeError, match="exceeds max.message.bytes 500"):
            s.broker.produce("t", 0, big)
        assert s.broker.log_manager.cleanup_logs() > 0  # older than the hour now
        assert log.log_start_offset > 0
        assert incremental(s.bootstrap, "t", ("cleanup.policy", "compact", SET)) == "ok"
        with pytest.raises(RecordValidationError):
            s.broker.produce("t", 0, [ProducerRecord(b"keyless")])


def test_java_double_prints_as_java():
    assert [java_double(x) for x in (-5.0, 1.5, 1e20, 0.0, 1.25e-5, 12345678.0)] == [
        "-5.0",
        "1.5",
        "1.0E20",
        "0.0",
        "1.25E-5",
        "1.2345678E7",
    ]
