"""Idempotent and transactional producer state of one partition (Kafka's ``ProducerStateManager``).

Per producer id the partition keeps a :class:`ProducerStateEntry`: the current epoch, the
metadata of its last 5 batches (:class:`BatchMetadata`: first/last sequence, first/last offset,
max timestamp), the last coordinator epoch, the last timestamp and the first offset of its
ongoing transaction, if any.

Appends (from clients, origin ``CLIENT``) are checked as Kafka checks them:

- A retried batch (same epoch, same first and last sequence as one of the 5 cached batches) is
  a :class:`DuplicateSequence`: not an error, the caller answers with the original offsets and
  appends nothing.
- A producer epoch below the current one is INVALID_PRODUCER_EPOCH (47)
  (:class:`InvalidProducerEpochError`; Kafka 2.7+ answers this instead of PRODUCER_FENCED).
- A new epoch must start at sequence 0, the same epoch must continue at last sequence + 1
  (after ``2**31 - 1`` comes 0), else OUT_OF_ORDER_SEQUENCE_NUMBER (45)
  (:class:`OutOfOrderSequenceError`). A producer the partition knows no epoch for may start
  at any sequence (its state may have been removed by retention).
- A non-transactional batch from a producer with an ongoing transaction is INVALID_TXN_STATE (48).
- A transaction marker (COMMIT/ABORT control batch, origin ``COORDINATOR``) from an older
  coordinator epoch is TRANSACTION_COORDINATOR_FENCED (52).

Replicated and recovered batches (origin ``REPLICATION``) skip the sequence checks, and stale
epochs are only logged, as in Kafka.

Appending is two steps, because the checks must pass for all batches before any is written:
:meth:`ProducerStateManager.analyze` validates the batches (offsets already assigned) and
returns a :class:`ProducerStateUpdate` without changing anything; after writing the batches
to the log, :meth:`ProducerStateManager.apply` commits it and returns the transactions the
markers completed (:class:`CompletedTxn`, with the LSO to store for an aborted one in the
``.txnindex``). The last stable offset is ``min(first offset of every ongoing transaction and of
every completed one whose marker is not yet below the HW, HW)``.

Snapshots (``<offset>.snapshot``, the state after the log up to ``offset - 1``, as Kafka
writes it): snapshot_file.py. A snapshot keeps only the last batch per producer. The entries:
producer_state_entry.py.

Thread safety: none inside. The partition log calls every method under its own lock, and holds
it from ``analyze`` through ``apply`` (an update prepared against an older state is refused with
:class:`ProducerStateError`). The module functions and the values are immutable / stateless.
"""

from __future__ import annotations

import enum
import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType

from broker_embedded.errors import (
    CorruptSnapshotError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    ProducerStateError,
    TransactionCoordinatorFencedError,
)
from broker_embedded.record.control_record import ControlRecordType, EndTransactionMarker
from broker_embedded.record.record_batch import RecordBatch
from broker_embedded.storage.producer_state_entry import (
    NO_PRODUCER_EPOCH,
    BatchMetadata,
    ProducerStateEntry,
    in_sequence,
)
from broker_embedded.storage.snapshot_file import (
    SNAPSHOT_NAME,
    ProducerSnapshotEntry,
    list_snapshots,
    read_snapshot,
    snapshot_file_name,
    write_snapshot,
)
from broker_embedded.storage.transaction_index import AbortedTxn

log = logging.getLogger(__name__)

NO_PRODUCER_ID = -1
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000


class AppendOrigin(enum.Enum):
    """Who appends: a producer, the transaction coordinator (markers), or replication/recovery."""

    CLIENT = "client"
    COORDINATOR = "coordinator"
    REPLICATION = "replication"


# -- values ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BatchInfo:
    """The fields of a record batch the producer state needs (see :meth:`of`)."""

    base_offset: int
    last_offset: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    last_sequence: int
    max_timestamp: int
    is_transactional: bool = False
    is_control: bool = False
    control_type: int | None = None
    coordinator_epoch: int = -1

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0

    @classmethod
    def of(cls, batch: RecordBatch | BatchInfo) -> BatchInfo:
        """From a :class:`RecordBatch` (reading the control record of a control batch)."""
        if isinstance(batch, BatchInfo):
            return batch
        control_type, coordinator_epoch = None, -1
        if batch.is_control:
            control_type, coordinator_epoch = _read_control_record(batch)
        return cls(
            base_offset=batch.base_offset,
            last_offset=batch.last_offset,
            producer_id=batch.producer_id,
            producer_epoch=batch.producer_epoch,
            base_sequence=batch.base_sequence,
            last_sequence=batch.last_sequence,
            max_timestamp=batch.max_timestamp,
            is_transactional=batch.is_transactional,
            is_control=batch.is_control,
            control_type=control_type,
            coordinator_epoch=coordinator_epoch,
        )


