"""The append side of a log segment (Kafka's ``LogSegment`` as the active segment, with its
``recover``): :class:`ActiveSegment`, a base class of
:class:`~broker_embedded.storage.log_segment.LogSegment` holding its constructors for appending
(:meth:`ActiveSegment.create`, :meth:`ActiveSegment.open_for_append`,
:meth:`ActiveSegment.recover`) and its appends; :class:`AppendState`, what a segment open for
appending holds besides its reads (config, roll clock, files, unsynced slots); and
:class:`RecordsSummary`, what one append holds.

Appending (the active segment; :meth:`ActiveSegment.create`, :meth:`ActiveSegment.open_for_append`,
:meth:`ActiveSegment.recover`): only whole, already-built, checked batches (segment_writer.py) with
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


Thread safety: a segment open for appending is used under its log's lock (one writer per
partition directory); these methods work on the segment's own state (log_segment.py), so this
class is never used alone.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from broker_embedded.errors import (
    CorruptRecordError,
    InvalidOffsetError,
    KafkaStorageError,
    LogDirFailureError,
    SegmentOffsetOverflowError,
)
from broker_embedded.record.records import iter_batches
from broker_embedded.storage.checkpoint_file import fsync_dir, write_atomically
from broker_embedded.storage.log_config import LogConfig
from broker_embedded.storage.log_file_utils import file_id_of, segment_paths, txn_index_of
from broker_embedded.storage.offset_index import OffsetIndex
from broker_embedded.storage.open_files import map_read_only, open_file
from broker_embedded.storage.segment_indexer import SegmentIndexer
from broker_embedded.storage.storage_health import NO_SPACE
from broker_embedded.storage.time_index import TimeIndex

if TYPE_CHECKING:  # the subclass this base class is for
    from broker_embedded.storage.log_segment import LogSegment

INDEX_WRITE_ENTRIES = 16  # index entries an append leaves pending before writing them out


@dataclass(frozen=True, slots=True)
class RecordsSummary:
    """What one append holds, from its batch headers."""

    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    size: int


class AppendState:
    """The append state of a segment open for appending: its config, the first batch's max
    timestamp (``None`` before one), when it was opened, and its three files, each opened by
    its first write and kept, with the slots written since their last fsync."""

    __slots__ = (
        "config",
        "max_segment_ms",
        "rolling_based_timestamp",
        "created_ms",
        "files",
        "unsynced",
        "flushed",
        "mapped",
    )

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


class ActiveSegment:
    """The append side of a log segment (module docstring); a base class of ``LogSegment``."""

    __slots__ = ()  # LogSegment's slots hold the state: no __dict__ per segment

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
        return cls._appendable(
            paths[0],
            _limit(oi, ti, config),
            0,
            base_offset,
            AppendState(config, None, now_ms),
            "created",
        )

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
        seg._attach(
            _limit(seg.offset_index, seg.time_index, config), AppendState(config, rolling, now_ms)
        )
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
        return cls._appendable(
            paths[0],
            indexer,
            valid,
            next_offset,
            AppendState(config, rolling, now_ms),
            f"recovered, {size - valid} bytes truncated",
        )

    @classmethod
    def _appendable(
        cls,
        log_path: Path,
        indexer: SegmentIndexer,
        size: int,
        next_offset: int,
        appender: AppendState,
        status: str,
    ) -> LogSegment:
        """A segment open for appending whose ``.log`` holds ``size`` bytes of whole batches
        (mapped on first read)."""
        seg = cls.__new__(cls)
        seg.log_path = log_path
        seg.base_offset = indexer.offset_index.base_offset
        seg.txn_index = txn_index_of(log_path, seg.base_offset)
        seg.index_interval_bytes = appender.config.index_interval_bytes
        seg._buf = memoryview(b"")
        seg.file_id = file_id_of(os.stat(log_path))
        seg.size_in_bytes = seg.end_of_batches = size
        seg.next_offset = next_offset
        seg.offset_index, seg.time_index = indexer.offset_index, indexer.time_index
        seg.largest_timestamp = indexer.max_timestamp_so_far.timestamp
        seg.index_status = status
        seg._attach(indexer, appender)
        return seg

    def _attach(self, indexer: SegmentIndexer, appender: AppendState) -> None:
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
        self.indexer.on_append(
            position,
            summary.size,
            summary.last_offset,
            summary.max_timestamp,
            summary.offset_of_max_timestamp,
        )
        if len(self.offset_index) - a.flushed[0] >= INDEX_WRITE_ENTRIES:
            # the append is done: entries that cannot be written (a full disk, no descriptor
            # left) wait in memory for the next append, flush or close
            with contextlib.suppress(OSError, KafkaStorageError):
                self._write_index_entries(a)
        return position

    def _write_or_roll_back(
        self, a: AppendState, records: bytes | memoryview, position: int
    ) -> None:
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

    def _appender(self) -> AppendState:
        if self._append is None:
            raise InvalidOffsetError(f"segment {self.log_path} is not open for appending")
        return self._append

    def _write_index_entries(self, a: AppendState) -> None:
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
