"""The group APIs over the wire, answered by one :class:`GroupCoordinator` per cluster (every
server of ``kafkalog serve --brokers N`` shares it, as they share the transaction coordinator,
so FindCoordinator names the broker asked):

| API | key | versions | answered |
|---|---|---|---|
| JoinGroup | 11 | 0-9 | delayed: when the rebalance completes |
| SyncGroup | 14 | 0-5 | followers when the leader's assignment arrives (delayed) |
| Heartbeat | 12 | 0-4 | at once |
| LeaveGroup | 13 | 0-5 | at once (v3+ a batch of members) |
| ListGroups | 16 | 0-5 | at once (v4+ states filter, v5+ types filter) |
| DescribeGroups | 15 | 0-6 | at once (unknown group: Dead, no members; v6+ GROUP_ID_NOT_FOUND) |
| DeleteGroups | 42 | 0-2 | at once |
| OffsetDelete | 47 | 0 | at once (UNKNOWN_TOPIC_OR_PARTITION for a topic that does not exist) |

OffsetCommit and OffsetFetch (offsets.py) share the coordinator. A delayed JoinGroup or
SyncGroup holds no handler thread: its callback sends the response on the request's
connection (which stays muted until then, as Kafka's). Wire rules as Kafka's ``KafkaApis``:
JoinGroup v0 has no rebalance timeout (the session timeout serves), v4+ requires a known member
id (MEMBER_ID_REQUIRED), v9+ supports skipping the assignment; protocol names before JoinGroup
v7 are non-null ("" when none); the client host is ``/<address>`` as Kafka's
``InetAddress.toString``; throttle time 0.

Authorization (with an authorizer, as Kafka's): JoinGroup, SyncGroup, Heartbeat and LeaveGroup
need Read on the group, DescribeGroups Describe, DeleteGroups and OffsetDelete Delete; refused:
GROUP_AUTHORIZATION_FAILED (30). OffsetDelete also needs Read on each topic (refused:
TOPIC_AUTHORIZATION_FAILED, 29, for its partitions, whose offsets stay). ListGroups lists every
group to a principal that may Describe the Cluster, else only the groups it may Describe.
DescribeGroups' ``authorized_operations`` (v3+, when asked) is the bit field of the group
operations the principal may do, for a group answered without error.

The coordinator is stopped when the last server using it shuts down (``KafkaApis.on_shutdown``).
Thread safety: the handlers keep no state; the coordinator has its locks.
"""

from __future__ import annotations

import functools
import threading
import weakref
from datetime import timedelta
from typing import Any

from broker_embedded.broker import topic_partition
from broker_embedded.broker_config import BrokerConfig
from broker_embedded.coordinator.group_coordinator import GroupConfig, GroupCoordinator, JoinRequest
from broker_embedded.coordinator.group_heartbeats import MemberIdentity
from broker_embedded.coordinator.group_metadata import (
    GroupState,
    JoinResult,
    Protocol,
    SyncResult,
)
from broker_embedded.coordinator.group_metadata_manager import (
    GroupMetadataManager,
    coordinator_error,
)
from broker_embedded.coordinator.group_store import GroupStore
from broker_embedded.coordinator.transaction_coordinator import TxnCompletion
from broker_embedded.errors import GroupIdNotFoundError, KafkaApiError
from broker_embedded.server.handlers import offsets
from broker_embedded.server.handlers.api_context import (
    NONE,
    OMITTED_OPERATIONS,
    ApiContext,
    error_code,
    error_message,
    make,
    response_types,
)
from broker_embedded.server.kafka_apis import KafkaApis
from broker_embedded.server.request_channel import Request
from broker_embedded.server.security.authorizer import AclOperation, ResourceType
from broker_embedded.storage.topic_partition import TopicPartition

JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 11, 12, 13, 14
DESCRIBE, DELETE = AclOperation.DESCRIBE, AclOperation.DELETE
DESCRIBE_GROUPS, LIST_GROUPS, DELETE_GROUPS, OFFSET_DELETE = 15, 16, 42, 47
VERSIONS = {
    JOIN_GROUP: (0, 9),
    SYNC_GROUP: (0, 5),
    HEARTBEAT: (0, 4),
    LEAVE_GROUP: (0, 5),
    LIST_GROUPS: (0, 5),
    DESCRIBE_GROUPS: (0, 6),
    DELETE_GROUPS: (0, 2),
    OFFSET_DELETE: (0, 0),
}
NULLABLE_PROTOCOL_VERSION = 7  # JoinGroup v7+: protocol type and a nullable protocol name
_ZERO = timedelta(0)


def group_config(config: BrokerConfig) -> GroupConfig:
    """The coordinator's settings from the broker config (Kafka's names)."""
    return GroupConfig(
        min_session_timeout_ms=config.group_min_session_timeout_ms,
        max_session_timeout_ms=config.group_max_session_timeout_ms,
        max_size=config.group_max_size,
        initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
        max_pending=config.purgatory_max_pending,
        offsets_retention_ms=config.offsets_retention_minutes * 60_000,
        offsets_retention_check_interval_ms=config.offsets_retention_check_interval_ms,
    )


# One group coordinator per cluster (the brokers of ``kafkalog serve --brokers N`` share their
# controller's transaction coordinator, the key here), so that FindCoordinator may name any
# broker: [coordinator, servers using it]. Guarded by _SHARED_LOCK.
_SHARED: weakref.WeakKeyDictionary[Any, list[Any]] = weakref.WeakKeyDictionary()
_SHARED_LOCK = threading.Lock()


def register(apis: KafkaApis, ctx: ApiContext, store: GroupStore | None = None) -> GroupCoordinator:
    """Serve the group APIs (and OffsetCommit/OffsetFetch) with the cluster's coordinator over
    ``store`` (default in memory; created by the first server of the cluster, stopped when its
    last server shuts down)."""
    coordinator = _acquire(ctx, store)
    apis.on_shutdown(lambda: _release(ctx))
    apis.register(
        JOIN_GROUP,
        *VERSIONS[JOIN_GROUP],
        functools.partial(handle_join_group, apis, ctx, coordinator),
    )
    apis.register(
        SYNC_GROUP,
        *VERSIONS[SYNC_GROUP],
        functools.partial(handle_sync_group, apis, ctx, coordinator),
    )
    responders = {
        HEARTBEAT: heartbeat_response,
        LEAVE_GROUP: leave_group_response,
        LIST_GROUPS: list_groups_response,
        DESCRIBE_GROUPS: describe_groups_response,
        DELETE_GROUPS: delete_groups_response,
    }
    for key, respond in responders.items():
        apis.register_responder(key, *VERSIONS[key], functools.partial(respond, ctx, coordinator))
    apis.register_responder(
        OFFSET_DELETE,
        *VERSIONS[OFFSET_DELETE],
        functools.partial(offset_delete_response, ctx, coordinator),
    )
    offsets.register(apis, ctx, coordinator)
    return coordinator


def _acquire(ctx: ApiContext, store: GroupStore | None) -> GroupCoordinator:
    transactions = ctx.broker.controller.transaction_coordinator
    with _SHARED_LOCK:
        entry = _SHARED.get(transactions)
        if entry is None:
            if store is None:
                store = GroupMetadataManager(ctx.broker.controller, ctx.broker.config)
            coordinator = GroupCoordinator(
                group_config(ctx.broker.config), store, name=str(ctx.broker_id), load=False
            )

            def on_marker(tp: TopicPartition, completion: TxnCompletion) -> None:
                coordinator.on_txn_marker(tp, completion.producer_id, completion.commit)

            # before the load: a marker is decided by the load or by the hook (group_coordinator)
            transactions.marker_listeners.append(on_marker)
            coordinator.load()
            coordinator.start_expiry()
            entry = _SHARED[transactions] = [coordinator, 0, on_marker]
        entry[1] += 1
        return entry[0]


