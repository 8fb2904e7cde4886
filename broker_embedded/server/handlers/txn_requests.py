"""The transactional producer's requests to its coordinator: AddPartitionsToTxn (API key 24,
versions 0-3), AddOffsetsToTxn (25, versions 0-4) and EndTxn (26, versions 0-4), answered by the
controller's transaction coordinator (coordinator/transaction_coordinator.py).

- AddPartitionsToTxn: partitions that do not exist are UNKNOWN_TOPIC_OR_PARTITION (3) and the
  others OPERATION_NOT_ATTEMPTED (55), nothing added (Kafka's rule); otherwise every partition
  gets the coordinator's answer: none, INVALID_PRODUCER_ID_MAPPING (49), PRODUCER_FENCED (90;
  INVALID_PRODUCER_EPOCH, 47, before v2 of the response as Kafka maps it for old clients),
  CONCURRENT_TRANSACTIONS (51). v4+ (batched, broker to broker, KIP-890) is not served: clients
  send v3 and below.
- AddOffsetsToTxn: the group joins the transaction with its ``__consumer_offsets`` partition
  (the topic is created first if needed, as the group coordinator creates it), so the
  transaction's marker lands where TxnOffsetCommit writes the offsets and decides them.
- EndTxn: the transaction moves to PrepareCommit / PrepareAbort and the answer goes out at once;
  the markers are written by the coordinator's background writer (Kafka's
  ``TransactionMarkerChannelManager``), and until they are, the id's requests answer
  CONCURRENT_TRANSACTIONS. INVALID_TXN_STATE (48) for a commit with no open transaction.

Each request that changes the transaction's state has it written to ``__transaction_state``
first (coordinator/transaction_state_manager.py); when that write fails, the answer is its
error (COORDINATOR_NOT_AVAILABLE, 15, or NOT_COORDINATOR, 16; the client finds its coordinator
again and retries) and the state is unchanged.

Thread safety: the coordinator serializes under its lock.
"""

from __future__ import annotations

import functools
from datetime import timedelta
from typing import Any

from broker_embedded.coordinator.coordinator_partition import (
    GROUP_METADATA_TOPIC,
    partition_for,
)
from broker_embedded.errors import (
    InvalidProducerEpochError,
    KafkaApiError,
    OperationNotAttemptedError,
    ProducerFencedError,
    UnknownTopicOrPartitionError,
)
from broker_embedded.server.handlers import groups
from broker_embedded.server.handlers.api_context import (
    ApiContext,
    error_code,
    make,
    response_types,
)
from broker_embedded.server.kafka_apis import KafkaApis
from broker_embedded.server.request_channel import Request
from broker_embedded.server.security.authorizer import AclOperation
from broker_embedded.storage.topic_partition import TopicPartition

ADD_PARTITIONS_KEY, ADD_OFFSETS_KEY, END_TXN_KEY = 24, 25, 26
ADD_PARTITIONS_VERSIONS, ADD_OFFSETS_VERSIONS, END_TXN_VERSIONS = (0, 3), (0, 4), (0, 4)
FIRST_PRODUCER_FENCED_VERSION = 2  # older clients get INVALID_PRODUCER_EPOCH instead


def register(apis: KafkaApis, ctx: ApiContext) -> None:
    apis.register_responder(
        ADD_PARTITIONS_KEY,
        *ADD_PARTITIONS_VERSIONS,
        functools.partial(add_partitions_response, ctx),
    )
    apis.register_responder(
        ADD_OFFSETS_KEY, *ADD_OFFSETS_VERSIONS, functools.partial(add_offsets_response, ctx)
    )
    apis.register_responder(
        END_TXN_KEY, *END_TXN_VERSIONS, functools.partial(end_txn_response, ctx)
    )


def _for_version(error: KafkaApiError | None, version: int) -> KafkaApiError | None:
    if isinstance(error, ProducerFencedError) and version < FIRST_PRODUCER_FENCED_VERSION:
        return InvalidProducerEpochError(str(error))
    return error


