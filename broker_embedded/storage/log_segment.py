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
batch headers forward to the first batch whose last offset is >= the target (one compiled walk,
``entry_scan.seek_entry``, over v2 headers up to the end of the complete batches; anything it
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

Appending (the active segment; :meth:`LogSegment.create`, :meth:`LogSegment.open_for_append`,
:meth:`LogSegment.recover`): only whole, already-built, checked batches (segment_writer.py) with
their final offsets are appended, byte for byte, in one write to the ``.log``; the indexes get
the entries of segment_indexer.py, written to their files in groups of ``INDEX_WRITE_ENTRIES``
(appended, never preallocated; also whatever is pending at :meth:`flush`, roll and close, and
fsynced with the ``.log`` by :meth:`flush`). So an index file always holds a prefix of its
entries, at most ``INDEX_WRITE_ENTRIES - 1`` behind the ``.log``: a reader in another process finds
the active segment's entries on disk and scans at most that many index intervals of batch headers
past the last one instead of the whole ``.log`` (one write per index entry was 13% of an append).
A crash loses only entries of batches above the recovery point, whose segment recovery
rebuilds. Closing (or rolling away from) a segment adds the final time index entry and fsyncs
the three files; creating files fsyncs the directory.

A failed write (a full disk: ``ENOSPC`` after part of the bytes went in) never leaves bytes a
later append follows: the ``.log`` is cut back (``ftruncate``) to its size before the append and
:class:`KafkaStorageError` (56) is raised; nothing in memory moved (size, next offset, indexes),
so the same batches can be appended again once space is back. A cut that fails too raises
:class:`LogDirFailureError` (the log goes offline, unified_log.py). Index entries that do not fit
are cut back to whole entries and stay pending (written by a later append, flush or close; a
shorter index file is a valid prefix). Creating a segment that fails (no inode) removes the
files it made. No file is written through a mapping, so a full disk cannot raise SIGBUS in a
writer.

Reopening continues a segment after a clean close (the index byte counter restarts at 0, as in
Kafka, so entries differ from a rebuild after a restart); :meth:`recover` (after an unclean
shutdown, or when the ``.log`` ends in a partial batch above the recovery point) checks the
batches from the start, truncates the ``.log`` after the last valid one and rebuilds both
indexes, as Kafka does. A partial batch below the ``recovery_point`` without ``recover`` (a
clean shutdown wrote everything below it) is not a torn write but corruption:
:class:`CorruptRecordError`, nothing truncated (Kafka truncates only what recovery scans). Reads
of a segment open for appending see every append through the indexes being appended to; the
``.log`` is mapped 8 MiB or its own size past its end, whichever is more, up to ``segment.bytes``
(address space, not memory), so a read of new appends slices that mapping instead of mapping the
file again (20 us a map); only the written bytes are ever read.

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

import contextlib
import os
import re
import struct
from array import array
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, NamedTuple

import numpy as np

from broker_embedded.errors import (
    CorruptRecordError,
    IndexCorruptError,
    InvalidOffsetError,
    KafkaStorageError,
    LogDirFailureError,
    SegmentOffsetOverflowError,
)
from broker_embedded.record.entry_scan import SEEK_END, SEEK_FOUND, seek_entry
from broker_embedded.record.kernel_primitives import readonly_bytes
from broker_embedded.record.record_batch import RecordBatch
from broker_embedded.record.records import AnyBatch, iter_batches
from broker_embedded.storage.checkpoint_file import fsync_dir, write_atomically
from broker_embedded.storage.log_config import LogConfig
from broker_embedded.storage.offset_index import INDEX_SUFFIX, OffsetIndex
from broker_embedded.storage.open_files import (
    map_descriptor,
    map_read_only,
    open_file,
    open_read_only,
    release_mapped_pages,
)
from broker_embedded.storage.segment_indexer import DEFAULT_INDEX_INTERVAL_BYTES, SegmentIndexer
from broker_embedded.storage.storage_health import NO_SPACE
from broker_embedded.storage.time_index import NO_TIMESTAMP, TIME_INDEX_SUFFIX, TimeIndex
from broker_embedded.storage.transaction_index import (
    FILE_SUFFIX as TXN_INDEX_SUFFIX,
)
from broker_embedded.storage.transaction_index import (
    TransactionIndex,
    TxnIndexSearchResult,
)

LOG_SUFFIX = ".log"
_OFFSET_AND_LENGTH = struct.Struct(">qi")  # the base offset and length fields of every entry
_SEGMENT_LOG_NAME = re.compile(r"([0-9]{20})\.log")


def segment_file_stem(base_offset: int) -> str:
    """The 20-digit zero-padded name shared by a segment's files."""
    if base_offset < 0:
        raise ValueError(f"negative segment base offset {base_offset}")
    return f"{base_offset:020d}"


def _file_id(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


def parse_segment_log_name(name: str) -> int | None:
    """The base offset of a ``<20 digits>.log`` file name, else ``None`` (also for ``.swap``,
    ``.cleaned``, ``.deleted`` and other transient names)."""
    m = _SEGMENT_LOG_NAME.fullmatch(name)
    return int(m.group(1)) if m else None


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
INDEX_WRITE_ENTRIES = 16  # index entries an append leaves pending before writing them out
_CHECK_CHUNK = 64  # index entries checked between two releases of the pages their headers touched


class LogSegment:
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

    __slots__ = ("base_offset", "log_path", "index_interval_bytes", "offset_index", "time_index",
                 "index_status", "size_in_bytes", "end_of_batches", "next_offset",
                 "largest_timestamp", "file_id", "indexer", "txn_index", "_buf",
                 "_append")  # fmt: skip

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
        self.txn_index = _txn_index(self.log_path, base)
        self._append: _Appender | None = None
        fd = open_read_only(self.log_path)
        try:
            st = os.fstat(fd)
            self._buf = map_descriptor(fd, st.st_size, self.log_path)
            self.file_id = _file_id(st)
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
            tail.count and self.base_offset <= tail.first_base_offset
            and tail.first_last_offset <= last.offset < next_offset
        ):  # fmt: skip
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
        for b in self.batches(position):
            if b.max_timestamp < timestamp or b.last_offset < floor:
                continue
            for r in b.records():
                if r.timestamp >= timestamp and r.offset >= floor:
                    return TimestampAndOffset(r.timestamp, r.offset, _leader_epoch(b))
        return None

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

    @classmethod
    def create(
        cls, directory: Path, base_offset: int, config: LogConfig, *, now_ms: int
    ) -> LogSegment:
        """A new, empty segment open for appending (its ``.log`` must not exist or be empty)."""
        paths = segment_paths(directory, base_offset)
        if paths[0].exists() and paths[0].stat().st_size:
            raise InvalidOffsetError(f"segment {paths[0]} already exists and is not empty")
        try:
            for p in paths:
                p.open("wb").close()
            fsync_dir(directory)
        except OSError as e:  # e.g. no inode left: leave no part of the segment behind
            for p in paths:
                with contextlib.suppress(OSError):
                    p.unlink(missing_ok=True)
            raise KafkaStorageError(f"creating segment {paths[0]} failed: {e}") from e
        oi = OffsetIndex(base_offset, source=str(paths[1]))
        ti = TimeIndex(base_offset, source=str(paths[2]))
        return cls._appendable(paths[0], _limit(oi, ti, config), 0, base_offset,
                               _Appender(config, None, now_ms), "created")  # fmt: skip

    @classmethod
    def open_for_append(
        cls,
        directory: Path,
        base_offset: int,
        config: LogConfig,
        *,
        now_ms: int,
        recover: bool = False,
        recovery_point: int = 0,
    ) -> LogSegment:
        """Continue an existing segment (module docstring, "Appending": ``recover`` and
        ``recovery_point``)."""
        paths = segment_paths(directory, base_offset)
        if recover:
            return cls.recover(directory, base_offset, config, now_ms=now_ms)
        seg = cls(paths[0], index_interval_bytes=config.index_interval_bytes)
        seg.check_tail(last=True, recovery_point=recovery_point)
        if seg.end_of_batches != seg.size_in_bytes:  # torn: recovery truncates the .log
            seg.close()  # the mapping first
            return cls.recover(directory, base_offset, config, now_ms=now_ms)
        for index, path in ((seg.offset_index, paths[1]), (seg.time_index, paths[2])):
            if seg.index_status != "loaded" or path.stat().st_size != len(index) * index.ENTRY_SIZE:
                write_atomically(path, index.to_bytes())  # rebuilt, or a preallocated tail
        rolling = next((b.max_timestamp for b in seg.batches()), None)
        seg._attach(_limit(seg.offset_index, seg.time_index, config),
                    _Appender(config, rolling, now_ms))  # fmt: skip
        seg.index_status = f"reopened, indexes {seg.index_status}"
        return seg

    @classmethod
    def recover(
        cls, directory: Path, base_offset: int, config: LogConfig, *, now_ms: int
    ) -> LogSegment:
        """Kafka's ``LogSegment.recover``: every batch checked from the start (CRC, offsets),
        the ``.log`` truncated after the last valid one, both index files rewritten; the
        segment is then open for appending."""
        paths = segment_paths(directory, base_offset)
        oi = OffsetIndex(base_offset, source=str(paths[1]))
        indexer = _limit(oi, TimeIndex(base_offset, source=str(paths[2])), config)
        size = paths[0].stat().st_size
        valid, next_offset, rolling = _scan_valid_prefix(paths[0], base_offset, size, indexer)
        indexer.on_close()
        if valid < size:
            os.truncate(paths[0], valid)
            _fsync(paths[0])
        _rewrite_if_changed(paths[1], indexer.offset_index.to_bytes())
        _rewrite_if_changed(paths[2], indexer.time_index.to_bytes())
        return cls._appendable(paths[0], indexer, valid, next_offset,
                               _Appender(config, rolling, now_ms),
                               f"recovered, {size - valid} bytes truncated")  # fmt: skip

    @classmethod
    def _appendable(
        cls,
        log_path: Path,
        indexer: SegmentIndexer,
        size: int,
        next_offset: int,
        appender: _Appender,
        status: str,
    ) -> LogSegment:
        """A segment open for appending whose ``.log`` holds ``size`` bytes of whole batches
        (mapped on first read)."""
        seg = cls.__new__(cls)
        seg.log_path = log_path
        seg.base_offset = indexer.offset_index.base_offset
        seg.txn_index = _txn_index(log_path, seg.base_offset)
        seg.index_interval_bytes = appender.config.index_interval_bytes
        seg._buf = memoryview(b"")
        seg.file_id = _file_id(os.stat(log_path))
        seg.size_in_bytes = seg.end_of_batches = size
        seg.next_offset = next_offset
        seg.offset_index, seg.time_index = indexer.offset_index, indexer.time_index
        seg.largest_timestamp = indexer.max_timestamp_so_far.timestamp
        seg.index_status = status
        seg._attach(indexer, appender)
        return seg

    def _attach(self, indexer: SegmentIndexer, appender: _Appender) -> None:
        self.indexer = indexer
        self.offset_index, self.time_index = indexer.offset_index, indexer.time_index
        appender.flushed = [len(indexer.offset_index), len(indexer.time_index)]
        self._append = appender

    def paths(self) -> tuple[Path, Path, Path]:
        """The ``.log``, ``.index`` and ``.timeindex`` paths."""
        return segment_paths(self.log_path.parent, self.base_offset)

    @property
    def rolling_based_timestamp(self) -> int | None:
        """The first batch's max timestamp (``None``: no batch yet, or not appendable)."""
        return None if self._append is None else self._append.rolling_based_timestamp

    def can_hold_offset(self, offset: int) -> bool:
        return self.offset_index.can_append_offset(offset)

    def should_roll(self, summary: RecordsSummary, now_ms: int) -> bool:
        """Kafka's ``LogSegment.shouldRoll`` for an incoming append."""
        a = self._appender()
        rolling = a.rolling_based_timestamp
        if rolling is not None and rolling >= 0:
            waited = summary.max_timestamp - rolling
        else:
            waited = now_ms - a.created_ms
        size = self.size_in_bytes
        return (
            size > a.config.segment_bytes - summary.size
            or (size > 0 and waited > a.max_segment_ms)
            or self.offset_index.is_full()
            or self.time_index.is_full()
            or not self.can_hold_offset(summary.last_offset)
        )

    def append(self, records: bytes | memoryview, summary: RecordsSummary) -> int:
        """Append checked batches; returns the position they start at."""
        a = self._appender()
        if not self.can_hold_offset(summary.last_offset):
            raise SegmentOffsetOverflowError(
                f"offset {summary.last_offset} does not fit segment {self.log_path}"
            )
        if summary.first_offset < self.next_offset:
            raise InvalidOffsetError(
                f"append at offset {summary.first_offset} below the end offset "
                f"{self.next_offset} of segment {self.log_path}"
            )
        position = self.size_in_bytes
        self._write_or_roll_back(a, records, position)
        if position == 0:
            a.rolling_based_timestamp = summary.max_timestamp
        a.unsynced.add(0)
        self.size_in_bytes = self.end_of_batches = position + summary.size
        self.next_offset = summary.last_offset + 1
        self.largest_timestamp = max(self.largest_timestamp, summary.max_timestamp)
        self.indexer.on_append(position, summary.size, summary.last_offset,
                               summary.max_timestamp, summary.offset_of_max_timestamp)  # fmt: skip
        if len(self.offset_index) - a.flushed[0] >= INDEX_WRITE_ENTRIES:
            # the append is done: entries that cannot be written (a full disk, no descriptor
            # left) wait in memory for the next append, flush or close
            with contextlib.suppress(OSError, KafkaStorageError):
                self._write_index_entries(a)
        return position

    def _write_or_roll_back(self, a: _Appender, records: bytes | memoryview, position: int) -> None:
        """Write ``records`` at the end of the ``.log`` (``position`` bytes); if the write fails
        (a full disk fails it part way), cut the file back to ``position`` so that no later
        append follows torn bytes, and raise :class:`KafkaStorageError`. A cut that fails too
        leaves the segment unusable: :class:`LogDirFailureError`, the log goes offline."""
        try:
            _write_all(a.file(0, self.paths), records)
        except OSError as e:
            try:
                os.ftruncate(a.file(0, self.paths).fileno(), position)
            except OSError as cut:
                raise LogDirFailureError(
                    f"appending {len(records)} bytes at byte {position} of {self.log_path} "
                    f"failed ({e.strerror}) and cutting it back to {position} bytes failed too "
                    f"({cut.strerror})"
                ) from e
            raise KafkaStorageError(
                f"appending {len(records)} bytes at byte {position} of {self.log_path} failed "
                f"({e.strerror}); the file was cut back to {position} bytes"
            ) from e

    def reconfigure(self, config: LogConfig) -> None:
        """The appends from now on follow ``config`` (its roll size and age); the index files
        keep the size and interval they were made with (the next segment takes the new)."""
        if self._append is not None:
            self._append.reconfigure(config)

    def _appender(self) -> _Appender:
        if self._append is None:
            raise InvalidOffsetError(f"segment {self.log_path} is not open for appending")
        return self._append

    def _write_index_entries(self, a: _Appender) -> None:
        """Write the pending index entries. On a full disk the file is cut back to its whole
        entries and they stay pending (an index file is a prefix of its entries, which is
        valid: a reader scans further, recovery rebuilds); other errors raise."""
        for i, index in enumerate((self.offset_index, self.time_index)):
            if len(index) > a.flushed[i]:
                f = a.file(i + 1, self.paths)
                try:
                    _write_all(f, index.to_bytes(a.flushed[i]))
                except OSError as e:
                    os.ftruncate(f.fileno(), a.flushed[i] * index.ENTRY_SIZE)
                    if e.errno in NO_SPACE:
                        continue
                    raise
                a.flushed[i] = len(index)
                a.unsynced.add(i + 1)

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

    __slots__ = ("count", "first_base_offset", "first_last_offset", "next_offset", "end",
                 "max_timestamp")  # fmt: skip

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


def _leader_epoch(batch: AnyBatch) -> int | None:
    if isinstance(batch, RecordBatch) and batch.partition_leader_epoch >= 0:
        return batch.partition_leader_epoch
    return None


@dataclass(frozen=True, slots=True)
class RecordsSummary:
    """What one append holds, from its batch headers."""

    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    size: int


def _txn_index(log_path: Path, base_offset: int) -> TransactionIndex:
    return TransactionIndex(log_path.with_suffix(TXN_INDEX_SUFFIX), base_offset)


def segment_paths(directory: Path, base_offset: int) -> tuple[Path, Path, Path]:
    """The ``.log``, ``.index`` and ``.timeindex`` paths of the segment based at
    ``base_offset``."""
    stem = segment_file_stem(base_offset)
    return tuple(directory / (stem + s) for s in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX))


