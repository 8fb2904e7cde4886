"""One producer's state in one partition (Kafka's ``ProducerStateEntry``, with its
``BatchMetadata``): the current epoch, the metadata of its last :data:`NUM_BATCHES_TO_RETAIN`
batches (first/last sequence, first/last offset, max timestamp), the last coordinator epoch, the
last timestamp and the first offset of its ongoing transaction, if any; and Kafka's wrapping
int32 sequence arithmetic (:func:`decrement_sequence`, :func:`in_sequence`).

Invariants: the cached batches are those of the current epoch, oldest first (a new epoch forgets
them). Thread safety: frozen values; every change makes a new entry.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

NUM_BATCHES_TO_RETAIN = 5
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
INT32_MAX = (1 << 31) - 1


def decrement_sequence(sequence: int, decrement: int) -> int:
    """``sequence - decrement`` on Kafka's wrapping int32 sequence numbers."""
    if sequence < decrement:
        return INT32_MAX - (decrement - sequence) + 1
    return sequence - decrement


def in_sequence(last_seq: int, next_seq: int) -> bool:
    """Whether ``next_seq`` directly follows ``last_seq`` (``2**31 - 1`` is followed by 0)."""
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """What is kept of one appended batch: its last sequence and offset, how many offsets it
    spans after the first (``offset_delta``) and its max timestamp."""

    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_seq(self) -> int:
        return decrement_sequence(self.last_seq, self.offset_delta)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


@dataclass(frozen=True, slots=True)
class ProducerStateEntry:
    """One producer's state in one partition."""

    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    batches: tuple[BatchMetadata, ...] = ()
    coordinator_epoch: int = -1
    last_timestamp: int = -1
    current_txn_first_offset: int | None = None

    @property
    def is_empty(self) -> bool:
        return not self.batches

    @property
    def first_seq(self) -> int:
        return self.batches[0].first_seq if self.batches else NO_SEQUENCE

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def first_data_offset(self) -> int:
        return self.batches[0].first_offset if self.batches else -1

    @property
    def last_data_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    @property
    def last_offset_delta(self) -> int:
        return self.batches[-1].offset_delta if self.batches else 0

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        """The cached batch with exactly this epoch and sequence range, if any."""
        if epoch != self.producer_epoch:
            return None
        for batch in self.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch
        return None

    def with_epoch(self, epoch: int) -> ProducerStateEntry:
        """A new epoch forgets the cached batches."""
        if epoch == self.producer_epoch:
            return self
        return replace(self, producer_epoch=epoch, batches=())

    def with_batch(self, epoch: int, batch: BatchMetadata) -> ProducerStateEntry:
        entry = self.with_epoch(epoch)
        batches = (*entry.batches, batch)[-NUM_BATCHES_TO_RETAIN:]
        return replace(entry, batches=batches, last_timestamp=batch.timestamp)
