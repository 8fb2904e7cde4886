"""The answer to a produce for one partition (Kafka's ``ProduceResponse.PartitionResponse``).

``base_offset`` / ``last_offset`` are the offsets of the first and last appended record (the
original ones for a retried duplicate, with ``duplicate`` set), -1 when nothing was appended; an
acks=all error raised after the append (REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS_AFTER_APPEND)
keeps them, since the records stay in the leader's log. ``log_append_time`` is the broker time
stamped on LogAppendTime topics (-1 otherwise); ``error`` a :class:`KafkaApiError` or ``None``.
Immutable: thread-safe.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker_embedded.errors import KafkaApiError
from broker_embedded.storage.topic_partition import TopicPartition


@dataclass(frozen=True, slots=True, eq=False)
class ProduceResult:
    topic_partition: TopicPartition
    error: KafkaApiError | None = None
    base_offset: int = -1
    last_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    duplicate: bool = False

    @property
    def error_code(self) -> int:
        return 0 if self.error is None else self.error.code

    @property
    def error_name(self) -> str:
        return "NONE" if self.error is None else self.error.name

    def raise_error(self) -> ProduceResult:
        """``self``, or its error raised."""
        if self.error is not None:
            raise self.error
        return self
