"""Reading a partition's log (Kafka's ``LocalLog``): the one reader of the broker's log
(unified_log.py) and of the read-only view of a log dir (partition_reader.py).

A :class:`LocalLog` holds the segments of one partition through a :class:`SegmentAccess`, the
policy of how they are listed and opened, and implements every read once:

- :meth:`LocalLog.read`: Kafka's ``LocalLog.read`` over one listing of segments: the slice of
  the first segment, from the one holding the fetch offset on, that has a batch ending at or
  after it, bounded by the position of the batch holding the upper offset
  (``LogSegment.position_of``). A segment passed over because it holds nothing at or after the
  offset must end in whole batches unless it is the last one (``LogSegment.check_tail``): no
  read skips the rest of a corrupt segment.
- :meth:`LocalLog.fetch`: the read a Fetch request makes (fetch_data_info.py): the range check
  (:class:`OffsetOutOfRangeError` outside ``[log start, log end]``), the upper bound chosen once
  from the :class:`FetchIsolation` (:meth:`LogOffsets.upper`: log end offset, high watermark or
  last stable offset), the bytes copied, and for ``TXN_COMMITTED`` the aborted transactions
  overlapping ``[fetch offset, end of the complete batches read)``. The pages of the segment's
  mapping the read touched (header walks, the copy) are released afterwards
  (``open_files.release_mapped_pages``; :data:`_TOUCHED_AROUND` either side of the bytes read:
  the walk from the offset index's entry, at most a batch ahead, and the kernel's fault-around):
  a server's resident memory stays about one fetch, not the size of the segments its consumers
  read. Unlike Kafka's, the bytes end after the last
  whole batch (:func:`whole_batches`): Kafka sends the partial batch a byte limit cut, which
  every client drops and fetches again in the next request (a quarter of the bytes of a
  consumer's 1 MiB fetches of 0.6 MB batches). A first batch larger than the limit is still sent
  whole (KIP-74, ``min_one_message``) or cut (a later partition of the response), as Kafka does.
- :meth:`LocalLog.aborted_transactions`: Kafka's rule: the ``.txnindex`` of the segment holding
  the fetch offset and of later ones until an entry's LSO reaches the upper bound. A
  ``TXN_COMMITTED`` fetch at or past its bound (the last stable offset) answers none, as Kafka's
  empty read does, even when a transaction overlaps that offset.
- :meth:`LocalLog.batches` and :meth:`LocalLog.transactional_batches`: the batches of an offset
  range across segments (the latter only the transactional ones, found by the header
  walk, without a Python object per other batch), with the same tail checks.
- :meth:`LocalLog.offset_by_timestamp`: Kafka's ListOffsets by timestamp (the first segment with
  a record at or after the timestamp answers; later ones are tried when the records reaching it
  lie below the log start offset).
- :func:`header_tables`: batch headers of raw bytes, scanned by the one header walk
  (``entry_scan.walk_entries``, compiled once this process has loaded the kernels),
  ``_SCAN_WINDOW_BYTES`` at a time, so memory stays bounded and no Python object is made per
  batch.
- :func:`end_of_complete_batches`: the offset after the last whole batch of fetched bytes (the
  upper bound of the aborted transactions a ``TXN_COMMITTED`` fetch returns).

The policies (:class:`SegmentAccess`): the broker's (unified_log.py: its open segments, the
active one seen through the writer's in-memory indexes; one listing, nothing ever stale under
the log's lock) and the read-only view's (partition_reader.py: re-listing the directory when a
concurrent cleaner swap or retention took a file away, and ``.txnindex`` reads checked against
the ``.log`` they belong to). A policy runs each operation
(:meth:`SegmentAccess.attempt` for one-shot reads, :meth:`SegmentAccess.resume` for walks that
go on after the last segment they finished) and tells whether a segment read is still in place.

Thread safety: a :class:`LocalLog` keeps no state of its own; it is as thread-safe as its policy
(the broker's is used under the log's lock; the view's is safe for any number of threads).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

import numpy as np

from broker_embedded.errors import OffsetOutOfRangeError
from broker_embedded.record import entry_scan as es
from broker_embedded.record.entry_scan import (
    NO_TARGET,
    SEEK_END,
    SEEK_PARTIAL,
    last_offset,
    scan_window,
)
from broker_embedded.record.entry_scan import seek as seek_entry  # compiled when loaded
from broker_embedded.record.header_reads import readonly_bytes
from broker_embedded.record.record_batch import TRANSACTIONAL_MASK, RecordBatch
from broker_embedded.record.records import AnyBatch
from broker_embedded.storage.fetch_data_info import FetchDataInfo, FetchIsolation, SegmentRegion
from broker_embedded.storage.log_segment import FetchSlice, LogSegment, TimestampAndOffset
from broker_embedded.storage.log_segments import LogSegments
from broker_embedded.storage.open_files import release_mapped_pages
from broker_embedded.storage.topic_partition import TopicPartition
from broker_embedded.storage.transaction_index import AbortedTxn, TxnIndexSearchResult

T = TypeVar("T")
B = TypeVar("B")

# Bytes of batches whose headers one scan call covers (a module variable so that tests can make
# windows cut batches without writing megabytes); a batch larger than it gets a wider window.
_SCAN_WINDOW_BYTES = 4 * 1024 * 1024
# what a fetch's read may touch either side of its bytes: the walk from the offset index's entry
# (at most one batch, within max.message.bytes' default of about 1 MiB, plus the index interval)
# and the kernel's fault-around (64 KiB)
_TOUCHED_AROUND = 2 << 20

# Called after each segment a walk read to its end (after its tail check): where a policy that
# re-lists resumes a walk.
Walked = Callable[[LogSegment], None]


class SegmentAccess(Protocol):
    """How a :class:`LocalLog` lists and opens its segments (see the module docstring)."""

    @property
    def recovery_point(self) -> int: ...

    def listing(self) -> LogSegments:
        """The current listing of the segments."""

    def segment(self, base_offset: int) -> LogSegment:
        """The segment based at ``base_offset``, opened on first use."""

    def attempt(self, op: Callable[[LogSegments], T], offset: int | None, what: str) -> T:
        """``op(listing)``, again on a new listing when a file it needed went away."""

    def resume(
        self, start: int, what: str, walk: Callable[[LogSegments, int, Walked], Iterator[B]]
    ) -> Iterator[B]:
        """``walk(listing, start, walked)``, going on from after the last segment it finished
        (``walked``) on a new listing when a file it needed went away."""

    def collect_aborted(
        self, seg: LogSegment, fetch_offset: int, upper: int
    ) -> TxnIndexSearchResult:
        """The aborted transactions of the ``.txnindex`` of ``seg`` overlapping ``[fetch_offset,
        upper)`` (``LogSegment.collect_aborted``; a missing file holds none)."""

    def check_in_place(self, seg: LogSegment) -> None:
        """Raise (for :meth:`attempt` to retry) when the ``.log`` of ``seg`` was replaced since
        it was opened."""


@dataclass(frozen=True, slots=True)
class LogOffsets:
    """The offsets bounding a fetch: log start, high watermark, log end, and the last stable
    offset (-1 when not computed: only a ``TXN_COMMITTED`` fetch needs it)."""

    log_start_offset: int
    high_watermark: int
    log_end_offset: int
    last_stable_offset: int = -1

    def upper(self, isolation: FetchIsolation) -> int:
        """The upper bound of a read with ``isolation`` (Kafka's ``FetchIsolation``)."""
        if isolation is FetchIsolation.LOG_END:
            return self.log_end_offset
        if isolation is FetchIsolation.HIGH_WATERMARK:
            return self.high_watermark
        assert self.last_stable_offset >= 0, "a TXN_COMMITTED fetch needs the LSO"
        return self.last_stable_offset


def _empty_slice(fetch_offset: int) -> FetchSlice:
    return FetchSlice(fetch_offset, -1, 0, memoryview(b""))


class LocalLog:
    """The reads of one partition's segments; see the module docstring."""

    __slots__ = ("topic_partition", "directory", "access")

    def __init__(
        self, topic_partition: TopicPartition, directory: Path, access: SegmentAccess
    ) -> None:
        self.topic_partition = topic_partition
        self.directory = directory
        self.access = access

    def __repr__(self) -> str:
        return f"LocalLog({self.topic_partition}, {str(self.directory)!r})"

    # -- reads -------------------------------------------------------------------------------------

    def check_range(self, offset: int, offsets: LogOffsets) -> None:
        """:class:`OffsetOutOfRangeError` unless ``log start <= offset <= log end``."""
        if not offsets.log_start_offset <= offset <= offsets.log_end_offset:
            tp = self.topic_partition
            raise OffsetOutOfRangeError(
                f"fetch offset {offset} of topic {tp.topic!r} partition {tp.partition} is outside "
                f"[{offsets.log_start_offset}, {offsets.log_end_offset}] (log start, log end) in "
                f"{self.directory}"
            )

    def read(
        self, fetch_offset: int, max_bytes: int, upper: int, min_one_message: bool = True
    ) -> FetchSlice:
        """Raw batch bytes from the batch holding ``fetch_offset``, below ``upper`` (an empty
        slice at or above it); see the module docstring."""
        if fetch_offset >= upper:
            return _empty_slice(fetch_offset)
        return self.access.attempt(
            lambda segs: self._read_in(segs, fetch_offset, max_bytes, upper, min_one_message)[0],
            fetch_offset,
            "reading",
        )

    def _read_in(
        self, segments: LogSegments, fetch_offset: int, max_bytes: int, upper: int, min_one: bool
    ) -> tuple[FetchSlice, LogSegment | None]:
        """:meth:`read` on one listing, and the segment read (``None``: nothing found)."""
        if fetch_offset >= upper:
            return _empty_slice(fetch_offset), None
        access = self.access
        for base in segments.from_floor(fetch_offset):
            if base >= upper:
                break
            seg = access.segment(base)
            found = seg.read(fetch_offset, max_bytes, seg.position_of(upper), min_one)
            if found is not None:
                return found, seg
            seg.check_tail(last=segments.is_last(base), recovery_point=access.recovery_point)
        return _empty_slice(fetch_offset), None

    def fetch(
        self,
        fetch_offset: int,
        max_bytes: int,
        isolation: FetchIsolation,
        offsets: LogOffsets,
        *,
        min_one_message: bool = True,
        zero_copy: bool = False,
    ) -> FetchDataInfo:
        """A Fetch request's read (module docstring): the records and, for ``TXN_COMMITTED``,
        the aborted transactions, both from the same files (the policy retries the whole
        fetch when the segment read was replaced before its ``.txnindex`` was read).
        ``zero_copy``: the records are not copied; ``region`` names them in the segment file
        (the aborted transactions' bound is still found by a header scan of the mapping)."""
        self.check_range(fetch_offset, offsets)
        upper = offsets.upper(isolation)
        committed = isolation is FetchIsolation.TXN_COMMITTED

        def attempt(segments: LogSegments) -> FetchDataInfo:
            found, seg = self._read_in(segments, fetch_offset, max_bytes, upper, min_one_message)
            readable = len(found.records)
            if seg is not None:
                found = whole_batches(seg, found)
            aborted = None
            if committed and fetch_offset >= upper:
                aborted = ()  # Kafka's empty read at (or past) the bound: none
            elif committed:
                start = 0 if seg is None else last_indexed_start(seg, found)
                end = end_of_complete_batches(found.records, upper, start)
                aborted = self._aborted_in(segments, fetch_offset, end)
                if seg is not None:
                    self.access.check_in_place(seg)
            region = None
            if zero_copy and seg is not None and len(found.records):
                region = SegmentRegion(seg.source, seg.file_id, found.position, len(found.records))
            records = b"" if region is not None else bytes(found.records)
            release_mapped_pages(found.records, _TOUCHED_AROUND)  # a copy or a region now
            return FetchDataInfo(
                fetch_offset,
                records,
                offsets.high_watermark,
                offsets.last_stable_offset,
                offsets.log_start_offset,
                offsets.log_end_offset,
                aborted,
                found.first_entry_incomplete,
                region,
                readable,
            )

        return self.access.attempt(attempt, fetch_offset, "fetching")

    def aborted_transactions(
        self, fetch_offset: int, upper_bound_offset: int
    ) -> tuple[AbortedTxn, ...]:
        """The aborted transactions overlapping ``[fetch_offset, upper_bound_offset)`` (module
        docstring)."""
        return self.access.attempt(
            lambda segs: self._aborted_in(segs, fetch_offset, upper_bound_offset),
            fetch_offset,
            "collecting aborted transactions",
        )

    def _aborted_in(
        self, segments: LogSegments, fetch_offset: int, upper_bound_offset: int
    ) -> tuple[AbortedTxn, ...]:
        found: list[AbortedTxn] = []
        for base in segments.from_floor(fetch_offset):
            seg = self.access.segment(base)
            result = self.access.collect_aborted(seg, fetch_offset, upper_bound_offset)
            found += result.aborted_txns
            if result.is_complete:
                break
        return tuple(found)

    def batches(self, start: int, end: int, what: str = "reading batches") -> Iterator[AnyBatch]:
        """Every batch holding an offset in ``[start, end)``, whole, across segments (never a
        batch twice, also when the policy resumes the walk on a new listing)."""

        def in_segment(seg: LogSegment, first: int) -> Generator[AnyBatch, None, bool]:
            found = seg.translate_offset(first)
            if found is not None:
                for b in seg.batches(found.position, seg.end_of_batches):
                    if b.base_offset >= end:
                        return True
                    yield b
            return False

        return self._resumed_walk(start, end, what, in_segment)

    def transactional_batches(self, start: int, end: int) -> Iterator[RecordBatch]:
        """The transactional batches (data and markers) from the one holding ``start`` whose
        base offset is below ``end``, found by a header scan (a Python object only for them)."""

        def in_segment(seg: LogSegment, first: int) -> Generator[RecordBatch, None, bool]:
            found = seg.read(first, seg.size_in_bytes, seg.end_of_batches, True)
            if found is None:
                return False
            view = found.records
            for table in header_tables(view, seg.source, found.position):
                # a legacy entry's offset field is its last offset; never transactional
                below = table[:, es.S_OFFSET] < end
                txn = below & (table[:, es.S_MAGIC] == 2)
                txn &= (table[:, es.S_ATTR] & TRANSACTIONAL_MASK) != 0
                for pos, size in table[txn][:, [es.S_POS, es.S_SIZE]].tolist():
                    yield RecordBatch(view[pos : pos + size], seg.source, found.position + pos)
                if not below.all():
                    return True
            return False

        return self._resumed_walk(start, end, "scanning transactions", in_segment)

    def _resumed_walk(
        self,
        start: int,
        end: int,
        what: str,
        in_segment: Callable[[LogSegment, int], Generator[B, None, bool]],
    ) -> Iterator[B]:
        """The segments from the one holding ``start`` below ``end``, each given to
        ``in_segment(segment, start)``, which yields what it finds and returns whether it
        reached ``end``; a segment read to its end gets its tail check. The policy resumes the
        walk after the last segment finished when a file went away."""
        access = self.access

        def walk(segments: LogSegments, first: int, walked: Walked) -> Iterator[B]:
            for base in segments.from_floor(first):
                if base >= end:
                    return
                seg = access.segment(base)
                if (yield from in_segment(seg, first)):
                    return
                seg.check_tail(last=segments.is_last(base), recovery_point=access.recovery_point)
                walked(seg)

        return access.resume(start, what, walk)

    def offset_by_timestamp(
        self, timestamp: int, log_start_offset: int, below: int | None = None
    ) -> TimestampAndOffset | None:
        """Kafka's ListOffsets by timestamp: the first record at or after ``timestamp`` whose
        offset is at least ``log_start_offset`` (and below ``below`` when given), from the first
        segment holding one (``None``: none does). Segments passed over get their tail check,
        as they would be read past."""

        def attempt(segments: LogSegments) -> TimestampAndOffset | None:
            for base in segments:
                seg = self.access.segment(base)
                seg.check_tail(
                    last=segments.is_last(base), recovery_point=self.access.recovery_point
                )
                if seg.largest_timestamp >= timestamp:
                    found = seg.find_offset_by_timestamp(timestamp, max(log_start_offset, base))
                    if found is not None:
                        return found if below is None or found.offset < below else None
            return None

        return self.access.attempt(attempt, None, f"looking up timestamp {timestamp}")


def header_tables(buf: bytes | memoryview, source: str, position: int) -> Iterator[np.ndarray]:
    """Scan tables (``entry_scan.SCAN_FIELDS`` int64 columns, one row per complete entry,
    positions relative to ``buf``) of the entries of ``buf``, one window at a time. A partial
    last entry ends the walk; a corrupt entry is a :class:`CorruptRecordError` (``position`` is
    the file position of ``buf[0]``, for the message)."""
    arr = readonly_bytes(buf)
    pos, end = 0, len(arr)
    stop = min(end, _SCAN_WINDOW_BYTES)
    while pos < end:
        scanned = scan_window(arr, pos, stop, source, position)
        if not len(scanned.table):
            if stop == end:
                return  # a partial entry at the end
            stop = min(end, pos + max(scanned.needed, 2 * (stop - pos)))  # widen for a big batch
            continue
        yield scanned.table
        pos = scanned.end
        stop = min(end, pos + _SCAN_WINDOW_BYTES)


def last_indexed_start(seg: LogSegment, found: FetchSlice) -> int:
    """Where, in ``found.records``, the last batch the offset index names before the slice's
    last byte starts (0 when none does): a batch start at or before the last batch's."""
    size = len(found.records)
    if not size:
        return 0
    return max(found.position, seg.offset_index.floor_position(found.position + size - 1)) - (
        found.position
    )


def whole_batches(seg: LogSegment, found: FetchSlice) -> FetchSlice:
    """``found`` without the partial batch a byte limit cut at its end. The scan starts at the
    offset index's last batch start below the cut, so it covers about ``index.interval.bytes``
    whatever the fetch size. A slice whose only batch is partial is returned as it is."""
    size = len(found.records)
    if found.first_entry_incomplete or not size:
        return found
    start = max(found.position, seg.offset_index.floor_position(found.position + size))
    end = start - found.position
    status, cut, _, _ = seek_entry(readonly_bytes(found.records), end, size, NO_TARGET)
    if status == SEEK_END:
        return found
    if status == SEEK_PARTIAL:  # cut where the partial batch starts
        return (
            found
            if cut == 0
            else FetchSlice(
                found.fetch_offset, found.segment_base_offset, found.position, found.records[:cut]
            )
        )
    for table in header_tables(found.records[end:], seg.source, start):  # the errors
        end = start - found.position + int(table[-1, es.S_POS] + table[-1, es.S_SIZE])
    if end == size or end == 0:
        return found
    return FetchSlice(
        found.fetch_offset, found.segment_base_offset, found.position, found.records[:end]
    )


def end_of_complete_batches(records: bytes | memoryview, default: int, start: int = 0) -> int:
    """The offset after the last complete batch of a read, ``default`` when it holds none; the
    walk starts at ``start``, a batch start at or before the last complete batch's (a segment
    read's: :func:`last_indexed_start`, so a fetch walks about ``index.interval.bytes`` of
    headers whatever its size)."""
    last = None
    for table in header_tables(memoryview(records)[start:], "<fetched records>", start):
        last = last_offset(table, -1)
    return default if last is None else last + 1
