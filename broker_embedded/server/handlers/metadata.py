"""Metadata (API key 3), versions 0-13: the brokers, the cluster, and the topics asked for.

Answer, as Kafka's ``KafkaApis.handleTopicMetadataRequest``:
- brokers: every live node with its host and port (``ApiContext.nodes``, the bound ports);
  cluster id (v2+) from the log dir's ``meta.properties``; controller id (v1+): the broker's
  controller is in-process, so this broker's id.
- topics: a null list (v1+) or an empty one at v0 means every topic; an empty list at v1+ means
  none. A topic named by id (v12+, name null) is looked up by id: UNKNOWN_TOPIC_ID (100) when no
  topic has it. An illegal name is INVALID_TOPIC_EXCEPTION (17); an unknown topic is
  UNKNOWN_TOPIC_OR_PARTITION (3) unless it is auto-created.
- auto-creation (Kafka's ``AutoTopicCreationManager``): when the request allows it
  (``allow_auto_topic_creation``, v4+; always at v0-3; never for "all topics") and the broker
  config's ``auto.create.topics.enable`` is true (Kafka's default), an unknown topic is created
  with ``num.partitions`` partitions and ``default.replication.factor`` replicas. Kafka answers
  a topic it has just asked its controller to create with LEADER_NOT_AVAILABLE (5; ZooKeeper
  mode) or UNKNOWN_TOPIC_OR_PARTITION (3; KRaft), because its metadata cache learns the topic
  later; here the controller is in-process and the topic is led when the creation returns, so
  the answer is the created topic itself (what Kafka answers on the client's retry), and
  LEADER_NOT_AVAILABLE for a partition without a leader yet. A creation error is answered with
  its code (a name colliding with another topic's by '.'/'_' INVALID_TOPIC_EXCEPTION, a
  replication factor above the live brokers INVALID_REPLICATION_FACTOR 38), as Kafka's
  ZooKeeper-mode broker does. Kafka's internal topics (below) are created by their
  coordinators with their own partition counts and configs, never here: they stay
  UNKNOWN_TOPIC_OR_PARTITION, ``is_internal`` true. Produce never creates a topic (Kafka's
  does not either: UNKNOWN_TOPIC_OR_PARTITION, and the client asks Metadata).
- partitions: leader, leader epoch (v7+), replicas, ISR, offline replicas (v5+); a partition
  without a leader is LEADER_NOT_AVAILABLE. Topic ids (v10+; the zero UUID for an error);
  ``is_internal`` for Kafka's internal topics (``__consumer_offsets``, ``__transaction_state``,
  ``__share_group_state``).
- authorization (with an authorizer configured), as Kafka's: "every topic" lists only those the
  principal may Describe; a topic asked for without Describe is TOPIC_AUTHORIZATION_FAILED (29),
  whether it exists or not; auto-creation needs Create on the Cluster or the topic, else
  TOPIC_AUTHORIZATION_FAILED. Authorized operations (v8+, when asked; -2147483648 otherwise):
  each answered topic's bit field (not a refused one's), and v8-10's Cluster field (0 without
  Describe on the Cluster).

:func:`current_leader` is Kafka's ``KafkaApis.getCurrentLeader`` (KIP-951): a partition's leader
id and epoch (-1, -1 when unknown) and the leader's node when it is live, for the
``current_leader`` and ``node_endpoints`` of Produce (v10+) and Fetch (v16+) answers
NOT_LEADER_OR_FOLLOWER.

Thread safety: reads the controller's state under its lock; nothing is kept between requests.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import timedelta
from types import ModuleType
from typing import Any

from broker_embedded.error_code import ErrorCode
from broker_embedded.errors import (
    KafkaApiError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from broker_embedded.replication.topic_metadata import TopicMetadata
from broker_embedded.server.handlers.api_context import (
    NONE,
    OMITTED_OPERATIONS,
    ApiContext,
    Node,
    error_code,
    make,
    response_types,
)
from broker_embedded.server.handlers.create_topics import creatable
from broker_embedded.server.kafka_apis import KafkaApis
from broker_embedded.server.protocol import InvalidRequestError
from broker_embedded.server.request_channel import Request
from broker_embedded.server.security.authorizer import AclOperation, ResourceType
from broker_embedded.storage.topic_partition import validate_topic

API_KEY = 3
VERSIONS = (0, 13)
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
ZERO_UUID = uuid.UUID(int=0)
NO_LEADER = -1
TOPIC_ID_VERSION = 12  # Metadata asks for topics by id from this version (KIP-516)


@dataclass(frozen=True, slots=True)
class LeaderNode:
    """A partition's current leader as KIP-951 answers it: -1 for an unknown id or epoch; the
    node when the leader is live."""

    leader_id: int = NO_LEADER
    leader_epoch: int = -1
    node: Node | None = None


def current_leader(ctx: ApiContext, topic: str, partition: int) -> LeaderNode:
    """The controller's leader and leader epoch of ``topic``-``partition`` and its live node."""
    try:
        partitions = ctx.broker.describe_topic(topic).partitions
    except KafkaApiError:
        return LeaderNode()
    p = next((p for p in partitions if p.partition == partition), None)
    if p is None:
        return LeaderNode()
    return LeaderNode(p.leader, p.leader_epoch, ctx.node(p.leader))


