"""A read-only view of one partition directory: its published offsets over a ``LocalLog``
(local_log.py, the reader the broker's log uses too) with this module's re-listing policy
(:class:`RelistingSegments`) plugged in.

Files read in ``<log dir>/<topic>-<partition>/``: ``<20 digits>.log`` segments with their
indexes (log_segment.py), ``<20 digits>.txnindex`` aborted-transaction indexes
(transaction_index.py), ``<20 digits>.snapshot`` producer state snapshots
(snapshot_file.py), ``leader-epoch-checkpoint`` and ``partition.metadata`` when present.
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
  the first segment's base offset without a checkpoint entry. For a tiered partition
  (``remote.storage.enable``) the checkpoint holds the log start in the object store, below
  the first local segment (Kafka's ``localLogStartOffset``): this view reads only the dir, so it
  starts at the first segment, and an offset below it is OFFSET_OUT_OF_RANGE naming the range
  the dir holds; the rows below are read from the store (object_store_fetch_source.py);
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
  with the header walk (``LocalLog.transactional_batches``: no Python object per batch,
  windows of batches, so its memory is bounded) and builds a batch view, decoding the one record
  of a control batch, for transactional batches only. Cost: one header
  read per batch between the snapshot and the HW (Kafka, and unified_log.py, snapshot at every
  roll, so normally the active segment only; the whole log when the directory holds no usable
  snapshot), tens of nanoseconds a batch when the pages are cached; a log without transactions
  pays that scan and nothing else. A transaction open across a log start offset moved by
  retention is known only from a snapshot, as in Kafka.

``read`` is Kafka's ``LocalLog.read`` (``LocalLog.read``, the one the broker's log uses, with
this view's segment opening and re-listing as its policy): the slice of the first segment,
from the one holding ``fetch_offset`` on, that has a batch ending at or after it, bounded above
by the position of the batch holding ``max_offset`` (default the high watermark). ``fetch`` is the
read a Fetch request makes (fetch_data_info.py): bounded by the log end offset, the HW or the LSO
depending on the :class:`FetchIsolation`, the bytes copied out of the mapping, and for
``TXN_COMMITTED`` the aborted transactions overlapping the read, from the ``.txnindex`` files
(``aborted_transactions``).

Concurrent cleaning. The segments are listed at open and opened on first use, while a cleaner in
another process (or a broker's cleaner thread) may swap segments: ``<B>.log.cleaned`` and its
indexes become ``.swap``, the old segments of the group (based at B and after) are renamed
``.deleted`` and removed at once, the ``.swap`` files get the final names (cleaning_session.py), so
one cleaned segment based at B replaces several. Offsets never change under cleaning and the first
base offset never moves, so a read goes on at the same offset against a newer listing (records
may be gone: that is compaction). The rules that keep reads right:

- A listing is taken from two equal ``os.listdir`` calls in a row (one, when the directory's
  entries fit one ``getdents64`` call: ``_one_read``) and is only accepted without a
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

The cost when nothing is swapped: one directory listing at open (two for a directory of more
than about 35 files, see above), one ``stat`` per segment
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
from broker_embedded.record.records import AnyBatch
from broker_embedded.storage.fetch_data_info import FetchDataInfo, FetchIsolation
from broker_embedded.storage.leader_epoch_checkpoint import (
    LEADER_EPOCH_CHECKPOINT,
    EpochEntry,
    LeaderEpochCheckpointFile,
)
from broker_embedded.storage.local_log import LocalLog, LogOffsets, Walked
from broker_embedded.storage.log_file_utils import (
    LOG_SUFFIX,
    parse_segment_log_name,
    segment_file_stem,
)
from broker_embedded.storage.log_segment import FetchSlice, LogSegment, TimestampAndOffset
from broker_embedded.storage.log_segments import LogSegments
from broker_embedded.storage.partition_metadata import (
    PARTITION_METADATA_FILE,
    PartitionMetadataFile,
)
from broker_embedded.storage.producer_state_manager import ProducerStateManager
from broker_embedded.storage.segment_indexer import DEFAULT_INDEX_INTERVAL_BYTES
from broker_embedded.storage.snapshot_file import list_snapshots
from broker_embedded.storage.topic_partition import TopicPartition
from broker_embedded.storage.transaction_index import (
    AbortedTxn,
    TxnIndexSearchResult,
)

log = logging.getLogger(__name__)
T = TypeVar("T")
B = TypeVar("B")

# Re-listings of the partition directory that one operation makes when a segment file it needs
# is gone or was replaced (a cleaner swap, retention) before it gives up (KafkaStorageError).
_RELIST_ATTEMPTS = 5
# Pauses (seconds) while a listing shows a swap in progress, "<B>.log.swap" without "<B>.log":
# the cleaner only renames a few files and syncs the directory twice (module variables, so that
# tests can shorten them).
_SETTLE_DELAYS = (0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.4)
# Bytes of directory entries that one readdir buffer surely holds (glibc reads with at least
# 32 KiB, musl with 2 KiB): a partition directory of a few segments fits
_ONE_READ_BYTES = 2048
_SWAP_LOG_NAME = re.compile(r"([0-9]{20})\.log\.swap")
_SWAP_SUFFIX = ".swap"


class _StaleView(FileNotFoundError):
    """A segment file of the listing that is gone, or that another file replaced since it was
    opened (``filename`` names it): the operation re-lists the directory and goes on. A
    :class:`FileNotFoundError`, which is what :meth:`PartitionReader.segment` raised before."""


def _stale(path: str | Path, reason: str) -> _StaleView:
    return _StaleView(errno.ENOENT, reason, str(path))


def _one_read(names: list[str]) -> bool:
    """Whether a listing of ``names`` came from one ``getdents64`` call: their directory
    entries (``.`` and ``..`` too; each 19 bytes, the name, a NUL, padded to 8 bytes) fit
    :data:`_ONE_READ_BYTES`. One call reads the directory under its inode lock, which a rename in
    it takes exclusively, so such a listing is the directory at one instant (later calls can
    only add names created after it), and a second one to compare it with is not needed."""
    size = 48
    for name in names:
        size += (len(name.encode("utf-8", "surrogateescape")) + 27) & ~7
    return size <= _ONE_READ_BYTES


def _names_same_file(seg: LogSegment) -> bool:
    """Whether the ``.log`` path of ``seg`` still names the file it mapped."""
    try:
        st = os.stat(seg.log_path)
    except FileNotFoundError:
        return False
    return (st.st_dev, st.st_ino) == seg.file_id


class RelistingSegments:
    """The read-only view's :class:`~broker_embedded.storage.local_log.SegmentAccess`: the
    listing, the segments opened on first use, re-listing when a file went away (module
    docstring, "Concurrent cleaning")."""

    __slots__ = (
        "directory",
        "topic_partition",
        "index_interval_bytes",
        "recovery_point",
        "base_offsets",
        "end_offset",
        "_segments",
        "_lock",
        "_relist_lock",
    )

    def __init__(
        self,
        directory: Path,
        topic_partition: TopicPartition,
        recovery_point: int,
        index_interval_bytes: int,
    ) -> None:
        self.directory = directory
        self.topic_partition = topic_partition
        self.recovery_point = recovery_point
        self.index_interval_bytes = index_interval_bytes
        self._segments: dict[int, LogSegment] = {}
        self._lock = threading.Lock()
        self._relist_lock = threading.Lock()
        # the view's log end offset: a re-listing leaves out segments created past it
        self.end_offset: int | None = None
        self.base_offsets = self._list_bases()

    def listing(self) -> LogSegments:
        return LogSegments(self.base_offsets)

    # -- segments ----------------------------------------------------------------------------------

    def segment(self, base_offset: int) -> LogSegment:
        """The segment based at ``base_offset``, opened on first use and kept (its mapping stays
        readable after a cleaner swap or a deletion). A :class:`FileNotFoundError` when its
        ``.log`` is gone; this method does not re-list the directory (the offset-based reads
        do)."""
        with self._lock:
            seg = self._segments.get(base_offset)
            if seg is None:
                seg = self._open_segment(base_offset)
                self._segments[base_offset] = seg
            return seg

    def forget(self, base_offset: int) -> None:
        """Open the segment again on its next use (a kept mapping stays valid)."""
        with self._lock:
            self._segments.pop(base_offset, None)

    def _open_segment(self, base_offset: int) -> LogSegment:
        """Open the segment, making sure that its indexes were loaded while its ``.log`` path
        still named the file mapped (else a swap happened meanwhile: open the new file)."""
        for _ in range(3):
            try:
                seg = LogSegment.open(
                    self.directory, base_offset, index_interval_bytes=self.index_interval_bytes
                )
            except FileNotFoundError:
                path = self.directory / (segment_file_stem(base_offset) + LOG_SUFFIX)
                raise _stale(path, "is gone") from None
            if _names_same_file(seg):
                return seg
            seg.close()  # nobody else holds it yet
        raise _stale(seg.log_path, "was replaced every time it was opened")

    def check_in_place(self, seg: LogSegment) -> None:
        if not _names_same_file(seg):
            raise _stale(seg.log_path, "was replaced while it was read")

    def close(self) -> None:
        with self._lock:
            for seg in self._segments.values():
                seg.close()
            self._segments.clear()

    # -- transactions ------------------------------------------------------------------------------

    def collect_aborted(
        self, seg: LogSegment, fetch_offset: int, upper: int
    ) -> TxnIndexSearchResult:
        """The ``.txnindex`` of ``seg`` read between two checks that its ``.log`` path still
        names the file opened; a :class:`_StaleView` when it does not (the segment is from
        before a swap: its ``.txnindex`` is gone with it) or a swap is under way."""
        self.check_in_place(seg)
        result = seg.collect_aborted(fetch_offset, upper)
        # The same .log before and after: the .txnindex read was that segment's (a swap
        # renames the .log away first and puts the new .txnindex in place last) or was
        # missing because the swap that put this .log in place has not renamed it yet.
        path = seg.txn_index.path
        self.check_in_place(seg)
        if not result.aborted_txns and path.with_name(path.name + _SWAP_SUFFIX).exists():
            raise _stale(path, "was being replaced while it was read")
        return result

    # -- listing -----------------------------------------------------------------------------------

    def _list_bases(self, failed: str | None = None) -> list[int]:
        """The sorted base offsets of the ``.log`` files, from two equal listings in a row
        (``os.listdir`` of a large directory takes several system calls, which a rename in
        between can fall between), or from one that one system call read (:func:`_one_read`),
        showing no swap in progress. A ``<B>.log.swap`` without its
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
            names = os.listdir(self.directory)
            for name in names:
                base = parse_segment_log_name(name)
                if base is not None:
                    logs.add(base)
                elif name.endswith(_SWAP_SUFFIX) and (m := _SWAP_LOG_NAME.fullmatch(name)):
                    swaps.add(int(m.group(1)))
            pending = swaps - logs
            if not pending and ((logs, swaps) == seen or _one_read(names)):
                return sorted(logs)
            seen = (logs, swaps)
            if delay is None:
                break
            if pending:
                time.sleep(delay)
        if pending:
            names = ", ".join(
                f"{segment_file_stem(b)}{LOG_SUFFIX}{_SWAP_SUFFIX}" for b in sorted(pending)
            )
            what = (
                f"{self.directory} is still in the middle of a segment swap after "
                f"{sum(_SETTLE_DELAYS):.2f} s ({names} without its {LOG_SUFFIX}: a cleaner that "
                "stopped during a swap? opening the log dir with a broker recovers it)"
            )
            if failed is not None:
                raise KafkaStorageError(f"{failed}, and {what}")
            log.warning("partition %s: %s; reading the segments listed", self.topic_partition, what)
        return sorted(logs)

    def open_last(self) -> int | None:
        """The log end offset from the last listed segment (``None`` without segments),
        re-listing when it went away between the listing and the open."""
        cause = None
        for _ in range(_RELIST_ATTEMPTS + 1):
            if not self.base_offsets:
                return None
            try:
                return self._settled_last(self.segment(self.base_offsets[-1])).next_offset
            except _StaleView as e:
                cause = e
            self.base_offsets = self._list_bases()
        assert cause is not None
        raise self._gone_error(cause, None, "opening the view") from cause

    def _settled_last(self, seg: LogSegment) -> LogSegment:
        """``seg``, the last segment, checked for a partial batch below the recovery point. A
        writer in the middle of an append after a truncation (which lowers the checkpointed
        recovery point only later) can show one: the segment is opened again after each of the
        ``_SETTLE_DELAYS`` until the batch is whole; one that stays is corruption."""
        recovery_point = self.recovery_point
        for delay in _SETTLE_DELAYS:
            if seg.end_of_batches == seg.size_in_bytes or seg.next_offset >= recovery_point:
                return seg
            time.sleep(delay)
            self.forget(seg.base_offset)  # kept mappings stay valid
            seg = self.segment(seg.base_offset)
        seg.check_tail(last=True, recovery_point=recovery_point)
        return seg

    def _relist(self, cause: _StaleView, offset: int | None, what: str) -> None:
        """Take a new listing; forget the opened segments it does not list or whose path names
        another file now (kept mappings stay valid for whoever still holds them). Segments
        created after this view was opened (at or past its log end offset) are left out."""
        with self._relist_lock:
            listed = self._list_bases(self._failure(cause, offset, what))
            end = self.end_offset
            assert end is not None, "re-listing before the view's log end offset is known"
            old_tail = {b for b in self.base_offsets if b >= end}  # an empty last segment
            bases = [b for b in listed if b < end or b in old_tail]
            keep = set(bases)
            with self._lock:
                for base, seg in list(self._segments.items()):
                    if base not in keep or not _names_same_file(seg):
                        del self._segments[base]
                self.base_offsets = bases

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

    # -- running operations ------------------------------------------------------------------------

    def attempt(self, op: Callable[[LogSegments], T], offset: int | None, what: str) -> T:
        """``op(listing)``, again on a new listing (at most ``_RELIST_ATTEMPTS`` times) when a
        segment file it needs went away; ``offset`` is where the operation reads."""
        cause = None
        for _ in range(_RELIST_ATTEMPTS + 1):
            if cause is not None:
                self._relist(cause, offset, what)
                self._check_not_deleted(offset)
            try:
                return op(self.listing())
            except _StaleView as e:
                cause = e
        assert cause is not None
        raise self._gone_error(cause, offset, what) from cause

    def resume(
        self, start: int, what: str, walk: Callable[[LogSegments, int, Walked], Iterator[B]]
    ) -> Iterator[B]:
        """``walk`` from ``start``; when a file it needs went away, again on a new listing from
        after the last segment it finished (never a batch twice)."""
        relists = 0

        def walked(seg: LogSegment) -> None:
            nonlocal start, relists
            if seg.next_offset > start:  # progress
                start, relists = seg.next_offset, 0

        while True:
            try:
                yield from walk(self.listing(), start, walked)
                return
            except _StaleView as e:
                if relists == _RELIST_ATTEMPTS:
                    raise self._gone_error(e, start, what) from e
                relists += 1
                self._relist(e, start, what)
                self._check_not_deleted(start)


