"""The partitions one broker holds and the produce, fetch and list-offsets paths over them
(Kafka's ``ReplicaManager``).

- Leadership: the controller sends :class:`LeaderAndIsr` states with its epoch
  (:meth:`ReplicaManager.become_leader_or_follower`); an older controller epoch than one already
  seen is STALE_CONTROLLER_EPOCH. A broker that becomes follower hands the partition to the
  fetcher thread of its leader (replica_manager/replica_fetcher_thread.py), which first truncates
  divergent history through the leader's epochs.
- Produce (:meth:`append_records`): acks must be 0, 1 or -1 (all); each partition is appended
  on its leader (errors per partition); acks=all then waits in the produce purgatory until the
  high watermarks pass the appended records, or ``timeout_ms``.
- Fetch (:meth:`fetch_messages`): reference C's rules. Partitions are read in request order
  within ``min(max_bytes, fetch.max.bytes)``, each at most its partition max bytes and what the
  response has left; the first partition returning data returns at least one whole batch
  (KIP-74). A read may end in a partial batch, but a partition whose first batch does not fit
  returns no records (as Kafka does for Fetch v3+) and uses none of the budget. Consumers read
  to the HW (LSO for read_committed), followers to the log end, and a follower's fetch offset
  is its log end offset for the ISR and HW rules. The response is immediate when
  ``max_wait_ms <= 0``, there are no partitions, ``min_bytes`` (capped by the byte budget) are
  there or any partition has an error; otherwise the fetch waits in the fetch purgatory
  (appends and HW moves wake it; delayed_fetch.py says when it completes). A follower's fetch
  (``min_bytes`` 1) whose offsets show nothing new waits without reading, and is completed from
  the offsets alone; on the blocking path (:meth:`fetch_messages`, the in-process followers) the
  waiting thread reads once woken, so an append only wakes its followers and each follower's
  read takes every batch appended until it runs.
- Tiered partitions: a consumer's fetch offset in ``[log start, local log start)`` is read
  from the store (Kafka's ``handleOffsetOutOfRangeError`` and ``processRemoteFetch``): the
  first such partition of a request on the remote log manager's reader pool, the request
  answered when that read is done or after ``remote.fetch.max.wait.ms``
  (delayed_remote_fetch.py), without waiting for ``min_bytes``; the other such partitions
  answer no records, as do all of them while the broker's remote reads are over
  ``remote.log.manager.fetch.max.bytes.per.second`` (rlm_quota_manager.py). A follower's gets
  OFFSET_MOVED_TO_TIERED_STORAGE. The remote read's bytes
  are not counted against the response's budget beforehand (as in Kafka): a response holds at
  most ``max_bytes`` plus that partition's max bytes. ListOffsets by timestamp of a tiered
  partition looks in the store first.
- ISR: a scheduled task shrinks ISRs every ``replica.lag.time.max.ms / 2``.
- Pause (fault drills): requests to a paused broker block until it resumes or stops; its
  fetcher threads stop fetching.

- Metrics: with ``topic_stats`` set (broker_topic_stats.py), each partition appended counts its
  records and batch bytes, or its failure, and each committed ISR change its direction.

Thread safety: the partition map is guarded by the manager's lock; per-partition work takes the
partition's lock. Purgatories are woken only after partition locks are released.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Mapping

from broker_embedded.broker_config import BrokerConfig
from broker_embedded.common.fetch_request import (
    NO_LEADER_EPOCH,
    FetchRequest,
    FetchResponse,
    PartitionFetchResult,
)
from broker_embedded.common.produce_response import ProduceResult
from broker_embedded.common.purgatory import DelayedOperationPurgatory
from broker_embedded.error_code import ErrorCode
from broker_embedded.errors import (
    BrokerClosedError,
    InvalidRequiredAcksError,
    KafkaApiError,
    NotLeaderOrFollowerError,
    OffsetMovedToTieredStorageError,
    OffsetOutOfRangeError,
    StaleControllerEpochError,
    UnknownTopicOrPartitionError,
)
from broker_embedded.replica_manager.broker_topic_stats import BrokerTopicStats
from broker_embedded.replica_manager.delayed_fetch import DelayedFetch
from broker_embedded.replica_manager.delayed_produce import DelayedProduce
from broker_embedded.replica_manager.delayed_remote_fetch import DelayedRemoteFetch
from broker_embedded.replica_manager.list_offsets import ListOffsetsResult, offset_for_timestamp
from broker_embedded.replica_manager.partition import AlterPartition, LeaderAndIsr, Partition
from broker_embedded.replica_manager.replica_fetcher_thread import ReplicaFetcherManager
from broker_embedded.scheduler import KafkaScheduler
from broker_embedded.storage.checkpoint_file import one_sync
from broker_embedded.storage.fetch_data_info import FetchIsolation, IsolationLevel
from broker_embedded.storage.log_manager import LogManager
from broker_embedded.storage.producer_state_manager import AppendOrigin
from broker_embedded.storage.remote_log_manager import RemoteLogManager
from broker_embedded.storage.remote_storage_fetch_info import RemoteStorageFetchInfo
from broker_embedded.storage.topic_partition import TopicPartition

PAUSE_WAIT_S = 0.05
LAZY_READ_WAIT_S = 10.0  # a close waits this long for blocking fetches to read
DELETE_TO_HIGH_WATERMARK = -1
CONSUMER_REPLICA_ID = -1  # a client's ListOffsets (Kafka's ListOffsetsRequest.CONSUMER_REPLICA_ID)


# Kafka's codes of the append errors answered without a log start offset
_NO_LOG_START_ERRORS = frozenset(
    (
        ErrorCode.corrupt_message,
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.not_leader_or_follower,
        ErrorCode.message_too_large,
        ErrorCode.record_list_too_large,
        ErrorCode.kafka_storage_error,
    )
)


class ReplicaManager:
    """See the module docstring."""

    def __init__(
        self,
        broker_id: int,
        log_manager: LogManager,
        config: BrokerConfig,
        *,
        clock_ms: Callable[[], int],
        alter_partition: AlterPartition,
        knows_partition: Callable[[TopicPartition], bool],
        peer: Callable[[int], ReplicaManager | None],
    ) -> None:
        self.broker_id = broker_id
        self.log_manager = log_manager
        self.config = config
        self._clock = clock_ms
        self._alter = alter_partition
        self._knows = knows_partition
        self._peer = peer
        self._lock = threading.RLock()
        self.partitions: dict[TopicPartition, Partition] = {}
        self._deleted: set[TopicPartition] = set()  # stopped for deletion, until recreated
        self.controller_epoch = -1
        self.topic_stats: BrokerTopicStats | None = None  # counted while set (metrics on)
        self._running = threading.Event()
        self._running.set()
        self._stopped = False
        self._lazy_readers = 0  # blocking fetches under way (a close lets them read first)
        self._lazy_read_done = threading.Condition()
        # at least one slot per connection: a connection has one request in flight
        pending = max(config.purgatory_max_pending, config.max_connections)
        self.fetch_purgatory = DelayedOperationPurgatory(f"Fetch-{broker_id}", max_pending=pending)
        self.remote_fetch_purgatory = DelayedOperationPurgatory(
            f"RemoteFetch-{broker_id}", max_pending=pending
        )
        # tiered storage's reader (broker.py sets it when remote.log.storage.system.enable)
        self.remote_log_manager: RemoteLogManager | None = None
        self.produce_purgatory = DelayedOperationPurgatory(
            f"Produce-{broker_id}", max_pending=pending
        )
        self.fetchers = ReplicaFetcherManager(self)
        self._scheduler = KafkaScheduler(f"replica-manager-{broker_id}")
        self._scheduler.startup()
        period = max(config.replica_lag_time_max_ms // 2, 1)
        self._scheduler.schedule("isr-expiration", self.maybe_shrink_isrs, period, period)

    # -- lifecycle ---------------------------------------------------------------------------------

    def gate(self) -> None:
        """Block while paused; :class:`BrokerClosedError` once stopped."""
        if self._running.is_set() and not self._stopped:
            return  # running: no Condition to take (several times a request)
        while not self._running.wait(PAUSE_WAIT_S):
            if self._stopped:
                break
        if self._stopped:
            raise BrokerClosedError(f"broker {self.broker_id} is stopped")

    @property
    def is_paused(self) -> bool:
        return not self._running.is_set()

    def pause(self) -> None:
        self._running.clear()

    def resume(self) -> None:
        self._running.set()

    def shutdown(self) -> None:
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        self._running.set()
        self.fetchers.shutdown()
        self._scheduler.shutdown()
        self.fetch_purgatory.shutdown()
        self.remote_fetch_purgatory.shutdown()
        self.produce_purgatory.shutdown()
        with self._lazy_read_done:  # their logs close after this returns
            self._lazy_read_done.wait_for(lambda: self._lazy_readers == 0, LAZY_READ_WAIT_S)

    # -- leadership --------------------------------------------------------------------------------

    def become_leader_or_follower(
        self, controller_epoch: int, states: Mapping[TopicPartition, LeaderAndIsr]
    ) -> None:
        """Apply the controller's decisions (Kafka's LeaderAndIsr request). The files written
        for them (new logs, leader epochs) are made durable by one sync at the end."""
        with self._lock, one_sync():
            if self._stopped:
                raise BrokerClosedError(f"broker {self.broker_id} is stopped")
            if controller_epoch < self.controller_epoch:
                raise StaleControllerEpochError(
                    f"broker {self.broker_id}: controller epoch {controller_epoch} is older than "
                    f"{self.controller_epoch}"
                )
            self.controller_epoch = controller_epoch
            new = [
                tp
                for tp, state in states.items()
                if self.broker_id in state.replicas and tp not in self.partitions
            ]
            if new:  # created together: one sync and one checkpoint write for all of them
                self.log_manager.create_logs(new)
            changed = []
            for tp, state in states.items():
                if self.broker_id in state.replicas and self._apply(tp, state):
                    changed.append(tp)
        for tp in changed:
            self._wake(tp)

    def _apply(self, tp: TopicPartition, state: LeaderAndIsr) -> bool:
        partition = self.partitions.get(tp)
        if partition is None:
            self._deleted.discard(tp)
            partition = Partition(
                tp,
                self.broker_id,
                self.log_manager.get_or_create_log(tp),
                clock_ms=self._clock,
                alter_partition=self._alter,
                replica_lag_time_max_ms=self.config.replica_lag_time_max_ms,
                isr_changed=self._isr_changed,
            )
            self.partitions[tp] = partition
        if state.leader == self.broker_id:
            if not partition.make_leader(state):
                return False
            self.fetchers.remove_partitions([tp])
            return True
        previous = partition.state
        if not partition.make_follower(state):
            return False
        same_leader = previous is not None and (previous.leader, previous.leader_epoch) == (
            state.leader,
            state.leader_epoch,
        )
        if same_leader:
            return True  # only the ISR changed: keep fetching, no new truncation
        self.fetchers.remove_partitions([tp])
        if state.leader >= 0:
            self.fetchers.add_partition(tp, state.leader, state.leader_epoch)
        return True

    def _isr_changed(self, before: int, after: int) -> None:
        stats = self.topic_stats
        if stats is not None:
            stats.isr_changed(before, after)

    def stop_replicas(self, controller_epoch: int, tps: list[TopicPartition]) -> None:
        """Stop serving ``tps`` (their topic is being deleted): from now on requests for them
        get UNKNOWN_TOPIC_OR_PARTITION, also the fetches this wakes, although the controller
        still knows the topic until every broker has stopped it."""
        with self._lock:
            if controller_epoch < self.controller_epoch:
                raise StaleControllerEpochError(
                    f"broker {self.broker_id}: controller epoch {controller_epoch} is older than "
                    f"{self.controller_epoch}"
                )
            self.fetchers.remove_partitions(tps)
            tiered = []
            for tp in tps:
                self._deleted.add(tp)
                p = self.partitions.pop(tp, None)
                if p is not None:
                    # every replica, not only a live leader (there may be none): deleting is
                    # idempotent and keeps to the topic id, so brokers may race on it
                    if p.log.remote_log_enabled:
                        tiered.append((tp, p.log.topic_id))
                    p.stop_leading()
        if tiered and self.remote_log_manager is not None:  # their stored objects go too
            self.remote_log_manager.stop_partitions(tiered)
        for tp in tps:
            self._wake(tp)

    def remote_storage_disabled(self, tps: list[TopicPartition]) -> None:
        """The topic of ``tps`` turned ``remote.storage.enable`` off with
        ``remote.log.delete.on.disable`` (Kafka's ``ConfigHandler``, after the logs took the
        config): each replica forgets the store, a leader's log starts at its first local
        offset, and the leaders' stored segments are deleted (the remote log manager, as a
        deleted topic's; the followers' are their leader's)."""
        led = []
        for tp in tps:
            p = self.partitions.get(tp)
            if p is None:
                continue
            p.log.forget_remote_storage(leader=p.is_leader)
            if p.is_leader:
                led.append((tp, p.log.topic_id))
        if led and self.remote_log_manager is not None:
            self.remote_log_manager.stop_partitions(led)

    def _wake(self, tp: TopicPartition) -> None:
        self.fetch_purgatory.check_and_complete(tp)
        self.produce_purgatory.check_and_complete(tp)

    def maybe_shrink_isrs(self) -> None:
        if self.is_paused:
            return
        for tp, p in list(self.partitions.items()):
            if p.maybe_shrink_isr():
                self._wake(tp)

    def remove_from_isrs(self, broker_id: int) -> None:
        """A broker stopped: drop it from the ISR of every partition led here."""
        for tp, p in list(self.partitions.items()):
            if p.remove_from_isr(broker_id):
                self._wake(tp)

    # -- lookups -----------------------------------------------------------------------------------

    def partition(self, tp: TopicPartition) -> Partition:
        """The partition if this broker holds it, else the error Kafka answers."""
        p = self.partitions.get(tp)
        if p is not None:
            return p
        if tp not in self._deleted and self._knows(tp):
            raise NotLeaderOrFollowerError(
                f"topic {tp.topic!r} partition {tp.partition}: broker {self.broker_id} holds "
                "no replica of it (or not yet: its log is still being created)"
            )
        raise UnknownTopicOrPartitionError(
            f"topic {tp.topic!r} partition {tp.partition} does not exist"
        )

    def leader_partition(self, tp: TopicPartition) -> Partition:
        p = self.partition(tp)
        if not p.is_leader:
            raise NotLeaderOrFollowerError(
                f"topic {tp.topic!r} partition {tp.partition}: broker {self.broker_id} is not "
                f"its leader (leader: {p.state.leader if p.state else 'none'})"
            )
        return p

    # -- produce -----------------------------------------------------------------------------------

    def append_records(
        self,
        entries: Mapping[TopicPartition, bytes],
        *,
        required_acks: int = -1,
        timeout_ms: int = 30_000,
        origin: AppendOrigin = AppendOrigin.CLIENT,
    ) -> dict[TopicPartition, ProduceResult]:
        """Append to each partition's leader and answer per partition (see module docstring);
        acks=all blocks the calling thread until the purgatory completes the wait."""
        results, waiting = self._append_all(entries, required_acks, origin)
        if required_acks != -1 or not waiting:
            return results
        op = DelayedProduce(timeout_ms, waiting, self._replicated)
        self.produce_purgatory.try_complete_else_watch(op, list(waiting))
        return _with_errors(results, op.wait())

    def append_records_async(
        self,
        entries: Mapping[TopicPartition, bytes | memoryview],
        respond: Callable[[dict[TopicPartition, ProduceResult]], None],
        *,
        required_acks: int = -1,
        timeout_ms: int = 30_000,
        origin: AppendOrigin = AppendOrigin.CLIENT,
    ) -> None:
        """:meth:`append_records` without waiting: ``respond(results)`` is called exactly once,
        in this thread when no wait is needed, else in the thread that completes the acks=all
        wait (an append, an ISR change, the purgatory's reaper at ``timeout_ms``). The server's
        Produce handler answers from it, so its handler thread never sleeps."""
        results, waiting = self._append_all(entries, required_acks, origin)
        if required_acks != -1 or not waiting:
            respond(results)
            return
        op = DelayedProduce(
            timeout_ms,
            waiting,
            self._replicated,
            lambda errors: respond(_with_errors(results, errors)),
        )
        self.produce_purgatory.try_complete_else_watch(op, list(waiting))

    def _append_all(
        self,
        entries: Mapping[TopicPartition, bytes | memoryview],
        required_acks: int,
        origin: AppendOrigin,
    ) -> tuple[dict[TopicPartition, ProduceResult], dict[TopicPartition, int]]:
        """Each partition appended on its leader, and the offset each acks=all partition's high
        watermark must reach."""
        if required_acks not in (0, 1, -1):
            raise InvalidRequiredAcksError(f"acks must be 0, 1 or -1 (all), not {required_acks}")
        self.gate()
        results: dict[TopicPartition, ProduceResult] = {}
        for tp, records in entries.items():
            results[tp] = self._append_one(tp, records, required_acks, origin)
        if required_acks != -1:
            return results, {}
        waiting = {
            tp: r.last_offset + 1
            for tp, r in results.items()
            if r.error is None and not r.duplicate
        }
        return results, waiting

    def _append_one(
        self, tp: TopicPartition, records: bytes | memoryview, acks: int, origin: AppendOrigin
    ) -> ProduceResult:
        stats = self.topic_stats
        try:
            p = self.leader_partition(tp)
            info, hw_moved = p.append_records_to_leader(records, origin, acks)
        except KafkaApiError as e:
            if stats is not None:
                stats.produce_failed(tp.topic)
            return ProduceResult(tp, e, log_start_offset=self._failed_log_start(tp, e))
        if stats is not None:
            stats.appended(tp.topic, info.num_records, info.size)  # a duplicate: 0 and 0
        self.fetch_purgatory.check_and_complete(tp)
        if hw_moved:
            self.produce_purgatory.check_and_complete(tp)
        return ProduceResult(
            tp,
            None,
            info.first_offset,
            info.last_offset,
            info.log_append_time,
            info.log_start_offset,
            info.duplicate,
        )

    def _failed_log_start(self, tp: TopicPartition, error: KafkaApiError) -> int:
        """The log start offset a failed append answers with, as Kafka's
        ``ReplicaManager.appendToLocalLog``: -1 for the errors about the partition or the
        request's bytes (:data:`_NO_LOG_START_ERRORS`), the leader's log start offset for the
        others (an out-of-order sequence, a fenced epoch, an invalid record)."""
        if error.code in _NO_LOG_START_ERRORS:
            return -1
        p = self.partitions.get(tp)
        return p.log.log_start_offset if p is not None and p.is_leader else -1

    def has_ongoing_txn(self, tp: TopicPartition, producer_id: int, producer_epoch: int) -> bool:
        """Whether ``tp``, led here, already has a transaction of this producer and epoch open
        (Kafka's verification guard: only a transaction's first batch at a partition is checked
        with the coordinator). A partition not led here says True: its append answers why."""
        p = self.partitions.get(tp)
        if p is None or not p.is_leader:
            return True
        entry = p.log.producer_state.last_entry(producer_id)
        return (
            entry is not None
            and entry.current_txn_first_offset is not None
            and entry.producer_epoch == producer_epoch
        )

    def _replicated(self, tp: TopicPartition, required_offset: int) -> KafkaApiError | None | bool:
        p = self.partitions.get(tp)
        if p is None:
            return NotLeaderOrFollowerError(f"{tp} moved away from broker {self.broker_id}")
        return p.check_enough_replicas_reach_offset(required_offset)

    # -- fetch -------------------------------------------------------------------------------------

    def fetch_messages(self, request: FetchRequest) -> FetchResponse:
        """Answer a fetch, waiting in the purgatory when Kafka would (module docstring)."""
        with self._lazy_read_done:
            self._lazy_readers += 1
        try:
            result = self._fetch(request, zero_copy=False)
            if isinstance(result, DelayedRemoteFetch):
                return result.wait()
            if not isinstance(result, DelayedFetch):
                return result
            result.wait()  # lazy: completing it only woke this thread, which reads now
            return self._read(request)
        finally:
            with self._lazy_read_done:
                self._lazy_readers -= 1
                self._lazy_read_done.notify_all()

    def fetch_messages_async(
        self,
        request: FetchRequest,
        respond: Callable[[FetchResponse | Exception], None],
        *,
        zero_copy: bool = False,
    ) -> DelayedFetch | None:
        """:meth:`fetch_messages` without waiting (the Fetch API's path): ``respond`` gets the
        response, or the exception that failed it, exactly once, in this thread when the answer
        is immediate, else in the thread that completes the delayed fetch (delayed_fetch.py).
        ``zero_copy``: records as regions of segment files (``PartitionFetchResult.region``).
        Returns the delayed fetch when the answer waits (to abandon it if the client goes:
        ``DelayedOperation.abandon``; dropped, it never calls ``respond``), else None."""
        try:
            result: FetchResponse | DelayedFetch | DelayedRemoteFetch | Exception = self._fetch(
                request, zero_copy, respond
            )
        except Exception as e:
            result = e
        if isinstance(result, DelayedRemoteFetch):
            return None if result.is_completed else result  # type: ignore[return-value]
        if isinstance(result, DelayedFetch):
            return None if result.is_completed else result
        respond(result)
        return None

    def _fetch(
        self,
        request: FetchRequest,
        zero_copy: bool,
        respond: Callable[[FetchResponse | Exception], None] | None = None,
    ) -> FetchResponse | DelayedFetch | DelayedRemoteFetch:
        """The immediate response, or the delayed fetch submitted to the purgatory."""
        self.gate()
        # Before the follower's fetch state is recorded: a HW move that this fetch itself
        # causes then completes it at once, so the follower learns it without waiting.
        start_hws = self._high_watermarks(request)
        if request.is_from_follower:
            self._update_followers(request)
        ready = None
        if (
            request.is_from_follower
            and request.max_wait_ms > 0
            and request.partitions
            and self.min_bytes(request) <= 1
        ):
            ready = lambda: self._follower_fetch_ready(request)  # noqa: E731
        # A follower's HW moved since the start (this fetch's own update moved it): a delayed
        # fetch would complete at once on it, so the answer is the read, without one.
        hw_moved = request.is_from_follower and self._high_watermarks(request) != start_hws
        if ready is None or hw_moved or ready():  # else the read would find nothing: wait
            response, remote = self._read_partitions(request, zero_copy)
            if remote is not None:  # Kafka: a remote fetch does not wait for min_bytes
                return self._remote_fetch(request, response, remote, respond)
            if (
                hw_moved
                or request.max_wait_ms <= 0
                or not request.partitions
                or response.readable_bytes >= self.min_bytes(request)
                or any(p.error is not None for p in response.partitions)
            ):
                return response
            ready = None  # offsets moved but nothing readable: wait on reads, never spin
        op = DelayedFetch(
            request,
            lambda r: self._read(r, zero_copy),
            lambda: self._high_watermarks(request),
            self.min_bytes(request),
            start_hws,
            respond,
            ready,
            lazy=respond is None,
        )
        keys = [p.topic_partition for p in request.partitions]
        self.fetch_purgatory.try_complete_else_watch(op, keys)
        return op

    def _follower_fetch_ready(self, request: FetchRequest) -> bool:
        """Whether a follower's fetch (``min_bytes`` 1) would now get a record or an error,
        from the offsets alone (no read): a partition's log end offset moved past its fetch
        offset, or it is no longer led here at the fetch's epoch, or the offset is out of
        range."""
        for pf in request.partitions:
            p = self.partitions.get(pf.topic_partition)
            if p is None or not p.is_leader:
                return True
            epoch = pf.current_leader_epoch
            if epoch != NO_LEADER_EPOCH and epoch != p.leader_epoch:
                return True
            lg = p.log
            if lg.log_end_offset != pf.fetch_offset or pf.fetch_offset < lg.log_start_offset:
                return True
        return False

    def _update_followers(self, request: FetchRequest) -> None:
        for pf in request.partitions:
            tp = pf.topic_partition
            try:
                p = self.leader_partition(tp)
                p.check_epoch(pf.current_leader_epoch)  # a fenced fetch proves nothing
                if p.update_follower_fetch_state(request.replica_id, pf.fetch_offset):
                    self._wake(tp)
            except KafkaApiError:
                pass  # answered by the read

    def max_bytes(self, request: FetchRequest) -> int:
        """The response's byte budget: ``min(max_bytes, fetch.max.bytes)``."""
        return max(0, min(request.max_bytes, self.config.fetch_max_bytes))

    def min_bytes(self, request: FetchRequest) -> int:
        """``min_bytes``, capped by the byte budget (a response never has to exceed it)."""
        return min(request.min_bytes, self.max_bytes(request))

    def _high_watermarks(self, request: FetchRequest) -> tuple[int, ...]:
        hws = []
        for pf in request.partitions:
            p = self.partitions.get(pf.topic_partition)
            hws.append(-1 if p is None else p.log.high_watermark)
        return tuple(hws)

    def _remote_fetch(
        self,
        request: FetchRequest,
        local: FetchResponse,
        info: RemoteStorageFetchInfo,
        respond: Callable[[FetchResponse | Exception], None] | None,
    ) -> FetchResponse | DelayedRemoteFetch:
        """Kafka's ``processRemoteFetch``: read ``info`` on the remote log manager's pool and
        answer when it is done or after ``remote.fetch.max.wait.ms`` (delayed_remote_fetch.py)."""
        rlm, tp = self.remote_log_manager, info.topic_partition
        assert rlm is not None
        try:
            log = self.leader_partition(tp).log
            future = rlm.async_read(
                info, log, lambda: self.remote_fetch_purgatory.check_and_complete(tp)
            )
        except KafkaApiError as e:  # the reader queue full, or no longer the leader
            parts = list(local.partitions)
            parts[info.index] = self._error_result(tp, e)
            return FetchResponse(tuple(parts))
        op = DelayedRemoteFetch(local, info, future, self.config.remote_fetch_max_wait_ms, respond)
        self.remote_fetch_purgatory.try_complete_else_watch(op, [tp])
        return op

    def _read(self, request: FetchRequest, zero_copy: bool = False) -> FetchResponse:
        return self._read_partitions(request, zero_copy)[0]

    def _read_partitions(
        self, request: FetchRequest, zero_copy: bool = False
    ) -> tuple[FetchResponse, RemoteStorageFetchInfo | None]:
        """The local reads of every partition and, for a consumer's fetch, the first partition
        whose offset is only in remote storage (answered empty here; Kafka's
        ``handleOffsetOutOfRangeError``): the others such answer no records this time."""
        isolation = FetchIsolation.of(request.replica_id, request.isolation_level)
        budget = self.max_bytes(request)
        min_one = True
        results: list[PartitionFetchResult] = []
        remote: RemoteStorageFetchInfo | None = None
        for pf in request.partitions:
            tp = pf.topic_partition
            max_bytes = max(0, min(pf.partition_max_bytes, budget))
            try:
                info = self.leader_partition(tp).read(
                    pf.fetch_offset,
                    max_bytes,
                    isolation,
                    pf.current_leader_epoch,
                    min_one,
                    zero_copy,
                )
            except OffsetMovedToTieredStorageError as e:
                if self.remote_log_manager is None:  # Kafka: the local read's out of range
                    results.append(self._error_result(tp, OffsetOutOfRangeError(str(e))))
                    continue
                if request.is_from_follower:
                    results.append(self._error_result(tp, e))
                    continue
                aborted = () if isolation is FetchIsolation.TXN_COMMITTED else None
                placeholder = self._error_result(tp, e)
                results.append(
                    dataclasses.replace(placeholder, error=None, aborted_transactions=aborted)
                )
                if remote is None and self.remote_log_manager.fetch_quota.throttle_time_ms() > 0:
                    continue  # Kafka: over the remote fetch quota, no records and no error
                if remote is None:
                    remote = RemoteStorageFetchInfo(
                        tp, pf.fetch_offset, max_bytes, min_one, isolation, len(results) - 1
                    )
                continue
            except KafkaApiError as e:
                results.append(self._error_result(tp, e))
                continue
            records, aborted, region = info.records, info.aborted_transactions, info.region
            if info.first_entry_incomplete:
                # Kafka (Fetch v3+): when not even the first batch fits, no records rather than
                # a fragment of one (the consumer would drop it anyway).
                records, aborted, region = b"", None if aborted is None else (), None
            result = PartitionFetchResult(
                tp,
                None,
                info.high_watermark,
                info.last_stable_offset,
                info.log_start_offset,
                aborted,
                records,
                region,
                info.readable,
            )
            if result.size_in_bytes:
                budget -= result.size_in_bytes
                min_one = False
            results.append(result)
        return FetchResponse(tuple(results)), remote

    def _error_result(self, tp: TopicPartition, e: KafkaApiError) -> PartitionFetchResult:
        p = self.partitions.get(tp)
        if p is None:
            return PartitionFetchResult(tp, e)
        lg = p.log
        return PartitionFetchResult(
            tp, e, lg.high_watermark, lg.last_stable_offset, lg.log_start_offset
        )

    # -- offsets -----------------------------------------------------------------------------------

    def list_offsets(
        self,
        tp: TopicPartition,
        timestamp: int,
        isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
        *,
        replica_id: int = -1,
        current_leader_epoch: int = -1,
    ) -> ListOffsetsResult:
        """Kafka's ListOffsets on the leader (see list_offsets.py)."""
        self.gate()
        p = self.leader_partition(tp)
        p.check_epoch(current_leader_epoch)
        lg = p.log
        if replica_id != CONSUMER_REPLICA_ID:  # a follower, or Kafka's debugging id -2
            upper = lg.log_end_offset
        elif isolation_level == IsolationLevel.READ_COMMITTED:
            upper = lg.last_stable_offset
        else:
            upper = lg.high_watermark
        return offset_for_timestamp(
            tp, lg, p.leader_epoch, timestamp, upper, self.remote_log_manager
        )

    def log_offsets(self, tp: TopicPartition) -> tuple[int, int]:
        """(log start offset, log end offset) of the leader's log (followers reset with it)."""
        self.gate()
        lg = self.leader_partition(tp).log
        return lg.log_start_offset, lg.log_end_offset

    def log_start_offsets(self, tp: TopicPartition) -> tuple[int, int]:
        """(log start offset, local log start offset) of the leader's log."""
        self.gate()
        lg = self.leader_partition(tp).log
        return lg.log_start_offset, lg.local_log_start_offset

    def end_offset_for_epoch(self, tp: TopicPartition, epoch: int) -> tuple[int, int]:
        """OffsetsForLeaderEpoch on the leader."""
        self.gate()
        return self.leader_partition(tp).log.end_offset_for_epoch(epoch)

    def delete_records(self, tp: TopicPartition, offset: int) -> int:
        """DeleteRecords on the leader: the new log start offset. ``offset`` -1 means the high
        watermark (Kafka's ``DeleteRecordsRequest.HIGH_WATERMARK``); above the high watermark
        or below -1 is OFFSET_OUT_OF_RANGE."""
        self.gate()
        p = self.leader_partition(tp)
        with p.lock:
            if offset == DELETE_TO_HIGH_WATERMARK:
                offset = p.log.high_watermark
            start = p.log.delete_records_before(offset)
        self._wake(tp)
        return start


def _with_errors(
    results: dict[TopicPartition, ProduceResult], errors: Mapping[TopicPartition, object]
) -> dict[TopicPartition, ProduceResult]:
    """``results`` with the errors of the acks=all wait (the offsets stay: the records are in
    the leader's log whatever the answer)."""
    out = dict(results)
    for tp, error in errors.items():
        if error is not None:
            r = out[tp]
            out[tp] = ProduceResult(
                tp,
                error,
                r.base_offset,
                r.last_offset,  # type: ignore[arg-type]
                r.log_append_time,
                r.log_start_offset,
            )
    return out
