"""Kafka's record compression codecs.

Only the records section of a batch (bytes [61, end)) is compressed, as one stream holding the
records back to back; in a legacy (magic 0/1) message set the wrapper message's value holds the
compressed inner message set. The codec id lives in attribute bits 0-2. What is written is
byte-identical to Kafka's Java producer (kafka-clients 4.x) with default levels:

- 0 none.
- 1 gzip (RFC 1952): a fixed 10-byte header ``1f 8b 08 00 00000000 00 ff`` (no name, mtime 0,
  OS "unknown", as ``java.util.zip.GZIPOutputStream`` writes since Java 16), a raw deflate stream
  (level 6 unless told), then CRC-32 and input size, both little-endian. Reading accepts several
  members back to back and ignores trailing bytes that are not a gzip header, as Java's
  ``GZIPInputStream`` does.
- 2 snappy: xerial framing: magic ``82 53 4E 41 50 50 59 00``, int32 version 1, int32 compatible
  1, then per 32 KiB of input [int32 big-endian length][raw snappy block]. Reading accepts both
  xerial (also concatenated xerial streams) and raw unframed snappy (librdkafka writes raw).
- 3 lz4: one LZ4 frame, FLG ``0x60`` (version 1, independent blocks, no checksums, no content
  size), BD ``0x40`` (64 KiB blocks), end mark. Kafka before 0.10 computed the frame header
  checksum (HC) over the magic too (KAFKA-3160); :func:`lz4_fix_header_checksum` repairs that
  for magic 0 message sets.
- 4 zstd: one frame written in streaming mode: no content size, no checksum, the data flushed as
  a block, then an empty last block (what zstd-jni's stream writes on flush and close). Reading
  accepts several frames and skippable frames.

Every decompression is bounded by ``max_size`` (default :data:`MAX_DECOMPRESSED_BYTES`): input
that would inflate past it is a :class:`CorruptRecordError` naming the limit, never a MemoryError.
Truncated or garbage input and library errors are reported the same way. Functions are pure and
thread-safe (zstd keeps one decompression context per thread, reused from frame to frame).
"""

from __future__ import annotations

import enum
import struct
import threading
import zlib

import cramjam
import lz4.frame
import zstandard

from broker_embedded.errors import CorruptRecordError
from broker_embedded.record.varint import decode_uvarint

MAX_DECOMPRESSED_BYTES = 256 * 1024 * 1024
XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER_SIZE = 16
_XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024
GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
LZ4_FRAME_MAGIC = b"\x04\x22\x4d\x18"
DEFAULT_GZIP_LEVEL = 6
DEFAULT_LZ4_LEVEL = 9
DEFAULT_ZSTD_LEVEL = 3
# A zstd block inflates to at most 128 KiB and takes at least 4 input bytes (3-byte header and
# one RLE byte): feeding ``4 * budget // 128 KiB`` input bytes cannot overshoot the budget by
# more than one block.
_ZSTD_MAX_BLOCK = 128 * 1024
_ZSTD_MIN_FEED = 64


