"""WriteTxnMarkers (API key 27), version 1: COMMIT or ABORT markers appended to partitions led
here, as Kafka's ``KafkaApis.handleWriteTxnMarkersRequest`` does for a coordinator, and as
``Admin.abortTransaction`` (``kafka-transactions abort``) sends to end a hanging transaction.

- Each marker: producer id and epoch, the result (commit or abort), the coordinator epoch,
  and the partitions; each partition gets one control batch (``EndTransactionMarker``) with
  that producer id, epoch and coordinator epoch, appended as a coordinator's write (acks=all).
  Its error is what the append fails with (UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER,
  a fenced producer epoch, ...), per partition.
- The transaction coordinator's own state is not touched: a transaction aborted this way
  stays as the coordinator knows it until its producer or its timeout ends it (as in Kafka).
- Authorization (with an authorizer): ClusterAction on the Cluster, else every partition is
  CLUSTER_AUTHORIZATION_FAILED (31) and nothing is written.
- Version 0 (not flexible) is not served: kio has no schema for it; Kafka's clients from 2.8
  on send v1.

Stateless; the appends go through the replica manager (thread-safe).
"""

from __future__ import annotations

import functools
import time
from typing import Any

from broker_embedded.errors import KafkaApiError
from broker_embedded.record.control_record import EndTransactionMarker
from broker_embedded.server.handlers.api_context import (
    ApiContext,
    error_code,
    make,
    response_types,
)
from broker_embedded.server.kafka_apis import KafkaApis
from broker_embedded.server.request_channel import Request
from broker_embedded.server.security.authorizer import AclOperation
from broker_embedded.storage.producer_state_manager import AppendOrigin
from broker_embedded.storage.topic_partition import TopicPartition

API_KEY = 27
VERSIONS = (1, 1)


def register(apis: KafkaApis, ctx: ApiContext) -> None:
    apis.register_responder(API_KEY, *VERSIONS, functools.partial(write_txn_markers_response, ctx))


def write_txn_markers_response(ctx: ApiContext, request: Request) -> Any:
    types = response_types(request)
    refusal = ctx.cluster_refusal(request, AclOperation.CLUSTER_ACTION)
    results = []
    for marker in request.body.markers:
        topics = []
        for topic in marker.topics:
            parts = tuple(
                make(
                    types.WritableTxnMarkerPartitionResult,
                    partition_index=p,
                    error_code=error_code(refusal or _write(ctx, marker, topic.name, p)),
                )
                for p in topic.partition_indexes
            )
            topics.append(
                make(types.WritableTxnMarkerTopicResult, name=topic.name, partitions=parts)
            )
        results.append(
            make(
                types.WritableTxnMarkerResult, producer_id=marker.producer_id, topics=tuple(topics)
            )
        )
    return make(types.WriteTxnMarkersResponse, markers=tuple(results))


def _write(ctx: ApiContext, marker: Any, topic: str, partition: int) -> KafkaApiError | None:
    """Append ``marker`` to ``topic``/``partition``; the append's error, if any."""
    kind = EndTransactionMarker.commit if marker.transaction_result else EndTransactionMarker.abort
    batch = kind(int(marker.coordinator_epoch)).build_batch(
        base_offset=0,
        timestamp=time.time_ns() // 1_000_000,
        producer_id=int(marker.producer_id),
        producer_epoch=int(marker.producer_epoch),
    )
    try:
        result = ctx.broker.append(
            TopicPartition(topic, partition), batch, acks="all", origin=AppendOrigin.COORDINATOR
        )
    except KafkaApiError as e:
        return e
    return result.error
