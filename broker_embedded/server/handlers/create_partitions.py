"""CreatePartitions (API key 37), versions 0-3: grow topics to a partition count.

Each topic is answered on its own, as Kafka does: UNKNOWN_TOPIC_OR_PARTITION (3) for an unknown
topic, INVALID_PARTITIONS (37) when ``count`` does not exceed the current count ("Topic
already has N partitions" / "Topic currently has N partitions, which is higher than the
requested M"), INVALID_REPLICA_ASSIGNMENT (39) for manual ``assignments`` (the controller
places new replicas itself), INVALID_REQUEST (42) for a topic named twice, POLICY_VIOLATION (44)
for every topic when the counts asked for add up to more than 10,000 (the cap Kafka's
controller puts on the partitions of one request). ``validate_only``
checks without creating. New partitions are led at once (the controller's states are applied
before the answer).

Thread safety: the controller serializes changes under its lock.
"""

from __future__ import annotations

import functools
from collections import Counter
from datetime import timedelta
from typing import Any

from broker_embedded.errors import (
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidRequestError,
    KafkaApiError,
)
from broker_embedded.server.handlers.api_context import (
    ApiContext,
    error_code,
    error_message,
    make,
    partitions_per_request,
    response_types,
)
from broker_embedded.server.kafka_apis import KafkaApis
from broker_embedded.server.request_channel import Request
from broker_embedded.server.security.authorizer import AclOperation

API_KEY = 37
VERSIONS = (0, 3)


def register(apis: KafkaApis, ctx: ApiContext) -> None:
    apis.register_responder(API_KEY, *VERSIONS, functools.partial(create_partitions_response, ctx))


def create_partitions_response(ctx: ApiContext, request: Request) -> Any:
    body, types = request.body, response_types(request)
    counts = Counter(t.name for t in body.topics)
    too_many = partitions_per_request(sum(max(t.count, 0) for t in body.topics))
    results = []
    for t in body.topics:
        error = (too_many or ctx.topic_refusal(request, AclOperation.ALTER, t.name)
                 or _grow(ctx, t, body.validate_only, counts[t.name]))  # fmt: skip
        entry = types.CreatePartitionsTopicResult
        results.append(make(entry, name=t.name, error_code=error_code(error),
                            error_message=error_message(error)))  # fmt: skip
    return make(types.CreatePartitionsResponse, throttle_time=timedelta(0), results=tuple(results))


def _grow(ctx: ApiContext, t: Any, validate_only: bool, times: int) -> KafkaApiError | None:
    try:
        if times > 1:
            raise InvalidRequestError(f"topic {t.name!r} appears {times} times")
        if t.assignments is not None:
            raise InvalidReplicaAssignmentError(
                f"topic {t.name!r}: manual replica assignments are not supported"
            )
        current = len(ctx.broker.describe_topic(t.name).partitions)
        if t.count <= current:
            raise InvalidPartitionsError(_not_more(t.name, current, t.count))
        if not validate_only:
            ctx.broker.create_partitions(t.name, t.count)
    except KafkaApiError as e:
        return e
    return None


def _not_more(name: str, current: int, count: int) -> str:
    if count == current:
        return f"topic {name!r} already has {current} partitions"
    return (
        f"topic {name!r} currently has {current} partitions, which is higher than the "
        f"requested {count}"
    )
