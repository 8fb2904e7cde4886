"""The one walk of a run of log entries' headers (Kafka's ``ByteBufferLogInputStream.nextBatch``
with ``DefaultRecordBatch``'s header checks), and what its callers build on it:
seeking (``seek_entry``: the segment reads), validation (``log_validator.scan``: appends),
decoding (``decode_kernel.scan_entries``: the columnar decoder), cleaning and the partition
view (:func:`scan_window`) and the Python batch views (``records.iter_batches``). The walk only
says what it found; each caller's Python turns a status into its own domain exception, with its
own message, so a header is judged by one piece of code (a second copy of the rules once let a
header through that the other rejected).

:func:`walk_entries` ``(buf, start, end, v2_only, limit, seek, target, table)`` walks
``buf[start:end]`` (a uint8 array; ``end`` is clipped to ``len(buf)``). Every entry starts with
``offset int64, size int32`` (12 bytes of log overhead) and has its magic at byte 16
(batch_layout.py). Per entry, in this order:

- fewer than 17 bytes left: ``SCAN_TAIL_SHORT`` (detail: the bytes left);
- a magic above 2: ``SCAN_BAD_MAGIC`` (detail: the magic); a magic 0 or 1 when ``v2_only``:
  ``SCAN_LEGACY`` (detail: the magic; such callers leave legacy entries to their Python path);
- a size field below ``MIN_ENTRY_BODY[magic]``: ``SCAN_SHORT_ENTRY`` (detail: the size field);
- an entry longer than what is left: ``SCAN_TAIL_TRUNCATED`` (detail: the entry's size);
- magic 2: a negative recordsCount: ``SCAN_NEGATIVE_COUNT``, then a negative lastOffsetDelta:
  ``SCAN_NEGATIVE_DELTA`` (detail: the value);
- when ``seek`` and its last offset is ``>= target``: ``SCAN_FOUND`` (offset: that last
  offset, detail: its size; the entry is not counted nor put in the table);
- else the entry is walked: its fields go into row ``i % len(table)`` of ``table`` (the i-th
  entry walked; a table of no rows only counts).

A walk that reaches ``end`` says ``SCAN_OK``; one that walked ``limit`` entries with more bytes
left says ``SCAN_FULL``. It returns ``(entries walked, status, position, offset, detail)``: the
position is where the walk stopped (the start of the entry that stopped it, or just after the
last entry walked: where a walk resumes), the offset that entry's offset field (-1 when unread
or when no entry stopped it).

Table (``SCAN_FIELDS`` int64 columns, ``S_*``): position (relative to ``buf``), size, magic,
offset field, and for magic 2 the header fields at their ``batch_layout`` positions
(attributes as Kafka's signed int16, the CRC as stored, unsigned); a legacy row has the CRC at
12, the attributes byte at 17, a lastOffsetDelta of 0 (so :func:`last_offsets`, i.e.
``batch_layout.entry_last_offset``, gives every row's last offset) and -1 for the fields it
lacks.

:func:`scan_window` scans the complete entries of a window into a table (two walks: count,
fill), a corrupt entry being a :class:`CorruptRecordError` (``SCAN_ERRORS``: the messages).
:func:`seek_entry` is the segment reads' seek: the walk over v2 entries to the first whose last
offset reaches a target, as ``(SEEK_*, position, size, last offset)``; ``SEEK_ODD`` (a legacy
entry or a corrupt header) sends the caller to its Python walk, which names the error.

One function, run two ways. :func:`walk_entries` and :func:`seek_entry` are written as plain
Python that numba can compile, over the reads of ``header_reads`` (one ``struct`` call a read;
numba overloads them with its compiled reads), and this module imports no numba: ``kafkalog
serve`` runs them as written (its requests walk one to a few headers: a produce request's
batches, a fetch's walk from the index position). ``entry_scan_kernel`` compiles these same
functions (``numba.njit``) for the kernels that call the walk (the columnar decoder, the
cleaner) and, once imported, hands the compiled ones to this module's Python-facing calls
(:func:`walk`, :func:`seek`, :func:`scan_window`, through :func:`use_compiled`): a process that
has loaded the kernels (a Spark read, the cleaner) walks compiled everywhere, one that has not
walks in Python; the results are the same
(``tests/broker_embedded/record/test_walk_as_written.py`` runs both on Kafka-written segments
and corrupt headers).

Limits: the walk reads 61 bytes of header at most per entry and never past ``end``; compiled,
it creates no Python object. Numba's bounds checking is off: the length checks above are the
only ones. Thread safety: pure functions of their arguments (compiled with ``nogil``);
:func:`use_compiled` swaps two module references once, atomically under the GIL.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from broker_embedded.errors import CorruptRecordError
from broker_embedded.record.batch_layout import (
    LAST_OFFSET_DELTA_OFFSET,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    RECORDS_COUNT_OFFSET,
    entry_last_offset,
)
from broker_embedded.record.header_reads import (
    S_ATTR,
    S_BASE_SEQUENCE,
    S_BASE_TS,
    S_COUNT,
    S_CRC,
    S_EPOCH,
    S_LAST_DELTA,
    S_MAGIC,
    S_MAX_TS,
    S_OFFSET,
    S_POS,
    S_PRODUCER_EPOCH,
    S_PRODUCER_ID,
    S_SIZE,
    SCAN_FIELDS,
    be_signed,
    entry_head,
    fill_row,
)

__all__ = [  # the table's columns (header_reads), re-exported for the walk's callers
    "S_ATTR",
    "S_BASE_SEQUENCE",
    "S_BASE_TS",
    "S_COUNT",
    "S_CRC",
    "S_EPOCH",
    "S_LAST_DELTA",
    "S_MAGIC",
    "S_MAX_TS",
    "S_OFFSET",
    "S_POS",
    "S_PRODUCER_EPOCH",
    "S_PRODUCER_ID",
    "S_SIZE",
    "SCAN_FIELDS",
]

# The smallest body after the 12 bytes of log overhead, per magic (crc, magic, attributes,
# [timestamp], key length, value length; v2: the fixed batch header).
MIN_ENTRY_BODY = {0: 14, 1: 22, 2: 49}
_MIN_V0_BODY, _MIN_V1_BODY, _MIN_V2_BODY = MIN_ENTRY_BODY[0], MIN_ENTRY_BODY[1], MIN_ENTRY_BODY[2]

# -- the walk's statuses -------------------------------------------------------------------------
SCAN_OK = 0  # the walk reached the end
SCAN_TAIL_SHORT = 1  # fewer than 17 bytes left (detail: how many)
SCAN_TAIL_TRUNCATED = 2  # the entry is longer than what is left (detail: its size)
SCAN_BAD_MAGIC = 3  # detail: the magic
SCAN_SHORT_ENTRY = 4  # size field below MIN_ENTRY_BODY (detail: the size field)
SCAN_NEGATIVE_COUNT = 5  # detail: recordsCount
SCAN_NEGATIVE_DELTA = 6  # detail: lastOffsetDelta
SCAN_LEGACY = 7  # a magic 0 or 1 entry in a v2-only walk (detail: the magic)
SCAN_FOUND = 8  # the last entry walked reaches the seek's target
SCAN_FULL = 9  # ``limit`` entries walked, bytes left

NO_LIMIT = np.iinfo(np.int64).max
NO_ROWS = np.empty((0, SCAN_FIELDS), np.int64)
SCAN_ERRORS = {
    SCAN_BAD_MAGIC: "unknown magic {detail}",
    SCAN_SHORT_ENTRY: "entry size {detail} is below the minimum for its magic",
    SCAN_NEGATIVE_COUNT: "negative record count {detail}",
    SCAN_NEGATIVE_DELTA: "negative last offset delta {detail}",
}


def walk_entries(buf, start, end, v2_only, limit, seek, target, table):  # type: ignore[no-untyped-def]
    """``(entries walked, status, position, offset, detail)`` of the walk of ``buf[start:end]``
    (module docstring). Plain Python that numba compiles as it is (``entry_scan_kernel``)."""
    n = 0
    pos = start
    end = min(end, len(buf))
    cap = table.shape[0]
    while pos < end:
        if n >= limit:
            return n, SCAN_FULL, pos, -1, 0
        remaining = end - pos
        if remaining < MAGIC_OFFSET + 1:
            return n, SCAN_TAIL_SHORT, pos, -1, remaining
        offset, length, magic = entry_head(buf, pos)
        if magic > 2:
            return n, SCAN_BAD_MAGIC, pos, offset, magic
        if magic != 2 and v2_only:
            return n, SCAN_LEGACY, pos, offset, magic
        least = _MIN_V2_BODY if magic == 2 else (_MIN_V1_BODY if magic == 1 else _MIN_V0_BODY)
        if length < least:
            return n, SCAN_SHORT_ENTRY, pos, offset, length
        size = length + LOG_OVERHEAD
        if size > remaining:
            return n, SCAN_TAIL_TRUNCATED, pos, offset, size
        delta = 0
        if magic == 2:
            count = be_signed(buf, pos + RECORDS_COUNT_OFFSET, 4)
            if count < 0:
                return n, SCAN_NEGATIVE_COUNT, pos, offset, count
            delta = be_signed(buf, pos + LAST_OFFSET_DELTA_OFFSET, 4)
            if delta < 0:
                return n, SCAN_NEGATIVE_DELTA, pos, offset, delta
        if seek and offset + delta >= target:
            return n, SCAN_FOUND, pos, offset + delta, size
        if cap > 0:
            fill_row(buf, pos, size, magic, table, n % cap)
        n += 1
        pos += size
    return n, SCAN_OK, pos, -1, 0


def last_offsets(table: np.ndarray) -> np.ndarray:
    """The last offset of every entry of a scan table."""
    return entry_last_offset(table[:, S_OFFSET], table[:, S_LAST_DELTA])


def last_offset(table: np.ndarray, row: int) -> int:
    """The last offset of the entry in row ``row`` of a scan table."""
    return entry_last_offset(int(table[row, S_OFFSET]), int(table[row, S_LAST_DELTA]))


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
    n, status, at_, offset, detail = _walk(buf, start, stop, False, NO_LIMIT, False, 0, NO_ROWS)
    if n == 0:
        if status in SCAN_ERRORS:
            raise CorruptRecordError(
                SCAN_ERRORS[status].format(detail=int(detail)),
                source=source,
                position=position + int(at_),
                base_offset=None if offset < 0 else int(offset),  # a negative one names none
            )
        return ScannedWindow(NO_ROWS, start, int(detail), int(offset))
    table = np.empty((n, SCAN_FIELDS), np.int64)
    _walk(buf, start, stop, False, n, False, 0, table)
    return ScannedWindow(table, int(at_), 0, -1)


SEEK_FOUND, SEEK_END, SEEK_PARTIAL, SEEK_ODD = 0, 1, 2, 3
NO_TARGET = np.iinfo(np.int64).max  # seek_entry's target to walk every whole entry


def seek_entry(buf, start, stop, target):  # type: ignore[no-untyped-def]
    """(status, position, size, last offset) of the walk from ``start`` over v2 entries to the
    first whose last offset is ``>= target``: ``SEEK_FOUND`` (that entry), ``SEEK_END`` (the
    walk reached ``stop``: position ``stop``), ``SEEK_PARTIAL`` (a header or an entry cut by
    ``stop`` at position) and ``SEEK_ODD`` (a legacy entry or a corrupt header at position,
    for the caller's Python walk to judge and name). Plain Python that numba compiles as it
    is (``entry_scan_kernel``)."""
    count_only = np.empty((0, SCAN_FIELDS), np.int64)
    _, status, pos, last, size = walk_entries(
        buf, start, stop, True, NO_LIMIT, True, target, count_only
    )
    if status == SCAN_FOUND:
        return SEEK_FOUND, pos, size, last
    if status == SCAN_OK:
        return SEEK_END, pos, 0, -1
    if status == SCAN_TAIL_SHORT or status == SCAN_TAIL_TRUNCATED:
        return SEEK_PARTIAL, pos, 0, -1
    return SEEK_ODD, pos, 0, -1


# -- the walk as Python callers run it -------------------------------------------------------------

_walk = walk_entries  # compiled once entry_scan_kernel is imported (use_compiled)
_seek = seek_entry


def use_compiled(compiled_walk, compiled_seek) -> None:  # type: ignore[no-untyped-def]
    """Run :func:`walk` and :func:`seek` (and :func:`scan_window`) compiled from now on:
    ``entry_scan_kernel`` calls it with ``numba.njit`` of :func:`walk_entries` and
    :func:`seek_entry`, the same functions."""
    global _walk, _seek
    _walk, _seek = compiled_walk, compiled_seek


def walk(buf, start, end, v2_only, limit, seek, target, table):  # type: ignore[no-untyped-def]
    """:func:`walk_entries`, compiled when this process has loaded the kernels."""
    return _walk(buf, start, end, v2_only, limit, seek, target, table)


def seek(buf, start, stop, target):  # type: ignore[no-untyped-def]
    """:func:`seek_entry`, compiled when this process has loaded the kernels."""
    return _seek(buf, start, stop, target)


def compiled() -> bool:
    """Whether :func:`walk` and :func:`seek` run compiled in this process."""
    return _walk is not walk_entries
