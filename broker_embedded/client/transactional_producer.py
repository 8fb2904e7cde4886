"""An embedded transactional producer (the client side of Kafka's transactions, as
``KafkaProducer`` offers it): ``begin`` / ``send`` / ``commit`` or ``abort``, driving the
controller's transaction coordinator (coordinator/transaction_coordinator.py) directly, the
same coordinator the wire API's InitProducerId, AddPartitionsToTxn and EndTxn use.

``TransactionalProducer(client, transactional_id)`` gets a producer id and epoch from the
coordinator (COORDINATOR_NOT_AVAILABLE, e.g. while a served broker creates ``__transaction_state``,
is retried every ``INIT_RETRY_BACKOFF_S`` until ``timeout_ms``, as Kafka's producer retries it
within ``max.block.ms``, then raised). Each ``send`` adds its partition to the transaction
(AddPartitionsToTxn; a partition that does not exist is UNKNOWN_TOPIC_OR_PARTITION and is not added)
and appends one transactional batch (sequence numbers per partition, acks=all); ``commit`` /
``abort`` (EndTxn) append a COMMIT / ABORT control batch (coordinator epoch 0) to every partition of
the transaction, here, synchronously, which completes the transaction in each partition's producer
state, moves its last stable offset and, for an abort, adds the transaction to the segment's
``.txnindex``. A transaction with no partition commits or aborts without writing anything.

A second instance with the same transactional id fences the first, as in Kafka: if the first has
a transaction open, the coordinator aborts it with the epoch bumped once (the markers are written
before the second instance's constructor returns), and the second instance gets the epoch bumped
again; the first's later ``send`` / ``commit`` / ``abort`` fail with PRODUCER_FENCED
(:class:`ProducerFencedError`) at the coordinator, and a send racing the abort with
INVALID_PRODUCER_EPOCH at the partition.

The coordinator state is persisted only when the controller uses ``__transaction_state``
(``Controller.use_transaction_log``: a served log dir, or one that holds that topic); otherwise a
transaction left open when its process ends is aborted by the leader when the log dir is opened
again (coordinator/transaction_coordinator.py).

``client`` is a :class:`~broker_embedded.broker.Broker` or an
:class:`~broker_embedded.cluster.EmbeddedCluster` (anything with ``append`` and ``controller``;
its ``clock_ms()``, if it has one, stamps the records). Not thread-safe: one thread drives a
producer, as with Kafka's; different producers may run in different threads.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from broker_embedded.common.produce_response import ProduceResult
from broker_embedded.common.producer_record import ProducerRecord, build_batch
from broker_embedded.coordinator.transaction_coordinator import (
    DEFAULT_TIMEOUT_MS,
    TxnCompletion,
)
from broker_embedded.errors import (
    CoordinatorNotAvailableError,
    InvalidTxnStateError,
    UnknownTopicOrPartitionError,
)
from broker_embedded.storage.producer_state_manager import AppendOrigin
from broker_embedded.storage.segment_writer import wall_clock_ms
from broker_embedded.storage.topic_partition import TopicPartition

INIT_RETRY_BACKOFF_S = 0.1


class TransactionalProducer:
    """See the module docstring."""

    def __init__(
        self,
        client: Any,
        transactional_id: str,
        *,
        timeout_ms: int = 30_000,
        transaction_timeout_ms: int = DEFAULT_TIMEOUT_MS,
    ) -> None:
        self.client = client
        self.transactional_id = transactional_id
        self.timeout_ms = timeout_ms
        self._clock = getattr(client, "clock_ms", wall_clock_ms)
        self._coordinator = client.controller.transaction_coordinator
        self._sequences: dict[TopicPartition, int] = {}
        self._in_transaction = False
        self._added: set[TopicPartition] = set()
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            try:
                got = self._coordinator.init_producer_id(transactional_id, transaction_timeout_ms)
            except CoordinatorNotAvailableError:  # e.g. __transaction_state being created
                if time.monotonic() >= deadline:
                    raise
                time.sleep(INIT_RETRY_BACKOFF_S)
                continue
            if not isinstance(got, TxnCompletion):
                break
            self._write_markers(got)  # the previous instance's transaction, aborted
        self.producer_id, self.producer_epoch = got

    @property
    def in_transaction(self) -> bool:
        return self._in_transaction

    def begin(self) -> None:
        if self._in_transaction:
            raise InvalidTxnStateError(f"{self.transactional_id}: a transaction is already open")
        self._in_transaction = True
        self._added = set()

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
        if tp not in self._added:
            if not self.client.controller.knows(tp):
                raise UnknownTopicOrPartitionError(f"{tp} does not exist")
            self._coordinator.add_partitions(
                self.transactional_id, self.producer_id, self.producer_epoch, [tp]
            )
            self._added.add(tp)
        items = list(records)
        seq = self._sequences.get(tp, 0)
        batch = build_batch(
            items,
            now_ms=self._clock(),
            compression=compression,
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            base_sequence=seq,
            is_transactional=True,
        )
        result = self.client.append(tp, batch, acks="all", timeout_ms=self.timeout_ms)
        result.raise_error()
        self._sequences[tp] = (seq + len(items)) & 0x7FFFFFFF
        return result

    def commit(self) -> list[ProduceResult]:
        return self._end(commit=True)

    def abort(self) -> list[ProduceResult]:
        return self._end(commit=False)

    def _end(self, *, commit: bool) -> list[ProduceResult]:
        if not self._in_transaction:
            raise InvalidTxnStateError(f"{self.transactional_id}: no open transaction")
        if not self._added:  # nothing was added: the coordinator never saw it
            self._in_transaction = False
            return []
        completion = self._coordinator.end_txn(
            self.transactional_id, self.producer_id, self.producer_epoch, commit
        )
        self._in_transaction = False
        return [] if completion is None else self._write_markers(completion)

    def _write_markers(self, completion: TxnCompletion) -> list[ProduceResult]:
        """Append the completion's marker to each of its partitions, then complete it."""
        results = []
        for tp in completion.partitions:
            batch = completion.marker_batch(self._clock())
            r = self.client.append(
                tp, batch, acks="all", timeout_ms=self.timeout_ms, origin=AppendOrigin.COORDINATOR
            )
            results.append(r.raise_error())
            self._coordinator.marker_written(tp, completion)
        self._coordinator.complete(completion)
        return results