def add_partitions_response(ctx: ApiContext, request: Request) -> Any:
    body, types, version = request.body, response_types(request), request.header.api_version
    asked = [(t.name, tuple(t.partitions)) for t in body.v3_and_below_topics]
    tps = [TopicPartition(name, p) for name, parts in asked for p in parts]
    controller = ctx.broker.controller
    refusal = ctx.txn_refusal(request, body.v3_and_below_transactional_id)
    failed = {
        tp: ctx.topic_refusal(request, AclOperation.WRITE, tp.topic)
        or (None if controller.knows(tp) else UnknownTopicOrPartitionError(f"{tp} does not exist"))
        for tp in tps
    }
    errors: dict[TopicPartition, KafkaApiError | None] = {}
    if refusal is not None:
        errors = dict.fromkeys(tps, refusal)
    elif any(failed.values()):
        for tp in tps:
            errors[tp] = failed[tp] or OperationNotAttemptedError(f"{tp}: another partition failed")
    else:
        try:
            controller.transaction_coordinator.add_partitions(
                body.v3_and_below_transactional_id,
                body.v3_and_below_producer_id,
                body.v3_and_below_producer_epoch,
                tps,
            )
            error = None
        except KafkaApiError as e:
            error = _for_version(e, version)
        errors = dict.fromkeys(tps, error)
    results = tuple(
        make(
            types.AddPartitionsToTxnTopicResult,
            name=name,
            results_by_partition=tuple(
                make(
                    types.AddPartitionsToTxnPartitionResult,
                    partition_index=p,
                    partition_error_code=error_code(errors[TopicPartition(name, p)]),
                )
                for p in parts
            ),
        )
        for name, parts in asked
    )
    return make(
        types.AddPartitionsToTxnResponse,
        throttle_time=timedelta(0),
        results_by_topic_v3_and_below=results,
    )


def add_offsets_response(ctx: ApiContext, request: Request) -> Any:
    body, types = request.body, response_types(request)
    try:
        refusal = ctx.txn_refusal(request, body.transactional_id) or ctx.group_refusal(
            request, AclOperation.READ, body.group_id
        )
        if refusal is not None:
            raise refusal
        ctx.broker.controller.transaction_coordinator.add_offsets(
            body.transactional_id,
            body.producer_id,
            body.producer_epoch,
            body.group_id,
            _offsets_partition(ctx, body.group_id),
        )
        error = None
    except KafkaApiError as e:
        error = _for_version(e, request.header.api_version)
    return make(
        types.AddOffsetsToTxnResponse, throttle_time=timedelta(0), error_code=error_code(error)
    )


def _offsets_partition(ctx: ApiContext, group_id: str) -> TopicPartition | None:
    """The group's ``__consumer_offsets`` partition, from the cluster's group store (which
    creates the topic on first use); without one, from the topic if it exists."""
    store = groups.shared_store(ctx)
    tp = None if store is None else store.partition_of(group_id)
    if tp is not None:
        return tp
    controller = ctx.broker.controller
    if not controller.knows(TopicPartition(GROUP_METADATA_TOPIC, 0)):
        return None
    count = len(controller.describe(GROUP_METADATA_TOPIC).partitions)
    return TopicPartition(GROUP_METADATA_TOPIC, partition_for(group_id, count))


def end_txn_response(ctx: ApiContext, request: Request) -> Any:
    body, types = request.body, response_types(request)
    controller = ctx.broker.controller
    try:
        refusal = ctx.txn_refusal(request, body.transactional_id)
        if refusal is not None:
            raise refusal
        completion = controller.transaction_coordinator.end_txn(
            body.transactional_id, body.producer_id, body.producer_epoch, body.committed
        )
        if completion is not None:
            controller.transaction_markers().submit(completion)
        error = None
    except KafkaApiError as e:
        error = _for_version(e, request.header.api_version)
    return make(types.EndTxnResponse, throttle_time=timedelta(0), error_code=error_code(error))
