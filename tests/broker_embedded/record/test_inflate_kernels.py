"""The compiled lz4 frame and snappy decoders (``lz4_frame``, ``snappy_block``) and the zstd
sections straight into the side buffer (``zstd_sections``) against the libraries (``lz4.frame``,
cramjam and zstandard's streaming objects, through ``compression.decompress``), on valid,
truncated and mutated input, and the columnar decoder's use of them (errors, the inflation
budget, the side buffer growing)."""

from __future__ import annotations

import random
import struct

import cramjam
import crc32c
import lz4.frame
import numpy as np
import pyarrow as pa
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_embedded.errors import CorruptRecordError
from broker_embedded.record import (
    columnar_decoder,
    decode_kernel,
    decode_plan,
    lz4_frame,
    snappy_block,
    zstd_sections,
)
from broker_embedded.record.batch_layout import ATTRIBUTES_OFFSET, CRC_OFFSET
from broker_embedded.record.compression import CompressionType, compress, decompress
from broker_embedded.record.memory_records_builder import MemoryRecordsBuilder

from ._java_ref import BATCHES_BY_NAME, LOG_DIRS

LZ4, SNAPPY, ZSTD = CompressionType.LZ4, CompressionType.SNAPPY, CompressionType.ZSTD
FAST_CODECS = [LZ4, SNAPPY, ZSTD]
FAST_IDS = ["lz4", "snappy", "zstd"]
# zstd_sections' statuses as the kernels' (it stops where they stop, for the same reasons)
_ZSTD_STATUS = {
    decode_kernel.INFLATE_DONE: lz4_frame.OK,
    decode_kernel.INFLATE_NO_ROOM: lz4_frame.NO_ROOM,
    decode_kernel.INFLATE_FAILED: lz4_frame.CORRUPT,
}


def _zstd_section(src, start, end, dst, used, limit):  # type: ignore[no-untyped-def]
    """One section through ``zstd_sections.inflate_sections``, called as the kernels are: the
    side buffer ends at ``limit``, the room goes past it."""
    rows = np.zeros((1, decode_kernel.INFLATE_FIELDS), np.int64)
    rows[0, decode_kernel.I_START], rows[0, decode_kernel.I_END] = start, end
    room = limit - used + 1
    status, reached, out = zstd_sections.inflate_sections(
        src, rows, dst[:limit], used, room, -1, room
    )
    assert reached == (status == decode_kernel.INFLATE_DONE)
    return _ZSTD_STATUS[status], out


KERNELS = {LZ4: lz4_frame.decode_frame, SNAPPY: snappy_block.decode, ZSTD: _zstd_section}
CANARY = 0xA5
HEADER = 61


def _data(n: int, seed: int = 1) -> bytes:
    """``n`` bytes that compress somewhat: words from a small alphabet and runs."""
    rng = random.Random(seed)
    words = [
        bytes(rng.choice(b"abcdefgh{}:,") for _ in range(rng.randrange(1, 9))) for _ in range(50)
    ]
    out = bytearray()
    while len(out) < n:
        out += rng.choice(words) if rng.random() < 0.9 else bytes([rng.randrange(256)]) * 20
    return bytes(out[:n])


def _kernel(codec: CompressionType, comp: bytes, limit: int) -> tuple[int, bytes]:
    """The kernel's status and output, the input in an array of exactly its size and the output
    followed by canary bytes that must stay untouched."""
    src = np.frombuffer(comp, np.uint8)
    dst = np.full(limit + 64, CANARY, np.uint8)
    status, end = KERNELS[codec](src, 0, len(src), dst, 0, limit)
    assert 0 <= end <= limit
    assert (dst[limit:] == CANARY).all(), "the kernel wrote past its limit"
    return int(status), bytes(dst[:end])


def _library(codec: CompressionType, comp: bytes, limit: int) -> bytes | None:
    try:
        return decompress(codec, comp, limit)
    except CorruptRecordError:
        return None


def _agree(codec: CompressionType, comp: bytes, limit: int) -> None:
    """A kernel result of OK equals the library's; when the library refuses, so does the
    kernel (anything the kernel does not decode goes to the library in the decoder)."""
    status, out = _kernel(codec, comp, limit)
    expected = _library(codec, comp, limit)
    if status == lz4_frame.OK:
        assert out == expected
    elif expected is not None:
        assert status != lz4_frame.CORRUPT or codec != SNAPPY, "snappy refused what cramjam reads"


