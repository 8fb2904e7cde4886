"""The numba primitives shared by the compiled kernels (decoder, encoder, entry scan, cleaner,
offset map, partitioner): decorators, byte reads and writes, varints, CRC-32C.

What each primitive assumes:

- :func:`jit`: ``numba.njit(cache=True, nogil=True)`` (compiled in memory, with a warning, when
  no cache directory is writable); :func:`inline`: a helper inlined into its callers at numba IR
  level (compiled and cached with them, never called from Python).
- :func:`memcpy` ``(dst, dst_pos, src, src_pos, n)``: LLVM's memcpy of ``n`` bytes between two
  distinct arrays; the caller checked ``0 <= pos`` and ``pos + n <= len`` for both.
- :func:`at` ``(buf, pos)``: ``buf[pos]`` as int64 for ``0 <= pos < len(buf)`` (checked by the
  caller: the index is unsigned, so a negative ``pos`` is not wrapped but reads out of bounds).
- :func:`be` / :func:`be_signed` ``(buf, pos, width)``: the unsigned / two's complement
  big-endian integer of ``width`` (1 to 8) bytes at ``buf[pos:]``, in bounds (caller checked).
  :func:`put_be` ``(out, pos, value, width)`` writes the low ``width`` bytes of ``value``
  big-endian, in bounds (caller checked); :func:`le32` reads an unsigned little-endian int32,
  in bounds (caller checked).
- :func:`read_varint` / :func:`read_varlong` ``(buf, pos, end)``: the zigzag int32 varint /
  int64 varlong in ``buf[pos:end]`` (``end <= len(buf)``: the caller checked): ``(value, next
  position)``, or ``(VARINT_TRUNCATED or VARINT_TOO_LONG, -1)``. They check their own reads
  against ``end``, and a negative ``pos`` (an earlier failed read) fails at once, so a chain of
  reads runs straight through and reports the first failure.
- :func:`varint_size` ``(n)``: bytes of the zigzag varint of int64 ``n``; :func:`write_varint`
  ``(out, pos, n)`` writes it at ``out[pos:]`` (room checked by the caller) and returns the
  position after it. A varlong is the same encoding: both serve int32 and int64 values.
- :func:`crc32c` ``(buf, start, end)``: CRC-32C (Castagnoli) of ``buf[start:end]``, in bounds
  (caller checked), for batches rewritten inside a kernel; Python code uses the ``crc32c``
  package (``record_batch.crc32c_of``).
- :func:`last_offset` ``(offset, last_delta)``: ``batch_layout.entry_last_offset`` compiled.
- :func:`readonly_bytes` ``(buf)`` (Python, ``header_reads``'): any buffer as the read-only
  uint8 array the kernels that read bytes are compiled for (one signature whether the bytes are
  writable or not).
- The numba-free header walk's reads (``header_reads``: ``at``, ``be``, ``be_signed``,
  ``put_be``, ``entry_head``, ``fill_row``) get their compiled implementations here, registered
  as numba overloads (``numba.extending.overload``) when this module is imported: inside a
  kernel a call of one of them is the compiled read below; from Python it is the plain one.

Numba's array bounds checking is off: the callers' checks are the only ones.

Speed notes (measured, 1 M records of 100-byte values): an unsigned index avoids numba's
negative-index wraparound (4x on the decode loop); copies use LLVM's memcpy (numba's slice
assignment is a byte loop).

Thread safety: pure functions over the arrays they are given; compiled ones release the GIL.
"""

from __future__ import annotations

import warnings

import numba
import numpy as np
from numba.core import cgutils, types
from numba.extending import intrinsic, overload

from broker_embedded.record import header_reads as hr
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
    RECORDS_COUNT_OFFSET,
    entry_last_offset,
)
from broker_embedded.record.header_reads import readonly_bytes

__all__ = ["readonly_bytes"]  # re-exported for the kernels' Python callers

