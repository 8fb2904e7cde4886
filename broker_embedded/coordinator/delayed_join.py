"""The group coordinator's delayed operations (Kafka's ``DelayedJoin``, ``InitialDelayedJoin``,
``DelayedSync`` and ``DelayedHeartbeat``), which park in its purgatories so that no request
handler thread ever waits for a rebalance or a session to run out.

- :class:`DelayedJoin` (rebalance purgatory, key ``("join", group)``): completes when every
  member has rejoined (the coordinator checks it after each JoinGroup, LeaveGroup and member
  removal), or after the group's rebalance timeout (the largest of its members'); completing
  starts the next generation (members that did not rejoin are dropped) and answers every
  waiting JoinGroup.
- :class:`InitialDelayedJoin`: the first rebalance of an Empty group waits
  ``group.initial.rebalance.delay.ms`` and again as long as new members keep arriving, at most
  the rebalance timeout in all, so that consumers started together land in one generation.
- :class:`DelayedSync` (key ``("sync", group)``): after a generation starts, the members have
  the rebalance timeout to send SyncGroup; those that did not are removed and the group
  rebalances again.
- :class:`DelayedHeartbeat` (heartbeat purgatory, key ``(group, member)``): a member's session;
  each heartbeat (or join, sync, commit) completes the current one and watches a new one.
  Expiring removes the member (a pending member: forgets its id).

Every operation uses its group's lock, and the coordinator's callbacks take it again (it is
reentrant) because the purgatory's reaper completes expired operations without it.
Thread safety: as :mod:`purgatory`; all state lives in the group, under its lock.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from broker_embedded.common.purgatory import DelayedOperation
from broker_embedded.coordinator.group_metadata import GroupMetadata

if TYPE_CHECKING:
    from broker_embedded.coordinator.group_coordinator import GroupCoordinator


def join_key(group_id: str) -> tuple[str, str]:
    return ("join", group_id)


def sync_key(group_id: str) -> tuple[str, str]:
    return ("sync", group_id)


class DelayedJoin(DelayedOperation):
    """Waits for every member to rejoin (or the rebalance timeout)."""

    def __init__(self, coordinator: GroupCoordinator, group: GroupMetadata, delay_ms: int) -> None:
        super().__init__(delay_ms, lock=group.lock)
        self.coordinator = coordinator
        self.group = group

    def __repr__(self) -> str:
        return f"DelayedJoin(group {self.group.group_id!r}, {self.delay_ms} ms)"

    def try_complete(self) -> bool:
        return self.coordinator.try_complete_join(self.group, self.force_complete)

    def on_complete(self) -> None:
        self.coordinator.on_complete_join(self.group)


class InitialDelayedJoin(DelayedJoin):
    """The first rebalance of an empty group: waits ``delay_ms`` and extends itself while new
    members arrive, up to ``remaining_ms`` more."""

    def __init__(
        self,
        coordinator: GroupCoordinator,
        group: GroupMetadata,
        configured_delay_ms: int,
        delay_ms: int,
        remaining_ms: int,
    ) -> None:
        super().__init__(coordinator, group, delay_ms)
        self.configured_delay_ms = configured_delay_ms
        self.remaining_ms = remaining_ms

    def try_complete(self) -> bool:
        return False

    def on_complete(self) -> None:
        with self.group.lock:
            if self.group.new_member_added and self.remaining_ms != 0:
                self.group.new_member_added = False
                delay = min(self.configured_delay_ms, self.remaining_ms)
                remaining = max(self.remaining_ms - self.delay_ms, 0)
                follow = InitialDelayedJoin(
                    self.coordinator, self.group, self.configured_delay_ms, delay, remaining
                )
                self.coordinator.watch_join(follow)
            else:
                super().on_complete()


class DelayedSync(DelayedOperation):
    """Waits for every member of ``generation_id`` to send SyncGroup."""

    def __init__(
        self, coordinator: GroupCoordinator, group: GroupMetadata, generation_id: int, delay_ms: int
    ) -> None:
        super().__init__(delay_ms, lock=group.lock)
        self.coordinator = coordinator
        self.group = group
        self.generation_id = generation_id

    def __repr__(self) -> str:
        return f"DelayedSync(group {self.group.group_id!r}, generation {self.generation_id})"

    def try_complete(self) -> bool:
        return self.coordinator.try_complete_pending_sync(
            self.group, self.generation_id, self.force_complete
        )

    def on_complete(self) -> None:
        return None

    def on_expiration(self) -> None:
        self.coordinator.on_expire_pending_sync(self.group, self.generation_id)


class DelayedHeartbeat(DelayedOperation):
    """A member's session: expires unless a heartbeat completes it first."""

    def __init__(
        self,
        coordinator: GroupCoordinator,
        group: GroupMetadata,
        member_id: str,
        is_pending: bool,
        timeout_ms: int,
    ) -> None:
        super().__init__(timeout_ms, lock=group.lock)
        self.coordinator = coordinator
        self.group = group
        self.member_id = member_id
        self.is_pending = is_pending

    def __repr__(self) -> str:
        return f"DelayedHeartbeat(group {self.group.group_id!r}, member {self.member_id!r})"

    def try_complete(self) -> bool:
        return self.coordinator.try_complete_heartbeat(
            self.group, self.member_id, self.is_pending, self.force_complete
        )

    def on_complete(self) -> None:
        return None

    def on_expiration(self) -> None:
        self.coordinator.on_expire_heartbeat(self.group, self.member_id, self.is_pending)
