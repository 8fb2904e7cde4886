"""Kafka's internal topics, created by their coordinator on first use with Kafka's settings.

- ``__consumer_offsets``: ``offsets.topic.num.partitions`` (50) partitions,
  ``offsets.topic.replication.factor`` (3) replicas; cleanup.policy=compact,
  compression.type=producer, segment.bytes=``offsets.topic.segment.bytes``.
- ``__transaction_state``: ``transaction.state.log.num.partitions`` (50) partitions,
  ``transaction.state.log.replication.factor`` (3) replicas; cleanup.policy=compact,
  compression.type=uncompressed, min.insync.replicas=``transaction.state.log.min.isr`` (2),
  unclean.leader.election.enable=false, segment.bytes=``transaction.state.log.segment.bytes``.

One deliberate difference from Kafka: the replication factor is at most the number of live
brokers (and min.insync.replicas at most the replication factor), so a single ``kafkalog
serve`` serves groups and transactions with the default configuration. Kafka refuses to create
the topics with fewer live brokers than the factor, which is why its single-node quickstart
configuration lowers both keys to 1.

:func:`ensure_topic` creates a topic unless it exists (a creator that loses a race to another
finds it created) and returns its metadata. Thread safety: the controller serializes creation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from broker_embedded.broker_config import BrokerConfig
from broker_embedded.coordinator.coordinator_partition import (
    GROUP_METADATA_TOPIC,
    TRANSACTION_STATE_TOPIC,
)
from broker_embedded.errors import TopicAlreadyExistsError


@dataclass(frozen=True, slots=True)
class InternalTopic:
    """An internal topic's name and creation settings (replicas before the live-broker cap)."""

    name: str
    partitions: int
    replication_factor: int
    config: tuple[tuple[str, str], ...]
    min_insync_replicas: int = 1


def offsets_topic(config: BrokerConfig) -> InternalTopic:
    """``__consumer_offsets`` as ``config`` says."""
    return InternalTopic(
        GROUP_METADATA_TOPIC,
        config.offsets_topic_num_partitions,
        config.offsets_topic_replication_factor,
        (
            ("cleanup.policy", "compact"),
            ("compression.type", "producer"),
            ("segment.bytes", str(config.offsets_topic_segment_bytes)),
        ),
    )


def transaction_state_topic(config: BrokerConfig) -> InternalTopic:
    """``__transaction_state`` as ``config`` says."""
    return InternalTopic(
        TRANSACTION_STATE_TOPIC,
        config.transaction_state_log_num_partitions,
        config.transaction_state_log_replication_factor,
        (
            ("cleanup.policy", "compact"),
            ("compression.type", "uncompressed"),
            ("unclean.leader.election.enable", "false"),
            ("segment.bytes", str(config.transaction_state_log_segment_bytes)),
        ),
        config.transaction_state_log_min_isr,
    )


def ensure_topic(controller: Any, topic: InternalTopic, live_brokers: int) -> Any:
    """The topic's metadata, creating it first when it does not exist (replicas capped at
    ``live_brokers``; see the module docstring)."""
    if topic.name in controller.topics():
        return controller.describe(topic.name)
    factor = max(1, min(topic.replication_factor, live_brokers))
    config = dict(topic.config)
    if topic.min_insync_replicas > 1:
        config["min.insync.replicas"] = str(min(topic.min_insync_replicas, factor))
    try:
        return controller.create_topic(topic.name, topic.partitions, factor, config)
    except TopicAlreadyExistsError:
        return controller.describe(topic.name)
