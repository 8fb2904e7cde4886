"""Kafka's variable-length integers.

Byte layout: 7 bits per byte, least significant group first, the high bit of each byte set when
another byte follows (protobuf style). Records use zigzag encoding, ``(n << 1) ^ (n >> 63)``, so
small negative numbers stay short: a ``varint`` is a zigzag int32 (at most 5 bytes), a
``varlong`` a zigzag int64 (at most 10 bytes). The flexible wire protocol uses plain unsigned
varints (``uvarint``, at most 5 bytes for its int32 lengths).

Decoding rejects truncated input, over-long encodings and values out of range with a
:class:`CorruptRecordError`. These are the slow-path helpers (builders, tools, tests); the columnar
decoder has its own compiled copy of the same rules. Pure functions: thread-safe.
"""

from __future__ import annotations

from broker_embedded.errors import CorruptRecordError

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
VARINT_MAX_BYTES = 5
VARLONG_MAX_BYTES = 10


def _encode_unsigned(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _decode_unsigned(
    buf: bytes | memoryview, pos: int, max_bytes: int, what: str
) -> tuple[int, int]:
    result = 0
    shift = 0
    end = len(buf)
    for i in range(max_bytes):
        if pos + i >= end:
            raise CorruptRecordError(f"{what} truncated", position=pos)
        b = buf[pos + i]
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos + i + 1
        shift += 7
    raise CorruptRecordError(f"{what} longer than {max_bytes} bytes", position=pos)


def zigzag_encode(n: int, bits: int = 64) -> int:
    return ((n << 1) ^ (n >> (bits - 1))) & ((1 << bits) - 1)


def zigzag_decode(z: int) -> int:
    return (z >> 1) ^ -(z & 1)


def encode_varint(n: int) -> bytes:
    """Zigzag int32 as a varint."""
    if not INT32_MIN <= n <= INT32_MAX:
        raise ValueError(f"varint value {n} outside int32")
    return _encode_unsigned(zigzag_encode(n, 32))


def encode_varlong(n: int) -> bytes:
    """Zigzag int64 as a varlong."""
    if not INT64_MIN <= n <= INT64_MAX:
        raise ValueError(f"varlong value {n} outside int64")
    return _encode_unsigned(zigzag_encode(n, 64))


def encode_uvarint(n: int) -> bytes:
    """Unsigned varint (flexible wire protocol)."""
    if not 0 <= n <= 0xFFFFFFFF:
        raise ValueError(f"unsigned varint value {n} outside uint32")
    return _encode_unsigned(n)


def decode_varint(buf: bytes | memoryview, pos: int = 0) -> tuple[int, int]:
    """Read a zigzag varint at ``pos``; return (value, position after it)."""
    z, end = _decode_unsigned(buf, pos, VARINT_MAX_BYTES, "varint")
    if z > 0xFFFFFFFF:
        raise CorruptRecordError("varint out of int32 range", position=pos)
    return zigzag_decode(z), end


def decode_varlong(buf: bytes | memoryview, pos: int = 0) -> tuple[int, int]:
    """Read a zigzag varlong at ``pos``; return (value, position after it)."""
    z, end = _decode_unsigned(buf, pos, VARLONG_MAX_BYTES, "varlong")
    if z > 0xFFFFFFFFFFFFFFFF:
        raise CorruptRecordError("varlong out of int64 range", position=pos)
    return zigzag_decode(z), end


def decode_uvarint(buf: bytes | memoryview, pos: int = 0) -> tuple[int, int]:
    """Read an unsigned varint at ``pos``; return (value, position after it)."""
    z, end = _decode_unsigned(buf, pos, VARINT_MAX_BYTES, "unsigned varint")
    if z > 0xFFFFFFFF:
        raise CorruptRecordError("unsigned varint out of uint32 range", position=pos)
    return z, end
