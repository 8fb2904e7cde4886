"""Reading a partition's log: the code the broker's log (unified_log.py) and the read-only view
of a log dir (partition_reader.py) share (the reading half of Kafka's ``LocalLog``).

- :func:`read_segments`: Kafka's ``LocalLog.read`` over one listing of segments: the slice of the
  first segment, from the one holding the fetch offset on, that has a batch ending at or after
  it, bounded by the position of the batch holding the upper offset (``LogSegment.position_of``).
  A segment passed over because it holds nothing at or after the offset must end in whole
  batches unless it is the last one (``LogSegment.check_tail``): no read skips the rest of a
  corrupt segment. How segments are listed and opened is the caller's policy (the broker's
  open segments and its writer's view of the active one; the read-only view's re-listing for
  concurrent cleaner swaps), passed in as ``segment_of``.
- :func:`walk_batches` and :func:`offset_by_timestamp`: the batches of an offset range across
  segments, and Kafka's ListOffsets by timestamp (the first segment with a record at or after
  the timestamp answers; later ones are tried when the records reaching it lie below the log
  start offset), with the same tail checks.
- :func:`header_tables`: batch headers of raw bytes, scanned by the compiled kernel
  (``decode_kernel.scan_entries`` via entry_scan.py), ``_SCAN_WINDOW_BYTES`` at a time, so
  memory stays bounded and no Python object is made per batch.
- :func:`end_of_complete_batches`: the offset after the last whole batch of fetched bytes (the
  upper bound of the aborted transactions a ``TXN_COMMITTED`` fetch returns).

Thread safety: plain functions over immutable segments; any number of threads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np

from broker_embedded.record.entry_scan import last_offset, scan_window
from broker_embedded.record.records import AnyBatch
from broker_embedded.storage.log_segment import FetchSlice, LogSegment, TimestampAndOffset
from broker_embedded.storage.log_segments import LogSegments

# Bytes of batches whose headers one scan call covers (a module variable so that tests can make
# windows cut batches without writing megabytes); a batch larger than it gets a wider window.
_SCAN_WINDOW_BYTES = 4 * 1024 * 1024


def read_segments(
    segments: LogSegments,
    segment_of: Callable[[int], LogSegment],
    fetch_offset: int,
    max_bytes: int,
    upper: int,
    min_one_message: bool,
    recovery_point: int = 0,
) -> tuple[FetchSlice, LogSegment | None]:
    """Raw batch bytes from the batch holding ``fetch_offset``, below ``upper``, and the segment
    read (``None`` and an empty slice when no segment holds such a batch); see the module
    docstring."""
    for base in segments.from_floor(fetch_offset):
        if base >= upper:
            break
        seg = segment_of(base)
        found = seg.read(fetch_offset, max_bytes, seg.position_of(upper), min_one_message)
        if found is not None:
            return found, seg
        seg.check_tail(last=segments.is_last(base), recovery_point=recovery_point)
    return FetchSlice(fetch_offset, -1, 0, memoryview(b"")), None


def walk_batches(
    segments: LogSegments,
    segment_of: Callable[[int], LogSegment],
    start: int,
    end: int,
    recovery_point: int = 0,
    walked: Callable[[LogSegment], None] | None = None,
) -> Iterator[AnyBatch]:
    """Every batch holding an offset in ``[start, end)``, whole, across segments;
    ``walked(segment)`` is called after each segment read to its end (after its tail check)."""
    for base in segments.from_floor(start):
        if base >= end:
            return
        seg = segment_of(base)
        found = seg.translate_offset(start)
        if found is not None:
            for b in seg.batches(found.position, seg.end_of_batches):
                if b.base_offset >= end:
                    return
                yield b
        seg.check_tail(last=segments.is_last(base), recovery_point=recovery_point)
        if walked is not None:
            walked(seg)


def offset_by_timestamp(
    segments: LogSegments,
    segment_of: Callable[[int], LogSegment],
    timestamp: int,
    log_start_offset: int,
    recovery_point: int = 0,
) -> TimestampAndOffset | None:
    """Kafka's ListOffsets by timestamp: the first record at or after ``timestamp`` whose offset
    is at least ``log_start_offset``, from the first segment holding one (``None``: none does).
    Segments passed over get their tail check, as they would be read past."""
    for base in segments:
        seg = segment_of(base)
        seg.check_tail(last=segments.is_last(base), recovery_point=recovery_point)
        if seg.largest_timestamp >= timestamp:
            found = seg.find_offset_by_timestamp(timestamp, max(log_start_offset, base))
            if found is not None:
                return found
    return None


def readonly_bytes(buf: bytes | memoryview) -> np.ndarray:
    """``buf`` as read-only uint8 (the kernel is compiled for read-only input only)."""
    arr = np.frombuffer(buf, np.uint8)
    if arr.flags.writeable:
        arr = arr.view()
        arr.flags.writeable = False
    return arr


def header_tables(buf: bytes | memoryview, source: str, position: int) -> Iterator[np.ndarray]:
    """Scan tables (``decode_kernel.SCAN_FIELDS`` int64 columns, one row per complete entry,
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


def end_of_complete_batches(records: bytes, default: int) -> int:
    """The offset after the last complete batch of a read, ``default`` when it holds none."""
    last = None
    for table in header_tables(records, "<fetched records>", 0):
        last = last_offset(table, -1)
    return default if last is None else last + 1
