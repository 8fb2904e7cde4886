"""OffsetCommit (API key 8, versions 2-10) and OffsetFetch (API key 9, versions 1-10), as far
as a client needs them to start: consumer groups (JoinGroup, SyncGroup, ...) are the next
issue, and so is storing offsets in ``__consumer_offsets``.

Committed offsets live in memory only (:class:`OffsetStore`), for the life of the server: a
restart forgets them. A commit outside any group generation (generation -1, the "simple"
consumer with ``assign()``) is kept; one with a generation >= 0 names a group membership no one
can have here and is ILLEGAL_GENERATION (22), as Kafka answers for a group it does not know.
Per partition: UNKNOWN_TOPIC_OR_PARTITION (3) for a partition that does not exist,
OFFSET_METADATA_TOO_LARGE (12) for metadata over ``offset.metadata.max.bytes`` (4096, Kafka's
default). OffsetFetch answers the committed offset, leader epoch (v5+) and metadata of each
partition, or offset -1 with metadata "" and no error for a partition with none (every
partition of an unknown topic too), as Kafka does; a null topic list (v2+) means every
partition with a committed offset. v8+ batch groups; v10 names topics by id.

Limit: at most ``MAX_OFFSETS`` (1,000,000) committed partitions over all groups; a commit of a
new partition beyond it is UNKNOWN_SERVER_ERROR (-1) with a message saying so (updates of kept
partitions still succeed).

Thread safety: the store's lock guards its map; handlers on any thread share one store.
"""

from __future__ import annotations

import functools
import threading
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from types import ModuleType
from typing import Any

from broker_embedded.broker import topic_partition
from broker_embedded.errors import (
    IllegalGenerationError,
    KafkaApiError,
    OffsetMetadataTooLargeError,
    UnknownTopicIdError,
)
from broker_embedded.server.handlers.api_context import (
    NONE,
    ApiContext,
    error_code,
    make,
    response_types,
)
from broker_embedded.server.kafka_apis import KafkaApis
from broker_embedded.server.request_channel import Request

OFFSET_COMMIT_KEY, OFFSET_COMMIT_VERSIONS = 8, (2, 10)
OFFSET_FETCH_KEY, OFFSET_FETCH_VERSIONS = 9, (1, 10)
MAX_OFFSETS = 1_000_000
MAX_METADATA_BYTES = 4096
FIRST_BATCHED_FETCH = 8
FIRST_TOPIC_ID_VERSION = 10


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    offset: int
    leader_epoch: int
    metadata: str


NO_OFFSET = CommittedOffset(-1, -1, "")
Key = tuple[str, str, int]  # group, topic, partition


class OffsetStore:
    """Committed offsets by (group, topic, partition), bounded by ``max_offsets``."""

    def __init__(self, max_offsets: int = MAX_OFFSETS) -> None:
        self.max_offsets = max_offsets
        self._lock = threading.Lock()
        self._offsets: dict[Key, CommittedOffset] = {}

    def commit(self, key: Key, value: CommittedOffset) -> KafkaApiError | None:
        with self._lock:
            if key not in self._offsets and len(self._offsets) >= self.max_offsets:
                return KafkaApiError(
                    f"group {key[0]!r} topic {key[1]!r} partition {key[2]}: the in-memory "
                    f"offset store holds its limit of {self.max_offsets} partitions"
                )
            self._offsets[key] = value
            return None

    def get(self, key: Key) -> CommittedOffset:
        with self._lock:
            return self._offsets.get(key, NO_OFFSET)

    def group_partitions(self, group: str) -> list[tuple[str, int]]:
        with self._lock:
            return sorted((t, p) for g, t, p in self._offsets if g == group)


def register(apis: KafkaApis, ctx: ApiContext, store: OffsetStore | None = None) -> None:
    offsets = store or OffsetStore()
    commit = functools.partial(offset_commit_response, ctx, offsets)
    apis.register_responder(OFFSET_COMMIT_KEY, *OFFSET_COMMIT_VERSIONS, commit)
    fetch = functools.partial(offset_fetch_response, ctx, offsets)
    apis.register_responder(OFFSET_FETCH_KEY, *OFFSET_FETCH_VERSIONS, fetch)


def _names(ctx: ApiContext, version: int) -> Mapping[uuid.UUID, str]:
    return ctx.topic_names_by_id() if version >= FIRST_TOPIC_ID_VERSION else {}


def _name(topic: Any, names: Mapping[uuid.UUID, str]) -> str | None:
    return names.get(topic.topic_id) if hasattr(topic, "topic_id") else topic.name