class _Appender:
    """The append state of a segment open for appending: its config, the first batch's max
    timestamp (``None`` before one), when it was opened, and its three files, each opened by
    its first write and kept, with the slots written since their last fsync."""

    __slots__ = ("config", "max_segment_ms", "rolling_based_timestamp", "created_ms", "files",
                 "unsynced", "flushed", "mapped")  # fmt: skip

    def __init__(self, config: LogConfig, rolling_based_timestamp: int | None, created_ms: int):
        self.reconfigure(config)
        self.rolling_based_timestamp = rolling_based_timestamp
        self.created_ms = created_ms
        # .log, .index, .timeindex: each opened by its first write (lazily, as Kafka's indexes)
        self.files: list[BinaryIO | None] = [None, None, None]
        # the files (slots of paths()) written since they were last fsynced: none at first
        # (created empty, or rewritten with write_atomically, or truncated and fsynced)
        self.unsynced: set[int] = set()
        self.flushed = [0, 0]  # index entries already in the .index and .timeindex files
        self.mapped = memoryview(b"")  # the .log mapped past its end for reads (_reservation)

    def reconfigure(self, config: LogConfig) -> None:
        """Take ``config`` (a topic's altered config) for the appends from now on."""
        self.config = config
        # the age that rolls the segment (segment.ms; a compacted topic's max.compaction.lag.ms
        # when lower), checked on every append
        self.max_segment_ms = config.segment_ms
        if config.compact and config.max_compaction_lag_ms > 0:
            self.max_segment_ms = min(config.segment_ms, config.max_compaction_lag_ms)

    def file(self, slot: int, paths: Callable[[], tuple[Path, Path, Path]]) -> BinaryIO:
        """The file of ``paths()[slot]``, opened for appending on first use and kept."""
        f = self.files[slot]
        if f is None:
            f = self.files[slot] = open_file(paths()[slot], "ab", buffering=0)
        return f

    def close_file(self, slot: int, *, sync: bool) -> None:
        f, self.files[slot] = self.files[slot], None
        if f is not None:
            if sync and slot in self.unsynced:
                os.fsync(f.fileno())
            self.unsynced.discard(slot)
            f.close()

    def close_files(self, *, sync: bool) -> None:
        for slot in range(len(self.files)):
            self.close_file(slot, sync=sync)