class PartitionReader:
    """The read-only view of one partition directory: a :class:`LocalLog` over
    :class:`RelistingSegments` and the offsets published for it; see the module docstring."""

    __slots__ = (
        "directory",
        "topic_partition",
        "log_start_offset",
        "log_end_offset",
        "high_watermark",
        "local_log",
        "_access",
        "_lso",
        "_lso_lock",
    )

    def __init__(
        self,
        directory: str | Path,
        *,
        high_watermark: int | None = None,
        log_start_offset: int | None = None,
        recovery_point: int = 0,
        index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
    ) -> None:
        self.directory = directory if isinstance(directory, Path) else Path(directory)
        self.topic_partition = TopicPartition.parse_dir_name(self.directory.name)
        self._access = RelistingSegments(
            self.directory, self.topic_partition, recovery_point, index_interval_bytes
        )
        self.local_log = LocalLog(self.topic_partition, self.directory, self._access)
        self._lso: int | None = None
        self._lso_lock = threading.Lock()
        end = self._access.open_last()
        bases = self._access.base_offsets
        first = bases[0] if bases else (log_start_offset or 0)
        self.log_start_offset = first if log_start_offset is None else max(log_start_offset, first)
        self.log_end_offset = self.log_start_offset if end is None else end
        self._access.end_offset = self.log_end_offset
        hw = self.log_end_offset if high_watermark is None else high_watermark
        self.high_watermark = min(max(hw, self.log_start_offset), self.log_end_offset)

    # -- segments ----------------------------------------------------------------------------------

    @property
    def base_offsets(self) -> list[int]:
        """The base offsets of the current listing (a list replaced whole on a re-listing)."""
        return self._access.base_offsets

    @property
    def recovery_point(self) -> int:
        return self._access.recovery_point

    @property
    def index_interval_bytes(self) -> int:
        return self._access.index_interval_bytes

    def segment(self, base_offset: int) -> LogSegment:
        """The segment based at ``base_offset``, opened on first use and kept (its mapping stays
        readable after a cleaner swap or a deletion). A :class:`FileNotFoundError` when its
        ``.log`` is gone; this method does not re-list the directory (the offset-based reads
        below do)."""
        return self._access.segment(base_offset)

    def with_listing(self, op: Callable[[list[int]], T], offset: int | None, what: str) -> T:
        """``op(base offsets of one listing)``, run again on a new listing when a segment file
        it opens went away meanwhile (a cleaner's swap, a deletion; at most
        ``_RELIST_ATTEMPTS`` times, then a :class:`KafkaStorageError` naming the partition)."""
        return self._access.attempt(lambda segs: op(list(segs)), offset, what)

    def segments(self) -> list[LogSegment]:
        """Every segment of one listing (re-listed when a file of it went away)."""
        return self._access.attempt(
            lambda segs: [self.segment(b) for b in segs], None, "opening every segment"
        )

    # -- files beside the segments -----------------------------------------------------------------

    def leader_epochs(self) -> list[EpochEntry]:
        return LeaderEpochCheckpointFile(self.directory / LEADER_EPOCH_CHECKPOINT).read_or_empty()

    def topic_id(self) -> uuid.UUID | None:
        f = PartitionMetadataFile(self.directory / PARTITION_METADATA_FILE)
        return f.read().topic_id if f.exists() else None

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
            state.replay(self.local_log.transactional_batches(state.map_end_offset, hw))
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

    def aborted_transactions(
        self, fetch_offset: int, upper_bound_offset: int
    ) -> tuple[AbortedTxn, ...]:
        """The aborted transactions overlapping ``[fetch_offset, upper_bound_offset)``, from the
        ``.txnindex`` of the segment holding ``fetch_offset`` and of later segments until one
        entry's LSO reaches ``upper_bound_offset`` (Kafka's rule). A missing file holds none.
        Files read during a swap of their segment are read again on a new listing."""
        return self.local_log.aborted_transactions(fetch_offset, upper_bound_offset)

    # -- reads -------------------------------------------------------------------------------------

    def _offsets(self, lso: int = -1) -> LogOffsets:
        return LogOffsets(self.log_start_offset, self.high_watermark, self.log_end_offset, lso)

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
        self.local_log.check_range(fetch_offset, self._offsets())
        upper = self.high_watermark if max_offset is None else min(max_offset, self.log_end_offset)
        return self.local_log.read(fetch_offset, max_bytes, upper, min_one_message)

    def fetch(
        self,
        fetch_offset: int,
        max_bytes: int,
        isolation: FetchIsolation = FetchIsolation.HIGH_WATERMARK,
        *,
        min_one_message: bool = True,
    ) -> FetchDataInfo:
        """A Fetch request's read of this partition (``LocalLog.fetch``): bounded by the log
        end offset, the HW or the LSO (``isolation``), the bytes copied.

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
        self.local_log.check_range(fetch_offset, self._offsets())
        committed = isolation is FetchIsolation.TXN_COMMITTED
        offsets = self._offsets(self.last_stable_offset if committed else -1)
        return self.local_log.fetch(
            fetch_offset, max_bytes, isolation, offsets, min_one_message=min_one_message
        )

    def batches(
        self, start_offset: int | None = None, end_offset: int | None = None
    ) -> Iterator[AnyBatch]:
        """Every batch holding an offset in ``[start_offset, end_offset)`` (defaults: log start,
        log end), whole batches, across segments. A segment file gone meanwhile: the walk goes
        on after the last segment walked, on a new listing (never a batch twice)."""
        start = self.log_start_offset if start_offset is None else start_offset
        end = self.log_end_offset if end_offset is None else end_offset
        return self.local_log.batches(start, end)

    def find_offset_by_timestamp(self, timestamp: int) -> TimestampAndOffset | None:
        """Kafka's ListOffsets by timestamp: the first record at or after ``timestamp`` and at
        or above the log start offset. Unlike Kafka's ``fetchOffsetByTimestamp`` the search
        goes on past a segment whose matching records all lie below the log start offset."""
        # a last segment opened again after a swap may reach past the view's end
        return self.local_log.offset_by_timestamp(
            timestamp, self.log_start_offset, self.log_end_offset
        )

    # -- lifetime ----------------------------------------------------------------------------------

    def close(self) -> None:
        self._access.close()

    def __enter__(self) -> PartitionReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"PartitionReader({str(self.directory)!r}, log_start_offset={self.log_start_offset}, "
            f"high_watermark={self.high_watermark}, log_end_offset={self.log_end_offset})"
        )
