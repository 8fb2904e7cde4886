"""DeleteRecords (API key 21), versions 0-2: move partitions' log start offsets forward.

Per partition, as Kafka's ``ReplicaManager.deleteRecords``: ``offset`` -1 means the high
watermark; the answer is the new low watermark (log start offset). OFFSET_OUT_OF_RANGE (1) for
an offset above the high watermark or below -1, UNKNOWN_TOPIC_OR_PARTITION (3),
NOT_LEADER_OR_FOLLOWER (6); low watermark -1 on error. The log start offset moves at once on
the leader (followers follow with their next fetch), so ``timeout`` never runs out.

Authorization (with an authorizer, as Kafka's ``KafkaApis``): Delete on the topic; refused,
each of its partitions answers TOPIC_AUTHORIZATION_FAILED (29) with low watermark -1 and its log
start offset does not move (checked before the partition's existence, as Kafka).

Thread safety: each partition is changed under its lock.
"""

from __future__ import annotations

import functools
from datetime import timedelta
from types import ModuleType
from typing import Any

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

API_KEY = 21
VERSIONS = (0, 2)


def register(apis: KafkaApis, ctx: ApiContext) -> None:
    apis.register_responder(API_KEY, *VERSIONS, functools.partial(delete_records_response, ctx))


def delete_records_response(ctx: ApiContext, request: Request) -> Any:
    types = response_types(request)
    refusals = {
        t.name: ctx.topic_refusal(request, AclOperation.DELETE, t.name) for t in request.body.topics
    }
    topics = tuple(
        make(
            types.DeleteRecordsTopicResult,
            name=t.name,
            partitions=tuple(
                _partition(ctx, types, t.name, p, refusals[t.name]) for p in t.partitions
            ),
        )
        for t in request.body.topics
    )
    return make(types.DeleteRecordsResponse, throttle_time=timedelta(0), topics=topics)


def _partition(
    ctx: ApiContext, types: ModuleType, topic: str, p: Any, refusal: KafkaApiError | None
) -> Any:
    entry = types.DeleteRecordsPartitionResult
    try:
        if refusal is not None:
            raise refusal
        low = ctx.broker.delete_records(topic, p.partition_index, p.offset)
    except KafkaApiError as e:
        return make(
            entry, partition_index=p.partition_index, low_watermark=-1, error_code=error_code(e)
        )
    return make(entry, partition_index=p.partition_index, low_watermark=low, error_code=NONE)
