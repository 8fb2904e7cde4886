"""CreateTopics (API key 19), versions 2-7.

Each topic is created by the controller (or only checked, with ``validate_only``) and answered
on its own, as Kafka does:
- ``num_partitions`` / ``replication_factor`` -1 (v4+) take the broker defaults
  (the broker config's ``num.partitions`` and ``default.replication.factor``);
- errors: INVALID_TOPIC_EXCEPTION (17: an illegal name or one colliding with an existing topic
  over '.'/'_'), TOPIC_ALREADY_EXISTS (36), INVALID_PARTITIONS (37: < 1), INVALID_REPLICATION_FACTOR
  (38: < 1 or more than the live brokers), INVALID_CONFIG (40: an unknown config or a bad
  value), INVALID_REQUEST (42: a topic named twice in the request: every entry of it; manual
  ``assignments`` with ``num_partitions`` or ``replication_factor`` other than -1),
  INVALID_REPLICA_ASSIGNMENT (39: manual ``assignments`` whose partition indexes are not 0, 1,
  2, ..., or that the controller refuses: see ``Controller._manual_assignment``),
  POLICY_VIOLATION (44: more than 10,000 partitions in the whole request, every entry of it, as
  Kafka's controller answers);
- v5+: a created or validated topic's partitions, replication factor and configs (as
  DescribeConfigs lists them), a refused one's an empty list; v7: its topic id (a fresh one
  when only validated, as Kafka answers; the zero UUID when refused).

A topic is answered once the controller has registered it (durably, one write and one sync),
as Kafka's controller answers once the topic is in its metadata log: its partitions' logs are
made afterwards by the admin queue's thread, in steps; until a partition's log exists it has no
leader: Metadata answers it LEADER_NOT_AVAILABLE (5), Produce, Fetch and ListOffsets
NOT_LEADER_OR_FOLLOWER (6), which clients retry. A topic of at most ``Controller.CREATE_STEP``
partitions while no other creation waits is made before its answer (one step costs about what
the registration does), so a client producing right after the answer finds its leaders.
(Kafka 3.9, asked right after creating 5,000 partitions: Produce and ListOffsets
NOT_LEADER_OR_FOLLOWER for 2.5 s and more, as here, while its Metadata already names the
leader with no error, its metadata cache learning the topic before its replica manager has
made the log; here Metadata says what is true, no leader yet, which is Kafka's answer for a
partition without a live leader.)
At most ``Controller.MAX_PENDING_PARTITIONS`` partitions wait for their logs: a topic beyond
is refused THROTTLING_QUOTA_EXCEEDED (89, with the response's ``throttle_time_ms``; Kafka's
answer when a controller mutation quota is exceeded) at v6+, and REQUEST_TIMED_OUT (7) at
v2-5, which do not know 89 (Kafka throttles those instead); nothing of it is created. Errors
(a full disk at registration too: KAFKA_STORAGE_ERROR 56, nothing registered) and
``validate_only`` are answered as before, synchronously.

Requests are parked on the server's admin queue (admin_queue.py: its bound, ``timeout_ms`` and
shutdown, each answered REQUEST_TIMED_OUT for every topic or a closed connection): the request
handler threads never wait for a creation. Thread safety: the admin queue's one thread runs
them; the controller serializes creation under its lock.
"""

from __future__ import annotations

import functools
import threading
import uuid
from collections import Counter
from datetime import timedelta
from types import ModuleType
from typing import Any

from broker_embedded.error_code import ErrorCode
from broker_embedded.errors import (
    InvalidReplicaAssignmentError,
    InvalidRequestError,
    KafkaApiError,
    KafkaLogError,
    RequestTimedOutError,
    ThrottlingQuotaExceededError,
    TopicAuthorizationFailedError,
)
from broker_embedded.server.handlers.api_context import (
    ApiContext,
    error_code,
    error_message,
    make,
    partitions_per_request,
    response_types,
)
from broker_embedded.server.handlers.describe_configs import topic_configs, would_be_configs
from broker_embedded.server.kafka_apis import KafkaApis
from broker_embedded.server.request_channel import Request
from broker_embedded.server.security.authorizer import AclOperation, ResourceType

API_KEY = 19
VERSIONS = (2, 7)
CREATE = AclOperation.CREATE
ZERO_UUID = uuid.UUID(int=0)
STRICT_QUOTA_FROM = 6  # the first version answered THROTTLING_QUOTA_EXCEEDED
THROTTLE_MS = 1000  # the throttle_time_ms of an answer with THROTTLING_QUOTA_EXCEEDED


def register(apis: KafkaApis, ctx: ApiContext) -> None:
    queue = apis.admin_queue
    queue.set_background(ctx.broker.create_step)
    respond = functools.partial(create_topics_response, ctx, stop=queue.stopping)
    apis.register(API_KEY, *VERSIONS, lambda r: queue.submit(r, respond, refused, timeout_ms(r)))


def timeout_ms(request: Request) -> int:
    """The request's ``timeout_ms`` (CreateTopics, CreatePartitions, DeleteTopics)."""
    return int(request.body.timeout.total_seconds() * 1000)


def refused(request: Request, error: KafkaApiError) -> Any:
    """The answer failing every topic of the request with ``error`` (the admin queue's)."""
    types = response_types(request)
    results = tuple(_failed(types, t.name, error) for t in request.body.topics)
    return make(types.CreateTopicsResponse, throttle_time=timedelta(0), topics=results)


