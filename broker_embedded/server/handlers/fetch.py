"""The Fetch API (key 1, v4-v18), as Kafka's ``KafkaApis.handleFetchRequest``.

Path of one request, never blocking a request handler thread on data:

1. The request becomes a :class:`FetchSessionRequest` (fetch_session.py): partitions by topic
   name (< v13) or topic id (v13+, named from the broker's topics; an unknown id has no name),
   the session id and epoch (v7+), the forgotten topics. :class:`FetchManager` turns it into a
   context: a session error (FETCH_SESSION_ID_NOT_FOUND 70, INVALID_FETCH_SESSION_EPOCH 71,
   FETCH_SESSION_TOPIC_ID_ERROR 106) is answered at once with that top-level error and no
   partitions, and the client falls back to a full fetch.
2. The context's partitions are read by the replica manager
   (``ReplicaManager.fetch_messages_async``, zero-copy): KIP-74 byte limits
   (``min(max_bytes, fetch.max.bytes)``, each partition's max bytes, at least one whole batch
   for the first partition with data), the isolation level (read_committed: up to the last
   stable offset, with the aborted transactions), leader epoch checks. A partition whose topic
   id is unknown gets UNKNOWN_TOPIC_ID (100) and an illegal name or negative partition
   UNKNOWN_TOPIC_OR_PARTITION (3) without a read. When fewer than ``min_bytes`` are there, the
   fetch waits in the fetch purgatory; whoever completes it (an append, a high watermark move,
   the reaper at ``max_wait_ms``) calls back here.
3. The callback gives the results to the context (``update_and_generate_response``: an
   incremental fetch keeps only the partitions that changed), pins the record regions of the
   partitions sent (region_pins.py) and sends the response in parts: kio-encoded headers around
   each partition's records, which go from the segment file to the socket with ``sendfile``
   (fetch_response.py). The pins are released when the response is written (``on_done``).

Wire rules as Kafka's: a partition with an error carries high watermark, last stable offset and
log start offset -1 and empty records; from v16 (KIP-951, as Kafka) a partition answered
NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH carries its ``current_leader`` (leader id and epoch
from the controller) and the response the live leaders' ``node_endpoints`` (the tag exists
from v12, Kafka fills it from v16); read_uncommitted responses carry null aborted
transactions; the preferred read replica is -1 (no rack-aware reads); throttle time 0. A request
with a replica id >= 0 (a follower) gets NOT_LEADER_OR_FOLLOWER for every partition: the brokers
of this project replicate in-process, no follower fetches over the wire. An isolation level other
than 0 or 1 is INVALID_REQUEST (the connection is closed).

Authorization (with an authorizer configured): a consumer needs Read on each topic, a follower
ClusterAction on the Cluster; a partition refused is answered TOPIC_AUTHORIZATION_FAILED (29)
and not read, the others get their data, as Kafka's ``handleFetchRequest``.

Limits: the session cache has ``max.incremental.fetch.session.cache.slots`` sessions
(fetch_session.py has its own partition bounds); at most ``fetch.max.pinned.regions`` descriptors
(or the handler's ``max_pinned``) are held by responses in flight; beyond, regions are copied
within ``queued.max.response.bytes`` (``copy_budget``) of unsent copies, else sent from their
files opened again per write (region_pins.py); a response is at most ``fetch.max.bytes`` plus
one batch (KIP-74). A fetch waiting in the purgatory is dropped when its client closes the
connection (``RequestChannel.watch_close``). A failure inside the callback (a bug) is logged and
closes the connection, so the client never waits forever.

Metrics: with the broker's ``topic_stats`` set, each partition of the context is counted once
when the response is built (total and failed fetch requests, records bytes out), and
``apis.fetch_sessions`` is the session cache the metrics endpoint reads.

Thread safety: the handler keeps no per-request state outside the request's own objects; the
session cache and the pins have their own locks.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from broker_embedded.broker import Broker, topic_partition
from broker_embedded.common.fetch_request import (
    FetchRequest,
    FetchResponse,
    PartitionFetch,
    PartitionFetchResult,
)
from broker_embedded.error_code import ErrorCode
from broker_embedded.errors import (
    KafkaApiError,
    NotLeaderOrFollowerError,
    TopicAuthorizationFailedError,
    UnknownTopicOrPartitionError,
)
from broker_embedded.replica_manager.broker_topic_stats import BrokerTopicStats
from broker_embedded.server.fetch_session import (
    LEGACY,
    TOPIC_ID_MIN_VERSION,
    AbortedTransaction,
    FetchContext,
    FetchManager,
    FetchMetadata,
    FetchRequestPartition,
    FetchResponsePartition,
    FetchSessionCache,
    FetchSessionRequest,
    SessionErrorContext,
    TopicIdPartition,
)
from broker_embedded.server.handlers.api_context import ApiContext, TopicNames
from broker_embedded.server.handlers.fetch_response import (
    PartitionResponse,
    fetch_response_parts,
    group_by_topic,
)
from broker_embedded.server.handlers.metadata import LeaderNode, current_leader, leader_nodes
from broker_embedded.server.handlers.region_pins import Held, RegionPins
from broker_embedded.server.kafka_apis import KafkaApis
from broker_embedded.server.protocol import InvalidRequestError
from broker_embedded.server.request_channel import MemoryPool, Request
from broker_embedded.server.security.authorizer import AclOperation, ResourceType
from broker_embedded.storage.fetch_data_info import IsolationLevel, SegmentRegion

log = logging.getLogger(__name__)

FETCH_KEY = 1
FETCH_VERSIONS = (4, 18)
SESSION_VERSION = 7  # Fetch v7+: session id, epoch and forgotten topics (KIP-227)
REPLICA_STATE_VERSION = 15  # Fetch v15+: the replica id moved into replica_state (KIP-903)
CURRENT_LEADER_VERSION = 16  # Fetch v16+: current_leader and node_endpoints filled (KIP-951)
_LEADER_ERRORS = frozenset((ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch))

Records = bytes | SegmentRegion


@dataclass(frozen=True, slots=True)
class _Slot:
    """One partition of the context: its replica-manager fetch, or the error it gets unread."""

    tip: TopicIdPartition
    fetch: PartitionFetch | None
    error: int = ErrorCode.none


class FetchApi:
    """The Fetch handler of one broker; see the module docstring."""

    def __init__(
        self,
        broker: Broker,
        apis: KafkaApis,
        *,
        max_pinned: int | None = None,
        copy_budget: int | None = None,
        manager: FetchManager | None = None,
        context: ApiContext | None = None,
    ) -> None:
        self.broker = broker
        self.apis = apis
        self.context = context
        slots = broker.config.max_incremental_fetch_session_cache_slots
        self.manager = manager or FetchManager(FetchSessionCache(max_entries=slots))
        if max_pinned is None:
            max_pinned = broker.config.fetch_max_pinned_regions
        if copy_budget is None:
            copy_budget = broker.config.queued_max_response_bytes
        self.pins = RegionPins(max_pinned, MemoryPool(copy_budget))

    # -- request ----------------------------------------------------------------------------------

    def handle(self, request: Request) -> None:
        body, version = request.body, request.header.api_version
        isolation = _isolation(body, request)
        names = self._topic_names() if version >= TOPIC_ID_MIN_VERSION else {}
        context: FetchContext[Records] = self.manager.new_context(
            session_request(body, version, names), names
        )
        if isinstance(context, SessionErrorContext):
            self._send(request, context, {})
            return
        replica_id = _replica_id(body, version)
        refused = self._refusal(request, replica_id)
        slots = [self._slot(tip, rp, replica_id, refused) for tip, rp in context.partitions]
        fetches = tuple(s.fetch for s in slots if s.fetch is not None)
        if not fetches:
            self._complete(request, context, slots, FetchResponse(()))
            return
        fetch = FetchRequest(
            fetches,
            max_wait_ms=max(0, int(body.max_wait.total_seconds() * 1000)),
            min_bytes=body.min_bytes,
            max_bytes=body.max_bytes,
            isolation_level=isolation,
        )
        waiting = self.broker.replica_manager.fetch_messages_async(
            fetch, lambda r: self._complete(request, context, slots, r), zero_copy=True
        )
        if waiting is not None:  # dropped if the client closes while it waits
            self.apis.channel.watch_close(request, waiting)

    def _topic_names(self) -> TopicNames:
        return TopicNames(self.broker)

    def _refusal(self, request: Request, replica_id: int) -> Callable[[str], bool] | None:
        """Is a topic refused to this request (None: authorization off)? A follower needs
        ClusterAction on the Cluster, a consumer Read on each topic."""
        ctx = self.context
        if ctx is None or ctx.authorizer is None:
            return None
        if replica_id >= 0:
            denied = not ctx.allowed(request, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER)
            return lambda _topic: denied
        return lambda topic: not ctx.allowed(request, AclOperation.READ, ResourceType.TOPIC, topic)

    @staticmethod
    def _slot(
        tip: TopicIdPartition,
        rp: FetchRequestPartition,
        replica_id: int,
        refused: Callable[[str], bool] | None = None,
    ) -> _Slot:
        if tip.topic is not None and refused is not None and refused(tip.topic):
            return _Slot(tip, None, TopicAuthorizationFailedError.code)
        if replica_id >= 0:
            return _Slot(tip, None, NotLeaderOrFollowerError.code)
        if tip.topic is None:
            return _Slot(tip, None, ErrorCode.unknown_topic_id)
        try:
            tp = topic_partition(tip.topic, tip.partition)
        except UnknownTopicOrPartitionError as e:
            return _Slot(tip, None, e.code)
        return _Slot(
            tip, PartitionFetch(tp, rp.fetch_offset, rp.max_bytes, rp.current_leader_epoch)
        )

    # -- response ---------------------------------------------------------------------------------

    def _complete(
        self,
        request: Request,
        context: FetchContext[Records],
        slots: list[_Slot],
        result: FetchResponse | Exception,
    ) -> None:
        """The replica manager's answer (any thread): build and send the response."""
        try:
            results = _partition_results(slots, result)
            stats = self.broker.replica_manager.topic_stats
            if stats is not None:
                _count(stats, results)
            self._send(request, context, results)
        except Exception as e:
            log.exception("Fetch response for %s failed", request.client)
            self.apis.channel.close_connection(request, f"internal error in Fetch: {e!r}")

    def _send(
        self,
        request: Request,
        context: FetchContext[Records],
        results: Mapping[TopicIdPartition, FetchResponsePartition[Records]],
    ) -> None:
        answer = context.update_and_generate_response(results)
        version = request.header.api_version
        leaders: dict[TopicIdPartition, LeaderNode] = {}
        if version >= CURRENT_LEADER_VERSION:
            leaders = {
                tip: self._leader(tip)
                for tip, p in answer.partitions
                if p.error_code in _LEADER_ERRORS
            }
        held = Held()
        try:
            wire = [
                (
                    _wire_topic(tip, version),
                    self._wire_partition(tip.partition, p, held, leaders.get(tip)),
                )
                for tip, p in answer.partitions
            ]
            parts = fetch_response_parts(
                request.header,
                group_by_topic(wire),
                error_code=answer.error_code,
                session_id=answer.session_id,
                throttle_time_ms=answer.throttle_time_ms,
                node_endpoints=leader_nodes(leaders.values()),
            )
        except BaseException:
            self.pins.release(held)
            raise
        self.apis.send_frame_parts(request, parts, on_done=lambda: self.pins.release(held))

    def _leader(self, tip: TopicIdPartition) -> LeaderNode:
        if self.context is None or tip.topic is None:
            return LeaderNode()
        return current_leader(self.context, tip.topic, tip.partition)

    def _wire_partition(
        self,
        partition: int,
        p: FetchResponsePartition[Records],
        held: Held,
        leader: LeaderNode | None,
    ) -> PartitionResponse:
        records: Any = p.records if p.records is not None else b""
        if isinstance(records, SegmentRegion):
            records = self.pins.pin(records, held)
            if records is None:
                records = b""  # the file changed since the read: the client fetches again
        aborted = p.aborted_transactions
        return PartitionResponse(
            partition,
            p.error_code,
            p.high_watermark,
            p.last_stable_offset,
            p.log_start_offset,
            None if aborted is None else tuple((a.producer_id, a.first_offset) for a in aborted),
            p.preferred_read_replica,
            records,
            None if leader is None else (leader.leader_id, leader.leader_epoch),
        )


