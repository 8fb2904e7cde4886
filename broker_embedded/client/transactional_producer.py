"""An embedded transactional producer (the client side of Kafka's transactions, as
``KafkaProducer`` offers it, with the coordinator's requests folded in): ``begin`` / ``send`` /
``commit`` or ``abort``.

``TransactionalProducer(client, transactional_id)`` gets a producer id and epoch from the
controller. Each ``send`` appends one transactional batch (sequence numbers per partition,
acks=all); ``commit`` / ``abort`` append a COMMIT / ABORT control batch (coordinator epoch 0) to
every partition the transaction touched, which completes the transaction in each partition's
producer state, moves its last stable offset and, for an abort, adds the transaction to the
segment's ``.txnindex``.

The coordinator's state (Kafka's ``TransactionCoordinator``) lives in the controller
(coordinator/transaction_coordinator.py): the current epoch of each transactional id and the
partitions of its open transaction. A second instance with the same transactional id bumps the
epoch, and so fences the first:

- if the first has a transaction open, it is aborted at once (ABORT markers stamped with the new
  epoch), as Kafka's InitProducerId does, so the last stable offset moves on;
- the first's later ``send`` / ``commit`` / ``abort`` fail with INVALID_PRODUCER_EPOCH
  (:class:`InvalidProducerEpochError`), checked by the coordinator (Kafka's
  AddPartitionsToTxn / EndTxn) and, for a send racing the abort, by the partition.

The coordinator state is not persisted: a transaction left open when its process ends is
aborted by the leader when the log dir is opened again
(coordinator/transaction_coordinator.py).

``client`` is a :class:`~broker_embedded.broker.Broker` or an
:class:`~broker_embedded.cluster.EmbeddedCluster` (anything with ``append`` and
``init_producer_id``; its ``clock_ms()``, if it has one, stamps the records). Not thread-safe:
one thread drives a producer, as with Kafka's; different producers may run in different threads.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from broker_embedded.client.producer_record import ProducerRecord, build_batch
from broker_embedded.coordinator.transaction_coordinator import COORDINATOR_EPOCH, TxnState
from broker_embedded.errors import InvalidProducerEpochError, InvalidTxnStateError
from broker_embedded.record.control_record import EndTransactionMarker
from broker_embedded.replica_manager.produce_response import ProduceResult
from broker_embedded.storage.producer_state_manager import AppendOrigin
from broker_embedded.storage.segment_writer import wall_clock_ms
from broker_embedded.storage.topic_partition import TopicPartition


class TransactionalProducer:
    """See the module docstring."""

    def __init__(self, client: Any, transactional_id: str, *, timeout_ms: int = 30_000) -> None:
        self.client = client
        self.transactional_id = transactional_id
        self.timeout_ms = timeout_ms
        self._clock = getattr(client, "clock_ms", wall_clock_ms)
        self._coordinator = client.controller.transaction_coordinator
        self._sequences: dict[TopicPartition, int] = {}
        self._in_transaction = False
        with self._coordinator.lock:
            self.producer_id, self.producer_epoch = client.init_producer_id(transactional_id)
            old = self._coordinator.txns.get(transactional_id)
            self._coordinator.txns[transactional_id] = TxnState(
                self.producer_id, self.producer_epoch
            )
        if old is not None and old.partitions:
            # Fence the previous instance: abort its open transaction with the new epoch.
            epoch = (
                self.producer_epoch
                if old.producer_id == self.producer_id
                else old.producer_epoch + 1
            )
            self._write_markers(
                EndTransactionMarker.abort(COORDINATOR_EPOCH), old.producer_id, epoch,
                old.partitions,
            )  # fmt: skip

    @property
    def in_transaction(self) -> bool:
        return self._in_transaction

    def _state(self) -> TxnState:
        """The coordinator's state for this producer; INVALID_PRODUCER_EPOCH once fenced.
        Call under the coordinator lock."""
        state = self._coordinator.txns[self.transactional_id]
        if (state.producer_id, state.producer_epoch) != (self.producer_id, self.producer_epoch):
            raise InvalidProducerEpochError(
                f"transactional id {self.transactional_id!r}: producer {self.producer_id} "
                f"epoch {self.producer_epoch} was fenced by producer {state.producer_id} "
                f"epoch {state.producer_epoch}"
            )
        return state

    def begin(self) -> None:
        if self._in_transaction:
            raise InvalidTxnStateError(f"{self.transactional_id}: a transaction is already open")
        self._in_transaction = True

    def send(
        self,
        topic: str,
        partition: int,
        records: Iterable[ProducerRecord | bytes | str],
        *,
        compression: int = 0,
    ) -> ProduceResult:
        """Append one transactional batch; raises the partition's error."""
        if not self._in_transaction:
            raise InvalidTxnStateError(f"{self.transactional_id}: send outside a transaction")
        tp = TopicPartition(topic, partition)
        items = list(records)
        seq = self._sequences.get(tp, 0)
        batch = build_batch(
            items, now_ms=self._clock(), compression=compression,
            producer_id=self.producer_id, producer_epoch=self.producer_epoch,
            base_sequence=seq, is_transactional=True,
        )  # fmt: skip
        with self._coordinator.lock:  # AddPartitionsToTxn
            state = self._state()
            added = tp not in state.partitions
            if added:
                state.partitions.append(tp)
        result = self.client.append(tp, batch, acks="all", timeout_ms=self.timeout_ms)
        if result.error is not None and result.base_offset < 0 and added:
            with self._coordinator.lock:  # nothing was appended: no marker for it either
                if tp in state.partitions:
                    state.partitions.remove(tp)
        result.raise_error()
        self._sequences[tp] = (seq + len(items)) & 0x7FFFFFFF
        return result

    def commit(self) -> list[ProduceResult]:
        return self._end(EndTransactionMarker.commit(COORDINATOR_EPOCH))

    def abort(self) -> list[ProduceResult]:
        return self._end(EndTransactionMarker.abort(COORDINATOR_EPOCH))

    def _end(self, marker: EndTransactionMarker) -> list[ProduceResult]:
        if not self._in_transaction:
            raise InvalidTxnStateError(f"{self.transactional_id}: no open transaction")
        with self._coordinator.lock:  # EndTxn
            state = self._state()
            partitions, state.partitions = state.partitions, []
        self._in_transaction = False
        return self._write_markers(marker, self.producer_id, self.producer_epoch, partitions)

    def _write_markers(
        self,
        marker: EndTransactionMarker,
        producer_id: int,
        producer_epoch: int,
        partitions: list[TopicPartition],
    ) -> list[ProduceResult]:
        results = []
        for tp in partitions:
            batch = marker.build_batch(base_offset=0, timestamp=self._clock(),
                                       producer_id=producer_id,
                                       producer_epoch=producer_epoch)  # fmt: skip
            r = self.client.append(tp, batch, acks="all", timeout_ms=self.timeout_ms,
                                   origin=AppendOrigin.COORDINATOR)  # fmt: skip
            results.append(r.raise_error())
        return results
