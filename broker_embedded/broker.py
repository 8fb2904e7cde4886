"""The embedded broker: a library object that owns one log dir for writing (Kafka's
``KafkaServer`` facade, without a network listener).

``Broker(log_dir)`` opens the log dir (a path that is not a Kafka log dir is refused with
:class:`NotALogDirError`; ``create=True`` makes one of a missing path or an empty directory),
takes its ``.lock``, recovers its logs and
leads every partition in it: the single-broker default, a controller of its own and replication
factor 1, through the same replica manager, partition and controller code as a cluster. In an
:class:`~broker_embedded.cluster.EmbeddedCluster` the brokers share one controller.

API (a refused request raises a :class:`KafkaApiError` naming Kafka's error, topic, partition
and offset; :meth:`append` and :meth:`fetch` answer per partition instead, in the result; a
closed broker raises :class:`BrokerClosedError`, a bad topic config ``InvalidConfigError``):

- topics: :meth:`create_topic`, :meth:`delete_topic`, :meth:`describe_topic`,
  :meth:`list_topics`, :meth:`create_partitions`, :meth:`metadata`, :meth:`topic_config`,
  :meth:`topic_name` (by topic id);
  a negative partition or an illegal topic name in a data request is
  UNKNOWN_TOPIC_OR_PARTITION, as Kafka answers;
- data: :meth:`produce` (records or built batches, acks 0 / 1 / -1 = all, timeout),
  :meth:`fetch` (a :class:`FetchRequest`), :meth:`list_offsets`, :meth:`delete_records`;
- producers: :meth:`init_producer_id` (idempotent producers), :meth:`transactional_producer`;
- lifecycle: :meth:`close` (clean: flush, checkpoints, clean-shutdown marker), :meth:`crash`
  (files left as a killed process leaves them), :meth:`pause` / :meth:`resume`.

Configuration: :class:`BrokerConfig` (``conf/broker.toml``); topic configs are Kafka's names.
Thread safety: every method may be called from any thread.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from broker_embedded.broker_config import BrokerConfig
from broker_embedded.cleaner.log_cleaner_manager import LogCleanerConfig
from broker_embedded.client.transactional_producer import TransactionalProducer
from broker_embedded.common.fetch_request import FetchRequest, FetchResponse
from broker_embedded.common.produce_response import ProduceResult
from broker_embedded.common.producer_record import ProducerRecord, build_batch
from broker_embedded.coordinator.transaction_coordinator import COORDINATOR_EPOCH
from broker_embedded.errors import (
    BrokerClosedError,
    InvalidRequiredAcksError,
    InvalidTopicError,
    UnknownTopicOrPartitionError,
)
from broker_embedded.record.control_record import EndTransactionMarker
from broker_embedded.replica_manager.list_offsets import ListOffsetsResult
from broker_embedded.replica_manager.replica_manager import ReplicaManager
from broker_embedded.replication.controller import Controller
from broker_embedded.replication.replica_assignment import BrokerMetadata
from broker_embedded.replication.topic_metadata import TopicMetadata
from broker_embedded.storage.fetch_data_info import IsolationLevel
from broker_embedded.storage.log_manager import LogManager
from broker_embedded.storage.object_store import StoreLocation, StoreSettings
from broker_embedded.storage.producer_state_manager import AppendOrigin
from broker_embedded.storage.remote_log_manager import RemoteLogManager
from broker_embedded.storage.segment_writer import wall_clock_ms
from broker_embedded.storage.topic_partition import TopicPartition
from broker_embedded.storage.unified_log import UnifiedLog

Acks = int | str


def parse_acks(acks: Acks) -> int:
    """0, 1, -1 or "all" (Kafka's producer setting; also "0", "1", "-1") to 0, 1 or -1;
    anything else is :class:`InvalidRequiredAcksError`."""
    value = {"all": -1, "-1": -1, "0": 0, "1": 1}.get(acks) if isinstance(acks, str) else acks
    if type(value) is not int or value not in (0, 1, -1):  # not bool, float, "2", ...
        raise InvalidRequiredAcksError(f"acks must be 0, 1, -1 or 'all', not {acks!r}")
    return value


def topic_partition(topic: str, partition: int) -> TopicPartition:
    """``TopicPartition(topic, partition)`` for a request: a negative partition or an illegal
    topic name names nothing that exists (UNKNOWN_TOPIC_OR_PARTITION, as Kafka answers)."""
    try:
        return TopicPartition(topic, partition)
    except InvalidTopicError as e:
        raise UnknownTopicOrPartitionError(
            f"topic {topic!r} partition {partition} does not exist: {e}"
        ) from None


class Broker:
    """See the module docstring."""

    def __init__(
        self,
        log_dir: str | Path,
        *,
        broker_id: int = 0,
        rack: str | None = None,
        config: BrokerConfig | None = None,
        controller: Controller | None = None,
        clock_ms=wall_clock_ms,
        create: bool = False,
        complete_in_background: bool = False,
    ) -> None:
        self.broker_id = broker_id
        self.rack = rack
        self.config = config or BrokerConfig()
        self.log_dir = Path(log_dir)
        self._clock = clock_ms
        self._closed = False
        self.log_manager = LogManager(
            log_dir,
            self.config.topic_defaults,
            node_id=broker_id,
            clock_ms=clock_ms,
            checkpoint_interval_ms=self.config.checkpoint_interval_ms,
            retention_check_interval_ms=self.config.log_retention_check_interval_ms,
            flush_check_interval_ms=self.config.log_flush_scheduler_interval_ms,
            cleaner_config=LogCleanerConfig.from_broker_config(self.config),
            create=create,
            remote_storage_system_enable=self.config.remote_log_storage_system_enable,
        )
        if controller is None:
            controller = Controller()
            controller.complete_in_background = complete_in_background
        self.controller = controller
        try:
            self.replica_manager = ReplicaManager(
                broker_id,
                self.log_manager,
                self.config,
                clock_ms=clock_ms,
                alter_partition=lambda tp, b, p: self.controller.alter_partition(tp, b, p),
                knows_partition=lambda tp: self.controller.knows(tp),
                peer=lambda b: self.controller.replica_manager_of(b),
            )
        except BaseException:
            self.log_manager.close()
            raise
        self.remote_log_manager = self._new_remote_log_manager()
        self.replica_manager.remote_log_manager = self.remote_log_manager
        try:
            self.controller.register_broker(self)
            self.abort_orphaned_transactions()
            if self.remote_log_manager is not None:
                self.remote_log_manager.startup()
        except BaseException:
            if self.remote_log_manager is not None:
                self.remote_log_manager.close()
            self.replica_manager.shutdown()
            self.log_manager.close()
            raise

    def _new_remote_log_manager(self) -> RemoteLogManager | None:
        """The tiered-storage copier when ``remote.log.storage.system.enable`` is on, over the
        partitions this broker leads (remote_log_manager.py)."""
        if not self.config.remote_log_storage_system_enable:
            return None
        rsm = dict(self.config.rsm_config)
        location = StoreLocation(rsm.pop("location"), StoreSettings.parse(rsm))

        def leaders() -> dict[TopicPartition, UnifiedLog]:
            parts = list(self.replica_manager.partitions.items())
            return {tp: p.log for tp, p in parts if p.is_leader}

        def followers() -> dict[TopicPartition, UnifiedLog]:
            parts = list(self.replica_manager.partitions.items())
            return {tp: p.log for tp, p in parts if p.state is not None and not p.is_leader}

        c = self.config
        rlm = RemoteLogManager(
            self.broker_id,
            self.log_dir,
            location,
            leaders,
            c.remote_log_manager_task_interval_ms,
            c.remote_log_reader_threads,
            c.remote_log_reader_max_pending_tasks,
            followers,
            c.remote_copy_quota,
            c.remote_fetch_quota,
        )
        rlm.topic_stats = lambda: self.replica_manager.topic_stats
        return rlm

    @property
    def broker_metadata(self) -> BrokerMetadata:
        return BrokerMetadata(self.broker_id, self.rack)

    def clock_ms(self) -> int:
        """The broker's clock (ms since the epoch): what producers of this broker stamp."""
        return self._clock()

    def max_producer_id(self) -> int:
        """The largest producer id in any log's producer state (-1 if none)."""
        ids = [
            max(lg.producer_state.producers, default=-1) for lg in self.log_manager.logs.values()
        ]
        return max(ids, default=-1)

    def __repr__(self) -> str:
        return f"Broker({self.broker_id}, {str(self.log_dir)!r})"

    def _check_open(self) -> None:
        if self._closed:
            raise BrokerClosedError(f"broker {self.broker_id} ({self.log_dir}) is closed")

    # -- topics ------------------------------------------------------------------------------------

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        replication_factor: int = 1,
        config: Mapping[str, object] | None = None,
        assignment: Sequence[Sequence[int]] | None = None,
        *,
        stop: threading.Event | None = None,
        background: bool = False,
    ) -> TopicMetadata:
        """Create a topic; ``assignment``: each partition's replicas (the controller's
        ``create_topic``), instead of ``partitions`` and ``replication_factor``. ``stop``: when
        set, a creation under way stops and is undone (``BrokerClosedError``). ``background``:
        answer once the topic is registered, its partitions made by :meth:`create_step`
        (LEADER_NOT_AVAILABLE until then; THROTTLING_QUOTA_EXCEEDED when too many wait)."""
        self._check_open()
        created = self.controller.create_topic(
            name,
            partitions,
            replication_factor,
            config,
            assignment=assignment,
            stop=stop,
            background=background,
        )
        assert created is not None
        return created

    def validate_new_topic(
        self,
        name: str,
        partitions: int = 1,
        replication_factor: int = 1,
        config: Mapping[str, object] | None = None,
        assignment: Sequence[Sequence[int]] | None = None,
    ) -> None:
        """Raise what :meth:`create_topic` would raise, creating nothing (CreateTopics'
        ``validate_only``)."""
        self._check_open()
        self.controller.create_topic(
            name, partitions, replication_factor, config, validate_only=True, assignment=assignment
        )

    def create_partitions(
        self,
        name: str,
        total: int,
        *,
        stop: threading.Event | None = None,
        background: bool = False,
    ) -> TopicMetadata:
        """Grow ``name`` to ``total`` partitions (``stop``, ``background`` as for
        :meth:`create_topic`)."""
        self._check_open()
        return self.controller.create_partitions(name, total, stop=stop, background=background)

    def create_step(self) -> float | None:
        """Make the next step of the partitions background creations registered (the
        controller's ``create_step``): None when none waits, else seconds until the next call
        is due."""
        if self._closed:
            return None
        return self.controller.create_step()

    def alter_topic_config(
        self, name: str, overrides: Mapping[str, str], *, validate_only: bool = False
    ) -> None:
        """Replace the config overrides of topic ``name`` (the controller's
        ``alter_topic_config``); its logs follow the new config from now on."""
        self._check_open()
        self.controller.alter_topic_config(name, overrides, validate_only=validate_only)

    def delete_topic(self, name: str) -> None:
        self._check_open()
        self.controller.delete_topic(name)

    def describe_topic(self, name: str) -> TopicMetadata:
        self._check_open()
        return self.controller.describe(name)

    def list_topics(self) -> list[str]:
        self._check_open()
        return self.controller.topics()

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        """The name of the topic with ``topic_id`` (None: no topic has it), in O(1)."""
        self._check_open()
        return self.controller.topic_name(topic_id)

    def metadata(self, topics: list[str] | None = None) -> list[TopicMetadata]:
        """Kafka's Metadata: topics, partitions, replicas, leader, ISR, leader epoch."""
        self._check_open()
        return self.controller.metadata(topics)

    def topic_config(self, name: str) -> dict[str, str]:
        """The effective config of a topic (defaults overlaid with its overrides)."""
        self._check_open()
        entry = self.controller.describe(name)
        return self.config.topic_defaults.with_overrides(entry.config, name).to_properties()

    # -- data --------------------------------------------------------------------------------------

    def produce(
        self,
        topic: str,
        partition: int,
        records: bytes | bytearray | memoryview | Iterable[ProducerRecord | bytes | str],
        *,
        acks: Acks = "all",
        timeout_ms: int = 30_000,
        compression: int = 0,
    ) -> ProduceResult:
        """Append records (or already-built v2 batches) to a partition led by this broker and
        return where they went; raises the partition's error."""
        self._check_open()
        parse_acks(acks)  # the whole request fails on bad acks, before any partition is looked at
        tp = topic_partition(topic, partition)
        if not isinstance(records, (bytes, bytearray, memoryview)):
            records = build_batch(records, now_ms=self._clock(), compression=compression)
        return self.append(tp, bytes(records), acks=acks, timeout_ms=timeout_ms).raise_error()

    def append(
        self,
        tp: TopicPartition,
        records: bytes,
        *,
        acks: Acks = "all",
        timeout_ms: int = 30_000,
        origin: AppendOrigin = AppendOrigin.CLIENT,
    ) -> ProduceResult:
        """One partition of a produce request; the result carries the error, if any."""
        self._check_open()
        results = self.replica_manager.append_records(
            {tp: records}, required_acks=parse_acks(acks), timeout_ms=timeout_ms, origin=origin
        )
        return results[tp]

    def fetch(self, request: FetchRequest) -> FetchResponse:
        self._check_open()
        return self.replica_manager.fetch_messages(request)

    def list_offsets(
        self,
        topic: str,
        partition: int,
        timestamp: int,
        isolation_level: IsolationLevel | str = IsolationLevel.READ_UNCOMMITTED,
    ) -> ListOffsetsResult:
        self._check_open()
        return self.replica_manager.list_offsets(
            topic_partition(topic, partition), timestamp, IsolationLevel.parse(isolation_level)
        )

    def delete_records(self, topic: str, partition: int, before_offset: int) -> int:
        """DeleteRecords: the new log start offset (the low watermark). ``before_offset`` -1
        deletes up to the high watermark."""
        self._check_open()
        return self.replica_manager.delete_records(topic_partition(topic, partition), before_offset)

    # -- producers ---------------------------------------------------------------------------------

    def init_producer_id(self) -> tuple[int, int]:
        """(producer id, epoch 0) for an idempotent producer (transactional ids go to the
        controller's ``transaction_coordinator``)."""
        self._check_open()
        return self.controller.new_producer_id(), 0

    def abort_orphaned_transactions(self) -> list[ProduceResult]:
        """Abort the open transactions of the partitions led here whose producer the
        coordinator does not know (their process ended; see
        coordinator/transaction_coordinator.py). Nothing while a partition of
        ``__transaction_state`` is not loaded: a transaction it holds is not an orphan."""
        if not self.controller.transaction_state_loaded():
            return []
        known = self.controller.transaction_coordinator.open_producer_ids()
        results = []
        for tp, p in list(self.replica_manager.partitions.items()):
            if not p.is_leader:
                continue
            psm = p.log.producer_state
            for pid in p.log.producer_state.ongoing_transactions():
                if pid in known:
                    continue
                entry = psm.last_entry(pid)
                epoch = 0 if entry is None else max(entry.producer_epoch, 0)
                marker = EndTransactionMarker.abort(COORDINATOR_EPOCH).build_batch(
                    base_offset=0, timestamp=self._clock(), producer_id=pid, producer_epoch=epoch
                )
                results.append(self.append(tp, marker, acks=1, origin=AppendOrigin.COORDINATOR))
        return results

    def transactional_producer(self, transactional_id: str) -> TransactionalProducer:
        return TransactionalProducer(self, transactional_id)

    def leader_for(self, tp: TopicPartition) -> Broker:
        """The broker leading ``tp`` (this one, for a standalone broker)."""
        return self

    # -- lifecycle ---------------------------------------------------------------------------------

    @property
    def is_closed(self) -> bool:
        return self._closed

    def pause(self) -> None:
        self.replica_manager.pause()

    def resume(self) -> None:
        self.replica_manager.resume()

    def close(self) -> None:
        """Clean shutdown: stop fetchers and purgatories, flush and checkpoint every log."""
        self._shutdown(clean=True)

    def crash(self) -> None:
        """Stop as a killed process would: nothing flushed, no clean-shutdown marker."""
        self._shutdown(clean=False)

    def _shutdown(self, *, clean: bool) -> None:
        if self._closed:
            return
        self._closed = True
        if self.remote_log_manager is not None:
            self.remote_log_manager.close()
        try:
            self.controller.broker_stopped(self.broker_id)
        finally:
            try:
                self.replica_manager.shutdown()
            finally:
                self.log_manager.close(clean=clean)

    def __enter__(self) -> Broker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
