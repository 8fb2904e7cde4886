"""An embedded transactional producer (the broker side of Kafka's transactions, with the
coordinator folded in): ``begin`` / ``send`` / ``commit`` or ``abort``.

``TransactionalProducer(client, transactional_id)`` gets a producer id and epoch from the
controller (a second instance with the same transactional id bumps the epoch and so fences the
first: its later batches fail with INVALID_PRODUCER_EPOCH). Each ``send`` appends one
transactional batch (sequence numbers per partition, acks=all); ``commit`` / ``abort`` append a
COMMIT / ABORT control batch (coordinator epoch 0) to every partition the transaction touched,
which completes the transaction in each partition's producer state, moves its last stable offset
and, for an abort, adds the transaction to the segment's ``.txnindex``.

``client`` is a :class:`~broker_embedded.broker.Broker` or an
:class:`~broker_embedded.cluster.EmbeddedCluster` (anything with ``append``, ``init_producer_id``
and a clock). Not thread-safe: one thread drives a producer, as with Kafka's.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from broker_embedded.errors import InvalidTxnStateError
from broker_embedded.produce_response import ProduceResult
from broker_embedded.producer_record import ProducerRecord, build_batch
from broker_embedded.record.control_record import EndTransactionMarker
from broker_embedded.storage.producer_state_manager import AppendOrigin
from broker_embedded.storage.segment_writer import wall_clock_ms
from broker_embedded.storage.topic_partition import TopicPartition

COORDINATOR_EPOCH = 0


class TransactionalProducer:
    """See the module docstring."""

    def __init__(self, client: Any, transactional_id: str, *, timeout_ms: int = 30_000) -> None:
        self.client = client
        self.transactional_id = transactional_id
        self.timeout_ms = timeout_ms
        self.producer_id, self.producer_epoch = client.init_producer_id(transactional_id)
        self._sequences: dict[TopicPartition, int] = {}
        self._partitions: list[TopicPartition] = []
        self._in_transaction = False

    @property
    def in_transaction(self) -> bool:
        return self._in_transaction

    def begin(self) -> None:
        if self._in_transaction:
            raise InvalidTxnStateError(f"{self.transactional_id}: a transaction is already open")
        self._in_transaction = True
        self._partitions = []

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
            items, now_ms=wall_clock_ms(), compression=compression,
            producer_id=self.producer_id, producer_epoch=self.producer_epoch,
            base_sequence=seq, is_transactional=True,
        )  # fmt: skip
        result = self.client.append(tp, batch, acks="all", timeout_ms=self.timeout_ms)
        result.raise_error()
        self._sequences[tp] = (seq + len(items)) & 0x7FFFFFFF
        if tp not in self._partitions:
            self._partitions.append(tp)
        return result

    def commit(self) -> list[ProduceResult]:
        return self._end(EndTransactionMarker.commit(COORDINATOR_EPOCH))

    def abort(self) -> list[ProduceResult]:
        return self._end(EndTransactionMarker.abort(COORDINATOR_EPOCH))

    def _end(self, marker: EndTransactionMarker) -> list[ProduceResult]:
        if not self._in_transaction:
            raise InvalidTxnStateError(f"{self.transactional_id}: no open transaction")
        results = []
        for tp in self._partitions:
            batch = marker.build_batch(base_offset=0, timestamp=wall_clock_ms(),
                                       producer_id=self.producer_id,
                                       producer_epoch=self.producer_epoch)  # fmt: skip
            r = self.client.append(tp, batch, acks="all", timeout_ms=self.timeout_ms,
                                   origin=AppendOrigin.COORDINATOR)  # fmt: skip
            results.append(r.raise_error())
        self._in_transaction = False
        self._partitions = []
        return results
