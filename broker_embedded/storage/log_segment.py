"""One log segment: its ``.log`` file, its two indexes and its ``.txnindex``, for reading and, open
for appending (the active segment of a broker's log), for appending (Kafka's ``LogSegment``).

Files of the segment whose base offset is B, in its partition directory (B as 20 decimal digits,
zero-padded)::

    0000000000000000000B.log        the batches back to back (magic 0, 1 or 2), nothing else
    0000000000000000000B.index      offset index (see offset_index.py)
    0000000000000000000B.timeindex  time index (see time_index.py)
    0000000000000000000B.txnindex   aborted transactions (see transaction_index.py; may not exist)

Invariants relied on: every batch's offsets are >= B and increase down the file (not
necessarily contiguously); the indexes point at batch starts and obey the rules of
``segment_indexer.py``.

Opening for reading maps the ``.log`` read-only, keeping no file descriptor (open_files.py; its size
is fixed at open: a view of a segment another process appends to ends where the file ended then; a
partial batch at the end is ignored, as in a fetch) and loads the indexes (the batches after the
offset index's last entry, which give the segment's end, are read with one ``pread`` when they
take at most 64 KiB, so that opening a small segment touches no mapped page). A missing index
file, one that Kafka's sanity check rejects or that contradicts the ``.log`` (its last entry is not
a batch start, points past the file, names an offset the file does not hold; an entry points at a
batch based above its offset, which would make reads skip the batches before it) is rebuilt in
memory from the ``.log`` with Kafka's recovery rules; a zero-filled preallocated tail is simply not
part of the entries. A segment opened for reading never writes, truncates or renames any file:
``index_status`` tells what happened.

Reads follow Kafka: ``translate_offset`` looks the offset up in the offset index, then scans
batch headers forward to the first batch whose last offset is >= the target (the one header walk,
``entry_scan.seek``, over v2 headers up to the end of the complete batches; anything it
does not answer plainly, legacy entries and corruption included, is walked again in Python,
which names the error); ``read`` returns
the bytes from that batch's start, at most ``max_bytes`` (at least that whole batch when
``min_one_message``, KIP-74) and never past ``max_position``; the slice may end in a partial
batch, which a consumer drops.

A partial batch may end only the last segment of a log, above its recovery point: that is a torn
write (a crash during an append, or a writer appending while this view opened) and a read stops
before it. Anywhere else, bytes after the last complete batch (typically an impossible length
field, e.g. 0x7fffffff, which makes a batch reach past the end of the file) are corruption:
``check_tail`` raises :class:`CorruptRecordError` naming the file, the position and the offset,
and every read that reaches that point calls it, so no read skips the rest of the segment.

Appending (the active segment: created, reopened or recovered; whole checked batches, index
entries written in groups, a failed write cut back): active_segment.py. The file names:
log_file_utils.py.

File descriptors: each of the three files is opened by the first write to it (the ``.log`` by
the first append, an index file by its first new entry) and kept until the segment closes, as
Kafka opens indexes lazily: opening a log dir keeps no descriptor per partition, so that
thousands of partitions open under a small ``ulimit -n`` (one written to holds up to three); a
limit still reached is a :class:`TooManyOpenFilesError` naming the file and the limit
(open_files.py). Flushing fsyncs only the files written since the last flush.

The ``.txnindex`` (``txn_index``, read again on every read, opened by its first append) is the one
file the log may append to in any segment, open for appending or not, as Kafka's
``updateTxnIndex`` does: an abort marker written to the active segment, or one replayed by
recovery into an older one. :meth:`flush` fsyncs it when it was written, and closing a segment
flushes and closes it (abandoning closes it without fsync).

Thread safety: a segment opened for reading is immutable after opening; any number of threads
may read. A segment open for appending is used under its log's lock (one writer per partition
directory, which holds the log dir lock); readers in other processes see each append as soon as
:meth:`append` returns (unbuffered writes); durability needs :meth:`flush`. Returned memoryviews
point into the mapping and stay valid while referenced (closing defers the unmap until they are
released). Never let a writer truncate a ``.log`` that a reader has mapped: touching mapped
bytes past the new end of a file raises SIGBUS. Kafka truncates only above the high watermark,
and the cleaner replaces whole files by rename, which keeps the mapped inode intact.
"""

