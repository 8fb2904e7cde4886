"""The operators' transaction APIs (KIP-664, ``kafka-transactions.sh``): DescribeProducers (API
key 61, v0), DescribeTransactions (65, v0) and ListTransactions (66, v0-v1), answered as Kafka's
``KafkaApis`` / ``TransactionCoordinator`` / ``ReplicaManager`` answer them.

- DescribeProducers: per partition, the active producers of this broker's replica (leader or
  follower), from its producer state, sorted by producer id: producer id, epoch, last sequence
  (-1 without a batch), last timestamp (-1), coordinator epoch (-1 before a marker), and the
  first offset of the producer's open transaction (-1 without one). A partition this broker
  has no replica of is NOT_LEADER_OR_FOLLOWER (6) when it exists, else
  UNKNOWN_TOPIC_OR_PARTITION (3); the error message names it.
- DescribeTransactions: per transactional id, its state from the transaction coordinator:
  state name (``Ongoing``, ``CompleteCommit``, ...), timeout, start time (-1 before the first
  transaction), producer id and epoch, the partitions of the transaction by topic in the order
  they were added. Errors per id: TRANSACTIONAL_ID_NOT_FOUND (105), INVALID_REQUEST (42) for
  an empty id, COORDINATOR_LOAD_IN_PROGRESS (14) while its ``__transaction_state`` partition is
  not loaded (the other fields then empty or zero: Kafka's defaults).
  The coordinator is one per cluster here, so any broker answers any id.
- ListTransactions: the transactional ids whose ``__transaction_state`` partition this broker
  leads (every id when the topic does not exist: the embedded producer's in-memory state), so
  an admin client that asks every broker and concatenates sees each id once; filters as
  Kafka's ``TransactionStateManager.listTransactionStates``: states (a name Kafka does not know
  goes to ``unknown_state_filters``), producer ids, and v1's ``duration_filter`` (only
  transactions started more than that many ms ago; -1 = no filter). COORDINATOR_LOAD_IN_PROGRESS
  while a partition this broker leads is not loaded. Sorted by transactional id.

Authorization (with an authorizer, as Kafka's ``KafkaApis``):
- DescribeProducers: an illegal topic name is INVALID_TOPIC_EXCEPTION (17); then Read on the
  topic, refused: TOPIC_AUTHORIZATION_FAILED (29) for each of its partitions, whose producer
  state is not read.
- DescribeTransactions: Describe on each transactional id, refused: that id answers
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED (53) with nothing of its state; an allowed id lists only
  the topics the principal may Describe.
- ListTransactions: only the transactional ids the principal may Describe (no error).

Thread safety: each answer reads copies taken under the coordinator's lock and the producer
state's own copy; nothing is kept between requests.
"""

from __future__ import annotations

import datetime
import functools
from types import ModuleType
from typing import Any

