"""SkimpyOffsetMap: the numba MD5 equals hashlib's, and the map's buffer is byte for byte what a
plain-Python transcription of Kafka's SkimpyOffsetMap (hashlib MD5, a bytearray of 24-byte slots,
Kafka's positionOf probing) holds after the same puts; gets, bounds and clearing follow Kafka."""

from __future__ import annotations

import hashlib
import random
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_embedded.cleaner.skimpy_offset_map import (
    BYTES_PER_ENTRY,
    M_LATEST,
    SkimpyOffsetMap,
    digest_bytes,
    map_get,
    map_put,
)


class KafkaSkimpyOffsetMap:
    """Kafka's SkimpyOffsetMap (core/src/main/scala/kafka/log/OffsetMap.scala), in plain
    Python: the reference the numba map must equal."""

    def __init__(self, memory: int) -> None:
        self.bytes = bytearray(memory)
        self.slots = memory // 24
        self.entries = 0
        self.last_offset = -1

    def position_of(self, digest: bytes, attempt: int) -> int:
        probe = struct.unpack_from(">i", digest, min(attempt, 12))[0] + max(0, attempt - 12)
        probe = (probe + 2**31) % 2**32 - 2**31  # a Java int
        slot = (0 if probe == -(2**31) else abs(probe)) % self.slots
        return slot * 24

    def is_empty(self, pos: int) -> bool:
        return self.bytes[pos : pos + 24] == bytes(24)

    def put_digest(self, digest: bytes, offset: int) -> None:
        assert self.entries < self.slots, "Attempt to add a new entry to a full offset map."
        attempt = 0
        pos = self.position_of(digest, attempt)
        while not self.is_empty(pos):
            if self.bytes[pos : pos + 16] == digest:
                struct.pack_into(">q", self.bytes, pos + 16, offset)
                self.last_offset = offset
                return
            attempt += 1
            pos = self.position_of(digest, attempt)
        self.bytes[pos : pos + 16] = digest
        struct.pack_into(">q", self.bytes, pos + 16, offset)
        self.last_offset = offset
        self.entries += 1

    def put(self, key: bytes, offset: int) -> None:
        self.put_digest(hashlib.md5(key).digest(), offset)

    def get(self, key: bytes) -> int:
        digest = hashlib.md5(key).digest()
        attempt = 0
        while attempt < self.slots + 12:
            pos = self.position_of(digest, attempt)
            if self.is_empty(pos):
                return -1
            if self.bytes[pos : pos + 16] == digest:
                return struct.unpack_from(">q", self.bytes, pos + 16)[0]
            attempt += 1
        return -1


def test_md5_equals_hashlib_on_many_keys() -> None:
    rng = random.Random(5)
    m = SkimpyOffsetMap(24)
    keys = [rng.randbytes(n) for n in range(0, 300)]  # every padding case: 0-55, 56-63, 64+
    keys += [rng.randbytes(rng.randint(0, 5000)) for _ in range(300)]
    keys += [b"key-%d" % i for i in range(20_000)]
    for key in keys:
        assert digest_bytes(*m.digest(key)) == hashlib.md5(key).digest(), len(key)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_md5_property(key: bytes) -> None:
    assert digest_bytes(*SkimpyOffsetMap(24).digest(key)) == hashlib.md5(key).digest()


@pytest.mark.parametrize("slots", [1, 7, 100, 1009])
def test_buffer_equals_kafkas_map_after_the_same_puts(slots: int) -> None:
    rng = random.Random(slots)
    ours = SkimpyOffsetMap(slots * 24 + 5)  # a remainder smaller than a slot is unused
    ref = KafkaSkimpyOffsetMap(slots * 24 + 5)
    assert ours.slots == ref.slots == slots
    keys = [b"k%d" % rng.randrange(3 * slots) for _ in range(5 * slots)]
    offset = 0
    for key in keys:
        if ref.entries == ref.slots:  # Kafka refuses any put then, even of a known key
            with pytest.raises(ValueError, match="full"):
                ours.put(key, offset)
            continue
        offset += rng.randint(1, 3)
        ours.put(key, offset)
        ref.put(key, offset)
        assert ours.latest_offset == ref.last_offset == offset
    assert bytes(ours.buffer) == bytes(ref.bytes[: slots * 24])
    assert ours.size == ref.entries
    for key in {*keys, b"absent", b""}:
        assert ours.get(key) == ref.get(key)