from __future__ import annotations

import os
import struct
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np

from broker_embedded.errors import (
    CorruptRecordError,
    IndexCorruptError,
    InvalidOffsetError,
)
from broker_embedded.record.entry_scan import SEEK_END, SEEK_FOUND
from broker_embedded.record.entry_scan import seek as seek_entry  # compiled when loaded
from broker_embedded.record.header_reads import readonly_bytes
from broker_embedded.record.record_batch import RecordBatch
from broker_embedded.record.records import AnyBatch, iter_batches
from broker_embedded.storage.active_segment import ActiveSegment, AppendState
from broker_embedded.storage.checkpoint_file import fsync_dir
from broker_embedded.storage.log_file_utils import (
    LOG_SUFFIX,
    file_id_of,
    parse_segment_log_name,
    segment_file_stem,
    txn_index_of,
)
from broker_embedded.storage.offset_index import INDEX_SUFFIX, OffsetIndex
from broker_embedded.storage.open_files import (
    map_descriptor,
    map_read_only,
    open_read_only,
    release_mapped_pages,
)
from broker_embedded.storage.segment_indexer import DEFAULT_INDEX_INTERVAL_BYTES, SegmentIndexer
from broker_embedded.storage.time_index import NO_TIMESTAMP, TIME_INDEX_SUFFIX, TimeIndex
from broker_embedded.storage.transaction_index import TxnIndexSearchResult

_OFFSET_AND_LENGTH = struct.Struct(">qi")  # the base offset and length fields of every entry


@dataclass(frozen=True, slots=True)
class LogOffsetPosition:
    """The batch holding an offset: its last offset, start position and size in bytes."""

    offset: int
    position: int
    size: int


@dataclass(frozen=True, slots=True)
class TimestampAndOffset:
    """The first record at or after a target timestamp (ListOffsets by timestamp)."""

    timestamp: int
    offset: int
    leader_epoch: int | None


@dataclass(frozen=True, slots=True, eq=False)
class FetchSlice:
    """What a fetch read from one segment: raw batch bytes starting at ``position``.

    ``records`` may begin with records below ``fetch_offset`` and may end in a partial batch;
    ``first_entry_incomplete`` says that even the first batch was cut by ``max_bytes``. An empty
    read that found no segment has ``segment_base_offset`` -1.
    """

    fetch_offset: int
    segment_base_offset: int
    position: int
    records: memoryview
    first_entry_incomplete: bool = False

    @property
    def size_in_bytes(self) -> int:
        return len(self.records)


# A tail this short (after the offset index's last entry: normally at most index.interval.bytes
# and one append's batches) is read with one pread when a segment opens, not walked in the mapping
_PREAD_TAIL_BYTES = 64 << 10
# The mapping of a segment open for appending reaches this far past its end, or twice its size
# (at most segment.bytes), so that reads of what appends add slice it instead of mapping again.
_MIN_RESERVATION = 8 << 20
_CHECK_CHUNK = 64  # index entries checked between two releases of the pages their headers touched


