"""The records of ``__consumer_offsets``: Kafka's ``GroupCoordinatorRecordSerde`` for the classic
group protocol (the JSON schemas ``OffsetCommitKey``, ``OffsetCommitValue``, ``GroupMetadataKey``
and ``GroupMetadataValue`` of Kafka's group-coordinator).

Byte layout (protocol/message_codec.py for the field encodings). Key = int16 record type (the key's
version) + key message; value = int16 value version + value message, or null (a tombstone: the
offset or group is deleted):

- record type 0 or 1, ``OffsetCommitKey``: group string, topic string, partition int32. Value
  ``OffsetCommitValue`` v0-v4: offset int64, leaderEpoch int32 (v3+), metadata string,
  commitTimestamp int64, expireTimestamp int64 (v1 only); v4 is flexible (compact strings,
  tagged fields). Kafka 2.1+ writes key 1 with value 3 (value 1 when the commit carries an
  expire timestamp).
- record type 2, ``GroupMetadataKey``: group string. Value ``GroupMetadataValue`` v0-v4:
  protocolType string, generation int32, protocol nullable string, leader nullable string,
  currentStateTimestamp int64 (v2+), members array of memberId string, groupInstanceId
  nullable string (v3+), clientId string, clientHost string, rebalanceTimeout int32 (v1+),
  sessionTimeout int32, subscription bytes, assignment bytes; v4 flexible. Kafka 2.3+ writes 3.
- record types 3-15: the records of the new consumer and share group protocols (KIP-848,
  KIP-932). Decoded as :class:`UnknownKey` naming the record, which the loader skips (counted),
  as Kafka's loader skips a type it does not know.

Fields a version does not have (all ``ignorable`` in Kafka's schemas) are left out when writing
that version, as Kafka's generated writers do; a read fills them with their defaults. Unknown
tagged fields of flexible versions are kept and written back, so a record re-encodes to the same
bytes. Bytes after the last field are ignored, as Kafka does.

Errors: corrupt bytes raise :class:`CorruptCoordinatorRecordError` naming the topic, partition
and offset of the record (when the caller gives them) and the field; an unknown value version
too (Kafka fails the load on it). Values are frozen dataclasses; the functions are pure and
thread-safe.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from broker_embedded.coordinator.coordinator_partition import GROUP_METADATA_TOPIC
from broker_embedded.errors import KafkaLogError
from broker_embedded.protocol.message_codec import (
    MessageEncodeError,
    MessageFormatError,
    MessageReader,
    MessageWriter,
    TaggedFields,
    check_version,
    unknown_tags,
    version_prefixed,
)

T = TypeVar("T")

OFFSET_COMMIT_KEY_VERSIONS = range(0, 2)
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSIONS = range(0, 5)
GROUP_METADATA_VALUE_VERSIONS = range(0, 5)
ENCODE = MessageEncodeError
FLEXIBLE_VALUE_VERSION = 4  # both values: v4 is the first flexible version

# The record types Kafka's GroupCoordinatorRecordSerde knows beyond the classic protocol.
OTHER_RECORD_TYPES = {
    3: "ConsumerGroupMetadata",
    4: "ConsumerGroupPartitionMetadata",
    5: "ConsumerGroupMemberMetadata",
    6: "ConsumerGroupTargetAssignmentMetadata",
    7: "ConsumerGroupTargetAssignmentMember",
    8: "ConsumerGroupCurrentMemberAssignment",
    9: "ShareGroupPartitionMetadata",
    10: "ShareGroupMemberMetadata",
    11: "ShareGroupMetadata",
    12: "ShareGroupTargetAssignmentMetadata",
    13: "ShareGroupTargetAssignmentMember",
    14: "ShareGroupCurrentMemberAssignment",
    15: "ShareGroupStatePartitionMetadata",
}


class CorruptCoordinatorRecordError(KafkaLogError):
    """A record of an internal topic whose key or value does not decode."""


@dataclass(frozen=True, slots=True)
class RecordPlace:
    """Where a record is, for error messages."""

    topic: str = GROUP_METADATA_TOPIC
    partition: int | None = None
    offset: int | None = None
    source: str | None = None

    def __str__(self) -> str:
        parts = [f"topic {self.topic!r}"]
        if self.partition is not None:
            parts.append(f"partition {self.partition}")
        if self.offset is not None:
            parts.append(f"offset {self.offset}")
        if self.source is not None:
            parts.append(f"in {self.source}")
        return " ".join(parts)


def corrupt(place: RecordPlace | None, part: str, reason: str) -> CorruptCoordinatorRecordError:
    where = "a record" if place is None else f"the record at {place}"
    return CorruptCoordinatorRecordError(f"corrupt {part} of {where}: {reason}")


def decoding(place: RecordPlace | None, part: str, read: Callable[[], T]) -> T:
    """``read()``, its format errors raised as :class:`CorruptCoordinatorRecordError`."""
    try:
        return read()
    except MessageFormatError as e:
        raise corrupt(place, part, str(e)) from None


# -- keys ------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    """The committed offset of ``group`` for ``topic`` partition ``partition``."""

    group: str
    topic: str
    partition: int
    version: int = 1


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    """The metadata of ``group`` (its generation, protocol and members)."""

    group: str
    version: int = GROUP_METADATA_KEY_VERSION


@dataclass(frozen=True, slots=True)
class UnknownKey:
    """A record type the classic group coordinator does not replay (skipped by the loader)."""

    version: int

    @property
    def name(self) -> str:
        known = OTHER_RECORD_TYPES.get(self.version)
        return f"{known} (record type {self.version})" if known else f"record type {self.version}"


GroupKey = OffsetCommitKey | GroupMetadataKey | UnknownKey


def encode_key(key: OffsetCommitKey | GroupMetadataKey) -> bytes:
    """The key bytes of a record (version-prefixed)."""
    if isinstance(key, OffsetCommitKey):
        check_version(key.version, OFFSET_COMMIT_KEY_VERSIONS, "OffsetCommitKey", ENCODE)

        def write_offset_key(w: MessageWriter) -> None:
            w.string(key.group, False, "group")
            w.string(key.topic, False, "topic")
            w.int32(key.partition, "partition")

        return version_prefixed(key.version, write_offset_key)
    check_version(key.version, range(2, 3), "GroupMetadataKey", ENCODE)
    return version_prefixed(key.version, lambda w: w.string(key.group, False, "group"))


def decode_key(data: bytes | memoryview | None, place: RecordPlace | None = None) -> GroupKey:
    """The key of a ``__consumer_offsets`` record."""
    if data is None:
        raise corrupt(place, "key", "the key is null (every record of this topic has a key)")

    def read() -> GroupKey:
        r = MessageReader(data)
        version = r.int16("key version")
        if version in OFFSET_COMMIT_KEY_VERSIONS:
            group = r.string(False, "group")
            topic = r.string(False, "topic")
            return OffsetCommitKey(group, topic, r.int32("partition"), version)
        if version == GROUP_METADATA_KEY_VERSION:
            return GroupMetadataKey(r.string(False, "group"))
        if version < 0:
            raise MessageFormatError(f"negative key version {version}")
        return UnknownKey(version)

    return decoding(place, "key", read)


# -- values ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OffsetCommitValue:
    """A committed offset (``OffsetCommitValue``); -1 = none for the epoch and timestamps."""

    offset: int
    metadata: str
    commit_timestamp: int
    leader_epoch: int = -1
    expire_timestamp: int = -1
    version: int = 3
    unknown_tagged_fields: TaggedFields = ()


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    """One member of a classic group as ``GroupMetadataValue`` stores it. ``subscription`` and
    ``assignment`` are the protocol's bytes (for ``consumer``: ConsumerProtocolSubscription and
    ConsumerProtocolAssignment, consumer_protocol.py)."""

    member_id: str
    client_id: str
    client_host: str
    session_timeout: int
    subscription: bytes
    assignment: bytes
    rebalance_timeout: int = -1
    group_instance_id: str | None = None
    unknown_tagged_fields: TaggedFields = ()


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    """A classic group's metadata (``GroupMetadataValue``)."""

    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    members: tuple[MemberMetadata, ...] = ()
    current_state_timestamp: int = -1
    version: int = 3
    unknown_tagged_fields: TaggedFields = ()


