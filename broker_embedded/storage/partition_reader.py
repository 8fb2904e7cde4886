"""A read-only view of one partition directory: its segments, offsets and fetch reads.

Files read in ``<log dir>/<topic>-<partition>/``: ``<20 digits>.log`` segments with their
indexes (log_segment.py), ``<20 digits>.txnindex`` aborted-transaction indexes
(transaction_index.py), ``<20 digits>.snapshot`` producer state snapshots
(producer_state_manager.py), ``leader-epoch-checkpoint`` and ``partition.metadata`` when present.
Transient files (``.cleaned``, ``.swap``, ``.deleted``) are ignored: a directory caught in the
middle of a cleaner swap needs a writer's recovery first. Nothing is ever written, renamed or
deleted, and no lock is taken: the view is for processes that do not own the log dir.

Offsets (Kafka's ``UnifiedLog`` rules, given the log dir's checkpoint values):

- ``log_end_offset``: the offset after the last batch of the last segment (its base offset when
  it holds none);
- ``log_start_offset``: ``max(log-start-offset-checkpoint value, first segment's base offset)``,
  the first segment's base offset without a checkpoint entry;
- ``high_watermark``: the replication-offset-checkpoint value clamped to
  ``[log_start_offset, log_end_offset]``. Without an entry (no broker ever checkpointed this
  partition, e.g. ``__cluster_metadata-0``, whose high watermark lives in the KRaft layer, or a
  log dir written without a broker) it falls back to the log end offset: everything on disk is
  treated as committed;
- ``last_stable_offset`` (LSO): ``min(first offset of every transaction still open as of the
  high watermark, high watermark)``, and not below the log start offset. A transaction is open as
  of the HW when its COMMIT/ABORT marker is missing or at or above the HW. Computed on first use
  and cached (the view is a snapshot): the producer state is loaded from the latest readable
  ``<offset>.snapshot`` with ``log_start_offset <= offset <= high_watermark`` (a corrupt one is
  skipped, left in place, and the next older one tried; without one the state starts empty at the
  log start offset), then the batches from the snapshot's offset whose base offset is below the
  HW are replayed into it (with the HW on a batch boundary, as a broker keeps it, those are the
  batches ending below it). Only transactional batches are replayed: the walk reads batch headers
  with the compiled header scan of ``decode_kernel.scan_entries`` (no Python object per batch;
  windows of ``_SCAN_WINDOW_BYTES`` of batches, so its memory is bounded) and builds a batch view,
  decoding the one record of a control batch, for transactional batches only. Cost: one header
  read per batch between the snapshot and the HW (Kafka, and unified_log.py, snapshot at every
  roll, so normally the active segment only; the whole log when the directory holds no usable
  snapshot), tens of nanoseconds a batch when the pages are cached; a log without transactions
  pays that scan and nothing else. A transaction open across a log start offset moved by
  retention is known only from a snapshot, as in Kafka.

``read`` is Kafka's ``LocalLog.read``: the slice of the first segment, from the one holding
``fetch_offset`` on, that has a batch ending at or after it, bounded above by the position of the
batch holding ``max_offset`` (default the high watermark). ``fetch`` is the read a Fetch request
makes (fetch_data_info.py): bounded by the log end offset, the HW or the LSO depending on the
:class:`FetchIsolation`, the bytes copied out of the mapping, and for ``TXN_COMMITTED`` the aborted
transactions overlapping the read, from the ``.txnindex`` files (``aborted_transactions``).

Thread safety: the segment list is fixed at open; segments are opened on first use under a lock
and are immutable afterwards; the LSO is computed once under its own lock; so any number of
threads may read.
"""

from __future__ import annotations

import bisect
import logging
import os
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from broker_embedded.errors import CorruptRecordError, CorruptSnapshotError, OffsetOutOfRangeError
from broker_embedded.record import decode_kernel as k
from broker_embedded.record.record_batch import TRANSACTIONAL_MASK, RecordBatch
from broker_embedded.record.records import MIN_ENTRY_BODY, AnyBatch
from broker_embedded.storage.fetch_data_info import FetchDataInfo, FetchIsolation
from broker_embedded.storage.leader_epoch_checkpoint import (
    LEADER_EPOCH_CHECKPOINT,
    EpochEntry,
    LeaderEpochCheckpointFile,
)
from broker_embedded.storage.log_segment import (
    FetchSlice,
    LogSegment,
    TimestampAndOffset,
    parse_segment_log_name,
    segment_file_stem,
)
from broker_embedded.storage.partition_metadata import (
    PARTITION_METADATA_FILE,
    PartitionMetadataFile,
)
from broker_embedded.storage.producer_state_manager import ProducerStateManager, list_snapshots
from broker_embedded.storage.segment_indexer import DEFAULT_INDEX_INTERVAL_BYTES
from broker_embedded.storage.topic_partition import TopicPartition
from broker_embedded.storage.transaction_index import FILE_SUFFIX as TXN_INDEX_SUFFIX
from broker_embedded.storage.transaction_index import AbortedTxn, TransactionIndex

