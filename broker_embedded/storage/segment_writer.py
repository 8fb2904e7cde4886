"""Writing a partition's segments the way a Kafka broker does (``LogSegment.append`` and roll).

Files: the partition directory ``<log dir>/<topic>-<partition>/`` holds ``partition.metadata``
(when a topic id is given) and per segment ``<base offset, 20 digits>.log``, ``.index`` and
``.timeindex`` (layouts in log_segment.py, offset_index.py, time_index.py). Only whole,
already-built batches (magic 0, 1 or 2) with their final offsets are appended, byte for byte.

Per append (one ``append`` call = one Kafka append, e.g. one partition of a produce request):

- the records must be complete batches with valid CRCs and strictly increasing offsets, all
  above the log end offset (:class:`InvalidOffsetError`, :class:`CorruptRecordError` otherwise);
- roll first when Kafka would: ``size > segment.bytes - incoming bytes``, or (segment not empty
  and) the incoming max timestamp minus the first batch's max timestamp exceeds ``segment.ms``
  (``min(segment.ms, max.compaction.lag.ms)`` for compacted topics; without timestamps: time
  since the segment was opened), or an index is full (``segment.index.bytes`` / entry size), or
  the incoming last offset does not fit an int32 relative to the base offset. The new segment's
  base offset is the first incoming offset. An empty active segment is never rolled; if the
  offsets do not fit it, it is replaced by one based at the first incoming offset;
- the bytes go to the ``.log`` in one write; the indexes get the entries of segment_indexer.py.
  The offset of the max timestamp defaults to the last offset of the first batch reaching it
  (what Kafka's followers, the KRaft log and recovery store); a leader that wants Kafka 3.6+
  leader behaviour passes the offset of the first record carrying it.

Index entries are written to their files as soon as an append creates them (appended, never
preallocated, fsynced with the ``.log`` by :meth:`flush`), so an index file always holds exactly
its entries and a reader in another process finds the active segment's entries on disk instead
of scanning the whole ``.log``. Closing or rolling a
segment adds the final time index entry and fsyncs the three files; creating files fsyncs the
directory. Reopening continues the last segment after a clean close (the index byte counter
restarts at 0, as in Kafka, so entries differ from a rebuild after a restart); with
``recover=True`` (after an unclean shutdown), or when its ``.log`` ends in a partial batch, the
last segment is recovered as Kafka does: batches checked from the start, the ``.log`` truncated
after the last valid one, both indexes rebuilt. Earlier segments are not recovered. A partial
batch whose offset lies below the ``recovery_point`` without ``recover`` (a clean shutdown wrote
everything below it) is not a torn write but corruption: :class:`CorruptRecordError`, nothing
truncated (Kafka truncates only what recovery scans).

File descriptors: each of the three files is opened by the first write to it (the ``.log`` by
the first append, an index file by its first new entry) and kept until the segment closes, as
Kafka opens indexes lazily: opening a log dir keeps no descriptor per partition, so that
thousands of partitions open under a small ``ulimit -n`` (one written to holds up to three); a
limit still reached is a :class:`TooManyOpenFilesError` naming the file and the limit
(open_files.py). Flushing fsyncs only the files written since the last flush.

Not thread-safe: one writer per partition directory (the caller holds the log dir lock).
Readers in other processes see each append as soon as ``append`` returns (unbuffered writes);
durability needs :meth:`flush`.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from broker_embedded.errors import (
    CorruptRecordError,
    InconsistentTopicIdError,
    InvalidOffsetError,
    SegmentOffsetOverflowError,
)
from broker_embedded.record.records import iter_batches
from broker_embedded.storage.checkpoint_file import fsync_dir, write_atomically
from broker_embedded.storage.log_config import LogConfig
from broker_embedded.storage.log_segment import (
    LOG_SUFFIX,
    LogSegment,
    segment_file_stem,
)
from broker_embedded.storage.log_segments import LogSegments
from broker_embedded.storage.offset_index import INDEX_SUFFIX, OffsetIndex
from broker_embedded.storage.open_files import map_read_only, open_file
from broker_embedded.storage.partition_metadata import (
    PARTITION_METADATA_FILE,
    PartitionMetadataFile,
    topic_id_to_string,
)
from broker_embedded.storage.segment_indexer import SegmentIndexer
from broker_embedded.storage.time_index import TIME_INDEX_SUFFIX, TimeIndex
from broker_embedded.storage.topic_partition import TopicPartition


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class RecordsSummary:
    """What one append holds, from its batch headers."""

    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    size: int


@dataclass(frozen=True, slots=True)
class AppendInfo:
    """Where an append went."""

    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    segment_base_offset: int
    position: int
    size: int
    rolled: bool


def summarize_records(records: bytes | memoryview, source: str) -> RecordsSummary | None:
    """Check the batches of an append (complete, valid CRC, increasing offsets) and sum them up;
    ``None`` when ``records`` is empty."""
    first = last = None
    max_ts, offset_of_max = -1, None
    for b in iter_batches(records, source, tail="error"):
        if not b.is_valid():
            raise CorruptRecordError(
                "CRC mismatch", source=source, position=b.position, base_offset=b.base_offset
            )
        if last is not None and b.base_offset <= last:
            raise InvalidOffsetError(
                f"{source}: batch at byte {b.position} starts at offset {b.base_offset}, "
                f"not above the previous batch's last offset {last}"
            )
        first = b.base_offset if first is None else first
        last = b.last_offset
        if b.max_timestamp > max_ts:
            max_ts, offset_of_max = b.max_timestamp, b.last_offset
    if first is None or last is None:
        return None
    offset_of_max = last if offset_of_max is None else offset_of_max
    return RecordsSummary(first, last, max_ts, offset_of_max, len(records))


def _write_all(f: BinaryIO, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        n = f.write(view)
        view = view[n:]


class LogSegmentWriter:
    """Appends to one segment's ``.log``, ``.index`` and ``.timeindex``."""

    __slots__ = ("directory", "base_offset", "config", "indexer", "size", "next_offset",
                 "rolling_based_timestamp", "created_ms", "status", "_files", "_unsynced",
                 "_flushed", "_closed")  # fmt: skip

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        config: LogConfig,
        indexer: SegmentIndexer,
        *,
        size: int,
        next_offset: int,
        rolling_based_timestamp: int | None,
        created_ms: int,
        status: str,
    ) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.config = config
        self.indexer = indexer
        self.size = size
        self.next_offset = next_offset
        self.rolling_based_timestamp = rolling_based_timestamp
        self.created_ms = created_ms
        self.status = status
        # .log, .index, .timeindex: each opened by its first write (lazily, as Kafka's indexes)
        self._files: list[BinaryIO | None] = [None, None, None]
        # the files (slots of paths()) written since they were last fsynced: none at first
        # (created empty, or rewritten with write_atomically, or truncated and fsynced)
        self._unsynced: set[int] = set()
        self._flushed = [len(indexer.offset_index), len(indexer.time_index)]
        self._closed = False

    # -- opening -----------------------------------------------------------------------------------

    @staticmethod
    def segment_paths(directory: Path, base_offset: int) -> tuple[Path, Path, Path]:
        stem = segment_file_stem(base_offset)
        return tuple(directory / (stem + s) for s in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX))

    def paths(self) -> tuple[Path, Path, Path]:
        """The ``.log``, ``.index`` and ``.timeindex`` paths."""
        return self.segment_paths(self.directory, self.base_offset)

    @staticmethod
    def _new_indexer(
        paths: tuple[Path, Path, Path], base_offset: int, config: LogConfig
    ) -> SegmentIndexer:
        oi = OffsetIndex(base_offset, source=str(paths[1]))
        ti = TimeIndex(base_offset, source=str(paths[2]))
        return _limit(oi, ti, config)

    @classmethod
    def create(
        cls, directory: Path, base_offset: int, config: LogConfig, *, now_ms: int
    ) -> LogSegmentWriter:
        """A new, empty segment (its ``.log`` must not exist or be empty)."""
        paths = cls.segment_paths(directory, base_offset)
        if paths[0].exists() and paths[0].stat().st_size:
            raise InvalidOffsetError(f"segment {paths[0]} already exists and is not empty")
        for p in paths:
            p.open("wb").close()
        fsync_dir(directory)
        indexer = cls._new_indexer(paths, base_offset, config)
        return cls(directory, base_offset, config, indexer, size=0, next_offset=base_offset,
                   rolling_based_timestamp=None, created_ms=now_ms, status="created")  # fmt: skip

    @classmethod
    def open(
        cls,
        directory: Path,
        base_offset: int,
        config: LogConfig,
        *,
        now_ms: int,
        recover: bool = False,
        recovery_point: int = 0,
    ) -> LogSegmentWriter:
        """Continue an existing segment (see the module docstring for ``recover`` and
        ``recovery_point``)."""
        paths = cls.segment_paths(directory, base_offset)
        if recover:
            return cls._recover(directory, base_offset, config, now_ms)
        with LogSegment(paths[0], index_interval_bytes=config.index_interval_bytes) as seg:
            seg.check_tail(last=True, recovery_point=recovery_point)
            torn = seg.end_of_batches != seg.size_in_bytes
            rolling = next((b.max_timestamp for b in seg.batches()), None)
            oi, ti, status = seg.offset_index, seg.time_index, seg.index_status
            size, next_offset = seg.size_in_bytes, seg.next_offset
        if torn:  # recovered after the mapping is gone: recovery truncates the .log
            return cls._recover(directory, base_offset, config, now_ms)
        for index, path in ((oi, paths[1]), (ti, paths[2])):
            if status != "loaded" or path.stat().st_size != len(index) * index.ENTRY_SIZE:
                write_atomically(path, index.to_bytes())  # rebuilt, or a preallocated tail
        return cls(directory, base_offset, config, _limit(oi, ti, config), size=size,
                   next_offset=next_offset, rolling_based_timestamp=rolling, created_ms=now_ms,
                   status=f"reopened, indexes {status}")  # fmt: skip

    @classmethod
    def _recover(
        cls, directory: Path, base_offset: int, config: LogConfig, now_ms: int
    ) -> LogSegmentWriter:
        paths = cls.segment_paths(directory, base_offset)
        indexer = cls._new_indexer(paths, base_offset, config)
        size = paths[0].stat().st_size
        valid, next_offset, rolling = _scan_valid_prefix(paths[0], base_offset, size, indexer)
        indexer.on_close()
        if valid < size:
            os.truncate(paths[0], valid)
            _fsync(paths[0])
        write_atomically(paths[1], indexer.offset_index.to_bytes())
        write_atomically(paths[2], indexer.time_index.to_bytes())
        status = f"recovered, {size - valid} bytes truncated"
        return cls(directory, base_offset, config, indexer, size=valid, next_offset=next_offset,
                   rolling_based_timestamp=rolling, created_ms=now_ms, status=status)  # fmt: skip

    # -- appending ---------------------------------------------------------------------------------

    @property
    def offset_index(self) -> OffsetIndex:
        return self.indexer.offset_index

    @property
    def time_index(self) -> TimeIndex:
        return self.indexer.time_index

    def can_hold_offset(self, offset: int) -> bool:
        return self.offset_index.can_append_offset(offset)

    def should_roll(self, summary: RecordsSummary, now_ms: int) -> bool:
        """Kafka's ``LogSegment.shouldRoll`` for an incoming append."""
        c = self.config
        max_segment_ms = c.segment_ms
        if c.compact and c.max_compaction_lag_ms > 0:
            max_segment_ms = min(max_segment_ms, c.max_compaction_lag_ms)
        if self.rolling_based_timestamp is not None and self.rolling_based_timestamp >= 0:
            waited = summary.max_timestamp - self.rolling_based_timestamp
        else:
            waited = now_ms - self.created_ms
        return (
            self.size > c.segment_bytes - summary.size
            or (self.size > 0 and waited > max_segment_ms)
            or self.offset_index.is_full()
            or self.time_index.is_full()
            or not self.can_hold_offset(summary.last_offset)
        )

    def append(self, records: bytes | memoryview, summary: RecordsSummary) -> int:
        """Append checked batches; returns the position they start at."""
        if self._closed:
            raise InvalidOffsetError(f"segment {self.paths()[0]} is closed")
        if not self.can_hold_offset(summary.last_offset):
            raise SegmentOffsetOverflowError(
                f"offset {summary.last_offset} does not fit segment {self.paths()[0]}"
            )
        if summary.first_offset < self.next_offset:
            raise InvalidOffsetError(
                f"append at offset {summary.first_offset} below the end offset "
                f"{self.next_offset} of segment {self.paths()[0]}"
            )
        position = self.size
        if position == 0:
            self.rolling_based_timestamp = summary.max_timestamp
        _write_all(self._file(0), records)
        self._unsynced.add(0)
        self.size += summary.size
        self.next_offset = summary.last_offset + 1
        self.indexer.on_append(position, summary.size, summary.last_offset,
                               summary.max_timestamp, summary.offset_of_max_timestamp)  # fmt: skip
        self._write_index_entries()
        return position

    def _file(self, slot: int) -> BinaryIO:
        """The file of ``paths()[slot]``, opened for appending on first use and kept."""
        f = self._files[slot]
        if f is None:
            f = self._files[slot] = open_file(self.paths()[slot], "ab", buffering=0)
        return f

    def _write_index_entries(self) -> None:
        for i, index in enumerate((self.offset_index, self.time_index)):
            if len(index) > self._flushed[i]:
                _write_all(self._file(i + 1), index.to_bytes(self._flushed[i]))
                self._flushed[i] = len(index)
                self._unsynced.add(i + 1)

    def flush(self) -> None:
        """Write pending index entries; fsync the files written since the last flush."""
        self._write_index_entries()
        for i in sorted(self._unsynced):
            os.fsync(self._file(i).fileno())
        self._unsynced.clear()

    def close(self) -> None:
        """Final time index entry, flush, close (Kafka's close / onBecomeInactiveSegment)."""
        if self._closed:
            return
        self.indexer.on_close()
        self._close_file(0, sync=True)  # first: the index files may need a descriptor of theirs
        self.flush()
        self.abandon()

    def _close_file(self, slot: int, *, sync: bool) -> None:
        f, self._files[slot] = self._files[slot], None
        if f is not None:
            if sync and slot in self._unsynced:
                os.fsync(f.fileno())
            self._unsynced.discard(slot)
            f.close()

    def abandon(self) -> None:
        """Close the files as a crash leaves them: no final index entry, no flush, no fsync."""
        for slot in range(len(self._files)):
            self._close_file(slot, sync=False)
        self._closed = True

    def delete_empty(self) -> None:
        """Close and remove this segment's files; only for a segment holding nothing."""
        if self.size:
            raise InvalidOffsetError(f"segment {self.paths()[0]} is not empty")
        self.close()
        for p in self.paths():
            p.unlink(missing_ok=True)
        fsync_dir(self.directory)


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


