"""Followers replicating from their leaders (Kafka's ``ReplicaFetcherThread`` and
``ReplicaFetcherManager``).

One thread per (follower broker, leader broker) pair fetches every partition that the follower
follows from that leader, through the leader's ordinary fetch path with the follower's broker id
as replica id (so the leader reads up to its log end offset and records the follower's progress).
Per partition:

1. Truncation first (a new leader epoch, or a restarted follower): the follower asks the leader
   for the end offset of its own latest epoch (OffsetsForLeaderEpoch) and truncates to
   ``min(that end offset, own log end offset)``; when the leader answers an older epoch, also to
   its own end offset for that epoch. Without epochs it keeps its log (nothing to compare).
2. Fetching at the follower's log end offset with its current leader epoch; the records are
   appended with the leader's offsets and epochs, the follower's high watermark becomes
   ``min(leader HW, own log end offset)`` and its log start offset follows the leader's. A
   response is applied only while the replica still follows that leader at that leader epoch
   and its log end offset is still the fetch offset (partition.py); otherwise it is dropped.
3. OFFSET_OUT_OF_RANGE: a follower ahead of the leader truncates to the leader's log end offset;
   one behind the leader's log start restarts its log empty there. OFFSET_MOVED_TO_TIERED_STORAGE
   (a tiered partition's follower behind the leader's local log start): the log restarts empty
   at the end of the stored segment holding the offset below the leader's local log start,
   keeping the leader's log start offset, with that segment's leader epochs and producer
   snapshot from the store (Kafka's ``buildRemoteLogAuxState``; the store is read on this
   thread, as Kafka's fetcher does).
4. NOT_LEADER_OR_FOLLOWER, FENCED/UNKNOWN_LEADER_EPOCH (per partition), a stopped or unreachable
   leader (the whole thread): back off ``replica.fetch.backoff.ms`` and retry (a new
   LeaderAndIsr moves the partition).

Threads stop on :meth:`ReplicaFetcherManager.shutdown`. They stall while their broker is paused,
also between receiving a response and applying it: a paused broker applies nothing. Calls to the
leader are made without holding a partition lock (the controller takes partition locks with its
own lock held, and a paused leader blocks its callers).
Thread safety: the partition map of a thread is guarded by its lock.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from broker_embedded.common.fetch_request import (
    FetchRequest,
    PartitionFetch,
    PartitionFetchResult,
)
from broker_embedded.errors import (
    KafkaApiError,
    KafkaLogError,
    NotLeaderOrFollowerError,
    OffsetMovedToTieredStorageError,
    OffsetOutOfRangeError,
)
from broker_embedded.storage.topic_partition import TopicPartition

if TYPE_CHECKING:
    from broker_embedded.replica_manager.partition import Partition
    from broker_embedded.replica_manager.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

IDLE_WAIT_S = 0.5  # with nothing to fetch, until a partition is added


@dataclass
class _FetchState:
    """A followed partition (mutable, under the thread's lock)."""

    leader_epoch: int
    truncating: bool = True
    retry_at: float = 0.0


class ReplicaFetcherThread:
    """Fetches from one leader for one follower broker."""

    def __init__(self, follower: ReplicaManager, leader_id: int) -> None:
        self.follower = follower
        self.leader_id = leader_id
        self._lock = threading.Lock()
        self._partitions: dict[TopicPartition, _FetchState] = {}
        self._stop = threading.Event()
        self._wakeup = threading.Event()
        self._thread = threading.Thread(
            target=self._run,
            name=f"ReplicaFetcher-{follower.broker_id}-from-{leader_id}",
            daemon=True,
        )
        self._thread.start()

    def add_partition(self, tp: TopicPartition, leader_epoch: int) -> None:
        with self._lock:
            self._partitions[tp] = _FetchState(leader_epoch)
        self._wakeup.set()

    def remove_partitions(self, tps: list[TopicPartition]) -> None:
        with self._lock:
            for tp in tps:
                self._partitions.pop(tp, None)

    @property
    def partition_count(self) -> int:
        with self._lock:
            return len(self._partitions)

    def shutdown(self) -> None:
        self._stop.set()
        self._wakeup.set()
        self._thread.join(timeout=10)

    # -- the loop ----------------------------------------------------------------------------------

    def _backoff_s(self) -> float:
        return self.follower.config.replica_fetch_backoff_ms / 1000

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.follower.gate()
            except KafkaLogError:
                return
            leader = self.follower._peer(self.leader_id)
            states, next_retry = self._ready()
            if leader is None or not states:
                if leader is None:
                    wait = self._backoff_s()
                elif next_retry is not None:
                    wait = max(next_retry - time.monotonic(), 0.001)
                else:
                    wait = IDLE_WAIT_S
                self._wakeup.wait(wait)
                self._wakeup.clear()
                continue
            try:
                self._do_work(leader, states)
            except KafkaLogError as e:
                log.debug("fetcher %s: %s; backing off", self._thread.name, e)
                self._stop.wait(self._backoff_s())
            except Exception:  # never let a follower die silently
                log.exception("fetcher %s failed; backing off", self._thread.name)
                self._stop.wait(self._backoff_s())

    def _ready(self) -> tuple[dict[TopicPartition, _FetchState], float | None]:
        """The partitions to work on now, and when the next backed-off one is due."""
        now = time.monotonic()
        with self._lock:
            ready = {tp: st for tp, st in self._partitions.items() if st.retry_at <= now}
            later = [st.retry_at for st in self._partitions.values() if st.retry_at > now]
        return ready, min(later, default=None)

    def _back_off(self, tp: TopicPartition, st: _FetchState, e: Exception) -> None:
        log.debug("fetcher %s: %s: %s; backing off", self._thread.name, tp, e)
        st.retry_at = time.monotonic() + self._backoff_s()

    def _do_work(self, leader: ReplicaManager, states: dict[TopicPartition, _FetchState]) -> None:
        for tp, st in states.items():
            if st.truncating:
                try:
                    self._truncate(leader, tp, st)
                except KafkaApiError as e:
                    self._back_off(tp, st, e)
        parts = []
        for tp, st in states.items():
            p = self.follower.partitions.get(tp)
            if st.truncating or p is None or not p.is_follower_of(self.leader_id, st.leader_epoch):
                continue
            parts.append(
                PartitionFetch(
                    tp,
                    p.log.log_end_offset,
                    self.follower.config.replica_fetch_max_bytes,
                    st.leader_epoch,
                )
            )
        if not parts:
            return
        request = FetchRequest(
            tuple(parts),
            replica_id=self.follower.broker_id,
            max_wait_ms=self.follower.config.replica_fetch_wait_max_ms,
            min_bytes=1,
            max_bytes=self.follower.config.replica_fetch_response_max_bytes,
        )
        response = leader.fetch_messages(request)
        # A paused broker is a stopped process: it must not apply what arrives meanwhile (and
        # after it resumes the response may be stale: the checks below drop it then).
        self.follower.gate()
        if self._stop.is_set():
            return
        offsets = {pf.topic_partition: pf.fetch_offset for pf in parts}
        for result in response.partitions:
            tp = result.topic_partition
            try:
                self._process(leader, result, states[tp], offsets[tp])
            except KafkaApiError as e:
                self._back_off(tp, states[tp], e)

    def _truncate(self, leader: ReplicaManager, tp: TopicPartition, st: _FetchState) -> None:
        p = self.follower.partitions.get(tp)
        if p is None:
            return
        lg = p.log
        epoch = lg.leader_epoch_cache.latest_epoch
        leo = lg.log_end_offset
        if epoch is not None:
            # Asked without holding the partition lock: the leader may block (paused), and the
            # controller takes this partition's lock with its own lock held.
            leader_epoch, leader_end = leader.end_offset_for_epoch(tp, epoch)
            with p.lock:
                if not p.is_follower_of(self.leader_id, st.leader_epoch):
                    raise NotLeaderOrFollowerError(
                        f"{tp}: broker {self.follower.broker_id} no longer follows broker "
                        f"{self.leader_id} at leader epoch {st.leader_epoch}"
                    )
                if lg.leader_epoch_cache.latest_epoch != epoch or lg.log_end_offset != leo:
                    return  # changed meanwhile (cannot happen while we are its only writer)
                if leader_epoch < 0:
                    target = lg.high_watermark
                elif leader_epoch == epoch:
                    target = min(leader_end, leo)
                else:
                    own_epoch, own_end = lg.end_offset_for_epoch(leader_epoch)
                    target = min(leader_end, own_end if own_epoch >= 0 else lg.high_watermark)
                if lg.truncate_to(target):
                    log.info("broker %s truncated %s to %s", self.follower.broker_id, tp, target)
        st.truncating = False

    def _process(
        self, leader: ReplicaManager, r: PartitionFetchResult, st: _FetchState, fetch_offset: int
    ) -> None:
        tp = r.topic_partition
        p = self.follower.partitions.get(tp)
        if p is None:
            return
        if r.error is None:
            p.append_records_to_follower(
                r.records,
                r.high_watermark,
                r.log_start_offset,
                leader_id=self.leader_id,
                leader_epoch=st.leader_epoch,
                fetch_offset=fetch_offset,
            )
            return
        if isinstance(r.error, OffsetMovedToTieredStorageError):
            self._start_at_leader_local_start(leader, p, tp, st, fetch_offset)
            return
        if isinstance(r.error, OffsetOutOfRangeError):
            start, end = leader.log_offsets(tp)
            with p.lock:
                if not p.is_follower_of(self.leader_id, st.leader_epoch):
                    return
                if p.log.log_end_offset != fetch_offset:
                    return  # stale answer
                if fetch_offset > end:
                    p.log.truncate_to(end)
                elif fetch_offset < start:
                    p.log.truncate_fully_and_start_at(start)
            return
        self._back_off(tp, st, r.error)

    def _start_at_leader_local_start(
        self,
        leader: ReplicaManager,
        p: Partition,
        tp: TopicPartition,
        st: _FetchState,
        fetch_offset: int,
    ) -> None:
        """OFFSET_MOVED_TO_TIERED_STORAGE: the follower's log end lies below the leader's local
        log start (Kafka's ``TierStateMachine.buildRemoteLogAuxState``). The stored segment
        holding the offset below the leader's local start gives where the log restarts (its
        end) with its leader epochs and producer snapshot (remote_log_manager.py); the log
        restarts empty there, the leader's log start offset as its own. A store that fails:
        back off and ask again. A store that does not hold that segment (another location than
        the leader's), or no remote log manager (the broker's
        ``remote.log.storage.system.enable`` off): the log restarts at the leader's local start
        with neither."""
        try:
            start, local_start = leader.log_start_offsets(tp)
            aux = None
            rlm = self.follower.remote_log_manager
            if rlm is not None and p.log.remote_log_enabled:
                aux = rlm.remote_log_aux_state(tp, p.log, local_start)
        except KafkaApiError as e:
            self._back_off(tp, st, e)
            return
        with p.lock:
            if not p.is_follower_of(self.leader_id, st.leader_epoch):
                return
            if p.log.log_end_offset != fetch_offset or fetch_offset >= local_start:
                return  # stale answer
            if aux is None:
                p.log.truncate_fully_and_start_at(local_start, log_start_offset=start)
                return
            p.log.truncate_fully_and_start_at(
                aux.next_offset,
                log_start_offset=start,
                leader_epochs=aux.leader_epochs,
                producer_snapshot=aux.producer_snapshot,
            )
        restored = "restored" if aux.producer_snapshot else "absent"
        log.info(
            "broker %s restarted %s at offset %d from remote storage (%d leader epochs, "
            "producer snapshot %s)",
            self.follower.broker_id,
            tp,
            aux.next_offset,
            len(aux.leader_epochs),
            restored,
        )


class ReplicaFetcherManager:
    """The fetcher threads of one follower broker, one per leader."""

    def __init__(self, follower: ReplicaManager) -> None:
        self.follower = follower
        self._lock = threading.Lock()
        self._threads: dict[int, ReplicaFetcherThread] = {}
        self._closed = False

    def add_partition(self, tp: TopicPartition, leader_id: int, leader_epoch: int) -> None:
        with self._lock:
            if self._closed:
                return
            thread = self._threads.get(leader_id)
            if thread is None:
                thread = ReplicaFetcherThread(self.follower, leader_id)
                self._threads[leader_id] = thread
            thread.add_partition(tp, leader_epoch)

    def remove_partitions(self, tps: list[TopicPartition]) -> None:
        with self._lock:
            for thread in self._threads.values():
                thread.remove_partitions(tps)

    def shutdown(self) -> None:
        with self._lock:
            self._closed = True
            threads = list(self._threads.values())
            self._threads.clear()
        for thread in threads:
            thread.shutdown()