LZ4_FRAMES = {
    "kafka": lambda d: compress(LZ4, d),
    "linked, content size": lambda d: lz4.frame.compress(d, block_linked=True, store_size=True),
    "4 MiB blocks": lambda d: lz4.frame.compress(d, block_size=lz4.frame.BLOCKSIZE_MAX4MB),
    "256 KiB blocks, hc": lambda d: lz4.frame.compress(
        d, block_size=lz4.frame.BLOCKSIZE_MAX256KB, compression_level=12, block_linked=False
    ),
}
SIZES = [0, 1, 15, 16, 17, 100, 65535, 65536, 65537, 300_000]


@pytest.mark.parametrize("frame", list(LZ4_FRAMES))
@pytest.mark.parametrize("size", SIZES)
def test_lz4_kernel_equals_lz4_frame(frame: str, size: int) -> None:
    data = _data(size)
    comp = LZ4_FRAMES[frame](data)
    assert _kernel(LZ4, comp, size) == (lz4_frame.OK, data)
    if size:
        assert _kernel(LZ4, comp, size - 1)[0] == lz4_frame.NO_ROOM


def test_lz4_kernel_stores_incompressible_blocks() -> None:
    data = random.Random(3).randbytes(200_000)
    comp = compress(LZ4, data)
    assert struct.unpack_from("<I", comp, 7)[0] & 0x80000000  # a stored block
    assert _kernel(LZ4, comp, len(data)) == (lz4_frame.OK, data)


@pytest.mark.parametrize(
    "options", [{"block_checksum": True}, {"content_checksum": True}], ids=["block", "content"]
)
def test_checksummed_lz4_frames_are_left_to_the_library(options: dict[str, bool]) -> None:
    data = _data(5000)
    section = _records_section(data)
    comp = lz4.frame.compress(section, **options)
    assert _kernel(LZ4, comp, len(section))[0] == lz4_frame.UNSUPPORTED
    batch = _batch_with_section(LZ4, comp, data)
    assert _values(columnar_decoder.decode_records(batch, topic="t", partition=0)) == _values_of(
        data
    )


@pytest.mark.parametrize("size", SIZES)
def test_snappy_kernel_equals_cramjam(size: int) -> None:
    data = _data(size)
    xerial = compress(SNAPPY, data)
    raw = bytes(cramjam.snappy.compress_raw(data))
    half = len(data) // 2
    concatenated = compress(SNAPPY, data[:half]) + compress(SNAPPY, data[half:])
    for comp in (xerial, raw, concatenated):
        assert _kernel(SNAPPY, comp, size) == (lz4_frame.OK, data)
        if size:
            assert _kernel(SNAPPY, comp, size - 1)[0] == lz4_frame.NO_ROOM


def _snappy_elements(rng: random.Random, n: int) -> tuple[bytes, bytes]:
    """A raw snappy block of ``n`` random elements written by hand (literals of 1 to 70 bytes,
    around the 60/61 switch to length bytes; copies of 1 to 64 bytes from 1 to 40 back, each
    kind of offset) and what it inflates to, built by the format's rules byte by byte."""
    out, body = bytearray(), bytearray()
    for _ in range(n):
        if not out or rng.random() < 0.4:
            literal = rng.randbytes(rng.choice([1, 15, 16, 17, 59, 60, 61, 64, 65, 70]))
            if len(literal) <= 60:
                body.append((len(literal) - 1) << 2)
            else:
                body += bytes([60 << 2, len(literal) - 1])
            body += literal
            out += literal
            continue
        offset = rng.randint(1, min(40, len(out)))
        kind = rng.choice([1, 2, 4]) if offset < 2048 else rng.choice([2, 4])
        length = rng.randint(4, 11) if kind == 1 else rng.randint(1, 64)
        if kind == 1:
            body += bytes([1 | (length - 4) << 2 | (offset >> 8) << 5, offset & 0xFF])
        else:
            body.append((2 if kind == 2 else 3) | (length - 1) << 2)
            body += offset.to_bytes(kind, "little")
        for _ in range(length):  # the format's overlapping copy, byte by byte
            out.append(out[-offset])
    preamble = bytearray()
    size = len(out)
    while True:
        preamble.append(size & 0x7F | (0x80 if size > 0x7F else 0))
        size >>= 7
        if not size:
            return bytes(preamble + body), bytes(out)


