"""OffsetCommit (API key 8, versions 2-10) and OffsetFetch (API key 9, versions 1-10), answered
by the server's :class:`GroupCoordinator` (groups.py registers both with it).

OffsetCommit: a partition that does not exist is UNKNOWN_TOPIC_OR_PARTITION (3) (an unknown
topic id, v10, UNKNOWN_TOPIC_ID 100), metadata over ``offset.metadata.max.bytes`` (4096, Kafka's
default) OFFSET_METADATA_TOO_LARGE (12); the other partitions go to the coordinator, which
checks the member and generation as Kafka does (a commit with generation -1 and no member id is
accepted while the group is Empty, creating it if needed, as the "simple" consumer with
``assign()``; otherwise UNKNOWN_MEMBER_ID 25, ILLEGAL_GENERATION 22, FENCED_INSTANCE_ID 82,
REBALANCE_IN_PROGRESS 27 while the group completes a rebalance) and stores them through its
group store; its error, if any, is every such partition's. Each stored offset carries the
commit time (ms since the epoch).

TxnOffsetCommit (API key 28, versions 0-4): the transaction coordinator must know the
producer's id and epoch (INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED); the offsets are then
written at once to the group's ``__consumer_offsets`` partition as a transactional batch of that
producer (acks=all) and stay pending until the transaction's marker there decides them (the
group coordinator's ``on_txn_marker``).

OffsetFetch answers the committed offset, leader epoch (v5+) and metadata of each partition, or
offset -1 with metadata "" and no error for a partition with none (every partition of an
unknown topic too), as Kafka does; a null topic list (v2+) means every partition with a
committed offset. Pending transactional offsets are not returned; with ``require_stable``
(v7+) a partition that has one answers offset -1 with UNSTABLE_OFFSET_COMMIT (88), as Kafka.
v8+ batch groups; v10 names topics by id. A coordinator that is shut down answers
COORDINATOR_NOT_AVAILABLE (15) for the group.

Limits: as the coordinator's store bounds committed partitions (group_store.py).
Authorization (with an authorizer, as Kafka's ``KafkaApis``):
- OffsetCommit: Read on the group (GROUP_AUTHORIZATION_FAILED, 30, for every partition) and
  Read on each topic (TOPIC_AUTHORIZATION_FAILED, 29, for its partitions).
- TxnOffsetCommit: Write on the transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED, 53,
  for every partition), then Read on the group (30 for every partition), then Read on each
  topic (29 for its partitions), all before the producer or the partitions are looked at.
- OffsetFetch: Describe on the group (30 for the group, no topics); a topic the principal may
  not Describe is never read: named in the request, each of its partitions answers 29 with
  offset -1, after the allowed topics; in the "every topic" form it is left out silently.
A refused partition commits nothing and reads nothing.

Thread safety: no state here; the coordinator has its locks.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Iterable, Mapping
from datetime import timedelta
from types import ModuleType
from typing import TYPE_CHECKING, Any

from broker_embedded.broker import topic_partition
from broker_embedded.coordinator.group_metadata import OffsetAndMetadata, now_ms
from broker_embedded.coordinator.group_metadata_manager import coordinator_error
from broker_embedded.errors import (
    KafkaApiError,
    OffsetMetadataTooLargeError,
    TopicAuthorizationFailedError,
    UnknownTopicIdError,
)
from broker_embedded.server.handlers.api_context import (
    ApiContext,
    error_code,
    make,
    response_types,
)
from broker_embedded.server.kafka_apis import KafkaApis
from broker_embedded.server.request_channel import Request
from broker_embedded.server.security.authorizer import AclOperation, ResourceType

if TYPE_CHECKING:
    from broker_embedded.coordinator.group_coordinator import GroupCoordinator

OFFSET_COMMIT_KEY, OFFSET_COMMIT_VERSIONS = 8, (2, 10)
OFFSET_FETCH_KEY, OFFSET_FETCH_VERSIONS = 9, (1, 10)
TXN_OFFSET_COMMIT_KEY, TXN_OFFSET_COMMIT_VERSIONS = 28, (0, 4)
MAX_METADATA_BYTES = 4096
FIRST_BATCHED_FETCH = 8
FIRST_TOPIC_ID_VERSION = 10
NO_OFFSET = OffsetAndMetadata(-1, -1, "")
Key = tuple[str, int]  # topic, partition


def register(apis: KafkaApis, ctx: ApiContext, coordinator: GroupCoordinator) -> None:
    """Serve OffsetCommit and OffsetFetch with ``coordinator`` (groups.register calls this)."""
    commit = functools.partial(offset_commit_response, ctx, coordinator)
    apis.register_responder(OFFSET_COMMIT_KEY, *OFFSET_COMMIT_VERSIONS, commit)
    fetch = functools.partial(offset_fetch_response, ctx, coordinator)
    apis.register_responder(OFFSET_FETCH_KEY, *OFFSET_FETCH_VERSIONS, fetch)
    txn_commit = functools.partial(txn_offset_commit_response, ctx, coordinator)
    apis.register_responder(TXN_OFFSET_COMMIT_KEY, *TXN_OFFSET_COMMIT_VERSIONS, txn_commit)


def _names(ctx: ApiContext, version: int) -> Mapping[uuid.UUID, str]:
    return ctx.topic_names_by_id() if version >= FIRST_TOPIC_ID_VERSION else {}


def _name(topic: Any, names: Mapping[uuid.UUID, str]) -> str | None:
    return names.get(topic.topic_id) if hasattr(topic, "topic_id") else topic.name


# -- OffsetCommit ----------------------------------------------------------------------------


def offset_commit_response(ctx: ApiContext, coordinator: GroupCoordinator, request: Request) -> Any:
    body, types = request.body, response_types(request)
    names = _names(ctx, request.header.api_version)
    errors: dict[tuple[int, int], KafkaApiError | None] = {}
    offsets: dict[Key, OffsetAndMetadata] = {}
    slots: dict[Key, list[tuple[int, int]]] = {}
    timestamp = now_ms()
    for i, t in enumerate(body.topics):
        name = _name(t, names)
        for j, p in enumerate(t.partitions):
            error = _check(ctx, body.group_id, name, t, p) or (
                None if name is None else ctx.topic_refusal(request, AclOperation.READ, name)
            )
            errors[(i, j)] = error
            if error is None:
                assert name is not None
                key = (name, p.partition_index)
                offsets[key] = OffsetAndMetadata(
                    p.committed_offset,
                    getattr(p, "committed_leader_epoch", -1),
                    p.committed_metadata or "",
                    timestamp,
                )
                slots.setdefault(key, []).append((i, j))
    group_error = ctx.group_refusal(request, AclOperation.READ, body.group_id) or coordinator_error(
        coordinator.store, body.group_id, ctx.broker_id
    )
    if group_error is not None:
        errors = dict.fromkeys(errors, group_error)
    else:
        group_error = coordinator.commit_offsets(
            body.group_id,
            body.member_id,
            getattr(body, "group_instance_id", None),
            body.generation_id_or_member_epoch,
            offsets,
        )
    if group_error is not None:
        for positions in slots.values():
            for pos in positions:
                errors[pos] = group_error
    topics = []
    for i, t in enumerate(body.topics):
        parts = tuple(
            make(
                types.OffsetCommitResponsePartition,
                partition_index=p.partition_index,
                error_code=error_code(errors[(i, j)]),
            )
            for j, p in enumerate(t.partitions)
        )
        topics.append(
            make(
                types.OffsetCommitResponseTopic,
                name=_name(t, names),
                topic_id=getattr(t, "topic_id", None),
                partitions=parts,
            )
        )
    return make(types.OffsetCommitResponse, throttle_time=timedelta(0), topics=tuple(topics))


def txn_offset_commit_response(
    ctx: ApiContext, coordinator: GroupCoordinator, request: Request
) -> Any:
    """TxnOffsetCommit (module docstring)."""
    body, types = request.body, response_types(request)
    refusal = ctx.txn_refusal(request, body.transactional_id) or ctx.group_refusal(
        request, AclOperation.READ, body.group_id
    )
    error = (
        refusal
        or _producer_error(ctx, body)
        or coordinator_error(coordinator.store, body.group_id, ctx.broker_id)
    )
    offsets: dict[Key, OffsetAndMetadata] = {}
    errors: dict[Key, KafkaApiError | None] = {}
    timestamp = now_ms()
    for t in body.topics:
        topic_error = refusal or ctx.topic_refusal(request, AclOperation.READ, t.name) or error
        for p in t.partitions:
            key = (t.name, p.partition_index)
            errors[key] = topic_error or _check(ctx, body.group_id, t.name, t, p)
            if errors[key] is None:
                offsets[key] = OffsetAndMetadata(
                    p.committed_offset,
                    getattr(p, "committed_leader_epoch", -1),
                    p.committed_metadata or "",
                    timestamp,
                )
    if offsets:
        group_error = coordinator.commit_txn_offsets(
            body.group_id,
            (body.producer_id, body.producer_epoch),
            getattr(body, "member_id", ""),
            getattr(body, "group_instance_id", None),
            getattr(body, "generation_id", -1),
            offsets,
        )
        for key in offsets:
            errors[key] = group_error
    topics = tuple(
        make(
            types.TxnOffsetCommitResponseTopic,
            name=t.name,
            partitions=tuple(
                make(
                    types.TxnOffsetCommitResponsePartition,
                    partition_index=p.partition_index,
                    error_code=error_code(errors[(t.name, p.partition_index)]),
                )
                for p in t.partitions
            ),
        )
        for t in body.topics
    )
    return make(types.TxnOffsetCommitResponse, throttle_time=timedelta(0), topics=topics)


def _producer_error(ctx: ApiContext, body: Any) -> KafkaApiError | None:
    """The transaction coordinator's error for the commit's producer id and epoch, or None."""
    try:
        ctx.broker.controller.transaction_coordinator.check_producer(
            body.transactional_id, body.producer_id, body.producer_epoch
        )
    except KafkaApiError as e:
        return e
    return None


def _check(
    ctx: ApiContext, group: str, name: str | None, topic: Any, p: Any
) -> KafkaApiError | None:
    """The error of one partition of a commit before the group sees it, or None."""
    if name is None:
        return UnknownTopicIdError(f"group {group!r}: no topic has id {topic.topic_id}")
    try:
        tp = topic_partition(name, p.partition_index)
        ctx.broker.replica_manager.partition(tp)  # exists (led here or not)
    except KafkaApiError as e:
        return e
    size = len((p.committed_metadata or "").encode())
    if size > MAX_METADATA_BYTES:
        return OffsetMetadataTooLargeError(
            f"group {group!r} {tp}: metadata of {size} bytes exceeds "
            f"offset.metadata.max.bytes {MAX_METADATA_BYTES}"
        )
    return None


# -- OffsetFetch -----------------------------------------------------------------------------


def offset_fetch_response(ctx: ApiContext, coordinator: GroupCoordinator, request: Request) -> Any:
    body, types, version = request.body, response_types(request), request.header.api_version
    names = _names(ctx, version)
    if version < FIRST_BATCHED_FETCH:
        topics, error = _fetched_topics(
            ctx,
            types,
            coordinator,
            body.group_id,
            body.topics,
            names,
            getattr(body, "require_stable", False),
            request,
        )
        return make(
            types.OffsetFetchResponse,
            throttle_time=timedelta(0),
            topics=topics,
            error_code=error_code(error),
        )
    groups = []
    for g in body.groups:
        topics, error = _fetched_topics(
            ctx, types, coordinator, g.group_id, g.topics, names, body.require_stable, request
        )
        groups.append(
            make(
                types.OffsetFetchResponseGroup,
                group_id=g.group_id,
                error_code=error_code(error),
                topics=topics,
            )
        )
    return make(types.OffsetFetchResponse, throttle_time=timedelta(0), groups=tuple(groups))


def _fetched_topics(
    ctx: ApiContext,
    types: ModuleType,
    coordinator: GroupCoordinator,
    group: str,
    topics: Iterable[Any] | None,
    names: Mapping[uuid.UUID, str],
    require_stable: bool,
    request: Request,
) -> tuple[tuple[Any, ...], KafkaApiError | None]:
    topic_type = getattr(types, "OffsetFetchResponseTopics", None) or types.OffsetFetchResponseTopic
    part_type = (
        getattr(types, "OffsetFetchResponsePartitions", None) or types.OffsetFetchResponsePartition
    )

    def describable(name: str | None) -> bool:
        return name is None or ctx.allowed(request, AclOperation.DESCRIBE, ResourceType.TOPIC, name)

    wanted: dict[tuple[str | None, Any], list[int]] = {}
    refused: dict[tuple[str | None, Any], list[int]] = {}
    partitions = None
    if topics is not None:
        for t in topics:
            key = (_name(t, names), getattr(t, "topic_id", None))
            (wanted if describable(key[0]) else refused)[key] = list(t.partition_indexes)
        partitions = [(n, p) for (n, _), ps in wanted.items() if n is not None for p in ps]
    try:
        error = ctx.group_refusal(request, AclOperation.DESCRIBE, group) or coordinator_error(
            coordinator.store, group, ctx.broker_id
        )
        if error is not None:
            raise error
        committed = coordinator.fetch_offsets(group, partitions, require_stable)
    except KafkaApiError as e:
        return (), e
    if topics is None:
        for t, p in sorted(committed):
            if describable(t):
                wanted.setdefault((t, None), []).append(p)
    by_name = {v: k for k, v in names.items()}
    denied = TopicAuthorizationFailedError(f"{request.principal} may not Describe the topic")
    out = []
    for answers, topic_error in ((wanted, None), (refused, denied)):
        for (name, topic_id), parts in answers.items():
            entries = _partition_answers(part_type, name, parts, committed, topic_error)
            out.append(
                make(
                    topic_type,
                    name=name,
                    topic_id=topic_id or by_name.get(name),
                    partitions=entries,
                )
            )
    return tuple(out), None


def _partition_answers(
    part_type: type,
    name: str | None,
    parts: list[int],
    committed: Mapping[Key, Any],
    topic_error: KafkaApiError | None,
) -> tuple[Any, ...]:
    """One topic's OffsetFetch partitions: each committed offset (or none), or the error."""
    entries = []
    for p in parts:
        c = committed.get((name, p), NO_OFFSET) if name is not None else NO_OFFSET
        error, c = (c, NO_OFFSET) if isinstance(c, KafkaApiError) else (topic_error, c)
        entries.append(
            make(
                part_type,
                partition_index=p,
                committed_offset=c.offset,
                committed_leader_epoch=c.leader_epoch,
                metadata=c.metadata,
                error_code=error_code(error),
            )
        )
    return tuple(entries)