VARINT_TRUNCATED = 1
VARINT_TOO_LONG = 2
_UINT32_MAX = 0xFFFFFFFF
# a logical (unsigned) shift right by 7 of an int64 bit pattern
_LOW_57_BITS = 0x01FFFFFFFFFFFFFF


def jit(fn):  # type: ignore[no-untyped-def]
    """``numba.njit(cache=True, nogil=True)``, without the on-disk cache when no cache directory
    is writable (numba refuses ``cache=True`` then)."""
    try:
        return numba.njit(cache=True, nogil=True)(fn)
    except RuntimeError as e:
        warnings.warn(f"numba cache unavailable, compiling in memory: {e}", stacklevel=2)
        return numba.njit(cache=False, nogil=True)(fn)


def inline(fn):  # type: ignore[no-untyped-def]
    """A helper inlined into its callers at numba IR level (compiled, and cached, with them)."""
    return numba.njit(inline="always", nogil=True)(fn)


@intrinsic
def memcpy(typingctx, dst, dst_pos, src, src_pos, n):  # type: ignore[no-untyped-def]
    """``dst[dst_pos : dst_pos + n] = src[src_pos : src_pos + n]`` as LLVM's memcpy (numba's
    own slice copy is a loop several times slower); the caller checked the bounds."""
    sig = types.void(dst, types.int64, src, types.int64, types.int64)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        dst_array = context.make_array(signature.args[0])(context, builder, args[0])
        src_array = context.make_array(signature.args[2])(context, builder, args[2])
        to = builder.gep(dst_array.data, [args[1]])
        source = builder.gep(src_array.data, [args[3]])
        cgutils.raw_memcpy(builder, to, source, args[4], 1)
        return context.get_dummy_value()

    return sig, codegen


@inline
def at(buf, pos):  # type: ignore[no-untyped-def]
    """``buf[pos]`` for ``pos >= 0`` (checked by the caller) as int64: an unsigned index spares
    numba's negative-index wraparound, which costs the parse loop a factor of four."""
    return np.int64(buf[np.uint64(pos)])


@jit
def be(buf, pos, width):  # type: ignore[no-untyped-def]
    """Unsigned big-endian integer of ``width`` bytes (the caller checked the bounds)."""
    v = np.int64(0)
    for i in range(width):
        v = (v << 8) | at(buf, pos + i)
    return v


@jit
def be_signed(buf, pos, width):  # type: ignore[no-untyped-def]
    """Two's complement big-endian integer of ``width`` bytes (the caller checked the bounds)."""
    v = be(buf, pos, width)
    if width < 8 and v >= (np.int64(1) << (8 * width - 1)):
        v -= np.int64(1) << (8 * width)
    return v


@inline
def put_be(out, pos, value, width):  # type: ignore[no-untyped-def]
    """The low ``width`` bytes of ``value`` big-endian at ``out[pos:]`` (in bounds)."""
    for i in range(width):
        out[pos + i] = (value >> (8 * (width - 1 - i))) & 0xFF


@inline
def le32(buf, pos):  # type: ignore[no-untyped-def]
    """Unsigned little-endian int32 at ``buf[pos:]`` (the caller checked the bounds)."""
    return (
        at(buf, pos) | (at(buf, pos + 1) << 8) | (at(buf, pos + 2) << 16) | (at(buf, pos + 3) << 24)
    )


# -- varints -----------------------------------------------------------------------------------


@inline
def read_varint(buf, pos, end):  # type: ignore[no-untyped-def]
    """Zigzag int32 varint in ``buf[pos:end]``: (value, next position), or (error, -1) with
    error ``VARINT_TRUNCATED`` / ``VARINT_TOO_LONG``; a negative ``pos`` fails at once."""
    if np.uint64(pos) >= np.uint64(end):  # also a negative pos (an earlier error)
        return np.int64(VARINT_TRUNCATED), np.int64(-1)
    b = at(buf, pos)
    if b < 0x80:  # one byte: the common case
        return (b >> 1) ^ -(b & 1), pos + 1
    z = b & 0x7F
    shift = 7
    p = pos + 1
    while True:
        if p >= end:
            return np.int64(VARINT_TRUNCATED), np.int64(-1)
        b = at(buf, p)
        p += 1
        z |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
        if shift > 28:
            return np.int64(VARINT_TOO_LONG), np.int64(-1)
    if z > _UINT32_MAX:
        return np.int64(VARINT_TOO_LONG), np.int64(-1)
    return (z >> 1) ^ -(z & 1), p


