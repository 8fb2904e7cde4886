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

Not persisted yet: a transaction still open when the process ends is aborted by the leader when
the log dir opens again (:meth:`Broker.abort_orphaned_transactions`, through
:meth:`open_producer_ids`), so a read_committed reader is never stuck behind one.

Limits: ``transaction.max.timeout.ms`` (Kafka's default 900,000) bounds a timeout;
INVALID_TRANSACTION_TIMEOUT outside (0, it]. Thread safety: every method takes :attr:`lock`;
:attr:`changed` is notified on every completion.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from broker_embedded.errors import (
    BrokerClosedError,
    ConcurrentTransactionsError,
    InvalidProducerIdMappingError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    KafkaApiError,
    ProducerFencedError,
    UnknownTopicOrPartitionError,
)
from broker_embedded.storage.topic_partition import TopicPartition

log = logging.getLogger(__name__)

COORDINATOR_EPOCH = 0
MAX_EPOCH = 32767 - 1  # Kafka bumps to a new producer id before the epoch reaches Short.MAX
DEFAULT_TIMEOUT_MS = 60_000  # the producer's transaction.timeout.ms
MAX_TIMEOUT_MS = 900_000  # transaction.max.timeout.ms
EXPIRE_INTERVAL_S = 1.0
RETRY_BACKOFF_S = 0.1


class TxnStatus(enum.Enum):
    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"


_PREPARING = (TxnStatus.PREPARE_COMMIT, TxnStatus.PREPARE_ABORT)


@dataclass
class TxnState:
    """One transactional id (mutable, under the coordinator's lock)."""

    producer_id: int
    producer_epoch: int
    timeout_ms: int = DEFAULT_TIMEOUT_MS
    status: TxnStatus = TxnStatus.EMPTY
    partitions: list[TopicPartition] = field(default_factory=list)
    start_ms: int = -1
    groups: list[str] = field(default_factory=list)  # AddOffsetsToTxn


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


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


class TransactionCoordinator:
    """See the module docstring. ``new_producer_id()`` hands out producer ids (the
    controller's counter)."""

    def __init__(
        self,
        new_producer_id: Callable[[], int],
        clock_ms: Callable[[], int] = _wall_ms,
        max_timeout_ms: int = MAX_TIMEOUT_MS,
    ) -> None:
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.txns: dict[str, TxnState] = {}
        self.new_producer_id = new_producer_id  # rebound when a new controller takes over
        # called (outside the lock) with each completion once its markers are written: the
        # group coordinator makes the transaction's offset commits visible or drops them
        self.listeners: list[Callable[[TxnCompletion], None]] = []
        self._clock = clock_ms
        self._max_timeout_ms = max_timeout_ms

    def open_producer_ids(self) -> set[int]:
        """Producer ids with a transaction open in this coordinator."""
        with self.lock:
            return {s.producer_id for s in self.txns.values() if s.partitions}

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
        with self.lock:
            state = self.txns.get(transactional_id)
            if state is None:
                if expected is not None and expected != (-1, -1):
                    raise InvalidProducerIdMappingError(
                        f"transactional id {transactional_id!r} has no producer "
                        f"(the request names producer {expected[0]} epoch {expected[1]})"
                    )
                state = TxnState(self.new_producer_id(), 0, timeout_ms)
                self.txns[transactional_id] = state
                return state.producer_id, state.producer_epoch
            if expected is not None and expected != (-1, -1):
                if expected != (state.producer_id, state.producer_epoch):
                    raise self._fenced(transactional_id, state, *expected)
            self._check_not_preparing(transactional_id, state)
            if state.status is TxnStatus.ONGOING:
                return self._abort(transactional_id, state, bump=True)
            self._bump(state)
            state.timeout_ms = timeout_ms
            state.status, state.partitions, state.start_ms, state.groups = (
                TxnStatus.EMPTY, [], -1, []
            )  # fmt: skip
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
            if state.status is not TxnStatus.ONGOING:
                state.status, state.partitions, state.start_ms, state.groups = (
                    TxnStatus.ONGOING, [], self._clock(), []
                )  # fmt: skip
            for tp in partitions:
                if tp not in state.partitions:
                    state.partitions.append(tp)

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
        self.add_partitions(transactional_id, producer_id, producer_epoch,
                            [] if offsets_partition is None else [offsets_partition])  # fmt: skip
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
                state.status = TxnStatus.PREPARE_COMMIT
                return self._completion(transactional_id, state, True)
            return self._abort(transactional_id, state, bump=False)

    def check_producer(self, transactional_id: str, producer_id: int, producer_epoch: int) -> None:
        """TxnOffsetCommit's check: the id's current producer and epoch, else
        INVALID_PRODUCER_ID_MAPPING or PRODUCER_FENCED."""
        with self.lock:
            self._current(transactional_id, producer_id, producer_epoch)

    def complete(self, completion: TxnCompletion) -> None:
        """The markers of ``completion`` are written: the transaction is complete."""
        with self.lock:
            state = self.txns.get(completion.transactional_id)
            if state is None or state.status not in _PREPARING:
                return
            state.status = (
                TxnStatus.COMPLETE_COMMIT if completion.commit else TxnStatus.COMPLETE_ABORT
            )
            state.partitions, state.start_ms, state.groups = [], -1, []
            self.changed.notify_all()
        for listener in self.listeners:
            listener(completion)

    def expire(self) -> list[TxnCompletion]:
        """Abort (epoch bumped: the producer is fenced) every ONGOING transaction older than
        its timeout; the completions to write."""
        now = self._clock()
        with self.lock:
            return [
                self._abort(tid, s, bump=True)
                for tid, s in self.txns.items()
                if s.status is TxnStatus.ONGOING and now - s.start_ms > s.timeout_ms
            ]

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
            return None if s is None else dataclasses.replace(s, partitions=list(s.partitions))

    # -- helpers (under the lock) ------------------------------------------------------------------

    def _current(self, transactional_id: str, producer_id: int, producer_epoch: int) -> TxnState:
        state = self.txns.get(transactional_id)
        if state is None or state.producer_id != producer_id:
            holder = "no producer" if state is None else f"producer {state.producer_id}"
            raise InvalidProducerIdMappingError(
                f"transactional id {transactional_id!r} has {holder}, not producer {producer_id}"
            )
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
    def _check_not_preparing(transactional_id: str, state: TxnState) -> None:
        if state.status in _PREPARING:
            raise ConcurrentTransactionsError(
                f"transactional id {transactional_id!r}: its transaction is completing "
                f"({state.status.value}); retry"
            )

    def _bump(self, state: TxnState) -> None:
        if state.producer_epoch >= MAX_EPOCH:
            state.producer_id, state.producer_epoch = self.new_producer_id(), 0
        else:
            state.producer_epoch += 1

    def _abort(self, transactional_id: str, state: TxnState, *, bump: bool) -> TxnCompletion:
        if bump:  # fence the instance that opened it: its markers carry the new epoch
            state.producer_epoch += 1
        state.status = TxnStatus.PREPARE_ABORT
        return self._completion(transactional_id, state, False)

    @staticmethod
    def _completion(transactional_id: str, state: TxnState, commit: bool) -> TxnCompletion:
        return TxnCompletion(transactional_id, state.producer_id, state.producer_epoch, commit,
                             tuple(state.partitions), tuple(state.groups))  # fmt: skip


MarkerWrite = Callable[[TopicPartition, TxnCompletion], None]


class TransactionMarkerWriter(threading.Thread):
    """Writes the markers of submitted completions in the background (Kafka's
    ``TransactionMarkerChannelManager``) and aborts expired transactions every
    ``EXPIRE_INTERVAL_S``. ``write(tp, completion)`` appends one marker to the partition's
    leader (raising a :class:`KafkaApiError` to retry it after ``RETRY_BACKOFF_S``; a partition
    that no longer exists, UNKNOWN_TOPIC_OR_PARTITION, is skipped as Kafka skips it). Pending
    completions are bounded by the transactional ids (one each at a time)."""

    def __init__(self, coordinator: TransactionCoordinator, write: MarkerWrite) -> None:
        super().__init__(name="transaction-marker-writer", daemon=True)
        self._coordinator = coordinator
        self._write = write
        self._pending: deque[TxnCompletion] = deque()
        self._wake = threading.Condition()
        self._stopping = False

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
                if not self._pending and not self._stopping:
                    self._wake.wait(max(0.0, next_expiry - time.monotonic()))
                if self._stopping:
                    return
                work = list(self._pending)
                self._pending.clear()
            if time.monotonic() >= next_expiry:
                work += self._coordinator.expire()
                next_expiry = time.monotonic() + EXPIRE_INTERVAL_S
            for completion in work:
                if not self._write_all(completion):
                    return

    def _write_all(self, completion: TxnCompletion) -> bool:
        """Write every marker of ``completion`` (retrying each; an unexpected error is logged
        with its traceback once per marker and retried too), then complete it; False when
        stopped first."""
        for tp in completion.partitions:
            logged = False
            while True:
                try:
                    self._write(tp, completion)
                    break
                except UnknownTopicOrPartitionError:
                    break
                except BrokerClosedError:
                    log.warning("dropping the markers of transactional id %r: the broker of %s "
                                "is closed", completion.transactional_id, tp)  # fmt: skip
                    return True
                except Exception as e:
                    if not logged:
                        log.warning("writing the %s marker of transactional id %r to %s: %s; "
                                    "retrying", "COMMIT" if completion.commit else "ABORT",
                                    completion.transactional_id, tp, e,
                                    exc_info=not isinstance(e, KafkaApiError))  # fmt: skip
                        logged = True
                    with self._wake:
                        if self._stopping or self._wake.wait_for(
                            lambda: self._stopping, RETRY_BACKOFF_S
                        ):
                            return False
        self._coordinator.complete(completion)
        return True
