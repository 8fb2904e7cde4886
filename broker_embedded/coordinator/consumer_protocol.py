"""The ``consumer`` protocol's assignment bytes (Kafka's ``ConsumerProtocolAssignment`` schema,
``ConsumerProtocol.deserializeAssignment``): what a group's leader hands each member in
SyncGroup and the coordinator stores as a member's ``assignment`` in ``GroupMetadataValue``.

Byte layout (big-endian, non-flexible in every version): int16 version, assignedPartitions array
(int32 count) of (topic string (int16 length), partitions array of int32), userData nullable
bytes (int32 length, -1 = null). Versions 0-3 share this layout; a newer version is read with it,
as Kafka's consumer does. An empty byte string (what a member that got nothing may hold) is no
assignment. A negative version or bytes that do not read raise
:class:`~broker_embedded.coordinator.message_codec.MessageFormatError` (the caller names the
group and member).

Values are frozen dataclasses; the functions are pure and thread-safe.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker_embedded.coordinator.message_codec import (
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


def decode_assignment(data: bytes | memoryview) -> ConsumerAssignment:
    if len(data) == 0:
        return ConsumerAssignment()
    r = MessageReader(data)
    version = r.int16("assignment version")
    if version < 0:
        raise MessageFormatError(f"negative assignment version {version}")

    def topic() -> tuple[str, tuple[int, ...]]:
        name = r.string(False, "topic")
        return name, r.array(False, "partitions", lambda: r.int32("partition"))

    topics = r.array(False, "assignedPartitions", topic)
    user_data = r.nullable_bytes(False, "userData")
    pairs = tuple((name, p) for name, parts in topics for p in parts)
    return ConsumerAssignment(pairs, user_data, version)


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
