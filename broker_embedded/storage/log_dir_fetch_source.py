"""The :class:`FetchSource` of a log dir read in place: :class:`LogDirFetchSource`.

Opened from :class:`LogDirSource` (the log dir's absolute path: small, frozen, picklable).
Partitions are read through the read-only view (``LogDir(...).open_partition``: the broker's
published high watermark and log start offset, no lock, nothing written), one view per
partition opened on first use and kept until :meth:`LogDirFetchSource.close`, so the offsets of
a partition are a snapshot of its first use (open the descriptor again to see newer ones). The
topics are the ``<topic>-<partition>`` directories listed on the first call that needs them
(``topics``); ``kafkalog-topics.json``, when present, tells how many partitions a topic should
have. Nothing of the log dir is read at opening: the checkpoint files are read, whole, by the
first view opened without planned entries.

Planned entries (what a planner hands its tasks, :meth:`LogDirFetchSource.task_source`): a
descriptor may carry, for some partitions, the checkpoint entries the planner read
(``PartitionCheckpoints``: high watermark, log start offset, recovery point). A view of such a
partition opens its directory with them, reading neither the log dir's listing nor its
checkpoint files (which hold a line per partition: read whole by every task, they made the
cost of a read grow with the square of the partition count). The view still lists and reads
its own partition directory, so retention or truncation since planning shows as a log start
offset above the planned one or a log end offset below it; a reader that must see the log as
it is now opens :attr:`LogDirSource.unplanned` (offset_range_reader.py does when a fetch
fails).

- ``list_offset``: earliest is the view's log start offset (and so is earliest-local, -4: see
  tiered storage below); latest its high watermark or, for
  read_committed, its last stable offset; a timestamp goes to the view's
  ``find_offset_by_timestamp`` (the time index, then a scan, segment after segment until one
  holds a matching record at or above the log start offset), the answer kept only below latest.
- ``fetch``: the view's ``read`` bounded by the high watermark (read_uncommitted: what ``fetch``
  does for it, without the last stable offset it would compute), or its ``fetch`` with
  ``TXN_COMMITTED`` (read_committed: bounded by the LSO, with the aborted transactions). The
  records are copied out of the segment's mapping, whose pages are then released
  (``open_files.release_mapped_pages``): resident memory stays about one fetch, not the
  segment's size, however far a task reads.
- ``fetch_in_place`` (not part of the protocol: a reader that decodes each fetch before the
  next asks for it, offset_range_reader.py): ``fetch`` without the copy under read_uncommitted.
  The records are a read-only view of the segment's mapping when the segment lies wholly below
  the partition's recovery point (its last batch ends at or below it: recovery never truncates
  there), else a copy (the active segment of a running or crashed broker, which recovery may
  truncate while the view is decoded: a mapped page past the end of its file is a SIGBUS). The
  pages of one in-place fetch are released at the next in-place fetch and at
  :meth:`LogDirFetchSource.close`, so resident memory stays one fetch too. A view held longer
  stays valid (the mapping lives while it is referenced; released pages fault in again from the
  page cache). Only a replica's truncation after an unclean election reaches below the
  recovery point: a view being decoded then faults; the fast path is kept for it.
  Under read_committed the view's ``fetch`` already copies: ``fetch`` as is.
- Truncation by another process: before each fetch the ``.log`` of the segment holding the
  offset is checked (one ``stat``): shorter than when it was mapped (same file), the fetch is a
  :class:`SegmentTruncatedError` naming the file, the offset and the partition (an
  out-of-range error: the reader opens the log dir again), not a read of pages past the end.
- Byte cuts: exact, from each segment's offset index and sizes (positions of index entries),
  with a walk of at most about ``index.interval.bytes`` of batch headers after an entry; no
  record is decoded. Bytes count the log as stored: compressed batches with their headers.

Tiered storage (KIP-405): a topic with ``remote.storage.enable=true`` (its config in
``kafkalog-topics.json`` or Kafka's metadata log) keeps, as Kafka does, its log start offset
(``log-start-offset-checkpoint``) at the earliest offset still in remote storage while local
retention deletes its first segments. This source reads the dir alone, so it starts at the
first local segment; :meth:`LogDirFetchSource.tiered_offsets` names the offsets only in remote
storage (Kafka's ListOffsets -2 to -4: the checkpointed log start to the first local offset),
for a reader that reads them from the store (tiered_fetch_source.py) or refuses them naming
them (the data source's planner, without its ``remoteLogStorage`` option). Any other topic's
checkpoint below its first segment is a checkpoint behind a deletion: nothing is remote.

Not thread-safe: one planner or one task uses a source.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from broker_embedded.errors import SegmentTruncatedError
from broker_embedded.storage.fetch_data_info import FetchIsolation, IsolationLevel
from broker_embedded.storage.fetch_source import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    ByteCut,
    FetchedPartition,
)
from broker_embedded.storage.log_config import parse_boolean
from broker_embedded.storage.log_dir import LogDir, PartitionCheckpoints, open_partition_with
from broker_embedded.storage.open_files import release_mapped_pages
from broker_embedded.storage.topic_config_file import TOPIC_CONFIG_FILE as TOPIC_CONFIG_FILE
from broker_embedded.storage.topic_config_file import TopicConfigFile
from broker_embedded.storage.topic_partition import TopicPartition

REMOTE_STORAGE_ENABLE = "remote.storage.enable"  # the topic config that tiers a topic

if TYPE_CHECKING:  # only what LogDir.open_partition returns, through its public methods
    from broker_embedded.storage.log_segment import LogSegment
    from broker_embedded.storage.partition_reader import PartitionReader


@dataclass(frozen=True)
class LogDirSource:
    """Opens a :class:`LogDirFetchSource` on ``path`` (absolute); ``planned``: checkpoint
    entries of some partitions, as a planner read them (module docstring)."""

    path: str
    planned: tuple[tuple[TopicPartition, PartitionCheckpoints], ...] = ()

    @property
    def location(self) -> str:
        return f"log dir {self.path}"

    @property
    def unplanned(self) -> LogDirSource:
        """This log dir without planned entries: its views see the checkpoint files now."""
        return LogDirSource(self.path) if self.planned else self

    def open(self) -> LogDirFetchSource:
        return LogDirFetchSource(self)


class LogDirFetchSource:
    """A log dir as a :class:`FetchSource`; see the module docstring."""

    def __init__(self, descriptor: LogDirSource) -> None:
        self._descriptor = descriptor
        self._path = Path(descriptor.path)
        if not self._path.is_dir():
            raise FileNotFoundError(f"log dir {self._path} is not a directory")
        self._planned = dict(descriptor.planned)
        self._log_dir: LogDir | None = None
        self._topics: dict[str, tuple[int, ...]] | None = None
        self._topic_config: dict | None = None
        self._views: dict[TopicPartition, PartitionReader] = {}
        self._in_place: memoryview | None = None  # the last fetch_in_place's records

    @property
    def descriptor(self) -> LogDirSource:
        return self._descriptor

    @property
    def log_dir(self) -> LogDir:
        """The log dir's view (its checkpoint files read on first use)."""
        if self._log_dir is None:
            self._log_dir = LogDir(self._path)
        return self._log_dir

    def view(self, tp: TopicPartition) -> PartitionReader:
        """The read-only view of ``tp`` (opened on first use, with its planned entries when the
        descriptor has them)."""
        found = self._views.get(tp)
        if found is None:
            planned = self._planned.get(tp)
            found = self._views[tp] = (
                self.log_dir.open_partition(tp)
                if planned is None
                else open_partition_with(self._path, tp, planned)
            )
        return found

    def task_source(self, tps: Iterable[TopicPartition]) -> LogDirSource:
        """A descriptor of this log dir carrying the checkpoint entries of ``tps`` as this source
        read them, for a task that reads those partitions (module docstring)."""
        log_dir = self.log_dir
        return LogDirSource(
            self._descriptor.path, tuple((tp, log_dir.checkpoints(tp)) for tp in tps)
        )

    # -- metadata and offsets ----------------------------------------------------------------------

    def topics(self) -> dict[str, tuple[int, ...]]:
        if self._topics is None:
            by_topic: dict[str, list[int]] = {}
            for tp in self.log_dir.partitions():
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            self._topics = {t: tuple(sorted(ps)) for t, ps in by_topic.items()}
        return dict(self._topics)

    def declared_partitions(self, topic: str) -> int | None:
        """``topic``'s partition count as :data:`TOPIC_CONFIG_FILE` declares it, or None."""
        if self._topic_config is None:
            self._topic_config = TopicConfigFile(self._path).read()
        entry = self._topic_config.get(topic)
        return None if entry is None else entry.partitions

    def exists(self, tp: TopicPartition) -> bool:
        return (self._path / tp.dir_name).is_dir()

    def tiered_offsets(self, tp: TopicPartition) -> tuple[int, int] | None:
        """``(log start offset, first local offset)``: the offsets of ``tp`` only in remote
        storage, when its topic tiers and its checkpointed log start offset is below its first
        local segment (module docstring); ``None`` otherwise."""
        planned = self._planned.get(tp)
        start = (planned or self.log_dir.checkpoints(tp)).log_start_offset
        local = self.view(tp).log_start_offset
        if start is None or start >= local or not self._tiers(tp.topic):
            return None
        return start, local

    def _tiers(self, topic: str) -> bool:
        """Whether ``topic``'s config says ``remote.storage.enable=true``."""
        if self._topic_config is None:
            self._topic_config = TopicConfigFile(self._path).read()
        entry = self._topic_config.get(topic)
        flag = None if entry is None else entry.config.get(REMOTE_STORAGE_ENABLE)
        return parse_boolean(str(flag)) is True

    def list_offset(
        self, tp: TopicPartition, timestamp: int, isolation: IsolationLevel
    ) -> int | None:
        view = self.view(tp)
        committed = isolation == IsolationLevel.READ_COMMITTED
        latest = view.last_stable_offset if committed else view.high_watermark
        if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            return view.log_start_offset
        if timestamp == LATEST_TIMESTAMP:
            return latest
        found = view.find_offset_by_timestamp(timestamp)
        return found.offset if found is not None and found.offset < latest else None

    # -- fetching ----------------------------------------------------------------------------------

    def fetch(
        self, tp: TopicPartition, offset: int, max_bytes: int, isolation: IsolationLevel
    ) -> FetchedPartition:
        view = self.view(tp)
        _check_not_truncated(view, offset)
        if isolation == IsolationLevel.READ_COMMITTED:
            info = view.fetch(offset, max_bytes, FetchIsolation.TXN_COMMITTED)
            txns = info.aborted_transactions or ()
            aborted = tuple((a.producer_id, a.first_offset) for a in txns)
            return FetchedPartition(
                tp,
                offset,
                _copied(info.records),
                info.high_watermark,
                info.last_stable_offset,
                info.log_start_offset,
                aborted,
            )
        return self._uncommitted(tp, offset, max_bytes)

    def aborted_transactions(
        self, tp: TopicPartition, fetch_offset: int, upper_bound_offset: int
    ) -> tuple[tuple[int, int], ...]:
        """(producer id, first offset) of the aborted transactions overlapping ``[fetch_offset,
        upper_bound_offset)`` in ``tp``'s segments' ``.txnindex`` files from the one holding
        ``fetch_offset`` (Kafka's ``collectAbortedTransactions``; tiered_fetch_source.py asks
        for those begun below the first local offset whose markers are local)."""
        txns = self.view(tp).aborted_transactions(fetch_offset, upper_bound_offset)
        return tuple((a.producer_id, a.first_offset) for a in txns)

    def fetch_in_place(
        self, tp: TopicPartition, offset: int, max_bytes: int, isolation: IsolationLevel
    ) -> FetchedPartition:
        """``fetch``, its read_uncommitted records a view of the segment's mapping, valid until
        the next in-place fetch or :meth:`close` releases its pages (module docstring)."""
        self._release_in_place()
        if isolation == IsolationLevel.READ_COMMITTED:
            return self.fetch(tp, offset, max_bytes, isolation)
        _check_not_truncated(self.view(tp), offset)
        return self._uncommitted(tp, offset, max_bytes, in_place=True)

    def _uncommitted(
        self, tp: TopicPartition, offset: int, max_bytes: int, in_place: bool = False
    ) -> FetchedPartition:
        view = self.view(tp)
        found = view.read(offset, max_bytes)
        records: bytes | memoryview
        if in_place and _below_recovery_point(view, found.segment_base_offset):
            records = self._in_place = found.records
        else:
            records = _copied(found.records)
        return FetchedPartition(tp, offset, records, view.high_watermark, -1, view.log_start_offset)

    def _release_in_place(self) -> None:
        records, self._in_place = self._in_place, None
        if records is not None:
            release_mapped_pages(records)

    # -- bytes of the log --------------------------------------------------------------------------

    def byte_cut(
        self,
        tp: TopicPartition,
        start: int,
        end: int,
        max_bytes: int,
        *,
        min_one_batch: bool = False,
    ) -> ByteCut:
        """Exact (see :meth:`FetchSource.byte_cut`): positions from the offset index of each
        segment the range spans, the cut from a walk of at most about ``index.interval.bytes``
        of batches after an index entry. Bytes count whole batches, from the one holding
        ``start`` to the one before the batch holding ``end``."""
        if max_bytes < 0:
            raise ValueError(f"max_bytes must not be negative, not {max_bytes}")
        if end <= start:
            return ByteCut(start, 0)
        view = self.view(tp)

        def cut_in(bases: list[int]) -> ByteCut:
            return byte_cut_in(view, bases, start, end, max_bytes, min_one_batch)

        return view.with_listing(cut_in, start, f"measuring offsets {start} to {end}")

    def byte_cuts(self, tp: TopicPartition, start: int, end: int, max_bytes: int) -> list[int]:
        """Exact positions (see :meth:`FetchSource.byte_cuts`). Candidate cuts are segment
        starts and, from each offset index entry (the last offset ``o`` of the batch starting
        at byte ``p``), the offset ``o + 1`` at about ``p``: the batch after it. A cut is made
        at the first candidate past each multiple of ``max_bytes`` from the range's start, so
        pieces are about ``max_bytes`` (give or take ``index.interval.bytes`` and one batch)."""
        if max_bytes < 1:
            raise ValueError(f"max_bytes must be positive, not {max_bytes}")
        return cuts_of(self._cut_candidates(tp, start, end), start, end, max_bytes)

    def _cut_candidates(
        self, tp: TopicPartition, start: int, end: int
    ) -> tuple[np.ndarray, np.ndarray, int] | None:
        """Candidate cut offsets, their byte positions counted from the first segment the
        range spans, and the position of ``start``; ``None`` when no segment spans it."""
        view = self.view(tp)
        return view.with_listing(
            lambda bases: cut_candidates(view, bases, start, end),
            start,
            f"indexing offsets {start} to {end}",
        )

    # -- lifetime ----------------------------------------------------------------------------------

    def close(self) -> None:
        self._release_in_place()
        views, self._views = self._views, {}
        for v in views.values():
            v.close()

    def __enter__(self) -> LogDirFetchSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"LogDirFetchSource({self._descriptor.path!r})"


