"""CreatePartitions (API key 37), versions 0-3: grow topics to a partition count.

Each topic is answered on its own, as Kafka does: UNKNOWN_TOPIC_OR_PARTITION (3) for an unknown
topic, INVALID_PARTITIONS (37) when ``count`` does not exceed the current count ("Topic
already has N partitions" / "Topic currently has N partitions, which is higher than the
requested M"), INVALID_REPLICA_ASSIGNMENT (39) for manual ``assignments`` (the controller
places new replicas itself), INVALID_REQUEST (42) for a topic named twice, POLICY_VIOLATION (44)
for every topic when the counts asked for add up to more than 10,000 (the cap Kafka's
controller puts on the partitions of one request). ``validate_only``
checks without creating. A growth is answered once registered, its new partitions' logs made
afterwards by the admin queue's thread (LEADER_NOT_AVAILABLE until then, and the bound on
partitions waiting: THROTTLING_QUOTA_EXCEEDED at v3+, REQUEST_TIMED_OUT before), as
create_topics.py says.

Requests are parked on the server's admin queue (admin_queue.py: its bound, ``timeout_ms`` and
shutdown), off the request handler threads. Thread safety: the admin queue's one thread runs
them; the controller serializes changes under its lock.
"""

from __future__ import annotations

import functools
import threading
from collections import Counter
from datetime import timedelta
from types import ModuleType
from typing import Any

from broker_embedded.error_code import ErrorCode
from broker_embedded.errors import (
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidRequestError,
    KafkaApiError,
    ThrottlingQuotaExceededError,
)
from broker_embedded.server.handlers.api_context import (
    ApiContext,
    error_code,
    error_message,
    make,
    partitions_per_request,
    response_types,
)
from broker_embedded.server.handlers.create_topics import THROTTLE_MS, quota_error, timeout_ms
from broker_embedded.server.kafka_apis import KafkaApis
from broker_embedded.server.request_channel import Request
from broker_embedded.server.security.authorizer import AclOperation

API_KEY = 37
VERSIONS = (0, 3)
STRICT_QUOTA_FROM = 3  # the first version answered THROTTLING_QUOTA_EXCEEDED


def register(apis: KafkaApis, ctx: ApiContext) -> None:
    queue = apis.admin_queue
    queue.set_background(ctx.broker.create_step)
    respond = functools.partial(create_partitions_response, ctx, stop=queue.stopping)
    apis.register(API_KEY, *VERSIONS, lambda r: queue.submit(r, respond, refused, timeout_ms(r)))


def refused(request: Request, error: KafkaApiError) -> Any:
    """The answer failing every topic of the request with ``error`` (the admin queue's)."""
    types = response_types(request)
    results = tuple(_result(types, t.name, error) for t in request.body.topics)
    return make(types.CreatePartitionsResponse, throttle_time=timedelta(0), results=results)


def _result(types: ModuleType, name: str, error: KafkaApiError | None) -> Any:
    return make(
        types.CreatePartitionsTopicResult,
        name=name,
        error_code=error_code(error),
        error_message=error_message(error),
    )


def create_partitions_response(
    ctx: ApiContext, request: Request, stop: threading.Event | None = None
) -> Any:
    """``stop``: set when the server stops (a growth under way stops and is undone)."""
    body, types = request.body, response_types(request)
    counts = Counter(t.name for t in body.topics)
    too_many = partitions_per_request(sum(max(t.count, 0) for t in body.topics))
    results = []
    for t in body.topics:
        error = (
            too_many
            or ctx.topic_refusal(request, AclOperation.ALTER, t.name)
            or _grow(ctx, t, body.validate_only, counts[t.name], stop)
        )
        if isinstance(error, ThrottlingQuotaExceededError):
            error = quota_error(error, request.header.api_version, STRICT_QUOTA_FROM)
        results.append(_result(types, t.name, error))
    throttled = any(r.error_code == ErrorCode.throttling_quota_exceeded for r in results)
    return make(
        types.CreatePartitionsResponse,
        throttle_time=timedelta(milliseconds=THROTTLE_MS if throttled else 0),
        results=tuple(results),
    )


def _grow(
    ctx: ApiContext, t: Any, validate_only: bool, times: int, stop: threading.Event | None
) -> KafkaApiError | None:
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
            ctx.broker.create_partitions(t.name, t.count, stop=stop, background=True)
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
