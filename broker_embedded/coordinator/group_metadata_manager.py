"""The log-backed :class:`~broker_embedded.coordinator.group_store.GroupStore`: consumer group
state persisted in ``__consumer_offsets`` as Kafka's ``GroupMetadataManager`` keeps it, and
which broker coordinates a group.

Placement: a group lives on partition ``partition_for(group id, N)`` of ``__consumer_offsets``
(coordinator_partition.py) and is coordinated by that partition's leader. ``N`` is the topic's
partition count, created on first use with ``offsets.topic.num.partitions`` (internal_topics.py:
:func:`ensure_topic`). A topic found with fewer partitions than that setting (a log dir copied
from a Kafka broker holds only the partitions that broker hosted, so it is adopted with
``highest partition + 1``) is grown to it first, so groups land where Kafka put them; a topic
with more keeps its count (Kafka uses the topic's count too), and so does one whose count Kafka
declared: a log dir Kafka wrote in KRaft mode (its metadata log, cluster_metadata_log.py, holds
the topic's real count, which Kafka places its groups by: growing it would put kafkalog's
commits where Kafka, started again on the log dir, never looks).

Writes (one record batch per call, magic 2, uncompressed, no producer id, timestamps = now),
appended on the partition's leader with acks=all within ``commit_timeout_ms`` (Kafka's
``offsets.commit.timeout.ms``, 5000), origin COORDINATOR:

- :meth:`store_group`: group metadata key v2 + value v3 (what Kafka 2.3+ writes: the highest
  non-flexible version);
- :meth:`store_offsets`: one offset commit record per partition, key v1 + value v3 (value v1
  when the commit carries an expire timestamp), as Kafka's ``offsetCommitValueVersion``;
- :meth:`delete_offsets`: a tombstone (null value) per offset key;
- :meth:`delete_group`: tombstones of every offset key of the group, then of its metadata key.

Transactional offset commits (TxnOffsetCommit, :meth:`store_offsets` with a producer id) are
written at once, as Kafka writes them: the same records in one transactional batch (attributes
bit 4) stamped with the producer's id and epoch (base sequence 0, origin COORDINATOR: no
sequence check, as Kafka's coordinator appends skip it), so the partition's producer state
opens a transaction there. The COMMIT or ABORT marker the transaction coordinator then writes
to the same partition (AddOffsetsToTxn added it to the transaction) decides them, in memory
through the coordinator's marker hook and at load through the loader's replay; until then they
are pending (OffsetFetch does not return them). A server killed between the transaction's
PrepareCommit and its markers finds them pending at load, and the marker written after the
restart commits them. :meth:`store_offsets` returns the offsets stamped with their records'
offsets in the partition (of two commits of a partition the later record wins).

Append errors become the coordinator errors clients act on, as Kafka maps them: for offsets
(``maybeConvertOffsetCommitError``) UNKNOWN_TOPIC_OR_PARTITION, NOT_ENOUGH_REPLICAS(_AFTER_
APPEND) -> COORDINATOR_NOT_AVAILABLE (15); NOT_LEADER_OR_FOLLOWER, KAFKA_STORAGE_ERROR -> NOT_
COORDINATOR (16); MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE, INVALID_FETCH_SIZE -> INVALID_COMMIT_
OFFSET_SIZE (28); REQUEST_TIMED_OUT stays. For group metadata (``storeGroup``) REQUEST_TIMED_OUT
is COORDINATOR_NOT_AVAILABLE too and the size errors UNKNOWN_SERVER_ERROR. A partition without a
live leader is NOT_COORDINATOR (the client finds the new coordinator).

Loading (:meth:`load`, when the cluster's coordinator starts): every partition of
``__consumer_offsets`` is replayed from its log start to its log end offset on its leader's log
(group_metadata_loader.py's rules: Kafka's loader), one batch at a time straight from the
segment files; a partition without a live leader is read from a live replica holding it (logged),
or skipped when none does (logged; its groups stay unknown). A group found in two partitions
(the partition count changed) is taken from the partition it maps to now. Memory: the loaded
groups and offsets (what the coordinator keeps anyway) plus one batch.

Thread safety: any thread; the partition count is computed once under a lock; appends are the
replica manager's (thread-safe). The coordinator serializes calls for one group.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Iterable
from typing import Any

from broker_embedded.broker_config import BrokerConfig
from broker_embedded.common.producer_record import ProducerRecord, build_batch
from broker_embedded.coordinator.coordinator_partition import GROUP_METADATA_TOPIC, partition_for
from broker_embedded.coordinator.group_metadata import (
    GroupSnapshot,
    GroupState,
    MemberSnapshot,
    OffsetAndMetadata,
    now_ms,
)
from broker_embedded.coordinator.group_metadata_loader import (
    CommittedOffset,
    GroupReplay,
    LoadedGroup,
)
from broker_embedded.coordinator.group_metadata_record import (
    GroupMetadataKey,
    GroupMetadataValue,
    GroupRecord,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
)
from broker_embedded.coordinator.group_store import (
    NO_PRODUCER_ID,
    LoadedGroups,
    Offsets,
    TopicPartitionKey,
)
from broker_embedded.coordinator.internal_topics import ensure_topic, offsets_topic
from broker_embedded.error_code import ErrorCode
from broker_embedded.errors import (
    CoordinatorNotAvailableError,
    InvalidCommitOffsetSizeError,
    KafkaApiError,
    KafkaLogError,
    NotCoordinatorError,
)
from broker_embedded.storage.cluster_metadata_log import has_metadata_log
from broker_embedded.storage.producer_state_manager import AppendOrigin
from broker_embedded.storage.topic_partition import TopicPartition

log = logging.getLogger(__name__)

COMMIT_TIMEOUT_MS = 5_000  # offsets.commit.timeout.ms
OFFSET_VALUE_VERSION = 3
OFFSET_VALUE_VERSION_WITH_EXPIRY = 1
GROUP_VALUE_VERSION = 3

# Kafka's error codes an append may fail with, by what they become.
_E = ErrorCode
_TO_NOT_AVAILABLE = frozenset(
    (_E.unknown_topic_or_partition, _E.not_enough_replicas, _E.not_enough_replicas_after_append)
)
_TO_NOT_COORDINATOR = frozenset((_E.not_leader_or_follower, _E.kafka_storage_error))
_TOO_LARGE = frozenset((_E.message_too_large, _E.record_list_too_large, _E.invalid_fetch_size))


def convert_append_error(error: KafkaApiError, offsets: bool, what: str) -> KafkaApiError:
    """Kafka's coordinator error for an append error (module docstring); ``offsets``: an
    offset commit (``maybeConvertOffsetCommitError``), else a group metadata write."""
    code = error.code
    if code in _TO_NOT_AVAILABLE or (code == _E.request_timed_out and not offsets):
        return CoordinatorNotAvailableError(f"{what}: {error}")
    if code in _TO_NOT_COORDINATOR:
        return NotCoordinatorError(f"{what}: {error}")
    if code in _TOO_LARGE:
        if offsets:
            return InvalidCommitOffsetSizeError(f"{what}: {error}")
        return KafkaApiError(f"{what}: {error}")  # UNKNOWN_SERVER_ERROR
    return error


def offset_value(o: OffsetAndMetadata) -> OffsetCommitValue:
    """The value record of a committed offset (v3, or v1 with an expire timestamp)."""
    expire = o.expire_timestamp_ms
    version = OFFSET_VALUE_VERSION if expire is None else OFFSET_VALUE_VERSION_WITH_EXPIRY
    return OffsetCommitValue(
        o.offset,
        o.metadata,
        o.commit_timestamp_ms,
        o.leader_epoch,
        -1 if expire is None else expire,
        version,
    )


def group_value(g: GroupSnapshot) -> GroupMetadataValue:
    """The value record of a group's snapshot (v3)."""
    members = tuple(
        MemberMetadata(
            m.member_id,
            m.client_id,
            m.client_host,
            m.session_timeout_ms,
            m.subscription,
            m.assignment,
            m.rebalance_timeout_ms,
            m.group_instance_id,
        )
        for m in g.members
    )
    return GroupMetadataValue(
        g.protocol_type,
        g.generation_id,
        g.protocol_name,
        g.leader_id,
        members,
        g.state_timestamp_ms,
        GROUP_VALUE_VERSION,
    )


