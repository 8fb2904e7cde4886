"""DeleteTopics (API key 20), versions 1-6: topics deleted by name, or by id (v6).

Each topic is answered on its own: UNKNOWN_TOPIC_OR_PARTITION (3) for an unknown name (an
illegal name too, as Kafka answers), UNKNOWN_TOPIC_ID (100) for an unknown id, INVALID_REQUEST
(42) for a v6 entry with both or neither of name and id. v6 answers name and id of each topic.
The controller stops the replicas and deletes the logs before answering; ``timeout`` only runs
out while the request waits in the admin queue (every topic REQUEST_TIMED_OUT, see below).

Requests are parked on the server's admin queue (admin_queue.py: its bound, ``timeout_ms`` and
shutdown), off the request handler threads. Thread safety: the admin queue's one thread runs
them; the controller serializes deletion under its lock.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from broker_embedded.errors import (
    InvalidRequestError,
    KafkaApiError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
)
from broker_embedded.server.handlers.api_context import (
    ApiContext,
    error_code,
    error_message,
    make,
    response_types,
)
from broker_embedded.server.handlers.create_topics import timeout_ms
from broker_embedded.server.kafka_apis import KafkaApis
from broker_embedded.server.request_channel import Request
from broker_embedded.server.security.authorizer import AclOperation

API_KEY = 20
VERSIONS = (1, 6)
ZERO_UUID = uuid.UUID(int=0)


def register(apis: KafkaApis, ctx: ApiContext) -> None:
    queue = apis.admin_queue
    respond = functools.partial(delete_topics_response, ctx)
    apis.register(API_KEY, *VERSIONS, lambda r: queue.submit(r, respond, refused, timeout_ms(r)))


def refused(request: Request, error: KafkaApiError) -> Any:
    """The answer failing every topic of the request with ``error`` (the admin queue's)."""
    types = response_types(request)
    if request.header.api_version >= 6:
        targets = [(t.name, t.topic_id or ZERO_UUID) for t in request.body.topics]
    else:
        targets = [(n, ZERO_UUID) for n in request.body.topic_names]
    results = tuple(
        make(
            types.DeletableTopicResult,
            name=name,
            topic_id=topic_id,
            error_code=error_code(error),
            error_message=error_message(error),
        )
        for name, topic_id in targets
    )
    return make(types.DeleteTopicsResponse, throttle_time=timedelta(0), responses=results)


def delete_topics_response(ctx: ApiContext, request: Request) -> Any:
    body, types = request.body, response_types(request)
    if request.header.api_version >= 6:
        names = ctx.topic_names_by_id()
        targets = [_target(names, t.name, t.topic_id) for t in body.topics]
    else:
        targets = [(n, ZERO_UUID, None) for n in body.topic_names]
    results = tuple(
        make(
            types.DeletableTopicResult,
            name=name,
            topic_id=topic_id,
            error_code=error_code(error),
            error_message=error_message(error),
        )
        for name, topic_id, error in (_delete(ctx, *_authorized(ctx, request, *t)) for t in targets)
    )
    return make(types.DeleteTopicsResponse, throttle_time=timedelta(0), responses=results)


def _target(
    names: Mapping[uuid.UUID, str], name: str | None, topic_id: uuid.UUID | None
) -> tuple[str | None, uuid.UUID, KafkaApiError | None]:
    has_id = topic_id is not None and topic_id != ZERO_UUID
    if (name is None) == (not has_id):
        return (
            name,
            topic_id or ZERO_UUID,
            InvalidRequestError(
                f"DeleteTopics: give a topic name or a topic id, not both or neither ({name!r}, "
                f"{topic_id})"
            ),
        )
    if name is not None:
        by_name = {v: k for k, v in names.items()}
        return name, by_name.get(name, ZERO_UUID), None
    found = names.get(topic_id)  # type: ignore[arg-type]
    if found is None:
        return None, topic_id, UnknownTopicIdError(f"no topic has id {topic_id}")  # type: ignore[return-value]
    return found, topic_id, None  # type: ignore[return-value]


def _authorized(
    ctx: ApiContext,
    request: Request,
    name: str | None,
    topic_id: uuid.UUID,
    error: KafkaApiError | None,
) -> tuple[str | None, uuid.UUID, KafkaApiError | None]:
    """The target, refused TOPIC_AUTHORIZATION_FAILED without Delete on the topic."""
    if error is None and name is not None:
        error = ctx.topic_refusal(request, AclOperation.DELETE, name)
    return name, topic_id, error


def _delete(
    ctx: ApiContext, name: str | None, topic_id: uuid.UUID, error: KafkaApiError | None
) -> tuple[str | None, uuid.UUID, KafkaApiError | None]:
    if error is None:
        try:
            ctx.broker.delete_topic(name)  # type: ignore[arg-type]
        except UnknownTopicOrPartitionError as e:
            error = e
        except KafkaApiError as e:  # an illegal name names no topic
            error = UnknownTopicOrPartitionError(f"topic {name!r} does not exist: {e}")
    return name, topic_id, error
