"""CreateTopics (API key 19), versions 2-7.

Each topic is created by the controller (or only checked, with ``validate_only``) and answered
on its own, as Kafka does:
- ``num_partitions`` / ``replication_factor`` -1 (v4+) take the broker defaults
  (``num.partitions`` and ``default.replication.factor``: 1 each, Kafka's defaults);
- errors: INVALID_TOPIC_EXCEPTION (17: an illegal name or one colliding with an existing topic
  over '.'/'_'), TOPIC_ALREADY_EXISTS (36), INVALID_PARTITIONS (37: < 1), INVALID_REPLICATION_FACTOR
  (38: < 1 or more than the live brokers), INVALID_CONFIG (40: an unknown config or a bad
  value), INVALID_REQUEST (42: a topic named twice in the request: every entry of it),
  INVALID_REPLICA_ASSIGNMENT (39: manual ``assignments``, which this controller does not
  place; the controller places replicas itself), POLICY_VIOLATION (44: more than 10,000
  partitions in the whole request, every entry of it, as Kafka's controller answers);
- v5+: a created topic's partitions, replication factor and configs (as DescribeConfigs lists
  them; a validated one: no configs); v7: its topic id (the zero UUID when only validated or
  failed).

Thread safety: the controller serializes creation under its lock.
"""

from __future__ import annotations

import functools
import uuid
from collections import Counter
from datetime import timedelta
from types import ModuleType
from typing import Any

from kio.schema.errors import ErrorCode

from broker_embedded.errors import (
    InvalidReplicaAssignmentError,
    InvalidRequestError,
    KafkaLogError,
)
from broker_embedded.server.handlers.api_context import (
    ApiContext,
    error_code,
    error_message,
    make,
    partitions_per_request,
    response_types,
)
from broker_embedded.server.handlers.describe_configs import topic_configs
from broker_embedded.server.kafka_apis import KafkaApis
from broker_embedded.server.request_channel import Request

API_KEY = 19
VERSIONS = (2, 7)
DEFAULT_NUM_PARTITIONS = 1
DEFAULT_REPLICATION_FACTOR = 1
ZERO_UUID = uuid.UUID(int=0)


def register(apis: KafkaApis, ctx: ApiContext) -> None:
    apis.register_responder(API_KEY, *VERSIONS, functools.partial(create_topics_response, ctx))


def create_topics_response(ctx: ApiContext, request: Request) -> Any:
    body, types = request.body, response_types(request)
    counts = Counter(t.name for t in body.topics)
    too_many = partitions_per_request(sum(_partitions(t) for t in body.topics))
    results = []
    for t in body.topics:
        if too_many is not None:
            results.append(_failed(types, t.name, too_many))
        elif counts[t.name] > 1:
            dup = InvalidRequestError(f"topic {t.name!r} appears {counts[t.name]} times")
            results.append(_failed(types, t.name, dup))
        else:
            results.append(_create(ctx, types, t, body.validate_only))
    return make(types.CreateTopicsResponse, throttle_time=timedelta(0), topics=tuple(results))


def _partitions(t: Any) -> int:
    """The partitions a topic entry asks for (by count, the default, or its assignments)."""
    if t.assignments:
        return len(t.assignments)
    return DEFAULT_NUM_PARTITIONS if t.num_partitions == -1 else max(t.num_partitions, 0)


def _create(ctx: ApiContext, types: ModuleType, t: Any, validate_only: bool) -> Any:
    partitions = DEFAULT_NUM_PARTITIONS if t.num_partitions == -1 else t.num_partitions
    factor = DEFAULT_REPLICATION_FACTOR if t.replication_factor == -1 else t.replication_factor
    config = {c.name: c.value for c in t.configs}
    try:
        if t.assignments:
            raise InvalidReplicaAssignmentError(
                f"topic {t.name!r}: manual replica assignments are not supported; give "
                "num_partitions and replication_factor"
            )
        if validate_only:
            ctx.broker.validate_new_topic(t.name, partitions, factor, config)
            topic_id = ZERO_UUID
        else:
            topic_id = ctx.broker.create_topic(t.name, partitions, factor, config).topic_id
    except KafkaLogError as e:
        return _failed(types, t.name, e)
    entry = getattr(types, "CreatableTopicConfigs", None)  # v5+
    listed = [] if entry is None or validate_only else topic_configs(ctx, t.name)
    configs = tuple(
        make(entry, name=e.name, value=e.value, read_only=e.read_only, config_source=e.source,
             is_sensitive=False)
        for e in listed
    )  # fmt: skip
    return make(
        types.CreatableTopicResult, name=t.name, topic_id=topic_id, error_code=ErrorCode.none,
        error_message=None, topic_config_error_code=0, num_partitions=partitions,
        replication_factor=factor, configs=configs,
    )  # fmt: skip


def _failed(types: ModuleType, name: str, error: BaseException) -> Any:
    return make(
        types.CreatableTopicResult, name=name, topic_id=ZERO_UUID, error_code=error_code(error),
        error_message=error_message(error), topic_config_error_code=0, num_partitions=-1,
        replication_factor=-1, configs=None,
    )  # fmt: skip