def _last_boundary(seg: Any, lo: int, hi: int, target: int) -> tuple[int, int] | None:
    """``(offset, position)`` of the last batch boundary of ``seg`` in ``(lo, min(hi, target)]``
    (the offset after the batch ending there, its end position), ``None`` when the batch at
    ``lo`` already ends past ``target``. The offset index gives the last entry at or before
    ``target``; the walk from there reads at most about ``index.interval.bytes`` of batches."""
    positions = seg.offset_index.positions()
    slot = int(np.searchsorted(positions, target, side="right")) - 1
    begin = max(lo, int(positions[slot])) if slot >= 0 else lo
    found = None
    for b in seg.batches(begin, hi):
        ends = b.position + b.size_in_bytes
        if ends > target:
            if found is None and b.position > lo:
                found = (b.base_offset, b.position)  # the batch before it ends where it starts
            break
        found = (b.last_offset + 1, ends)
    return found


def _segment_at(view: PartitionReader, offset: int) -> LogSegment | None:
    """The segment of the view's listing holding ``offset`` (None: below every one)."""
    bases = view.base_offsets
    i = bisect.bisect_right(bases, offset)
    return view.segment(bases[i - 1]) if i else None


def _check_not_truncated(view: PartitionReader, offset: int) -> None:
    """:class:`SegmentTruncatedError` when the ``.log`` holding ``offset`` is shorter than it
    was when mapped (the same file: a swapped or deleted one keeps its mapping readable)."""
    try:
        seg = _segment_at(view, offset)
        st = os.stat(seg.log_path) if seg is not None else None
    except FileNotFoundError:
        return  # gone: the read re-lists the directory
    if (
        seg is not None
        and st is not None
        and st.st_size < seg.size_in_bytes
        and ((st.st_dev, st.st_ino) == seg.file_id)
    ):
        raise SegmentTruncatedError(
            f"{seg.log_path} is shorter than when it was opened (truncated by another process: "
            f"recovery, or a replica's truncation): fetch at offset {offset} of "
            f"{view.topic_partition}; open the log dir again"
        )


