"""Mutators: corrupt a run of entries (a segment's bytes) the ways disks, bugs and attackers do.

Each mutator takes a :class:`~benchmarks._fuzz_corpus.Seed` and a ``random.Random`` and returns
a :class:`Mutant`: the new bytes plus what was done, so that an oracle knows what a correct
reader may return:

- ``touched`` (lo, hi): the byte range of the original that changed (for a truncation, from the
  cut to the end);
- ``recrc``: the checksum was recomputed over changed bytes, so the content may legitimately
  read as different records (only agreement and domain errors can be asked of the readers);
- ``lossy``: the mutation may legitimately remove or reorder records (a truncation at an entry
  boundary, a dropped or duplicated entry).

A mutation that is neither ``recrc`` nor ``lossy`` and does not touch an unprotected field
(the 8-byte base offset, which no checksum covers, and the v2 partition leader epoch, which
does not change the records) must read as the original records or fail with a domain error:
anything else is silent data loss or corruption.

Mutators (``MUTATORS``): bit flips, interesting bytes, forged header fields (lengths, magic,
attributes, counts, deltas, timestamps, producer fields, epochs up to 2^31-1) with or without the
CRC recomputed, truncations, lying record counts, forged record bytes inside an uncompressed v2
batch (CRC recomputed), recompressed bodies (decompress, corrupt, compress again with the same or
another codec, lengths and CRC fixed, for v2 batches and legacy wrappers), entries dropped,
duplicated or swapped, random bytes inserted. Mutation happens in memory on ``bytearray``s; the
functions keep no state and are thread-safe given a ``random.Random`` per thread.
"""

from __future__ import annotations

import random
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass

import crc32c

from benchmarks._fuzz_corpus import Seed, entry_table
from broker_embedded.record.compression import CompressionType, compress, decompress

INTERESTING_32 = (
    0,
    1,
    -1,
    2,
    12,
    49,
    61,
    0x7F,
    0x80,
    0xFF,
    0x7FFF,
    0x8000,
    0xFFFF,
    0x10000,
    0x7FFFFFFF,
    -0x80000000,
    0x7FFFFFFE,
    0x40000000,
)
INTERESTING_64 = (0, 1, -1, 2**31 - 1, 2**31, 2**32, 2**62, 2**63 - 1, -(2**63))
INTERESTING_16 = (0, 1, -1, 0x7FFF, -0x8000, 0x0F, 0x10, 0x20, 0x27, 0x07, 0x05, 0x08)
# v2 batch header fields: (position, struct format, what) -- record_batch.py's layout
V2_FIELDS = (
    (8, ">i", "length"),
    (12, ">i", "leader_epoch"),
    (16, ">b", "magic"),
    (21, ">h", "attributes"),
    (23, ">i", "last_offset_delta"),
    (27, ">q", "base_timestamp"),
    (35, ">q", "max_timestamp"),
    (43, ">q", "producer_id"),
    (51, ">h", "producer_epoch"),
    (53, ">i", "base_sequence"),
    (57, ">i", "records_count"),
)
LEGACY_FIELDS = ((8, ">i", "length"), (16, ">b", "magic"), (17, ">b", "attributes"))
V2_HEADER = 61


@dataclass(frozen=True)
class Mutant:
    """A mutated run; see the module docstring for the meaning of the flags."""

    data: bytes
    kind: str
    touched: tuple[int, int]
    recrc: bool = False
    lossy: bool = False


def _entry(seed: Seed, rng: random.Random) -> tuple[int, int, int]:
    """(position, size, magic) of a random entry of the seed."""
    i = rng.randrange(len(seed.entries))
    pos, magic = seed.entries[i]
    end = seed.entries[i + 1][0] if i + 1 < len(seed.entries) else len(seed.data)
    return pos, end - pos, magic


def fix_checksum(buf: bytearray, pos: int, size: int, magic: int) -> None:
    """Recompute the CRC of the entry at ``pos`` (CRC-32C from attributes for v2, CRC-32 from
    magic for legacy)."""
    if magic == 2:
        struct.pack_into(">I", buf, pos + 17, crc32c.crc32c(bytes(buf[pos + 21 : pos + size])))
    elif magic in (0, 1):
        struct.pack_into(">I", buf, pos + 12, zlib.crc32(bytes(buf[pos + 16 : pos + size])))


def bit_flip(seed: Seed, rng: random.Random) -> Mutant:
    buf = bytearray(seed.data)
    lo, hi = len(buf), 0
    for _ in range(rng.choice((1, 1, 1, 2, 3, 8))):
        pos = rng.randrange(len(buf))
        buf[pos] ^= 1 << rng.randrange(8)
        lo, hi = min(lo, pos), max(hi, pos + 1)
    return Mutant(bytes(buf), "bit_flip", (lo, hi))


def interesting_byte(seed: Seed, rng: random.Random) -> Mutant:
    buf = bytearray(seed.data)
    pos = rng.randrange(len(buf))
    buf[pos] = rng.choice((0x00, 0xFF, 0x7F, 0x80, 0x01, 0xFE))
    return Mutant(bytes(buf), "interesting_byte", (pos, pos + 1))


