"""Where the group coordinator persists what Kafka writes to ``__consumer_offsets`` (Kafka's
``GroupMetadataManager.storeGroup`` / ``storeOffsets`` / ``cleanupGroupMetadata``): the seam a
log-backed store plugs into, and the in-memory default.

Every state change Kafka persists goes through exactly one call of :class:`GroupStore`, made by
the coordinator while it holds the group's lock, before it changes its in-memory state:

- :meth:`~GroupStore.store_group`: a group metadata record (key v2 = group id, value v3 =
  :class:`GroupSnapshot`), when the leader's SyncGroup completes a rebalance (members with their
  assignments), when a rebalance leaves the group Empty (no members), and when a static member
  rejoins a Stable group under a new member id;
- :meth:`~GroupStore.store_offsets`: offset commit records (key v1 = group, topic, partition;
  value = :class:`OffsetAndMetadata`), one per committed partition, for OffsetCommit; for
  TxnOffsetCommit the same records as one transactional batch of the producer's id and epoch
  (Kafka's ``storeOffsets`` with a producer id): pending until the transaction's COMMIT or ABORT
  marker in the same partition decides them; returns the offsets stamped with their records'
  positions (:attr:`OffsetAndMetadata.record_offset`: of two commits the later record wins);
- :meth:`~GroupStore.complete_txn_offsets`: a transaction's marker decided the producer's
  pending offsets of the group (nothing to write for a log-backed store: the marker is in the
  log; the in-memory store moves or drops them);
- :meth:`~GroupStore.delete_offsets`: tombstones of offset commit keys (OffsetDelete);
- :meth:`~GroupStore.delete_group`: tombstones of the group metadata key and of every offset
  key of the group (DeleteGroups); ``partitions`` lists the group's committed partitions.

A call that fails raises a :class:`KafkaApiError` whose code the client gets (a log-backed store
maps append errors as Kafka's ``maybeConvertOffsetCommitError`` does: NOT_COORDINATOR,
COORDINATOR_NOT_AVAILABLE, INVALID_COMMIT_OFFSET_SIZE); the coordinator then leaves its state as
it was (a failed group store fails the SyncGroup round with that error and rebalances again).

:meth:`~GroupStore.load` returns what the store holds when the coordinator starts (Kafka's
``loadGroupsAndOffsets``): every live group's last snapshot, every group's committed offsets and
the transactional offsets no marker has decided yet (by group and producer id).
:meth:`~GroupStore.partition_of` names the ``__consumer_offsets`` partition of a group (None:
the store has no partitions, as the in-memory one), so a marker decides only its partition's
groups.

:class:`InMemoryGroupStore` keeps the last snapshot of each group and its committed offsets in
dicts (record offsets from a counter), so a coordinator restarted over the same store (in one
process) finds them again; pending transactional offsets are bounded by the open transactions'
partitions. Limit:
``max_offsets`` committed partitions over all groups (1,000,000); committing a new partition
beyond it raises :class:`KafkaApiError` (UNKNOWN_SERVER_ERROR) naming the group and partition,
updates of kept partitions succeed.

Thread safety: the coordinator calls a store from any request handler thread or timer thread
(under one group's lock, so calls for one group are serialized); the in-memory store guards
its dicts with its own lock.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Protocol

from broker_embedded.coordinator.group_metadata import (
    GroupSnapshot,
    OffsetAndMetadata,
    commit_later,
)
from broker_embedded.errors import KafkaApiError
from broker_embedded.storage.topic_partition import TopicPartition

MAX_OFFSETS = 1_000_000

TopicPartitionKey = tuple[str, int]  # topic, partition
Offsets = Mapping[TopicPartitionKey, OffsetAndMetadata]
NO_PRODUCER_ID = -1


@dataclass(frozen=True)
class LoadedGroups:
    """What a store holds: the snapshot of each live group, the committed offsets by group,
    the undecided transactional offsets by group and producer id."""

    groups: tuple[GroupSnapshot, ...] = ()
    offsets: Mapping[str, Offsets] = field(default_factory=dict)
    pending: Mapping[str, Mapping[int, Offsets]] = field(default_factory=dict)


class GroupStore(Protocol):
    """The persistence seam of the group coordinator (module docstring)."""

    def store_group(self, group: GroupSnapshot) -> None: ...

    def store_offsets(
        self,
        group_id: str,
        offsets: Offsets,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = -1,
    ) -> dict[TopicPartitionKey, OffsetAndMetadata]: ...

    def complete_txn_offsets(self, group_id: str, producer_id: int, commit: bool) -> None: ...

    def partition_of(self, group_id: str, create: bool = True) -> TopicPartition | None: ...

    def delete_offsets(self, group_id: str, partitions: Iterable[TopicPartitionKey]) -> None: ...

    def delete_group(self, group_id: str, partitions: Iterable[TopicPartitionKey]) -> None: ...

    def load(self) -> LoadedGroups: ...


class InMemoryGroupStore:
    """The default :class:`GroupStore`: dicts in memory, bounded by ``max_offsets``."""

    def __init__(self, max_offsets: int = MAX_OFFSETS) -> None:
        self.max_offsets = max_offsets
        self._lock = threading.Lock()
        self._groups: dict[str, GroupSnapshot] = {}
        self._offsets: dict[str, dict[TopicPartitionKey, OffsetAndMetadata]] = {}
        self._pending: dict[str, dict[int, dict[TopicPartitionKey, OffsetAndMetadata]]] = {}
        self._count = 0
        self._next_record = 0

    def store_group(self, group: GroupSnapshot) -> None:
        with self._lock:
            self._groups[group.group_id] = group

    def store_offsets(
        self,
        group_id: str,
        offsets: Offsets,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = -1,
    ) -> dict[TopicPartitionKey, OffsetAndMetadata]:
        with self._lock:
            kept = self._offsets.setdefault(group_id, {})
            new = [tp for tp in offsets if tp not in kept]
            if self._count + len(new) > self.max_offsets:
                topic, partition = new[0]
                raise KafkaApiError(
                    f"group {group_id!r} topic {topic!r} partition {partition}: the in-memory "
                    f"group store holds its limit of {self.max_offsets} committed partitions"
                )
            stored = {
                tp: replace(o, record_offset=self._next_record + i)
                for i, (tp, o) in enumerate(offsets.items())
            }
            self._next_record += len(stored)
            if producer_id == NO_PRODUCER_ID:
                kept.update(stored)
                self._count += len(new)
            else:
                self._pending.setdefault(group_id, {}).setdefault(producer_id, {}).update(stored)
            return stored

    def complete_txn_offsets(self, group_id: str, producer_id: int, commit: bool) -> None:
        with self._lock:
            pending = self._pending.get(group_id, {}).pop(producer_id, {})
            if not commit:
                return
            self._count += commit_later(self._offsets.setdefault(group_id, {}), pending)

    def partition_of(self, group_id: str, create: bool = True) -> None:
        """None: the in-memory store has no partitions (every marker decides every group)."""
        return None

    def delete_offsets(self, group_id: str, partitions: Iterable[TopicPartitionKey]) -> None:
        with self._lock:
            kept = self._offsets.get(group_id, {})
            for tp in partitions:
                self._count -= kept.pop(tp, None) is not None

    def delete_group(self, group_id: str, partitions: Iterable[TopicPartitionKey]) -> None:
        with self._lock:
            self._groups.pop(group_id, None)
            self._count -= len(self._offsets.pop(group_id, {}))

    def load(self) -> LoadedGroups:
        with self._lock:
            offsets = {g: dict(o) for g, o in self._offsets.items() if o}
            pending = {
                g: {pid: dict(o) for pid, o in by_pid.items() if o}
                for g, by_pid in self._pending.items()
                if any(by_pid.values())
            }
            return LoadedGroups(tuple(self._groups.values()), offsets, pending)

    def group(self, group_id: str) -> GroupSnapshot | None:
        """The last snapshot stored for ``group_id`` (what its metadata record would hold)."""
        with self._lock:
            return self._groups.get(group_id)

    def offsets(self, group_id: str) -> dict[TopicPartitionKey, OffsetAndMetadata]:
        with self._lock:
            return dict(self._offsets.get(group_id, {}))
