"""Writing a partition's segments the way a Kafka broker does: the checks of an append and when
to roll (Kafka's ``UnifiedLog.append`` and ``roll`` around ``LogSegment.append``).

Files: the partition directory ``<log dir>/<topic>-<partition>/`` holds ``partition.metadata``
(when a topic id is given) and per segment ``<base offset, 20 digits>.log``, ``.index`` and
``.timeindex`` (layouts in log_segment.py, offset_index.py, time_index.py). The active segment is
a :class:`LogSegment` open for appending, which owns its files (log_segment.py: index entries
written as appended, lazy file opening, flushing, closing, recovery); this writer holds no other
representation of a segment, only the list of base offsets and the active one.

Per append (one ``append`` call = one Kafka append, e.g. one partition of a produce request):

- the records must be complete batches with valid CRCs and strictly increasing offsets, all
  above the log end offset (:class:`InvalidOffsetError`, :class:`CorruptRecordError` otherwise);
- roll first when Kafka would (``LogSegment.should_roll``): ``size > segment.bytes - incoming
  bytes``, or (segment not empty and) the incoming max timestamp minus the first batch's max
  timestamp exceeds ``segment.ms`` (``min(segment.ms, max.compaction.lag.ms)`` for compacted
  topics; without timestamps: time since the segment was opened), or an index is full
  (``segment.index.bytes`` / entry size), or the incoming last offset does not fit an int32
  relative to the base offset. The new segment's base offset is the first incoming offset. An
  empty active segment is never rolled; if the offsets do not fit it, it is replaced by one based
  at the first incoming offset;
- the new segment of a roll is created before the old one is closed: a roll that fails
  (no inode left) leaves the old segment active and no file of the new one;
- the bytes go to the active segment (``LogSegment.append``; one that fails is cut back,
  :class:`KafkaStorageError`). The offset of the max timestamp
  defaults to the last offset of the first batch reaching it (what Kafka's followers, the KRaft
  log and recovery store); a leader that wants Kafka 3.6+ leader behaviour passes the offset of
  the first record carrying it.

Opening continues the last segment (``LogSegment.open_for_append``; with ``recover=True``, after
an unclean shutdown, or when its ``.log`` ends in a partial batch, it is recovered first);
earlier segments are not recovered here (log_loader.py).

Not thread-safe: one writer per partition directory (the caller holds the log dir lock).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from broker_embedded.errors import (
    CorruptRecordError,
    InconsistentTopicIdError,
    InvalidOffsetError,
)
from broker_embedded.record.records import iter_batches
from broker_embedded.storage.active_segment import RecordsSummary
from broker_embedded.storage.checkpoint_file import fsync_dir
from broker_embedded.storage.log_config import LogConfig
from broker_embedded.storage.log_segment import LogSegment
from broker_embedded.storage.log_segments import LogSegments
from broker_embedded.storage.partition_metadata import (
    PARTITION_METADATA_FILE,
    PartitionMetadataFile,
    topic_id_to_string,
)
from broker_embedded.storage.topic_partition import TopicPartition


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


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
            self._active = LogSegment.open_for_append(
                self.directory,
                self._bases[-1],
                self.config,
                now_ms=now,
                recover=recover,
                recovery_point=recovery_point,
            )
        else:
            self._active = LogSegment.create(self.directory, start_offset, self.config, now_ms=now)
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

    def reconfigure(self, config: LogConfig) -> None:
        """Roll and create segments by ``config`` from now on (a topic's altered config)."""
        self.config = config
        self._active.reconfigure(config)

    # -- state -------------------------------------------------------------------------------------

    @property
    def active_segment(self) -> LogSegment:
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
        summary: RecordsSummary | None = None,
    ) -> AppendInfo | None:
        """Append complete batches (final offsets already assigned); ``None`` if empty.
        ``summary``: the batches were already checked (complete, valid CRCs, increasing
        offsets) and summed up by the caller (the log's one-pass validation), so they are not
        walked again."""
        if summary is None:
            summary = self.summarize(records)
            if summary is None:
                return None
        self._check_above_end(summary)
        if offset_of_max_timestamp is not None:
            if not summary.first_offset <= offset_of_max_timestamp <= summary.last_offset:
                raise InvalidOffsetError(
                    f"{self._source()}: offset of max timestamp {offset_of_max_timestamp} is "
                    f"outside [{summary.first_offset}, {summary.last_offset}]"
                )
            summary = RecordsSummary(
                summary.first_offset,
                summary.last_offset,
                summary.max_timestamp,
                offset_of_max_timestamp,
                summary.size,
            )
        rolled = self._maybe_roll(summary, self._clock() if now_ms is None else now_ms)
        position = self._active.append(records, summary)
        return AppendInfo(
            summary.first_offset,
            summary.last_offset,
            summary.max_timestamp,
            summary.offset_of_max_timestamp,
            self._active.base_offset,
            position,
            summary.size,
            rolled,
        )

    def summarize(self, records: bytes | memoryview) -> RecordsSummary | None:
        """:func:`summarize_records` with this partition's errors."""
        return summarize_records(records, self._source())

    def append_summarized(
        self, records: bytes | memoryview, summary: RecordsSummary, now_ms: int
    ) -> None:
        """:meth:`append` of batches the caller checked and summed up in ``summary`` (the log's
        path, once per produce request: no :class:`AppendInfo` made)."""
        self._check_above_end(summary)
        self._maybe_roll(summary, now_ms)
        self._active.append(records, summary)

    def _check_above_end(self, summary: RecordsSummary) -> None:
        if summary.first_offset < self.log_end_offset:
            raise InvalidOffsetError(
                f"{self._source()}: first offset {summary.first_offset} is below the log end "
                f"offset {self.log_end_offset}"
            )

    def _source(self) -> str:
        return f"append to {self.topic_partition} in {self.directory}"

    def _maybe_roll(self, summary: RecordsSummary, now_ms: int) -> bool:
        active = self._active
        if active.size_in_bytes == 0:
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
        if self._active.size_in_bytes == 0:
            if base != self._active.base_offset:
                self._replace_empty_active(base, now)
            return
        created = LogSegment.create(self.directory, base, self.config, now_ms=now)
        try:
            self._active.close()
        except BaseException:
            created.delete_empty()
            raise
        self._active = created
        self._bases.append(base)

    def _replace_empty_active(self, base: int, now_ms: int) -> None:
        created = LogSegment.create(self.directory, base, self.config, now_ms=now_ms)
        self._active.delete_empty()
        self._bases[-1] = base
        self._active = created

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
