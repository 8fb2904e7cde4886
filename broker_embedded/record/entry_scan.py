"""The header scan of a run of log entries (``decode_kernel.scan_entries``) with its tables and
errors, shared by the columnar decoder, the read-only partition view and the cleaner.

Scan table invariant: a legacy (magic 0/1) row has ``S_LAST_DELTA`` 0, so :func:`last_offsets`
and :func:`last_offset` (``batch_layout.entry_last_offset``) give every row's last offset.

``MIN_BODY``: the smallest entry body per magic (``records.MIN_ENTRY_BODY``) as the kernel's
lookup array (-1: unknown magic). ``SCAN_ERRORS``: the message of each corrupt-entry status.
:func:`scan_window` scans the complete entries of a window into a table (``SCAN_FIELDS`` int64
columns, one row per entry, positions relative to the buffer): two kernel calls (count, fill),
no Python object per entry.

:func:`seek_entry` walks the headers of ``buf[start:stop]`` (read-only uint8) to the first entry
whose last offset reaches a target, one kernel call with no table: the segment reads' fast path
(a fetch's first batch, where a byte limit cut the last). It takes only what it can judge alone:
magic 2 entries of at least the v2 header's size, with a non-negative last offset delta and
record count (what ``RecordBatch`` checks of a header). Its
status: ``SEEK_FOUND`` (position, size, last offset of that entry), ``SEEK_END`` (the walk
reached ``stop``: position ``stop``), ``SEEK_PARTIAL`` (a header or an entry cut by ``stop`` at
position) and ``SEEK_ODD`` (anything else at position: a legacy entry, or a size, magic or delta
the slow path must judge and name). Callers run their Python walk on ``SEEK_ODD`` and wherever a
status is not a plain answer for them, so errors keep one source.

Immutable module state: thread-safe.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from broker_embedded.errors import CorruptRecordError
from broker_embedded.record import decode_kernel as k
from broker_embedded.record.batch_layout import (
    BATCH_LENGTH_OFFSET,
    LAST_OFFSET_DELTA_OFFSET,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    RECORD_BATCH_OVERHEAD,
    RECORDS_COUNT_OFFSET,
    entry_last_offset,
)
from broker_embedded.record.kernel_primitives import be_signed, jit
from broker_embedded.record.records import MIN_ENTRY_BODY

MIN_BODY = np.full(max(MIN_ENTRY_BODY) + 1, -1, np.int64)
for _magic, _size in MIN_ENTRY_BODY.items():
    MIN_BODY[_magic] = _size
NO_ROWS = np.empty((0, k.SCAN_FIELDS), np.int64)
SCAN_ERRORS = {
    k.SCAN_BAD_MAGIC: "unknown magic {detail}",
    k.SCAN_SHORT_ENTRY: "entry size {detail} is below the minimum for its magic",
    k.SCAN_NEGATIVE_COUNT: "negative record count {detail}",
    k.SCAN_NEGATIVE_DELTA: "negative last offset delta {detail}",
}


def last_offsets(table: np.ndarray) -> np.ndarray:
    """The last offset of every entry of a scan table."""
    return entry_last_offset(table[:, k.S_OFFSET], table[:, k.S_LAST_DELTA])


def last_offset(table: np.ndarray, row: int) -> int:
    """The last offset of the entry in row ``row`` of a scan table."""
    return entry_last_offset(int(table[row, k.S_OFFSET]), int(table[row, k.S_LAST_DELTA]))


class ScannedWindow(NamedTuple):
    """The complete entries of ``buf[start:stop]``: their table, where the last one ends, and
    for an empty table the size the first (partial) entry needs and its base offset (-1 when
    even its header is cut)."""

    table: np.ndarray
    end: int
    needed: int
    base_offset: int


def scan_window(
    buf: np.ndarray, start: int, stop: int, source: str, position: int
) -> ScannedWindow:
    """Scan ``buf[start:stop]`` (read-only uint8); a corrupt entry is a
    :class:`CorruptRecordError` naming ``source`` and the file position (``position`` is that
    of ``buf[0]``)."""
    n, status, at, offset, detail = k.scan_entries(buf, start, stop, MIN_BODY, NO_ROWS)
    if n == 0:
        if status in SCAN_ERRORS:
            raise CorruptRecordError(
                SCAN_ERRORS[status].format(detail=int(detail)),
                source=source,
                position=position + int(at),
                base_offset=int(offset),
            )
        return ScannedWindow(NO_ROWS, start, int(detail), int(offset))
    table = np.empty((n, k.SCAN_FIELDS), np.int64)
    k.scan_entries(buf, start, stop, MIN_BODY, table)
    return ScannedWindow(table, int(at), 0, -1)


SEEK_FOUND, SEEK_END, SEEK_PARTIAL, SEEK_ODD = 0, 1, 2, 3
NO_TARGET = np.iinfo(np.int64).max  # seek_entry's target to walk every whole entry


@jit
def seek_entry(buf, start, stop, target):  # type: ignore[no-untyped-def]
    """(status, position, size, last offset) of the walk from ``start`` (module docstring)."""
    pos = start
    while pos < stop:
        if stop - pos <= MAGIC_OFFSET:
            return SEEK_PARTIAL, pos, 0, -1
        length = be_signed(buf, pos + BATCH_LENGTH_OFFSET, 4)
        if buf[pos + MAGIC_OFFSET] != 2 or length < RECORD_BATCH_OVERHEAD - LOG_OVERHEAD:
            return SEEK_ODD, pos, 0, -1
        size = length + LOG_OVERHEAD
        if size > stop - pos:
            return SEEK_PARTIAL, pos, 0, -1
        delta = be_signed(buf, pos + LAST_OFFSET_DELTA_OFFSET, 4)
        if delta < 0 or be_signed(buf, pos + RECORDS_COUNT_OFFSET, 4) < 0:
            return SEEK_ODD, pos, 0, -1
        last = be_signed(buf, pos, 8) + delta
        if last >= target:
            return SEEK_FOUND, pos, size, last
        pos += size
    return SEEK_END, pos, 0, -1
