"""Metadata (API key 3), versions 0-13: the brokers, the cluster, and the topics asked for.

Answer, as Kafka's ``KafkaApis.handleTopicMetadataRequest``:
- brokers: every live node with its host and port (``ApiContext.nodes``, the bound ports);
  cluster id (v2+) from the log dir's ``meta.properties``; controller id (v1+): the broker's
  controller is in-process, so this broker's id.
- topics: a null list (v1+) or an empty one at v0 means every topic; an empty list at v1+ means
  none. A topic named by id (v12+, name null) is looked up by id: UNKNOWN_TOPIC_ID (100) when no
  topic has it. An illegal name is INVALID_TOPIC_EXCEPTION (17); an unknown topic is
  UNKNOWN_TOPIC_OR_PARTITION (3): auto-creation happens only with ``allow_auto_topic_creation``
  (v4+; always at v0-3) and ``auto.create.topics.enable`` in the broker config (a key
  :class:`BrokerConfig` does not have yet, so it is off here, unlike Kafka's default): the
  topic is then created with one partition, replication factor 1, and answered
  LEADER_NOT_AVAILABLE (5), as Kafka does until its leader is known.
- partitions: leader, leader epoch (v7+), replicas, ISR, offline replicas (v5+); a partition
  without a leader is LEADER_NOT_AVAILABLE. Topic ids (v10+; the zero UUID for an error);
  ``is_internal`` for Kafka's internal topics (``__consumer_offsets``, ``__transaction_state``,
  ``__share_group_state``).

Thread safety: reads the controller's state under its lock; nothing is kept between requests.
"""

from __future__ import annotations

import functools
import uuid
from datetime import timedelta
from types import ModuleType
from typing import Any

from kio.schema.errors import ErrorCode

from broker_embedded.errors import KafkaApiError, TopicAlreadyExistsError
from broker_embedded.replication.controller import TopicMetadata
from broker_embedded.server.handlers.api_context import (
    NONE,
    ApiContext,
    error_code,
    make,
    response_types,
)
from broker_embedded.server.kafka_apis import KafkaApis
from broker_embedded.server.protocol import InvalidRequestError
from broker_embedded.server.request_channel import Request
from broker_embedded.storage.topic_partition import validate_topic

API_KEY = 3
VERSIONS = (0, 13)
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
ZERO_UUID = uuid.UUID(int=0)
NO_LEADER = -1
TOPIC_ID_VERSION = 12  # Metadata asks for topics by id from this version (KIP-516)


def register(apis: KafkaApis, ctx: ApiContext) -> None:
    apis.register_responder(API_KEY, *VERSIONS, functools.partial(metadata_response, ctx))


def metadata_response(ctx: ApiContext, request: Request) -> Any:
    body, types = request.body, response_types(request)
    version = request.header.api_version
    auto_create = version < 4 or body.allow_auto_topic_creation
    if body.topics is None or (version == 0 and not body.topics):
        topics = [_topic(types, t) for t in ctx.broker.metadata()]
    else:
        _check_names(body.topics, version)
        topics = [_requested(ctx, types, t, auto_create) for t in body.topics]
    return make(
        types.MetadataResponse,
        throttle_time=timedelta(0),
        brokers=broker_entries(ctx, types.MetadataResponseBroker),
        cluster_id=ctx.cluster_id,
        controller_id=ctx.broker_id,
        topics=tuple(topics),
        error_code=NONE,
    )


def broker_entries(ctx: ApiContext, entry: type) -> tuple[Any, ...]:
    """The live nodes as ``entry`` values (Metadata's and DescribeCluster's broker classes)."""
    return tuple(
        make(entry, node_id=n.node_id, broker_id=n.node_id, host=n.host, port=n.port,
             rack=n.rack, is_fenced=False)
        for n in ctx.nodes()
    )  # fmt: skip


def _check_names(topics: Any, version: int) -> None:
    """Topics are asked for by id from v12 only: below it a null name cannot be answered (the
    response's name is not nullable), so the request is invalid, as Kafka's KafkaApis says."""
    if version < TOPIC_ID_VERSION and any(t.name is None for t in topics):
        raise InvalidRequestError(f"topic name can not be null for Metadata v{version}")


def _requested(ctx: ApiContext, types: ModuleType, topic: Any, auto_create: bool) -> Any:
    name = topic.name
    topic_id = getattr(topic, "topic_id", None)
    if name is None:
        by_id = {t.topic_id: t for t in ctx.broker.metadata()}
        found = by_id.get(topic_id) if topic_id is not None else None
        if found is None:
            return _error(types, None, ErrorCode.unknown_topic_id, topic_id)
        return _topic(types, found)
    try:
        validate_topic(name)
    except KafkaApiError as e:
        return _error(types, name, error_code(e))
    try:
        return _topic(types, ctx.broker.describe_topic(name))
    except KafkaApiError as e:
        if auto_create and _auto_create_enabled(ctx):
            return _auto_create(ctx, types, name)
        return _error(types, name, error_code(e))


def _auto_create_enabled(ctx: ApiContext) -> bool:
    return bool(getattr(ctx.broker.config, "auto_create_topics_enable", False))


def _auto_create(ctx: ApiContext, types: ModuleType, name: str) -> Any:
    try:
        ctx.broker.create_topic(name, 1, 1)
    except TopicAlreadyExistsError:
        return _topic(types, ctx.broker.describe_topic(name))
    except KafkaApiError as e:
        return _error(types, name, error_code(e))
    return _error(types, name, ErrorCode.leader_not_available)


def _error(types: ModuleType, name: str | None, code: ErrorCode, topic_id=None) -> Any:
    return make(
        types.MetadataResponseTopic, error_code=code, name=name,
        topic_id=topic_id or ZERO_UUID, is_internal=False, partitions=(),
    )  # fmt: skip


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
        )  # fmt: skip
        for p in t.partitions
    )
    return make(
        types.MetadataResponseTopic, error_code=NONE, name=t.name, topic_id=t.topic_id,
        is_internal=t.name in INTERNAL_TOPICS, partitions=partitions,
    )  # fmt: skip
