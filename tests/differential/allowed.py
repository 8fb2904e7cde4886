"""The differences from Kafka 3.9 that the differential tests allow, each named and explained
(docs/serving/compared-with-kafka.md lists the same names).

An :class:`Allowed` matches a difference of one scenario by the step's label and the field
path (``*`` matches any text; the run's topic-name token shows as ``*``), and by the two
values unless they are :data:`ANY`. The tests require every difference to match an entry and
every entry to match a difference: an entry whose difference was fixed must go.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from tests.differential.harness import ABSENT
from tests.differential.scenario import StepDifference

ANY = object()

# The differences, by name: what docs/serving/compared-with-kafka.md says about each.
REASONS = {
    "api-table": "ApiVersions advertises the APIs and versions kafkalog serves: newer "
    "versions of some APIs (Kafka 4's ranges), none of the ZooKeeper-era versions Kafka 4 "
    "removed, the SASL and ACL APIs only on a SASL listener and with an authorizer (Kafka "
    "lists them always), and no quota, delegation token, reassignment, KRaft or log-dir APIs.",
    "features": "ApiVersions v3+ names no feature flags (Kafka: metadata.version, "
    "kraft.version and its finalized features epoch): kafkalog has no KRaft metadata log.",
    "auto-create-at-once": "Metadata with auto-creation answers a topic it creates as created "
    "(partitions, leader, topic id); Kafka 3.9 answers UNKNOWN_TOPIC_OR_PARTITION with no "
    "partitions and creates it afterwards.",
    "configs-not-served": "Topic configs Kafka 3.9 lists and kafkalog does not have: "
    "compression levels, replication throttles, "
    "message format and down-conversion, message timestamp bounds, preallocate, "
    "segment.jitter.ms.",
    "error-messages": "kafkalog sends an error_message naming the topic, partition, group or "
    "value where Kafka sends null (Produce errors other than record validation, "
    "CreatePartitions of an unknown topic, DescribeProducers of an unknown partition) or '' "
    "(DescribeConfigs, FindCoordinator v4 refused by ACLs).",
    "acl-validation": "CreateAcls of an ACL with resource type ANY, pattern type MATCH, "
    "operation ANY or permission ANY: Kafka 3.9 answers UNKNOWN_SERVER_ERROR with no message "
    "(and fails every ACL of that request with it), kafkalog INVALID_REQUEST naming what is "
    "wrong. An ACL whose principal has no type ('alice', not 'User:alice') or whose host is "
    "empty: Kafka stores it (after a principal without a type its authorizer answers "
    "UNKNOWN_SERVER_ERROR to the requests it decides), kafkalog refuses it INVALID_REQUEST.",
    "whole-batches": "Fetch answers whole batches only: where the byte limit ends inside a "
    "batch Kafka sends that batch's first bytes (a partial batch the client drops), kafkalog "
    "stops at the last whole batch.",
}

# ApiVersions: the ranges that differ (Kafka 3.9, kafkalog; ABSENT: not served).
API_RANGES = {
    "Produce": ("0..11", "3..13"),
    "Fetch": ("0..17", "4..18"),
    "ListOffsets": ("0..9", "1..11"),
    "Metadata": ("0..12", "0..13"),
    "OffsetCommit": ("0..9", "2..10"),
    "OffsetFetch": ("0..9", "1..10"),
    "DescribeGroups": ("0..5", "0..6"),
    "CreateTopics": ("0..7", "2..7"),
    "DeleteTopics": ("0..6", "1..6"),
    "InitProducerId": ("0..5", "0..6"),
    "AddPartitionsToTxn": ("0..5", "0..3"),
    "DescribeConfigs": ("0..4", "1..4"),
    "DescribeCluster": ("0..1", "0..2"),
    "DescribeLogDirs": ("0..4", "1..4"),
    "WriteTxnMarkers": ("0..1", "1..1"),
    **{
        name: (kafka, ABSENT)
        for name, kafka in {
            "SaslHandshake": "0..1",
            "OffsetForLeaderEpoch": "0..4",
            "DescribeAcls": "0..3",
            "CreateAcls": "0..3",
            "DeleteAcls": "0..3",
            "AlterReplicaLogDirs": "0..2",
            "SaslAuthenticate": "0..2",
            "CreateDelegationToken": "0..3",
            "RenewDelegationToken": "0..2",
            "ExpireDelegationToken": "0..2",
            "DescribeDelegationToken": "0..3",
            "ElectLeaders": "0..2",
            "AlterPartitionReassignments": "0..0",
            "ListPartitionReassignments": "0..0",
            "DescribeClientQuotas": "0..1",
            "AlterClientQuotas": "0..1",
            "DescribeQuorum": "0..2",
            "UpdateFeatures": "0..1",
            "UnregisterBroker": "0..0",
            "ConsumerGroupHeartbeat": "0..0",
            "ConsumerGroupDescribe": "0..0",
            "ListConfigResources": "0..0",
            "DescribeTopicPartitions": "0..0",
            "AddRaftVoter": "0..0",
            "RemoveRaftVoter": "0..0",
        }.items()
    },
}

# Topic configs Kafka 3.9 describes that kafkalog does not have.
KAFKA_ONLY_CONFIGS = (
    "compression.gzip.level",
    "compression.lz4.level",
    "compression.zstd.level",
    "follower.replication.throttled.replicas",
    "leader.replication.throttled.replicas",
    "message.downconversion.enable",
    "message.format.version",
    "message.timestamp.after.max.ms",
    "message.timestamp.before.max.ms",
    "message.timestamp.difference.max.ms",
    "preallocate",
    "segment.jitter.ms",
)


@dataclass(frozen=True)
class Allowed:
    name: str  # a key of REASONS
    scenario: str
    label: str  # a pattern of step labels
    path: str  # a pattern of field paths
    kafka: Any = ANY
    kafkalog: Any = ANY

    @cached_property
    def _label(self) -> re.Pattern[str]:
        return _glob(self.label)

    @cached_property
    def _path(self) -> re.Pattern[str]:
        return _glob(self.path)

    def matches(self, scenario: str, found: StepDifference) -> bool:
        d = found.difference
        return (
            scenario == self.scenario
            and self._label.fullmatch(found.label) is not None
            and self._path.fullmatch(d.path) is not None
            and (self.kafka is ANY or self.kafka == d.kafka)
            and (self.kafkalog is ANY or self.kafkalog == d.kafkalog)
        )


def _glob(pattern: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in pattern.split("*")))


def _produce_message(scenario: str, label: str) -> Allowed:
    return Allowed(
        "error-messages",
        scenario,
        label,
        ".responses.{*}.partition_responses[0].error_message",
        None,
        "<masked>",
    )


ALLOWED: tuple[Allowed, ...] = (
    *(
        Allowed("api-table", "api_versions", "v*", f".api_keys.{name}", kafka, ours)
        for name, (kafka, ours) in API_RANGES.items()
    ),
    Allowed("features", "api_versions", "v*", ".supported_features.{*}", ANY, ABSENT),
    Allowed("features", "api_versions", "v*", ".finalized_features.{*}", ANY, ABSENT),
    Allowed("features", "api_versions", "v*", ".finalized_features_epoch", ANY, -1),
    Allowed(
        "auto-create-at-once",
        "metadata",
        "v* auto-create",
        ".topics.{*}.error_code",
        "unknown_topic_or_partition",
        "none",
    ),
    Allowed(
        "auto-create-at-once", "metadata", "v* auto-create", ".topics.{*}.partitions.{0}", ABSENT
    ),
    Allowed(
        "auto-create-at-once",
        "metadata",
        "v12 auto-create",
        ".topics.{*}.topic_id",
        None,
        "<masked>",
    ),
    Allowed(
        "auto-create-at-once",
        "cluster",
        "metadata v* auto-create",
        ".topics.{*}.error_code",
        "unknown_topic_or_partition",
        "none",
    ),
    Allowed(
        "auto-create-at-once",
        "cluster",
        "metadata v* auto-create",
        ".topics.{*}.partitions.{0}",
        ABSENT,
    ),
    *(
        Allowed(
            "configs-not-served",
            "create_topics",
            label,
            f".topics.{{*}}.configs.{{{c}}}",
            ANY,
            ABSENT,
        )
        for c in KAFKA_ONLY_CONFIGS
        for label in ("v* configs", "v* validate_only")
    ),
    _produce_message("produce_errors", "v* too large"),
    _produce_message("produce_errors", "v* unknown partition"),
    _produce_message("produce_errors", "v* bad crc"),
    _produce_message("produce_idempotent", "gap seq 9"),
    Allowed(
        "whole-batches",
        "fetch_edges",
        "v* 700",
        "*.partitions.{0}.records.partial_tail_bytes",
        ANY,
        0,
    ),
    *(
        Allowed(
            "configs-not-served",
            "describe_configs",
            "v* keys",
            f".results[1].configs.{{{c}}}",
            ANY,
            ABSENT,
        )
        for c in KAFKA_ONLY_CONFIGS
    ),
    Allowed("error-messages", "describe_configs", "v* keys", ".results[*].error_message", "", None),
    Allowed(
        "error-messages", "describe_configs", "v* keys", ".results[2].error_message", "", "<masked>"
    ),
    Allowed("acl-validation", "acls", "create v*, * ANY", ".results[0].error_*"),
    Allowed("acl-validation", "acls", "create v*, pattern MATCH", ".results[0].error_*"),
    Allowed("acl-validation", "acls", "create v*, principal without type", ".results[0].error_*"),
    Allowed("acl-validation", "acls", "create v*, empty host", ".results[0].error_*"),
    Allowed(
        "acl-validation",
        "acls",
        "delete what Kafka kept",
        ".filter_results[*].matching_acls[0]",
        ANY,
        ABSENT,
    ),
    Allowed(
        "error-messages",
        "acls",
        "produce as user, *",
        ".responses.{*}.partition_responses[0].error_message",
        None,
        "<masked>",
    ),
    Allowed(
        "error-messages",
        "acls",
        "find coordinator as user, other group",
        ".coordinators[0].error_message",
        "",
        "<masked>",
    ),
    Allowed(
        "error-messages",
        "admin",
        "create partitions v*",
        ".results.{diff-admin-unknown-*}.error_message",
        None,
        "<masked>",
    ),
    Allowed(
        "error-messages",
        "admin",
        "describe producers",
        ".topics.{*}.partitions.{9}.error_message",
        None,
        "<masked>",
    ),
    Allowed(
        "error-messages",
        "transactions",
        "produce, old epoch",
        ".responses.{*}.partition_responses[0].error_message",
        None,
        "<masked>",
    ),
)


def allowed_for(scenario: str, found: StepDifference) -> Allowed | None:
    """The first entry that allows ``found``, or None."""
    return next((a for a in ALLOWED if a.matches(scenario, found)), None)
