"""One partition as one broker sees it: leader or follower, ISR and high watermark (Kafka's
``Partition`` with its ``Replica`` states).

State from the controller (:class:`LeaderAndIsr`): the leader broker, the leader epoch (bumped at
every leader change), the ISR, the partition epoch (bumped at every ISR or leader change) and
the assigned replicas. A broker applies a state only if its leader epoch is not older than the
one it has (and, for the same epoch, a partition epoch not older).

On the leader (reference C):

- each follower fetch at offset F records the follower's log end offset F; the follower is caught
  up at the fetch time if F >= the leader's log end offset then, or at its previous fetch time if
  F >= the leader's log end offset at that previous fetch;
- the high watermark is the smallest log end offset over the ISR (leader included), only moved
  up, and never moved while the ISR is smaller than ``min.insync.replicas``;
- a follower outside the ISR joins once its log end offset reaches the high watermark and the
  start of the current leader epoch; an ISR follower whose log end offset differs from the
  leader's and who was last caught up more than ``replica.lag.time.max.ms`` ago is removed. ISR
  changes go through the controller (``alter_partition``), which may refuse a stale proposal.
  One proposal is in flight at a time; while it is, the high watermark is computed over the
  committed ISR together with the proposed one (Kafka's "maximal ISR"), so a follower the
  controller may already count as in sync never lags behind the high watermark;
- a follower fetch at an offset above the leader's log end offset is not recorded (the read
  answers OFFSET_OUT_OF_RANGE): it must not count as caught up;
- a produce with acks=all is refused (NOT_ENOUGH_REPLICAS) when the ISR is smaller than
  ``min.insync.replicas``; it is answered once the high watermark passes its last offset.

On a follower the high watermark is ``min(leader's high watermark, own log end offset)``; a fetch
response is appended only if it answers the current leader and leader epoch at the current log
end offset (a late response from a former leader, or one read before a truncation, is dropped).

Thread safety: one lock per partition guards the state and is held around log calls (the log has
its own lock, taken after this one). The controller calls in with its own lock held (LeaderAndIsr),
so nothing here calls the controller, a purgatory or another broker while holding the partition
lock: an ISR change is decided under the lock, sent to the controller (``alter_partition``)
without it, and its answer applied under the lock again if it is still newer than the state;
then ``isr_changed(size before, size after)`` is called, under the lock (the metrics' ISR
shrink and expand counters: it takes only its own leaf lock). ``make_leader`` calls it too for
an ISR the controller changed within the same leader epoch (a stopped follower dropped).
:meth:`Partition.read` and :meth:`Partition.check_enough_replicas_reach_offset` take no lock
(Kafka takes its read lock there): they read the state, an immutable value, once, so they never
wait behind an append or a follower's fetch.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, replace

from broker_embedded.common.fetch_request import NO_LEADER_EPOCH
from broker_embedded.errors import (
    FencedLeaderEpochError,
    KafkaApiError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    UnknownLeaderEpochError,
)
from broker_embedded.storage.fetch_data_info import FetchDataInfo, FetchIsolation
from broker_embedded.storage.log_append_info import LogAppendInfo
from broker_embedded.storage.producer_state_manager import AppendOrigin
from broker_embedded.storage.topic_partition import TopicPartition
from broker_embedded.storage.unified_log import UnifiedLog

NO_LEADER = -1


@dataclass(frozen=True, slots=True)
class LeaderAndIsr:
    """The controller's decision for one partition."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    partition_epoch: int = 0


@dataclass(slots=True)
class ReplicaState:
    """What the leader knows of one follower (mutable; under the partition lock)."""

    broker_id: int
    log_end_offset: int = -1
    last_caught_up_ms: int = 0
    last_fetch_leader_leo: int = -1
    last_fetch_ms: int = 0


AlterPartition = Callable[[TopicPartition, int, LeaderAndIsr], LeaderAndIsr]