def shared_store(ctx: ApiContext) -> GroupStore | None:
    """The store of the cluster's group coordinator (None before a server registered it)."""
    coordinator = coordinator_of(ctx.broker.controller)
    return None if coordinator is None else coordinator.store


def coordinator_of(controller: Any) -> GroupCoordinator | None:
    """The group coordinator of ``controller``'s cluster (None before a server registered it)."""
    with _SHARED_LOCK:
        entry = _SHARED.get(controller.transaction_coordinator)
        return None if entry is None else entry[0]


def _release(ctx: ApiContext) -> None:
    transactions = ctx.broker.controller.transaction_coordinator
    with _SHARED_LOCK:
        entry = _SHARED[transactions]
        entry[1] -= 1
        if entry[1]:
            return
        del _SHARED[transactions]
    transactions.marker_listeners.remove(entry[2])
    entry[0].shutdown()


def _ms(value: Any) -> int:
    return int(value / timedelta(milliseconds=1)) if isinstance(value, timedelta) else int(value)


# -- JoinGroup and SyncGroup (delayed) ------------------------------------------------------


def not_here(
    ctx: ApiContext,
    coordinator: GroupCoordinator,
    group_id: str,
    request: Request,
    operation: AclOperation = AclOperation.READ,
) -> KafkaApiError | None:
    """GROUP_AUTHORIZATION_FAILED when the request's principal may not do ``operation`` on the
    group (with an authorizer), else NOT_COORDINATOR (or COORDINATOR_NOT_AVAILABLE) when this
    broker does not coordinate ``group_id`` (group_metadata_manager.py), else None."""
    return ctx.group_refusal(request, operation, group_id) or coordinator_error(
        coordinator.store, group_id, ctx.broker_id
    )


def handle_join_group(
    apis: KafkaApis, ctx: ApiContext, coordinator: GroupCoordinator, request: Request
) -> None:
    body, version = request.body, request.header.api_version
    session_ms = _ms(body.session_timeout)
    rebalance = getattr(body, "rebalance_timeout", None)
    req = JoinRequest(
        group_id=body.group_id,
        member_id=body.member_id,
        group_instance_id=getattr(body, "group_instance_id", None),
        client_id=request.header.client_id or "",
        client_host=f"/{request.client_address[0]}",
        rebalance_timeout_ms=session_ms if rebalance is None else _ms(rebalance),
        session_timeout_ms=session_ms,
        protocol_type=body.protocol_type,
        protocols=tuple(Protocol(p.name, p.metadata) for p in body.protocols),
        require_known_member_id=version >= 4,
        support_skipping_assignment=version >= 9,
    )
    error = not_here(ctx, coordinator, req.group_id, request)
    if error is not None:
        apis.send_response(request, join_response(request, JoinResult(req.member_id, error)))
        return
    coordinator.join_group(
        req, lambda result: apis.send_response(request, join_response(request, result))
    )


def join_response(request: Request, result: JoinResult) -> Any:
    types, version = response_types(request), request.header.api_version
    name = result.protocol_name
    if version < NULLABLE_PROTOCOL_VERSION and name is None:
        name = ""
    members = tuple(
        make(
            types.JoinGroupResponseMember,
            member_id=m.member_id,
            group_instance_id=m.group_instance_id,
            metadata=m.metadata,
        )
        for m in result.members
    )
    return make(
        types.JoinGroupResponse,
        throttle_time=_ZERO,
        error_code=error_code(result.error),
        generation_id=result.generation_id,
        protocol_type=result.protocol_type,
        protocol_name=name,
        leader=result.leader_id,
        skip_assignment=result.skip_assignment,
        member_id=result.member_id,
        members=members,
    )


