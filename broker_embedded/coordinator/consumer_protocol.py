"""The ``consumer`` protocol's subscription and assignment bytes (Kafka's
``ConsumerProtocolSubscription`` and ``ConsumerProtocolAssignment`` schemas, read as
``ConsumerProtocol.deserializeSubscription``/``deserializeAssignment`` do): what a member sends in
JoinGroup and what the group's leader hands it in SyncGroup; the coordinator stores both per
member in ``GroupMetadataValue``.

Byte layout (big-endian, non-flexible in every version), after an int16 version:

- subscription: topics array (int32 count) of string (int16 length), userData nullable bytes
  (int32 length, -1 = null), then v1+ ownedPartitions array of (topic string, partitions array
  of int32), v2+ generationId int32 (default -1), v3+ rackId nullable string;
- assignment: assignedPartitions array of (topic string, partitions array of int32), userData
  nullable bytes (all versions).

Versions 0-3 are defined; a newer version is read as version 3, as Kafka's consumer does. An
empty assignment byte string (what a member that got nothing may hold) is no assignment. A
negative version or bytes that do not read raise
:class:`~broker_embedded.protocol.message_codec.MessageFormatError` (the caller names the
group and member).

Values are frozen dataclasses; the functions are pure and thread-safe.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker_embedded.protocol.message_codec import (
    MessageFormatError,
    MessageReader,
    MessageWriter,
    version_prefixed,
)


@dataclass(frozen=True, slots=True)
class ConsumerAssignment:
    """A member's assignment: ``(topic, partition)`` pairs in the order the leader wrote them."""

    partitions: tuple[tuple[str, int], ...] = ()
    user_data: bytes | None = None
    version: int = 0


@dataclass(frozen=True, slots=True)
class ConsumerSubscription:
    """A member's subscription; ``owned_partitions`` as ``(topic, partition)`` pairs."""

    topics: tuple[str, ...]
    user_data: bytes | None = None
    owned_partitions: tuple[tuple[str, int], ...] = ()
    generation_id: int = -1
    rack_id: str | None = None
    version: int = 0


def _version(r: MessageReader, what: str) -> int:
    version = r.int16(f"{what} version")
    if version < 0:
        raise MessageFormatError(f"negative {what} version {version}")
    return version


def _topic_partitions(r: MessageReader, what: str) -> tuple[tuple[str, int], ...]:
    def topic() -> tuple[str, tuple[int, ...]]:
        name = r.string(False, "topic")
        return name, r.array(False, "partitions", lambda: r.int32("partition"))

    return tuple((name, p) for name, parts in r.array(False, what, topic) for p in parts)


def decode_subscription(data: bytes | memoryview) -> ConsumerSubscription:
    r = MessageReader(data)
    version = _version(r, "subscription")
    topics = r.array(False, "topics", lambda: r.string(False, "topic"))
    user_data = r.nullable_bytes(False, "userData")
    owned = _topic_partitions(r, "ownedPartitions") if version >= 1 else ()
    generation = r.int32("generationId") if version >= 2 else -1
    rack = r.nullable_string(False, "rackId") if version >= 3 else None
    return ConsumerSubscription(topics, user_data, owned, generation, rack, version)


def decode_assignment(data: bytes | memoryview) -> ConsumerAssignment:
    if len(data) == 0:
        return ConsumerAssignment()
    r = MessageReader(data)
    version = _version(r, "assignment")
    pairs = _topic_partitions(r, "assignedPartitions")
    return ConsumerAssignment(pairs, r.nullable_bytes(False, "userData"), version)


def encode_assignment(a: ConsumerAssignment) -> bytes:
    """The bytes of ``a``: partitions grouped by topic in order of first appearance."""
    by_topic: dict[str, list[int]] = {}
    for name, p in a.partitions:
        by_topic.setdefault(name, []).append(p)

    def write(w: MessageWriter) -> None:
        def topic(item: tuple[str, list[int]]) -> None:
            w.string(item[0], False, "topic")
            w.array(item[1], False, "partitions", lambda p: w.int32(p, "partition"))

        w.array(list(by_topic.items()), False, "assignedPartitions", topic)
        w.nullable_bytes(a.user_data, False, "userData")

    return version_prefixed(a.version, write)
