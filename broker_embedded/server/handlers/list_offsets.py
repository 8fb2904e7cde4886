"""ListOffsets (API key 2), versions 1-11: an offset per partition for a timestamp.

Timestamps (Kafka's ``ListOffsetsRequest``): -2 earliest (log start offset), -1 latest (high
watermark; the last stable offset with isolation level 1 = read_committed, v2+), -3 the record
with the largest timestamp (v7+), -4 earliest local (= earliest: every segment is local), -5 /
-6 tiered-storage offsets (-1: no tiered storage), >= 0 the first record with a timestamp at or
after it (offset and timestamp -1 when none). A ``replica_id`` other than -1 (a follower's id,
or -2, Kafka's debugging id) reads up to the log end offset, as in Kafka.
``current_leader_epoch`` (v4+) is checked: FENCED_LEADER_EPOCH (74) when older than the leader's,
UNKNOWN_LEADER_EPOCH (75) when newer. Per-partition errors:
UNKNOWN_TOPIC_OR_PARTITION (3), NOT_LEADER_OR_FOLLOWER (6), INVALID_REQUEST (42) for another
negative timestamp. The answered ``leader_epoch`` (v4+) is the leader's epoch for -1/-2 and the
found batch's epoch for a timestamp.

Thread safety: each partition is looked up under its log's lock; nothing is kept.
"""

from __future__ import annotations

import functools
from datetime import timedelta
from types import ModuleType
from typing import Any

from broker_embedded.broker import topic_partition
from broker_embedded.errors import KafkaApiError
from broker_embedded.server.handlers.api_context import (
    NONE,
    ApiContext,
    error_code,
    make,
    response_types,
)
from broker_embedded.server.kafka_apis import KafkaApis
from broker_embedded.server.request_channel import Request
from broker_embedded.server.security.authorizer import AclOperation
from broker_embedded.storage.fetch_data_info import IsolationLevel

API_KEY = 2
VERSIONS = (1, 11)
DESCRIBE = AclOperation.DESCRIBE
READ_COMMITTED = 1


def register(apis: KafkaApis, ctx: ApiContext) -> None:
    apis.register_responder(API_KEY, *VERSIONS, functools.partial(list_offsets_response, ctx))


def list_offsets_response(ctx: ApiContext, request: Request) -> Any:
    body, types = request.body, response_types(request)
    isolation = (
        IsolationLevel.READ_COMMITTED
        if getattr(body, "isolation_level", 0) == READ_COMMITTED
        else IsolationLevel.READ_UNCOMMITTED
    )
    topics = tuple(
        make(
            types.ListOffsetsTopicResponse,
            name=t.name,
            partitions=tuple(
                _partition(
                    ctx,
                    types,
                    t.name,
                    p,
                    isolation,
                    body.replica_id,
                    ctx.topic_refusal(request, DESCRIBE, t.name),
                )
                for p in t.partitions
            ),
        )
        for t in body.topics
    )
    return make(types.ListOffsetsResponse, throttle_time=timedelta(0), topics=topics)


def _partition(
    ctx: ApiContext,
    types: ModuleType,
    topic: str,
    p: Any,
    isolation: IsolationLevel,
    replica_id: int,
    refusal: KafkaApiError | None = None,
) -> Any:
    entry = types.ListOffsetsPartitionResponse
    try:
        if refusal is not None:
            raise refusal
        tp = topic_partition(topic, p.partition_index)
        found = ctx.broker.replica_manager.list_offsets(
            tp,
            p.timestamp,
            isolation,
            replica_id=replica_id,
            current_leader_epoch=getattr(p, "current_leader_epoch", -1),
        )
    except KafkaApiError as e:
        return make(
            entry,
            partition_index=p.partition_index,
            error_code=error_code(e),
            timestamp=-1,
            offset=-1,
            leader_epoch=-1,
        )
    return make(
        entry,
        partition_index=p.partition_index,
        error_code=NONE,
        timestamp=found.timestamp,
        offset=found.offset,
        leader_epoch=found.leader_epoch,
    )