class SegmentWriter:
    """Appends batches to one partition's segments, rolling as Kafka does."""

    __slots__ = ("topic_partition", "directory", "config", "_clock", "_active", "_bases")

    def __init__(
        self,
        log_dir: str | Path,
        topic_partition: TopicPartition,
        config: LogConfig | None = None,
        *,
        topic_id: uuid.UUID | None = None,
        recover: bool = False,
        recovery_point: int = 0,
        start_offset: int = 0,
        clock_ms: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self.topic_partition = topic_partition
        self.config = config or LogConfig()
        self.directory = Path(log_dir) / topic_partition.dir_name
        self._clock = clock_ms
        if not self.directory.is_dir():
            self.directory.mkdir()
            fsync_dir(self.directory.parent)
        if topic_id is not None:
            self._ensure_topic_id(topic_id)
        self._bases = LogSegments.list_dir(self.directory).base_offsets
        now = self._clock()
        if self._bases:
            self._active = LogSegmentWriter.open(
                self.directory, self._bases[-1], self.config, now_ms=now, recover=recover,
                recovery_point=recovery_point,
            )  # fmt: skip
        else:
            self._active = LogSegmentWriter.create(
                self.directory, start_offset, self.config, now_ms=now
            )
            self._bases = [start_offset]

    def _ensure_topic_id(self, topic_id: uuid.UUID) -> None:
        f = PartitionMetadataFile(self.directory / PARTITION_METADATA_FILE)
        if not f.exists():
            f.write(topic_id)
            return
        found = f.read().topic_id
        if found != topic_id:
            raise InconsistentTopicIdError(
                f"{f.path} of {self.topic_partition} holds topic id {topic_id_to_string(found)}, "
                f"not {topic_id_to_string(topic_id)}"
            )

    # -- state -------------------------------------------------------------------------------------

    @property
    def active_segment(self) -> LogSegmentWriter:
        return self._active

    @property
    def segment_base_offsets(self) -> list[int]:
        return list(self._bases)

    @property
    def log_end_offset(self) -> int:
        return self._active.next_offset

    # -- writing -----------------------------------------------------------------------------------

    def append(
        self,
        records: bytes | memoryview,
        *,
        offset_of_max_timestamp: int | None = None,
        now_ms: int | None = None,
    ) -> AppendInfo | None:
        """Append complete batches (final offsets already assigned); ``None`` if empty."""
        source = f"append to {self.topic_partition} in {self.directory}"
        summary = summarize_records(records, source)
        if summary is None:
            return None
        if summary.first_offset < self.log_end_offset:
            raise InvalidOffsetError(
                f"{source}: first offset {summary.first_offset} is below the log end offset "
                f"{self.log_end_offset}"
            )
        if offset_of_max_timestamp is not None:
            if not summary.first_offset <= offset_of_max_timestamp <= summary.last_offset:
                raise InvalidOffsetError(
                    f"{source}: offset of max timestamp {offset_of_max_timestamp} is outside "
                    f"[{summary.first_offset}, {summary.last_offset}]"
                )
            summary = RecordsSummary(summary.first_offset, summary.last_offset,
                                     summary.max_timestamp, offset_of_max_timestamp,
                                     summary.size)  # fmt: skip
        rolled = self._maybe_roll(summary, self._clock() if now_ms is None else now_ms)
        position = self._active.append(records, summary)
        return AppendInfo(summary.first_offset, summary.last_offset, summary.max_timestamp,
                          summary.offset_of_max_timestamp, self._active.base_offset, position,
                          summary.size, rolled)  # fmt: skip

    def _maybe_roll(self, summary: RecordsSummary, now_ms: int) -> bool:
        active = self._active
        if active.size == 0:
            if active.can_hold_offset(summary.last_offset):
                return False
            self._replace_empty_active(summary.first_offset, now_ms)
            return True
        if not active.should_roll(summary, now_ms):
            return False
        self.roll(summary.first_offset, now_ms=now_ms)
        return True

    def roll(self, new_base_offset: int | None = None, *, now_ms: int | None = None) -> None:
        """Close the active segment and start one at ``new_base_offset`` (default: the LEO)."""
        base = self.log_end_offset if new_base_offset is None else new_base_offset
        now = self._clock() if now_ms is None else now_ms
        if base < self.log_end_offset:
            raise InvalidOffsetError(
                f"cannot roll {self.topic_partition} to base offset {base}, below the log end "
                f"offset {self.log_end_offset}"
            )
        if self._active.size == 0:
            if base != self._active.base_offset:
                self._replace_empty_active(base, now)
            return
        self._active.close()
        self._active = LogSegmentWriter.create(self.directory, base, self.config, now_ms=now)
        self._bases.append(base)

    def _replace_empty_active(self, base: int, now_ms: int) -> None:
        self._active.delete_empty()
        self._bases.pop()
        self._active = LogSegmentWriter.create(self.directory, base, self.config, now_ms=now_ms)
        self._bases.append(base)

    def forget_segment(self, base_offset: int) -> None:
        """Drop a closed segment whose files the caller deleted (retention)."""
        if base_offset == self._active.base_offset:
            raise InvalidOffsetError(f"cannot forget the active segment of {self.topic_partition}")
        self._bases.remove(base_offset)

    def flush(self) -> None:
        self._active.flush()

    def close(self) -> None:
        self._active.close()

    def abandon(self) -> None:
        """Close the active segment's files without flushing them (a simulated crash)."""
        self._active.abandon()

    def __enter__(self) -> SegmentWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