def handle_sync_group(
    apis: KafkaApis, ctx: ApiContext, coordinator: GroupCoordinator, request: Request
) -> None:
    body = request.body
    assignments = {a.member_id: a.assignment for a in body.assignments}

    def respond(result: SyncResult) -> None:
        types = response_types(request)
        apis.send_response(
            request,
            make(
                types.SyncGroupResponse,
                throttle_time=_ZERO,
                error_code=error_code(result.error),
                protocol_type=result.protocol_type,
                protocol_name=result.protocol_name,
                assignment=result.assignment,
            ),
        )

    error = not_here(ctx, coordinator, body.group_id, request)
    if error is not None:
        respond(SyncResult(error))
        return
    coordinator.sync_group(
        body.group_id,
        body.generation_id,
        body.member_id,
        getattr(body, "group_instance_id", None),
        getattr(body, "protocol_type", None),
        getattr(body, "protocol_name", None),
        assignments,
        respond,
    )


# -- the APIs answered at once ----------------------------------------------------------------


def heartbeat_response(ctx: ApiContext, coordinator: GroupCoordinator, request: Request) -> Any:
    body, types = request.body, response_types(request)
    error = not_here(ctx, coordinator, body.group_id, request) or coordinator.heartbeat(
        body.group_id, body.member_id, getattr(body, "group_instance_id", None), body.generation_id
    )
    return make(types.HeartbeatResponse, throttle_time=_ZERO, error_code=error_code(error))


def leave_group_response(ctx: ApiContext, coordinator: GroupCoordinator, request: Request) -> Any:
    body, types = request.body, response_types(request)
    if hasattr(body, "members"):
        leaving = [MemberIdentity(m.member_id, m.group_instance_id) for m in body.members]
    else:
        leaving = [MemberIdentity(body.member_id)]
    top = not_here(ctx, coordinator, body.group_id, request)
    errors: list[KafkaApiError | None] = []  # refused: no members, as Kafka's error response
    if top is None:
        top, errors = coordinator.leave_group(body.group_id, leaving)
    if not hasattr(body, "members"):  # v0-2: one error, the top-level one or the member's
        code = error_code(top if top is not None or not errors else errors[0])
        return make(types.LeaveGroupResponse, throttle_time=_ZERO, error_code=code)
    members = tuple(
        make(
            types.MemberResponse,
            member_id=m.member_id,
            group_instance_id=m.group_instance_id,
            error_code=error_code(e),
        )
        for m, e in (zip(leaving, errors, strict=True) if errors else ())
    )
    return make(
        types.LeaveGroupResponse, throttle_time=_ZERO, error_code=error_code(top), members=members
    )


def list_groups_response(ctx: ApiContext, coordinator: GroupCoordinator, request: Request) -> Any:
    """The groups this broker coordinates (Kafka's ListGroups: an admin client asks every
    broker and joins the answers)."""
    body, types = request.body, response_types(request)
    every = ctx.allowed(request, DESCRIBE, ResourceType.CLUSTER)

    def listed_here(group_id: str) -> bool:
        if coordinator_error(coordinator.store, group_id, ctx.broker_id) is not None:
            return False
        return every or ctx.allowed(request, DESCRIBE, ResourceType.GROUP, group_id)

    try:
        groups = coordinator.list_groups(
            getattr(body, "states_filter", ()), getattr(body, "types_filter", ())
        )
        groups = [g for g in groups if listed_here(g.group_id)]
    except KafkaApiError as e:
        return make(
            types.ListGroupsResponse, throttle_time=_ZERO, error_code=error_code(e), groups=()
        )
    listed = tuple(
        make(
            types.ListedGroup,
            group_id=g.group_id,
            protocol_type=g.protocol_type,
            group_state=g.state.value,
            group_type=g.group_type,
        )
        for g in groups
    )
    return make(types.ListGroupsResponse, throttle_time=_ZERO, error_code=NONE, groups=listed)


