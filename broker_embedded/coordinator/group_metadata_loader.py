"""Loading the classic groups and committed offsets of ``__consumer_offsets`` partitions, as
Kafka's group coordinator does when it becomes the leader of one (``GroupMetadataManager.
doLoadGroupsAndOffsets``; ``CoordinatorLoaderImpl`` in the new coordinator reads the same way).

Reading: every batch of the partition from its log start offset to its log end offset (Kafka
loads up to the log end, not the high watermark), through the read-only partition view
(``PartitionReader.batches``: whole batches, one at a time, straight from the segment files), so
memory is one batch plus the state built. Each batch's CRC is checked; a bad one is a
``CorruptRecordError`` naming the segment file, position and offset.

Replay (:class:`GroupReplay`, one per partition), Kafka's rules:

- an offset commit record puts the group's committed offset for the topic partition; its
  tombstone (null value) deletes it;
- a group metadata record replaces the group's metadata; its tombstone deletes the group's
  metadata (its offsets stay until their own tombstones);
- records of a transactional batch (TxnOffsetCommit) are pending for the batch's producer id;
  the producer's COMMIT marker (a control batch) moves them in, its ABORT marker drops them; a
  tombstone in a transactional batch removes the producer's pending offset only. Ordering, as
  Kafka's loader (``CommitRecordMetadataAndOffset.olderThan``): at the COMMIT a pending offset
  replaces the loaded one unless that one's record is later, so a plain commit written between
  the transactional record and its marker wins, and one written before it loses. Offsets still
  pending at the end are not committed: :attr:`LoadedGroup.pending` keeps them by producer id
  (a marker written after the load decides them) and :attr:`LoadedGroups.pending_offsets`
  counts them; a group with only pending offsets is loaded too;
- other control batches are skipped; records of the new consumer and share group protocols
  (record types 3-15) and unknown record types are skipped and counted by name
  (:attr:`LoadedGroups.skipped`), as Kafka's loader skips a type it does not know;
- a group with offsets but no metadata is loaded as an ``Empty`` group, as in Kafka.

Corrupt keys or values raise :class:`CorruptCoordinatorRecordError` naming the topic, partition
and offset. Limits: the state holds every live group and committed offset of the partition
(what Kafka keeps in memory too); nothing else grows with the log.

Thread safety: a :class:`GroupReplay` belongs to one thread; the loaded values are immutable.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import cast

from broker_embedded.coordinator.coordinator_partition import GROUP_METADATA_TOPIC
from broker_embedded.coordinator.group_metadata import commit_later
from broker_embedded.coordinator.group_metadata_record import (
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    RecordPlace,
    UnknownKey,
    decode_key,
    decode_value,
)
from broker_embedded.errors import KafkaLogError
from broker_embedded.record.control_record import ControlRecordType
from broker_embedded.record.records import AnyBatch
from broker_embedded.storage.log_dir import LogDir
from broker_embedded.storage.partition_reader import PartitionReader
from broker_embedded.storage.topic_partition import TopicPartition

GROUP_STATE_EMPTY = "Empty"
GROUP_STATE_STABLE = "Stable"


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    """A group's committed offset of one topic partition. ``record_offset`` is where the
    commit sits in ``__consumer_offsets``; -1 = none for the epoch and expire timestamp."""

    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    expire_timestamp: int
    record_offset: int

    @classmethod
    def of(cls, key: OffsetCommitKey, value: OffsetCommitValue, record_offset: int):
        return cls(
            key.topic,
            key.partition,
            value.offset,
            value.leader_epoch,
            value.metadata,
            value.commit_timestamp,
            value.expire_timestamp,
            record_offset,
        )


@dataclass(frozen=True, slots=True)
class LoadedGroup:
    """A group as loaded: its metadata (None: only offsets were found), its committed
    offsets sorted by topic and partition, and its undecided transactional offsets by producer
    id (same order)."""

    group_id: str
    metadata: GroupMetadataValue | None
    offsets: tuple[CommittedOffset, ...]
    coordinator_partition: int
    pending: Mapping[int, tuple[CommittedOffset, ...]] = field(default_factory=dict)

    @property
    def state(self) -> str:
        """``Stable`` with members, else ``Empty`` (Kafka's state of a loaded classic group)."""
        if self.metadata is not None and self.metadata.members:
            return GROUP_STATE_STABLE
        return GROUP_STATE_EMPTY

    @property
    def protocol_type(self) -> str:
        return "" if self.metadata is None else self.metadata.protocol_type


@dataclass(frozen=True)
class LoadedGroups:
    """What the loaded partitions hold: groups by id, and what was not replayed."""

    groups: dict[str, LoadedGroup]
    records: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    pending_offsets: int = 0


class DuplicateGroupError(KafkaLogError):
    """The same group in two partitions of ``__consumer_offsets`` (the partition count changed)."""


GroupTopicPartition = tuple[str, str, int]


class GroupReplay:
    """The state of one ``__consumer_offsets`` partition, built record by record."""

    def __init__(self, partition: int) -> None:
        self.partition = partition
        self.offsets: dict[GroupTopicPartition, CommittedOffset] = {}
        self.pending: dict[int, dict[GroupTopicPartition, CommittedOffset]] = {}
        self.metadata: dict[str, GroupMetadataValue] = {}
        self.skipped: Counter[str] = Counter()
        self.records = 0

    def replay_batch(self, batch: AnyBatch) -> None:
        """Apply every record of ``batch`` (CRC checked first)."""
        batch.ensure_valid()
        if batch.is_control:
            self._end_transaction(batch)
            return
        pid = batch.producer_id if batch.is_transactional else None
        for record in batch.records():
            place = RecordPlace(GROUP_METADATA_TOPIC, self.partition, record.offset, batch.source)
            key = decode_key(record.key, place)
            self.records += 1
            if isinstance(key, UnknownKey):
                self.skipped[key.name] += 1
                continue
            value = decode_value(key, record.value, place)
            if isinstance(key, OffsetCommitKey):  # decode_value gives the key's value type
                self.replay_offset(key, cast(OffsetCommitValue, value), record.offset, pid)
            else:
                self.replay_group(key, cast(GroupMetadataValue, value))

    def replay_offset(
        self,
        key: OffsetCommitKey,
        value: OffsetCommitValue | None,
        record_offset: int,
        producer_id: int | None = None,
    ) -> None:
        """An offset commit (``producer_id``: of a transactional batch, pending until its
        marker), or its tombstone (``value`` None)."""
        gtp = (key.group, key.topic, key.partition)
        committed = None if value is None else CommittedOffset.of(key, value, record_offset)
        target = self.offsets if producer_id is None else self.pending.setdefault(producer_id, {})
        if committed is None:
            target.pop(gtp, None)
        else:
            target[gtp] = committed

    def replay_group(self, key: GroupMetadataKey, value: GroupMetadataValue | None) -> None:
        """A group's metadata, or its tombstone (``value`` None)."""
        if value is None:
            self.metadata.pop(key.group, None)
        else:
            self.metadata[key.group] = value

    def _end_transaction(self, batch: AnyBatch) -> None:
        records = batch.records()
        first = next(records, None)
        if first is None:
            return
        kind = ControlRecordType.parse_key(
            first.key, source=batch.source, position=batch.position, base_offset=batch.base_offset
        )
        if kind not in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
            return
        pending = self.pending.pop(batch.producer_id, {})
        if kind is ControlRecordType.COMMIT:
            self.end_transaction(pending)

    def end_transaction(self, pending: dict[GroupTopicPartition, CommittedOffset]) -> None:
        """Kafka's commit of a producer's pending offsets: each replaces the loaded one unless
        that one was written later."""
        commit_later(self.offsets, pending)

    def result(self) -> LoadedGroups:
        by_group: dict[str, list[CommittedOffset]] = {}
        for (group, _, _), committed in self.offsets.items():
            by_group.setdefault(group, []).append(committed)
        pending: dict[str, dict[int, list[CommittedOffset]]] = {}
        for pid, offsets in self.pending.items():
            for (group, _, _), committed in offsets.items():
                pending.setdefault(group, {}).setdefault(pid, []).append(committed)
        groups = {}
        for group_id in sorted(set(by_group) | set(self.metadata) | set(pending)):
            groups[group_id] = LoadedGroup(
                group_id,
                self.metadata.get(group_id),
                _sorted(by_group.get(group_id, ())),
                self.partition,
                {pid: _sorted(o) for pid, o in pending.get(group_id, {}).items()},
            )
        count = sum(len(p) for p in self.pending.values())
        return LoadedGroups(groups, self.records, dict(self.skipped), count)


def _sorted(offsets: Iterable[CommittedOffset]) -> tuple[CommittedOffset, ...]:
    return tuple(sorted(offsets, key=lambda c: (c.topic, c.partition)))


def load_partition(reader: PartitionReader) -> LoadedGroups:
    """Replay one ``__consumer_offsets`` partition from its log start to its log end offset."""
    replay = GroupReplay(reader.topic_partition.partition)
    for batch in reader.batches(reader.log_start_offset, reader.log_end_offset):
        replay.replay_batch(batch)
    return replay.result()


def offsets_partitions(log_dir: LogDir) -> list[TopicPartition]:
    """The ``__consumer_offsets`` partitions in a log dir, in partition order."""
    return [tp for tp in log_dir.partitions() if tp.topic == GROUP_METADATA_TOPIC]


def merge(loaded: Iterable[LoadedGroups]) -> LoadedGroups:
    """The groups of several partitions; a group in two of them is a
    :class:`DuplicateGroupError`."""
    groups: dict[str, LoadedGroup] = {}
    skipped: Counter[str] = Counter()
    records = pending = 0
    for part in loaded:
        for group_id, group in part.groups.items():
            if group_id in groups:
                raise DuplicateGroupError(
                    f"group {group_id!r} is in partitions {groups[group_id].coordinator_partition}"
                    f" and {group.coordinator_partition} of {GROUP_METADATA_TOPIC}"
                )
            groups[group_id] = group
        skipped.update(part.skipped)
        records += part.records
        pending += part.pending_offsets
    return LoadedGroups(dict(sorted(groups.items())), records, dict(skipped), pending)


def load_log_dir(log_dir: LogDir) -> LoadedGroups:
    """Every group of every ``__consumer_offsets`` partition of ``log_dir``."""

    def each() -> Iterable[LoadedGroups]:
        for tp in offsets_partitions(log_dir):
            with log_dir.open_partition(tp) as reader:
                yield load_partition(reader)

    return merge(each())