def snapshot_of(group: LoadedGroup) -> GroupSnapshot | None:
    """A loaded group's metadata as the coordinator restores it (None: offsets only)."""
    v = group.metadata
    if v is None:
        return None
    members = tuple(
        MemberSnapshot(
            m.member_id,
            m.group_instance_id,
            m.client_id,
            m.client_host,
            m.rebalance_timeout if m.rebalance_timeout >= 0 else m.session_timeout,
            m.session_timeout,
            m.subscription,
            m.assignment,
        )
        for m in v.members
    )
    state = GroupState.STABLE if members else GroupState.EMPTY
    return GroupSnapshot(
        group.group_id,
        v.protocol_type,
        v.generation,
        v.protocol,
        v.leader,
        v.current_state_timestamp,
        members,
        state,
    )


def offsets_of(offsets: Iterable[CommittedOffset]) -> dict[TopicPartitionKey, OffsetAndMetadata]:
    """Loaded commits as the coordinator keeps them (with their record offsets)."""
    return {
        (c.topic, c.partition): OffsetAndMetadata(
            c.offset,
            c.leader_epoch,
            c.metadata,
            c.commit_timestamp,
            None if c.expire_timestamp < 0 else c.expire_timestamp,
            c.record_offset,
        )
        for c in offsets
    }


