"""The compiled snappy decoder (numba) of compressed record batches (codec 2): raw snappy blocks
and the xerial framing Kafka's Java producer writes around them.

Raw block: the uncompressed length as an unsigned varint (at most 5 bytes, below 2^32), then
elements, each starting with a tag byte whose low 2 bits give its kind:

- 0 literal: ``tag >> 2`` is the length minus 1 when below 60; 60 to 63 say that 1 to 4
  little-endian bytes follow holding the length minus 1; then the literal bytes;
- 1 copy, 1-byte offset: length ``4 + (tag >> 2 & 7)``, offset ``(tag >> 5) << 8`` plus the
  next byte;
- 2 copy, 2-byte offset: length ``1 + (tag >> 2)``, offset a little-endian uint16;
- 3 copy, 4-byte offset: length ``1 + (tag >> 2)``, offset a little-endian uint32.

A copy's offset is 1 up to the bytes of the block written so far; it may be shorter than the
length (a repeated pattern). The elements must fill exactly the declared length.

Xerial framing (``compression``'s docstring): the 16-byte header (magic ``82 53 4E 41 50 50 59
00``, version, compatible), then blocks as [int32 big-endian length][raw block]; a header may
appear again between blocks (concatenated streams). Input that does not start with the magic is
one raw block (librdkafka writes raw snappy).

Checks: every read is compared with the end of its input before it happens and every write with
``limit`` (short literals and copies move a constant 64 or 16 bytes, see ``_WIDE``: bytes of
``dst[op:limit]`` past the output may be overwritten, none past ``limit``); a block whose
declared length would pass ``limit`` is :data:`NO_ROOM` before anything is written (a snappy bomb
is refused before inflating). Anything malformed is :data:`CORRUPT`
(``compression.decompress`` then reports it with cramjam's message). Numba's bounds checking is
off: these checks are the only ones.

Thread safety: pure functions over the arrays they are given; they release the GIL.
"""

from __future__ import annotations

import numpy as np

from broker_embedded.record.kernel_primitives import at, inline, jit, le32, memcpy
from broker_embedded.record.lz4_frame import CORRUPT, NO_ROOM, OK, copy_match

_MAGIC_LOW = 0x414E5382  # "\x82SNA" little-endian
_MAGIC_HIGH = 0x00595050  # "PPY\x00"
_HEADER = 16
_MAX_PREAMBLE = 5
# Literals of up to 60 bytes (their length in the tag) move 64 bytes, copies of up to 16
# bytes from at least 8 back move 16, whatever their length, when input and output have that
# much room left: constant sizes, which LLVM turns into a few wide moves instead of a memcpy call.
# The bytes written past an element are overwritten by the next ones (never past ``limit``).
_WIDE = 16
_WIDE_LITERAL = 64


@jit
def decode_raw(src, ip, end, dst, op, limit):  # type: ignore[no-untyped-def]
    """The raw snappy block ``src[ip:end]`` into ``dst[op:limit]``: ``(status, position after
    the output)``."""
    n = np.int64(0)
    shift = 0
    while True:
        if ip >= end or shift == 7 * _MAX_PREAMBLE:
            return CORRUPT, op
        b = at(src, ip)
        ip += 1
        n |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            break
    if n > 0xFFFFFFFF:
        return CORRUPT, op
    if n > limit - op:
        return NO_ROOM, op
    base = op
    stop = op + n
    while ip < end:
        tag = at(src, ip)
        ip += 1
        kind = tag & 3
        if kind == 0:
            length = (tag >> 2) + 1
            # 61 to 64 are not lengths but say how many length bytes follow
            if length <= 60 and end - ip >= _WIDE_LITERAL and limit - op >= _WIDE_LITERAL:
                if length > stop - op:
                    return CORRUPT, op
                memcpy(dst, op, src, ip, _WIDE_LITERAL)  # a constant size: inlined moves
                ip += length
                op += length
                continue
            if length > 60:
                extra = length - 60
                if end - ip < extra:
                    return CORRUPT, op
                length = 1 + _le(src, ip, extra)
                ip += extra
            if length > end - ip or length > stop - op:
                return CORRUPT, op
            memcpy(dst, op, src, ip, length)
            ip += length
            op += length
            continue
        width = 1 if kind == 1 else (2 if kind == 2 else 4)
        if end - ip < width:
            return CORRUPT, op
        if kind == 1:
            length = 4 + ((tag >> 2) & 7)
            offset = ((tag >> 5) << 8) | at(src, ip)
        else:
            length = 1 + (tag >> 2)
            offset = _le(src, ip, width)
        ip += width
        if offset == 0 or offset > op - base or length > stop - op:
            return CORRUPT, op
        if offset >= _WIDE // 2 and length <= _WIDE and limit - op >= _WIDE:
            # each 8-byte move reads only bytes written before it (offset >= 8)
            memcpy(dst, op, dst, op - offset, _WIDE // 2)
            memcpy(dst, op + _WIDE // 2, dst, op - offset + _WIDE // 2, _WIDE // 2)
        else:
            copy_match(dst, op, offset, length)
        op += length
    return (OK if op == stop else CORRUPT), op


@inline
def _le(buf, pos, width):  # type: ignore[no-untyped-def]
    """Unsigned little-endian integer of ``width`` bytes (the caller checked the bounds)."""
    v = np.int64(0)
    for i in range(width):
        v |= at(buf, pos + i) << (8 * i)
    return v


@inline
def _is_magic(src, pos, end):  # type: ignore[no-untyped-def]
    return end - pos >= 8 and le32(src, pos) == _MAGIC_LOW and le32(src, pos + 4) == _MAGIC_HIGH


@jit
def decode(src, start, end, dst, op, limit):  # type: ignore[no-untyped-def]
    """Xerial-framed or raw snappy at ``src[start:end]`` into ``dst[op:limit]``: ``(status,
    position after the output)`` (module docstring)."""
    if not _is_magic(src, start, end):
        return decode_raw(src, start, end, dst, op, limit)
    pos = start
    while pos < end:
        if _is_magic(src, pos, end):
            if end - pos < _HEADER:
                return CORRUPT, op
            pos += _HEADER
            continue
        if end - pos < 4:
            return CORRUPT, op
        n = (at(src, pos) << 24) | (at(src, pos + 1) << 16) | (at(src, pos + 2) << 8)
        n |= at(src, pos + 3)
        pos += 4
        if n >= 0x80000000 or n > end - pos:
            return CORRUPT, op
        status, op = decode_raw(src, pos, pos + n, dst, op, limit)
        if status != OK:
            return status, op
        pos += n
    return OK, op