@pytest.mark.parametrize("seed", range(20))
def test_snappy_kernel_wide_moves_equal_cramjam_at_every_room(seed: int) -> None:
    """Short literals and copies move 16 or 64 bytes at once: whatever room is left past the
    output, the result equals cramjam's and nothing is written past the limit."""
    comp, data = _snappy_elements(random.Random(seed), 200)
    assert bytes(cramjam.snappy.decompress_raw(comp)) == data
    for spare in (0, 1, 15, 16, 63, 64, 65):
        assert _kernel(SNAPPY, comp, len(data) + spare) == (lz4_frame.OK, data)
    assert _kernel(SNAPPY, comp, len(data) - 1)[0] == lz4_frame.NO_ROOM
    for cut in range(len(comp) - 70, len(comp)):  # input ending inside the last elements
        _agree(SNAPPY, comp[:cut], len(data) + 64)


def test_snappy_bomb_is_refused_before_writing() -> None:
    bomb = bytes([0xFF, 0xFF, 0xFF, 0xFF, 0x0F]) + b"\x00a"  # claims 4 GiB - 1
    src = np.frombuffer(bomb, np.uint8)
    dst = np.full(16, CANARY, np.uint8)
    assert snappy_block.decode(src, 0, len(src), dst, 0, 16) == (lz4_frame.NO_ROOM, 0)
    assert (dst == CANARY).all()