@dataclass(frozen=True, slots=True)
class DuplicateSequence:
    """A retried batch already in the log: answer with the original batch's offsets."""

    producer_id: int
    producer_epoch: int
    batch: BatchMetadata

    @property
    def first_offset(self) -> int:
        return self.batch.first_offset

    @property
    def last_offset(self) -> int:
        return self.batch.last_offset

    @property
    def timestamp(self) -> int:
        return self.batch.timestamp


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction a COMMIT or ABORT marker ended: its data spans ``first_offset`` to the
    marker at ``last_offset``; ``last_stable_offset`` is the partition's LSO right after."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool
    last_stable_offset: int

    def aborted_txn(self) -> AbortedTxn:
        """The ``.txnindex`` entry for an aborted transaction."""
        if not self.is_aborted:
            raise ValueError(f"{self} was committed: only aborted transactions are indexed")
        return AbortedTxn(
            self.producer_id, self.first_offset, self.last_offset, self.last_stable_offset
        )


@dataclass(frozen=True, slots=True)
class _EndedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


@dataclass(frozen=True, slots=True)
class ProducerStateUpdate:
    """The validated effect of appending some batches: the producers' new entries, the
    transactions started and ended, and the offset after the last batch. Apply it with
    :meth:`ProducerStateManager.apply` after the batches are in the log, unless
    ``duplicate`` is set (then nothing is appended)."""

    duplicate: DuplicateSequence | None = None
    entries: Mapping[int, ProducerStateEntry] = field(default_factory=dict)
    started_txns: tuple[tuple[int, int], ...] = ()
    ended_txns: tuple[_EndedTxn, ...] = ()
    next_offset: int | None = None
    state_version: int = 0


# -- snapshot files --------------------------------------------------------------------------------


# -- the manager -----------------------------------------------------------------------------------


