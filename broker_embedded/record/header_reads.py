"""The byte reads the one header walk (``entry_scan.walk_entries``) is written with, as plain
Python over a uint8 array (or any buffer): what ``kafkalog serve`` runs, without numba.

The walk is a single function, run two ways: called as it is (the server's requests: a produce's
checks, a fetch's seek, where it walks one to a few headers) and compiled by numba
(``entry_scan_kernel``: the Spark reads, the columnar decoder, the cleaner). Numba compiles the
walk's body as written; these reads are the only part with two implementations:
``kernel_primitives`` registers its compiled reads as their numba overloads (``numba.extending
.overload``), so inside a kernel each call below is the compiled read of the same bytes. Here
each read is one ``struct`` call (a plain-Python byte loop costs several times more), and a v2
header's fields are unpacked in one call.

- :func:`at` ``(buf, pos)``: ``buf[pos]`` as an int; :func:`be` / :func:`be_signed` ``(buf,
  pos, width)`` (width 1, 2, 4 or 8): the unsigned / two's complement big-endian integer at
  ``buf[pos:]``; :func:`put_be` ``(out, pos, value, width)`` writes one (the low ``width``
  bytes of ``value``).
- :func:`entry_head` ``(buf, pos)``: ``(offset field, size field, magic)``, the 17 bytes every
  entry starts with (batch_layout.py).
- :func:`fill_row` ``(buf, pos, size, magic, table, row)``: the walk's table row of the entry at
  ``pos`` (columns ``S_*``, below; the layout in ``entry_scan``'s docstring).

Every read is in bounds: the walk checked the lengths first (a read past the end raises
``struct.error`` here and is undefined when compiled). :func:`readonly_bytes` gives any buffer as
the read-only uint8 array the walk takes (one compiled signature whether the bytes are writable
or not).

Imports no numba (``tests/test_layering.py`` checks it). Thread safety: pure functions;
immutable module state.
"""

from __future__ import annotations

import operator
import struct

import numpy as np

from broker_embedded.record.batch_layout import (
    ATTRIBUTES_OFFSET,
    BASE_SEQUENCE_OFFSET,
    BASE_TIMESTAMP_OFFSET,
    BATCH_LENGTH_OFFSET,
    CRC_OFFSET,
    LAST_OFFSET_DELTA_OFFSET,
    LEGACY_ATTRIBUTES_OFFSET,
    LEGACY_CRC_OFFSET,
    MAGIC_OFFSET,
    MAX_TIMESTAMP_OFFSET,
    PARTITION_LEADER_EPOCH_OFFSET,
    PRODUCER_EPOCH_OFFSET,
    PRODUCER_ID_OFFSET,
    RECORD_BATCH_OVERHEAD,
    RECORDS_COUNT_OFFSET,
)

# -- the walk's table: one row of int64 per entry --------------------------------------------------
S_POS, S_SIZE, S_MAGIC, S_OFFSET, S_ATTR, S_LAST_DELTA = 0, 1, 2, 3, 4, 5
S_BASE_TS, S_MAX_TS, S_PRODUCER_ID, S_COUNT, S_CRC = 6, 7, 8, 9, 10
S_EPOCH, S_PRODUCER_EPOCH, S_BASE_SEQUENCE = 11, 12, 13
SCAN_FIELDS = 14

_WIDTHS = ((1, "b"), (2, "h"), (4, "i"), (8, "q"))  # width, struct code (signed)
_SIGNED = {w: struct.Struct(f">{c}").unpack_from for w, c in _WIDTHS}
_UNSIGNED = {w: struct.Struct(f">{c.upper()}").unpack_from for w, c in _WIDTHS}
_PACK = {w: struct.Struct(f">{c.upper()}").pack_into for w, c in _WIDTHS}
_MASK = {w: (1 << (8 * w)) - 1 for w in _PACK}
_HEAD = struct.Struct(f">qi{MAGIC_OFFSET - BATCH_LENGTH_OFFSET - 4}xB")  # magic unsigned, as at()
_U8 = struct.Struct(">B").unpack_from

