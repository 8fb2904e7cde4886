"""What the controller (controller.py) needs of a broker it registers: its id, settings, log
manager and replica manager, its rack-aware metadata, the highest producer id its logs hold and
an append (the controller writes ``__transaction_state`` through the partition's leader).

The broker facade (``broker.py``'s ``Broker``) sits above the controller and implements this
structurally; the controller names only this interface, so it never imports the facade (the
layer order in tests/test_layering.py). A typing ``Protocol``: no state, nothing to lock.
"""

from __future__ import annotations

from typing import Protocol

from broker_embedded.broker_config import BrokerConfig
from broker_embedded.common.produce_response import ProduceResult
from broker_embedded.replica_manager.replica_manager import ReplicaManager
from broker_embedded.replication.replica_assignment import BrokerMetadata
from broker_embedded.storage.log_manager import LogManager
from broker_embedded.storage.producer_state_manager import AppendOrigin
from broker_embedded.storage.topic_partition import TopicPartition


class RegisteredBroker(Protocol):
    """A broker as the controller sees it (see the module docstring)."""

    broker_id: int
    config: BrokerConfig
    log_manager: LogManager
    replica_manager: ReplicaManager

    @property
    def broker_metadata(self) -> BrokerMetadata: ...

    def max_producer_id(self) -> int: ...

    def append(
        self,
        tp: TopicPartition,
        records: bytes,
        *,
        acks: int | str = "all",
        timeout_ms: int = 30_000,
        origin: AppendOrigin = AppendOrigin.CLIENT,
    ) -> ProduceResult: ...
