"""The group coordinator of classic consumer groups (Kafka's ``GroupCoordinator``, 3.x): the
rebalance protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup), committed offsets, and the
operator views (ListGroups, DescribeGroups, DeleteGroups, OffsetDelete).

A rebalance, as Kafka runs it: a JoinGroup moves the group to PreparingRebalance and parks in a
:class:`DelayedJoin` until every known member has rejoined (or the rebalance timeout drops those
that did not); then the generation grows by one, the protocol is chosen by the members' vote,
the leader's JoinGroup response lists every member's subscription, and the group waits in
CompletingRebalance for the leader's SyncGroup with the assignments. The followers' SyncGroups
wait until it comes (their callbacks are kept on the member), then all are answered and the
group is Stable. Members that miss their session (``session.timeout.ms`` without a heartbeat)
are removed and the group rebalances; heartbeats during a rebalance answer
REBALANCE_IN_PROGRESS so the members rejoin.

Checks, with Kafka's codes: INVALID_GROUP_ID (24) for an empty group id (JoinGroup, SyncGroup,
Heartbeat, LeaveGroup), INVALID_SESSION_TIMEOUT (26) outside ``group.min.session.timeout.ms``
(6000) .. ``group.max.session.timeout.ms`` (1800000), MEMBER_ID_REQUIRED (79) to a new
dynamic member of JoinGroup v4+ (it rejoins with the id handed out; a pending id expires after
its session timeout), INCONSISTENT_GROUP_PROTOCOL (23) for a protocol type or protocol set the
group cannot take, GROUP_MAX_SIZE_REACHED (81) beyond ``group.max.size``, UNKNOWN_MEMBER_ID
(25), ILLEGAL_GENERATION (22), REBALANCE_IN_PROGRESS (27), FENCED_INSTANCE_ID (82) for a member
id that no longer holds its group.instance.id, COORDINATOR_NOT_AVAILABLE (15) after shutdown.

Static membership (group.instance.id): a static member that rejoins with an unknown member id
takes over its old member (new id, the old id is fenced); in a Stable group whose protocol
choice does not change, the group's metadata is stored and the member gets the current
generation back, with no rebalance, so it keeps its assignment.

Persistence: every change Kafka writes to ``__consumer_offsets`` goes through the
:class:`GroupStore` (group_store.py), default in memory; the coordinator loads what the store
holds when it starts (groups come back Stable or Empty and their members' sessions restart).

Committed offsets (OffsetCommit, TxnOffsetCommit and their transaction markers, OffsetFetch,
OffsetDelete) and their retention: group_offsets.py. Heartbeats, member sessions and LeaveGroup:
group_heartbeats.py.

Limits: ``max_groups`` groups (100,000): a JoinGroup or commit that would create one more is
COORDINATOR_NOT_AVAILABLE (15) naming the limit; the heartbeat and rebalance purgatories hold at
most ``purgatory.max.pending`` operations each, and an operation beyond that expires at once (a
member whose session cannot be watched is removed, so memory stays bounded);
committed offsets as the store bounds them.

Thread safety: the coordinator's lock guards the group map; each group's lock guards the
group (module ``group_metadata``); lock order: the load lock, then a group lock, then the
coordinator's lock or the purgatory's (the coordinator's lock is never held while taking a group
lock). Callbacks (responses) run under the group lock in the thread that completed the step: a
request handler thread or a purgatory reaper; they only queue a response. :meth:`on_txn_marker`
runs in the thread that wrote the marker, the expiry in its own thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from broker_embedded.common.purgatory import DelayedOperationPurgatory
from broker_embedded.coordinator.delayed_join import (
    DelayedJoin,
    DelayedSync,
    InitialDelayedJoin,
    join_key,
    sync_key,
)
from broker_embedded.coordinator.group_heartbeats import GroupHeartbeats
from broker_embedded.coordinator.group_metadata import (
    UNKNOWN_MEMBER_ID,
    GroupMetadata,
    GroupOverview,
    GroupSnapshot,
    GroupState,
    JoinCallback,
    JoinResult,
    MemberMetadata,
    Protocol,
    SyncCallback,
    SyncResult,
    new_member_id,
)
from broker_embedded.coordinator.group_offsets import GroupOffsets
from broker_embedded.coordinator.group_store import GroupStore, InMemoryGroupStore
from broker_embedded.errors import (
    CoordinatorNotAvailableError,
    FencedInstanceIdError,
    GroupIdNotFoundError,
    GroupMaxSizeReachedError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InvalidGroupIdError,
    InvalidSessionTimeoutError,
    KafkaApiError,
    MemberIdRequiredError,
    NonEmptyGroupError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)

log = logging.getLogger(__name__)

NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000
MAX_GROUPS = 100_000
_S = GroupState


@dataclass(frozen=True)
class GroupConfig:
    """The coordinator's broker settings (Kafka's names and defaults)."""

    min_session_timeout_ms: int = 6_000  # group.min.session.timeout.ms
    max_session_timeout_ms: int = 1_800_000  # group.max.session.timeout.ms
    max_size: int = 2**31 - 1  # group.max.size
    initial_rebalance_delay_ms: int = 3_000  # group.initial.rebalance.delay.ms
    max_pending: int = 10_000  # purgatory.max.pending
    max_groups: int = MAX_GROUPS
    offsets_retention_ms: int = 10_080 * 60_000  # offsets.retention.minutes
    offsets_retention_check_interval_ms: int = 600_000  # offsets.retention.check.interval.ms


@dataclass(frozen=True)
class JoinRequest:
    """One JoinGroup as the coordinator takes it (the handler fills it from any version)."""

    group_id: str
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: tuple[Protocol, ...]
    require_known_member_id: bool = True  # JoinGroup v4+
    support_skipping_assignment: bool = False  # JoinGroup v9+


class GroupCoordinator(GroupHeartbeats, GroupOffsets):
    """Classic consumer groups of one broker; see the module docstring."""

    def __init__(
        self,
        config: GroupConfig | None = None,
        store: GroupStore | None = None,
        name: str = "0",
        load: bool = True,
    ) -> None:
        self.config = config or GroupConfig()
        self.store: GroupStore = store if store is not None else InMemoryGroupStore()
        pending = self.config.max_pending
        self.heartbeat_purgatory = DelayedOperationPurgatory(
            f"Heartbeat-{name}", max_pending=pending
        )
        self.rebalance_purgatory = DelayedOperationPurgatory(
            f"Rebalance-{name}", max_pending=pending
        )
        self._lock = threading.Lock()
        self._groups: dict[str, GroupMetadata] = {}
        self._load_lock = threading.Lock()
        self._active = True
        self._stopped = threading.Event()
        self._expiry: threading.Thread | None = None
        if load:
            self.load()

    # -- lifecycle ---------------------------------------------------------------------------

    def shutdown(self, timeout: float = 5.0) -> None:
        """Stop the timers; pending joins and syncs are answered COORDINATOR_NOT_AVAILABLE
        (members rejoin elsewhere), sessions stop expiring. Idempotent."""
        with self._lock:
            self._active = False
            groups = list(self._groups.values())
        self._stopped.set()
        if self._expiry is not None:
            self._expiry.join(timeout)
        for group in groups:
            with group.lock:
                self._fail_waiting(
                    group,
                    CoordinatorNotAvailableError(
                        f"group {group.group_id!r}: the coordinator is shutting down"
                    ),
                )
        self.heartbeat_purgatory.shutdown(timeout)
        self.rebalance_purgatory.shutdown(timeout)

    def _fail_waiting(self, group: GroupMetadata, error: KafkaApiError) -> None:
        for member in list(group.members.values()):
            group.invoke_join(member, JoinResult(member.member_id, error))
            group.invoke_sync(member, SyncResult(error))

    def load(self) -> None:
        """Take what the store holds (the constructor calls it unless told not to: a caller that
        registers :meth:`on_txn_marker` first loads after)."""
        with self._load_lock:
            loaded = self.store.load()
            groups = {snap.group_id: self._restore(snap) for snap in loaded.groups}
            for group_id, offsets in loaded.offsets.items():
                groups.setdefault(group_id, GroupMetadata(group_id)).offsets.update(offsets)
            for group_id, by_producer in loaded.pending.items():
                group = groups.setdefault(group_id, GroupMetadata(group_id))
                for pid, offsets in by_producer.items():
                    group.pending_txn_offsets.setdefault(pid, {}).update(offsets)
            with self._lock:
                self._groups.update(groups)

    def _restore(self, snap: GroupSnapshot) -> GroupMetadata:
        """A loaded group: Stable with its members (sessions restart now), or Empty."""
        group = GroupMetadata(
            snap.group_id,
            generation_id=snap.generation_id,
            protocol_type=snap.protocol_type or None,
            protocol_name=snap.protocol_name,
            leader_id=snap.leader_id,
        )
        if snap.state_timestamp_ms >= 0:  # when it became Empty, for offset retention
            group.state_timestamp_ms = snap.state_timestamp_ms
        for m in snap.members:
            assert snap.protocol_name is not None
            member = MemberMetadata(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.rebalance_timeout_ms,
                m.session_timeout_ms,
                snap.protocol_type,
                (Protocol(snap.protocol_name, m.subscription),),
            )
            member.assignment = m.assignment
            group.members[m.member_id] = member
            if m.group_instance_id is not None:
                group.static_members[m.group_instance_id] = m.member_id
        if group.members:
            group.state = _S.STABLE
            group.subscribed_topics = group._subscribed_topics()
            for member in group.members.values():
                self._schedule_heartbeat(group, member, member.session_timeout_ms)
        return group

    # -- groups ------------------------------------------------------------------------------

    def _group(self, group_id: str) -> GroupMetadata | None:
        with self._lock:
            return self._groups.get(group_id)

    def _get_or_create(self, group_id: str) -> GroupMetadata:
        with self._lock:
            group = self._groups.get(group_id)
            if group is None:
                if len(self._groups) >= self.config.max_groups:
                    raise CoordinatorNotAvailableError(
                        f"group {group_id!r}: the coordinator holds its limit of "
                        f"{self.config.max_groups} groups"
                    )
                group = self._groups[group_id] = GroupMetadata(group_id)
            return group

    def _check_active(self, group_id: str, required: bool = True) -> None:
        if required and not group_id:
            raise InvalidGroupIdError("the group id must not be empty")
        if not self._active:
            raise CoordinatorNotAvailableError(f"group {group_id!r}: the coordinator is shut down")

    # -- JoinGroup ---------------------------------------------------------------------------

    def join_group(self, req: JoinRequest, callback: JoinCallback) -> None:
        """Answer ``callback`` now (an error, or a member id to rejoin with) or when the
        rebalance completes."""
        try:
            self._check_active(req.group_id)
            cfg = self.config
            if (
                not cfg.min_session_timeout_ms
                <= req.session_timeout_ms
                <= cfg.max_session_timeout_ms
            ):
                raise InvalidSessionTimeoutError(
                    f"group {req.group_id!r}: session timeout {req.session_timeout_ms} ms is "
                    f"outside {cfg.min_session_timeout_ms}..{cfg.max_session_timeout_ms} ms"
                )
            unknown = req.member_id == UNKNOWN_MEMBER_ID
            group = self._get_or_create(req.group_id) if unknown else self._group(req.group_id)
            if group is None:
                raise UnknownMemberIdError(
                    f"group {req.group_id!r} does not exist (member {req.member_id!r})"
                )
        except KafkaApiError as e:
            callback(JoinResult(req.member_id, e))
            return
        with group.lock:
            self._join_locked(group, req, unknown, callback)
            if group.is_(_S.PREPARING_REBALANCE):
                self.rebalance_purgatory.check_and_complete(join_key(group.group_id))

    def _join_locked(
        self, group: GroupMetadata, req: JoinRequest, unknown: bool, callback: JoinCallback
    ) -> None:
        if not self._accept_joining(group, req.member_id):
            group.remove(req.member_id)
            callback(
                JoinResult(
                    UNKNOWN_MEMBER_ID,
                    GroupMaxSizeReachedError(
                        f"group {group.group_id!r} has group.max.size "
                        f"{self.config.max_size} members"
                    ),
                )
            )
            return
        error = self._join_precheck(group, req)
        if error is not None:
            callback(JoinResult(UNKNOWN_MEMBER_ID if unknown else req.member_id, error))
        elif unknown:
            self._new_member_join(group, req, callback)
        else:
            self._current_member_join(group, req, callback)

    def _accept_joining(self, group: GroupMetadata, member_id: str) -> bool:
        max_size = self.config.max_size
        if group.state in (_S.EMPTY, _S.DEAD):
            return True
        if group.is_(_S.PREPARING_REBALANCE):
            return (
                group.has(member_id) and group.members[member_id].awaiting_join is not None
            ) or group.num_awaiting_join < max_size
        return group.has(member_id) or group.size < max_size

    def _join_precheck(self, group: GroupMetadata, req: JoinRequest) -> KafkaApiError | None:
        if group.is_(_S.DEAD):
            return CoordinatorNotAvailableError(
                f"group {group.group_id!r} was just removed; find its coordinator again"
            )
        if not group.supports_protocols(req.protocol_type, {p.name for p in req.protocols}):
            return InconsistentGroupProtocolError(
                f"group {group.group_id!r} (protocol type {group.protocol_type!r}) cannot take "
                f"member {req.member_id!r} with type {req.protocol_type!r} and protocols "
                f"{[p.name for p in req.protocols]}"
            )
        return None

    def _new_member_join(self, group: GroupMetadata, req: JoinRequest, cb: JoinCallback) -> None:
        member_id = new_member_id(req.client_id, req.group_instance_id)
        instance = req.group_instance_id
        if instance is not None and instance in group.static_members:
            self._update_static_member(group, req, group.static_members[instance], member_id, cb)
        elif instance is None and req.require_known_member_id:
            group.pending_members.add(member_id)
            self._schedule_pending_expiration(group, member_id, req.session_timeout_ms)
            cb(
                JoinResult(
                    member_id,
                    MemberIdRequiredError(
                        f"group {group.group_id!r}: rejoin with member id {member_id!r}"
                    ),
                )
            )
        else:
            self._add_member_and_rebalance(group, req, member_id, cb)

    def _current_member_join(
        self, group: GroupMetadata, req: JoinRequest, cb: JoinCallback
    ) -> None:
        member_id = req.member_id
        if member_id in group.pending_members:
            self._add_member_and_rebalance(group, req, member_id, cb)
            return
        error = self._validate_member(group, member_id, req.group_instance_id, "join")
        if error is not None:
            cb(JoinResult(member_id, error))
            return
        member = group.members.get(member_id)
        state = group.state
        if state is _S.PREPARING_REBALANCE:
            self._update_member_and_rebalance(group, member, req, cb)
        elif state is _S.COMPLETING_REBALANCE and member.matches(req.protocols):
            members = group.join_members() if group.is_leader(member_id) else ()
            cb(self._join_result(group, member_id, members))
        elif (
            state is _S.STABLE and not group.is_leader(member_id) and member.matches(req.protocols)
        ):
            cb(self._join_result(group, member_id, ()))
        elif state in (_S.COMPLETING_REBALANCE, _S.STABLE):
            self._update_member_and_rebalance(group, member, req, cb)
        else:  # Empty or Dead: the member resets and rejoins
            cb(
                JoinResult(
                    member_id,
                    UnknownMemberIdError(
                        f"group {group.group_id!r} is {state.value}: "
                        f"member {member_id!r} must rejoin"
                    ),
                )
            )

    def _join_result(
        self, group: GroupMetadata, member_id: str, members: tuple, skip: bool = False
    ) -> JoinResult:
        return JoinResult(
            member_id,
            None,
            group.generation_id,
            group.protocol_type,
            group.protocol_name,
            group.leader_id or "",
            skip,
            members,
        )

    def _validate_member(
        self, group: GroupMetadata, member_id: str, instance_id: str | None, operation: str
    ) -> KafkaApiError | None:
        """Kafka's ``validateCurrentMember``: the instance id (if any) maps to ``member_id``,
        and the member exists."""
        if instance_id is not None:
            current = group.static_members.get(instance_id)
            if current is not None and current != member_id:
                return FencedInstanceIdError(
                    f"group {group.group_id!r} {operation}: member {member_id!r} of instance "
                    f"{instance_id!r} is fenced by member {current!r}"
                )
            if current is None:
                return UnknownMemberIdError(
                    f"group {group.group_id!r} {operation}: no member holds instance "
                    f"{instance_id!r}"
                )
        if not group.has(member_id):
            return UnknownMemberIdError(
                f"group {group.group_id!r} {operation}: unknown member {member_id!r}"
            )
        return None

    def _add_member_and_rebalance(
        self, group: GroupMetadata, req: JoinRequest, member_id: str, cb: JoinCallback
    ) -> None:
        member = MemberMetadata(
            member_id,
            req.group_instance_id,
            req.client_id,
            req.client_host,
            req.rebalance_timeout_ms,
            req.session_timeout_ms,
            req.protocol_type,
            req.protocols,
        )
        member.is_new = True
        if group.is_(_S.PREPARING_REBALANCE) and group.generation_id == 0:
            group.new_member_added = True
        group.add(member, cb)
        self._schedule_heartbeat(group, member, NEW_MEMBER_JOIN_TIMEOUT_MS)
        self._maybe_prepare_rebalance(group, f"new member {member_id!r} joined")

    def _update_member_and_rebalance(
        self, group: GroupMetadata, member: MemberMetadata, req: JoinRequest, cb: JoinCallback
    ) -> None:
        group.update_member(
            member, req.protocols, req.rebalance_timeout_ms, req.session_timeout_ms, cb
        )
        self._maybe_prepare_rebalance(group, f"member {member.member_id!r} rejoined")

    def _update_static_member(
        self, group: GroupMetadata, req: JoinRequest, old_id: str, new_id: str, cb: JoinCallback
    ) -> None:
        """A known group.instance.id rejoins with an unknown member id (a restarted static
        member): it replaces its old member id."""
        instance = req.group_instance_id
        assert instance is not None
        fenced = FencedInstanceIdError(
            f"group {group.group_id!r}: instance {instance!r} rejoined as member {new_id!r}"
        )
        leader = group.leader_id
        member = group.replace_static_member(instance, old_id, new_id, fenced)
        self._schedule_heartbeat(group, member, member.session_timeout_ms)
        old = (member.protocols, member.rebalance_timeout_ms, member.session_timeout_ms)
        group.update_member(
            member, req.protocols, req.rebalance_timeout_ms, req.session_timeout_ms, cb
        )
        if group.is_(_S.STABLE):
            if group.select_protocol() != group.protocol_name:
                self._maybe_prepare_rebalance(group, f"static member {new_id!r} changed protocol")
                return
            try:
                self.store.store_group(group.snapshot())
            except KafkaApiError as e:
                group.update_member(member, old[0], old[1], old[2], None)
                group.replace_static_member(instance, new_id, old_id, fenced)
                self._schedule_heartbeat(group, member, member.session_timeout_ms)
                cb(
                    JoinResult(
                        UNKNOWN_MEMBER_ID,
                        e,
                        group.generation_id,
                        group.protocol_type,
                        group.protocol_name,
                        leader or "",
                    )
                )
                return
            is_leader = group.is_leader(new_id)
            skip = req.support_skipping_assignment and is_leader
            members = group.join_members() if skip else ()
            group.invoke_join(member, self._join_result(group, new_id, members, skip))
        elif group.is_(_S.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, f"static member {new_id!r} rejoined")
        # PreparingRebalance: the member waits for the rebalance like everyone else

    def _maybe_prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.is_(_S.COMPLETING_REBALANCE):
            self._reset_and_propagate(
                group,
                RebalanceInProgressError(f"group {group.group_id!r} rebalances again: {reason}"),
            )
        group.pending_sync.clear()
        self.rebalance_purgatory.check_and_complete(sync_key(group.group_id))
        delay = self.config.initial_rebalance_delay_ms
        op: DelayedJoin
        if group.is_(_S.EMPTY):
            remaining = max(group.rebalance_timeout_ms() - delay, 0)
            op = InitialDelayedJoin(self, group, delay, delay, remaining)
        else:
            op = DelayedJoin(self, group, group.rebalance_timeout_ms())
        group.transition_to(_S.PREPARING_REBALANCE)
        log.info(
            "group %r prepares to rebalance (generation %d): %s",
            group.group_id,
            group.generation_id,
            reason,
        )
        self.watch_join(op)

    def watch_join(self, op: DelayedJoin) -> None:
        self.rebalance_purgatory.try_complete_else_watch(op, [join_key(op.group.group_id)])

    def try_complete_join(self, group: GroupMetadata, force: Callable[[], bool]) -> bool:
        with group.lock:
            return force() if group.has_all_members_joined() else False

    def on_complete_join(self, group: GroupMetadata) -> None:
        with group.lock:
            for member in [m for m in group.not_yet_rejoined() if not m.is_static]:
                group.remove(member.member_id)
                self.heartbeat_purgatory.check_and_complete((group.group_id, member.member_id))
            if group.is_(_S.DEAD) or not self._active:
                return
            if not group.maybe_elect_new_joined_leader() and group.members:
                self.watch_join(DelayedJoin(self, group, group.rebalance_timeout_ms()))
                return
            group.init_next_generation()
            if group.is_(_S.EMPTY):
                self._store_group_quietly(group)
                return
            log.info(
                "group %r generation %d: %d members",
                group.group_id,
                group.generation_id,
                group.size,
            )
            for member in list(group.members.values()):
                members = group.join_members() if group.is_leader(member.member_id) else ()
                group.invoke_join(member, self._join_result(group, member.member_id, members))
                self._schedule_heartbeat(group, member, member.session_timeout_ms)
                member.is_new = False
                group.pending_sync.add(member.member_id)
            op = DelayedSync(self, group, group.generation_id, group.rebalance_timeout_ms())
            self.rebalance_purgatory.try_complete_else_watch(op, [sync_key(group.group_id)])

    def _store_group_quietly(self, group: GroupMetadata) -> None:
        try:
            self.store.store_group(group.snapshot())
        except KafkaApiError:
            log.warning(
                "group %r: storing its empty metadata failed", group.group_id, exc_info=True
            )

    # -- SyncGroup ---------------------------------------------------------------------------

    def sync_group(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: Mapping[str, bytes],
        callback: SyncCallback,
    ) -> None:
        try:
            self._check_active(group_id)
            group = self._group(group_id)
            if group is None:
                raise UnknownMemberIdError(f"group {group_id!r} does not exist")
        except KafkaApiError as e:
            callback(SyncResult(e))
            return
        with group.lock:
            error = self._validate_generation(
                group, generation_id, member_id, group_instance_id, "sync"
            )
            if error is None and (
                (protocol_type is not None and protocol_type != group.protocol_type)
                or (protocol_name is not None and protocol_name != group.protocol_name)
            ):
                error = InconsistentGroupProtocolError(
                    f"group {group_id!r} sync: protocol {protocol_type!r}/{protocol_name!r} is "
                    f"not the group's {group.protocol_type!r}/{group.protocol_name!r}"
                )
            if error is not None:
                callback(SyncResult(error))
            else:
                self._sync_locked(group, member_id, assignments, callback)

    def _validate_generation(
        self,
        group: GroupMetadata,
        generation_id: int,
        member_id: str,
        instance_id: str | None,
        operation: str,
    ) -> KafkaApiError | None:
        if group.is_(_S.DEAD):
            return CoordinatorNotAvailableError(f"group {group.group_id!r} was just removed")
        error = self._validate_member(group, member_id, instance_id, operation)
        if error is None and generation_id != group.generation_id:
            error = IllegalGenerationError(
                f"group {group.group_id!r} {operation}: member {member_id!r} names generation "
                f"{generation_id}, the group's is {group.generation_id}"
            )
        return error

    def _sync_locked(
        self,
        group: GroupMetadata,
        member_id: str,
        assignments: Mapping[str, bytes],
        callback: SyncCallback,
    ) -> None:
        if group.is_(_S.EMPTY):
            callback(
                SyncResult(
                    UnknownMemberIdError(
                        f"group {group.group_id!r} is Empty: member {member_id!r} must rejoin"
                    )
                )
            )
        elif group.is_(_S.PREPARING_REBALANCE):
            callback(
                SyncResult(RebalanceInProgressError(f"group {group.group_id!r} is rebalancing"))
            )
        elif group.is_(_S.COMPLETING_REBALANCE):
            group.members[member_id].awaiting_sync = callback
            self._remove_pending_sync(group, member_id)
            if group.is_leader(member_id):
                full = {m: assignments.get(m, b"") for m in group.members}
                self._complete_sync(group, full)
        else:  # Stable: the current assignment
            self._remove_pending_sync(group, member_id)
            member = group.members[member_id]
            callback(SyncResult(None, group.protocol_type, group.protocol_name, member.assignment))
            self._schedule_heartbeat(group, member, member.session_timeout_ms)

    def _complete_sync(self, group: GroupMetadata, assignment: Mapping[str, bytes]) -> None:
        """The leader's assignment: store the group, then answer every waiting member."""
        previous = {m.member_id: m.assignment for m in group.members.values()}
        for member in group.members.values():
            member.assignment = assignment[member.member_id]
        try:
            self.store.store_group(group.snapshot())
        except KafkaApiError as e:
            for member in group.members.values():
                member.assignment = previous[member.member_id]
            self._reset_and_propagate(group, e)
            self._maybe_prepare_rebalance(group, f"storing the group failed: {e}")
            return
        self._propagate(group, None)
        group.transition_to(_S.STABLE)

    def _reset_and_propagate(self, group: GroupMetadata, error: KafkaApiError) -> None:
        for member in group.members.values():
            member.assignment = b""
        self._propagate(group, error)

    def _propagate(self, group: GroupMetadata, error: KafkaApiError | None) -> None:
        for member in list(group.members.values()):
            result = (
                SyncResult(None, group.protocol_type, group.protocol_name, member.assignment)
                if error is None
                else SyncResult(error)
            )
            if group.invoke_sync(member, result):
                self._schedule_heartbeat(group, member, member.session_timeout_ms)

    def _remove_pending_sync(self, group: GroupMetadata, member_id: str) -> None:
        group.pending_sync.discard(member_id)
        self.rebalance_purgatory.check_and_complete(sync_key(group.group_id))

    def try_complete_pending_sync(
        self, group: GroupMetadata, generation_id: int, force: Callable[[], bool]
    ) -> bool:
        with group.lock:
            if generation_id != group.generation_id or group.state in (
                _S.DEAD,
                _S.EMPTY,
                _S.PREPARING_REBALANCE,
            ):
                return force()
            return force() if not group.pending_sync else False

    def on_expire_pending_sync(self, group: GroupMetadata, generation_id: int) -> None:
        with group.lock:
            if not self._active or generation_id != group.generation_id:
                return
            if group.state not in (_S.COMPLETING_REBALANCE, _S.STABLE) or not group.pending_sync:
                return
            missing = sorted(group.pending_sync)
            for member_id in missing:
                group.remove(member_id)
                self.heartbeat_purgatory.check_and_complete((group.group_id, member_id))
            self._prepare_rebalance(group, f"members {missing} sent no SyncGroup in time")

    # -- Heartbeat and sessions --------------------------------------------------------------

    # -- LeaveGroup --------------------------------------------------------------------------

    # -- offsets -----------------------------------------------------------------------------

    # -- offset retention --------------------------------------------------------------------

    # -- ListGroups, DescribeGroups, DeleteGroups, OffsetDelete ------------------------------

    def list_groups(
        self, states: Iterable[str] = (), types: Iterable[str] = ()
    ) -> list[GroupOverview]:
        """Every group (sorted by id) whose state and type match the filters (case-insensitive;
        empty: all); classic groups only."""
        self._check_active("", required=False)
        wanted_states = {s.lower() for s in states}
        wanted_types = {t.lower() for t in types}
        if wanted_types and "classic" not in wanted_types:
            return []
        with self._lock:
            groups = sorted(self._groups.values(), key=lambda g: g.group_id)
        out = []
        for group in groups:
            with group.lock:
                if group.is_(_S.DEAD):
                    continue
                if not wanted_states or group.state.value.lower() in wanted_states:
                    out.append(group.overview())
        return out

    def describe_group(self, group_id: str) -> GroupSnapshot:
        """The group as DescribeGroups shows it (state Dead, no members, when unknown)."""
        self._check_active(group_id, required=False)
        group = self._group(group_id)
        if group is None:
            return GroupSnapshot(group_id, "", -1, None, None, -1, (), _S.DEAD)
        with group.lock:
            return group.summary()

    def delete_groups(self, group_ids: Iterable[str]) -> dict[str, KafkaApiError | None]:
        """Delete each Empty group with its offsets (tombstones through the store)."""
        results: dict[str, KafkaApiError | None] = {}
        for group_id in group_ids:
            try:
                self._check_active(group_id, required=False)
                self._delete_group(group_id)
                results[group_id] = None
            except KafkaApiError as e:
                results[group_id] = e
        return results

    def _delete_group(self, group_id: str) -> None:
        group = self._group(group_id)
        if group is None or group.is_(_S.DEAD):
            raise GroupIdNotFoundError(f"group {group_id!r} does not exist")
        with group.lock:
            if not group.is_(_S.EMPTY):
                raise NonEmptyGroupError(
                    f"group {group_id!r} is {group.state.value} with {group.size} members"
                )
            self.store.delete_group(group_id, sorted(group.offsets))
            self._forget(group)

    def _forget(self, group: GroupMetadata) -> None:
        """The group is Dead and no longer known (under its lock)."""
        group.transition_to(_S.DEAD)
        group.offsets.clear()
        with self._lock:
            if self._groups.get(group.group_id) is group:
                del self._groups[group.group_id]