# The v2 header as one struct, its fields in header order, each with its table column; built
# from batch_layout's positions (and checked against them) so that the layout is named once.
_V2_FIELDS = (  # (position, struct code, column); the offset and magic are put by the walk
    (BATCH_LENGTH_OFFSET, "i", None),
    (PARTITION_LEADER_EPOCH_OFFSET, "i", S_EPOCH),
    (MAGIC_OFFSET, "b", None),
    (CRC_OFFSET, "I", S_CRC),
    (ATTRIBUTES_OFFSET, "h", S_ATTR),
    (LAST_OFFSET_DELTA_OFFSET, "i", S_LAST_DELTA),
    (BASE_TIMESTAMP_OFFSET, "q", S_BASE_TS),
    (MAX_TIMESTAMP_OFFSET, "q", S_MAX_TS),
    (PRODUCER_ID_OFFSET, "q", S_PRODUCER_ID),
    (PRODUCER_EPOCH_OFFSET, "h", S_PRODUCER_EPOCH),
    (BASE_SEQUENCE_OFFSET, "i", S_BASE_SEQUENCE),
    (RECORDS_COUNT_OFFSET, "i", S_COUNT),
)
_V2_HEADER = struct.Struct(">q" + "".join(code for _, code, _ in _V2_FIELDS))
_at = 8
for _pos, _code, _ in _V2_FIELDS:
    assert _pos == _at, f"batch_layout: field at {_pos}, struct at {_at}"
    _at += struct.calcsize(">" + _code)
assert _at == _V2_HEADER.size == RECORD_BATCH_OVERHEAD
# a row from (pos, size, magic) + the unpacked header: the index of each column's value
_SOURCE = [0] * SCAN_FIELDS
_SOURCE[S_POS], _SOURCE[S_SIZE], _SOURCE[S_MAGIC], _SOURCE[S_OFFSET] = 0, 1, 2, 3
for _i, (_, _, _column) in enumerate(_V2_FIELDS):
    if _column is not None:
        _SOURCE[_column] = 4 + _i
assert sorted(_SOURCE) == sorted({*_SOURCE}) and 0 not in _SOURCE[1:]
_V2_ROW = operator.itemgetter(*_SOURCE)
_ROW = struct.Struct(f"={SCAN_FIELDS}q")  # a table row, native int64 (numpy's layout)
del _at, _pos, _code, _i, _column


def at(buf, pos):  # type: ignore[no-untyped-def]
    """``buf[pos]`` as an int (in bounds)."""
    return _U8(buf, pos)[0]


def be(buf, pos, width):  # type: ignore[no-untyped-def]
    """Unsigned big-endian integer of ``width`` (1, 2, 4, 8) bytes at ``buf[pos:]``."""
    return _UNSIGNED[width](buf, pos)[0]


def be_signed(buf, pos, width):  # type: ignore[no-untyped-def]
    """Two's complement big-endian integer of ``width`` (1, 2, 4, 8) bytes at ``buf[pos:]``."""
    return _SIGNED[width](buf, pos)[0]


def put_be(out, pos, value, width):  # type: ignore[no-untyped-def]
    """The low ``width`` bytes of ``value`` big-endian at ``out[pos:]``."""
    _PACK[width](out, pos, int(value) & _MASK[width])


def entry_head(buf, pos):  # type: ignore[no-untyped-def]
    """``(offset field, size field, magic)`` of the entry at ``buf[pos:]`` (17 bytes)."""
    return _HEAD.unpack_from(buf, pos)


def fill_row(buf, pos, size, magic, table, row):  # type: ignore[no-untyped-def]
    """Row ``row`` of the walk's table for the entry at ``buf[pos:]`` of ``size`` bytes."""
    if magic == 2:
        values = _V2_ROW((pos, size, magic, *_V2_HEADER.unpack_from(buf, pos)))
        if table.flags.c_contiguous and table.flags.writeable:  # the walk's callers' tables
            _ROW.pack_into(table, row * _ROW.size, *values)
        else:
            table[row] = values
        return
    table[row] = -1
    table[row, S_POS] = pos
    table[row, S_SIZE] = size
    table[row, S_MAGIC] = magic
    table[row, S_OFFSET] = be_signed(buf, pos, 8)
    table[row, S_CRC] = be(buf, pos + LEGACY_CRC_OFFSET, 4)
    table[row, S_ATTR] = at(buf, pos + LEGACY_ATTRIBUTES_OFFSET)
    table[row, S_LAST_DELTA] = 0


def readonly_bytes(buf: bytes | bytearray | memoryview) -> np.ndarray:
    """``buf`` as a read-only uint8 array, without a copy (module docstring)."""
    arr = np.frombuffer(buf, np.uint8)
    if arr.flags.writeable:
        arr = arr.view()
        arr.flags.writeable = False
    return arr