def _partition_results(
    slots: list[_Slot], result: FetchResponse | Exception
) -> dict[TopicIdPartition, FetchResponsePartition[Records]]:
    """The session layer's view of each slot's outcome, in the context's order."""
    if isinstance(result, Exception):
        if not isinstance(result, KafkaApiError):
            log.error("Fetch read failed: %r", result)
        code = result.code if isinstance(result, KafkaApiError) else ErrorCode.unknown_server_error
        return {s.tip: FetchResponsePartition(error_code=s.error or code) for s in slots}
    read = iter(result.partitions)
    out: dict[TopicIdPartition, FetchResponsePartition[Records]] = {}
    for s in slots:
        if s.fetch is None:
            out[s.tip] = _refused(s.error)
        else:
            out[s.tip] = _session_partition(next(read))
    return out


# The errors Kafka's KafkaApis finds before reading (an unknown topic, partition or topic id, a
# topic not authorized): its answer to them has an empty aborted transactions list, the
# answer to a read's error a null one (FetchResponse.partitionResponse).
_BEFORE_READ = frozenset(
    (
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.unknown_topic_id,
        ErrorCode.topic_authorization_failed,
    )
)


def _refused(code: int) -> FetchResponsePartition[Records]:
    """A partition's error answer: offsets -1, as Kafka's."""
    aborted = () if code in _BEFORE_READ else None
    return FetchResponsePartition(error_code=code, aborted_transactions=aborted)


