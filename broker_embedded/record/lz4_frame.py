"""The compiled LZ4 frame decoder (numba) of compressed record batches (codec 3).

Frame layout (LZ4 frame format 1.6.x), all integers little-endian:

- magic ``04 22 4D 18``;
- FLG: bits 6-7 version (01), bit 5 block independence, bit 4 block checksum, bit 3 content
  size, bit 2 content checksum, bit 1 reserved (0), bit 0 dictionary id;
- BD: bits 4-6 the block maximum size (4: 64 KiB, 5: 256 KiB, 6: 1 MiB, 7: 4 MiB), the other
  bits reserved (0);
- the content size (uint64) when FLG bit 3; then HC, the second byte of xxHash32 of FLG..the
  content size;
- blocks: uint32 size (bit 31 set: the block is stored uncompressed), its data; a size of 0 is
  the end mark. Bytes after the end mark are ignored (as ``lz4.frame``'s decompressor does).

An LZ4 block is a run of sequences: a token (literal length in its high nibble, match length
minus 4 in its low one; 15 means further bytes are added, each up to and including the first that
is not 255), the literals, then (except in the last sequence, which holds only literals and ends
the block) a 2-byte match offset (1 to 65535 back into the output) and the match.

What :func:`decode_frame` leaves to ``compression.decompress`` (``lz4.frame``), by answering
:data:`UNSUPPORTED`: a dictionary id, block or content checksums, and anything that is not one LZ4
frame's magic (skippable frames). Kafka's Java producer writes FLG ``0x60``, BD ``0x40``: that is
the path this kernel serves.

Checks: every read is compared with the end of the input (``end``) before it happens and every
write with ``limit`` (the output's room; short copies move 16 bytes at a time where up to 15
more bytes of input before ``src``'s end and of output before ``limit`` allow it, as lz4's own
"wild copy" does: the extra bytes written are overwritten by what follows or lie past the
output); a block inflating past the frame's block maximum size,
an offset of 0 or reaching before the block (independent blocks) or the frame (linked blocks), a
bad HC, reserved bits, a content size that does not match, or input ending before the end mark is
:data:`CORRUPT`; output that would pass ``limit`` is :data:`NO_ROOM` (nothing past ``limit`` is
written). Numba's bounds checking is off: these checks are the only ones.

Thread safety: pure functions over the arrays they are given; they release the GIL.
"""

from __future__ import annotations

import numpy as np

from broker_embedded.record.kernel_primitives import at, inline, jit, le32, memcpy

OK = 0
NO_ROOM = 1  # the output would pass ``limit``
CORRUPT = 2
UNSUPPORTED = 3  # a frame feature left to the library (see the module docstring)

_MAGIC = 0x184D2204
_MIN_MATCH = 4
_WILD = 16  # bytes per step of a copy with slack (``_wild_copy``)
_UNCOMPRESSED_BIT = 0x80000000
_FLG_VERSION = 0xC0
_FLG_INDEPENDENT = 0x20
_FLG_BLOCK_CHECKSUM = 0x10
_FLG_CONTENT_SIZE = 0x08
_FLG_CONTENT_CHECKSUM = 0x04
_FLG_RESERVED = 0x02
_FLG_DICT_ID = 0x01

_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M32 = 0xFFFFFFFF


@inline
def _rotl32(x, r):  # type: ignore[no-untyped-def]
    return ((x << r) | (x >> (32 - r))) & _M32


@inline
def _xxh32_short(buf, start, n):  # type: ignore[no-untyped-def]
    """xxHash32 (seed 0) of ``buf[start:start + n]`` for ``n < 16`` (``compression.xxh32``)."""
    h = (_P5 + n) & _M32
    p = start
    while p + 4 <= start + n:
        h = (_rotl32((h + le32(buf, p) * _P3) & _M32, 17) * _P4) & _M32
        p += 4
    while p < start + n:
        h = (_rotl32((h + at(buf, p) * _P5) & _M32, 11) * _P1) & _M32
        p += 1
    h = ((h ^ (h >> 15)) * _P2) & _M32
    h = ((h ^ (h >> 13)) * _P3) & _M32
    return h ^ (h >> 16)


@inline
def _length(src, ip, end, length):  # type: ignore[no-untyped-def]
    """The extended length after a nibble of 15: ``(length, next ip)``, ip -1 when truncated."""
    while True:
        if ip >= end:
            return length, np.int64(-1)
        b = at(src, ip)
        ip += 1
        length += b
        if b != 255:
            return length, ip