log = logging.getLogger(__name__)

# Bytes of batches whose headers one scan call covers (a module variable so that tests can make
# windows cut batches without writing megabytes); a batch larger than it gets a wider window.
_SCAN_WINDOW_BYTES = 4 * 1024 * 1024
_MIN_BODY = np.full(max(MIN_ENTRY_BODY) + 1, -1, np.int64)
for _magic, _size in MIN_ENTRY_BODY.items():
    _MIN_BODY[_magic] = _size
_NO_ROWS = np.empty((0, k.SCAN_FIELDS), np.int64)
_SCAN_ERRORS = {
    k.SCAN_BAD_MAGIC: "unknown magic {detail}",
    k.SCAN_SHORT_ENTRY: "entry size {detail} is below the minimum for its magic",
    k.SCAN_NEGATIVE_COUNT: "negative record count {detail}",
    k.SCAN_NEGATIVE_DELTA: "negative last offset delta {detail}",
}


def segment_base_offsets(directory: str | Path) -> list[int]:
    """The sorted base offsets of the ``<20 digits>.log`` files in a partition directory."""
    return sorted(b for b in map(parse_segment_log_name, os.listdir(directory)) if b is not None)


def _readonly_bytes(buf: bytes | memoryview) -> np.ndarray:
    """``buf`` as read-only uint8 (the kernel is compiled for read-only input only)."""
    arr = np.frombuffer(buf, np.uint8)
    if arr.flags.writeable:
        arr = arr.view()
        arr.flags.writeable = False
    return arr


def _header_tables(buf: bytes | memoryview, source: str, position: int) -> Iterator[np.ndarray]:
    """Scan tables (``decode_kernel.SCAN_FIELDS`` int64 columns, one row per complete entry,
    positions relative to ``buf``) of the entries of ``buf``, one window at a time. A partial
    last entry ends the walk; a corrupt entry is a :class:`CorruptRecordError` (``position`` is
    the file position of ``buf[0]``, for the message)."""
    arr = _readonly_bytes(buf)
    pos, end = 0, len(arr)
    stop = min(end, _SCAN_WINDOW_BYTES)
    while pos < end:
        n, status, at, offset, detail = k.scan_entries(arr, pos, stop, _MIN_BODY, _NO_ROWS)
        if n == 0:
            if status in _SCAN_ERRORS:
                raise CorruptRecordError(
                    _SCAN_ERRORS[status].format(detail=int(detail)),
                    source=source,
                    position=position + int(at),
                    base_offset=int(offset),
                )
            if stop == end:
                return  # a partial entry at the end
            stop = min(end, pos + max(int(detail), 2 * (stop - pos)))  # widen for a big batch
            continue
        table = np.empty((n, k.SCAN_FIELDS), np.int64)
        k.scan_entries(arr, pos, stop, _MIN_BODY, table)
        yield table
        pos = int(at)
        stop = min(end, pos + _SCAN_WINDOW_BYTES)


def _end_of_complete_batches(records: bytes, default: int) -> int:
    """The offset after the last complete batch of a read, ``default`` when it holds none."""
    last = None
    for table in _header_tables(records, "<fetched records>", 0):
        row = table[-1]
        last = int(row[k.S_OFFSET]) + (int(row[k.S_LAST_DELTA]) if row[k.S_MAGIC] == 2 else 0)
    return default if last is None else last + 1