# -- OffsetCommit ----------------------------------------------------------------------------


def offset_commit_response(ctx: ApiContext, store: OffsetStore, request: Request) -> Any:
    body, types = request.body, response_types(request)
    names = _names(ctx, request.header.api_version)
    generation_error = None
    if body.generation_id_or_member_epoch >= 0:
        generation_error = IllegalGenerationError(
            f"group {body.group_id!r}: generation {body.generation_id_or_member_epoch} of member "
            f"{body.member_id!r} is unknown (this server has no consumer groups yet)"
        )
    topics = []
    for t in body.topics:
        name = _name(t, names)
        parts = tuple(
            make(types.OffsetCommitResponsePartition, partition_index=p.partition_index,
                 error_code=error_code(generation_error
                                       or _commit(ctx, store, body.group_id, name, t, p)))
            for p in t.partitions
        )  # fmt: skip
        topics.append(make(types.OffsetCommitResponseTopic, name=name,
                           topic_id=getattr(t, "topic_id", None), partitions=parts))  # fmt: skip
    return make(types.OffsetCommitResponse, throttle_time=timedelta(0), topics=tuple(topics))


def _commit(
    ctx: ApiContext, store: OffsetStore, group: str, name: str | None, topic: Any, p: Any
) -> KafkaApiError | None:
    if name is None:
        return UnknownTopicIdError(f"group {group!r}: no topic has id {topic.topic_id}")
    try:
        tp = topic_partition(name, p.partition_index)
        ctx.broker.replica_manager.partition(tp)  # exists (led here or not)
    except KafkaApiError as e:
        return e
    metadata = p.committed_metadata or ""
    if len(metadata.encode()) > MAX_METADATA_BYTES:
        return OffsetMetadataTooLargeError(
            f"group {group!r} {tp}: metadata of {len(metadata.encode())} bytes exceeds "
            f"offset.metadata.max.bytes {MAX_METADATA_BYTES}"
        )
    epoch = getattr(p, "committed_leader_epoch", -1)
    return store.commit((group, tp.topic, tp.partition),
                        CommittedOffset(p.committed_offset, epoch, metadata))  # fmt: skip


# -- OffsetFetch -----------------------------------------------------------------------------


def offset_fetch_response(ctx: ApiContext, store: OffsetStore, request: Request) -> Any:
    body, types, version = request.body, response_types(request), request.header.api_version
    names = _names(ctx, version)
    if version < FIRST_BATCHED_FETCH:
        topics = _fetched_topics(types, store, body.group_id, body.topics, names)
        return make(types.OffsetFetchResponse, throttle_time=timedelta(0), topics=topics,
                    error_code=NONE)  # fmt: skip
    groups = tuple(
        make(types.OffsetFetchResponseGroup, group_id=g.group_id, error_code=NONE,
             topics=_fetched_topics(types, store, g.group_id, g.topics, names))
        for g in body.groups
    )  # fmt: skip
    return make(types.OffsetFetchResponse, throttle_time=timedelta(0), groups=groups)


def _fetched_topics(
    types: ModuleType,
    store: OffsetStore,
    group: str,
    topics: Iterable[Any] | None,
    names: Mapping[uuid.UUID, str],
) -> tuple[Any, ...]:
    topic_type = getattr(types, "OffsetFetchResponseTopics", None) or types.OffsetFetchResponseTopic
    part_type = (
        getattr(types, "OffsetFetchResponsePartitions", None) or types.OffsetFetchResponsePartition
    )
    if topics is None:
        wanted: dict[tuple[str | None, Any], list[int]] = {}
        for t, p in store.group_partitions(group):
            wanted.setdefault((t, None), []).append(p)
    else:
        wanted = {(_name(t, names), getattr(t, "topic_id", None)): list(t.partition_indexes)
                  for t in topics}  # fmt: skip
    by_name = {v: k for k, v in names.items()}
    out = []
    for (name, topic_id), partitions in wanted.items():
        parts = []
        for p in partitions:
            c = store.get((group, name, p)) if name is not None else NO_OFFSET
            parts.append(make(part_type, partition_index=p, committed_offset=c.offset,
                              committed_leader_epoch=c.leader_epoch, metadata=c.metadata,
                              error_code=NONE))  # fmt: skip
        out.append(make(topic_type, name=name, topic_id=topic_id or by_name.get(name),
                        partitions=tuple(parts)))  # fmt: skip
    return tuple(out)