def _below_recovery_point(view: PartitionReader, base_offset: int) -> bool:
    """Does the segment based at ``base_offset`` end at or below the view's recovery point?"""
    return base_offset >= 0 and view.segment(base_offset).next_offset <= view.recovery_point


def _copied(records: bytes | memoryview) -> bytes:
    """The fetched records as bytes of their own; the mapping's pages they came from released."""
    out = bytes(records)
    release_mapped_pages(records)
    return out


def byte_cut_in(
    view: IndexedSegments,
    bases: list[int],
    start: int,
    end: int,
    max_bytes: int,
    min_one_batch: bool,
) -> ByteCut:
    """:meth:`LogDirSource.byte_cut` over one listing of the segments (``bases``); also the
    object store's (its segments answer ``position_of``, ``next_offset``, ``offset_index`` and
    ``batches(start, end)`` from ranged reads)."""
    cut, used = start, 0
    for base in bases[max(bisect.bisect_right(bases, start) - 1, 0) :]:
        if base >= end:
            break
        seg = view.segment(base)
        lo = seg.position_of(start) if start > base else 0
        hi = seg.position_of(end)
        if hi <= lo:
            continue
        if used + hi - lo <= max_bytes:
            used += hi - lo
            cut = min(end, seg.next_offset)
            continue
        found = _last_boundary(seg, lo, hi, lo + max_bytes - used)
        if found is None and min_one_batch and cut == start:
            first = next(seg.batches(lo, hi))
            found = (first.last_offset + 1, lo + first.size_in_bytes)
        if found is not None:
            cut, used = min(end, found[0]), used + found[1] - lo
        break
    return ByteCut(cut, used)


