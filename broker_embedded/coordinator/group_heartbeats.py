"""Member sessions of classic consumer groups (Kafka's ``GroupCoordinator`` Heartbeat and
LeaveGroup, with its ``DelayedHeartbeat`` expiry): :class:`GroupHeartbeats`, a base class of
:class:`~broker_embedded.coordinator.group_coordinator.GroupCoordinator`, and
:class:`MemberIdentity`, a member named by LeaveGroup.

A member that sends no heartbeat within its ``session.timeout.ms`` is removed and the group
rebalances; a heartbeat during a rebalance answers REBALANCE_IN_PROGRESS so the member rejoins;
a pending member (a member id handed out by MEMBER_ID_REQUIRED) expires after its session
timeout. LeaveGroup removes members by id or, with member id "", by group.instance.id.

Thread safety: as the coordinator's (group_coordinator.py): each group's lock guards its
members; purgatory callbacks run in the reaper thread under the group lock. These methods work
on the coordinator's state, so this class is never used alone.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from broker_embedded.coordinator.delayed_join import DelayedHeartbeat, join_key
from broker_embedded.coordinator.group_metadata import (
    UNKNOWN_MEMBER_ID,
    GroupMetadata,
    GroupState,
    JoinResult,
    MemberMetadata,
)
from broker_embedded.errors import (
    CoordinatorNotAvailableError,
    KafkaApiError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)

log = logging.getLogger(__name__)
_S = GroupState


@dataclass(frozen=True)
class MemberIdentity:
    """A member named by LeaveGroup (member id "" with an instance id: removal by instance)."""

    member_id: str
    group_instance_id: str | None = None


class GroupHeartbeats:
    """The Heartbeat and LeaveGroup methods of the group coordinator (module docstring)."""

    def heartbeat(
        self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int
    ) -> KafkaApiError | None:
        try:
            self._check_active(group_id)
        except KafkaApiError as e:
            return e
        group = self._group(group_id)
        if group is None:
            return UnknownMemberIdError(f"group {group_id!r} does not exist")
        with group.lock:
            error = self._validate_generation(
                group, generation_id, member_id, group_instance_id, "heartbeat"
            )
            if error is not None:
                return error
            if group.is_(_S.EMPTY):
                return UnknownMemberIdError(f"group {group_id!r} is Empty")
            member = group.members[member_id]
            self._schedule_heartbeat(group, member, member.session_timeout_ms)
            if group.is_(_S.PREPARING_REBALANCE):
                return RebalanceInProgressError(f"group {group_id!r} is rebalancing: rejoin")
            return None

    def _schedule_heartbeat(
        self, group: GroupMetadata, member: MemberMetadata, timeout_ms: int
    ) -> None:
        """Complete the member's session timer and start the next one (Kafka's
        ``completeAndScheduleNextExpiration``)."""
        key = (group.group_id, member.member_id)
        member.heartbeat_satisfied = True
        self.heartbeat_purgatory.check_and_complete(key)
        member.heartbeat_satisfied = False
        op = DelayedHeartbeat(self, group, member.member_id, False, timeout_ms)
        self.heartbeat_purgatory.try_complete_else_watch(op, [key])

    def _schedule_pending_expiration(
        self, group: GroupMetadata, member_id: str, timeout_ms: int
    ) -> None:
        op = DelayedHeartbeat(self, group, member_id, True, timeout_ms)
        self.heartbeat_purgatory.try_complete_else_watch(op, [(group.group_id, member_id)])

    def try_complete_heartbeat(
        self, group: GroupMetadata, member_id: str, is_pending: bool, force: Callable[[], bool]
    ) -> bool:
        with group.lock:
            if group.is_(_S.DEAD):
                return force()
            if is_pending:
                return force() if group.has(member_id) else False
            member = group.members.get(member_id)
            if member is None or member.has_satisfied_heartbeat():
                return force()
            return False

    def on_expire_heartbeat(self, group: GroupMetadata, member_id: str, is_pending: bool) -> None:
        with group.lock:
            if group.is_(_S.DEAD) or not self._active:
                return
            if is_pending:
                if member_id in group.pending_members:
                    self._remove_pending_member(group, member_id)
                return
            member = group.members.get(member_id)
            if member is not None and not member.has_satisfied_heartbeat():
                log.info("group %r: %r missed its session, removing it", group.group_id, member)
                self._remove_member_and_update(group, member, "session expired")

    def _remove_member_and_update(
        self, group: GroupMetadata, member: MemberMetadata, reason: str
    ) -> None:
        group.invoke_join(
            member,
            JoinResult(
                UNKNOWN_MEMBER_ID,
                UnknownMemberIdError(
                    f"group {group.group_id!r}: member {member.member_id!r} removed ({reason})"
                ),
            ),
        )
        group.remove(member.member_id)
        if group.state in (_S.STABLE, _S.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group, f"member {member.member_id!r}: {reason}")
        elif group.is_(_S.PREPARING_REBALANCE):
            self.rebalance_purgatory.check_and_complete(join_key(group.group_id))

    def _remove_pending_member(self, group: GroupMetadata, member_id: str) -> None:
        group.remove(member_id)
        if group.is_(_S.PREPARING_REBALANCE):
            self.rebalance_purgatory.check_and_complete(join_key(group.group_id))

    def leave_group(
        self, group_id: str, members: Sequence[MemberIdentity]
    ) -> tuple[KafkaApiError | None, list[KafkaApiError | None]]:
        """The top-level error and one error per leaving member."""
        try:
            self._check_active(group_id)
        except KafkaApiError as e:
            return e, []
        group = self._group(group_id)
        if group is None:
            return None, [UnknownMemberIdError(f"group {group_id!r} does not exist")] * len(members)
        with group.lock:
            if group.is_(_S.DEAD):
                return CoordinatorNotAvailableError(f"group {group_id!r} was just removed"), []
            return None, [self._leave_one(group, m) for m in members]

    def _leave_one(self, group: GroupMetadata, leaving: MemberIdentity) -> KafkaApiError | None:
        member_id = leaving.member_id
        if member_id == UNKNOWN_MEMBER_ID:
            current = group.static_members.get(leaving.group_instance_id or "")
            if current is None:
                return UnknownMemberIdError(
                    f"group {group.group_id!r}: no member holds instance "
                    f"{leaving.group_instance_id!r}"
                )
            member_id = current
        elif member_id in group.pending_members:
            self._remove_pending_member(group, member_id)
            self.heartbeat_purgatory.check_and_complete((group.group_id, member_id))
            return None
        else:
            error = self._validate_member(group, member_id, leaving.group_instance_id, "leave")
            if error is not None:
                return error
        self._remove_member_and_update(group, group.members[member_id], "left the group")
        self.heartbeat_purgatory.check_and_complete((group.group_id, member_id))
        return None
