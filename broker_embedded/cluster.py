"""An embedded cluster of N brokers in one process, for replication and fault drills.

Layout on disk: ``<base dir>/broker-<id>/`` is broker ``id``'s log dir and
``<base dir>/controller.json`` the controller's topics, assignments and partition states
(controller.py), so a cluster reopened on the same base dir finds its topics, each broker
recovers its logs, and each partition is led again by a member of its last ISR, at a higher
leader epoch.

:attr:`EmbeddedCluster.controller` is the active controller: after ``controller.successor()``
the cluster (new brokers, restarts, admin calls) uses the successor, whether or not it is
assigned back.

The cluster also acts as a simple client: :meth:`produce`, :meth:`append`, :meth:`fetch` and
:meth:`list_offsets` go to the partition's current leader and, like a Kafka client refreshing its
metadata, retry on NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH / a stopped leader until
``timeout_ms``. Fault drills: :meth:`stop_broker` (clean or crash), :meth:`pause_broker`,
:meth:`resume_broker`, :meth:`restart_broker`.

Thread safety: any thread may call any method; broker replacement is guarded by a lock.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TypeVar

from broker_embedded.broker import Acks, Broker
from broker_embedded.broker_config import BrokerConfig
from broker_embedded.client.transactional_producer import TransactionalProducer
from broker_embedded.common.fetch_request import FetchRequest, FetchResponse
from broker_embedded.common.produce_response import ProduceResult
from broker_embedded.common.producer_record import ProducerRecord, build_batch
from broker_embedded.error_code import LEADER_MOVED
from broker_embedded.errors import (
    BrokerClosedError,
    KafkaApiError,
    NotLeaderOrFollowerError,
    RequestTimedOutError,
)
from broker_embedded.replica_manager.list_offsets import ListOffsetsResult
from broker_embedded.replication.controller import Controller
from broker_embedded.replication.topic_metadata import TopicMetadata
from broker_embedded.storage.fetch_data_info import IsolationLevel
from broker_embedded.storage.producer_state_manager import AppendOrigin
from broker_embedded.storage.segment_writer import wall_clock_ms
from broker_embedded.storage.topic_partition import TopicPartition

T = TypeVar("T")
RETRY_BACKOFF_S = 0.02


def _leader_moved(error: BaseException | None) -> bool:
    """An error after which a call is retried at the partition's leader, looked up again: the
    leader moved (:data:`LEADER_MOVED`) or stopped."""
    if isinstance(error, KafkaApiError):
        return error.code in LEADER_MOVED
    return isinstance(error, BrokerClosedError)


class EmbeddedCluster:
    """See the module docstring."""

    def __init__(
        self,
        base_dir: str | Path,
        num_brokers: int = 3,
        *,
        racks: Mapping[int, str] | None = None,
        config: BrokerConfig | None = None,
    ) -> None:
        self.base_dir = Path(base_dir)
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self.config = config or BrokerConfig()
        self.racks = dict(racks or {})
        self._controller = Controller(store=self.base_dir / "controller.json")
        self._lock = threading.Lock()
        self.brokers: dict[int, Broker] = {}
        try:
            for i in range(num_brokers):
                self.brokers[i] = self._start(i)
        except BaseException:
            self.close()
            raise

    @property
    def controller(self) -> Controller:
        """The active controller (the last successor of the one the cluster started with)."""
        return self._controller.current

    @controller.setter
    def controller(self, controller: Controller) -> None:
        self._controller = controller

    def _start(self, broker_id: int) -> Broker:
        return Broker(
            self.base_dir / f"broker-{broker_id}",
            broker_id=broker_id,
            rack=self.racks.get(broker_id),
            config=self.config,
            controller=self.controller,
            create=True,
        )

    # -- admin -------------------------------------------------------------------------------------

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        replication_factor: int = 1,
        config: Mapping[str, object] | None = None,
        *,
        rng: random.Random | None = None,
    ) -> TopicMetadata:
        """Create a topic; ``rng`` fixes replica placement's random choices (replica_assignment)."""
        return self.controller.create_topic(name, partitions, replication_factor, config, rng=rng)

    def describe_topic(self, name: str) -> TopicMetadata:
        return self.controller.describe(name)

    def init_producer_id(self) -> tuple[int, int]:
        """(producer id, epoch 0) for an idempotent producer."""
        return self.controller.new_producer_id(), 0

    def transactional_producer(self, transactional_id: str) -> TransactionalProducer:
        return TransactionalProducer(self, transactional_id)

    def leader_for(self, tp: TopicPartition) -> Broker:
        """The live broker leading ``tp`` now (NOT_LEADER_OR_FOLLOWER if it has none)."""
        state = self.controller.partition_state(tp)
        with self._lock:
            b = self.brokers.get(state.leader)
        if b is None or b.is_closed:
            raise NotLeaderOrFollowerError(f"{tp} has no live leader (leader {state.leader})")
        return b

    # -- client calls, routed to the leader --------------------------------------------------------

    def _retry(self, tp: TopicPartition, timeout_ms: int, call: Callable[[Broker], T]) -> T:
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            try:
                return call(self.leader_for(tp))
            except (KafkaApiError, BrokerClosedError) as e:
                if not _leader_moved(e) or time.monotonic() >= deadline:
                    raise
                time.sleep(RETRY_BACKOFF_S)

    def append(
        self,
        tp: TopicPartition,
        records: bytes,
        *,
        acks: Acks = "all",
        timeout_ms: int = 30_000,
        origin: AppendOrigin = AppendOrigin.CLIENT,
    ) -> ProduceResult:
        """Append to the leader of ``tp``, retrying on leader changes."""

        def call(b: Broker) -> ProduceResult:
            r = b.append(tp, records, acks=acks, timeout_ms=timeout_ms, origin=origin)
            if _leader_moved(r.error):
                raise r.error
            return r

        try:
            return self._retry(tp, timeout_ms, call)
        except (KafkaApiError, BrokerClosedError) as e:
            if not _leader_moved(e):
                raise
            if not isinstance(e, KafkaApiError):
                e = RequestTimedOutError(f"{tp}: no leader accepted the records: {e}")
            return ProduceResult(tp, e)

    def produce(
        self,
        topic: str,
        partition: int,
        records: bytes | Iterable[ProducerRecord | bytes | str],
        *,
        acks: Acks = "all",
        timeout_ms: int = 30_000,
    ) -> ProduceResult:
        if not isinstance(records, (bytes, bytearray)):
            records = build_batch(records, now_ms=wall_clock_ms())
        tp = TopicPartition(topic, partition)
        return self.append(tp, bytes(records), acks=acks, timeout_ms=timeout_ms).raise_error()

    def fetch(self, request: FetchRequest, *, timeout_ms: int = 30_000) -> FetchResponse:
        """A consumer fetch of partitions that share a leader (the first one's). A partition
        answering NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH (the leader moved between the
        lookup and the fetch) makes it retry like a stopped leader does; at ``timeout_ms`` that
        answer is returned as it is."""
        tp = request.partitions[0].topic_partition
        deadline = time.monotonic() + timeout_ms / 1000

        def call(b: Broker) -> FetchResponse:
            r = b.fetch(request)
            if time.monotonic() < deadline:
                for p in r.partitions:
                    if _leader_moved(p.error):
                        raise p.error
            return r

        return self._retry(tp, timeout_ms, call)

    def list_offsets(
        self,
        topic: str,
        partition: int,
        timestamp: int,
        isolation_level: IsolationLevel | str = IsolationLevel.READ_UNCOMMITTED,
        *,
        timeout_ms: int = 30_000,
    ) -> ListOffsetsResult:
        tp = TopicPartition(topic, partition)
        return self._retry(
            tp, timeout_ms, lambda b: b.list_offsets(topic, partition, timestamp, isolation_level)
        )

    # -- fault drills ------------------------------------------------------------------------------

    def stop_broker(self, broker_id: int, *, clean: bool = True) -> None:
        """Stop a broker (``clean=False``: as if its process was killed)."""
        b = self.brokers[broker_id]
        if clean:
            b.close()
        else:
            b.crash()

    def pause_broker(self, broker_id: int) -> None:
        self.brokers[broker_id].pause()

    def resume_broker(self, broker_id: int) -> None:
        self.brokers[broker_id].resume()

    def restart_broker(self, broker_id: int) -> Broker:
        """Start a stopped broker again on its log dir (it recovers, truncates, rejoins)."""
        if not self.brokers[broker_id].is_closed:
            raise ValueError(f"broker {broker_id} is running; stop it first")
        b = self._start(broker_id)
        with self._lock:
            self.brokers[broker_id] = b
        return b

    def close(self) -> None:
        for b in self.brokers.values():
            b.resume()
        for b in self.brokers.values():
            b.close()

    def __enter__(self) -> EmbeddedCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