ZSTD_FRAMES = {
    "kafka": lambda d: compress(ZSTD, d),
    "content size, checksum": lambda d: zstandard.ZstdCompressor(
        level=19, write_checksum=True
    ).compress(d),
    "several and skippable": lambda d: (
        compress(ZSTD, d[: len(d) // 3])
        + struct.pack("<II", 0x184D2A5E, 5)
        + b"skip!"
        + compress(ZSTD, d[len(d) // 3 :])
        + compress(ZSTD, b"")
    ),
    "long window": lambda d: zstandard.ZstdCompressor(
        compression_params=zstandard.ZstdCompressionParameters(window_log=24, strategy=3)
    ).compress(d),
}


@pytest.mark.parametrize("frame", list(ZSTD_FRAMES))
@pytest.mark.parametrize("size", SIZES)
def test_zstd_sections_equal_zstandard(frame: str, size: int) -> None:
    data = _data(size)
    comp = ZSTD_FRAMES[frame](data)
    assert decompress(ZSTD, comp, size) == data
    assert _kernel(ZSTD, comp, size) == (lz4_frame.OK, data)
    if size:
        assert _kernel(ZSTD, comp, size - 1)[0] == lz4_frame.NO_ROOM


def test_zstd_sections_leave_empty_and_garbage_input_to_the_library() -> None:
    skippable_only = struct.pack("<II", 0x184D2A50, 3) + b"abc"
    for comp in (b"", b"\x00" * 40, b"garbage, no frame", skippable_only, VALID[ZSTD][0] + b"x"):
        _agree(ZSTD, comp, 1 << 20)
    assert _kernel(ZSTD, b"x", 100) == (lz4_frame.CORRUPT, b"")
    with pytest.raises(CorruptRecordError, match="zstd stream is empty"):
        decompress(ZSTD, b"")


def test_zstd_sections_stop_at_the_side_buffer_end_and_at_the_budget() -> None:
    """A run of three sections of 3000 bytes: the side buffer's end stops it with NO_ROOM (grow
    and go on from that row), the budget with OVER; the rows done say where they landed."""
    data = [_data(3000, seed) for seed in (1, 2, 3)]
    joined = b"".join(compress(ZSTD, d) for d in data)
    src = np.frombuffer(joined, np.uint8)
    rows = np.zeros((3, decode_kernel.INFLATE_FIELDS), np.int64)
    bounds = np.cumsum([0] + [len(compress(ZSTD, d)) for d in data])
    rows[:, decode_kernel.I_START], rows[:, decode_kernel.I_END] = bounds[:-1], bounds[1:]
    canaries = np.full(7064, CANARY, np.uint8)
    status, reached, used = zstd_sections.inflate_sections(
        src, rows, canaries[:7000], 0, 3000, -1, 1 << 20
    )
    assert (status, reached, used) == (decode_kernel.INFLATE_NO_ROOM, 2, 6000)
    assert (canaries[7000:] == CANARY).all()  # bytes past used are scratch, past the end untouched
    assert bytes(canaries[:6000]) == b"".join(data[:2])
    assert rows[:2, decode_kernel.I_OUT_START].tolist() == [0, 3000]
    assert rows[:2, decode_kernel.I_OUT_END].tolist() == [3000, 6000]
    bigger = np.zeros(20_000, np.uint8)
    for budget, expected in ((8999, (decode_kernel.INFLATE_OVER, 2, 6000)), (9000, (0, 3, 9000))):
        got = zstd_sections.inflate_sections(src, rows, bigger, 0, 3000, budget, 1 << 20)
        assert got == expected
    assert bytes(bigger[:9000]) == b"".join(data)


def test_zstd_bomb_in_a_batch_is_refused_at_its_room() -> None:
    bomb = compress(ZSTD, bytes(64 << 20))  # 64 MiB of zeros in a few KB
    assert len(bomb) < 10_000
    assert _kernel(ZSTD, bomb, 1 << 20) == (lz4_frame.NO_ROOM, b"")
    assert _library(ZSTD, bomb, 1 << 20) is None


def test_zstd_without_the_fast_path_decodes_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    values = _values_of(_data(50_000))
    run = b"".join(_batch(ZSTD, values[i : i + 50], i) for i in range(0, len(values), 50))
    fast = _values(columnar_decoder.decode_records(run, topic="t", partition=0))
    monkeypatch.setattr(zstd_sections, "AVAILABLE", False)
    assert _values(columnar_decoder.decode_records(run, topic="t", partition=0)) == fast == values


VALID = {
    LZ4: [compress(LZ4, _data(n, seed)) for n, seed in ((3000, 1), (70_000, 2))],
    SNAPPY: [
        compress(SNAPPY, _data(70_000, 4)),
        bytes(cramjam.snappy.compress_raw(_data(3000, 5))),
    ],
    ZSTD: [
        compress(ZSTD, _data(70_000, 6)) + compress(ZSTD, _data(300, 7)),
        zstandard.ZstdCompressor(level=19, write_checksum=True).compress(_data(3000, 8)),
    ],
}


@pytest.mark.parametrize("codec", FAST_CODECS, ids=FAST_IDS)
def test_every_truncation_agrees_with_the_library(codec: CompressionType) -> None:
    comp = VALID[codec][0]
    for cut in range(0, len(comp), max(1, len(comp) // 400)):
        _agree(codec, comp[:cut], 1 << 20)
    for cut in range(max(0, len(comp) - 40), len(comp)):  # every cut near the end
        _agree(codec, comp[:cut], 1 << 20)


@settings(max_examples=400, deadline=None, derandomize=True)
@given(
    codec=st.sampled_from(FAST_CODECS),
    which=st.integers(0, 1),
    mutations=st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(0, 255)), max_size=4),
    cut=st.integers(0, 1 << 20),
    limit=st.sampled_from([0, 100, 3000, 1 << 20]),
)
def test_mutated_input_agrees_with_the_library_and_stays_in_bounds(
    codec: CompressionType, which: int, mutations: list[tuple[int, int]], cut: int, limit: int
) -> None:
    comp = bytearray(VALID[codec][which])
    for at, value in mutations:
        comp[at % len(comp)] = value
    _agree(codec, bytes(comp[: max(1, cut % (len(comp) + 1))]), limit)


# -- in the columnar decoder --------------------------------------------------------------------


def _values_of(data: bytes) -> list[bytes]:
    return [data[i : i + 100] for i in range(0, len(data), 100)]


def _batch(codec: CompressionType, values: list[bytes], base_offset: int = 0) -> bytes:
    builder = MemoryRecordsBuilder(base_offset, codec)
    for i, value in enumerate(values):
        builder.append(base_offset + i, 1000 + i, None, value)
    return builder.build()


def _batch_with_section(
    codec: CompressionType, section: bytes, data: bytes, base_offset: int = 0
) -> bytes:
    """A batch of the records of ``data`` whose records section is ``section`` (compressed with
    other options, or broken), its size and CRC made right."""
    plain = _batch(CompressionType.NONE, _values_of(data), base_offset)
    out = bytearray(plain[:HEADER]) + section
    struct.pack_into(">i", out, 8, len(out) - 12)
    struct.pack_into(">h", out, ATTRIBUTES_OFFSET, int(codec))
    struct.pack_into(">I", out, CRC_OFFSET, crc32c.crc32c(bytes(out[ATTRIBUTES_OFFSET:])))
    return bytes(out)


def _values(batches: list) -> list[bytes]:  # type: ignore[type-arg]
    return [v for b in batches for v in b.column("value").to_pylist()]


def _records_section(data: bytes) -> bytes:
    return _batch(CompressionType.NONE, _values_of(data))[HEADER:]


@pytest.mark.parametrize("codec", FAST_CODECS, ids=FAST_IDS)
def test_corrupt_section_names_the_batch_and_the_librarys_reason(codec: CompressionType) -> None:
    data = _data(3000)
    good = _batch(codec, _values_of(data))
    section = bytearray(compress(codec, _records_section(data)))
    section[len(section) // 2 :] = b"\xff" * (len(section) - len(section) // 2)
    bad = _batch_with_section(codec, bytes(section), data, base_offset=30)
    with pytest.raises(CorruptRecordError, match=f"{codec.name.lower()} data") as info:
        columnar_decoder.decode_records(good + bad, topic="t", partition=0, source="seg.log")
    error = info.value
    assert (error.source, error.position, error.base_offset) == ("seg.log", len(good), 30)


@pytest.mark.parametrize("codec", FAST_CODECS, ids=FAST_IDS)
def test_a_batch_past_the_per_batch_cap_is_an_error_naming_the_limit(
    codec: CompressionType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(decode_plan, "MAX_DECOMPRESSED_BYTES", 4096)
    batch = _batch(codec, _values_of(_data(5000)))
    with pytest.raises(CorruptRecordError, match="past the limit of 4096 bytes") as info:
        columnar_decoder.decode(batch, topic="t", partition=0)
    assert info.value.base_offset == 0


@pytest.mark.parametrize("codec", FAST_CODECS, ids=FAST_IDS)
def test_the_budget_stops_before_a_batch_that_does_not_fit_and_the_next_call_goes_on(
    codec: CompressionType,
) -> None:
    data = _data(50_000)
    values = _values_of(data)
    run = b"".join(_batch(codec, values[i : i + 50], i) for i in range(0, len(values), 50))
    seen: list[bytes] = []
    offset, position, calls = 0, 0, 0
    for _ in range(len(values)):  # each call decodes at least one batch
        if position == len(run):
            break
        got = columnar_decoder.decode(
            run[position:], topic="t", partition=0, start_offset=offset, max_inflated_bytes=12_000
        )
        seen += _values(list(got.batches))
        assert got.num_rows <= 150  # the first batch whole, then at most 12,000 bytes
        offset, position, calls = got.next_offset, position + got.end_position, calls + 1
    assert seen == values and calls >= 4


def test_the_side_buffer_grows_for_batches_that_inflate_far() -> None:
    values = [bytes([i % 7]) * 100 for i in range(20_000)]  # inflates about 100 times
    run = b"".join(
        _batch(codec, values[i : i + 1000], i)
        for i, codec in zip(range(0, 20_000, 1000), [LZ4, SNAPPY, ZSTD, ZSTD] * 5, strict=True)
    )
    assert _values(columnar_decoder.decode_records(run, topic="t", partition=0)) == values


def test_kernel_and_library_codecs_in_one_run_keep_their_order() -> None:
    values = _values_of(_data(20_000))
    codecs = [LZ4, CompressionType.ZSTD, SNAPPY, CompressionType.NONE, CompressionType.GZIP]
    run = b"".join(_batch(c, values[i * 40 : (i + 1) * 40], i * 40) for i, c in enumerate(codecs))
    assert _values(columnar_decoder.decode_records(run, topic="t", partition=0)) == values[:200]


# -- Kafka's own output ---------------------------------------------------------------------------

FIXTURE_RUNS = [batch.data() for batch in BATCHES_BY_NAME.values()] + [
    p.read_bytes() for p in sorted(LOG_DIRS.glob("*/*/*.log")) if p.stat().st_size
]


def test_fixtures_decode_the_same_through_the_kernel_and_the_libraries(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every batch and log Kafka's Java library wrote (lz4, snappy xerial, zstd, gzip) gives
    the same table whether lz4, snappy and zstd go through the fast paths or the libraries."""

    def decode_all() -> list[pa.Table]:
        return [
            pa.Table.from_batches(
                columnar_decoder.decode_records(run, topic="t", partition=0, include_headers=True),
                schema=columnar_decoder.kafka_schema(True),
            )
            for run in FIXTURE_RUNS
        ]

    with_kernel = decode_all()
    monkeypatch.setattr(decode_plan.Inflater, "_fast_run", lambda self, rows, how: 0)
    assert decode_all() == with_kernel
    assert sum(t.num_rows for t in with_kernel) > 100