def _session_partition(r: PartitionFetchResult) -> FetchResponsePartition[Records]:
    if r.error is not None:
        return _refused(r.error.code)
    aborted = None
    if r.aborted_transactions is not None:
        aborted = tuple(
            AbortedTransaction(a.producer_id, a.first_offset) for a in r.aborted_transactions
        )
    records: Records = r.region if r.region is not None else r.records
    return FetchResponsePartition(
        high_watermark=r.high_watermark,
        last_stable_offset=r.last_stable_offset,
        log_start_offset=r.log_start_offset,
        aborted_transactions=aborted,
        records=records,
    )


def _wire_topic(tip: TopicIdPartition, version: int) -> str | uuid.UUID:
    if version >= TOPIC_ID_MIN_VERSION:
        return tip.topic_id
    return tip.topic or ""


# -- request parsing -------------------------------------------------------------------------------


def session_request(body: Any, version: int, names: Mapping[uuid.UUID, str]) -> FetchSessionRequest:
    """The session layer's view of a kio FetchRequest of ``version``."""
    partitions = tuple(
        (_tip(t, p.partition, version, names), _request_partition(p))
        for t in body.topics
        for p in t.partitions
    )
    metadata, forgotten = LEGACY, ()
    if version >= SESSION_VERSION:
        metadata = FetchMetadata(body.session_id, body.session_epoch)
        forgotten = tuple(
            _tip(t, p, version, names) for t in body.forgotten_topics_data for p in t.partitions
        )
    return FetchSessionRequest(
        version, metadata, partitions, forgotten, _replica_id(body, version) >= 0
    )