class Partition:
    """One replica of a partition on one broker; see the module docstring."""

    def __init__(
        self,
        topic_partition: TopicPartition,
        broker_id: int,
        log: UnifiedLog,
        *,
        clock_ms: Callable[[], int],
        alter_partition: AlterPartition,
        replica_lag_time_max_ms: int,
        isr_changed: Callable[[int, int], None] | None = None,
    ) -> None:
        self.topic_partition = topic_partition
        self._isr_changed = isr_changed  # (ISR size before, after) of each committed change
        self.broker_id = broker_id
        self.log = log
        self.state: LeaderAndIsr | None = None
        self._clock = clock_ms
        self._alter = alter_partition
        self._lag_max_ms = replica_lag_time_max_ms
        self._replicas: dict[int, ReplicaState] = {}
        self._leader_epoch_start = 0
        self._pending_isr: LeaderAndIsr | None = None  # an ISR change sent to the controller
        self.lock = threading.RLock()

    def __repr__(self) -> str:
        return f"Partition({self.topic_partition}, broker {self.broker_id}, {self.state})"

    def _where(self) -> str:
        tp = self.topic_partition
        return f"topic {tp.topic!r} partition {tp.partition} on broker {self.broker_id}"

    # -- state -------------------------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        s = self.state
        return s is not None and s.leader == self.broker_id

    @property
    def leader_epoch(self) -> int:
        return -1 if self.state is None else self.state.leader_epoch

    @property
    def isr(self) -> tuple[int, ...]:
        return () if self.state is None else self.state.isr

    @property
    def min_isr(self) -> int:
        return self.log.config.min_insync_replicas

    def replica_states(self) -> dict[int, ReplicaState]:
        with self.lock:
            return {b: replace(r) for b, r in self._replicas.items()}

    def _is_newer(self, state: LeaderAndIsr) -> bool:
        cur = self.state
        if cur is None:
            return True
        return (state.leader_epoch, state.partition_epoch) > (
            cur.leader_epoch,
            cur.partition_epoch,
        )

    def make_leader(self, state: LeaderAndIsr) -> bool:
        """Become leader for ``state``; False if ``state`` is not newer than what we have."""
        with self.lock:
            if not self._is_newer(state):
                return False
            old = self.state
            new_epoch = old is None or old.leader_epoch != state.leader_epoch
            self.state = state
            self._pending_isr = None
            if not new_epoch and old is not None and self._isr_changed is not None:
                self._isr_changed(len(old.isr), len(state.isr))  # the controller changed it
            if new_epoch:
                now = self._clock()
                leo = self.log.log_end_offset
                self._replicas = {
                    b: ReplicaState(b, last_caught_up_ms=now if b in state.isr else 0)
                    for b in state.replicas
                    if b != self.broker_id
                }
                try:
                    self.log.leader_epoch_cache.assign(state.leader_epoch, leo)
                except OSError as e:  # a full disk: the epoch's first append assigns it
                    self.log.health.failed(
                        f"recording leader epoch {state.leader_epoch} of {self._where()}", e
                    )
                self._leader_epoch_start = leo
            self._maybe_increment_hw()
            return True

    def make_follower(self, state: LeaderAndIsr) -> bool:
        """Become a follower of ``state.leader``; False if ``state`` is not newer."""
        with self.lock:
            if not self._is_newer(state):
                return False
            self.state = state
            self._replicas = {}
            self._pending_isr = None
            return True

    def stop_leading(self) -> None:
        with self.lock:
            self.state = None
            self._replicas = {}
            self._pending_isr = None

    # -- checks ------------------------------------------------------------------------------------

    def check_epoch(self, current_leader_epoch: int) -> None:
        """FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH for a request's leader epoch."""
        if current_leader_epoch == NO_LEADER_EPOCH:
            return
        epoch = self.leader_epoch
        if current_leader_epoch < epoch:
            raise FencedLeaderEpochError(
                f"{self._where()}: request leader epoch {current_leader_epoch} is older than "
                f"the current {epoch}"
            )
        if current_leader_epoch > epoch:
            raise UnknownLeaderEpochError(
                f"{self._where()}: request leader epoch {current_leader_epoch} is newer than "
                f"the current {epoch}"
            )

    def _require_leader(self) -> LeaderAndIsr:
        s = self.state
        if s is None or s.leader != self.broker_id:
            leader = "none" if s is None else s.leader
            raise NotLeaderOrFollowerError(
                f"{self._where()}: this broker is not the leader (leader: {leader})"
            )
        return s

    # -- produce -----------------------------------------------------------------------------------

    def append_records_to_leader(
        self, records: bytes, origin: AppendOrigin, required_acks: int
    ) -> tuple[LogAppendInfo, bool]:
        """Append as leader; returns the append info and whether the HW moved."""
        with self.lock:
            s = self._require_leader()
            if required_acks == -1 and len(s.isr) < self.min_isr:
                raise NotEnoughReplicasError(
                    f"{self._where()}: the ISR {list(s.isr)} has {len(s.isr)} replicas, fewer "
                    f"than min.insync.replicas {self.min_isr}"
                )
            info = self.log.append_as_leader(records, s.leader_epoch, origin)
            return info, self._maybe_increment_hw()

    def check_enough_replicas_reach_offset(
        self, required_offset: int
    ) -> KafkaApiError | None | bool:
        """For acks=all: ``None`` once the HW reached ``required_offset``, an error when it can
        no longer be reached as asked, ``False`` while still waiting. Without the lock (as
        Kafka's under its read lock): the state is an immutable value read once, and the HW
        only grows while it stays the leader's state."""
        try:
            s = self._require_leader()
        except NotLeaderOrFollowerError as e:
            return e
        if len(s.isr) < self.min_isr:
            return NotEnoughReplicasAfterAppendError(
                f"{self._where()}: the ISR {list(s.isr)} shrank below min.insync.replicas "
                f"{self.min_isr} before offset {required_offset - 1} was replicated"
            )
        if self.log.high_watermark >= required_offset:
            return None
        return False

    # -- fetch -------------------------------------------------------------------------------------

    def read(
        self,
        fetch_offset: int,
        max_bytes: int,
        isolation: FetchIsolation,
        current_leader_epoch: int,
        min_one_message: bool,
        zero_copy: bool = False,
    ) -> FetchDataInfo:
        # Without the lock: the state is an immutable value read once; a change right after
        # the check is the same as one right after the read.
        s = self._require_leader()
        if current_leader_epoch != NO_LEADER_EPOCH and current_leader_epoch != s.leader_epoch:
            self.check_epoch(current_leader_epoch)
        return self.log.read(
            fetch_offset, max_bytes, isolation, min_one_message=min_one_message, zero_copy=zero_copy
        )

    def update_follower_fetch_state(self, replica_id: int, fetch_offset: int) -> bool:
        """Record a follower's fetch; maybe expand the ISR and move the HW. True if the HW or
        the ISR changed (wake delayed operations)."""
        with self.lock:
            self._require_leader()
            r = self._replicas.get(replica_id)
            if r is None:
                raise NotLeaderOrFollowerError(
                    f"{self._where()}: broker {replica_id} is not a replica of this partition"
                )
            now = self._clock()
            leo = self.log.log_end_offset
            if fetch_offset > leo:
                return False  # OFFSET_OUT_OF_RANGE: a diverged follower is not caught up
            if fetch_offset >= leo:
                r.last_caught_up_ms = now
            elif fetch_offset >= r.last_fetch_leader_leo >= 0:
                r.last_caught_up_ms = max(r.last_caught_up_ms, r.last_fetch_ms)
            r.log_end_offset = fetch_offset
            r.last_fetch_leader_leo, r.last_fetch_ms = leo, now
            proposal = self._maybe_expand_isr(r)
            hw_moved = self._maybe_increment_hw()
        return self._send_isr_change(proposal) or hw_moved

    def _maybe_expand_isr(self, r: ReplicaState) -> LeaderAndIsr | None:
        s = self.state
        if s is None or r.broker_id in s.isr:
            return None
        hw = self.log.high_watermark
        if r.log_end_offset < hw or r.log_end_offset < self._leader_epoch_start:
            return None
        return self._prepare_isr_change(tuple(sorted(s.isr + (r.broker_id,))))

    def maybe_shrink_isr(self) -> bool:
        """Drop followers that fell too far behind; True if the ISR changed."""
        with self.lock:
            s = self.state
            if s is None or s.leader != self.broker_id:
                return False
            now, leo = self._clock(), self.log.log_end_offset
            out = {b for b in s.isr if b != self.broker_id and self._out_of_sync(b, now, leo)}
            if not out:
                return False
            proposal = self._prepare_isr_change(tuple(b for b in s.isr if b not in out))
        return self._send_isr_change(proposal)

    def _out_of_sync(self, broker_id: int, now: int, leo: int) -> bool:
        r = self._replicas.get(broker_id)
        if r is None:
            return True
        return r.log_end_offset != leo and now - r.last_caught_up_ms > self._lag_max_ms

    def remove_from_isr(self, broker_id: int) -> bool:
        """Drop a stopped broker from the ISR at once (controller-driven)."""
        with self.lock:
            s = self.state
            if s is None or s.leader != self.broker_id or broker_id not in s.isr:
                return False
            proposal = self._prepare_isr_change(tuple(b for b in s.isr if b != broker_id))
        return self._send_isr_change(proposal)

    def _prepare_isr_change(self, isr: tuple[int, ...]) -> LeaderAndIsr | None:
        """Under the lock: the proposal to send, or None while another one is in flight."""
        s = self.state
        if s is None or self._pending_isr is not None or isr == s.isr:
            return None
        self._pending_isr = replace(s, isr=isr)
        return self._pending_isr

    def _send_isr_change(self, proposal: LeaderAndIsr | None) -> bool:
        """Without the lock: ask the controller; apply its answer if still newer. True if the
        ISR or the HW changed."""
        if proposal is None:
            return False
        try:
            committed: LeaderAndIsr | None = self._alter(
                self.topic_partition, self.broker_id, proposal
            )
        except KafkaApiError:  # stale proposal: a newer state is on its way, or retry later
            committed = None
        with self.lock:
            if self._pending_isr is proposal:
                self._pending_isr = None
            changed = committed is not None and self._is_newer(committed)
            if changed:
                assert committed is not None
                if self._isr_changed is not None and self.state is not None:
                    self._isr_changed(len(self.state.isr), len(committed.isr))
                self.state = committed
            return self._maybe_increment_hw() or changed

    def _maybe_increment_hw(self) -> bool:
        s = self.state
        if s is None or s.leader != self.broker_id or len(s.isr) < self.min_isr:
            return False
        lg = self.log
        isr = s.isr if self._pending_isr is None else set(s.isr).union(self._pending_isr.isr)
        hw = lg.log_end_offset  # the maximal ISR's smallest log end offset, the leader's first
        replicas = self._replicas
        for b in isr:
            if b != self.broker_id:
                r = replicas.get(b)
                hw = min(hw, -1 if r is None else r.log_end_offset)
        # Read without the log's lock: while this broker leads, under this lock, the HW only
        # grows, so a value at or below the one read cannot move it (the common case: a
        # follower still behind), and the log's lock is not taken.
        return hw > lg.high_watermark and lg.maybe_increment_high_watermark(hw)

    # -- follower side -----------------------------------------------------------------------------

    def append_records_to_follower(
        self,
        records: bytes,
        leader_high_watermark: int,
        leader_log_start_offset: int,
        *,
        leader_id: int | None = None,
        leader_epoch: int | None = None,
        fetch_offset: int | None = None,
    ) -> LogAppendInfo | None:
        """Append a fetch response from the leader. With ``leader_id`` / ``leader_epoch`` (whom
        the fetch went to, at which epoch) a response that no longer answers the current state
        is NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH; with ``fetch_offset`` one fetched at
        another log end offset than the current one (a truncation came between) is dropped."""
        with self.lock:
            s = self.state
            if s is None or s.leader == self.broker_id:
                raise NotLeaderOrFollowerError(f"{self._where()}: not a follower")
            if leader_id is not None and s.leader != leader_id:
                raise NotLeaderOrFollowerError(
                    f"{self._where()}: broker {leader_id} is no longer the leader ({s.leader} is)"
                )
            if leader_epoch is not None and s.leader_epoch != leader_epoch:
                raise FencedLeaderEpochError(
                    f"{self._where()}: a response for leader epoch {leader_epoch}, now "
                    f"{s.leader_epoch}"
                )
            if fetch_offset is not None and fetch_offset != self.log.log_end_offset:
                return None
            info = self.log.append_as_follower(records) if records else None
            self.log.update_high_watermark(min(leader_high_watermark, self.log.log_end_offset))
            start = min(leader_log_start_offset, self.log.high_watermark)
            if start > self.log.log_start_offset:
                self.log.delete_records_before(start)
            return info

    def is_follower_of(self, leader_id: int, leader_epoch: int) -> bool:
        """True while this replica follows ``leader_id`` at ``leader_epoch`` (under the lock)."""
        with self.lock:
            s = self.state
            return (
                s is not None
                and s.leader != self.broker_id
                and s.leader == leader_id
                and s.leader_epoch == leader_epoch
            )
