"""A read-only view of one partition directory: its segments, offsets and fetch reads.

Files read in ``<log dir>/<topic>-<partition>/``: ``<20 digits>.log`` segments with their
indexes (log_segment.py), ``<20 digits>.txnindex`` aborted-transaction indexes
(transaction_index.py), ``<20 digits>.snapshot`` producer state snapshots
(producer_state_manager.py), ``leader-epoch-checkpoint`` and ``partition.metadata`` when present.
Transient files (``.cleaned``, ``.swap``, ``.deleted``) are never read (a listing that shows a swap
in progress is waited out, see below; one that a dead cleaner left needs a writer's recovery).
Nothing is ever written, renamed or deleted, and no lock is taken: the view is for processes that
do not own the log dir.

Offsets (Kafka's ``UnifiedLog`` rules, given the log dir's checkpoint values):

- ``log_end_offset``: the offset after the last batch of the last segment (its base offset when
  it holds none);
- a partial batch may end only the last segment, from the recovery point
  (``recovery-point-offset-checkpoint``, 0 without an entry) on: a torn or in-flight write.
  Anywhere else it is corruption (``LogSegment.check_tail``): every read, batch walk or
  timestamp lookup reaching it raises :class:`CorruptRecordError` naming the file, position and
  offset, never skipping the rest of its segment. One in the last segment below the recovery
  point is waited out (``_SETTLE_DELAYS``, a writer finishing an append after a truncation) and
  then fails the open, the log end offset being unknown;
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
  with the compiled header scan (``local_log.header_tables``: no Python object per batch,
  windows of batches, so its memory is bounded) and builds a batch view, decoding the one record
  of a control batch, for transactional batches only. Cost: one header
  read per batch between the snapshot and the HW (Kafka, and unified_log.py, snapshot at every
  roll, so normally the active segment only; the whole log when the directory holds no usable
  snapshot), tens of nanoseconds a batch when the pages are cached; a log without transactions
  pays that scan and nothing else. A transaction open across a log start offset moved by
  retention is known only from a snapshot, as in Kafka.

``read`` is Kafka's ``LocalLog.read`` (``local_log.read_segments``, the one the broker's log uses,
with this view's segment opening and re-listing as its policy): the slice of the first segment,
from the one holding ``fetch_offset`` on, that has a batch ending at or after it, bounded above
by the position of the batch holding ``max_offset`` (default the high watermark). ``fetch`` is the
read a Fetch request makes (fetch_data_info.py): bounded by the log end offset, the HW or the LSO
depending on the :class:`FetchIsolation`, the bytes copied out of the mapping, and for
``TXN_COMMITTED`` the aborted transactions overlapping the read, from the ``.txnindex`` files
(``aborted_transactions``).

Concurrent cleaning. The segments are listed at open and opened on first use, while a cleaner in
another process (or a broker's cleaner thread) may swap segments: ``<B>.log.cleaned`` and its
indexes become ``.swap``, the old segments of the group (based at B and after) are renamed
``.deleted`` and removed at once, the ``.swap`` files get the final names (unified_log.py), so one
cleaned segment based at B replaces several. Offsets never change under cleaning and the first
base offset never moves, so a read goes on at the same offset against a newer listing (records
may be gone: that is compaction). The rules that keep reads right:

- A listing is taken from two equal ``os.listdir`` calls in a row and is only accepted without a
  ``<B>.log.swap`` whose ``<B>.log`` is missing (a swap between renaming the old files away and
  putting the new ones in place: its offsets would be missing); such a listing is waited out,
  ``_SETTLE_DELAYS`` (under a second in all).
- An opened segment keeps its mapping (Linux keeps an unlinked mapped file readable) and stays in
  use: a reader whose segments were opened before a swap reads the old, consistent data.
- A segment file that is gone when it is opened (or was replaced while its indexes loaded,
  ``LogSegment.file_id`` against the path) makes the operation re-list the directory and start
  again from the same offset; ``batches`` and the transaction scan go on after the last segment
  they finished, never yielding a batch twice. A re-listing drops the opened segments it does
  not list or whose path now names another file (so an old segment never answers for the
  offsets of the cleaned one that replaced it, which covers its whole group), and leaves out
  segments created past this view's log end offset. Dropped segments are not closed: a thread
  still reading one keeps valid memory, the mapping goes when the last reference does.
- After ``_RELIST_ATTEMPTS`` re-listings without progress (a file listed but never there), or a
  swap that does not settle, the read fails with a :class:`KafkaStorageError` naming the topic,
  partition, offset and file. An offset below the first listed segment after a re-listing was
  deleted (retention, not cleaning): :class:`OffsetOutOfRangeError`. A partition directory that
  is gone altogether: :class:`FileNotFoundError` from the listing.
- ``TXN_COMMITTED`` fetches take the records and the aborted transactions from the same files:
  each ``.txnindex`` is read between two ``stat`` calls of its ``.log`` that must agree (and match
  the opened segment), a missing one next to a ``.txnindex.swap`` counts as in the middle of a
  swap, and the segment read must still be in place at the end; otherwise the whole fetch is
  done again on a new listing (old data with the new index would show aborted records).
- ``segment(base)`` by itself never re-lists: a gone file is a :class:`FileNotFoundError`, as
  for callers that walk ``base_offsets`` themselves. The HW, LSO and log start and end offsets
  stay those of the open.

The cost when nothing is swapped: two directory listings at open, one ``stat`` per segment
opened, and for ``TXN_COMMITTED`` fetches two or three ``stat`` calls per ``.txnindex`` read; the
per-batch and per-record paths are unchanged.

Thread safety: the listing (``base_offsets``, a list replaced whole, never changed in place) and
the opened segments change only under locks; segments are immutable once opened; the LSO is
computed once under its own lock; so any number of threads may read, and a thread that re-lists
never invalidates what another holds.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from broker_embedded.errors import (
    CorruptSnapshotError,
    KafkaStorageError,
    OffsetOutOfRangeError,
)
from broker_embedded.record import decode_kernel as k
from broker_embedded.record.record_batch import TRANSACTIONAL_MASK, RecordBatch
from broker_embedded.record.records import AnyBatch
from broker_embedded.storage.fetch_data_info import FetchDataInfo, FetchIsolation
from broker_embedded.storage.leader_epoch_checkpoint import (
    LEADER_EPOCH_CHECKPOINT,
    EpochEntry,
    LeaderEpochCheckpointFile,
)
from broker_embedded.storage.local_log import (
    end_of_complete_batches,
    header_tables,
    offset_by_timestamp,
    read_segments,
    walk_batches,
)
from broker_embedded.storage.log_segment import (
    LOG_SUFFIX,
    FetchSlice,
    LogSegment,
    TimestampAndOffset,
    parse_segment_log_name,
    segment_file_stem,
)
from broker_embedded.storage.log_segments import LogSegments
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
T = TypeVar("T")

# Re-listings of the partition directory that one operation makes when a segment file it needs
# is gone or was replaced (a cleaner swap, retention) before it gives up (KafkaStorageError).
_RELIST_ATTEMPTS = 5
# Pauses (seconds) while a listing shows a swap in progress, "<B>.log.swap" without "<B>.log":
# the cleaner only renames a few files and syncs the directory twice (module variables, so that
# tests can shorten them).
_SETTLE_DELAYS = (0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.4)
_SWAP_LOG_NAME = re.compile(r"([0-9]{20})\.log\.swap")
_SWAP_SUFFIX = ".swap"


class _StaleView(FileNotFoundError):
    """A segment file of the listing that is gone, or that another file replaced since it was
    opened (``filename`` names it): the operation re-lists the directory and goes on. A
    :class:`FileNotFoundError`, which is what :meth:`PartitionReader.segment` raised before."""


def _stale(path: str | Path, reason: str) -> _StaleView:
    return _StaleView(errno.ENOENT, reason, str(path))


def _names_same_file(seg: LogSegment) -> bool:
    """Whether the ``.log`` path of ``seg`` still names the file it mapped."""
    try:
        st = os.stat(seg.log_path)
    except FileNotFoundError:
        return False
    return (st.st_dev, st.st_ino) == seg.file_id


class PartitionReader:
    """Reads one partition directory; see the module docstring."""

    __slots__ = ("directory", "topic_partition", "index_interval_bytes", "base_offsets",
                 "log_start_offset", "log_end_offset", "high_watermark", "recovery_point",
                 "_segments",
                 "_lock", "_relist_lock", "_lso", "_lso_lock")  # fmt: skip

    def __init__(
        self,
        directory: str | Path,
        *,
        high_watermark: int | None = None,
        log_start_offset: int | None = None,
        recovery_point: int = 0,
        index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
    ) -> None:
        self.directory = Path(directory)
        self.recovery_point = recovery_point
        self.topic_partition = TopicPartition.parse_dir_name(self.directory.name)
        self.index_interval_bytes = index_interval_bytes
        self._segments: dict[int, LogSegment] = {}
        self._lock = threading.Lock()
        self._relist_lock = threading.Lock()
        self._lso: int | None = None
        self._lso_lock = threading.Lock()
        self.base_offsets = self._list_bases()
        end = self._open_last_segment()
        first = self.base_offsets[0] if self.base_offsets else (log_start_offset or 0)
        self.log_start_offset = first if log_start_offset is None else max(log_start_offset, first)
        self.log_end_offset = self.log_start_offset if end is None else end
        hw = self.log_end_offset if high_watermark is None else high_watermark
        self.high_watermark = min(max(hw, self.log_start_offset), self.log_end_offset)

    # -- segments ----------------------------------------------------------------------------------

    def segment(self, base_offset: int) -> LogSegment:
        """The segment based at ``base_offset``, opened on first use and kept (its mapping stays
        readable after a cleaner swap or a deletion). A :class:`FileNotFoundError` when its
        ``.log`` is gone; this method does not re-list the directory (the offset-based reads
        below do)."""
        with self._lock:
            seg = self._segments.get(base_offset)
            if seg is None:
                seg = self._open_segment(base_offset)
                self._segments[base_offset] = seg
            return seg

    def _open_segment(self, base_offset: int) -> LogSegment:
        """Open the segment, making sure that its indexes were loaded while its ``.log`` path
        still named the file mapped (else a swap happened meanwhile: open the new file)."""
        path = self.directory / (segment_file_stem(base_offset) + LOG_SUFFIX)
        for _ in range(3):
            try:
                seg = LogSegment.open(
                    self.directory, base_offset, index_interval_bytes=self.index_interval_bytes
                )
            except FileNotFoundError:
                raise _stale(path, "is gone") from None
            if _names_same_file(seg):
                return seg
            seg.close()  # nobody else holds it yet
        raise _stale(path, "was replaced every time it was opened")

    def segments(self) -> list[LogSegment]:
        """Every segment of one listing (re-listed when a file of it went away)."""
        return self._retrying(lambda bases: [self.segment(b) for b in bases], None,
                              "opening every segment")  # fmt: skip

    def _open_last_segment(self) -> int | None:
        """The log end offset from the last listed segment (``None`` without segments),
        re-listing when it went away between the listing and the open."""
        cause = None
        for _ in range(_RELIST_ATTEMPTS + 1):
            if not self.base_offsets:
                return None
            try:
                return self._settled_last_segment(self.segment(self.base_offsets[-1])).next_offset
            except _StaleView as e:
                cause = e
            self.base_offsets = self._list_bases()
        assert cause is not None
        raise self._gone_error(cause, None, "opening the view") from cause

    def _settled_last_segment(self, seg: LogSegment) -> LogSegment:
        """``seg``, the last segment, checked for a partial batch below the recovery point. A
        writer in the middle of an append after a truncation (which lowers the checkpointed
        recovery point only later) can show one: the segment is opened again after each of the
        ``_SETTLE_DELAYS`` until the batch is whole; one that stays is corruption."""
        for delay in _SETTLE_DELAYS:
            if seg.end_of_batches == seg.size_in_bytes or seg.next_offset >= self.recovery_point:
                return seg
            time.sleep(delay)
            with self._lock:
                self._segments.pop(seg.base_offset, None)  # kept mappings stay valid
            seg = self.segment(seg.base_offset)
        seg.check_tail(last=True, recovery_point=self.recovery_point)
        return seg

    # -- listing -----------------------------------------------------------------------------------

    def _list_bases(self, failed: str | None = None) -> list[int]:
        """The sorted base offsets of the ``.log`` files, from two equal listings in a row
        (``os.listdir`` of a large directory takes several system calls, which a rename in
        between can fall between) showing no swap in progress. A ``<B>.log.swap`` without its
        ``<B>.log`` is one: the old segments of its group are already gone, so such a listing
        would miss their offsets; it is waited out (``_SETTLE_DELAYS``). If it stays (a cleaner
        that died in the middle of a swap): a :class:`KafkaStorageError` when re-listing for a
        ``failed`` read (what it was, where, and which file went away), else (at open) a warning
        and the listing as it is."""
        seen = None
        logs: set[int] = set()
        pending: set[int] = set()
        for delay in (*_SETTLE_DELAYS, None):
            logs, swaps = set(), set()
            for name in os.listdir(self.directory):
                base = parse_segment_log_name(name)
                if base is not None:
                    logs.add(base)
                elif name.endswith(_SWAP_SUFFIX) and (m := _SWAP_LOG_NAME.fullmatch(name)):
                    swaps.add(int(m.group(1)))
            pending = swaps - logs
            if not pending and (logs, swaps) == seen:
                return sorted(logs)
            seen = (logs, swaps)
            if delay is None:
                break
            if pending:
                time.sleep(delay)
        if pending:
            names = ", ".join(f"{segment_file_stem(b)}{LOG_SUFFIX}{_SWAP_SUFFIX}"
                              for b in sorted(pending))  # fmt: skip
            what = (
                f"{self.directory} is still in the middle of a segment swap after "
                f"{sum(_SETTLE_DELAYS):.2f} s ({names} without its {LOG_SUFFIX}: a cleaner that "
                "stopped during a swap? opening the log dir with a broker recovers it)"
            )
            if failed is not None:
                raise KafkaStorageError(f"{failed}, and {what}")
            log.warning("partition %s: %s; reading the segments listed", self.topic_partition,
                        what)  # fmt: skip
        return sorted(logs)

    def _relist(self, cause: _StaleView, offset: int | None, what: str) -> None:
        """Take a new listing; forget the opened segments it does not list or whose path names
        another file now (kept mappings stay valid for whoever still holds them). Segments
        created after this view was opened (at or past its log end offset) are left out."""
        with self._relist_lock:
            listed = self._list_bases(self._failure(cause, offset, what))
            end = self.log_end_offset
            old_tail = {b for b in self.base_offsets if b >= end}  # an empty last segment
            bases = [b for b in listed if b < end or b in old_tail]
            keep = set(bases)
            with self._lock:
                for base, seg in list(self._segments.items()):
                    if base not in keep or not _names_same_file(seg):
                        del self._segments[base]
                self.base_offsets = bases

    def _retrying(self, attempt: Callable[[list[int]], T], offset: int | None, what: str) -> T:
        """``attempt(listing)``, again on a new listing (at most ``_RELIST_ATTEMPTS`` times)
        when a segment file it needs went away; ``offset`` is where the operation reads."""
        cause = None
        for _ in range(_RELIST_ATTEMPTS + 1):
            if cause is not None:
                self._relist(cause, offset, what)
                self._check_not_deleted(offset)
            try:
                return attempt(self.base_offsets)
            except _StaleView as e:
                cause = e
        assert cause is not None
        raise self._gone_error(cause, offset, what) from cause

    def _check_not_deleted(self, offset: int | None) -> None:
        """After a re-listing: an offset below the first segment was deleted meanwhile (the
        cleaner never moves the first base offset; retention does)."""
        if offset is not None and self.base_offsets and offset < self.base_offsets[0]:
            raise OffsetOutOfRangeError(
                f"offset {offset} of topic {self.topic_partition.topic!r} partition "
                f"{self.topic_partition.partition} is below the first segment (base offset "
                f"{self.base_offsets[0]}) of {self.directory}: the segments holding it were "
                "deleted after this view was opened"
            )

    def _failure(self, cause: _StaleView, offset: int | None, what: str) -> str:
        """What failed, for an error message: the partition, the operation, the offset and the
        file."""
        at = f" at offset {offset}" if offset is not None else ""
        return (
            f"topic {self.topic_partition.topic!r} partition {self.topic_partition.partition}: "
            f"{what}{at}: segment file {cause.filename} {cause.strerror}"
        )

    def _gone_error(self, cause: _StaleView, offset: int | None, what: str) -> KafkaStorageError:
        return KafkaStorageError(
            f"{self._failure(cause, offset, what)}, still after {_RELIST_ATTEMPTS} re-listings "
            f"of {self.directory}"
        )

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
        whose base offset is below ``end_offset``, found by a header scan. A segment file gone
        meanwhile: the walk goes on from the end of the last segment walked, on a new listing."""
        relists = 0
        while True:
            bases = self.base_offsets
            try:
                for base in LogSegments(bases).from_floor(start_offset):
                    if base >= end_offset:
                        return
                    seg = self.segment(base)
                    found = seg.read(start_offset, seg.size_in_bytes, seg.end_of_batches, True)
                    if found is not None:
                        view = found.records
                        for table in header_tables(view, seg.source, found.position):
                            # a legacy entry's offset field is its last offset; never
                            # transactional
                            below = table[:, k.S_OFFSET] < end_offset
                            txn = below & (table[:, k.S_MAGIC] == 2)
                            txn &= (table[:, k.S_ATTR] & TRANSACTIONAL_MASK) != 0
                            for pos, size in table[txn][:, [k.S_POS, k.S_SIZE]].tolist():
                                yield RecordBatch(view[pos : pos + size], seg.source,
                                                  found.position + pos)  # fmt: skip
                            if not below.all():
                                return
                    self._check_tail(seg, bases)
                    if seg.next_offset > start_offset:  # progress
                        start_offset, relists = seg.next_offset, 0
                return
            except _StaleView as e:
                if relists == _RELIST_ATTEMPTS:
                    raise self._gone_error(e, start_offset, "scanning transactions") from e
                relists += 1
                self._relist(e, start_offset, "scanning transactions")

    def aborted_transactions(
        self, fetch_offset: int, upper_bound_offset: int
    ) -> tuple[AbortedTxn, ...]:
        """The aborted transactions overlapping ``[fetch_offset, upper_bound_offset)``, from the
        ``.txnindex`` of the segment holding ``fetch_offset`` and of later segments until one
        entry's LSO reaches ``upper_bound_offset`` (Kafka's rule). A missing file holds none.
        Files read during a swap of their segment are read again on a new listing."""
        return self._retrying(
            lambda bases: self._aborted_in(bases, fetch_offset, upper_bound_offset),
            fetch_offset,
            "collecting aborted transactions",
        )

    def _aborted_in(
        self, bases: list[int], fetch_offset: int, upper_bound_offset: int
    ) -> tuple[AbortedTxn, ...]:
        found: list[AbortedTxn] = []
        for base in LogSegments(bases).from_floor(fetch_offset):
            before = self._log_file_id(base)
            path = self.txn_index_path(base)
            with TransactionIndex(path, base) as index:
                result = index.collect_aborted(fetch_offset, upper_bound_offset)
            # The same .log before and after: the .txnindex read was that segment's (a swap
            # renames the .log away first and puts the new .txnindex in place last) or was
            # missing because the swap that put this .log in place has not renamed it yet.
            if self._log_file_id(base) != before or (
                not result.aborted_txns and path.with_name(path.name + _SWAP_SUFFIX).exists()
            ):
                raise _stale(path, "was being replaced while it was read")
            found += result.aborted_txns
            if result.is_complete:
                break
        return tuple(found)

    def _log_file_id(self, base: int) -> tuple[int, int]:
        """``(st_dev, st_ino)`` of the ``.log`` based at ``base``: a :class:`_StaleView` when it
        is gone, or when it is not the file of the opened segment ``base`` (that segment is from
        before a swap: its ``.txnindex`` is gone with it)."""
        path = self.directory / (segment_file_stem(base) + LOG_SUFFIX)
        try:
            st = os.stat(path)
        except FileNotFoundError:
            raise _stale(path, "is gone") from None
        seg = self._segments.get(base)
        if seg is not None and seg.file_id != (st.st_dev, st.st_ino):
            raise _stale(path, "was replaced after it was opened")
        return st.st_dev, st.st_ino

    # -- reads -------------------------------------------------------------------------------------

    def _check_range(self, offset: int) -> None:
        if not self.log_start_offset <= offset <= self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} of topic {self.topic_partition.topic!r} partition "
                f"{self.topic_partition.partition} is outside [{self.log_start_offset}, "
                f"{self.log_end_offset}] (log start, log end) in {self.directory}"
            )

    def _check_tail(self, seg: LogSegment, bases: list[int]) -> None:
        """A read that reached the end of ``seg``'s batches: bytes after them are corruption
        unless ``seg`` is the last segment and they hold offsets from the recovery point on."""
        seg.check_tail(last=seg.base_offset == bases[-1], recovery_point=self.recovery_point)

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
        if fetch_offset >= upper:
            return FetchSlice(fetch_offset, -1, 0, memoryview(b""))
        return self._retrying(
            lambda bases: self._read_in(bases, fetch_offset, max_bytes, upper, min_one_message)[0],
            fetch_offset,
            "reading",
        )

    def _read_in(
        self, bases: list[int], fetch_offset: int, max_bytes: int, upper: int, min_one: bool
    ) -> tuple[FetchSlice, LogSegment | None]:
        """:meth:`read` on one listing, and the segment read (``None``: nothing found)."""
        return read_segments(LogSegments(bases), self.segment, fetch_offset, max_bytes, upper,
                             min_one, self.recovery_point)  # fmt: skip

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
        report ``last_stable_offset`` -1 (not computed). The records and the aborted
        transactions of a ``TXN_COMMITTED`` read come from the same files: when the segment
        read was replaced by a swap before its ``.txnindex`` was read, both are read again.
        """
        self._check_range(fetch_offset)
        committed = isolation is FetchIsolation.TXN_COMMITTED
        lso = self.last_stable_offset if committed else -1
        upper = {FetchIsolation.LOG_END: self.log_end_offset,
                 FetchIsolation.HIGH_WATERMARK: self.high_watermark,
                 FetchIsolation.TXN_COMMITTED: lso}[isolation]  # fmt: skip

        def attempt(bases: list[int]) -> tuple[bytes, tuple[AbortedTxn, ...] | None, bool]:
            found, seg = FetchSlice(fetch_offset, -1, 0, memoryview(b"")), None
            if fetch_offset < upper:
                found, seg = self._read_in(bases, fetch_offset, max_bytes, upper,
                                           min_one_message)  # fmt: skip
            records = bytes(found.records)
            aborted = None
            if committed:
                end = end_of_complete_batches(records, lso)
                aborted = self._aborted_in(bases, fetch_offset, end)
                if seg is not None and not _names_same_file(seg):
                    raise _stale(seg.log_path, "was replaced while it was read")
            return records, aborted, found.first_entry_incomplete

        records, aborted, incomplete = self._retrying(attempt, fetch_offset, "fetching")
        return FetchDataInfo(fetch_offset, records, self.high_watermark, lso,
                             self.log_start_offset, self.log_end_offset, aborted,
                             incomplete)  # fmt: skip

    def batches(
        self, start_offset: int | None = None, end_offset: int | None = None
    ) -> Iterator[AnyBatch]:
        """Every batch holding an offset in ``[start_offset, end_offset)`` (defaults: log start,
        log end), whole batches, across segments. A segment file gone meanwhile: the walk goes
        on after the last segment walked, on a new listing (never a batch twice)."""
        start = self.log_start_offset if start_offset is None else start_offset
        end = self.log_end_offset if end_offset is None else end_offset
        relists = 0

        def walked(seg: LogSegment) -> None:
            nonlocal start, relists
            if seg.next_offset > start:  # progress
                start, relists = seg.next_offset, 0

        while True:
            segments = LogSegments(self.base_offsets)
            try:
                yield from walk_batches(segments, self.segment, start, end, self.recovery_point,
                                        walked)  # fmt: skip
                return
            except _StaleView as e:
                if relists == _RELIST_ATTEMPTS:
                    raise self._gone_error(e, start, "reading batches") from e
                relists += 1
                self._relist(e, start, "reading batches")
                self._check_not_deleted(start)

    def find_offset_by_timestamp(self, timestamp: int) -> TimestampAndOffset | None:
        """Kafka's ListOffsets by timestamp: the first record at or after ``timestamp`` and at
        or above the log start offset. Unlike Kafka's ``fetchOffsetByTimestamp`` the search
        goes on past a segment whose matching records all lie below the log start offset."""

        def attempt(bases: list[int]) -> TimestampAndOffset | None:
            found = offset_by_timestamp(LogSegments(bases), self.segment, timestamp,
                                        self.log_start_offset, self.recovery_point)  # fmt: skip
            # a last segment opened again after a swap may reach past the view's end
            return found if found is None or found.offset < self.log_end_offset else None

        return self._retrying(attempt, None, f"looking up timestamp {timestamp}")

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
