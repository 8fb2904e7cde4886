"""The one interface the data source writes a log through: :class:`ProduceSink`, beside the
:class:`~broker_embedded.storage.fetch_source.FetchSource` it reads through.

A writer of Kafka's log needs what a Kafka producer gets from a broker, and no more:

- a topic's limits (:meth:`ProduceSink.topic_limits`, a :class:`TopicLimits`): its partition
  count (Metadata) and the two topic configs that decide how records may be batched,
  ``max.message.bytes`` and ``cleanup.policy`` (DescribeConfigs); ``None`` for a topic that
  does not exist;
- per task, a :class:`PartitionAppender`: the producer fields a partition's next batches carry
  (:meth:`~PartitionAppender.producer_fields`, for the columnar encoder) and :meth:`append` of
  complete, uncompressed record batches v2 made with them to one partition, in order.

When appended batches become visible is each implementation's, and so is its driver-side end of
a write (one write job, or one micro-batch):

- the log dir (log_dir_produce_sink.py, beside the storage): a task's appender stages the
  batches beside the log (staged_write.py) and returns its staged files; the driver's
  ``commit`` takes the log dir's lock, appends every task's files in task order, fsyncs and then
  publishes the new high watermarks all at once (exactly once per write job, and per
  (writer id, batch id) for a streaming writer); ``abort`` deletes the staged files. The
  producer fields are none (no producer id: the log dir has one writer at a time).
- the wire (client/wire_produce_sink.py): a task's appender produces at once with an idempotent
  producer (acks=all), visible as it goes (at least once), or in a Kafka transaction per task
  left open for the driver, which ends them all (EndTxn; exactly once for read_committed
  readers). The producer fields are the producer id, epoch and each partition's next sequence.

Invariants: an appender takes batches only as :meth:`~PartitionAppender.producer_fields` made
them (the wire producer checks the sequences); a partition's batches are appended in the order
given; nothing of a failed task becomes visible in a log dir, and over the wire nothing of a
failed transactional task. Values here are immutable (thread-safe); a sink and its appenders are
used by one thread (one Spark task, or the driver).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from broker_embedded.record.record_batch import RECORD_BATCH_OVERHEAD

if TYPE_CHECKING:
    from broker_embedded.record.columnar_encoder import EncodedBatches

MAX_BATCH_BYTES = 1 << 20  # records bytes per batch (the columnar encoder's default)


@dataclass(frozen=True, slots=True)
class TopicLimits:
    """What a writer needs of one topic: its partition count and batch limits."""

    partitions: int
    max_message_bytes: int
    compact: bool

    @property
    def max_batch_bytes(self) -> int:
        """Records bytes per batch such that an uncompressed batch stays within the limit."""
        return max(1, min(MAX_BATCH_BYTES, self.max_message_bytes - RECORD_BATCH_OVERHEAD))


class PartitionAppender(Protocol):
    """One task's appends (see the module docstring)."""

    def producer_fields(self, topic: str, partition: int) -> Mapping[str, int]:
        """The producer fields (``encode_batches`` keywords) of the partition's next batches."""
        ...

    def append(
        self, topic: str, partition: int, encoded: EncodedBatches, *, null_keys: int = 0
    ) -> None:
        """Append ``encoded`` (made with :meth:`producer_fields`; ``null_keys`` of its records
        have no key) to ``topic``/``partition``, after what was appended to it before."""
        ...


class ProduceSink(Protocol):
    """Writes one log (a log dir, a cluster); see the module docstring."""

    @property
    def location(self) -> str:
        """The log, for messages: ``log dir <path>``, ``Kafka cluster <bootstrap>``."""
        ...

    def topic_limits(self, topic: str) -> TopicLimits | None:
        """``topic``'s limits; ``None`` when there is no such topic."""
        ...