def _reservation(written: int, segment_bytes: int) -> int:
    """How much of an appended ``.log`` to map for reads (virtual memory only: pages are mapped
    as read, and only the written bytes are): room for its growth up to ``segment.bytes``."""
    return max(written, min(segment_bytes, max(2 * written, written + _MIN_RESERVATION)))


def _write_all(f: BinaryIO, data: bytes | memoryview) -> None:
    n = f.write(data)
    if n == len(data):  # the usual case: one call, no view
        return
    view = memoryview(data)[n:]
    while view:
        n = f.write(view)
        view = view[n:]


def _rewrite_if_changed(path: Path, data: bytes) -> None:
    """``write_atomically`` unless ``path`` holds ``data`` already (a recovery that found the
    index whole: reopening thousands of partitions then renames nothing)."""
    try:
        same = path.stat().st_size == len(data) and path.read_bytes() == data
    except FileNotFoundError:
        same = False
    if not same:
        write_atomically(path, data)


def _fsync(path: Path) -> None:
    with open_file(path, "rb") as f:
        os.fsync(f.fileno())


def _limit(oi: OffsetIndex, ti: TimeIndex, config: LogConfig) -> SegmentIndexer:
    oi.max_entries = config.segment_index_bytes // oi.ENTRY_SIZE
    ti.max_entries = config.segment_index_bytes // ti.ENTRY_SIZE
    return SegmentIndexer(oi, ti, config.index_interval_bytes)


def _scan_valid_prefix(
    path: Path, base_offset: int, size: int, indexer: SegmentIndexer
) -> tuple[int, int, int | None]:
    """Kafka's recovery scan: index every valid batch; stop at the first bad one.

    Returns (valid bytes, next offset, first batch's max timestamp)."""
    valid, next_offset, rolling = 0, base_offset, None
    if size == 0:
        return valid, next_offset, rolling
    batches = iter_batches(map_read_only(path, size)[0], str(path), tail="error")
    try:  # the mapping goes with the last view of it, when this function returns
        for b in batches:
            if not b.is_valid() or b.base_offset < next_offset:
                break
            if not indexer.offset_index.can_append_offset(b.last_offset):
                break
            rolling = b.max_timestamp if rolling is None else rolling
            indexer.append_batches((b,))
            valid, next_offset = b.position + b.size_in_bytes, b.last_offset + 1
    except CorruptRecordError:
        pass
    return valid, next_offset, rolling
