"""A read view over one log segment: its ``.log`` file and its two indexes (Kafka's ``LogSegment``).

Files of the segment whose base offset is B, in its partition directory (B as 20 decimal digits,
zero-padded)::

    0000000000000000000B.log        the batches back to back (magic 0, 1 or 2), nothing else
    0000000000000000000B.index      offset index (see offset_index.py)
    0000000000000000000B.timeindex  time index (see time_index.py)

Invariants relied on: every batch's offsets are >= B and increase down the file (not
necessarily contiguously); the indexes point at batch starts and obey the rules of
``segment_indexer.py``.

Opening maps the ``.log`` read-only, keeping no file descriptor (open_files.py; its size is
fixed at open: a view of a growing active
segment ends where the file ended then; a partial batch at the end is ignored, as in a fetch)
and loads the indexes. A missing index file, one that Kafka's sanity check rejects or that
contradicts the ``.log`` (its last entry is not a batch start, points past the file, names an
offset the file does not hold; an entry points at a batch based above its offset, which would
make reads skip the batches before it) is rebuilt in memory from the ``.log`` with Kafka's recovery
rules; a zero-filled preallocated tail is simply not part of the entries. The segment never
writes, truncates or renames any file: ``index_status`` tells what happened.

Reads follow Kafka: ``translate_offset`` looks the offset up in the offset index, then scans
batch headers forward to the first batch whose last offset is >= the target; ``read`` returns
the bytes from that batch's start, at most ``max_bytes`` (at least that whole batch when
``min_one_message``, KIP-74) and never past ``max_position``; the slice may end in a partial
batch, which a consumer drops.

A partial batch may end only the last segment of a log, above its recovery point: that is a torn
write (a crash during an append, or a writer appending while this view opened) and a read stops
before it. Anywhere else, bytes after the last complete batch (typically an impossible length
field, e.g. 0x7fffffff, which makes a batch reach past the end of the file) are corruption:
``check_tail`` raises :class:`CorruptRecordError` naming the file, the position and the offset,
and every read that reaches that point calls it, so no read skips the rest of the segment.

Thread safety: immutable after opening; any number of threads may read. Returned memoryviews
point into the mapping and stay valid while referenced (closing defers the unmap until they are
released). Never let a writer truncate a ``.log`` that a reader has mapped: touching mapped
bytes past the new end of a file raises SIGBUS. Kafka truncates only above the high watermark,
and the cleaner replaces whole files by rename, which keeps the mapped inode intact.
"""

from __future__ import annotations

import os
import re
import struct
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np

from broker_embedded.errors import CorruptRecordError, IndexCorruptError
from broker_embedded.record.record_batch import RecordBatch
from broker_embedded.record.records import AnyBatch, iter_batches
from broker_embedded.storage.offset_index import INDEX_SUFFIX, OffsetIndex
from broker_embedded.storage.open_files import map_read_only
from broker_embedded.storage.segment_indexer import DEFAULT_INDEX_INTERVAL_BYTES, SegmentIndexer
from broker_embedded.storage.time_index import NO_TIMESTAMP, TIME_INDEX_SUFFIX, TimeIndex

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


