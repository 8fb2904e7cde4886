"""A read-only view of one partition directory: its segments, offsets and fetch reads.

Files read in ``<log dir>/<topic>-<partition>/``: ``<20 digits>.log`` segments with their
indexes (log_segment.py), ``leader-epoch-checkpoint`` and ``partition.metadata`` when present.
Transient files (``.cleaned``, ``.swap``, ``.deleted``) are ignored: a directory caught in the
middle of a cleaner swap needs a writer's recovery first.

Offsets (Kafka's ``UnifiedLog`` rules, given the log dir's checkpoint values):

- ``log_end_offset``: the offset after the last batch of the last segment (its base offset when
  it holds none);
- ``log_start_offset``: ``max(log-start-offset-checkpoint value, first segment's base offset)``,
  the first segment's base offset without a checkpoint entry;
- ``high_watermark``: the replication-offset-checkpoint value clamped to
  ``[log_start_offset, log_end_offset]``. Without an entry (no broker ever checkpointed this
  partition, e.g. ``__cluster_metadata-0``, whose high watermark lives in the KRaft layer, or a
  log dir written without a broker) it falls back to the log end offset: everything on disk is
  treated as committed.

``read`` is Kafka's ``LocalLog.read``: the slice of the first segment, from the one holding
``fetch_offset`` on, that has a batch ending at or after it, bounded above by the position of the
batch holding ``max_offset`` (default the high watermark).

Thread safety: the segment list is fixed at open; segments are opened on first use under a lock
and are immutable afterwards, so any number of threads may read.
"""

from __future__ import annotations

import bisect
import os
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

from broker_embedded.errors import OffsetOutOfRangeError
from broker_embedded.record.records import AnyBatch
from broker_embedded.storage.leader_epoch_checkpoint import (
    LEADER_EPOCH_CHECKPOINT,
    EpochEntry,
    LeaderEpochCheckpointFile,
)
from broker_embedded.storage.log_segment import (
    FetchSlice,
    LogSegment,
    TimestampAndOffset,
    parse_segment_log_name,
)
from broker_embedded.storage.partition_metadata import (
    PARTITION_METADATA_FILE,
    PartitionMetadataFile,
)
from broker_embedded.storage.segment_indexer import DEFAULT_INDEX_INTERVAL_BYTES
from broker_embedded.storage.topic_partition import TopicPartition


def segment_base_offsets(directory: str | Path) -> list[int]:
    """The sorted base offsets of the ``<20 digits>.log`` files in a partition directory."""
    return sorted(b for b in map(parse_segment_log_name, os.listdir(directory)) if b is not None)


class PartitionReader:
    """Reads one partition directory; see the module docstring."""

    __slots__ = ("directory", "topic_partition", "index_interval_bytes", "base_offsets",
                 "log_start_offset", "log_end_offset", "high_watermark", "_segments",
                 "_lock")  # fmt: skip

    def __init__(
        self,
        directory: str | Path,
        *,
        high_watermark: int | None = None,
        log_start_offset: int | None = None,
        index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
    ) -> None:
        self.directory = Path(directory)
        self.topic_partition = TopicPartition.parse_dir_name(self.directory.name)
        self.index_interval_bytes = index_interval_bytes
        self.base_offsets = segment_base_offsets(self.directory)
        self._segments: dict[int, LogSegment] = {}
        self._lock = threading.Lock()
        first = self.base_offsets[0] if self.base_offsets else (log_start_offset or 0)
        self.log_start_offset = first if log_start_offset is None else max(log_start_offset, first)
        if self.base_offsets:
            self.log_end_offset = self.segment(self.base_offsets[-1]).next_offset
        else:
            self.log_end_offset = self.log_start_offset
        hw = self.log_end_offset if high_watermark is None else high_watermark
        self.high_watermark = min(max(hw, self.log_start_offset), self.log_end_offset)

    # -- segments ----------------------------------------------------------------------------------

    def segment(self, base_offset: int) -> LogSegment:
        """The segment based at ``base_offset``, opened on first use."""
        with self._lock:
            seg = self._segments.get(base_offset)
            if seg is None:
                seg = LogSegment.open(
                    self.directory, base_offset, index_interval_bytes=self.index_interval_bytes
                )
                self._segments[base_offset] = seg
            return seg

    def segments(self) -> list[LogSegment]:
        return [self.segment(b) for b in self.base_offsets]

    def _floor_slot(self, offset: int) -> int:
        """Index in ``base_offsets`` of the segment that would hold ``offset`` (at least 0)."""
        return max(bisect.bisect_right(self.base_offsets, offset) - 1, 0)

    # -- files beside the segments -----------------------------------------------------------------

    def leader_epochs(self) -> list[EpochEntry]:
        return LeaderEpochCheckpointFile(self.directory / LEADER_EPOCH_CHECKPOINT).read_or_empty()

    def topic_id(self) -> uuid.UUID | None:
        f = PartitionMetadataFile(self.directory / PARTITION_METADATA_FILE)
        return f.read().topic_id if f.exists() else None

    # -- reads -------------------------------------------------------------------------------------

    def _check_range(self, offset: int) -> None:
        if not self.log_start_offset <= offset <= self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} of topic {self.topic_partition.topic!r} partition "
                f"{self.topic_partition.partition} is outside [{self.log_start_offset}, "
                f"{self.log_end_offset}] (log start, log end) in {self.directory}"
            )

    def _max_position(self, seg: LogSegment, upper: int) -> int:
        if upper >= seg.next_offset:
            return seg.end_of_batches
        if upper <= seg.base_offset:
            return 0
        found = seg.translate_offset(upper)
        return seg.end_of_batches if found is None else found.position

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
        if fetch_offset < upper:
            for base in self.base_offsets[self._floor_slot(fetch_offset) :]:
                seg = self.segment(base)
                if seg.base_offset >= upper:
                    break
                found = seg.read(fetch_offset, max_bytes, self._max_position(seg, upper),
                                 min_one_message)  # fmt: skip
                if found is not None:
                    return found
        return FetchSlice(fetch_offset, -1, 0, memoryview(b""))

    def batches(
        self, start_offset: int | None = None, end_offset: int | None = None
    ) -> Iterator[AnyBatch]:
        """Every batch holding an offset in ``[start_offset, end_offset)`` (defaults: log start,
        log end), whole batches, across segments."""
        start = self.log_start_offset if start_offset is None else start_offset
        end = self.log_end_offset if end_offset is None else end_offset
        for base in self.base_offsets[self._floor_slot(start) :]:
            seg = self.segment(base)
            if seg.base_offset >= end:
                return
            found = seg.translate_offset(start)
            if found is None:
                continue
            for b in seg.batches(found.position, seg.end_of_batches):
                if b.base_offset >= end:
                    return
                yield b

    def find_offset_by_timestamp(self, timestamp: int) -> TimestampAndOffset | None:
        """Kafka's ListOffsets by timestamp: the first record at or after ``timestamp``."""
        for seg in self.segments():
            if seg.largest_timestamp >= timestamp:
                return seg.find_offset_by_timestamp(
                    timestamp, max(self.log_start_offset, seg.base_offset)
                )
        return None

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