def _forge(seed: Seed, rng: random.Random, recrc: bool) -> Mutant:
    pos, size, magic = _entry(seed, rng)
    at, fmt, what = rng.choice(V2_FIELDS if magic == 2 else LEGACY_FIELDS)
    buf = bytearray(seed.data)
    width = struct.calcsize(fmt)
    if pos + at + width > len(buf):
        return bit_flip(seed, rng)
    old = struct.unpack_from(fmt, buf, pos + at)[0]
    pool = {1: (0, 1, 2, 3, -1, 0x7F), 2: INTERESTING_16, 4: INTERESTING_32, 8: INTERESTING_64}
    value = rng.choice(pool[width] + (old + 1, old - 1, old + rng.randrange(-64, 64)))
    lo_hi = {
        1: (-128, 127),
        2: (-(2**15), 2**15 - 1),
        4: (-(2**31), 2**31 - 1),
        8: (-(2**63), 2**63 - 1),
    }[width]
    value = min(max(value, lo_hi[0]), lo_hi[1])
    struct.pack_into(fmt, buf, pos + at, value)
    if recrc:
        fix_checksum(buf, pos, size, magic)
    kind = f"forge_{what}" + ("_recrc" if recrc else "")
    return Mutant(bytes(buf), kind, (pos + at, pos + at + width), recrc=recrc)


def forge_field(seed: Seed, rng: random.Random) -> Mutant:
    return _forge(seed, rng, recrc=False)


def forge_field_recrc(seed: Seed, rng: random.Random) -> Mutant:
    return _forge(seed, rng, recrc=True)


def truncate(seed: Seed, rng: random.Random) -> Mutant:
    if rng.random() < 0.3:  # at an entry boundary, give or take a few bytes
        cut = rng.choice(seed.entries)[0] + rng.choice((0, 0, 1, 11, 12, 16, 17, 60, 61))
    else:
        cut = rng.randrange(len(seed.data))
    cut = min(cut, len(seed.data) - 1)
    return Mutant(seed.data[:cut], "truncate", (cut, len(seed.data)), lossy=True)


def lying_count(seed: Seed, rng: random.Random) -> Mutant:
    ends = [p for p, _ in seed.entries[1:]] + [len(seed.data)]
    # a stacked mutation's entries may be shorter than a v2 header: no count to lie in
    v2 = [
        (p, end) for (p, m), end in zip(seed.entries, ends, strict=True) if m == 2 and end - p >= 61
    ]
    if not v2:
        return forge_field_recrc(seed, rng)
    pos, end = rng.choice(v2)
    buf = bytearray(seed.data)
    count = struct.unpack_from(">i", buf, pos + 57)[0]
    new = rng.choice((count + 1, count - 1, 0, count * 2, 2**31 - 1, -1, count + 1000))
    struct.pack_into(">i", buf, pos + 57, max(min(new, 2**31 - 1), -(2**31)))
    if rng.random() < 0.5:  # the last offset delta agrees with the lie
        struct.pack_into(">i", buf, pos + 23, max(min(new - 1, 2**31 - 1), -(2**31)))
    fix_checksum(buf, pos, end - pos, 2)
    return Mutant(bytes(buf), "lying_count", (pos + 23, pos + 61), recrc=True)


def _corrupt_bytes(body: bytes, rng: random.Random) -> bytes:
    """A small structural corruption of a records section (varints, lengths, cut, garbage)."""
    buf = bytearray(body)
    choice = rng.randrange(5)
    if not buf or choice == 0:
        return bytes(buf) + bytes(rng.randrange(256) for _ in range(rng.randrange(1, 9)))
    pos = rng.randrange(len(buf))
    if choice == 1:
        buf[pos] ^= 1 << rng.randrange(8)
    elif choice == 2:
        buf[pos] = rng.choice((0x00, 0x01, 0x7F, 0x80, 0xFF, 0xFE))
    elif choice == 3:
        del buf[pos:]
    else:  # a long varint: continuation bits
        buf[pos:pos] = b"\xff" * rng.randrange(1, 12)
    return bytes(buf)


def _rebuild_v2(
    buf: bytearray, pos: int, size: int, codec: int, records: bytes
) -> tuple[bytearray, int]:
    """Replace the records section of the v2 batch at ``pos``; fix its length, codec and CRC."""
    head = bytearray(buf[pos : pos + V2_HEADER])
    attributes = struct.unpack_from(">h", head, 21)[0]
    struct.pack_into(">h", head, 21, (attributes & ~0x07) | codec)
    entry = head + records
    struct.pack_into(">i", entry, 8, len(entry) - 12)
    fix_checksum(entry, 0, len(entry), 2)
    return buf[:pos] + entry + buf[pos + size :], len(entry)