def cuts_of(
    candidates: tuple[np.ndarray, np.ndarray, int] | None, start: int, end: int, max_bytes: int
) -> list[int]:
    """The cuts of :meth:`LogDirFetchSource.byte_cuts` from ``candidates`` (offsets, their
    positions, the position of ``start``: :func:`cut_candidates`); also the object store's."""
    if candidates is None:
        return []
    cand, pos, start_position = candidates
    keep = np.ones(len(cand), bool)
    keep[1:] = cand[1:] > np.maximum.accumulate(cand)[:-1]  # strictly increasing only
    keep &= (cand > start) & (cand < end)
    cand, pos = cand[keep], pos[keep]
    bucket = (pos - start_position) // max_bytes
    rises = np.flatnonzero(np.diff(np.concatenate([[0], bucket])) > 0)
    return [int(c) for c in cand[rises]]


class IndexedSegments(Protocol):
    """What :func:`cut_candidates` and :func:`byte_cut_in` read of a partition: a segment by
    base offset, with its ``offset_index`` and ``size_in_bytes`` (and for a cut its
    ``position_of``, ``next_offset`` and ``batches``): a read-only view, or the object store's
    partition."""

    def segment(self, base_offset: int, /) -> Any: ...


def cut_candidates(
    view: IndexedSegments, bases: list[int], start: int, end: int
) -> tuple[np.ndarray, np.ndarray, int] | None:
    """:meth:`LogDirSource._cut_candidates` over one listing of the segments (``bases``)."""
    offsets: list[np.ndarray] = []
    positions: list[np.ndarray] = []
    start_position = None
    consumed = 0  # bytes of the segments before the current one (from the range's first)
    for i, base in enumerate(bases):
        following = bases[i + 1] if i + 1 < len(bases) else None
        if following is not None and following <= start:
            continue
        if base >= end:
            break
        seg = view.segment(base)
        index = seg.offset_index
        if start_position is None:
            start_position = index.lookup(start).position if start > base else 0
        offsets += [np.array([base], np.int64), index.offsets().astype(np.int64) + 1]
        positions += [np.array([consumed], np.int64), index.positions().astype(np.int64) + consumed]
        consumed += seg.size_in_bytes
    if not offsets:
        return None
    return np.concatenate(offsets), np.concatenate(positions), start_position or 0
