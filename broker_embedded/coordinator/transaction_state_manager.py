"""Where the transaction coordinator persists its state (Kafka's ``TransactionStateManager``):
the :class:`TransactionStore` seam, the in-memory default, the store over ``__transaction_state``
and the replay that loads that topic back.

Every state change Kafka writes (``TransactionStateManager.appendTransactionToLog``, from the
transitions of ``TransactionMetadata``) is one :meth:`TransactionStore.append` of the
transactional id's whole new state, made by the coordinator BEFORE the state takes effect in
memory; an append that fails raises, and the coordinator keeps the state it had. The states
written: ``Empty`` (InitProducerId: the producer id and its new epoch; null partitions),
``Ongoing`` (AddPartitionsToTxn / AddOffsetsToTxn adding a partition: every partition of the
transaction), ``PrepareCommit`` / ``PrepareAbort`` (EndTxn, a timeout, a fencing
InitProducerId), ``CompleteCommit`` / ``CompleteAbort`` (the markers are written; no
partitions).

- :class:`InMemoryTransactionStore`: the last value of each id in a dict (the embedded
  :class:`~broker_embedded.client.transactional_producer.TransactionalProducer` path, and a
  broker that never served the wire API). Bounded by the transactional ids the coordinator
  holds anyway.
- :class:`LogTransactionStore`: one record (key = ``TransactionLogKey`` v0, value =
  ``TransactionLogValue`` v0, as Kafka 3.7 writes them; transaction_log_record.py) in one
  uncompressed batch without a producer id, appended with acks=all to the leader of partition
  ``partition_for(transactional_id, partitions)`` of ``__transaction_state``. The cluster side is
  two functions the controller passes (so this module never imports the broker):
  ``partitions()`` (the topic's partition count, creating the topic on first use) and
  ``write(tp, batch)`` (the append; raises the partition's :class:`KafkaApiError`), and
  ``loaded(partition)``: a partition not loaded yet is not written to (COORDINATOR_NOT_AVAILABLE,
  as Kafka answers COORDINATOR_LOAD_IN_PROGRESS: the client retries); nor is a topic still
  being created (:meth:`~TransactionStore.check_ready` says so before InitProducerId allocates a
  producer id, so a client never waits behind the creation). Append
  errors are mapped as Kafka maps them for the client: UNKNOWN_TOPIC_OR_PARTITION,
  NOT_ENOUGH_REPLICAS(_AFTER_APPEND) and REQUEST_TIMED_OUT are COORDINATOR_NOT_AVAILABLE (15);
  NOT_LEADER_OR_FOLLOWER and KAFKA_STORAGE_ERROR are NOT_COORDINATOR (16); anything else
  (RECORD_TOO_LARGE included) is UNKNOWN_SERVER_ERROR, each naming the transactional id and the
  partition.
- :class:`TransactionReplay`: one partition's records replayed batch by batch (control batches
  skipped, CRC checked): the last value of each key wins, a tombstone (null value) or a ``Dead``
  state removes the id (Kafka's ``loadTransactionMetadata``). :func:`read_log` reads a live
  log from its start to its log end offset (Kafka loads up to the log end) in reads of
  :data:`LOAD_CHUNK_BYTES`, so memory is one read plus the ids' states.

Corrupt keys or values raise ``CorruptCoordinatorRecordError`` naming the topic, partition and
offset. Thread safety: the in-memory store guards its dict with a lock; the log store calls its
functions from the coordinator's request threads (the partition serializes appends); a replay
belongs to one thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

from broker_embedded.common.producer_record import ProducerRecord, build_batch
from broker_embedded.coordinator.coordinator_partition import (
    TRANSACTION_STATE_TOPIC,
    partition_for,
)
from broker_embedded.coordinator.group_metadata_record import RecordPlace
from broker_embedded.coordinator.transaction_log_record import (
    TransactionLogKey,
    TransactionLogValue,
    TransactionStatus,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from broker_embedded.errors import (
    CoordinatorNotAvailableError,
    KafkaApiError,
    KafkaStorageError,
    NotCoordinatorError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
)
from broker_embedded.record.records import AnyBatch, iter_batches
from broker_embedded.storage.fetch_data_info import FetchIsolation
from broker_embedded.storage.segment_writer import wall_clock_ms
from broker_embedded.storage.topic_partition import TopicPartition

LOAD_CHUNK_BYTES = 1 << 20  # one read of a partition being loaded (at least one whole batch)

_NOT_AVAILABLE = (
    UnknownTopicOrPartitionError,
    NotEnoughReplicasError,
    NotEnoughReplicasAfterAppendError,
    RequestTimedOutError,
)
_NOT_COORDINATOR = (NotLeaderOrFollowerError, KafkaStorageError)


class TransactionStore(Protocol):
    """The persistence seam of the transaction coordinator (module docstring)."""

    def check_ready(self, transactional_id: str) -> None:
        """Raise what an append for ``transactional_id`` would raise because the store cannot
        take it yet (InitProducerId asks first, before it allocates a producer id)."""
        ...

    def append(self, transactional_id: str, value: TransactionLogValue) -> None: ...


class InMemoryTransactionStore:
    """The default :class:`TransactionStore`: the last value of each id, in memory."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[str, TransactionLogValue] = {}

    def check_ready(self, transactional_id: str) -> None:
        """Always ready."""

    def append(self, transactional_id: str, value: TransactionLogValue) -> None:
        with self._lock:
            self._values[transactional_id] = value

    def value(self, transactional_id: str) -> TransactionLogValue | None:
        """The last value stored for ``transactional_id`` (what its record would hold)."""
        with self._lock:
            return self._values.get(transactional_id)


