"""The transaction coordinator (Kafka's ``TransactionCoordinator`` with its
``TransactionMetadata`` per transactional id), in memory.

Per transactional id: the producer id and epoch of its current instance, the transaction
timeout, the state and the partitions of the transaction. States and transitions (Kafka's
``TransactionState``)::

    EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT --add_partitions--> ONGOING
    ONGOING --end_txn(commit)--> PREPARE_COMMIT --markers written--> COMPLETE_COMMIT
    ONGOING --end_txn(abort), timeout, fenced--> PREPARE_ABORT --markers written--> COMPLETE_ABORT
    EMPTY, COMPLETE_* --init_producer_id--> EMPTY with the epoch bumped

- :meth:`TransactionCoordinator.init_producer_id`: a new transactional id gets a new producer
  id (epoch 0); a known one gets its epoch bumped, which fences the previous instance (a new
  producer id when the epoch would pass ``MAX_EPOCH``). If the previous instance has a
  transaction ONGOING, it is aborted with the epoch bumped once (``PREPARE_ABORT``) and the
  answer is CONCURRENT_TRANSACTIONS: the client retries and, once the markers are written,
  gets the epoch bumped again (Kafka's behaviour). While markers are being written (``PREPARE_*``)
  every request of that id is CONCURRENT_TRANSACTIONS. v3+ callers that name their current
  producer id and epoch (KIP-360) get PRODUCER_FENCED when those are not the id's current ones.
- :meth:`add_partitions` (AddPartitionsToTxn, and AddOffsetsToTxn with the group's
  ``__consumer_offsets`` partition): INVALID_PRODUCER_ID_MAPPING for an unknown id or another
  producer id, PRODUCER_FENCED for an older epoch.
- :meth:`end_txn` (EndTxn): from ONGOING to ``PREPARE_*``, returning the :class:`TxnCompletion`
  (the markers to write); a repeated EndTxn of a completed transaction with the same result
  succeeds, the opposite result or no transaction at all is INVALID_TXN_STATE.
- :meth:`expire`: ONGOING transactions older than their timeout are aborted with the epoch
  bumped (the producer is fenced, as in Kafka).

The markers of a completion are written by the caller (the embedded
:class:`~broker_embedded.client.transactional_producer.TransactionalProducer`, synchronously) or
by :class:`TransactionMarkerWriter` (the wire API's, a background thread as Kafka's
``TransactionMarkerChannelManager``, which also runs :meth:`expire`); :meth:`complete` then
moves the id to ``COMPLETE_*``. A completion's producer epoch is the one its markers carry.

Persistence (transaction_state_manager.py): every transition Kafka writes goes to
:attr:`TransactionCoordinator.store` as the id's whole new state (Kafka's ``TransactionLogValue``)
BEFORE it takes effect in memory. While the append is under way the id is *pending*: the lock
is released (other ids go on), and every request of that id answers CONCURRENT_TRANSACTIONS
(Kafka's ``pendingTransitionInProgress``); an append that fails leaves the state as it was and
raises its error (COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, ...) to the caller. A transition
that changes nothing Kafka writes (AddPartitionsToTxn of partitions already in the transaction)
writes nothing. The default store is in memory; :meth:`load` takes the states replayed from
``__transaction_state`` (a ``PrepareCommit`` / ``PrepareAbort`` comes back as the completion to
write; an ``Ongoing`` one is aborted by :meth:`expire` once its timeout, counted from its
persisted start time, has passed; the epochs continue from the persisted ones, so the next
InitProducerId fences the instance from before the restart). :attr:`loaded` names the
partitions of that topic loaded so far.

A transaction still open in a log dir without ``__transaction_state`` (written before it
existed, or by the embedded producer with the in-memory store) is aborted by the leader when the
log dir opens again (:meth:`Broker.abort_orphaned_transactions`, through
:meth:`open_producer_ids`), so a read_committed reader is never stuck behind one.

Limits: ``transaction.max.timeout.ms`` (Kafka's default 900,000) bounds a timeout;
INVALID_TRANSACTION_TIMEOUT outside (0, it]. Thread safety: every method takes :attr:`lock`
(released only around a store append, with the id pending); :attr:`changed` is notified on
every completion and every end of an append.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from broker_embedded.coordinator.transaction_log_record import (
    TransactionLogValue,
    TransactionStatus,
    TxnPartitions,
)
from broker_embedded.coordinator.transaction_state_manager import (
    InMemoryTransactionStore,
    TransactionStore,
)
from broker_embedded.errors import (
    BrokerClosedError,
    ConcurrentTransactionsError,
    InvalidProducerEpochError,
    InvalidProducerIdMappingError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    KafkaApiError,
    NotEnoughReplicasError,
    ProducerFencedError,
    UnknownTopicOrPartitionError,
)
from broker_embedded.record.control_record import EndTransactionMarker
from broker_embedded.storage.topic_partition import TopicPartition

log = logging.getLogger(__name__)

COORDINATOR_EPOCH = 0
MAX_EPOCH = 32767 - 1  # Kafka bumps to a new producer id before the epoch reaches Short.MAX
DEFAULT_TIMEOUT_MS = 60_000  # the producer's transaction.timeout.ms
MAX_TIMEOUT_MS = 900_000  # transaction.max.timeout.ms
EXPIRE_INTERVAL_S = 1.0
RETRY_BACKOFF_S = 0.1
HOLD_MARKERS_ENV = "KAFKALOG_TEST_HOLD_TXN_MARKERS"


class TxnStatus(enum.Enum):
    """Kafka's ``TransactionState`` by its name (what DescribeTransactions answers)."""

    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"


