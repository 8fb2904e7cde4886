"""Domain exceptions of the embedded broker.

Every message names what a user needs to find the problem: the file or source, the topic and
partition, the offset and the byte position, as far as they are known where the error is raised.
"""

from __future__ import annotations


class KafkaLogError(Exception):
    """Base class of every error this project raises on purpose."""


class CorruptRecordError(KafkaLogError):
    """Bytes that are not a valid record batch or legacy message set.

    ``source`` names the file or buffer, ``position`` the byte position (within ``source``) of the
    batch that is bad, ``base_offset`` that batch's base offset when it could be read.
    """

    def __init__(
        self,
        reason: str,
        *,
        source: str = "<buffer>",
        position: int | None = None,
        base_offset: int | None = None,
    ) -> None:
        self.reason = reason
        self.source = source
        self.position = position
        self.base_offset = base_offset
        where = [f"in {source}"]
        if position is not None:
            where.append(f"at byte {position}")
        if base_offset is not None:
            where.append(f"(batch base offset {base_offset})")
        super().__init__(f"corrupt record data {' '.join(where)}: {reason}")


class TornTailError(CorruptRecordError):
    """A batch cut short at the very end of a log: recovery truncates it."""


class InvalidTopicError(KafkaLogError):
    """A topic name that breaks Kafka's rules (INVALID_TOPIC_EXCEPTION)."""


class CheckpointError(KafkaLogError):
    """A checkpoint file (replication-offset-checkpoint, ...) that cannot be parsed."""


class IndexCorruptError(KafkaLogError):
    """An offset or time index whose entries contradict its log segment."""