@inline
def read_varlong(buf, pos, end):  # type: ignore[no-untyped-def]
    """Zigzag int64 varlong, like :func:`read_varint` (at most 10 bytes, the 10th 0 or 1)."""
    z = np.int64(0)
    shift = 0
    p = pos
    while True:
        if np.uint64(p) >= np.uint64(end):  # also a negative pos (an earlier error)
            return np.int64(VARINT_TRUNCATED), np.int64(-1)
        b = at(buf, p)
        p += 1
        if shift == 63 and b > 1:
            return np.int64(VARINT_TOO_LONG), np.int64(-1)
        z |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
        if shift > 63:
            return np.int64(VARINT_TOO_LONG), np.int64(-1)
    # logical shift right of the 64-bit pattern, then undo the zigzag
    return ((z >> 1) & 0x7FFFFFFFFFFFFFFF) ^ -(z & 1), p


@inline
def zigzag(n):  # type: ignore[no-untyped-def]
    """Zigzag of an int64 as an int64 bit pattern (equal to the int32 zigzag for int32 values)."""
    return (n << 1) ^ (n >> 63)


@inline
def uvarint_size(z):  # type: ignore[no-untyped-def]
    """Bytes of an unsigned varint holding the (unsigned) bit pattern ``z``."""
    size = np.int64(1)
    while z & -128:  # bits above the low 7
        z = (z >> 7) & _LOW_57_BITS
        size += 1
    return size


@inline
def varint_size(n):  # type: ignore[no-untyped-def]
    """Bytes of the zigzag varint (or varlong) of ``n``."""
    return uvarint_size(zigzag(np.int64(n)))


@inline
def write_varint(out, pos, n):  # type: ignore[no-untyped-def]
    """Write zigzag ``n`` at ``out[pos]``; return the position after it."""
    z = zigzag(np.int64(n))
    p = np.uint64(pos)
    while z & -128:
        out[p] = np.uint8((z & 0x7F) | 0x80)
        z = (z >> 7) & _LOW_57_BITS
        p += np.uint64(1)
    out[p] = np.uint8(z)
    return np.int64(p) + 1


# -- CRC-32C (Castagnoli), slicing by 8 ---------------------------------------------------------


def _crc_tables() -> np.ndarray:
    t = np.zeros((8, 256), np.int64)
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        t[0, n] = c
    for n in range(256):
        c = int(t[0, n])
        for k in range(1, 8):
            c = int(t[0, c & 0xFF]) ^ (c >> 8)
            t[k, n] = c
    return t


_CRC_TABLES = _crc_tables()


@jit
def crc32c(buf, start, end):  # type: ignore[no-untyped-def]
    """CRC-32C of ``buf[start:end]`` (in bounds: the caller checked)."""
    t = _CRC_TABLES
    crc = np.int64(0xFFFFFFFF)
    p = start
    while end - p >= 8:
        one = crc ^ le32(buf, p)
        two = le32(buf, p + 4)
        crc = (
            t[7, one & 0xFF]
            ^ t[6, (one >> 8) & 0xFF]
            ^ t[5, (one >> 16) & 0xFF]
            ^ t[4, (one >> 24) & 0xFF]
            ^ t[3, two & 0xFF]
            ^ t[2, (two >> 8) & 0xFF]
            ^ t[1, (two >> 16) & 0xFF]
            ^ t[0, (two >> 24) & 0xFF]
        )
        p += 8
    while p < end:
        crc = t[0, (crc ^ at(buf, p)) & 0xFF] ^ (crc >> 8)
        p += 1
    return crc ^ 0xFFFFFFFF


last_offset = inline(entry_last_offset)