_PREPARING = (TxnStatus.PREPARE_COMMIT, TxnStatus.PREPARE_ABORT)


@dataclass
class TxnState:
    """One transactional id (mutable, under the coordinator's lock). ``start_ms``: when the
    transaction started (-1 before the first); ``pending``: a store append is under way."""

    producer_id: int
    producer_epoch: int
    timeout_ms: int = DEFAULT_TIMEOUT_MS
    status: TxnStatus = TxnStatus.EMPTY
    partitions: list[TopicPartition] = field(default_factory=list)
    start_ms: int = -1
    groups: list[str] = field(default_factory=list)  # AddOffsetsToTxn (not persisted)
    pending: bool = False

    def copy(self, **changes: object) -> TxnState:
        fresh = {"partitions": list(self.partitions), "groups": list(self.groups)}
        return dataclasses.replace(self, **{**fresh, **changes})  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class TxnCompletion:
    """The markers that end a transaction: ``commit`` or abort, stamped with the producer id
    and epoch, one per partition."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    partitions: tuple[TopicPartition, ...]
    groups: tuple[str, ...] = ()

    def marker_batch(self, timestamp_ms: int) -> bytes:
        """The control batch (COMMIT or ABORT, coordinator epoch ``COORDINATOR_EPOCH``) that
        ends the transaction in one partition."""
        marker = EndTransactionMarker.commit if self.commit else EndTransactionMarker.abort
        return marker(COORDINATOR_EPOCH).build_batch(
            base_offset=0,
            timestamp=timestamp_ms,
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
        )


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


def log_value(state: TxnState, now_ms: int) -> TransactionLogValue:
    """The ``TransactionLogValue`` (v0) of ``state`` as Kafka's ``TransactionLog.valueToBytes``
    writes it: null partitions when ``Empty``, else grouped by topic in the order added."""
    partitions = None
    if state.status is not TxnStatus.EMPTY:
        by_topic: dict[str, list[int]] = {}
        for tp in state.partitions:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        partitions = tuple(TxnPartitions(t, tuple(ps)) for t, ps in by_topic.items())
    return TransactionLogValue(
        state.producer_id,
        state.producer_epoch,
        state.timeout_ms,
        TransactionStatus[state.status.name],
        partitions,
        now_ms,
        state.start_ms,
    )


def state_of(value: TransactionLogValue) -> TxnState:
    """The in-memory state of a loaded value (a ``PrepareEpochFence``, which Kafka never
    writes, counts as ``Ongoing``: aborted at its timeout or by the next InitProducerId)."""
    name = value.status.name
    status = TxnStatus.ONGOING if name == "PREPARE_EPOCH_FENCE" else TxnStatus[name]
    parts = value.partitions or ()
    partitions = [TopicPartition(p.topic, i) for p in parts for i in p.partition_ids]
    return TxnState(
        value.producer_id,
        value.producer_epoch,
        value.transaction_timeout_ms,
        status,
        partitions,
        value.start_timestamp_ms,
    )


class TransactionCoordinator:
    """See the module docstring. ``new_producer_id()`` hands out producer ids (the
    controller's counter); ``store`` persists the transitions (in memory by default)."""

    def __init__(
        self,
        new_producer_id: Callable[[], int],
        clock_ms: Callable[[], int] = _wall_ms,
        max_timeout_ms: int = MAX_TIMEOUT_MS,
        store: TransactionStore | None = None,
    ) -> None:
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.txns: dict[str, TxnState] = {}
        self.new_producer_id = new_producer_id  # rebound when a new controller takes over
        self.store: TransactionStore = store or InMemoryTransactionStore()
        self.loaded: set[int] = set()  # partitions of __transaction_state loaded
        # called (outside the lock) with each marker once it is appended, by whoever wrote it:
        # the group coordinator decides the transaction's offsets in __consumer_offsets
        self.marker_listeners: list[Callable[[TopicPartition, TxnCompletion], None]] = []
        self._clock = clock_ms
        self._max_timeout_ms = max_timeout_ms

    def clock_ms(self) -> int:
        """The coordinator's clock (ms since the epoch): what transaction start times use."""
        return self._clock()

    def open_producer_ids(self) -> set[int]:
        """Producer ids with a transaction open in this coordinator."""
        with self.lock:
            return {s.producer_id for s in self.txns.values() if s.partitions}

    def load(
        self, partition: int, values: Mapping[str, TransactionLogValue]
    ) -> list[TxnCompletion]:
        """Take the states of ``__transaction_state`` partition ``partition`` (once: a partition
        already loaded is skipped; an id this coordinator already holds keeps its newer state);
        the completions of the prepared transactions, for the caller to write."""
        with self.lock:
            if partition in self.loaded:
                return []
            self.loaded.add(partition)
            completions = []
            for tid, value in values.items():
                if tid in self.txns:
                    continue
                state = self.txns[tid] = state_of(value)
                if state.status in _PREPARING:
                    commit = state.status is TxnStatus.PREPARE_COMMIT
                    completions.append(self._completion(tid, state, commit))
            return completions

    # -- requests ----------------------------------------------------------------------------------

    def init_producer_id(
        self,
        transactional_id: str,
        timeout_ms: int = DEFAULT_TIMEOUT_MS,
        expected: tuple[int, int] | None = None,
    ) -> tuple[int, int] | TxnCompletion:
        """(producer id, epoch) for a new instance of ``transactional_id``; or, when the
        previous instance has a transaction open, the completion that aborts it (the caller
        writes it, then answers CONCURRENT_TRANSACTIONS)."""
        if not 0 < timeout_ms <= self._max_timeout_ms:
            raise InvalidTransactionTimeoutError(
                f"transactional id {transactional_id!r}: transaction timeout {timeout_ms} ms is "
                f"outside (0, {self._max_timeout_ms}] (transaction.max.timeout.ms)"
            )
        self.store.check_ready(transactional_id)  # e.g. __transaction_state being created
        with self.lock:
            state = self.txns.get(transactional_id)
            if state is None:
                return self._init_new(transactional_id, timeout_ms, expected)
            self._check_not_pending(transactional_id, state)
            if expected is not None and expected != (-1, -1):
                if expected != (state.producer_id, state.producer_epoch):
                    raise self._fenced(transactional_id, state, *expected)
            self._check_not_preparing(transactional_id, state)
            if state.status is TxnStatus.ONGOING:
                return self._abort(transactional_id, state, bump=True)
            new = self._bumped(
                state.copy(
                    timeout_ms=timeout_ms,
                    status=TxnStatus.EMPTY,
                    partitions=[],
                    start_ms=-1,
                    groups=[],
                )
            )
            self._transit(transactional_id, state, new)
            return state.producer_id, state.producer_epoch

    def _init_new(
        self, transactional_id: str, timeout_ms: int, expected: tuple[int, int] | None
    ) -> tuple[int, int]:
        if expected is not None and expected != (-1, -1):
            raise InvalidProducerIdMappingError(
                f"transactional id {transactional_id!r} has no producer "
                f"(the request names producer {expected[0]} epoch {expected[1]})"
            )
        state = self.txns[transactional_id] = TxnState(self.new_producer_id(), -1, timeout_ms)
        try:
            self._transit(transactional_id, state, state.copy(producer_epoch=0))
        except BaseException:
            if self.txns.get(transactional_id) is state:  # not persisted: forget it
                del self.txns[transactional_id]
            raise
        return state.producer_id, state.producer_epoch

    def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
    ) -> None:
        """AddPartitionsToTxn: the partitions join the transaction (opening it)."""
        with self.lock:
            state = self._current(transactional_id, producer_id, producer_epoch)
            self._check_not_preparing(transactional_id, state)
            new = state.copy()
            if state.status is not TxnStatus.ONGOING:
                new = state.copy(
                    status=TxnStatus.ONGOING, partitions=[], start_ms=self._clock(), groups=[]
                )
            new.partitions += [tp for tp in dict.fromkeys(partitions) if tp not in new.partitions]
            if new != state:  # Kafka writes nothing when every partition is already in
                self._transit(transactional_id, state, new)

    def add_offsets(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        group_id: str,
        offsets_partition: TopicPartition | None,
    ) -> None:
        """AddOffsetsToTxn: the group's offset commits join the transaction (and its
        ``__consumer_offsets`` partition, when that topic exists, gets a marker)."""
        self.add_partitions(
            transactional_id,
            producer_id,
            producer_epoch,
            [] if offsets_partition is None else [offsets_partition],
        )
        with self.lock:
            state = self.txns[transactional_id]
            if group_id not in state.groups:
                state.groups.append(group_id)

    def end_txn(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> TxnCompletion | None:
        """EndTxn: the completion whose markers the caller writes (``None``: a retried EndTxn
        of a transaction already completed that way, nothing to write)."""
        with self.lock:
            state = self._current(transactional_id, producer_id, producer_epoch)
            done = TxnStatus.COMPLETE_COMMIT if commit else TxnStatus.COMPLETE_ABORT
            if state.status is done:
                return None
            self._check_not_preparing(transactional_id, state)
            if state.status is not TxnStatus.ONGOING:
                what = "commit" if commit else "abort"
                raise InvalidTxnStateError(
                    f"transactional id {transactional_id!r}: cannot {what}, the transaction is "
                    f"{state.status.value}"
                )
            if commit:
                self._transit(transactional_id, state, state.copy(status=TxnStatus.PREPARE_COMMIT))
                return self._completion(transactional_id, state, True)
            return self._abort(transactional_id, state, bump=False)

    def verify(
        self, transactional_id: str, producer_id: int, producer_epoch: int, tp: TopicPartition
    ) -> None:
        """A transactional produce's first batch at ``tp`` (KIP-890 part 1, on by default in
        Kafka 3.9): the producer is the id's current one and ``tp`` joined its ongoing
        transaction, else the error Kafka's Produce answers: INVALID_PRODUCER_ID_MAPPING (49),
        INVALID_PRODUCER_EPOCH (47) for a fenced epoch, NOT_ENOUGH_REPLICAS (19, retriable)
        while the transaction completes, INVALID_TXN_STATE (48) for a partition not added."""
        with self.lock:
            state = self.txns.get(transactional_id)
            if state is None or state.producer_id != producer_id:
                holder = "no producer" if state is None else f"producer {state.producer_id}"
                raise InvalidProducerIdMappingError(
                    f"transactional id {transactional_id!r} has {holder}, not producer "
                    f"{producer_id}"
                )
            if producer_epoch != state.producer_epoch:
                raise InvalidProducerEpochError(
                    str(self._fenced(transactional_id, state, producer_id, producer_epoch))
                )
            if state.pending or state.status in _PREPARING:
                raise NotEnoughReplicasError(
                    f"transactional id {transactional_id!r}: its transaction is completing; "
                    f"retry the write to {tp}"
                )
            if state.status is not TxnStatus.ONGOING or tp not in state.partitions:
                raise InvalidTxnStateError(
                    f"transactional id {transactional_id!r}: {tp} was not added to its "
                    f"transaction (AddPartitionsToTxn) before this write"
                )

    def check_producer(self, transactional_id: str, producer_id: int, producer_epoch: int) -> None:
        """TxnOffsetCommit's check: the id's current producer and epoch, else
        INVALID_PRODUCER_ID_MAPPING or PRODUCER_FENCED."""
        with self.lock:
            self._current(transactional_id, producer_id, producer_epoch)

    def complete(self, completion: TxnCompletion) -> None:
        """The markers of ``completion`` are written: the transaction is complete (raises the
        store's error, the state still prepared, when that cannot be persisted)."""
        with self.lock:
            state = self.txns.get(completion.transactional_id)
            if state is None or state.status not in _PREPARING:
                return
            self._check_not_pending(completion.transactional_id, state)
            done = TxnStatus.COMPLETE_COMMIT if completion.commit else TxnStatus.COMPLETE_ABORT
            # Kafka keeps the start timestamp of a completed transaction
            self._transit(
                completion.transactional_id,
                state,
                state.copy(status=done, partitions=[], groups=[]),
            )

    def marker_written(self, tp: TopicPartition, completion: TxnCompletion) -> None:
        """``completion``'s marker is appended to ``tp`` (acks=all): tell the listeners (the
        group coordinator, for a ``__consumer_offsets`` partition), before :meth:`complete`."""
        for listener in self.marker_listeners:
            listener(tp, completion)

    def expire(self) -> list[TxnCompletion]:
        """Abort (epoch bumped: the producer is fenced) every ONGOING transaction older than
        its timeout; the completions to write (one whose abort cannot be persisted now is
        logged and tried again at the next call)."""
        now = self._clock()
        completions = []
        with self.lock:
            due = [
                (tid, s)
                for tid, s in self.txns.items()
                if s.status is TxnStatus.ONGOING
                and not s.pending
                and now - s.start_ms > s.timeout_ms
            ]
            for tid, state in due:
                if state.pending or state.status is not TxnStatus.ONGOING:
                    continue  # changed while another id's abort was being persisted
                try:
                    completions.append(self._abort(tid, state, bump=True))
                except KafkaApiError as e:
                    log.warning("aborting the timed-out transaction of %r: %s", tid, e)
        return completions

    def wait_completed(self, transactional_id: str, timeout_s: float) -> bool:
        """Wait (bounded) until ``transactional_id`` is not writing markers; True if so."""
        with self.lock:
            return self.changed.wait_for(
                lambda: self.txns[transactional_id].status not in _PREPARING, timeout_s
            )

    def state(self, transactional_id: str) -> TxnState | None:
        """A copy of the id's state (operators' DescribeTransactions, tests)."""
        with self.lock:
            s = self.txns.get(transactional_id)
            return None if s is None else s.copy()

    def states(self) -> dict[str, TxnState]:
        """A copy of every id's state (ListTransactions), by transactional id."""
        with self.lock:
            return {tid: s.copy() for tid, s in sorted(self.txns.items())}

    # -- helpers (under the lock) ------------------------------------------------------------------

    def _transit(self, transactional_id: str, state: TxnState, new: TxnState) -> None:
        """Persist ``new`` (the lock released meanwhile, the id pending), then make it the
        id's state; a failed append leaves ``state`` as it was and raises."""
        value = log_value(new, self._clock())
        state.pending = True
        self.lock.release()
        try:
            self.store.append(transactional_id, value)
        finally:
            self.lock.acquire()
            state.pending = False
            self.changed.notify_all()
        for f in dataclasses.fields(new):
            if f.name != "pending":
                setattr(state, f.name, getattr(new, f.name))

    def _current(self, transactional_id: str, producer_id: int, producer_epoch: int) -> TxnState:
        state = self.txns.get(transactional_id)
        if state is None or state.producer_id != producer_id:
            holder = "no producer" if state is None else f"producer {state.producer_id}"
            raise InvalidProducerIdMappingError(
                f"transactional id {transactional_id!r} has {holder}, not producer {producer_id}"
            )
        self._check_not_pending(transactional_id, state)
        if producer_epoch != state.producer_epoch:
            raise self._fenced(transactional_id, state, producer_id, producer_epoch)
        return state

    @staticmethod
    def _fenced(
        transactional_id: str, state: TxnState, producer_id: int, producer_epoch: int
    ) -> ProducerFencedError:
        return ProducerFencedError(
            f"transactional id {transactional_id!r}: producer {producer_id} epoch "
            f"{producer_epoch} was fenced by producer {state.producer_id} epoch "
            f"{state.producer_epoch}"
        )

    @staticmethod
    def _check_not_pending(transactional_id: str, state: TxnState) -> None:
        if state.pending:
            raise ConcurrentTransactionsError(
                f"transactional id {transactional_id!r}: its state is being written; retry"
            )

    @staticmethod
    def _check_not_preparing(transactional_id: str, state: TxnState) -> None:
        if state.status in _PREPARING:
            raise ConcurrentTransactionsError(
                f"transactional id {transactional_id!r}: its transaction is completing "
                f"({state.status.value}); retry"
            )

    def _bumped(self, new: TxnState) -> TxnState:
        if new.producer_epoch >= MAX_EPOCH:
            new.producer_id, new.producer_epoch = self.new_producer_id(), 0
        else:
            new.producer_epoch += 1
        return new

    def _abort(self, transactional_id: str, state: TxnState, *, bump: bool) -> TxnCompletion:
        new = state.copy(status=TxnStatus.PREPARE_ABORT)
        if bump:  # fence the instance that opened it: its markers carry the new epoch
            new.producer_epoch += 1
        self._transit(transactional_id, state, new)
        return self._completion(transactional_id, state, False)

    @staticmethod
    def _completion(transactional_id: str, state: TxnState, commit: bool) -> TxnCompletion:
        return TxnCompletion(
            transactional_id,
            state.producer_id,
            state.producer_epoch,
            commit,
            tuple(state.partitions),
            tuple(state.groups),
        )


MarkerWrite = Callable[[TopicPartition, TxnCompletion], None]


class TransactionMarkerWriter(threading.Thread):
    """Writes the markers of submitted completions in the background (Kafka's
    ``TransactionMarkerChannelManager``) and aborts expired transactions every
    ``EXPIRE_INTERVAL_S``. ``write(tp, completion)`` appends one marker to the partition's
    leader (raising a :class:`KafkaApiError` to retry it after ``RETRY_BACKOFF_S``; a partition
    that no longer exists, UNKNOWN_TOPIC_OR_PARTITION, is skipped as Kafka skips it); after each
    marker it calls :meth:`TransactionCoordinator.marker_written`. Pending completions are
    bounded by the transactional ids (one each at a time).

    Test hook: with the environment variable ``KAFKALOG_TEST_HOLD_TXN_MARKERS=1`` the writer
    writes nothing and expires nothing (completions stay queued): the state of a server killed
    after EndTxn is answered and before its markers, for tests that then SIGKILL it."""

    def __init__(self, coordinator: TransactionCoordinator, write: MarkerWrite) -> None:
        super().__init__(name="transaction-marker-writer", daemon=True)
        self._coordinator = coordinator
        self._write = write
        self._pending: deque[TxnCompletion] = deque()
        self._wake = threading.Condition()
        self._stopping = False
        self._hold = os.environ.get(HOLD_MARKERS_ENV) == "1"
        if self._hold:
            log.warning("%s=1: transaction markers are held (a test hook)", HOLD_MARKERS_ENV)

    def submit(self, completion: TxnCompletion) -> None:
        with self._wake:
            self._pending.append(completion)
            self._wake.notify()

    def stop(self, timeout: float = 5.0) -> None:
        with self._wake:
            self._stopping = True
            self._wake.notify()
        if self.is_alive():
            self.join(timeout)

    def run(self) -> None:
        next_expiry = time.monotonic() + EXPIRE_INTERVAL_S
        while True:
            with self._wake:
                if self._hold and not self._stopping:
                    self._wake.wait(EXPIRE_INTERVAL_S)
                elif not self._pending and not self._stopping:
                    self._wake.wait(max(0.0, next_expiry - time.monotonic()))
                if self._stopping:
                    return
                if self._hold:
                    continue
                work = list(self._pending)
                self._pending.clear()
            if time.monotonic() >= next_expiry:
                work += self._coordinator.expire()
                next_expiry = time.monotonic() + EXPIRE_INTERVAL_S
            for completion in work:
                if not self._write_all(completion):
                    return

    def _write_all(self, completion: TxnCompletion) -> bool:
        """Write every marker of ``completion``, then complete it (persisting the completed
        state), retrying each step; False when stopped first."""
        kind = "COMMIT" if completion.commit else "ABORT"
        tid = completion.transactional_id
        for tp in completion.partitions:

            def write(tp: TopicPartition = tp) -> None:
                try:
                    self._write(tp, completion)
                except UnknownTopicOrPartitionError:  # deleted: Kafka skips it
                    return
                self._coordinator.marker_written(tp, completion)

            done = self._retry(
                write, f"writing the {kind} marker of transactional id {tid!r} to {tp}"
            )
            if done is not True:
                return done is None
        done = self._retry(
            lambda: self._coordinator.complete(completion),
            f"completing the transaction of {tid!r} ({kind})",
        )
        return done is not False

    def _retry(self, action: Callable[[], None], what: str) -> bool | None:
        """Run ``action`` until it succeeds (True), retrying after ``RETRY_BACKOFF_S`` (an
        error logged once, with its traceback when unexpected); False when stopped first,
        None when a broker is closed (the step is dropped, as the process is ending)."""
        logged = False
        while True:
            try:
                action()
                return True
            except BrokerClosedError:
                log.warning("%s: the broker is closed; dropped", what)
                return None
            except Exception as e:
                if not logged:
                    log.warning(
                        "%s: %s; retrying", what, e, exc_info=not isinstance(e, KafkaApiError)
                    )
                    logged = True
                with self._wake:
                    if self._stopping or self._wake.wait_for(
                        lambda: self._stopping, RETRY_BACKOFF_S
                    ):
                        return False
