"""What Metadata answers for a topic and its partitions (Kafka's ``TopicMetadata`` and
``PartitionMetadata`` of a MetadataResponse): leader, leader epoch, replicas, ISR and offline
replicas per partition; the topic's id and config overrides. Frozen values: safe to share.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PartitionMetadata:
    """What Metadata answers for one partition."""

    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    """What Metadata answers for one topic, with its config overrides."""

    name: str
    topic_id: uuid.UUID
    partitions: tuple[PartitionMetadata, ...]
    config: Mapping[str, str]

    @property
    def replication_factor(self) -> int:
        return len(self.partitions[0].replicas) if self.partitions else 0
