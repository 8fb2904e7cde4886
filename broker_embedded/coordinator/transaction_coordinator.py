"""The transaction coordinator's state (Kafka's ``TransactionCoordinator`` metadata, in memory).

Per transactional id: the producer id and epoch of its current instance and the partitions of
its open transaction (AddPartitionsToTxn adds them, EndTxn empties them). One coordinator per
controller, so every producer of a cluster (or of a standalone broker) shares it.

Not persisted: a transaction still open when the process that ran its producer ends can never be
ended by that producer. Kafka's coordinator aborts such a transaction once its timeout passes;
here a broker aborts the open transactions of its leader partitions that this coordinator does
not know, when it starts (:meth:`Broker.abort_orphaned_transactions`), so a read_committed reader
is never stuck behind one.

Thread safety: callers hold :attr:`lock` around reads and updates of :attr:`txns`.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from broker_embedded.storage.topic_partition import TopicPartition

COORDINATOR_EPOCH = 0


@dataclass
class TxnState:
    """One transactional id (mutable, under the coordinator's lock)."""

    producer_id: int
    producer_epoch: int
    partitions: list[TopicPartition] = field(default_factory=list)


class TransactionCoordinator:
    """See the module docstring."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.txns: dict[str, TxnState] = {}

    def open_producer_ids(self) -> set[int]:
        """Producer ids with a transaction open in this coordinator."""
        with self.lock:
            return {s.producer_id for s in self.txns.values() if s.partitions}