class CompressionType(enum.IntEnum):
    """Codec ids as stored in attribute bits 0-2."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def parse(cls, value: int | str) -> CompressionType:
        """From an attribute value or a Kafka ``compression.type`` name."""
        if isinstance(value, str):
            try:
                return cls[value.strip().upper()]
            except KeyError:
                names = ", ".join(c.name.lower() for c in cls)
                raise ValueError(f"unknown compression type {value!r} (one of {names})") from None
        try:
            return cls(value)
        except ValueError:
            raise CorruptRecordError(f"unknown compression codec id {value}") from None


# -- compression --------------------------------------------------------------------------------


def compress(codec: CompressionType, data: bytes | memoryview, level: int | None = None) -> bytes:
    """Compress a records section the way Kafka's Java producer does.

    ``level`` is Kafka's ``compression.<codec>.level`` (gzip 1-9, lz4 1-17, zstd -131072..22);
    ``None`` is Kafka's default. Snappy has no level.
    """
    if codec == CompressionType.NONE:
        return bytes(data)
    if codec == CompressionType.GZIP:
        return _gzip(data, DEFAULT_GZIP_LEVEL if level is None else level)
    if codec == CompressionType.SNAPPY:
        return _xerial_snappy(data)
    if codec == CompressionType.LZ4:
        return _lz4(data, DEFAULT_LZ4_LEVEL if level is None else level)
    if codec == CompressionType.ZSTD:
        return _zstd(data, DEFAULT_ZSTD_LEVEL if level is None else level)
    raise ValueError(f"unknown compression codec {codec}")


def _gzip(data: bytes | memoryview, level: int) -> bytes:
    c = zlib.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS)
    body = c.compress(data) + c.flush()
    trailer = struct.pack("<II", zlib.crc32(data), len(data) & 0xFFFFFFFF)
    return GZIP_HEADER + body + trailer


def _xerial_snappy(data: bytes | memoryview) -> bytes:
    parts = [_XERIAL_HEADER]
    view = memoryview(data)
    for i in range(0, len(view), _XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(view[i : i + _XERIAL_BLOCK]))
        parts.append(struct.pack(">i", len(block)))
        parts.append(block)
    return b"".join(parts)


def _lz4(data: bytes | memoryview, level: int) -> bytes:
    # Kafka uses lz4's fast compressor at its default level 9 and the HC compressor otherwise.
    return lz4.frame.compress(
        data,
        compression_level=0 if level == DEFAULT_LZ4_LEVEL else level,
        block_size=lz4.frame.BLOCKSIZE_MAX64KB,
        block_linked=False,
        content_checksum=False,
        block_checksum=False,
        store_size=False,
    )


def _zstd(data: bytes | memoryview, level: int) -> bytes:
    c = zstandard.ZstdCompressor(level=level, write_content_size=False).compressobj()
    out = c.compress(data)
    out += c.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK)
    return out + c.flush(zstandard.COMPRESSOBJ_FLUSH_FINISH)


# -- decompression ------------------------------------------------------------------------------


def decompress(
    codec: CompressionType, data: bytes | memoryview, max_size: int = MAX_DECOMPRESSED_BYTES
) -> bytes:
    """Decompress a records section; at most ``max_size`` bytes of output."""
    try:
        if codec == CompressionType.NONE:
            out = bytes(data)
        elif codec == CompressionType.GZIP:
            out = _gunzip(data, max_size)
        elif codec == CompressionType.SNAPPY:
            out = _unsnappy(memoryview(data), max_size)
        elif codec == CompressionType.LZ4:
            out = _unlz4(data, max_size)
        elif codec == CompressionType.ZSTD:
            out = _unzstd(data, max_size)
        else:
            raise CorruptRecordError(f"unknown compression codec id {int(codec)}")
    except CorruptRecordError:
        raise
    except Exception as e:  # the codec libraries raise their own error types
        raise CorruptRecordError(f"{_name(codec)} data does not decompress: {e}") from e
    if len(out) > max_size:
        raise _too_large(codec, max_size)
    return out


def _name(codec: CompressionType | int) -> str:
    return codec.name.lower() if isinstance(codec, CompressionType) else f"codec {codec}"


def _too_large(codec: CompressionType, max_size: int) -> CorruptRecordError:
    return CorruptRecordError(
        f"{_name(codec)} data inflates past the limit of {max_size} bytes (max_size)"
    )


def _gunzip(data: bytes | memoryview, max_size: int) -> bytes:
    rest: bytes | memoryview = data
    if not rest:
        raise CorruptRecordError("gzip stream is empty")
    parts: list[bytes] = []
    size = 0
    while True:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        parts.append(d.decompress(rest, max_size + 1 - size))
        size += len(parts[-1])
        if size > max_size or d.unconsumed_tail:
            raise _too_large(CompressionType.GZIP, max_size)
        if not d.eof:
            raise CorruptRecordError("gzip stream truncated")
        rest = d.unused_data
        if not rest.startswith(GZIP_HEADER[:3]):  # Java's GZIPInputStream ignores the rest
            return parts[0] if len(parts) == 1 else b"".join(parts)


def _unsnappy(view: memoryview, max_size: int) -> bytes:
    if bytes(view[:8]) != XERIAL_MAGIC:
        return _unsnappy_raw(view, 0, max_size)
    out = bytearray()
    pos = 0
    end = len(view)
    while pos < end:
        if bytes(view[pos : pos + 8]) == XERIAL_MAGIC:  # a (concatenated) stream header
            if pos + XERIAL_HEADER_SIZE > end:
                raise CorruptRecordError("xerial snappy header truncated")
            pos += XERIAL_HEADER_SIZE
            continue
        if pos + 4 > end:
            raise CorruptRecordError("xerial snappy block length truncated")
        (n,) = struct.unpack_from(">i", view, pos)
        pos += 4
        if n < 0 or pos + n > end:
            raise CorruptRecordError(f"xerial snappy block of {n} bytes runs past the data")
        out += _unsnappy_raw(view[pos : pos + n], len(out), max_size)
        pos += n
    return bytes(out)


def _unsnappy_raw(view: memoryview, already: int, max_size: int) -> bytes:
    """One raw snappy block, refused before inflating if it would pass ``max_size``."""
    # A raw snappy block starts with its uncompressed length as an unsigned varint.
    try:
        n, _ = decode_uvarint(view, 0)
    except CorruptRecordError as e:
        raise CorruptRecordError(f"snappy length preamble: {e.reason}") from None
    if already + n > max_size:
        raise _too_large(CompressionType.SNAPPY, max_size)
    return bytes(cramjam.snappy.decompress_raw(view))


LZ4_BLOCK_MAX = 64 * 1024


def _unlz4(data: bytes | memoryview, max_size: int) -> bytes:
    d = lz4.frame.LZ4FrameDecompressor()
    # LZ4 inflates at most 255x: bounding the output by that keeps the library from setting up
    # a max_size buffer for every small batch.
    bound = min(max_size + 1, 255 * len(data) + LZ4_BLOCK_MAX)
    out = d.decompress(bytes(data), max_length=bound)
    if len(out) > max_size:
        raise _too_large(CompressionType.LZ4, max_size)
    if not d.eof:
        raise CorruptRecordError("lz4 frame truncated")
    return out


def _unzstd(data: bytes | memoryview, max_size: int) -> bytes:
    rest = memoryview(data)
    if not rest:
        raise CorruptRecordError("zstd stream is empty")
    parts: list[bytes] = []
    size = 0
    dctx = _zstd_decompressor()
    while rest:  # one zstd (or skippable) frame per round
        d = dctx.decompressobj()
        pos = 0
        while not d.eof and pos < len(rest):
            budget = max_size + 1 - size
            feed = max(_ZSTD_MIN_FEED, 4 * (budget // _ZSTD_MAX_BLOCK))
            parts.append(d.decompress(rest[pos : pos + feed]))
            size += len(parts[-1])
            pos += feed
            if size > max_size:
                raise _too_large(CompressionType.ZSTD, max_size)
        if not d.eof:
            raise CorruptRecordError("zstd frame truncated")
        # what followed the frame in its chunk, then the rest
        rest = memoryview(d.unused_data + rest[pos:]) if d.unused_data else rest[pos:]
    return parts[0] if len(parts) == 1 else b"".join(parts)


_ZSTD_CONTEXTS = threading.local()


def _zstd_decompressor() -> zstandard.ZstdDecompressor:
    """This thread's decompression context (making one costs more than a small batch's
    decompression; a context serves one frame at a time)."""
    dctx: zstandard.ZstdDecompressor | None = getattr(_ZSTD_CONTEXTS, "dctx", None)
    if dctx is None:
        dctx = _ZSTD_CONTEXTS.dctx = zstandard.ZstdDecompressor()
    return dctx


# -- lz4 frame header checksum (KAFKA-3160) -----------------------------------------------------

_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def xxh32(data: bytes, seed: int = 0) -> int:
    """xxHash32 of an input shorter than 16 bytes (an LZ4 frame descriptor is at most 14)."""
    n = len(data)
    if n >= 16:
        raise ValueError(f"xxh32 here only hashes inputs below 16 bytes, not {n}")
    pos = 0
    h = (seed + _P5) & _M32
    h = (h + n) & _M32
    while pos + 4 <= n:
        (w,) = struct.unpack_from("<I", data, pos)
        h = (_rotl((h + w * _P3) & _M32, 17) * _P4) & _M32
        pos += 4
    while pos < n:
        h = (_rotl((h + data[pos] * _P5) & _M32, 11) * _P1) & _M32
        pos += 1
    h = ((h ^ (h >> 15)) * _P2) & _M32
    h = ((h ^ (h >> 13)) * _P3) & _M32
    return h ^ (h >> 16)


def lz4_header_checksum(descriptor: bytes) -> int:
    """The HC byte of an LZ4 frame: second byte of xxh32 over FLG, BD and optional fields."""
    return (xxh32(descriptor) >> 8) & 0xFF


def lz4_fix_header_checksum(frame: bytes | memoryview) -> bytes:
    """Rewrite an LZ4 frame's HC byte to the correct value.

    Kafka before 0.10 wrote magic-0 lz4 message sets with the HC computed over the magic number
    as well (KAFKA-3160); Kafka reads magic 0 ignoring the HC. Input that is not an LZ4 frame
    header is returned unchanged (decompression then reports it).
    """
    data = bytearray(frame)
    if len(data) < 7 or bytes(data[:4]) != LZ4_FRAME_MAGIC:
        return bytes(data)
    flg = data[4]
    end = 6 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0)
    if len(data) <= end:
        return bytes(data)
    data[end] = lz4_header_checksum(bytes(data[4:end]))
    return bytes(data)
