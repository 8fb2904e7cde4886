"""When a segment's offset and time index get entries (the index rules of Kafka's ``LogSegment``).

For each append of record bytes at ``position`` (one batch when rebuilding from a ``.log``; a
produce request's batches when writing):

1. if the append's max timestamp exceeds the max timestamp so far, that pair becomes the new
   (max timestamp, offset of max timestamp) so far;
2. if more than ``index.interval.bytes`` were appended since the last offset index entry
   (``bytes_since_last_entry > interval``, checked BEFORE counting this append, so the first append
   of a segment is never indexed), the offset index gets (append's last offset, ``position``) and
   the time index ``maybeAppend(max timestamp so far, its offset)`` (an entry only if the
   timestamp grew); the byte counter restarts at 0;
3. the append's size is added to the counter.

When the segment closes or rolls, the time index gets a final ``maybeAppend`` of the max
timestamp so far (without the full check). Rebuilding from a ``.log`` (Kafka's recovery) applies
the same steps per batch with the batch's last offset as the offset of its max timestamp, then the
final entry.

The max timestamp so far starts as the time index's last entry ((-1, base offset) when empty) and
the byte counter at 0: a segment reopened after a clean shutdown continues counting from its
reopening point, which is why the indexes of a segment that spans a broker restart differ from a
rebuild of its ``.log``.

Not thread-safe: one appender, under the caller's lock.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from broker_embedded.storage.offset_index import OffsetIndex
from broker_embedded.storage.time_index import TimeIndex, TimestampOffset

DEFAULT_INDEX_INTERVAL_BYTES = 4096


class BatchLike(Protocol):
    """What index building needs from a batch (``RecordBatch`` and ``LegacyRecordBatch``)."""

    @property
    def position(self) -> int: ...
    @property
    def size_in_bytes(self) -> int: ...
    @property
    def last_offset(self) -> int: ...
    @property
    def max_timestamp(self) -> int: ...


class SegmentIndexer:
    """Adds the entries Kafka would add to one segment's two indexes as bytes are appended."""

    __slots__ = (
        "offset_index",
        "time_index",
        "index_interval_bytes",
        "bytes_since_last_entry",
        "max_timestamp_so_far",
    )

    def __init__(
        self,
        offset_index: OffsetIndex,
        time_index: TimeIndex,
        index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
    ) -> None:
        self.offset_index = offset_index
        self.time_index = time_index
        self.index_interval_bytes = index_interval_bytes
        self.bytes_since_last_entry = 0
        self.max_timestamp_so_far: TimestampOffset = time_index.last_entry

    def on_append(
        self,
        position: int,
        size: int,
        largest_offset: int,
        largest_timestamp: int,
        offset_of_max_timestamp: int,
    ) -> None:
        """Account for ``size`` bytes appended at ``position`` (steps 1 to 3 above)."""
        if largest_timestamp > self.max_timestamp_so_far.timestamp:
            self.max_timestamp_so_far = TimestampOffset(largest_timestamp, offset_of_max_timestamp)
        if self.bytes_since_last_entry > self.index_interval_bytes:
            self.offset_index.append(largest_offset, position)
            m = self.max_timestamp_so_far
            self.time_index.maybe_append(m.timestamp, m.offset)
            self.bytes_since_last_entry = 0
        self.bytes_since_last_entry += size

    def on_close(self) -> None:
        """The final time index entry of a closing or rolled segment."""
        m = self.max_timestamp_so_far
        self.time_index.maybe_append(m.timestamp, m.offset, skip_full_check=True)

    @classmethod
    def rebuild(
        cls,
        batches: Iterable[BatchLike],
        base_offset: int,
        *,
        index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
        source: str = "<rebuilt>",
    ) -> tuple[OffsetIndex, TimeIndex]:
        """The indexes Kafka's recovery builds from a segment's batches (with the final entry)."""
        indexer = cls(
            OffsetIndex(base_offset, source=f"{source} (rebuilt)"),
            TimeIndex(base_offset, source=f"{source} (rebuilt)"),
            index_interval_bytes,
        )
        indexer.append_batches(batches)
        indexer.on_close()
        return indexer.offset_index, indexer.time_index

    def append_batches(self, batches: Iterable[BatchLike]) -> None:
        """:meth:`on_append` per batch, the batch's last offset as its max timestamp's offset."""
        for b in batches:
            last = b.last_offset
            self.on_append(b.position, b.size_in_bytes, last, b.max_timestamp, last)
