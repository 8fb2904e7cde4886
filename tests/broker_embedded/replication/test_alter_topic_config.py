"""A topic's config altered in a cluster: every live replica's log takes it at once, the
controller's state file keeps it, and a broker stopped meanwhile gets it when it restarts."""

from __future__ import annotations

import json

import pytest

from broker_embedded.storage.log_config import InvalidConfigError
from broker_embedded.storage.topic_partition import TopicPartition

TP = TopicPartition("t", 0)


def test_replicas_take_an_altered_config_and_a_restarted_broker_too(make_cluster):
    cluster = make_cluster(3)
    cluster.create_topic("t", 1, 3, {"retention.ms": "5000"})
    cluster.stop_broker(2)
    cluster.controller.alter_topic_config("t", {"max.message.bytes": "500"})
    for b in (0, 1):
        log = cluster.brokers[b].log_manager.get_log(TP)
        assert log is not None
        assert (log.config.max_message_bytes, log.config.retention_ms) == (500, 604800000)
    stored = json.loads((cluster.base_dir / "controller.json").read_text())
    assert stored["topics"]["t"]["config"] == {"max.message.bytes": "500"}
    restarted = cluster.restart_broker(2)
    log = restarted.log_manager.get_log(TP)
    assert log is not None and log.config.max_message_bytes == 500
    with pytest.raises(InvalidConfigError, match="max.message.bytes"):
        cluster.controller.alter_topic_config("t", {"max.message.bytes": "x"})
    cluster.controller.alter_topic_config("t", {"retention.ms": "1"}, validate_only=True)
    assert cluster.describe_topic("t").config == {"max.message.bytes": "500"}