class LogSegment:
    """One segment opened read-only; see the module docstring.

    ``size_in_bytes`` is the ``.log`` size at open; ``end_of_batches`` where its last complete
    batch ends (smaller only when the file ends in a partial batch); ``next_offset`` the offset
    after its last batch (``base_offset`` when it holds none); ``largest_timestamp`` the largest
    batch max timestamp (-1 if none); ``file_id`` the ``(st_dev, st_ino)`` of the ``.log`` that
    was opened (``None`` for an empty writer's view), so that a caller can tell whether the path
    still names that file (a cleaner swap puts another file under the same name).
    """

    __slots__ = ("base_offset", "log_path", "index_interval_bytes", "offset_index", "time_index",
                 "index_status", "size_in_bytes", "end_of_batches", "next_offset",
                 "largest_timestamp", "file_id", "_buf")  # fmt: skip

    def __init__(
        self,
        log_path: str | Path,
        *,
        index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
    ) -> None:
        self.log_path = Path(log_path)
        base = parse_segment_log_name(self.log_path.name)
        if base is None:
            raise ValueError(f"{self.log_path} is not a segment file name (<20 digits>.log)")
        self.base_offset = base
        self.index_interval_bytes = index_interval_bytes
        self._buf, st = map_read_only(self.log_path)
        self.file_id = _file_id(st)
        self.size_in_bytes = len(self._buf)
        self._load_indexes()

    @classmethod
    def for_writer(
        cls,
        log_path: str | Path,
        size: int,
        offset_index: OffsetIndex,
        time_index: TimeIndex,
        next_offset: int,
        largest_timestamp: int,
    ) -> LogSegment:
        """A view of the first ``size`` bytes of a segment that a writer holds open, sharing the
        writer's in-memory indexes (read without a lock, see abstract_index.py) instead of
        loading the index files, which lag behind until the writer flushes them."""
        seg = cls.__new__(cls)
        seg.log_path = Path(log_path)
        seg.base_offset = offset_index.base_offset
        seg.index_interval_bytes = DEFAULT_INDEX_INTERVAL_BYTES
        seg._buf = memoryview(b"")
        seg.file_id = None
        if size:
            seg._buf, st = map_read_only(seg.log_path, size)
            seg.file_id = _file_id(st)
        seg.size_in_bytes = seg.end_of_batches = size
        seg.offset_index, seg.time_index = offset_index, time_index
        seg.next_offset = next_offset
        seg.largest_timestamp = largest_timestamp
        seg.index_status = "shared with the writer"
        return seg

    @classmethod
    def open(
        cls,
        directory: str | Path,
        base_offset: int,
        *,
        index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
    ) -> LogSegment:
        path = Path(directory) / (segment_file_stem(base_offset) + LOG_SUFFIX)
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

    def _load_indexes(self) -> None:
        try:
            oi = OffsetIndex.load(self.offset_index_path, self.base_offset)
            ti = TimeIndex.load(self.time_index_path, self.base_offset)
            self._adopt(oi, ti)
            self.index_status = "loaded"
        except FileNotFoundError as e:
            self._rebuild(f"rebuilt: {Path(str(e.filename)).name} is missing")
        except (IndexCorruptError, CorruptRecordError) as e:
            self._rebuild(f"rebuilt: {e}")

    def _adopt(self, oi: OffsetIndex, ti: TimeIndex) -> None:
        """Use loaded indexes after checking them against the ``.log``; find the log's end."""
        last = oi.last_entry
        if len(oi) and last.position >= self.size_in_bytes:
            raise IndexCorruptError(
                f"offset index {oi.source}: last entry points at byte {last.position}, "
                f"past the end of {self.source} ({self.size_in_bytes} bytes)"
            )
        self._check_entries_point_at_batches(oi)
        tail = _Walk(self.batches(last.position))
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

    def _check_entries_point_at_batches(self, oi: OffsetIndex) -> None:
        """Every entry (offset O, position P) must point at a batch whose base offset lies in
        ``[base offset, O]`` (Kafka indexes a batch's last offset at its start): an entry that
        points further on would make reads skip the batches before it."""
        positions = oi.positions()
        if not len(positions) or positions[-1] + 8 > self.size_in_bytes:
            return  # none, or the last entry points past the file: _adopt says so
        log = np.frombuffer(self._buf, np.uint8)
        bases = log[positions[:, None] + np.arange(8)].copy().view(">i8").ravel()
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
            walk.track(self.batches()),
            self.base_offset,
            index_interval_bytes=self.index_interval_bytes,
            source=self.source,
        )
        self.next_offset = walk.next_offset if walk.count else self.base_offset
        self.end_of_batches = walk.end
        self.largest_timestamp = self.time_index.last_entry.timestamp
        self.index_status = status

    # -- reads -------------------------------------------------------------------------------------

    def batches(
        self, start_position: int = 0, end_position: int | None = None
    ) -> Iterator[AnyBatch]:
        """The batches (``RecordBatch`` or ``LegacyRecordBatch`` views) in a byte range."""
        end = self.size_in_bytes if end_position is None else min(end_position, self.size_in_bytes)
        return iter_batches(self._buf, self.source, start=start_position, end=end, tail="stop")

    def translate_offset(self, offset: int, starting_position: int = 0) -> LogOffsetPosition | None:
        """The first batch whose last offset is >= ``offset``, or ``None`` past the end."""
        start = max(self.offset_index.lookup(offset).position, starting_position)
        for b in self.batches(start):
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
        size = max(0, min(end - found.position, limit))
        records = self._buf[found.position : found.position + size]
        return FetchSlice(
            start_offset, self.base_offset, found.position, records, limit < found.size
        )

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
            base, length = _OFFSET_AND_LENGTH.unpack_from(self._buf, self.end_of_batches)
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
        for b in iter_batches(self._buf, self.source, tail="error"):
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

    # -- lifetime ----------------------------------------------------------------------------------

    def close(self) -> None:
        """Drop the mapping (unmapped once the views handed out are released too)."""
        self._buf = memoryview(b"")

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
