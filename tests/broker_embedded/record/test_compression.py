"""The record codecs: Kafka's Java bytes, round trips, other writers' framings, bounds, garbage."""

from __future__ import annotations

import gzip
import os
import struct
import zlib

import cramjam
import lz4.frame
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_embedded.errors import CorruptRecordError
from broker_embedded.record.batch_layout import RECORD_BATCH_OVERHEAD
from broker_embedded.record.compression import (
    GZIP_HEADER,
    XERIAL_MAGIC,
    CompressionType,
    compress,
    decompress,
    lz4_fix_header_checksum,
    lz4_header_checksum,
    xxh32,
)

from ._java_ref import BATCHES_BY_NAME

CODECS = [CompressionType.GZIP, CompressionType.SNAPPY, CompressionType.LZ4, CompressionType.ZSTD]
ALL_CODECS = [CompressionType.NONE, *CODECS]
# The records section Kafka's Java client compressed in every batch_<codec> fixture.
JAVA_RECORDS = BATCHES_BY_NAME["batch_none"].data()[RECORD_BATCH_OVERHEAD:]
# Several blocks for every codec: xerial 32 KiB, lz4 64 KiB, zstd 128 KiB.
BIG = b"".join(b"record %08d " % i + os.urandom(8).hex().encode() for i in range(12_000))


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_java_compressed_sections_decompress(codec: CompressionType) -> None:
    java = BATCHES_BY_NAME[f"batch_{codec.name.lower()}"].data()[RECORD_BATCH_OVERHEAD:]
    assert decompress(codec, java) == JAVA_RECORDS


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_compress_writes_javas_bytes(codec: CompressionType) -> None:
    # zlib, snappy, lz4 and zstd here produce what Kafka 4.3's libraries produce for this input.
    java = BATCHES_BY_NAME[f"batch_{codec.name.lower()}"].data()[RECORD_BATCH_OVERHEAD:]
    assert compress(codec, JAVA_RECORDS) == java


@pytest.mark.parametrize("codec", ALL_CODECS, ids=lambda c: c.name.lower())
@pytest.mark.parametrize("data", [b"", b"x", BIG], ids=["empty", "one", "big"])
def test_round_trip(codec: CompressionType, data: bytes) -> None:
    assert decompress(codec, compress(codec, data)) == data


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(ALL_CODECS), st.binary(max_size=5000))
def test_round_trip_property(codec: CompressionType, data: bytes) -> None:
    assert decompress(codec, compress(codec, data)) == data


@pytest.mark.parametrize(
    ("codec", "level"),
    [
        (CompressionType.GZIP, 1),
        (CompressionType.GZIP, 9),
        (CompressionType.LZ4, 1),
        (CompressionType.LZ4, 17),
        (CompressionType.ZSTD, -5),
        (CompressionType.ZSTD, 19),
    ],
)
def test_levels(codec: CompressionType, level: int) -> None:
    assert decompress(codec, compress(codec, BIG, level)) == BIG


def test_gzip_framing_is_javas() -> None:
    data = compress(CompressionType.GZIP, BIG)
    assert data[:10] == GZIP_HEADER == bytes.fromhex("1f8b08000000000000ff")
    assert struct.unpack("<II", data[-8:]) == (zlib.crc32(BIG), len(BIG))
    assert gzip.decompress(data) == BIG


def test_gzip_reads_several_members_and_ignores_trailing_garbage() -> None:
    two = gzip.compress(b"abc") + gzip.compress(b"def")
    assert decompress(CompressionType.GZIP, two) == b"abcdef"
    assert decompress(CompressionType.GZIP, gzip.compress(b"abc") + b"\x00\x00junk") == b"abc"


def test_snappy_xerial_framing() -> None:
    data = compress(CompressionType.SNAPPY, BIG)
    assert data[:16] == XERIAL_MAGIC + bytes.fromhex("0000000100000001")
    (first,) = struct.unpack_from(">i", data, 16)
    block = bytes(cramjam.snappy.decompress_raw(data[20 : 20 + first]))
    assert block == BIG[: 32 * 1024]


def test_snappy_reads_raw_and_concatenated_xerial() -> None:
    raw = bytes(cramjam.snappy.compress_raw(BIG))
    assert decompress(CompressionType.SNAPPY, raw) == BIG
    two = compress(CompressionType.SNAPPY, b"abc") + compress(CompressionType.SNAPPY, b"def")
    assert decompress(CompressionType.SNAPPY, two) == b"abcdef"


def test_lz4_frame_flags_are_javas() -> None:
    data = compress(CompressionType.LZ4, BIG)
    assert data[:4] == bytes.fromhex("04224d18")
    assert data[4:6] == b"\x60\x40"  # independent blocks, no checksums, no size; 64 KiB blocks
    assert data[6] == lz4_header_checksum(b"\x60\x40")
    assert data[-4:] == b"\x00\x00\x00\x00"  # end mark
    assert lz4.frame.decompress(data) == BIG