def create_topics_response(
    ctx: ApiContext, request: Request, stop: threading.Event | None = None
) -> Any:
    """``stop``: set when the server stops (a creation under way stops and is undone)."""
    body, types = request.body, response_types(request)
    version = request.header.api_version
    counts = Counter(t.name for t in body.topics)
    too_many = partitions_per_request(sum(_partitions(ctx, t) for t in body.topics))
    results = []
    for t in body.topics:
        if too_many is not None:
            results.append(_failed(types, t.name, too_many))
        elif not creatable(ctx, request, t.name):
            # Kafka's controller's words for it (ControllerApis.createTopics)
            denied = TopicAuthorizationFailedError("Authorization failed.")
            results.append(_failed(types, t.name, denied))
        elif counts[t.name] > 1:
            dup = InvalidRequestError(f"topic {t.name!r} appears {counts[t.name]} times")
            results.append(_failed(types, t.name, dup))
        else:
            results.append(_create(ctx, types, t, body.validate_only, stop, version))
    throttled = any(r.error_code == ErrorCode.throttling_quota_exceeded for r in results)
    throttle_ms = THROTTLE_MS if throttled else 0
    return make(
        types.CreateTopicsResponse,
        throttle_time=timedelta(milliseconds=throttle_ms),
        topics=tuple(results),
    )


def quota_error(
    error: ThrottlingQuotaExceededError, version: int, strict_from: int
) -> KafkaApiError:
    """THROTTLING_QUOTA_EXCEEDED from version ``strict_from`` on (Kafka's strict quota), else
    REQUEST_TIMED_OUT (older clients do not know 89)."""
    if version >= strict_from:
        return error
    return RequestTimedOutError(str(error))


def creatable(ctx: ApiContext, request: Request, name: str) -> bool:
    """Create on the Cluster or on the topic (Kafka's rule)."""
    return ctx.allowed(request, CREATE, ResourceType.CLUSTER) or ctx.allowed(
        request, CREATE, ResourceType.TOPIC, name
    )


def _partitions(ctx: ApiContext, t: Any) -> int:
    """The partitions a topic entry asks for (by count, the default, or its assignments)."""
    if t.assignments:
        return len(t.assignments)
    if t.num_partitions == -1:
        return ctx.broker.config.num_partitions
    return max(t.num_partitions, 0)


def _create(
    ctx: ApiContext,
    types: ModuleType,
    t: Any,
    validate_only: bool,
    stop: threading.Event | None,
    version: int,
) -> Any:
    defaults = ctx.broker.config
    partitions = defaults.num_partitions if t.num_partitions == -1 else t.num_partitions
    factor = (
        defaults.default_replication_factor if t.replication_factor == -1 else t.replication_factor
    )
    config = {c.name: c.value for c in t.configs}
    try:
        assignment = _manual_assignment(t) if t.assignments else None
        if assignment is not None:
            partitions, factor = len(assignment), len(assignment[0])
        if validate_only:
            ctx.broker.validate_new_topic(t.name, partitions, factor, config, assignment)
            topic_id = uuid.uuid4()  # Kafka answers the id the topic would have had
        else:
            topic_id = ctx.broker.create_topic(
                t.name, partitions, factor, config, assignment, stop=stop, background=True
            ).topic_id
    except ThrottlingQuotaExceededError as e:
        return _failed(types, t.name, quota_error(e, version, STRICT_QUOTA_FROM))
    except KafkaLogError as e:
        return _failed(types, t.name, e)
    entry = getattr(types, "CreatableTopicConfigs", None)  # v5+
    if entry is None:
        listed = []
    elif validate_only:
        listed = would_be_configs(ctx, t.name, {k: str(v) for k, v in config.items()})
    else:
        listed = topic_configs(ctx, t.name)
    configs = tuple(
        make(
            entry,
            name=e.name,
            value=e.value,
            read_only=e.read_only,
            config_source=e.source,
            is_sensitive=False,
        )
        for e in listed
    )
    return make(
        types.CreatableTopicResult,
        name=t.name,
        topic_id=topic_id,
        error_code=ErrorCode.none,
        error_message=None,
        topic_config_error_code=ErrorCode.none,
        num_partitions=partitions,
        replication_factor=factor,
        configs=configs,
    )


def _manual_assignment(t: Any) -> list[tuple[int, ...]]:
    """The replicas of each partition of a manual assignment, in partition order (Kafka's
    request checks; the controller checks the brokers)."""
    for field, value in (
        ("replication factor", t.replication_factor),
        ("numPartitions", t.num_partitions),
    ):
        if value != -1:
            raise InvalidRequestError(
                f"topic {t.name!r}: a manual partition assignment was specified, but {field} "
                "was not set to -1"
            )
    for expected, a in enumerate(t.assignments):
        if a.partition_index != expected:
            raise InvalidReplicaAssignmentError(
                f"topic {t.name!r}: partitions should be a consecutive 0-based integer sequence "
                f"(partition {a.partition_index} where {expected} was expected)"
            )
    return [tuple(int(b) for b in a.broker_ids) for a in t.assignments]


def _failed(types: ModuleType, name: str, error: BaseException) -> Any:
    return make(
        types.CreatableTopicResult,
        name=name,
        topic_id=ZERO_UUID,
        error_code=error_code(error),
        error_message=error_message(error),
        topic_config_error_code=ErrorCode.none,
        num_partitions=-1,
        replication_factor=-1,
        configs=(),
    )