def leader_nodes(leaders: Iterable[LeaderNode]) -> tuple[Node, ...]:
    """The live leaders' nodes, each once, by node id (a response's ``node_endpoints``)."""
    nodes = {n.node.node_id: n.node for n in leaders if n.node is not None}
    return tuple(n for _, n in sorted(nodes.items()))


def node_endpoints(types: ModuleType, leaders: Iterable[LeaderNode]) -> tuple[Any, ...]:
    """:func:`leader_nodes` as ``types.NodeEndpoint`` entries."""
    return tuple(
        make(types.NodeEndpoint, node_id=n.node_id, host=n.host, port=n.port, rack=n.rack)
        for n in leader_nodes(leaders)
    )


def register(apis: KafkaApis, ctx: ApiContext) -> None:
    apis.register_responder(API_KEY, *VERSIONS, functools.partial(metadata_response, ctx))


def metadata_response(ctx: ApiContext, request: Request) -> Any:
    body, types = request.body, response_types(request)
    version = request.header.api_version
    auto_create = version < 4 or body.allow_auto_topic_creation
    if body.topics is None or (version == 0 and not body.topics):
        topics = [
            _topic(types, t) for t in ctx.broker.metadata() if _describable(ctx, request, t.name)
        ]
    else:
        _check_names(body.topics, version)
        topics = [_requested(ctx, request, types, t, auto_create) for t in body.topics]
    if getattr(body, "include_topic_authorized_operations", False):
        topics = [_with_operations(ctx, request, t) for t in topics]
    cluster_operations = OMITTED_OPERATIONS
    if getattr(body, "include_cluster_authorized_operations", False):
        cluster_operations = ctx.cluster_operations(request)
    return make(
        types.MetadataResponse,
        throttle_time=timedelta(0),
        brokers=broker_entries(ctx, types.MetadataResponseBroker),
        cluster_id=ctx.cluster_id,
        controller_id=ctx.broker_id,
        topics=tuple(topics),
        error_code=NONE,
        cluster_authorized_operations=cluster_operations,
    )


def _with_operations(ctx: ApiContext, request: Request, topic: Any) -> Any:
    """``topic`` with its authorized operations, unless it was refused (Kafka leaves those
    omitted) or is an unknown id."""
    if topic.name is None or topic.error_code == ErrorCode.topic_authorization_failed:
        return topic
    operations = ctx.authorized_operations(request, ResourceType.TOPIC, topic.name)
    return replace(topic, topic_authorized_operations=operations)


def broker_entries(
    ctx: ApiContext, entry: type, id_field: str = "node_id", **fields: Any
) -> tuple[Any, ...]:
    """The live nodes as ``entry`` values (Metadata's broker class; DescribeCluster's names the
    id ``broker_id`` and adds ``fields``)."""
    return tuple(
        make(entry, **{id_field: n.node_id}, host=n.host, port=n.port, rack=n.rack, **fields)
        for n in ctx.nodes()
    )