from broker_embedded.coordinator.coordinator_partition import (
    TRANSACTION_STATE_TOPIC,
    partition_for,
)
from broker_embedded.coordinator.transaction_coordinator import TxnState
from broker_embedded.errors import (
    CoordinatorLoadInProgressError,
    InvalidRequestError,
    KafkaApiError,
    NotLeaderOrFollowerError,
    TransactionalIdNotFoundError,
    UnknownTopicOrPartitionError,
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
from broker_embedded.server.security.authorizer import AclOperation, ResourceType
from broker_embedded.storage.topic_partition import TopicPartition, validate_topic

DESCRIBE_PRODUCERS, DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 61, 65, 66
VERSIONS = {DESCRIBE_PRODUCERS: (0, 0), DESCRIBE_TRANSACTIONS: (0, 0), LIST_TRANSACTIONS: (0, 1)}
KAFKA_STATES = (
    "Empty",
    "Ongoing",
    "PrepareCommit",
    "PrepareAbort",
    "CompleteCommit",
    "CompleteAbort",
    "Dead",
    "PrepareEpochFence",
)
ZERO = datetime.timedelta(0)


def register(apis: KafkaApis, ctx: ApiContext) -> None:
    responders = {
        DESCRIBE_PRODUCERS: describe_producers_response,
        DESCRIBE_TRANSACTIONS: describe_transactions_response,
        LIST_TRANSACTIONS: list_transactions_response,
    }
    for key, respond in responders.items():
        apis.register_responder(key, *VERSIONS[key], functools.partial(respond, ctx))


def _ms_time(ms: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)


# -- DescribeProducers -----------------------------------------------------------------------------


def describe_producers_response(ctx: ApiContext, request: Request) -> Any:
    types = response_types(request)
    topics = []
    for t in request.body.topics:
        error = _topic_error(ctx, request, t.name)
        partitions = tuple(_producers(ctx, types, t.name, p, error) for p in t.partition_indexes)
        topics.append(make(types.TopicResponse, name=t.name, partitions=partitions))
    return make(types.DescribeProducersResponse, throttle_time=ZERO, topics=tuple(topics))


def _topic_error(ctx: ApiContext, request: Request, topic: str) -> KafkaApiError | None:
    """An illegal name, else a refused Read (module docstring), else None."""
    try:
        validate_topic(topic)
    except KafkaApiError as e:
        return e
    return ctx.topic_refusal(request, AclOperation.READ, topic)


def _producers(
    ctx: ApiContext, types: ModuleType, topic: str, index: int, error: KafkaApiError | None
) -> Any:
    if error is None:
        tp = TopicPartition(topic, index)
        partition = ctx.broker.replica_manager.partitions.get(tp)
        if partition is not None:
            return make(
                types.PartitionResponse,
                partition_index=index,
                error_code=NONE,
                error_message=None,
                active_producers=_active(types, partition),
            )
        error = (
            NotLeaderOrFollowerError(f"broker {ctx.broker_id} has no replica of {tp}")
            if ctx.broker.controller.knows(tp)
            else UnknownTopicOrPartitionError(f"{tp} does not exist")
        )
    return make(
        types.PartitionResponse,
        partition_index=index,
        error_code=error_code(error),
        error_message=str(error),
        active_producers=(),
    )


def _active(types: ModuleType, partition: Any) -> tuple:
    """The partition's active producers, by producer id."""
    producers = partition.log.producer_state.producers
    return tuple(
        make(
            types.ProducerState,
            producer_id=pid,
            producer_epoch=e.producer_epoch,
            last_sequence=e.last_seq,
            last_timestamp=e.last_timestamp,
            coordinator_epoch=e.coordinator_epoch,
            current_txn_start_offset=-1
            if e.current_txn_first_offset is None
            else e.current_txn_first_offset,
        )
        for pid, e in sorted(producers.items())
    )


# -- the coordinator's partitions ------------------------------------------------------------------


def _state_partitions(ctx: ApiContext) -> int | None:
    """The partition count of ``__transaction_state`` (None: it does not exist)."""
    controller = ctx.broker.controller
    if not controller.knows(TopicPartition(TRANSACTION_STATE_TOPIC, 0)):
        return None
    return len(controller.describe(TRANSACTION_STATE_TOPIC).partitions)


def _check_loaded(ctx: ApiContext, partition: int) -> None:
    coordinator = ctx.broker.controller.transaction_coordinator
    with coordinator.lock:
        loaded = partition in coordinator.loaded
    if not loaded:
        raise CoordinatorLoadInProgressError(
            f"partition {partition} of {TRANSACTION_STATE_TOPIC} is not loaded yet"
        )


# -- DescribeTransactions --------------------------------------------------------------------------


def describe_transactions_response(ctx: ApiContext, request: Request) -> Any:
    types = response_types(request)
    count = _state_partitions(ctx)
    states = tuple(
        _describe(ctx, types, tid, count, request) for tid in request.body.transactional_ids
    )
    return make(types.DescribeTransactionsResponse, throttle_time=ZERO, transaction_states=states)


def _describe(
    ctx: ApiContext, types: ModuleType, tid: str, count: int | None, request: Request
) -> Any:
    try:
        refusal = ctx.txn_refusal(request, tid, AclOperation.DESCRIBE)
        if refusal is not None:
            raise refusal
        state = _find(ctx, tid, count)
    except KafkaApiError as e:
        return make(
            types.TransactionState,
            error_code=error_code(e),
            transactional_id=tid,
            transaction_state="",
            transaction_timeout=ZERO,
            transaction_start_time=_ms_time(0),
            producer_id=0,
            producer_epoch=0,
            topics=(),
        )
    by_topic: dict[str, list[int]] = {}
    for tp in state.partitions:
        if ctx.allowed(request, AclOperation.DESCRIBE, ResourceType.TOPIC, tp.topic):
            by_topic.setdefault(tp.topic, []).append(tp.partition)
    topics = tuple(
        make(types.TopicData, topic=t, partitions=tuple(ps)) for t, ps in by_topic.items()
    )
    return make(
        types.TransactionState,
        error_code=NONE,
        transactional_id=tid,
        transaction_state=state.status.value,
        transaction_timeout=datetime.timedelta(milliseconds=state.timeout_ms),
        transaction_start_time=_ms_time(state.start_ms),
        producer_id=state.producer_id,
        producer_epoch=state.producer_epoch,
        topics=topics,
    )


def _find(ctx: ApiContext, tid: str, count: int | None) -> TxnState:
    if not tid:
        raise InvalidRequestError("DescribeTransactions of an empty transactional id")
    if count is not None:
        _check_loaded(ctx, partition_for(tid, count))
    state = ctx.broker.controller.transaction_coordinator.state(tid)
    if state is None:
        raise TransactionalIdNotFoundError(f"transactional id {tid!r} is not known")
    return state


# -- ListTransactions ------------------------------------------------------------------------------


def list_transactions_response(ctx: ApiContext, request: Request) -> Any:
    body, types = request.body, response_types(request)
    wanted = {s for s in body.state_filters if s in KAFKA_STATES}
    unknown = tuple(s for s in body.state_filters if s not in KAFKA_STATES)
    pids = set(body.producer_id_filters)
    duration = getattr(body, "duration_filter", -1)
    try:
        led = _led_partitions(ctx)
    except KafkaApiError as e:
        return make(
            types.ListTransactionsResponse,
            throttle_time=ZERO,
            error_code=error_code(e),
            unknown_state_filters=unknown,
            transaction_states=(),
        )
    coordinator = ctx.broker.controller.transaction_coordinator
    now = coordinator.clock_ms()
    listed = []
    for tid, s in coordinator.states().items():
        if led is not None and partition_for(tid, led[0]) not in led[1]:
            continue
        if (pids and s.producer_id not in pids) or (wanted and s.status.value not in wanted):
            continue
        if duration >= 0 and now - s.start_ms <= duration:
            continue
        if not ctx.allowed(request, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, tid):
            continue
        entry = make(
            types.TransactionState,
            transactional_id=tid,
            producer_id=s.producer_id,
            transaction_state=s.status.value,
        )
        listed.append(entry)
    return make(
        types.ListTransactionsResponse,
        throttle_time=ZERO,
        error_code=NONE,
        unknown_state_filters=unknown,
        transaction_states=tuple(listed),
    )


def _led_partitions(ctx: ApiContext) -> tuple[int, set[int]] | None:
    """(partition count, the partitions of ``__transaction_state`` this broker leads), each
    loaded (else COORDINATOR_LOAD_IN_PROGRESS); None without the topic."""
    count = _state_partitions(ctx)
    if count is None:
        return None
    controller = ctx.broker.controller
    led = set()
    for p in range(count):
        if controller.partition_state(TopicPartition(TRANSACTION_STATE_TOPIC, p)).leader == (
            ctx.broker_id
        ):
            _check_loaded(ctx, p)
            led.add(p)
    return count, led