def test_lz4_reads_other_frame_options() -> None:
    for options in ({"store_size": True, "content_checksum": True}, {"block_checksum": True}):
        frame = lz4.frame.compress(BIG, **options)
        assert decompress(CompressionType.LZ4, frame) == BIG


def test_zstd_frames_have_no_content_size() -> None:
    data = compress(CompressionType.ZSTD, BIG)
    params = zstandard.get_frame_parameters(data)
    assert params.content_size == zstandard.CONTENTSIZE_UNKNOWN
    assert params.has_checksum is False
    assert data[4] & 0xE0 == 0  # no content size field, not single-segment
    assert zstandard.ZstdDecompressor().decompressobj().decompress(data) == BIG


def test_zstd_reads_several_and_skippable_frames() -> None:
    skippable = struct.pack("<II", 0x184D2A50, 3) + b"abc"
    frames = (
        compress(CompressionType.ZSTD, b"abc") + skippable + compress(CompressionType.ZSTD, b"x")
    )
    assert decompress(CompressionType.ZSTD, frames) == b"abcx"
    big_frames = [os.urandom(20_000), os.urandom(30_000), b"tail"]  # frames span feed chunks
    joined = b"".join(compress(CompressionType.ZSTD, f) for f in big_frames)
    assert decompress(CompressionType.ZSTD, joined) == b"".join(big_frames)
    one_shot = zstandard.ZstdCompressor(write_content_size=True).compress(BIG)
    assert decompress(CompressionType.ZSTD, one_shot) == BIG


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_decompression_bomb_is_bounded(codec: CompressionType) -> None:
    bomb = compress(codec, bytes(8 * 1024 * 1024))
    assert len(bomb) < 500_000
    with pytest.raises(CorruptRecordError, match="limit of 100000 bytes") as info:
        decompress(codec, bomb, max_size=100_000)
    assert codec.name.lower() in str(info.value)
    assert decompress(codec, compress(codec, bytes(100_000)), max_size=100_000) == bytes(100_000)


def test_snappy_bomb_is_refused_before_inflating() -> None:
    preamble_claims_4_gib = bytes.fromhex("ffffffff0f") + b"\x00" * 10
    with pytest.raises(CorruptRecordError, match="limit of 1000 bytes"):
        decompress(CompressionType.SNAPPY, preamble_claims_4_gib, max_size=1000)


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_garbage_truncation_and_empty_input(codec: CompressionType) -> None:
    good = compress(codec, BIG)
    for bad in (b"", b"\x00" * 40, b"garbage that is no frame at all", good[: len(good) // 2]):
        with pytest.raises(CorruptRecordError, match=codec.name.lower()):
            decompress(codec, bad)


def test_unknown_codec_ids() -> None:
    for codec_id in (5, 6, 7):
        with pytest.raises(CorruptRecordError, match=f"unknown compression codec id {codec_id}"):
            CompressionType.parse(codec_id)
    assert CompressionType.parse("zstd") is CompressionType.ZSTD
    assert CompressionType.parse(" LZ4 ") is CompressionType.LZ4
    assert CompressionType.parse(2) is CompressionType.SNAPPY
    with pytest.raises(ValueError, match="one of none, gzip, snappy, lz4, zstd"):
        CompressionType.parse("brotli")


def test_xxh32_known_answers() -> None:
    assert xxh32(b"") == 0x02CC5D05
    assert xxh32(b"a") == 0x550D7456
    assert xxh32(b"abc") == 0x32D153FF
    with pytest.raises(ValueError, match="below 16 bytes"):
        xxh32(bytes(16))


def test_lz4_header_checksum_matches_the_lz4_library() -> None:
    for options in ({}, {"store_size": True}, {"content_checksum": True, "block_size": 7}):
        frame = lz4.frame.compress(b"x" * 1000, **options)
        descriptor_end = 6 + (8 if frame[4] & 0x08 else 0)
        assert frame[descriptor_end] == lz4_header_checksum(frame[4:descriptor_end])
        assert lz4_fix_header_checksum(frame) == frame


def test_lz4_fix_header_checksum_repairs_kafka_3160() -> None:
    frame = compress(CompressionType.LZ4, BIG)
    broken = bytearray(frame)
    broken[6] = (xxh32(frame[:6]) >> 8) & 0xFF  # pre-0.10 Kafka hashed the magic too
    assert bytes(broken) != frame
    with pytest.raises(CorruptRecordError, match="lz4 data does not decompress"):
        decompress(CompressionType.LZ4, bytes(broken))
    assert lz4_fix_header_checksum(broken) == frame
    assert lz4_fix_header_checksum(b"not lz4") == b"not lz4"


def test_lz4_highly_compressible_input_inflates_fully() -> None:
    # LZ4's best ratio is about 255:1; the decompression bound must admit it.
    data = bytes(8 * 1024 * 1024)
    packed = compress(CompressionType.LZ4, data)
    assert len(packed) * 200 < len(data)
    assert decompress(CompressionType.LZ4, packed) == data