class ProducerStateManager:
    """Producer state of one partition; see the module docstring.

    ``log_dir`` is the partition directory holding the ``.snapshot`` files (``None``: no
    snapshots). ``topic_partition`` names the partition in error messages.
    """

    def __init__(
        self,
        topic_partition: object,
        log_dir: str | os.PathLike[str] | None = None,
        *,
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    ) -> None:
        self.topic_partition = topic_partition
        self.log_dir = Path(log_dir) if log_dir is not None else None
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self._producers: dict[int, ProducerStateEntry] = {}
        self._ongoing: dict[int, int] = {}  # first offset -> producer id
        self._unreplicated: dict[int, tuple[int, int]] = {}  # first offset -> (pid, last offset)
        self._map_end_offset = 0
        self._last_snap_offset = 0
        self._version = 0

    # -- state ---------------------------------------------------------------------------------

    @property
    def map_end_offset(self) -> int:
        """The offset after the last batch this state reflects (where a replay continues)."""
        return self._map_end_offset

    @property
    def producers(self) -> Mapping[int, ProducerStateEntry]:
        return MappingProxyType(dict(self._producers))

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self._producers.get(producer_id)

    def ongoing_transactions(self) -> dict[int, int]:
        """Producer id -> first offset of its ongoing transaction, by first offset."""
        return {self._ongoing[f]: f for f in sorted(self._ongoing)}

    def first_unstable_offset(self, high_watermark: int | None = None) -> int | None:
        """The first offset of an ongoing transaction or of a completed one whose marker is not
        below ``high_watermark`` (all completed ones not yet dropped, when ``None``)."""
        firsts = list(self._ongoing)
        firsts += [
            first
            for first, (_, last) in self._unreplicated.items()
            if high_watermark is None or last >= high_watermark
        ]
        return min(firsts, default=None)

    def last_stable_offset(self, high_watermark: int) -> int:
        """The LSO: the first unstable offset, capped by the high watermark."""
        first = self.first_unstable_offset(high_watermark)
        return high_watermark if first is None else min(first, high_watermark)

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        """Forget completed transactions whose marker is below the HW."""
        if not self._unreplicated:
            return
        self._unreplicated = {
            first: v for first, v in self._unreplicated.items() if v[1] >= high_watermark
        }

    # -- appends -------------------------------------------------------------------------------

    def analyze(
        self,
        batches: Iterable[RecordBatch | BatchInfo],
        origin: AppendOrigin = AppendOrigin.CLIENT,
        *,
        next_offset: int | None = None,
    ) -> ProducerStateUpdate:
        """Validate ``batches`` (offsets assigned, in log order) without changing the state.
        ``next_offset``: the offset after the append, when ``batches`` leaves out its batches
        without a producer id (the log's fast path passes only those that have one); by
        default the offset after the last of ``batches``."""
        staged: dict[int, _StagedProducer] = {}
        started: list[tuple[int, int]] = []
        ended: list[_EndedTxn] = []
        after = None
        for raw in batches:
            batch = BatchInfo.of(raw)
            after = batch.last_offset + 1
            if not batch.has_producer_id:
                continue
            if origin is AppendOrigin.CLIENT:
                duplicate = self._find_duplicate(batch)
                if duplicate is not None:
                    return ProducerStateUpdate(duplicate=duplicate, state_version=self._version)
            producer = staged.get(batch.producer_id)
            if producer is None:
                current = self._producers.get(batch.producer_id)
                producer = _StagedProducer(self.topic_partition, batch.producer_id, current, origin)
                staged[batch.producer_id] = producer
            producer.append(batch, started, ended)
        return ProducerStateUpdate(
            entries=MappingProxyType({pid: p.updated for pid, p in staged.items()}),
            started_txns=tuple(started),
            ended_txns=tuple(ended),
            next_offset=after if next_offset is None else next_offset,
            state_version=self._version,
        )

    def apply(self, update: ProducerStateUpdate) -> list[CompletedTxn]:
        """Commit an update from :meth:`analyze` once its batches are in the log; return the
        transactions it completed (append the aborted ones to the segment's ``.txnindex``)."""
        if update.duplicate is not None:
            raise ProducerStateError(
                f"partition {self.topic_partition}: a duplicate batch of producer "
                f"{update.duplicate.producer_id} is not appended and cannot be applied"
            )
        if update.state_version != self._version:
            raise ProducerStateError(
                f"partition {self.topic_partition}: the producer state changed since this "
                "update was analyzed; analyze and apply under the same log lock"
            )
        self._producers.update(update.entries)
        for producer_id, first_offset in update.started_txns:
            self._ongoing[first_offset] = producer_id
        completed = [self._complete_txn(txn) for txn in update.ended_txns]
        if update.next_offset is not None:
            self._map_end_offset = update.next_offset
        self._version += 1
        return completed

    def append(
        self,
        batches: Iterable[RecordBatch | BatchInfo],
        origin: AppendOrigin = AppendOrigin.CLIENT,
    ) -> list[CompletedTxn]:
        """:meth:`analyze` then :meth:`apply`, for batches already in the log (not duplicates:
        a duplicate raises :class:`ProducerStateError`)."""
        return self.apply(self.analyze(batches, origin))

    def replay(self, batches: Iterable[RecordBatch | BatchInfo]) -> list[CompletedTxn]:
        """Rebuild state from the log (recovery): apply each batch as replicated data, skipping
        batches that end below :attr:`map_end_offset`; return the transactions completed."""
        completed: list[CompletedTxn] = []
        for raw in batches:
            batch = BatchInfo.of(raw)
            if batch.last_offset >= self._map_end_offset:
                completed += self.append([batch], AppendOrigin.REPLICATION)
        return completed

    def update_map_end_offset(self, offset: int) -> None:
        self._map_end_offset = offset
        self._version += 1

    def remove_expired_producers(self, now_ms: int) -> list[int]:
        """Drop producers without an ongoing transaction whose last timestamp is at least
        ``producer_id_expiration_ms`` old; return their ids."""
        expired = [pid for pid, e in self._producers.items() if self._is_expired(e, now_ms)]
        for pid in expired:
            del self._producers[pid]
        if expired:
            self._version += 1
        return expired

    # -- snapshots and truncation --------------------------------------------------------------

    def snapshot_entries(self) -> list[ProducerSnapshotEntry]:
        return [ProducerSnapshotEntry.of(e) for e in self._producers.values()]

    def take_snapshot(self, *, sync: bool = True) -> Path | None:
        """Write ``<map_end_offset>.snapshot`` into ``log_dir`` unless the state has not moved
        past the last snapshot; return its path."""
        directory = self._require_log_dir()
        if self._map_end_offset <= self._last_snap_offset:
            return None
        path = directory / snapshot_file_name(self._map_end_offset)
        write_snapshot(path, self.snapshot_entries(), sync=sync)
        self._last_snap_offset = self._map_end_offset
        return path

    def snapshot_files(self) -> list[tuple[int, Path]]:
        return list_snapshots(self._require_log_dir()) if self.log_dir is not None else []

    def load_snapshot(self, path: str | os.PathLike[str], *, now_ms: int | None = None) -> None:
        """Replace the state with a snapshot's (dropping producers expired at ``now_ms``); the
        map end offset becomes the file's offset. :class:`CorruptSnapshotError` if unreadable."""
        entries = read_snapshot(path)
        match = SNAPSHOT_NAME.fullmatch(Path(path).name)
        if match is None:
            raise CorruptSnapshotError(f"producer snapshot {path} is not named <offset>.snapshot")
        self._clear(int(match.group(1)))
        for snap in entries:
            entry = snap.to_state()
            if now_ms is not None and self._is_expired(entry, now_ms):
                continue
            self._producers[entry.producer_id] = entry
            if entry.current_txn_first_offset is not None:
                self._ongoing[entry.current_txn_first_offset] = entry.producer_id
        self._last_snap_offset = self._map_end_offset

    def truncate_and_reload(
        self, log_start_offset: int, log_end_offset: int, *, now_ms: int | None = None
    ) -> None:
        """After the log was truncated or recovered to ``[log_start_offset, log_end_offset)``:
        delete snapshots outside ``(log_start_offset, log_end_offset]`` and, unless the state
        already ends at ``log_end_offset``, reload the latest readable snapshot (corrupt ones are
        deleted) or start empty at ``log_start_offset``. Then :meth:`replay` from
        :attr:`map_end_offset`."""
        for offset, path in self.snapshot_files():
            if offset > log_end_offset or offset <= log_start_offset:
                path.unlink(missing_ok=True)
        if log_end_offset == self._map_end_offset:
            self._unreplicated = {
                f: v for f, v in self._unreplicated.items() if v[1] >= log_start_offset
            }
            self._map_end_offset = max(self._map_end_offset, log_start_offset)
            self._version += 1
            return
        self._clear(log_start_offset)
        self._last_snap_offset = log_start_offset
        for _, path in reversed(self.snapshot_files()):
            try:
                self.load_snapshot(path, now_ms=now_ms)
                return
            except CorruptSnapshotError as e:
                log.warning("partition %s: deleting unreadable %s", self.topic_partition, e)
                path.unlink(missing_ok=True)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Forget everything (and delete every snapshot): the log restarts at ``offset``."""
        for _, path in self.snapshot_files():
            path.unlink(missing_ok=True)
        self._clear(offset)
        self._last_snap_offset = offset

    # -- helpers -------------------------------------------------------------------------------

    def _find_duplicate(self, batch: BatchInfo) -> DuplicateSequence | None:
        entry = self._producers.get(batch.producer_id)
        if entry is None:
            return None
        found = entry.find_duplicate(batch.producer_epoch, batch.base_sequence, batch.last_sequence)
        if found is None:
            return None
        return DuplicateSequence(batch.producer_id, batch.producer_epoch, found)

    def _complete_txn(self, txn: _EndedTxn) -> CompletedTxn:
        # The LSO right after the marker: the next other producer's ongoing transaction, if any.
        others = [f for f, pid in self._ongoing.items() if pid != txn.producer_id]
        lso = min(others, default=txn.last_offset + 1)
        if self._ongoing.pop(txn.first_offset, None) is None:
            raise ProducerStateError(
                f"partition {self.topic_partition}: producer {txn.producer_id} completed a "
                f"transaction at offset {txn.first_offset} that was never started"
            )
        self._unreplicated[txn.first_offset] = (txn.producer_id, txn.last_offset)
        return CompletedTxn(txn.producer_id, txn.first_offset, txn.last_offset, txn.is_aborted, lso)

    def _is_expired(self, entry: ProducerStateEntry, now_ms: int) -> bool:
        return (
            entry.current_txn_first_offset is None
            and now_ms - entry.last_timestamp >= self.producer_id_expiration_ms
        )

    def _clear(self, map_end_offset: int) -> None:
        self._producers.clear()
        self._ongoing.clear()
        self._unreplicated.clear()
        self._map_end_offset = map_end_offset
        self._version += 1

    def _require_log_dir(self) -> Path:
        if self.log_dir is None:
            raise ProducerStateError(
                f"partition {self.topic_partition}: this producer state has no log dir"
            )
        return self.log_dir


class _StagedProducer:
    """One producer's entry while a set of batches is analyzed (Kafka's ``ProducerAppendInfo``):
    ``current`` is the committed entry, ``updated`` the entry after the batches so far."""

    def __init__(
        self,
        topic_partition: object,
        producer_id: int,
        current: ProducerStateEntry | None,
        origin: AppendOrigin,
    ) -> None:
        self.topic_partition = topic_partition
        self.producer_id = producer_id
        self.current = current or ProducerStateEntry(producer_id)
        self.updated = self.current
        self.origin = origin

    def append(self, batch: BatchInfo, started: list, ended: list) -> None:
        if batch.is_control:
            if batch.control_type in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
                self._append_marker(batch, ended)
        else:
            self._append_data(batch, started)

    def _where(self, offset: int) -> str:
        return f"producer {self.producer_id} at offset {offset} in partition {self.topic_partition}"

    def _check_epoch(self, epoch: int, offset: int) -> None:
        if epoch >= self.updated.producer_epoch:
            return
        message = (
            f"epoch of {self._where(offset)} is {epoch}, which is smaller than the last seen "
            f"epoch {self.updated.producer_epoch}"
        )
        if self.origin is AppendOrigin.REPLICATION:
            log.warning(message)
            return
        raise InvalidProducerEpochError(message)

    def _check_sequence(self, epoch: int, first_seq: int, offset: int) -> None:
        if epoch != self.updated.producer_epoch:
            if first_seq != 0 and self.updated.producer_epoch != NO_PRODUCER_EPOCH:
                raise OutOfOrderSequenceError(
                    f"invalid sequence number for new epoch of {self._where(offset)}: epoch "
                    f"{epoch} (request), sequence {first_seq} (must be 0 for a new epoch), "
                    f"current epoch {self.updated.producer_epoch}"
                )
            return
        last_seq = self.updated.last_seq
        if self.current.producer_epoch == NO_PRODUCER_EPOCH or in_sequence(last_seq, first_seq):
            return
        raise OutOfOrderSequenceError(
            f"out of order sequence number for {self._where(offset)} (epoch {epoch}): "
            f"{first_seq} (incoming sequence), {last_seq} (current end sequence)"
        )

    def _append_data(self, batch: BatchInfo, started: list) -> None:
        first = batch.base_offset
        self._check_epoch(batch.producer_epoch, first)
        if self.origin is AppendOrigin.CLIENT:
            self._check_sequence(batch.producer_epoch, batch.base_sequence, first)
        meta = BatchMetadata(
            batch.last_sequence, batch.last_offset, batch.last_offset - first, batch.max_timestamp
        )
        entry = self.updated.with_batch(batch.producer_epoch, meta)
        if entry.current_txn_first_offset is not None and not batch.is_transactional:
            raise InvalidTxnStateError(
                f"expected a transactional write from {self._where(first)}: its transaction "
                f"from offset {entry.current_txn_first_offset} is still ongoing"
            )
        if entry.current_txn_first_offset is None and batch.is_transactional:
            entry = replace(entry, current_txn_first_offset=first)
            started.append((self.producer_id, first))
        self.updated = entry

    def _append_marker(self, batch: BatchInfo, ended: list) -> None:
        offset = batch.base_offset
        self._check_epoch(batch.producer_epoch, offset)
        if self.updated.coordinator_epoch > batch.coordinator_epoch:
            message = (
                f"invalid coordinator epoch for {self._where(offset)}: "
                f"{batch.coordinator_epoch} (zombie), {self.updated.coordinator_epoch} (current)"
            )
            if self.origin is not AppendOrigin.REPLICATION:
                raise TransactionCoordinatorFencedError(message)
            log.info(message)
        first = self.updated.current_txn_first_offset
        if first is not None:  # a marker of an empty transaction completes nothing
            aborted = batch.control_type == ControlRecordType.ABORT
            ended.append(_EndedTxn(self.producer_id, first, offset, aborted))
        self.updated = replace(
            self.updated.with_epoch(batch.producer_epoch),
            current_txn_first_offset=None,
            coordinator_epoch=batch.coordinator_epoch,
            last_timestamp=batch.max_timestamp,
        )


def _read_control_record(batch: RecordBatch) -> tuple[int | None, int]:
    """(control type, coordinator epoch) of a control batch's record; ``(None, -1)`` when the
    batch is empty (its transaction was cleaned away) or the record is not an END_TXN marker."""
    record = next(iter(batch.records()), None)
    if record is None:
        return None, -1
    where = {"source": batch.source, "position": batch.position, "base_offset": batch.base_offset}
    control_type = ControlRecordType.parse_key(record.key, **where)
    if control_type not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
        return None, -1
    marker = EndTransactionMarker.parse(record.key, record.value, **where)
    return marker.type, marker.coordinator_epoch