def test_slot_layout_is_digest_then_big_endian_offset() -> None:
    m = SkimpyOffsetMap(24 * 64)
    m.put(b"hello", 0x0102030405060708)
    digest = hashlib.md5(b"hello").digest()
    slot = KafkaSkimpyOffsetMap(24 * 64).position_of(digest, 0)
    assert bytes(m.buffer[slot : slot + 24]) == digest + bytes(range(1, 9))
    assert np.count_nonzero(m.buffer) == np.count_nonzero(m.buffer[slot : slot + 24])


def test_probing_of_crafted_digests_including_integer_min() -> None:
    """Digests chosen to collide, to start at Integer.MIN_VALUE (Utils.abs gives 0) and to
    overflow the probe sum: the slots taken equal Kafka's."""
    m = SkimpyOffsetMap(24 * 11)
    ref = KafkaSkimpyOffsetMap(24 * 11)
    digests = [
        bytes([0x80, 0, 0, 0]) + bytes(12),  # readInt = Integer.MIN_VALUE
        bytes([0x7F, 0xFF, 0xFF, 0xFF] * 4),  # probe + attempt overflows past MAX_VALUE
        bytes([0x7F, 0xFF, 0xFF, 0xFF] * 4)[:15] + b"\x01",
        bytes([0, 0, 0, 5] * 4),
        bytes([0, 0, 0, 5] * 3) + bytes([0, 0, 0, 6]),  # same first 12 windows: linear probes
        bytes([0, 0, 0, 5] * 3) + bytes([0, 0, 0, 7]),
        bytes(15) + b"\x01",
    ]
    for i, digest in enumerate(digests):
        h0, h1 = (int.from_bytes(digest[j : j + 8], "little", signed=True) for j in (0, 8))
        assert map_put(m.words, m.state, h0, h1, 100 + i)
        ref.put_digest(digest, 100 + i)
        assert map_get(m.words, m.state, h0, h1) == 100 + i
    assert bytes(m.buffer) == bytes(ref.bytes)
    assert ref.bytes[:16] == digests[0]  # MIN_VALUE went to slot 0


def test_bound_and_clear() -> None:
    memory = 24 * 1000 + 23
    m = SkimpyOffsetMap(memory, load_factor=0.9)
    assert (m.slots, m.max_desired_entries) == (1000, 900)
    assert m.buffer.nbytes == 24_000 and m.memory == memory
    for i in range(900):
        m.put(b"k%d" % i, i)
    assert m.is_full and m.utilization == 0.9 and m.latest_offset == 899
    m.clear()
    assert (m.size, m.latest_offset, m.get(b"k1")) == (0, -1, -1)
    assert not m.buffer.any()
    assert m.state[M_LATEST] == -1
    with pytest.raises(ValueError):
        SkimpyOffsetMap(BYTES_PER_ENTRY - 1)
    with pytest.raises(ValueError):
        SkimpyOffsetMap(1000, load_factor=0)


def test_a_full_map_answers_gets_without_looping_and_refuses_puts() -> None:
    m = SkimpyOffsetMap(24 * 5, load_factor=1.0)
    for i in range(5):
        m.put(b"k%d" % i, i)
    assert m.get(b"missing") == -1  # every slot taken: stops after slots + 12 attempts
    assert m.get(b"k3") == 3
    for key in (b"new", b"k3"):  # Kafka's put requires entries < slots, even for a known key
        with pytest.raises(ValueError, match="full"):
            m.put(key, 7)