@jit
def decode_block(src, ip, end, dst, op, limit, window):  # type: ignore[no-untyped-def]
    """One LZ4 block ``src[ip:end]`` into ``dst[op:limit]``; matches may reach back to
    ``dst[window]``. ``(status, position after the output)``."""
    while True:
        if ip >= end:
            return CORRUPT, op  # a block ends with a literals-only sequence
        token = at(src, ip)
        ip += 1
        literals = token >> 4
        if literals == 15:
            literals, ip = _length(src, ip, end, literals)
            if ip < 0:
                return CORRUPT, op
        if literals > end - ip:
            return CORRUPT, op
        if literals > limit - op:
            return NO_ROOM, op
        if op + literals + _WILD <= limit and ip + literals + _WILD <= src.shape[0]:
            _wild_copy(dst, op, src, ip, literals)
        else:
            memcpy(dst, op, src, ip, literals)
        op += literals
        ip += literals
        if ip == end:
            return OK, op
        if end - ip < 2:
            return CORRUPT, op
        offset = at(src, ip) | (at(src, ip + 1) << 8)
        ip += 2
        if offset == 0 or offset > op - window:
            return CORRUPT, op
        match = (token & 15) + _MIN_MATCH
        if match == 15 + _MIN_MATCH:
            match, ip = _length(src, ip, end, match)
            if ip < 0:
                return CORRUPT, op
        if match > limit - op:
            return NO_ROOM, op
        if offset >= _WILD and op + match + _WILD <= limit:
            _wild_copy(dst, op, dst, op - offset, match)
        else:
            copy_match(dst, op, offset, match)
        op += match


@inline
def _wild_copy(dst, op, src, ip, n):  # type: ignore[no-untyped-def]
    """``dst[op:op + n] = src[ip:ip + n]`` in 16-byte steps, which LLVM turns into two moves
    each (a short memcpy of variable size is a library call): it may write up to 15 bytes past
    ``op + n`` and read as far past ``ip + n`` (the caller checked both are in bounds). Within
    one array (a match), ``ip`` is at least 16 bytes before ``op``."""
    done = 0
    while done < n:
        memcpy(dst, op + done, src, ip + done, _WILD)
        done += _WILD


@inline
def copy_match(dst, op, offset, n):  # type: ignore[no-untyped-def]
    """``dst[op:op + n]`` from ``offset`` bytes back, overlapping (a repeated pattern) when
    ``offset < n``: each copy doubles the run it may take from."""
    src = op - offset
    while n > 0:
        step = min(n, op - src)
        memcpy(dst, op, dst, src, step)
        op += step
        n -= step


@jit
def decode_frame(src, start, end, dst, op, limit):  # type: ignore[no-untyped-def]
    """The LZ4 frame at ``src[start:end]`` into ``dst[op:limit]``: ``(status, position after
    the output)`` (module docstring)."""
    if end - start < 7 or le32(src, start) != _MAGIC:
        return UNSUPPORTED, op
    flg = at(src, start + 4)
    bd = at(src, start + 5)
    if flg & (_FLG_DICT_ID | _FLG_BLOCK_CHECKSUM | _FLG_CONTENT_CHECKSUM):
        return UNSUPPORTED, op
    if flg & (_FLG_VERSION | _FLG_RESERVED) != 0x40 or bd & 0x8F or bd < 0x40:
        return CORRUPT, op
    block_max = np.int64(1) << (8 + 2 * (bd >> 4))
    ip = start + 6
    content = np.int64(-1)
    if flg & _FLG_CONTENT_SIZE:
        if end - ip < 9:
            return CORRUPT, op
        low, high = le32(src, ip), le32(src, ip + 4)
        content = -2 if high >= 0x80000000 else low | (high << 32)
        ip += 8
    if at(src, ip) != (_xxh32_short(src, start + 4, ip - start - 4) >> 8) & 0xFF:
        return CORRUPT, op
    ip += 1
    first = op
    while True:
        if end - ip < 4:
            return CORRUPT, op
        size = le32(src, ip)
        ip += 4
        if size == 0:
            break
        stored = size & _UNCOMPRESSED_BIT
        size &= ~_UNCOMPRESSED_BIT
        if size > block_max or size > end - ip:
            return CORRUPT, op
        room = min(limit, op + block_max)
        if stored:
            if size > limit - op:
                return NO_ROOM, op
            memcpy(dst, op, src, ip, size)
            status, out = OK, op + size
        else:
            window = op if flg & _FLG_INDEPENDENT else first
            status, out = decode_block(src, ip, ip + size, dst, op, room, window)
            if status == NO_ROOM and room < limit:
                return CORRUPT, op  # past the block maximum size
        if status != OK:
            return status, op
        op = out
        ip += size
    if content != -1 and content != op - first:
        return CORRUPT, op
    return OK, op
