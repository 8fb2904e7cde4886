"""Committed offsets of classic consumer groups (Kafka's ``GroupCoordinator`` OffsetCommit,
TxnOffsetCommit, OffsetFetch and OffsetDelete, and its ``cleanupGroupMetadata``):
:class:`GroupOffsets`, a base class of
:class:`~broker_embedded.coordinator.group_coordinator.GroupCoordinator` holding its offset
methods.

Transactional offsets (Kafka's ``GroupMetadata.pendingTransactionalOffsetCommits``):
TxnOffsetCommit stores them at once as the producer's transactional records and keeps them pending
in the group by producer id; OffsetFetch does not return them, and with ``require_stable`` answers
UNSTABLE_OFFSET_COMMIT for their partitions. The transaction's marker in the group's
``__consumer_offsets`` partition decides them (:meth:`GroupOffsets.on_txn_marker`, called by the
transaction coordinator once the marker is appended; Kafka's ``handleTxnCompletion``): a COMMIT
makes each the committed offset unless a later record committed that partition, an ABORT drops
them. Pending offsets come back from the store at load, so a marker written after a restart decides
them; the load holds :attr:`_load_lock` and :meth:`on_txn_marker` waits for it, so a marker is
decided either by the loader (it was in the log read) or by the hook (after it).

Offset retention (Kafka's ``cleanupGroupMetadata``, KIP-211): every
``offsets.retention.check.interval.ms`` (600000) the expiry thread
(:meth:`GroupOffsets.start_expiry`, the server starts it) removes the committed offsets whose
``offsets.retention.minutes`` (10080) have passed (:meth:`GroupMetadata.expired_offsets`: an Empty
group's counted from when it became Empty), writing their tombstones; a group left Empty without
offsets (committed or pending) is removed (Dead) and, if it ever had a generation, its metadata
gets a tombstone too, in the same batch. A failed write is logged and retried at the next check.

Thread safety: as the coordinator's (group_coordinator.py): each group's lock guards its offsets,
the load lock orders markers after a load, the expiry runs in its own thread; these methods
work on the coordinator's state (its groups, store and config), so this class is never used
alone.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping, Sequence

from broker_embedded.coordinator.coordinator_partition import GROUP_METADATA_TOPIC
from broker_embedded.coordinator.group_metadata import (
    UNKNOWN_MEMBER_ID,
    GroupMetadata,
    GroupState,
    OffsetAndMetadata,
    now_ms,
)
from broker_embedded.coordinator.group_store import TopicPartitionKey
from broker_embedded.errors import (
    CoordinatorNotAvailableError,
    GroupIdNotFoundError,
    GroupSubscribedToTopicError,
    IllegalGenerationError,
    KafkaApiError,
    NonEmptyGroupError,
    RebalanceInProgressError,
    UnknownMemberIdError,
    UnstableOffsetCommitError,
)
from broker_embedded.storage.topic_partition import TopicPartition

log = logging.getLogger(__name__)
_S = GroupState


class GroupOffsets:
    """The offset methods of the group coordinator (module docstring)."""

    def commit_offsets(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        offsets: Mapping[TopicPartitionKey, OffsetAndMetadata],
    ) -> KafkaApiError | None:
        """Store ``offsets`` for the group; the error (for every partition) or None."""
        try:
            self._check_active(group_id, required=False)
            group = self._group(group_id)
            if group is None:
                if generation_id >= 0:
                    raise IllegalGenerationError(
                        f"group {group_id!r} does not exist: generation {generation_id} of "
                        f"member {member_id!r} is unknown"
                    )
                group = self._get_or_create(group_id)  # a "simple" group (assign + commit)
        except KafkaApiError as e:
            return e
        with group.lock:
            error = self._validate_commit(group, generation_id, member_id, group_instance_id)
            if error is not None:
                return error
            if group.is_(_S.COMPLETING_REBALANCE):
                return RebalanceInProgressError(
                    f"group {group_id!r} is completing a rebalance: commit after SyncGroup"
                )
            if group.state in (_S.STABLE, _S.PREPARING_REBALANCE):
                member = group.members[member_id]
                self._schedule_heartbeat(group, member, member.session_timeout_ms)
            if not offsets:
                return None
            try:
                group.offsets.update(self.store.store_offsets(group_id, offsets))
            except KafkaApiError as e:
                return e
            return None

    def commit_txn_offsets(
        self,
        group_id: str,
        producer: tuple[int, int],
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        offsets: Mapping[TopicPartitionKey, OffsetAndMetadata],
    ) -> KafkaApiError | None:
        """TxnOffsetCommit: ``offsets`` are stored as transactional records of ``producer`` (id,
        epoch) and wait as its pending offsets of the group until its transaction's marker
        (:meth:`on_txn_marker`); a member id or generation (v3+, KIP-447) is checked as
        OffsetCommit checks it."""
        try:
            self._check_active(group_id, required=False)
            group = self._get_or_create(group_id)
        except KafkaApiError as e:
            return e
        with group.lock:
            if generation_id >= 0 or member_id != UNKNOWN_MEMBER_ID:
                error = self._validate_commit(group, generation_id, member_id, group_instance_id)
                if error is not None:
                    return error
            try:
                stored = self.store.store_offsets(group_id, offsets, *producer)
            except KafkaApiError as e:
                return e
            group.pending_txn_offsets.setdefault(producer[0], {}).update(stored)
        return None

    def on_txn_marker(self, tp: TopicPartition, producer_id: int, commit: bool) -> None:
        """A transaction's COMMIT (``commit``) or ABORT marker of ``producer_id`` is appended to
        ``__consumer_offsets`` partition ``tp``: it decides the producer's pending offsets of
        the groups there (module docstring). Idempotent: a marker written again after a
        restart finds nothing pending."""
        if tp.topic != GROUP_METADATA_TOPIC:
            return
        with self._load_lock, self._lock:
            groups = [g for g in self._groups.values() if producer_id in g.pending_txn_offsets]
        for group in groups:
            placed = self.store.partition_of(group.group_id, create=False)
            if placed is not None and placed != tp:
                continue
            with group.lock:
                self.store.complete_txn_offsets(group.group_id, producer_id, commit)
                decided = group.complete_txn_offsets(producer_id, commit)
            log.debug(
                "group %r: %d transactional offsets of producer %d %s",
                group.group_id,
                decided,
                producer_id,
                "committed" if commit else "aborted",
            )

    def _validate_commit(
        self, group: GroupMetadata, generation_id: int, member_id: str, instance_id: str | None
    ) -> KafkaApiError | None:
        if group.is_(_S.DEAD):
            return CoordinatorNotAvailableError(f"group {group.group_id!r} was just removed")
        if generation_id < 0 and group.is_(_S.EMPTY):
            return None
        if generation_id >= 0 or member_id != UNKNOWN_MEMBER_ID or instance_id is not None:
            return self._validate_generation(
                group, generation_id, member_id, instance_id, "offset commit"
            )
        if not group.is_(_S.EMPTY):
            return UnknownMemberIdError(
                f"group {group.group_id!r} has members: only they may commit offsets"
            )
        return None

    def fetch_offsets(
        self,
        group_id: str,
        partitions: Iterable[TopicPartitionKey] | None,
        require_stable: bool = False,
    ) -> dict[TopicPartitionKey, OffsetAndMetadata | KafkaApiError]:
        """The committed offsets of ``partitions`` (None: every committed partition); a
        partition without a commit is left out; with ``require_stable`` (OffsetFetch v7+) a
        partition whose transactional offset awaits its marker is UNSTABLE_OFFSET_COMMIT."""
        self._check_active(group_id, required=False)
        group = self._group(group_id)
        if group is None:
            return {}
        with group.lock:
            wanted = list(group.offsets) if partitions is None else partitions
            out: dict[TopicPartitionKey, OffsetAndMetadata | KafkaApiError] = {}
            for tp in wanted:
                if require_stable and group.has_pending_txn_offset(tp):
                    out[tp] = UnstableOffsetCommitError(
                        f"group {group_id!r} {tp[0]}-{tp[1]}: a transactional offset commit "
                        "awaits its transaction's marker"
                    )
                elif tp in group.offsets:
                    out[tp] = group.offsets[tp]
            return out

    def start_expiry(self) -> None:
        """Start the expiry thread (once; :meth:`shutdown` stops it)."""
        with self._lock:
            if self._expiry is not None or not self._active:
                return
            self._expiry = threading.Thread(
                target=self._expire_loop, daemon=True, name="group-offsets-expiry"
            )
        self._expiry.start()

    def _expire_loop(self) -> None:
        while not self._stopped.wait(self.config.offsets_retention_check_interval_ms / 1000):
            try:
                removed = self.expire_offsets(now_ms())
            except Exception:  # a bug: logged, the next check runs
                log.exception("expiring committed offsets failed")
                continue
            if removed:
                log.info("removed %d expired offsets", removed)

    def expire_offsets(self, now: int) -> int:
        """Remove the committed offsets whose retention has passed at ``now`` (ms since the
        epoch) and the groups left without any (module docstring); how many offsets."""
        with self._lock:
            groups = list(self._groups.values())
        return sum(self._expire_group(group, now) for group in groups)

    def _expire_group(self, group: GroupMetadata, now: int) -> int:
        with group.lock:
            if group.is_(_S.DEAD):
                return 0
            expired = group.expired_offsets(now, self.config.offsets_retention_ms)
            dead = (
                group.is_(_S.EMPTY)
                and len(expired) == len(group.offsets)
                and not group.pending_txn_offsets
            )
            try:
                if dead and group.generation_id > 0:
                    self.store.delete_group(group.group_id, expired)
                elif expired:
                    self.store.delete_offsets(group.group_id, expired)
            except KafkaApiError as e:
                log.warning(
                    "group %r: expiring %d offsets failed, retried at the next check: %s",
                    group.group_id,
                    len(expired),
                    e,
                )
                return 0
            for tp in expired:
                del group.offsets[tp]
            if dead:
                log.info(
                    "group %r: Empty without offsets, removed (generation %d)",
                    group.group_id,
                    group.generation_id,
                )
                self._forget(group)
            return len(expired)

    def delete_offsets(
        self, group_id: str, partitions: Sequence[TopicPartitionKey]
    ) -> tuple[KafkaApiError | None, dict[TopicPartitionKey, KafkaApiError | None]]:
        """OffsetDelete: the group error, else an error (or None) per partition."""
        try:
            self._check_active(group_id, required=False)
        except KafkaApiError as e:
            return e, {}
        group = self._group(group_id)
        if group is None or group.is_(_S.DEAD):
            return GroupIdNotFoundError(f"group {group_id!r} does not exist"), {}
        with group.lock:
            if group.is_(_S.EMPTY):
                eligible = list(partitions)
            elif group.protocol_type == "consumer":
                eligible = [tp for tp in partitions if not group.is_subscribed_to(tp[0])]
            else:
                return NonEmptyGroupError(f"group {group_id!r} is {group.state.value}"), {}
            results: dict[TopicPartitionKey, KafkaApiError | None] = {
                tp: GroupSubscribedToTopicError(
                    f"group {group_id!r} is subscribed to topic {tp[0]!r}"
                )
                for tp in partitions
                if tp not in eligible
            }
            if eligible:
                try:
                    self.store.delete_offsets(group_id, eligible)
                except KafkaApiError as e:
                    return e, {}
                for tp in eligible:
                    group.offsets.pop(tp, None)
                    results[tp] = None
            return None, results
