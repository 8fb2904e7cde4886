"""DescribeCluster (API key 60), versions 0-2: the cluster's brokers, id and controller.

Brokers as Metadata lists them (live nodes with their bound ports; none is fenced), cluster id
from ``meta.properties``, controller id: this broker (the controller runs in-process).
Authorization as Kafka's ``AuthHelper.computeDescribeClusterResponse``: the brokers are
answered to every principal; ``cluster_authorized_operations`` is -2147483648 (Kafka's
"omitted") unless the request asks for it, then the bit field of the Cluster operations the
principal may do when it may Describe the Cluster, else 0.
An ``endpoint_type`` other than 1 (brokers; v1+) is MISMATCHED_ENDPOINT_TYPE (114), as a Kafka
broker answers a request meant for a controller.

Thread safety: reads only; nothing is kept.
"""

from __future__ import annotations

import functools
from datetime import timedelta
from typing import Any

from broker_embedded.error_code import ErrorCode
from broker_embedded.server.handlers.api_context import (
    OMITTED_OPERATIONS,
    ApiContext,
    make,
    response_types,
)
from broker_embedded.server.handlers.metadata import broker_entries
from broker_embedded.server.kafka_apis import KafkaApis
from broker_embedded.server.request_channel import Request

API_KEY = 60
VERSIONS = (0, 2)
BROKERS_ENDPOINT = 1


def register(apis: KafkaApis, ctx: ApiContext) -> None:
    apis.register_responder(API_KEY, *VERSIONS, functools.partial(describe_cluster_response, ctx))


def describe_cluster_response(ctx: ApiContext, request: Request) -> Any:
    types = response_types(request)
    endpoint_type = getattr(request.body, "endpoint_type", BROKERS_ENDPOINT)
    ok = endpoint_type == BROKERS_ENDPOINT
    brokers = broker_entries(ctx, types.DescribeClusterBroker, "broker_id", is_fenced=False)
    return make(
        types.DescribeClusterResponse,
        throttle_time=timedelta(0),
        error_code=ErrorCode.none if ok else ErrorCode.mismatched_endpoint_type,
        error_message=None if ok else f"endpoint type {endpoint_type}: this is a broker (1)",
        endpoint_type=BROKERS_ENDPOINT,
        cluster_id=ctx.cluster_id,
        controller_id=ctx.broker_id if ok else -1,
        brokers=brokers if ok else (),
        cluster_authorized_operations=_operations(ctx, request) if ok else OMITTED_OPERATIONS,
    )


def _operations(ctx: ApiContext, request: Request) -> int:
    if not request.body.include_cluster_authorized_operations:
        return OMITTED_OPERATIONS
    return ctx.cluster_operations(request)