class PartitionReader:
    """Reads one partition directory; see the module docstring."""

    __slots__ = ("directory", "topic_partition", "index_interval_bytes", "base_offsets",
                 "log_start_offset", "log_end_offset", "high_watermark", "_segments",
                 "_lock", "_lso", "_lso_lock")  # fmt: skip

    def __init__(
        self,
        directory: str | Path,
        *,
        high_watermark: int | None = None,
        log_start_offset: int | None = None,
        index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
    ) -> None:
        self.directory = Path(directory)
        self.topic_partition = TopicPartition.parse_dir_name(self.directory.name)
        self.index_interval_bytes = index_interval_bytes
        self.base_offsets = segment_base_offsets(self.directory)
        self._segments: dict[int, LogSegment] = {}
        self._lock = threading.Lock()
        self._lso: int | None = None
        self._lso_lock = threading.Lock()
        first = self.base_offsets[0] if self.base_offsets else (log_start_offset or 0)
        self.log_start_offset = first if log_start_offset is None else max(log_start_offset, first)
        if self.base_offsets:
            self.log_end_offset = self.segment(self.base_offsets[-1]).next_offset
        else:
            self.log_end_offset = self.log_start_offset
        hw = self.log_end_offset if high_watermark is None else high_watermark
        self.high_watermark = min(max(hw, self.log_start_offset), self.log_end_offset)

    # -- segments ----------------------------------------------------------------------------------

    def segment(self, base_offset: int) -> LogSegment:
        """The segment based at ``base_offset``, opened on first use."""
        with self._lock:
            seg = self._segments.get(base_offset)
            if seg is None:
                seg = LogSegment.open(
                    self.directory, base_offset, index_interval_bytes=self.index_interval_bytes
                )
                self._segments[base_offset] = seg
            return seg

    def segments(self) -> list[LogSegment]:
        return [self.segment(b) for b in self.base_offsets]

    def _floor_slot(self, offset: int) -> int:
        """Index in ``base_offsets`` of the segment that would hold ``offset`` (at least 0)."""
        return max(bisect.bisect_right(self.base_offsets, offset) - 1, 0)

    # -- files beside the segments -----------------------------------------------------------------

    def leader_epochs(self) -> list[EpochEntry]:
        return LeaderEpochCheckpointFile(self.directory / LEADER_EPOCH_CHECKPOINT).read_or_empty()

    def topic_id(self) -> uuid.UUID | None:
        f = PartitionMetadataFile(self.directory / PARTITION_METADATA_FILE)
        return f.read().topic_id if f.exists() else None

    def txn_index_path(self, base_offset: int) -> Path:
        """The ``.txnindex`` of the segment based at ``base_offset`` (it may not exist)."""
        return self.directory / (segment_file_stem(base_offset) + TXN_INDEX_SUFFIX)

    # -- transactions ------------------------------------------------------------------------------

    @property
    def last_stable_offset(self) -> int:
        """The LSO as of the high watermark (see the module docstring); computed once."""
        with self._lso_lock:
            if self._lso is None:
                self._lso = self._compute_last_stable_offset()
            return self._lso

    def _compute_last_stable_offset(self) -> int:
        hw = self.high_watermark
        state = ProducerStateManager(self.topic_partition, self.directory)
        self._load_latest_snapshot(state)
        if state.map_end_offset < hw:
            state.replay(self._transactional_batches(state.map_end_offset, hw))
        state.on_high_watermark_updated(hw)
        return max(state.last_stable_offset(hw), self.log_start_offset)

    def _load_latest_snapshot(self, state: ProducerStateManager) -> None:
        """Load the latest readable snapshot in ``[log start, HW]``, else start empty at the log
        start offset. Never deletes anything, unlike the writer's ``truncate_and_reload``."""
        for offset, path in reversed(list_snapshots(self.directory)):
            if not self.log_start_offset <= offset <= self.high_watermark:
                continue
            try:
                state.load_snapshot(path)
                return
            except CorruptSnapshotError as e:
                log.warning("partition %s: skipping unreadable %s", self.topic_partition, e)
        state.update_map_end_offset(self.log_start_offset)

    def _transactional_batches(self, start_offset: int, end_offset: int) -> Iterator[RecordBatch]:
        """The transactional batches (data and markers) from the one holding ``start_offset``
        whose base offset is below ``end_offset``, found by a header scan."""
        for base in self.base_offsets[self._floor_slot(start_offset) :]:
            if base >= end_offset:
                return
            seg = self.segment(base)
            found = seg.read(start_offset, seg.size_in_bytes, seg.end_of_batches, True)
            if found is None:
                continue
            view = found.records
            for table in _header_tables(view, seg.source, found.position):
                # a legacy entry's offset field is its last offset; it is never transactional
                below = table[:, k.S_OFFSET] < end_offset
                txn = below & (table[:, k.S_MAGIC] == 2)
                txn &= (table[:, k.S_ATTR] & TRANSACTIONAL_MASK) != 0
                for pos, size in table[txn][:, [k.S_POS, k.S_SIZE]].tolist():
                    yield RecordBatch(view[pos : pos + size], seg.source, found.position + pos)
                if not below.all():
                    return

    def aborted_transactions(
        self, fetch_offset: int, upper_bound_offset: int
    ) -> tuple[AbortedTxn, ...]:
        """The aborted transactions overlapping ``[fetch_offset, upper_bound_offset)``, from the
        ``.txnindex`` of the segment holding ``fetch_offset`` and of later segments until one
        entry's LSO reaches ``upper_bound_offset`` (Kafka's rule). A missing file holds none."""
        found: list[AbortedTxn] = []
        for base in self.base_offsets[self._floor_slot(fetch_offset) :]:
            with TransactionIndex(self.txn_index_path(base), base) as index:
                result = index.collect_aborted(fetch_offset, upper_bound_offset)
            found += result.aborted_txns
            if result.is_complete:
                break
        return tuple(found)

    # -- reads -------------------------------------------------------------------------------------

    def _check_range(self, offset: int) -> None:
        if not self.log_start_offset <= offset <= self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} of topic {self.topic_partition.topic!r} partition "
                f"{self.topic_partition.partition} is outside [{self.log_start_offset}, "
                f"{self.log_end_offset}] (log start, log end) in {self.directory}"
            )

    def _max_position(self, seg: LogSegment, upper: int) -> int:
        if upper >= seg.next_offset:
            return seg.end_of_batches
        if upper <= seg.base_offset:
            return 0
        found = seg.translate_offset(upper)
        return seg.end_of_batches if found is None else found.position

    def read(
        self,
        fetch_offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_message: bool = True,
    ) -> FetchSlice:
        """Raw batch bytes from the batch holding ``fetch_offset``, below ``max_offset``.

        :class:`OffsetOutOfRangeError` unless ``log_start_offset <= fetch_offset <=
        log_end_offset``; an empty slice at or above ``max_offset`` (default: the HW).
        """
        self._check_range(fetch_offset)
        upper = self.high_watermark if max_offset is None else min(max_offset, self.log_end_offset)
        if fetch_offset < upper:
            for base in self.base_offsets[self._floor_slot(fetch_offset) :]:
                seg = self.segment(base)
                if seg.base_offset >= upper:
                    break
                found = seg.read(fetch_offset, max_bytes, self._max_position(seg, upper),
                                 min_one_message)  # fmt: skip
                if found is not None:
                    return found
        return FetchSlice(fetch_offset, -1, 0, memoryview(b""))

    def fetch(
        self,
        fetch_offset: int,
        max_bytes: int,
        isolation: FetchIsolation = FetchIsolation.HIGH_WATERMARK,
        *,
        min_one_message: bool = True,
    ) -> FetchDataInfo:
        """A Fetch request's read of this partition: :meth:`read` bounded by the log end offset,
        the HW or the LSO (``isolation``), the bytes copied.

        For ``TXN_COMMITTED`` the aborted transactions overlapping ``[fetch_offset, end)`` are
        listed, ``end`` being the offset after the last complete batch returned, or the LSO when
        none was; other isolations list none (``None``). :class:`OffsetOutOfRangeError` (code 1)
        unless ``log_start_offset <= fetch_offset <= log_end_offset``; at or above the bound the
        read is empty, without error. The LSO costs a walk of batch headers (see
        :attr:`last_stable_offset`), so only a ``TXN_COMMITTED`` read computes it; the others
        report ``last_stable_offset`` -1 (not computed).
        """
        self._check_range(fetch_offset)
        committed = isolation is FetchIsolation.TXN_COMMITTED
        lso = self.last_stable_offset if committed else -1
        upper = {FetchIsolation.LOG_END: self.log_end_offset,
                 FetchIsolation.HIGH_WATERMARK: self.high_watermark,
                 FetchIsolation.TXN_COMMITTED: lso}[isolation]  # fmt: skip
        found = self.read(fetch_offset, max_bytes, max_offset=upper,
                          min_one_message=min_one_message)  # fmt: skip
        records = bytes(found.records)
        aborted = None
        if committed:
            end = _end_of_complete_batches(records, lso)
            aborted = self.aborted_transactions(fetch_offset, end)
        return FetchDataInfo(fetch_offset, records, self.high_watermark, lso,
                             self.log_start_offset, self.log_end_offset, aborted,
                             found.first_entry_incomplete)  # fmt: skip

    def batches(
        self, start_offset: int | None = None, end_offset: int | None = None
    ) -> Iterator[AnyBatch]:
        """Every batch holding an offset in ``[start_offset, end_offset)`` (defaults: log start,
        log end), whole batches, across segments."""
        start = self.log_start_offset if start_offset is None else start_offset
        end = self.log_end_offset if end_offset is None else end_offset
        for base in self.base_offsets[self._floor_slot(start) :]:
            seg = self.segment(base)
            if seg.base_offset >= end:
                return
            found = seg.translate_offset(start)
            if found is None:
                continue
            for b in seg.batches(found.position, seg.end_of_batches):
                if b.base_offset >= end:
                    return
                yield b

    def find_offset_by_timestamp(self, timestamp: int) -> TimestampAndOffset | None:
        """Kafka's ListOffsets by timestamp: the first record at or after ``timestamp``."""
        for seg in self.segments():
            if seg.largest_timestamp >= timestamp:
                return seg.find_offset_by_timestamp(
                    timestamp, max(self.log_start_offset, seg.base_offset)
                )
        return None

    # -- lifetime ----------------------------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            for seg in self._segments.values():
                seg.close()
            self._segments.clear()

    def __enter__(self) -> PartitionReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"PartitionReader({str(self.directory)!r}, log_start_offset={self.log_start_offset}, "
            f"high_watermark={self.high_watermark}, log_end_offset={self.log_end_offset})"
        )
