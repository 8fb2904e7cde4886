"""Kafka's record compression codecs.

Only the records section of a batch (bytes [61, end)) is compressed, as one stream holding the
records back to back. The codec id lives in attribute bits 0-2:

- 0 none, 1 gzip (RFC 1952; several members are read as one stream, as Java's GZIPInputStream does),
- 2 snappy: written with xerial framing (magic ``82 53 4E 41 50 50 59 00``, int32 version 1,
  int32 compatible 1, then [int32 big-endian length][raw snappy block] per 32 KiB of input); read
  both xerial and raw unframed snappy (librdkafka writes raw),
- 3 lz4: an LZ4 frame of independent 64 KiB blocks without checksums (Kafka rejects linked
  blocks),
- 4 zstd: a zstd frame without a content size, decompressed in streaming mode.

Every decompression is bounded by ``max_size`` (default :data:`MAX_DECOMPRESSED_BYTES`): input
that would inflate past it is a :class:`CorruptRecordError`, never a MemoryError. Library errors
are reported the same way. Functions are pure and thread-safe.
"""

from __future__ import annotations

import enum
import struct
import zlib

import cramjam
import lz4.frame
import zstandard

from broker_embedded.errors import CorruptRecordError

MAX_DECOMPRESSED_BYTES = 256 * 1024 * 1024
XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024
_CHUNK = 1 << 20


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


def compress(codec: CompressionType, data: bytes) -> bytes:
    """Compress a records section the way Kafka's Java producer does."""
    if codec == CompressionType.NONE:
        return bytes(data)
    if codec == CompressionType.GZIP:
        c = zlib.compressobj(6, zlib.DEFLATED, 31)
        return c.compress(data) + c.flush()
    if codec == CompressionType.SNAPPY:
        parts = [_XERIAL_HEADER]
        view = memoryview(data)
        for i in range(0, len(view), _XERIAL_BLOCK):
            block = bytes(cramjam.snappy.compress_raw(view[i : i + _XERIAL_BLOCK]))
            parts.append(struct.pack(">i", len(block)))
            parts.append(block)
        return b"".join(parts)
    if codec == CompressionType.LZ4:
        return lz4.frame.compress(
            data,
            block_size=lz4.frame.BLOCKSIZE_MAX64KB,
            block_linked=False,
            content_checksum=False,
            store_size=False,
        )
    if codec == CompressionType.ZSTD:
        return zstandard.ZstdCompressor(level=3, write_content_size=False).compress(data)
    raise ValueError(f"unknown compression codec {codec}")


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
            out = _unsnappy(data, max_size)
        elif codec == CompressionType.LZ4:
            out = _unlz4(data, max_size)
        elif codec == CompressionType.ZSTD:
            out = _unzstd(data, max_size)
        else:
            raise CorruptRecordError(f"unknown compression codec id {int(codec)}")
    except CorruptRecordError:
        raise
    except Exception as e:  # the codec libraries raise their own error types
        raise CorruptRecordError(f"{codec.name.lower()} data does not decompress: {e}") from e
    if len(out) > max_size:
        raise _too_large(codec, max_size)
    return out


def _too_large(codec: CompressionType, max_size: int) -> CorruptRecordError:
    return CorruptRecordError(
        f"{codec.name.lower()} data inflates past the limit of {max_size} bytes"
    )


def _gunzip(data: bytes | memoryview, max_size: int) -> bytes:
    out = bytearray()
    rest = bytes(data)
    while rest:
        d = zlib.decompressobj(31)
        out += d.decompress(rest, max_size + 1 - len(out))
        if len(out) > max_size:
            raise _too_large(CompressionType.GZIP, max_size)
        if not d.eof:
            if d.unconsumed_tail:
                raise _too_large(CompressionType.GZIP, max_size)
            raise CorruptRecordError("gzip stream truncated")
        rest = d.unused_data
    return bytes(out)


def _unsnappy(data: bytes | memoryview, max_size: int) -> bytes:
    view = memoryview(data)
    if bytes(view[:8]) != XERIAL_MAGIC:
        return _unsnappy_raw(view, max_size)
    if len(view) < 16:
        raise CorruptRecordError("xerial snappy header truncated")
    out = bytearray()
    pos = 16
    while pos < len(view):
        if pos + 4 > len(view):
            raise CorruptRecordError("xerial snappy block length truncated")
        (n,) = struct.unpack_from(">i", view, pos)
        pos += 4
        if n < 0 or pos + n > len(view):
            raise CorruptRecordError(f"xerial snappy block of {n} bytes runs past the data")
        out += _unsnappy_raw(view[pos : pos + n], max_size - len(out))
        pos += n
    return bytes(out)


def _unsnappy_raw(view: memoryview, max_size: int) -> bytes:
    # A raw snappy block starts with its uncompressed length as an unsigned varint.
    n, shift = 0, 0
    for i in range(5):
        if i >= len(view):
            raise CorruptRecordError("snappy length preamble truncated")
        b = view[i]
        n |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
    if n > max_size:
        raise _too_large(CompressionType.SNAPPY, max_size)
    return bytes(cramjam.snappy.decompress_raw(view))


def _unlz4(data: bytes | memoryview, max_size: int) -> bytes:
    d = lz4.frame.LZ4FrameDecompressor()
    out = d.decompress(bytes(data), max_length=max_size + 1)
    if len(out) > max_size:
        raise _too_large(CompressionType.LZ4, max_size)
    if not d.eof:
        raise CorruptRecordError("lz4 frame truncated")
    return out


def _unzstd(data: bytes | memoryview, max_size: int) -> bytes:
    reader = zstandard.ZstdDecompressor().stream_reader(bytes(data), read_across_frames=True)
    out = bytearray()
    while True:
        chunk = reader.read(min(_CHUNK, max_size + 1 - len(out)))
        if not chunk:
            break
        out += chunk
        if len(out) > max_size:
            raise _too_large(CompressionType.ZSTD, max_size)
    return bytes(out)