def forge_records(seed: Seed, rng: random.Random) -> Mutant:
    """Corrupt the (decompressed) records of a v2 batch and store them again, optionally with
    another codec; lengths and CRC fixed, so only the record-level parse can catch it."""
    v2 = [i for i, (_, m) in enumerate(seed.entries) if m == 2]
    if not v2:
        return recompress_legacy(seed, rng)
    i = rng.choice(v2)
    pos = seed.entries[i][0]
    end = seed.entries[i + 1][0] if i + 1 < len(seed.entries) else len(seed.data)
    buf = bytearray(seed.data)
    codec = struct.unpack_from(">h", buf, pos + 21)[0] & 0x07
    try:
        records = decompress(CompressionType(codec), bytes(buf[pos + V2_HEADER : end]))
    except Exception:
        return bit_flip(seed, rng)
    if rng.random() < 0.8:
        records = _corrupt_bytes(records, rng)
    new_codec = codec if rng.random() < 0.6 else rng.randrange(5)
    body = compress(CompressionType(new_codec), records) if new_codec else records
    out, _ = _rebuild_v2(buf, pos, end - pos, new_codec, body)
    return Mutant(bytes(out), f"recompress_v2_{codec}_to_{new_codec}", (pos, end), recrc=True)


def recompress_legacy(seed: Seed, rng: random.Random) -> Mutant:
    """Corrupt the inner message set of a legacy wrapper and compress it again, CRC fixed."""
    wrappers = [
        i for i, (p, m) in enumerate(seed.entries) if m in (0, 1) and seed.data[p + 17] & 0x07
    ]
    if not wrappers:
        return forge_field_recrc(seed, rng)
    i = rng.choice(wrappers)
    pos, magic = seed.entries[i]
    end = seed.entries[i + 1][0] if i + 1 < len(seed.entries) else len(seed.data)
    buf = bytearray(seed.data)
    codec = buf[pos + 17] & 0x07
    key_at = pos + 18 + (8 if magic == 1 else 0)
    key_len = struct.unpack_from(">i", buf, key_at)[0]
    value_at = key_at + 4 + max(key_len, 0)
    try:
        inner = decompress(CompressionType(codec), bytes(buf[value_at + 4 : end]))
    except Exception:
        return bit_flip(seed, rng)
    value = compress(CompressionType(codec), _corrupt_bytes(inner, rng))
    entry = bytearray(buf[pos:value_at]) + struct.pack(">i", len(value)) + value
    struct.pack_into(">i", entry, 8, len(entry) - 12)
    fix_checksum(entry, 0, len(entry), magic)
    out = buf[:pos] + entry + buf[end:]
    return Mutant(bytes(out), f"recompress_magic{magic}_{codec}", (pos, end), recrc=True)


def splice(seed: Seed, rng: random.Random) -> Mutant:
    """Drop, duplicate or swap whole entries (the bytes of each stay valid)."""
    spans = [
        (p, (seed.entries[k + 1][0] if k + 1 < len(seed.entries) else len(seed.data)))
        for k, (p, _) in enumerate(seed.entries)
    ]
    parts = [seed.data[a:b] for a, b in spans]
    i = rng.randrange(len(parts))
    how = rng.choice(("drop", "dup", "swap"))
    if how == "drop" and len(parts) > 1:
        del parts[i]
    elif how == "swap" and len(parts) > 1:
        j = rng.randrange(len(parts))
        parts[i], parts[j] = parts[j], parts[i]
    else:
        parts.insert(i, parts[i])
    return Mutant(b"".join(parts), f"splice_{how}", (spans[i][0], len(seed.data)), lossy=True)


def insert_bytes(seed: Seed, rng: random.Random) -> Mutant:
    pos = rng.randrange(len(seed.data) + 1)
    junk = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 24)))
    return Mutant(seed.data[:pos] + junk + seed.data[pos:], "insert", (pos, len(seed.data)))


Mutator = Callable[[Seed, random.Random], Mutant]
MUTATORS: tuple[Mutator, ...] = (
    bit_flip,
    bit_flip,
    interesting_byte,
    forge_field,
    forge_field_recrc,
    truncate,
    lying_count,
    forge_records,
    forge_records,
    recompress_legacy,
    splice,
    insert_bytes,
)


def mutate(seed: Seed, rng: random.Random) -> Mutant:
    """One random mutation of ``seed`` (sometimes two stacked)."""
    mutant = rng.choice(MUTATORS)(seed, rng)
    entries = entry_table(mutant.data) if rng.random() < 0.1 else ()
    if entries:
        second = rng.choice(MUTATORS)(Seed(seed.name, mutant.data, (), entries), rng)
        lo = min(mutant.touched[0], second.touched[0])
        return Mutant(
            second.data,
            f"{mutant.kind}+{second.kind}",
            (lo, len(seed.data)),
            recrc=mutant.recrc or second.recrc,
            lossy=mutant.lossy or second.lossy,
        )
    return mutant


def unprotected(seed: Seed, touched: tuple[int, int]) -> bool:
    """Whether ``touched`` overlaps a field no checksum covers and that may change what is read
    (an entry's base offset or, within a legacy wrapper, its offset)."""
    lo, hi = touched
    return any(lo < p + 8 and p < hi for p, _ in seed.entries)
