"""FindCoordinator (API key 10), versions 0-6: which broker coordinates a group.

A group (key type 0) is coordinated by the leader of its ``__consumer_offsets`` partition
(group_metadata_manager.py; the topic is created on first use), as in Kafka: the group APIs on
any other broker answer NOT_COORDINATOR and clients ask again; a partition without a live
leader is COORDINATOR_NOT_AVAILABLE (15). (With an in-memory group store every group is
coordinated by the broker asked.) A transactional id (key type 1) is coordinated by this broker
(its node, as Metadata names it): the coordinators are the controller's, shared by every broker
of a cluster. Any other key type (share groups, 2, or unknown) is INVALID_REQUEST (42). v0-3
carry one key (v0: a group); v4+ a batch of keys, each answered on its own.

Authorization (with an authorizer, as Kafka's ``KafkaApis.getCoordinator``): Describe on the
group (refused: GROUP_AUTHORIZATION_FAILED, 30) or on the transactional id
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED, 53), each key on its own, node -1.

Thread safety: reads only.
"""

from __future__ import annotations

import functools
from datetime import timedelta
from typing import Any

from broker_embedded.coordinator.group_metadata_manager import GroupMetadataManager
from broker_embedded.errors import CoordinatorNotAvailableError, InvalidRequestError, KafkaApiError
from broker_embedded.server.handlers import groups
from broker_embedded.server.handlers.api_context import (
    ApiContext,
    Node,
    error_code,
    error_message,
    make,
    response_types,
)
from broker_embedded.server.kafka_apis import KafkaApis
from broker_embedded.server.request_channel import Request
from broker_embedded.server.security.authorizer import AclOperation

API_KEY = 10
VERSIONS = (0, 6)
GROUP, TRANSACTION = 0, 1
NO_NODE = Node(-1, "", -1)


def register(apis: KafkaApis, ctx: ApiContext) -> None:
    apis.register_responder(API_KEY, *VERSIONS, functools.partial(find_coordinator_response, ctx))


def find_coordinator_response(ctx: ApiContext, request: Request) -> Any:
    body, types = request.body, response_types(request)
    key_type = getattr(body, "key_type", GROUP)
    if request.header.api_version < 4:
        node, error = coordinator(ctx, key_type, body.key, request)
        return make(
            types.FindCoordinatorResponse,
            throttle_time=timedelta(0),
            error_code=error_code(error),
            error_message=_message(error, "NONE"),
            node_id=node.node_id,
            host=node.host,
            port=node.port,
        )
    entries = []
    for key in body.coordinator_keys:
        node, error = coordinator(ctx, key_type, key, request)
        entries.append(
            make(
                types.Coordinator,
                key=key,
                node_id=node.node_id,
                host=node.host,
                port=node.port,
                error_code=error_code(error),
                error_message=_message(error, ""),
            )
        )
    return make(
        types.FindCoordinatorResponse, throttle_time=timedelta(0), coordinators=tuple(entries)
    )


def _message(error: BaseException | None, none: str) -> str | None:
    """The error's message; without an error what Kafka answers: its ``Errors.NONE.message()``
    ("NONE") before v4, its schema's default ("") in v4+'s coordinators."""
    return none if error is None else error_message(error)


def group_coordinator(ctx: ApiContext, group_id: str) -> int:
    """The broker coordinating ``group_id`` (-1: none is live)."""
    store = groups.shared_store(ctx)
    if not isinstance(store, GroupMetadataManager):
        return ctx.broker_id
    leader = store.coordinator_id(group_id)
    return -1 if leader is None else leader


def coordinator(
    ctx: ApiContext, key_type: int, key: str, request: Request
) -> tuple[Node, KafkaApiError | None]:
    """The node coordinating ``key``, or the error (with node -1)."""
    try:
        if key_type not in (GROUP, TRANSACTION):
            raise InvalidRequestError(f"unknown coordinator key type {key_type} (key {key!r})")
        refusal = (
            ctx.group_refusal(request, AclOperation.DESCRIBE, key)
            if key_type == GROUP
            else ctx.txn_refusal(request, key, AclOperation.DESCRIBE)
        )
        if refusal is not None:
            raise refusal
        node_id = ctx.broker_id if key_type != GROUP else group_coordinator(ctx, key)
        node = ctx.node(node_id)
        if node is None:
            what = "group" if key_type == GROUP else "transactional id"
            raise CoordinatorNotAvailableError(f"{what} {key!r}: broker {node_id} has no node")
    except KafkaApiError as e:
        return NO_NODE, e
    return node, None