def coordinator_error(transactional_id: str, tp: TopicPartition, e: KafkaApiError) -> KafkaApiError:
    """Kafka's mapping of a failed ``__transaction_state`` append to the client's error."""
    what = f"transactional id {transactional_id!r}: writing its state to {tp} failed: {e}"
    if isinstance(e, _NOT_AVAILABLE):
        return CoordinatorNotAvailableError(what)
    if isinstance(e, _NOT_COORDINATOR):
        return NotCoordinatorError(what)
    return KafkaApiError(what)


class LogTransactionStore:
    """The :class:`TransactionStore` over ``__transaction_state`` (module docstring)."""

    def __init__(
        self,
        partitions: Callable[[], int],
        write: Callable[[TopicPartition, bytes], None],
        clock_ms: Callable[[], int] = wall_clock_ms,
        loaded: Callable[[int], bool] = lambda partition: True,
    ) -> None:
        self._partitions = partitions
        self._write = write
        self._clock = clock_ms
        self._loaded = loaded

    def partition_of(self, transactional_id: str) -> TopicPartition:
        return TopicPartition(
            TRANSACTION_STATE_TOPIC, partition_for(transactional_id, self._partitions())
        )

    def check_ready(self, transactional_id: str) -> None:
        self._target(transactional_id)

    def _target(self, transactional_id: str) -> TopicPartition:
        """The id's partition, when it exists and is loaded (else COORDINATOR_NOT_AVAILABLE)."""
        try:
            tp = self.partition_of(transactional_id)
        except KafkaApiError as e:  # being created, or it could not be
            raise CoordinatorNotAvailableError(
                f"transactional id {transactional_id!r}: {TRANSACTION_STATE_TOPIC} is not "
                f"available: {e}"
            ) from e
        if not self._loaded(tp.partition):
            raise CoordinatorNotAvailableError(
                f"transactional id {transactional_id!r}: {tp} is not loaded yet (its leader "
                "has not started); retry"
            )
        return tp

    def append(self, transactional_id: str, value: TransactionLogValue) -> None:
        key = encode_key(TransactionLogKey(transactional_id))
        record = ProducerRecord(encode_value(value), key)
        tp = self._target(transactional_id)
        try:
            self._write(tp, build_batch([record], now_ms=self._clock()))
        except KafkaApiError as e:
            raise coordinator_error(transactional_id, tp, e) from e


class TransactionReplay:
    """The last state of each transactional id of one ``__transaction_state`` partition."""

    def __init__(self, partition: int) -> None:
        self.partition = partition
        self.values: dict[str, TransactionLogValue] = {}
        self.records = 0

    def replay_batch(self, batch: AnyBatch) -> None:
        batch.ensure_valid()
        if batch.is_control:
            return
        for record in batch.records():
            place = RecordPlace(
                TRANSACTION_STATE_TOPIC, self.partition, record.offset, batch.source
            )
            key = decode_key(record.key, place)
            value = decode_value(record.value, place)
            self.records += 1
            if value is None or value.status is TransactionStatus.DEAD:
                self.values.pop(key.transactional_id, None)
            else:
                self.values[key.transactional_id] = value


def read_log(log: Any, chunk_bytes: int = LOAD_CHUNK_BYTES) -> Iterator[AnyBatch]:
    """Every batch of a live log (a ``UnifiedLog``) from its log start offset to the log end
    offset seen first, ``chunk_bytes`` at a time (a batch larger than that comes whole)."""
    offset, end = log.log_start_offset, log.log_end_offset
    while offset < end:
        info = log.read(offset, chunk_bytes, FetchIsolation.LOG_END)
        last = None
        for batch in iter_batches(info.records, f"{log}"):
            if batch.next_offset <= offset:
                continue
            last = batch
            yield batch
        if last is None:
            return
        offset = last.next_offset


def load_partition(partition: int, batches: Iterable[AnyBatch]) -> dict[str, TransactionLogValue]:
    """The last state of each transactional id in one partition's batches."""
    replay = TransactionReplay(partition)
    for batch in batches:
        replay.replay_batch(batch)
    return replay.values