class LogSegment(ActiveSegment):
    """One segment, opened for reading or open for appending; see the module docstring.

    ``size_in_bytes`` is the ``.log`` size at open; ``end_of_batches`` where its last complete
    batch ends (smaller only when the file ends in a partial batch); ``next_offset`` the offset
    after its last batch (``base_offset`` when it holds none); ``largest_timestamp`` the largest
    batch max timestamp (-1 if none); ``file_id`` the ``(st_dev, st_ino)`` of the ``.log`` that
    was opened, so that a caller can tell whether the path still names that file (a cleaner
    swap puts another file under the same name). ``index_status`` says how the indexes were
    loaded, rebuilt, or (open for appending) how the segment was opened. ``indexer`` (open for
    appending only) adds the index entries of appends.
    """

    __slots__ = (
        "base_offset",
        "log_path",
        "index_interval_bytes",
        "offset_index",
        "time_index",
        "index_status",
        "size_in_bytes",
        "end_of_batches",
        "next_offset",
        "largest_timestamp",
        "file_id",
        "indexer",
        "txn_index",
        "_buf",
        "_append",
    )

    def __init__(
        self,
        log_path: str | Path,
        *,
        index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
    ) -> None:
        self.log_path = log_path if isinstance(log_path, Path) else Path(log_path)
        base = parse_segment_log_name(self.log_path.name)
        if base is None:
            raise ValueError(f"{self.log_path} is not a segment file name (<20 digits>.log)")
        self.base_offset = base
        self.index_interval_bytes = index_interval_bytes
        self.txn_index = txn_index_of(self.log_path, base)
        self._append: AppendState | None = None
        fd = open_read_only(self.log_path)
        try:
            st = os.fstat(fd)
            self._buf = map_descriptor(fd, st.st_size, self.log_path)
            self.file_id = file_id_of(st)
            self.size_in_bytes = st.st_size
            self._load_indexes(fd)
        finally:
            os.close(fd)

    @classmethod
    def open(
        cls,
        directory: str | Path,
        base_offset: int,
        *,
        index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
    ) -> LogSegment:
        directory = directory if isinstance(directory, Path) else Path(directory)
        path = directory / (segment_file_stem(base_offset) + LOG_SUFFIX)
        return cls(path, index_interval_bytes=index_interval_bytes)

    # -- files -------------------------------------------------------------------------------------

    @property
    def source(self) -> str:
        return str(self.log_path)

    @property
    def offset_index_path(self) -> Path:
        return self.log_path.with_suffix(INDEX_SUFFIX)

    @property
    def time_index_path(self) -> Path:
        return self.log_path.with_suffix(TIME_INDEX_SUFFIX)

    @property
    def last_offset(self) -> int:
        """The last offset held (``base_offset - 1`` when the segment holds no batch)."""
        return self.next_offset - 1

    @property
    def is_empty(self) -> bool:
        return self.size_in_bytes == 0

    # -- indexes -----------------------------------------------------------------------------------

    def _load_indexes(self, fd: int) -> None:
        """Load and check the indexes (module docstring), or rebuild them; ``fd``: the
        ``.log`` mapped, from which a short tail is read without touching the mapping."""
        stem = self.source[: -len(LOG_SUFFIX)]
        touched = True
        try:
            oi = OffsetIndex.load(stem + INDEX_SUFFIX, self.base_offset)
            ti = TimeIndex.load(stem + TIME_INDEX_SUFFIX, self.base_offset)
            touched = self._adopt(oi, ti, fd)
            self.index_status = "loaded"
        except FileNotFoundError as e:
            self._rebuild(f"rebuilt: {Path(str(e.filename)).name} is missing")
        except (IndexCorruptError, CorruptRecordError) as e:
            self._rebuild(f"rebuilt: {e}")
        # the checks and a rebuild touched batch headers all over the file (each fault maps a
        # window of pages around it): without this, opening a segment of 1 MB batches made about
        # 64 KB per batch resident in this process, of small batches the whole file
        if touched:
            release_mapped_pages(self._buf)

    def _adopt(self, oi: OffsetIndex, ti: TimeIndex, fd: int) -> bool:
        """Use loaded indexes after checking them against the ``.log``; find the log's end.
        Whether the mapping was touched (a short tail is read from ``fd`` instead)."""
        last = oi.last_entry
        if len(oi) and last.position >= self.size_in_bytes:
            raise IndexCorruptError(
                f"offset index {oi.source}: last entry points at byte {last.position}, "
                f"past the end of {self.source} ({self.size_in_bytes} bytes)"
            )
        self._check_entries_point_at_batches(oi)
        left = self.size_in_bytes - last.position
        if left <= _PREAD_TAIL_BYTES:  # one read instead of faulting pages into the mapping
            tail_bytes = os.pread(fd, left, last.position)
            tail = _Walk(iter_batches(tail_bytes, self.source, base_position=last.position))
        else:
            tail = _Walk(self._scan(last.position))
        next_offset = tail.next_offset if tail.count else self.base_offset
        if len(oi) and not (
            tail.count
            and self.base_offset <= tail.first_base_offset
            and tail.first_last_offset <= last.offset < next_offset
        ):
            raise IndexCorruptError(
                f"offset index {oi.source}: last entry (offset {last.offset}, position "
                f"{last.position}) does not match the batch at that position in {self.source}"
            )
        last_t = ti.last_entry
        if len(ti) and not self.base_offset <= last_t.offset < next_offset:
            raise IndexCorruptError(
                f"time index {ti.source}: offset {last_t.offset} of its last entry is outside "
                f"the offsets [{self.base_offset}, {next_offset - 1}] of {self.source}"
            )
        self.offset_index, self.time_index = oi, ti
        self.next_offset = next_offset
        self.end_of_batches = tail.end if tail.count else last.position
        self.largest_timestamp = max(tail.max_timestamp, last_t.timestamp)
        return bool(len(oi)) or left > _PREAD_TAIL_BYTES

    def _check_entries_point_at_batches(self, oi: OffsetIndex) -> None:
        """Every entry (offset O, position P) must point at a batch whose base offset lies in
        ``[base offset, O]`` (Kafka indexes a batch's last offset at its start): an entry that
        points further on would make reads skip the batches before it."""
        if not len(oi):
            return
        positions = oi.positions()
        if positions[-1] + 8 > self.size_in_bytes:
            return  # none, or the last entry points past the file: _adopt says so
        log = np.frombuffer(self._buf, np.uint8)
        bases = np.empty(len(positions), ">i8")
        for lo in range(0, len(positions), _CHECK_CHUNK):  # releasing the pages touched
            chunk = positions[lo : lo + _CHECK_CHUNK]
            bases[lo : lo + len(chunk)] = (
                log[chunk[:, None] + np.arange(8)].copy().view(">i8").ravel()
            )
            release_mapped_pages(self._buf[: int(chunk[-1]) + 8])
        offsets = oi.offsets()
        bad = np.flatnonzero((bases < self.base_offset) | (bases > offsets))
        if len(bad):
            i = int(bad[0])
            raise IndexCorruptError(
                f"offset index {oi.source}: entry {i} (offset {offsets[i]}, position "
                f"{positions[i]}) points at a batch based at offset {bases[i]} in {self.source}"
            )

    def _rebuild(self, status: str) -> None:
        walk = _Walk(())
        self.offset_index, self.time_index = SegmentIndexer.rebuild(
            walk.track(self._scan(0)),
            self.base_offset,
            index_interval_bytes=self.index_interval_bytes,
            source=self.source,
        )
        self.next_offset = walk.next_offset if walk.count else self.base_offset
        self.end_of_batches = walk.end
        self.largest_timestamp = self.time_index.last_entry.timestamp
        self.index_status = status

    # -- reads -------------------------------------------------------------------------------------

    def _bytes(self) -> memoryview:
        """The mapping of the ``.log``. Open for appending: the written bytes of a mapping
        reserved past the end of the file (``_reservation``), sliced again as appends grow the
        file and mapped again only when they outgrow it (views handed out keep the old mapping
        alive). Nothing past the written bytes is ever touched: a page wholly past the end of
        the file would raise SIGBUS."""
        a = self._append
        if a is not None and len(self._buf) < self.size_in_bytes:
            written = self.size_in_bytes
            if len(a.mapped) < written:
                size = _reservation(written, a.config.segment_bytes)
                a.mapped = map_read_only(self.log_path, size)[0]
            self._buf = a.mapped[:written]
        return self._buf

    def batches(
        self, start_position: int = 0, end_position: int | None = None
    ) -> Iterator[AnyBatch]:
        """The batches (``RecordBatch`` or ``LegacyRecordBatch`` views) in a byte range (whose
        bounds are batch starts). A walk that stops before the end of the complete batches
        (an impossible length in the middle of the segment, behind an index entry that points
        past it) is a :class:`CorruptRecordError`, not an early end."""
        end = self.size_in_bytes if end_position is None else min(end_position, self.size_in_bytes)
        must_reach = min(end, self.end_of_batches)
        position = start_position
        for b in self._scan(start_position, end):
            position = b.position + b.size_in_bytes
            yield b
        if position < must_reach:
            raise CorruptRecordError(
                f"the batch at byte {position} does not fit before the end of the complete "
                f"batches at byte {must_reach}: corrupt, not a torn tail",
                source=self.source,
                position=position,
            )

    def _scan(self, start: int, end: int | None = None) -> Iterator[AnyBatch]:
        """The batches from ``start``, stopping quietly at a partial one (while loading)."""
        stop = self.size_in_bytes if end is None else end
        return iter_batches(self._bytes(), self.source, start=start, end=stop, tail="stop")

    def translate_offset(self, offset: int, starting_position: int = 0) -> LogOffsetPosition | None:
        """The first batch whose last offset is >= ``offset``, or ``None`` past the end."""
        start = max(self.offset_index.lookup(offset).position, starting_position)
        buf = self._bytes()
        end = min(self.end_of_batches, len(buf))
        if start < end:
            status, pos, size, last = seek_entry(readonly_bytes(buf), start, end, offset)
            if status == SEEK_FOUND:
                return LogOffsetPosition(last, pos, size)
            if status == SEEK_END and end == self.size_in_bytes:
                return None
        for b in self.batches(start):  # the rest, and the errors
            if b.last_offset >= offset:
                return LogOffsetPosition(b.last_offset, b.position, b.size_in_bytes)
        return None

    def position_of(self, offset: int) -> int:
        """Where a read bounded by ``offset`` must stop: the start of the batch holding it, the
        end of the batches when ``offset`` lies past them, 0 when it lies before them."""
        if offset >= self.next_offset:
            return self.end_of_batches
        if offset <= self.base_offset:
            return 0
        found = self.translate_offset(offset)
        return self.end_of_batches if found is None else found.position

    def read(
        self,
        start_offset: int,
        max_bytes: int,
        max_position: int | None = None,
        min_one_message: bool = False,
    ) -> FetchSlice | None:
        """Kafka's segment read: bytes from the batch holding ``start_offset``; ``None`` if the
        segment holds no offset >= ``start_offset``."""
        if max_bytes < 0:
            raise ValueError(f"invalid max bytes {max_bytes} reading {self.source}")
        found = self.translate_offset(start_offset)
        if found is None:
            return None
        limit = max(max_bytes, found.size) if min_one_message else max_bytes
        end = self.size_in_bytes if max_position is None else min(max_position, self.size_in_bytes)
        if end <= found.position:
            self._check_straddling(found.position)
        size = max(0, min(end - found.position, limit))
        records = self._bytes()[found.position : found.position + size]
        return FetchSlice(
            start_offset, self.base_offset, found.position, records, limit < found.size
        )

    def _check_straddling(self, position: int) -> None:
        """A read whose first batch also holds its upper bound returns nothing: make sure that
        batch is whole (a flipped lastOffsetDelta makes a batch claim offsets up to the bound
        and would end every read there without an error)."""
        for b in self.batches(position):
            b.ensure_valid()
            return

    def find_offset_by_timestamp(
        self, timestamp: int, starting_offset: int | None = None
    ) -> TimestampAndOffset | None:
        """The first record with timestamp >= ``timestamp`` and offset >= ``starting_offset``."""
        floor = self.base_offset if starting_offset is None else starting_offset
        entry = self.time_index.lookup(timestamp)
        position = self.offset_index.lookup(max(entry.offset, floor)).position
        return first_record_at_or_after(self.batches(position), timestamp, floor)

    # -- checks ------------------------------------------------------------------------------------

    def collect_aborted(self, fetch_offset: int, upper_bound_offset: int) -> TxnIndexSearchResult:
        """The aborted transactions of this segment's ``.txnindex`` overlapping ``[fetch_offset,
        upper_bound_offset)`` (transaction_index.py; a missing file holds none)."""
        return self.txn_index.collect_aborted(fetch_offset, upper_bound_offset)

    def check_tail(self, *, last: bool, recovery_point: int = 0) -> None:
        """Raise :class:`CorruptRecordError` when bytes follow the last complete batch and this
        is not a torn write: a segment that is not the ``last`` of its log, or whose first
        missing offset lies below the ``recovery_point`` (everything below it was fsynced)."""
        if self.end_of_batches >= self.size_in_bytes:
            return
        if last and self.next_offset >= recovery_point:
            return
        left = self.size_in_bytes - self.end_of_batches
        stated = ""
        if left >= _OFFSET_AND_LENGTH.size:
            base, length = _OFFSET_AND_LENGTH.unpack_from(self._bytes(), self.end_of_batches)
            stated = f" (its header says base offset {base}, length {length})"
        where = (
            "a segment that is not the last one"
            if not last
            else (f"the last segment, below its recovery point {recovery_point}")
        )
        raise CorruptRecordError(
            f"the batch at offset {self.next_offset}{stated} does not fit the {left} bytes left "
            f"in {where}: corrupt, not a torn tail",
            source=self.source,
            position=self.end_of_batches,
            base_offset=self.next_offset,
        )

    def verify(self) -> int:
        """Check every batch (CRC, offsets) and every index entry; return the batch count.

        Raises :class:`CorruptRecordError` (bad, torn or out-of-order batch) or
        :class:`IndexCorruptError` (an entry that contradicts the ``.log``).
        """
        positions, bases, lasts, max_ts = (array("q") for _ in range(4))
        prev_last = self.base_offset - 1
        for b in iter_batches(self._bytes(), self.source, tail="error"):
            if not b.is_valid():
                raise CorruptRecordError(
                    "CRC mismatch",
                    source=self.source,
                    position=b.position,
                    base_offset=b.base_offset,
                )
            if b.base_offset <= prev_last or b.last_offset < b.base_offset:
                raise CorruptRecordError(
                    f"offsets [{b.base_offset}, {b.last_offset}] do not follow offset {prev_last}",
                    source=self.source,
                    position=b.position,
                    base_offset=b.base_offset,
                )
            prev_last = b.last_offset
            positions.append(b.position)
            bases.append(b.base_offset)
            lasts.append(b.last_offset)
            max_ts.append(b.max_timestamp)
        cols = _BatchColumns(
            *(np.frombuffer(c, np.int64) for c in (positions, bases, lasts, max_ts))
        )
        self._verify_offset_index(cols)
        self._verify_time_index(cols)
        return len(positions)

    def _verify_offset_index(self, cols: _BatchColumns) -> None:
        oi = self.offset_index
        offsets, positions = oi.offsets(), oi.positions()
        ok = np.zeros(len(offsets), bool)
        if len(cols.positions):
            slots = np.searchsorted(cols.positions, positions)
            s = np.minimum(slots, len(cols.positions) - 1)
            ok = (slots < len(cols.positions)) & (cols.positions[s] == positions)
            ok &= (cols.bases[s] <= offsets) & (offsets <= cols.lasts[-1])
            ok &= (s == 0) | (cols.lasts[s - 1] < offsets)
        if not ok.all():
            bad = int(np.argmin(ok))
            raise IndexCorruptError(
                f"offset index {oi.source}: entry {bad} (offset {offsets[bad]}, position "
                f"{positions[bad]}) does not point at the batch holding it in {self.source}"
            )

    def _verify_time_index(self, cols: _BatchColumns) -> None:
        ti = self.time_index
        timestamps, offsets = ti.timestamps(), ti.offsets()
        ok = np.zeros(len(offsets), bool)
        if len(cols.lasts):
            running_max = np.maximum.accumulate(cols.max_ts)
            slots = np.searchsorted(cols.lasts, offsets)
            s = np.minimum(slots, len(cols.lasts) - 1)
            ok = (slots < len(cols.lasts)) & (cols.bases[s] <= offsets)
            ok &= cols.max_ts[s] == timestamps
            ok &= (s == 0) | (running_max[s - 1] < timestamps)
        if not ok.all():
            bad = int(np.argmin(ok))
            raise IndexCorruptError(
                f"time index {ti.source}: entry {bad} (timestamp {timestamps[bad]}, offset "
                f"{offsets[bad]}) is not in the first batch reaching that max timestamp in "
                f"{self.source}"
            )

    # -- appending (the active segment) ------------------------------------------------------------

    def flush(self) -> None:
        """Write pending index entries; fsync the files written since the last flush (of a
        segment not open for appending, only a written ``.txnindex``)."""
        self.txn_index.flush()
        a = self._append
        if a is None:
            return
        self._write_index_entries(a)
        for i in sorted(a.unsynced):
            os.fsync(a.file(i, self.paths).fileno())
        a.unsynced.clear()

    def abandon(self) -> None:
        """Close the files as a crash leaves them: no final index entry, no flush, no fsync."""
        a, self._append = self._append, None
        if a is not None:
            a.close_files(sync=False)
        self.txn_index.close()
        self._buf = memoryview(b"")

    def delete_empty(self) -> None:
        """Close and remove this segment's files; only for a segment holding nothing."""
        if self.size_in_bytes:
            raise InvalidOffsetError(f"segment {self.log_path} is not empty")
        self.close()
        for p in (*self.paths(), self.txn_index.path):
            p.unlink(missing_ok=True)
        fsync_dir(self.log_path.parent)

    # -- lifetime ----------------------------------------------------------------------------------

    def close(self) -> None:
        """Drop the mapping (unmapped once the views handed out are released too) and flush and
        close a written ``.txnindex``. Open for appending: first the final time index entry,
        flush, close the files (Kafka's close / ``onBecomeInactiveSegment``)."""
        if self._append is not None:
            self.indexer.on_close()
            self._append.close_file(0, sync=True)  # first: the index files may need a descriptor
        self.flush()
        self.abandon()

    def __enter__(self) -> LogSegment:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"LogSegment({self.source!r}, base_offset={self.base_offset}, "
            f"next_offset={self.next_offset}, size={self.size_in_bytes})"
        )