# -- the header walk's reads, compiled (header_reads' docstring) ---------------------------------


@inline
def entry_head(buf, pos):  # type: ignore[no-untyped-def]
    """``(offset field, size field, magic)`` of the entry at ``buf[pos:]`` (17 bytes)."""
    length = be_signed(buf, pos + BATCH_LENGTH_OFFSET, 4)
    return be_signed(buf, pos, 8), length, at(buf, pos + MAGIC_OFFSET)


@jit
def fill_row(buf, pos, size, magic, table, row):  # type: ignore[no-untyped-def]
    """Row ``row`` of the walk's table (``header_reads.S_*``) for the entry at ``buf[pos:]``."""
    table[row, hr.S_POS] = pos
    table[row, hr.S_SIZE] = size
    table[row, hr.S_MAGIC] = magic
    table[row, hr.S_OFFSET] = be_signed(buf, pos, 8)
    if magic == 2:
        table[row, hr.S_CRC] = be(buf, pos + CRC_OFFSET, 4)
        table[row, hr.S_ATTR] = be_signed(buf, pos + ATTRIBUTES_OFFSET, 2)
        table[row, hr.S_LAST_DELTA] = be_signed(buf, pos + LAST_OFFSET_DELTA_OFFSET, 4)
        table[row, hr.S_BASE_TS] = be_signed(buf, pos + BASE_TIMESTAMP_OFFSET, 8)
        table[row, hr.S_MAX_TS] = be_signed(buf, pos + MAX_TIMESTAMP_OFFSET, 8)
        table[row, hr.S_PRODUCER_ID] = be_signed(buf, pos + PRODUCER_ID_OFFSET, 8)
        table[row, hr.S_COUNT] = be_signed(buf, pos + RECORDS_COUNT_OFFSET, 4)
        table[row, hr.S_EPOCH] = be_signed(buf, pos + PARTITION_LEADER_EPOCH_OFFSET, 4)
        table[row, hr.S_PRODUCER_EPOCH] = be_signed(buf, pos + PRODUCER_EPOCH_OFFSET, 2)
        table[row, hr.S_BASE_SEQUENCE] = be_signed(buf, pos + BASE_SEQUENCE_OFFSET, 4)
    else:
        table[row, hr.S_CRC] = be(buf, pos + LEGACY_CRC_OFFSET, 4)
        table[row, hr.S_ATTR] = at(buf, pos + LEGACY_ATTRIBUTES_OFFSET)
        table[row, hr.S_LAST_DELTA] = 0
        table[row, hr.S_BASE_TS] = -1
        table[row, hr.S_MAX_TS] = -1
        table[row, hr.S_PRODUCER_ID] = -1
        table[row, hr.S_COUNT] = -1
        table[row, hr.S_EPOCH] = -1
        table[row, hr.S_PRODUCER_EPOCH] = -1
        table[row, hr.S_BASE_SEQUENCE] = -1


@overload(hr.at, inline="always")
def _at(buf, pos):  # type: ignore[no-untyped-def]
    return lambda buf, pos: at(buf, pos)


@overload(hr.be, inline="always")
def _be(buf, pos, width):  # type: ignore[no-untyped-def]
    return lambda buf, pos, width: be(buf, pos, width)


@overload(hr.be_signed, inline="always")
def _be_signed(buf, pos, width):  # type: ignore[no-untyped-def]
    return lambda buf, pos, width: be_signed(buf, pos, width)


@overload(hr.put_be, inline="always")
def _put_be(out, pos, value, width):  # type: ignore[no-untyped-def]
    return lambda out, pos, value, width: put_be(out, pos, value, width)


@overload(hr.entry_head, inline="always")
def _entry_head(buf, pos):  # type: ignore[no-untyped-def]
    return lambda buf, pos: entry_head(buf, pos)


@overload(hr.fill_row, inline="always")
def _fill_row(buf, pos, size, magic, table, row):  # type: ignore[no-untyped-def]
    return lambda buf, pos, size, magic, table, row: fill_row(buf, pos, size, magic, table, row)
