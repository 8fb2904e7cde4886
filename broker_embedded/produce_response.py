"""The answer to a produce for one partition (Kafka's ``ProduceResponse.PartitionResponse``).

``base_offset`` is the offset of the first appended record (the original one for a retried
duplicate; -1 on error); ``log_append_time`` the broker time stamped on LogAppendTime topics
(-1 otherwise); ``error`` a :class:`KafkaApiError` or ``None``. Immutable: thread-safe.
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

    def raise_error(self) -> ProduceResult:
        """``self``, or its error raised."""
        if self.error is not None:
            raise self.error
        return self