class _BatchColumns(NamedTuple):
    """Per-batch header fields of a whole segment, as int64 columns."""

    positions: np.ndarray
    bases: np.ndarray
    lasts: np.ndarray
    max_ts: np.ndarray


class _Walk:
    """Header facts of a run of batches, gathered while walking it (no batch is kept)."""

    __slots__ = (
        "count",
        "first_base_offset",
        "first_last_offset",
        "next_offset",
        "end",
        "max_timestamp",
    )

    def __init__(self, batches: Iterable[AnyBatch]) -> None:
        self.count = self.first_base_offset = self.first_last_offset = 0
        self.next_offset = self.end = 0
        self.max_timestamp = NO_TIMESTAMP
        for _ in self.track(batches):
            pass

    def track(self, batches: Iterable[AnyBatch]) -> Iterator[AnyBatch]:
        """Yield ``batches`` unchanged, noting their header facts."""
        for b in batches:
            if not self.count:
                self.first_base_offset, self.first_last_offset = b.base_offset, b.last_offset
            self.count += 1
            self.next_offset = b.next_offset
            self.end = b.position + b.size_in_bytes
            self.max_timestamp = max(self.max_timestamp, b.max_timestamp)
            yield b


def first_record_at_or_after(
    batches: Iterable[AnyBatch], timestamp: int, floor: int
) -> TimestampAndOffset | None:
    """The first record of ``batches`` with timestamp >= ``timestamp`` and offset >= ``floor``
    (a segment's walk from its time index entry; the object store's too)."""
    for b in batches:
        if b.max_timestamp < timestamp or b.last_offset < floor:
            continue
        for r in b.records():
            if r.timestamp >= timestamp and r.offset >= floor:
                return TimestampAndOffset(r.timestamp, r.offset, _leader_epoch(b))
    return None


def _leader_epoch(batch: AnyBatch) -> int | None:
    if isinstance(batch, RecordBatch) and batch.partition_leader_epoch >= 0:
        return batch.partition_leader_epoch
    return None


def _reservation(written: int, segment_bytes: int) -> int:
    """How much of an appended ``.log`` to map for reads (virtual memory only: pages are mapped
    as read, and only the written bytes are): room for its growth up to ``segment.bytes``."""
    return max(written, min(segment_bytes, max(2 * written, written + _MIN_RESERVATION)))