GroupValue = OffsetCommitValue | GroupMetadataValue


def _write_offset_value(v: OffsetCommitValue, w: MessageWriter) -> None:
    flexible = v.version >= FLEXIBLE_VALUE_VERSION
    w.int64(v.offset, "offset")
    if v.version >= 3:
        w.int32(v.leader_epoch, "leaderEpoch")
    w.string(v.metadata, flexible, "metadata")
    w.int64(v.commit_timestamp, "commitTimestamp")
    if v.version == 1:
        w.int64(v.expire_timestamp, "expireTimestamp")
    if flexible:
        w.tagged_fields(dict(v.unknown_tagged_fields))


def _read_offset_value(r: MessageReader, version: int) -> OffsetCommitValue:
    check_version(version, OFFSET_COMMIT_VALUE_VERSIONS, "OffsetCommitValue")
    flexible = version >= FLEXIBLE_VALUE_VERSION
    offset = r.int64("offset")
    leader_epoch = r.int32("leaderEpoch") if version >= 3 else -1
    metadata = r.string(flexible, "metadata")
    commit_timestamp = r.int64("commitTimestamp")
    expire_timestamp = r.int64("expireTimestamp") if version == 1 else -1
    tagged = unknown_tags(r.tagged_fields("OffsetCommitValue"), ()) if flexible else ()
    return OffsetCommitValue(
        offset, metadata, commit_timestamp, leader_epoch, expire_timestamp, version, tagged
    )