class GroupMetadataManager:
    """The :class:`GroupStore` over ``__consumer_offsets`` of a cluster (module docstring).

    ``controller``: the cluster's controller (its successors are followed); ``config``: the
    broker settings (``offsets.topic.*``)."""

    def __init__(
        self, controller: Any, config: BrokerConfig, commit_timeout_ms: int = COMMIT_TIMEOUT_MS
    ) -> None:
        self._controller = controller
        self.config = config
        self.commit_timeout_ms = commit_timeout_ms
        self._lock = threading.Lock()
        self._partitions: int | None = None

    @property
    def controller(self) -> Any:
        return self._controller.current

    # -- placement -----------------------------------------------------------------------------

    def partition_count(self, create: bool = True) -> int | None:
        """The partition count of ``__consumer_offsets``, creating (or growing) the topic on
        first use; None when it does not exist and ``create`` is False."""
        with self._lock:
            if self._partitions is not None:
                return self._partitions
            controller = self.controller
            if not create and GROUP_METADATA_TOPIC not in controller.topics():
                return None
            topic = offsets_topic(self.config)
            count = len(ensure_topic(controller, topic, controller.live_brokers()).partitions)
            if count < topic.partitions and not self._count_declared_by_kafka():
                log.info(
                    "growing %s from %d to %d partitions (offsets.topic.num.partitions)",
                    GROUP_METADATA_TOPIC,
                    count,
                    topic.partitions,
                )
                count = len(controller.create_partitions(topic.name, topic.partitions).partitions)
            self._partitions = count
            return count

    def _count_declared_by_kafka(self) -> bool:
        """Whether the log dir holding partition 0 is one Kafka wrote in KRaft mode (module
        docstring: its partition count is Kafka's, not one adopted from the directories)."""
        leader = self.controller.partition_state(TopicPartition(GROUP_METADATA_TOPIC, 0)).leader
        rm = self.controller.replica_manager_of(leader)
        return rm is not None and has_metadata_log(rm.log_manager.log_dir)

    def partition_of(self, group_id: str, create: bool = True) -> TopicPartition | None:
        """The ``__consumer_offsets`` partition holding ``group_id``."""
        count = self.partition_count(create)
        if count is None:
            return None
        return TopicPartition(GROUP_METADATA_TOPIC, partition_for(group_id, count))

    def coordinator_id(self, group_id: str, create: bool = True) -> int | None:
        """The broker coordinating ``group_id`` (its partition's leader; -1: none live), or None
        when the topic does not exist and ``create`` is False."""
        tp = self.partition_of(group_id, create)
        if tp is None:
            return None
        leader = self.controller.partition_state(tp).leader
        return leader if self.controller.replica_manager_of(leader) is not None else -1

    def check_coordinator(self, group_id: str, broker_id: int) -> KafkaApiError | None:
        """None when ``broker_id`` coordinates ``group_id``, else the error to answer:
        NOT_COORDINATOR (another broker does), COORDINATOR_NOT_AVAILABLE (no live leader)."""
        try:
            leader = self.coordinator_id(group_id)
        except KafkaApiError as e:
            return CoordinatorNotAvailableError(f"group {group_id!r}: {e}")
        if leader == broker_id:
            return None
        if leader is None or leader < 0:
            return CoordinatorNotAvailableError(
                f"group {group_id!r}: its {GROUP_METADATA_TOPIC} partition has no live leader"
            )
        return NotCoordinatorError(
            f"group {group_id!r} is coordinated by broker {leader}, not broker {broker_id}"
        )

    # -- writes --------------------------------------------------------------------------------

    def store_group(self, group: GroupSnapshot) -> None:
        key = GroupMetadataKey(group.group_id)
        self._append(group.group_id, [GroupRecord(key, group_value(group))], offsets=False)

    def store_offsets(
        self,
        group_id: str,
        offsets: Offsets,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = -1,
    ) -> dict[TopicPartitionKey, OffsetAndMetadata]:
        records = [
            GroupRecord(OffsetCommitKey(group_id, t, p), offset_value(o))
            for (t, p), o in offsets.items()
        ]
        base = self._append(group_id, records, offsets=True, producer=(producer_id, producer_epoch))
        return {
            tp: dataclasses.replace(o, record_offset=base + i)
            for i, (tp, o) in enumerate(offsets.items())
        }

    def complete_txn_offsets(self, group_id: str, producer_id: int, commit: bool) -> None:
        """Nothing to write: the transaction's marker in the partition decides them."""

    def delete_offsets(self, group_id: str, partitions: Iterable[TopicPartitionKey]) -> None:
        records = [GroupRecord(OffsetCommitKey(group_id, t, p)) for t, p in partitions]
        self._append(group_id, records, offsets=True)

    def delete_group(self, group_id: str, partitions: Iterable[TopicPartitionKey]) -> None:
        records = [GroupRecord(OffsetCommitKey(group_id, t, p)) for t, p in partitions]
        records.append(GroupRecord(GroupMetadataKey(group_id)))
        self._append(group_id, records, offsets=False)

    def _append(
        self,
        group_id: str,
        records: list[GroupRecord],
        offsets: bool,
        producer: tuple[int, int] = (NO_PRODUCER_ID, -1),
    ) -> int:
        """One batch of ``records`` on the group's partition leader, acks=all (transactional
        when ``producer`` names a producer id and epoch); its base offset; raises the converted
        error."""
        if not records:
            return -1
        producer_id, epoch = producer
        txn = (
            {}
            if producer_id == NO_PRODUCER_ID
            else {
                "producer_id": producer_id,
                "producer_epoch": epoch,
                "base_sequence": 0,
                "is_transactional": True,
            }
        )
        what = f"group {group_id!r}: writing {len(records)} records to {GROUP_METADATA_TOPIC}"
        try:
            tp = self.partition_of(group_id)
            assert tp is not None
            what = f"{what} partition {tp.partition}"
            batch = build_batch(
                [ProducerRecord(v, k) for k, v in (r.encode() for r in records)],
                now_ms=now_ms(),
                **txn,
            )
            leader = self.controller.partition_state(tp).leader
            rm = self.controller.replica_manager_of(leader)
            if rm is None:
                raise NotCoordinatorError(f"{what}: the partition has no live leader")
            result = rm.append_records(
                {tp: batch},
                required_acks=-1,
                timeout_ms=self.commit_timeout_ms,
                origin=AppendOrigin.COORDINATOR,
            )[tp]
        except KafkaApiError as e:
            raise convert_append_error(e, offsets, what) from None
        except KafkaLogError as e:  # a broker closing under the append
            raise CoordinatorNotAvailableError(f"{what}: {e}") from None
        if result.error is not None:
            raise convert_append_error(result.error, offsets, what)
        return result.base_offset

    # -- loading -------------------------------------------------------------------------------

    def load(self) -> LoadedGroups:
        """Every group and committed offset of ``__consumer_offsets`` (module docstring)."""
        controller = self.controller
        if GROUP_METADATA_TOPIC not in controller.topics():
            return LoadedGroups()
        count = len(controller.describe(GROUP_METADATA_TOPIC).partitions)
        found: dict[str, LoadedGroup] = {}
        for p in range(count):
            for group in self._load_partition(TopicPartition(GROUP_METADATA_TOPIC, p)):
                kept = found.get(group.group_id)
                if kept is None or partition_for(group.group_id, count) == p:
                    if kept is not None:
                        log.warning(
                            "group %r is in partitions %d and %d of %s: using %d",
                            group.group_id,
                            kept.coordinator_partition,
                            p,
                            GROUP_METADATA_TOPIC,
                            p,
                        )
                    found[group.group_id] = group
        snapshots = tuple(s for s in map(snapshot_of, found.values()) if s is not None)
        offsets = {g: offsets_of(group.offsets) for g, group in found.items() if group.offsets}
        pending = {
            g: {pid: offsets_of(o) for pid, o in group.pending.items()}
            for g, group in found.items()
            if group.pending
        }
        log.info(
            "loaded %d groups, %d committed offsets and %d pending transactional offsets from %s",
            len(found),
            sum(map(len, offsets.values())),
            sum(len(o) for p in pending.values() for o in p.values()),
            GROUP_METADATA_TOPIC,
        )
        return LoadedGroups(snapshots, offsets, pending)

    def _load_partition(self, tp: TopicPartition) -> Iterable[LoadedGroup]:
        replay = GroupReplay(tp.partition)
        log_ = self._readable_log(tp)
        if log_ is None:
            return ()
        for batch in log_.local_log.batches(
            log_.log_start_offset, log_.log_end_offset, f"loading groups of {tp}"
        ):
            replay.replay_batch(batch)
        return replay.result().groups.values()

    def _readable_log(self, tp: TopicPartition) -> Any:
        """The log of ``tp`` on its leader, else on a live replica holding it (logged)."""
        state = self.controller.partition_state(tp)
        for broker_id in (state.leader, *state.replicas):
            rm = self.controller.replica_manager_of(broker_id)
            partition = None if rm is None else rm.partitions.get(tp)
            if partition is not None:
                if broker_id != state.leader:
                    log.warning("%s has no live leader: loading it from replica %d", tp, broker_id)
                return partition.log
        log.warning("%s has no live replica: its groups are not loaded", tp)
        return None


def coordinator_error(store: object, group_id: str, broker_id: int) -> KafkaApiError | None:
    """The error a group API on broker ``broker_id`` answers for ``group_id`` when another
    broker coordinates it (a log-backed store only; an empty group id is left to the
    coordinator's own checks), else None."""
    if not group_id or not isinstance(store, GroupMetadataManager):
        return None
    return store.check_coordinator(group_id, broker_id)