def describe_groups_response(
    ctx: ApiContext, coordinator: GroupCoordinator, request: Request
) -> Any:
    body, types = request.body, response_types(request)
    asked = getattr(body, "include_authorized_operations", False)
    described = []
    for group_id in body.groups:
        try:
            error = not_here(ctx, coordinator, group_id, request, DESCRIBE)
            if error is not None:
                raise error
            g = coordinator.describe_group(group_id)
            if g.state is GroupState.DEAD and request.header.api_version >= 6:
                raise GroupIdNotFoundError(f"Group {group_id} not found.")
        except KafkaApiError as e:
            state = GroupState.DEAD.value if isinstance(e, GroupIdNotFoundError) else ""
            described.append(
                make(
                    types.DescribedGroup,
                    error_code=error_code(e),
                    error_message=error_message(e),
                    group_id=group_id,
                    group_state=state,
                    protocol_type="",
                    protocol_data="",
                    members=(),
                    authorized_operations=OMITTED_OPERATIONS,
                )
            )
            continue
        members = tuple(
            make(
                types.DescribedGroupMember,
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                member_metadata=m.subscription,
                member_assignment=m.assignment,
            )
            for m in g.members
        )
        operations = (
            ctx.authorized_operations(request, ResourceType.GROUP, group_id)
            if asked
            else OMITTED_OPERATIONS
        )
        described.append(
            make(
                types.DescribedGroup,
                error_code=NONE,
                group_id=group_id,
                group_state=g.state.value,
                protocol_type=g.protocol_type,
                protocol_data=g.protocol_name or "",
                members=members,
                authorized_operations=operations,
            )
        )
    return make(types.DescribeGroupsResponse, throttle_time=_ZERO, groups=tuple(described))


def delete_groups_response(ctx: ApiContext, coordinator: GroupCoordinator, request: Request) -> Any:
    body, types = request.body, response_types(request)
    elsewhere = {g: not_here(ctx, coordinator, g, request, DELETE) for g in body.groups_names}
    results = coordinator.delete_groups([g for g, e in elsewhere.items() if e is None])
    results = {g: e if e is not None else results[g] for g, e in elsewhere.items()}
    entries = tuple(
        make(types.DeletableGroupResult, group_id=group_id, error_code=error_code(error))
        for group_id, error in results.items()
    )
    return make(types.DeleteGroupsResponse, throttle_time=_ZERO, results=entries)


def offset_delete_response(ctx: ApiContext, coordinator: GroupCoordinator, request: Request) -> Any:
    body, types = request.body, response_types(request)
    group_error = not_here(ctx, coordinator, body.group_id, request, DELETE)
    if group_error is not None:
        return make(
            types.OffsetDeleteResponse,
            error_code=error_code(group_error),
            throttle_time=_ZERO,
            topics=(),
        )
    unknown: dict[tuple[str, int], KafkaApiError] = {}
    wanted = []
    for t in body.topics:
        refusal = ctx.topic_refusal(request, AclOperation.READ, t.name)
        for p in t.partitions:
            try:
                if refusal is not None:
                    raise refusal
                ctx.broker.replica_manager.partition(topic_partition(t.name, p.partition_index))
                wanted.append((t.name, p.partition_index))
            except KafkaApiError as e:
                unknown[(t.name, p.partition_index)] = e
    group_error, results = coordinator.delete_offsets(body.group_id, wanted)
    if group_error is not None:
        return make(
            types.OffsetDeleteResponse,
            error_code=error_code(group_error),
            throttle_time=_ZERO,
            topics=(),
        )
    results = {**results, **unknown}
    topics = tuple(
        make(
            types.OffsetDeleteResponseTopic,
            name=t.name,
            partitions=tuple(
                make(
                    types.OffsetDeleteResponsePartition,
                    partition_index=p.partition_index,
                    error_code=error_code(results.get((t.name, p.partition_index))),
                )
                for p in t.partitions
            ),
        )
        for t in body.topics
    )
    return make(types.OffsetDeleteResponse, error_code=NONE, throttle_time=_ZERO, topics=topics)