def _write_member(m: MemberMetadata, version: int, w: MessageWriter) -> None:
    flexible = version >= FLEXIBLE_VALUE_VERSION
    w.string(m.member_id, flexible, "memberId")
    if version >= 3:
        w.nullable_string(m.group_instance_id, flexible, "groupInstanceId")
    w.string(m.client_id, flexible, "clientId")
    w.string(m.client_host, flexible, "clientHost")
    if version >= 1:
        w.int32(m.rebalance_timeout, "rebalanceTimeout")
    w.int32(m.session_timeout, "sessionTimeout")
    w.bytes_(m.subscription, flexible, "subscription")
    w.bytes_(m.assignment, flexible, "assignment")
    if flexible:
        w.tagged_fields(dict(m.unknown_tagged_fields))


def _read_member(r: MessageReader, version: int) -> MemberMetadata:
    flexible = version >= FLEXIBLE_VALUE_VERSION
    member_id = r.string(flexible, "memberId")
    instance_id = r.nullable_string(flexible, "groupInstanceId") if version >= 3 else None
    client_id = r.string(flexible, "clientId")
    client_host = r.string(flexible, "clientHost")
    rebalance_timeout = r.int32("rebalanceTimeout") if version >= 1 else -1
    session_timeout = r.int32("sessionTimeout")
    subscription = r.bytes_(flexible, "subscription")
    assignment = r.bytes_(flexible, "assignment")
    tagged = unknown_tags(r.tagged_fields("MemberMetadata"), ()) if flexible else ()
    return MemberMetadata(
        member_id,
        client_id,
        client_host,
        session_timeout,
        subscription,
        assignment,
        rebalance_timeout,
        instance_id,
        tagged,
    )


def _write_group_value(v: GroupMetadataValue, w: MessageWriter) -> None:
    flexible = v.version >= FLEXIBLE_VALUE_VERSION
    w.string(v.protocol_type, flexible, "protocolType")
    w.int32(v.generation, "generation")
    w.nullable_string(v.protocol, flexible, "protocol")
    w.nullable_string(v.leader, flexible, "leader")
    if v.version >= 2:
        w.int64(v.current_state_timestamp, "currentStateTimestamp")
    w.array(v.members, flexible, "members", lambda m: _write_member(m, v.version, w))
    if flexible:
        w.tagged_fields(dict(v.unknown_tagged_fields))


def _read_group_value(r: MessageReader, version: int) -> GroupMetadataValue:
    check_version(version, GROUP_METADATA_VALUE_VERSIONS, "GroupMetadataValue")
    flexible = version >= FLEXIBLE_VALUE_VERSION
    protocol_type = r.string(flexible, "protocolType")
    generation = r.int32("generation")
    protocol = r.nullable_string(flexible, "protocol")
    leader = r.nullable_string(flexible, "leader")
    state_timestamp = r.int64("currentStateTimestamp") if version >= 2 else -1
    members = r.array(flexible, "members", lambda: _read_member(r, version))
    tagged = unknown_tags(r.tagged_fields("GroupMetadataValue"), ()) if flexible else ()
    return GroupMetadataValue(
        protocol_type, generation, protocol, leader, members, state_timestamp, version, tagged
    )


def encode_value(value: GroupValue | None) -> bytes | None:
    """The value bytes of a record (version-prefixed); ``None`` for a tombstone."""
    if value is None:
        return None
    if isinstance(value, OffsetCommitValue):
        check_version(value.version, OFFSET_COMMIT_VALUE_VERSIONS, "OffsetCommitValue", ENCODE)
        return version_prefixed(value.version, lambda w: _write_offset_value(value, w))
    check_version(value.version, GROUP_METADATA_VALUE_VERSIONS, "GroupMetadataValue", ENCODE)
    return version_prefixed(value.version, lambda w: _write_group_value(value, w))


def decode_value(
    key: GroupKey, data: bytes | memoryview | None, place: RecordPlace | None = None
) -> GroupValue | None:
    """The value of a record whose key is ``key`` (an offset commit or group metadata key);
    ``None`` for a tombstone."""
    if data is None:
        return None
    if isinstance(key, UnknownKey):
        raise ValueError(f"no value schema for {key.name}")

    def read() -> GroupValue:
        r = MessageReader(data)
        version = r.int16("value version")
        if isinstance(key, OffsetCommitKey):
            return _read_offset_value(r, version)
        return _read_group_value(r, version)

    return decoding(place, "value", read)


@dataclass(frozen=True, slots=True)
class GroupRecord:
    """One decoded record of ``__consumer_offsets``: its key and value (``None``: tombstone)."""

    key: OffsetCommitKey | GroupMetadataKey
    value: GroupValue | None = None

    def encode(self) -> tuple[bytes, bytes | None]:
        """(key bytes, value bytes or None), as Kafka's serde writes them."""
        return encode_key(self.key), encode_value(self.value)