def _check_names(topics: Any, version: int) -> None:
    """Topics are asked for by id from v12 only: below it a null name cannot be answered (the
    response's name is not nullable), so the request is invalid, as Kafka's KafkaApis says."""
    if version < TOPIC_ID_VERSION and any(t.name is None for t in topics):
        raise InvalidRequestError(f"topic name can not be null for Metadata v{version}")


def _describable(ctx: ApiContext, request: Request, name: str) -> bool:
    return ctx.allowed(request, AclOperation.DESCRIBE, ResourceType.TOPIC, name)


def _requested(
    ctx: ApiContext, request: Request, types: ModuleType, topic: Any, auto_create: bool
) -> Any:
    name = topic.name
    topic_id = getattr(topic, "topic_id", None)
    if name is None:
        return _by_id(ctx, request, types, topic_id)
    try:
        validate_topic(name)
    except KafkaApiError as e:
        return _error(types, name, error_code(e))
    if not _describable(ctx, request, name):
        return _error(types, name, ErrorCode.topic_authorization_failed)
    try:
        return _topic(types, ctx.broker.describe_topic(name))
    except KafkaApiError as e:
        if auto_create and _auto_create_enabled(ctx):
            if not creatable(ctx, request, name):
                return _error(types, name, ErrorCode.topic_authorization_failed)
            return _auto_create(ctx, types, name)
        return _error(types, name, error_code(e))


def _by_id(ctx: ApiContext, request: Request, types: ModuleType, topic_id: uuid.UUID | None) -> Any:
    """A topic named by id (v12+): one lookup in the controller's topic-id map."""
    found = ctx.broker.topic_name(topic_id) if topic_id is not None else None
    try:
        if found is not None and not _describable(ctx, request, found):
            return _error(types, None, ErrorCode.topic_authorization_failed, topic_id)
        if found is not None:
            return _topic(types, ctx.broker.describe_topic(found))
    except KafkaApiError:  # deleted since the lookup
        pass
    return _error(types, None, ErrorCode.unknown_topic_id, topic_id)


def _auto_create_enabled(ctx: ApiContext) -> bool:
    return ctx.broker.config.auto_create_topics_enable


def _auto_create(ctx: ApiContext, types: ModuleType, name: str) -> Any:
    """Create ``name`` as Kafka's auto-creation does (module docstring) and answer it."""
    if name in INTERNAL_TOPICS:
        return _error(types, name, ErrorCode.unknown_topic_or_partition)
    config = ctx.broker.config
    try:
        created = ctx.broker.create_topic(
            name, config.num_partitions, config.default_replication_factor
        )
    except TopicAlreadyExistsError:  # another request created it meanwhile, or creates it
        try:
            created = ctx.broker.describe_topic(name)
        except UnknownTopicOrPartitionError:  # still being created: Kafka's answer
            return _error(types, name, ErrorCode.leader_not_available)
    except KafkaApiError as e:
        return _error(types, name, error_code(e))
    return _topic(types, created)


def _error(types: ModuleType, name: str | None, code: ErrorCode, topic_id=None) -> Any:
    return make(
        types.MetadataResponseTopic,
        error_code=code,
        name=name,
        topic_id=topic_id or ZERO_UUID,
        is_internal=name in INTERNAL_TOPICS,
        partitions=(),
    )


def _topic(types: ModuleType, t: TopicMetadata) -> Any:
    partitions = tuple(
        make(
            types.MetadataResponsePartition,
            error_code=ErrorCode.leader_not_available if p.leader == NO_LEADER else NONE,
            partition_index=p.partition,
            leader_id=p.leader,
            leader_epoch=p.leader_epoch,
            replica_nodes=p.replicas,
            isr_nodes=p.isr,
            offline_replicas=p.offline_replicas,
        )
        for p in t.partitions
    )
    return make(
        types.MetadataResponseTopic,
        error_code=NONE,
        name=t.name,
        topic_id=t.topic_id,
        is_internal=t.name in INTERNAL_TOPICS,
        partitions=partitions,
    )