def _tip(topic: Any, partition: int, version: int, names: Mapping[uuid.UUID, str]):
    if version >= TOPIC_ID_MIN_VERSION:
        return TopicIdPartition(topic.topic_id, names.get(topic.topic_id), partition)
    return TopicIdPartition.by_name(topic.topic, partition)


def _request_partition(p: Any) -> FetchRequestPartition:
    return FetchRequestPartition(
        p.fetch_offset,
        p.partition_max_bytes,
        getattr(p, "log_start_offset", -1),
        _optional_epoch(getattr(p, "current_leader_epoch", -1)),
        _optional_epoch(getattr(p, "last_fetched_epoch", -1)),
    )


def _optional_epoch(epoch: int) -> int:
    """A Fetch's leader epoch, any negative one meaning none (Kafka's
    ``FetchRequest.optionalEpoch``; ListOffsets checks every epoch but -1)."""
    return epoch if epoch >= 0 else -1


def _replica_id(body: Any, version: int) -> int:
    if version >= REPLICA_STATE_VERSION:
        return body.replica_state.replica_id
    return body.replica_id


def _isolation(body: Any, request: Request) -> IsolationLevel:
    try:
        return IsolationLevel(body.isolation_level)
    except ValueError:
        raise InvalidRequestError(
            f"Fetch from {request.client}: isolation level {body.isolation_level} is not 0 "
            "(read_uncommitted) or 1 (read_committed)",
            request.header.client_id,
        ) from None


def _count(
    stats: BrokerTopicStats, results: Mapping[TopicIdPartition, FetchResponsePartition[Records]]
) -> None:
    """Each partition read for a consumer, its error and its records bytes (the response
    carries every partition with records, also in an incremental session)."""
    for tip, p in results.items():
        if tip.topic is not None:
            stats.fetched(tip.topic, p.error_code != ErrorCode.none, p.records_size)


def register(apis: KafkaApis, ctx: ApiContext | Broker, **options: Any) -> FetchApi:
    """Serve Fetch v4-v18 for the context's broker on ``apis``; ``options`` go to
    :class:`FetchApi`."""
    broker = ctx.broker if isinstance(ctx, ApiContext) else ctx
    context = ctx if isinstance(ctx, ApiContext) else None
    api = FetchApi(broker, apis, context=context, **options)
    apis.register(FETCH_KEY, *FETCH_VERSIONS, api.handle)
    apis.fetch_sessions = api.manager.cache  # for the metrics endpoint
    return api
