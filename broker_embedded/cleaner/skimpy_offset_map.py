"""Kafka's ``SkimpyOffsetMap``: the cleaner's bounded map from key hash to the latest offset.

Byte layout: ONE preallocated buffer of ``memory`` bytes (``log.cleaner.dedupe.buffer.size``
divided by ``log.cleaner.threads``), cut into ``slots = memory // 24`` slots of 24 bytes::

    0  16 bytes  MD5 digest of the key (the digest's bytes in order)
    16 int64     offset, big-endian (Java's ByteBuffer)

An all-zero slot is empty; entries are never deleted (the map is cleared between rounds).

Probing (Kafka's ``positionOf``): attempt ``i`` looks at slot
``abs(readInt(digest, min(i, 12)) + max(0, i - 12)) % slots``, with ``readInt`` the big-endian
int32 at that digest byte, the sum wrapping as a Java int and ``abs(Integer.MIN_VALUE) = 0``
(``Utils.abs``): the first 13 attempts take successive 4-byte windows of the digest, after which
the probe walks linearly, so every slot is reached. ``put`` overwrites the slot holding the same
digest or takes the first empty one (the map must not be full: ``entries < slots``); ``get``
stops at the first empty slot or after ``slots + 12`` attempts and answers -1 when the key is
absent. Two keys with the same MD5 share a slot, as in Kafka.

Bounds: the map never grows. The cleaner puts keys while ``entries < max_desired_entries =
int(slots * load_factor)`` (``log.cleaner.io.buffer.load.factor``, 0.9) and stops the round
there (Kafka's rule: the rest of the dirty section waits for the next round). ``latest_offset``
is the last offset the map covers (-1 when cleared); records above it are kept by the cleaner.

Speed: no Python object per key. The numba functions here (MD5 of a byte slice, put, get, a
prefetch of a digest's first slot) are used by the cleaner's compiled record walk
(``cleaner_kernel``), which hashes a group of keys and prefetches their slots before it probes
(a random slot of a map far larger than the caches costs a memory access: about 200 ns here,
down to about 60 with the prefetch; MD5 of a short key costs about 145 ns); the methods of
:class:`SkimpyOffsetMap` are for tests and the rare slow path (legacy magic 0/1 entries). The
buffer is viewed as int64 words: a slot is words ``3s`` and ``3s + 1`` (the digest, loaded
little-endian so the bytes stay in digest order) and ``3s + 2`` (the offset, byte-swapped to
big-endian). :meth:`SkimpyOffsetMap.clear` replaces the buffer by fresh zero pages (the old
one is freed first), so the resident memory is what the puts touched, never above ``memory``.

Thread safety: none; one cleaner thread owns a map.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

from broker_embedded.record.kernel_primitives import inline, jit, le32

DIGEST_SIZE = 16
BYTES_PER_ENTRY = DIGEST_SIZE + 8
DEFAULT_LOAD_FACTOR = 0.9

# The map's state (an int64 array shared with the kernels).
M_SLOTS, M_ENTRIES, M_LATEST, M_MAX_DESIRED, M_LOOKUPS, M_PROBES = 0, 1, 2, 3, 4, 5
STATE_FIELDS = 6

_MASK32 = 0xFFFFFFFF
_INT_MIN = -(1 << 31)
MD5_SCRATCH_BYTES = 128  # the padded tail of a key: at most two blocks


# -- MD5 (RFC 1321) ------------------------------------------------------------------------------
# Words are int64 holding a 32-bit value; every result is masked back to 32 bits.


@inline
def _rotl(x, s):  # type: ignore[no-untyped-def]
    return ((x << s) | (x >> (32 - s))) & _MASK32


@inline
def _ff(a, b, c, d, x, s, k):  # type: ignore[no-untyped-def]
    return (b + _rotl((a + ((b & c) | (~b & d & _MASK32)) + x + k) & _MASK32, s)) & _MASK32


@inline
def _gg(a, b, c, d, x, s, k):  # type: ignore[no-untyped-def]
    return (b + _rotl((a + ((b & d) | (c & ~d & _MASK32)) + x + k) & _MASK32, s)) & _MASK32


@inline
def _hh(a, b, c, d, x, s, k):  # type: ignore[no-untyped-def]
    return (b + _rotl((a + (b ^ c ^ d) + x + k) & _MASK32, s)) & _MASK32


@inline
def _ii(a, b, c, d, x, s, k):  # type: ignore[no-untyped-def]
    return (b + _rotl((a + (c ^ (b | (~d & _MASK32))) + x + k) & _MASK32, s)) & _MASK32


@jit
def _md5_block(a0, b0, c0, d0, src, pos):  # type: ignore[no-untyped-def]
    """One 64-byte block at ``src[pos:]`` (the caller checked the bounds): the new state."""
    x0, x1, x2, x3 = le32(src, pos), le32(src, pos + 4), le32(src, pos + 8), le32(src, pos + 12)
    x4, x5, x6, x7 = (
        le32(src, pos + 16),
        le32(src, pos + 20),
        le32(src, pos + 24),
        le32(src, pos + 28),
    )
    x8, x9, x10, x11 = (
        le32(src, pos + 32),
        le32(src, pos + 36),
        le32(src, pos + 40),
        le32(src, pos + 44),
    )
    x12, x13, x14, x15 = (
        le32(src, pos + 48),
        le32(src, pos + 52),
        le32(src, pos + 56),
        le32(src, pos + 60),
    )
    a, b, c, d = a0, b0, c0, d0
    a = _ff(a, b, c, d, x0, 7, 0xD76AA478)
    d = _ff(d, a, b, c, x1, 12, 0xE8C7B756)
    c = _ff(c, d, a, b, x2, 17, 0x242070DB)
    b = _ff(b, c, d, a, x3, 22, 0xC1BDCEEE)
    a = _ff(a, b, c, d, x4, 7, 0xF57C0FAF)
    d = _ff(d, a, b, c, x5, 12, 0x4787C62A)
    c = _ff(c, d, a, b, x6, 17, 0xA8304613)
    b = _ff(b, c, d, a, x7, 22, 0xFD469501)
    a = _ff(a, b, c, d, x8, 7, 0x698098D8)
    d = _ff(d, a, b, c, x9, 12, 0x8B44F7AF)
    c = _ff(c, d, a, b, x10, 17, 0xFFFF5BB1)
    b = _ff(b, c, d, a, x11, 22, 0x895CD7BE)
    a = _ff(a, b, c, d, x12, 7, 0x6B901122)
    d = _ff(d, a, b, c, x13, 12, 0xFD987193)
    c = _ff(c, d, a, b, x14, 17, 0xA679438E)
    b = _ff(b, c, d, a, x15, 22, 0x49B40821)
    a = _gg(a, b, c, d, x1, 5, 0xF61E2562)
    d = _gg(d, a, b, c, x6, 9, 0xC040B340)
    c = _gg(c, d, a, b, x11, 14, 0x265E5A51)
    b = _gg(b, c, d, a, x0, 20, 0xE9B6C7AA)
    a = _gg(a, b, c, d, x5, 5, 0xD62F105D)
    d = _gg(d, a, b, c, x10, 9, 0x02441453)
    c = _gg(c, d, a, b, x15, 14, 0xD8A1E681)
    b = _gg(b, c, d, a, x4, 20, 0xE7D3FBC8)
    a = _gg(a, b, c, d, x9, 5, 0x21E1CDE6)
    d = _gg(d, a, b, c, x14, 9, 0xC33707D6)
    c = _gg(c, d, a, b, x3, 14, 0xF4D50D87)
    b = _gg(b, c, d, a, x8, 20, 0x455A14ED)
    a = _gg(a, b, c, d, x13, 5, 0xA9E3E905)
    d = _gg(d, a, b, c, x2, 9, 0xFCEFA3F8)
    c = _gg(c, d, a, b, x7, 14, 0x676F02D9)
    b = _gg(b, c, d, a, x12, 20, 0x8D2A4C8A)
    a = _hh(a, b, c, d, x5, 4, 0xFFFA3942)
    d = _hh(d, a, b, c, x8, 11, 0x8771F681)
    c = _hh(c, d, a, b, x11, 16, 0x6D9D6122)
    b = _hh(b, c, d, a, x14, 23, 0xFDE5380C)
    a = _hh(a, b, c, d, x1, 4, 0xA4BEEA44)
    d = _hh(d, a, b, c, x4, 11, 0x4BDECFA9)
    c = _hh(c, d, a, b, x7, 16, 0xF6BB4B60)
    b = _hh(b, c, d, a, x10, 23, 0xBEBFBC70)
    a = _hh(a, b, c, d, x13, 4, 0x289B7EC6)
    d = _hh(d, a, b, c, x0, 11, 0xEAA127FA)
    c = _hh(c, d, a, b, x3, 16, 0xD4EF3085)
    b = _hh(b, c, d, a, x6, 23, 0x04881D05)
    a = _hh(a, b, c, d, x9, 4, 0xD9D4D039)
    d = _hh(d, a, b, c, x12, 11, 0xE6DB99E5)
    c = _hh(c, d, a, b, x15, 16, 0x1FA27CF8)
    b = _hh(b, c, d, a, x2, 23, 0xC4AC5665)
    a = _ii(a, b, c, d, x0, 6, 0xF4292244)
    d = _ii(d, a, b, c, x7, 10, 0x432AFF97)
    c = _ii(c, d, a, b, x14, 15, 0xAB9423A7)
    b = _ii(b, c, d, a, x5, 21, 0xFC93A039)
    a = _ii(a, b, c, d, x12, 6, 0x655B59C3)
    d = _ii(d, a, b, c, x3, 10, 0x8F0CCC92)
    c = _ii(c, d, a, b, x10, 15, 0xFFEFF47D)
    b = _ii(b, c, d, a, x1, 21, 0x85845DD1)
    a = _ii(a, b, c, d, x8, 6, 0x6FA87E4F)
    d = _ii(d, a, b, c, x15, 10, 0xFE2CE6E0)
    c = _ii(c, d, a, b, x6, 15, 0xA3014314)
    b = _ii(b, c, d, a, x13, 21, 0x4E0811A1)
    a = _ii(a, b, c, d, x4, 6, 0xF7537E82)
    d = _ii(d, a, b, c, x11, 10, 0xBD3AF235)
    c = _ii(c, d, a, b, x2, 15, 0x2AD7D2BB)
    b = _ii(b, c, d, a, x9, 21, 0xEB86D391)
    return (a0 + a) & _MASK32, (b0 + b) & _MASK32, (c0 + c) & _MASK32, (d0 + d) & _MASK32


@jit
def md5(src, start, length, scratch):  # type: ignore[no-untyped-def]
    """MD5 of ``src[start : start + length]`` (in bounds: the caller checked) as two int64
    words ``(h0, h1)``: digest bytes 0-7 and 8-15, each loaded little-endian. ``scratch`` is a
    uint8 array of at least ``MD5_SCRATCH_BYTES`` bytes for the padded tail."""
    a = np.int64(0x67452301)
    b = np.int64(0xEFCDAB89)
    c = np.int64(0x98BADCFE)
    d = np.int64(0x10325476)
    full = length >> 6
    for blk in range(full):
        a, b, c, d = _md5_block(a, b, c, d, src, start + (blk << 6))
    rest = length - (full << 6)
    tail = start + (full << 6)
    for i in range(rest):
        scratch[i] = src[tail + i]
    scratch[rest] = 0x80
    end = 64 if rest < 56 else 128
    for i in range(rest + 1, end - 8):
        scratch[i] = 0
    bits = np.int64(length) << 3
    for i in range(8):
        scratch[end - 8 + i] = (bits >> (8 * i)) & 0xFF
    a, b, c, d = _md5_block(a, b, c, d, scratch, 0)
    if end == 128:
        a, b, c, d = _md5_block(a, b, c, d, scratch, 64)
    return a | (b << 32), c | (d << 32)


# -- the map -----------------------------------------------------------------------------------


@inline
def _digest_byte(h0, h1, i):  # type: ignore[no-untyped-def]
    w = h0 if i < 8 else h1
    return (w >> (8 * (i & 7))) & 0xFF


@inline
def _slot_of(h0, h1, attempt, slots):  # type: ignore[no-untyped-def]
    """Kafka's ``positionOf`` / 24: the slot of probe ``attempt``."""
    i = min(attempt, DIGEST_SIZE - 4)
    v = (
        (_digest_byte(h0, h1, i) << 24)
        | (_digest_byte(h0, h1, i + 1) << 16)
        | (_digest_byte(h0, h1, i + 2) << 8)
        | _digest_byte(h0, h1, i + 3)
    )
    probe = v + max(0, attempt - DIGEST_SIZE + 4)
    probe = ((probe + (1 << 31)) & _MASK32) - (1 << 31)  # a Java int
    if probe == _INT_MIN:
        probe = 0
    return abs(probe) % slots


@inline
def _bswap64(v):  # type: ignore[no-untyped-def]
    r = np.int64(0)
    for i in range(8):
        r = (r << 8) | ((v >> (8 * i)) & 0xFF)
    return r


@intrinsic
def _prefetch(typingctx, arr, index):  # type: ignore[no-untyped-def]
    """A hint to load ``arr[index]``'s cache line (LLVM's prefetch, for writing, high
    locality); it never faults."""
    sig = types.void(arr, types.int64)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        array = context.make_array(signature.args[0])(context, builder, args[0])
        i8p = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        address = builder.bitcast(builder.gep(array.data, [args[1]]), i8p)
        fn = cgutils.get_or_insert_function(
            builder.module,
            ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]),
            "llvm.prefetch.p0i8",
        )
        builder.call(fn, [address, ir.Constant(i32, 1), ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return sig, codegen


@inline
def prefetch_slot(words, state, h0, h1):  # type: ignore[no-untyped-def]
    """Start loading the first slot a put or get of ``(h0, h1)`` probes: a kernel that hashes a
    few keys ahead and prefetches their slots hides most of the memory latency of the map (the
    slots are spread over ``memory`` bytes, far beyond the caches)."""
    _prefetch(words, 3 * _slot_of(h0, h1, 0, state[M_SLOTS]))


@inline
def prefetch_beside(arr, state, h0, h1):  # type: ignore[no-untyped-def]
    """Start loading ``arr[slot]`` for the first slot a probe of ``(h0, h1)`` looks at: for
    arrays a caller keeps beside the map, one element per slot."""
    _prefetch(arr, _slot_of(h0, h1, 0, state[M_SLOTS]))


@jit
def map_put(words, state, h0, h1, offset):  # type: ignore[no-untyped-def]
    """Put the digest ``(h0, h1)`` with ``offset``; False if the map is full (no empty slot)."""
    slots = state[M_SLOTS]
    if state[M_ENTRIES] >= slots:
        return False
    state[M_LOOKUPS] += 1
    attempt = 0
    s = _slot_of(h0, h1, attempt, slots)
    state[M_PROBES] += 1
    be = _bswap64(offset)
    while words[3 * s] != 0 or words[3 * s + 1] != 0 or words[3 * s + 2] != 0:
        if words[3 * s] == h0 and words[3 * s + 1] == h1:
            words[3 * s + 2] = be
            state[M_LATEST] = offset
            return True
        attempt += 1
        s = _slot_of(h0, h1, attempt, slots)
        state[M_PROBES] += 1
    words[3 * s] = h0
    words[3 * s + 1] = h1
    words[3 * s + 2] = be
    state[M_ENTRIES] += 1
    state[M_LATEST] = offset
    return True


@jit
def map_get(words, state, h0, h1):  # type: ignore[no-untyped-def]
    """The offset stored for the digest ``(h0, h1)``, -1 when absent."""
    slots = state[M_SLOTS]
    state[M_LOOKUPS] += 1
    max_attempts = slots + DIGEST_SIZE - 4
    attempt = 0
    while attempt < max_attempts:
        s = _slot_of(h0, h1, attempt, slots)
        state[M_PROBES] += 1
        w0, w1, w2 = words[3 * s], words[3 * s + 1], words[3 * s + 2]
        if w0 == 0 and w1 == 0 and w2 == 0:
            return np.int64(-1)
        if w0 == h0 and w1 == h1:
            return _bswap64(w2)
        attempt += 1
    return np.int64(-1)


@jit
def map_slot(words, state, h0, h1):  # type: ignore[no-untyped-def]
    """The slot holding the digest ``(h0, h1)`` (its offset is word ``3 * slot + 2``, read with
    :func:`slot_offset`), -1 when absent: :func:`map_get`'s probe, for callers that keep
    per-slot data beside the map."""
    slots = state[M_SLOTS]
    state[M_LOOKUPS] += 1
    for attempt in range(slots + DIGEST_SIZE - 4):
        s = _slot_of(h0, h1, attempt, slots)
        state[M_PROBES] += 1
        w0, w1 = words[3 * s], words[3 * s + 1]
        if w0 == 0 and w1 == 0 and words[3 * s + 2] == 0:
            return np.int64(-1)
        if w0 == h0 and w1 == h1:
            return np.int64(s)
    return np.int64(-1)


@inline
def slot_offset(words, s):  # type: ignore[no-untyped-def]
    """The offset stored in slot ``s``."""
    return _bswap64(words[3 * s + 2])


@jit
def _md5_of(key, scratch):  # type: ignore[no-untyped-def]
    return md5(key, 0, key.shape[0], scratch)


class SkimpyOffsetMap:
    """The bounded offset map; see the module docstring.

    ``memory``: bytes of the buffer (at least one slot). ``load_factor``: the share of the
    slots the cleaner fills before it ends a round.
    """

    __slots__ = (
        "memory",
        "slots",
        "load_factor",
        "max_desired_entries",
        "state",
        "_buffer",
        "_words",
        "_scratch",
    )

    def __init__(self, memory: int, load_factor: float = DEFAULT_LOAD_FACTOR) -> None:
        if memory < BYTES_PER_ENTRY:
            raise ValueError(f"an offset map needs at least {BYTES_PER_ENTRY} bytes, not {memory}")
        if not 0.0 < load_factor <= 1.0:
            raise ValueError(f"load factor {load_factor} is not in (0, 1]")
        self.memory = memory
        self.slots = memory // BYTES_PER_ENTRY
        self.load_factor = load_factor
        self.max_desired_entries = max(1, int(self.slots * load_factor))
        self.state = np.zeros(STATE_FIELDS, np.int64)
        self.state[M_SLOTS] = self.slots
        self.state[M_MAX_DESIRED] = self.max_desired_entries
        self._scratch = np.zeros(MD5_SCRATCH_BYTES, np.uint8)
        self._buffer = self._words = np.empty(0, np.uint8)
        self.clear()

    # -- state -------------------------------------------------------------------------------

    @property
    def buffer(self) -> np.ndarray:
        """The slots as bytes (``slots * 24`` of them; the kernels use :attr:`words`)."""
        return self._buffer[: self.slots * BYTES_PER_ENTRY]

    @property
    def words(self) -> np.ndarray:
        """The slots as int64 words (three per slot)."""
        return self._words

    @property
    def size(self) -> int:
        """Entries in the map."""
        return int(self.state[M_ENTRIES])

    @property
    def latest_offset(self) -> int:
        """The last offset the map covers (-1 when cleared)."""
        return int(self.state[M_LATEST])

    @property
    def is_full(self) -> bool:
        """The cleaner's bound is reached: no more puts this round."""
        return self.size >= self.max_desired_entries

    @property
    def utilization(self) -> float:
        return self.size / self.slots

    @property
    def probes(self) -> int:
        return int(self.state[M_PROBES])

    @property
    def lookups(self) -> int:
        return int(self.state[M_LOOKUPS])

    def clear(self) -> None:
        """Empty the map: fresh zero pages replace the buffer (the old one is released first)."""
        self._buffer = self._words = np.empty(0, np.uint8)
        self._buffer = np.zeros(self.memory, np.uint8)
        self._words = self._buffer[: self.slots * BYTES_PER_ENTRY].view(np.int64)
        self.state[M_ENTRIES] = 0
        self.state[M_LATEST] = -1
        self.state[M_LOOKUPS] = self.state[M_PROBES] = 0

    def update_latest_offset(self, offset: int) -> None:
        self.state[M_LATEST] = offset

    # -- single keys (tests, the legacy slow path) -------------------------------------------

    def digest(self, key: bytes | memoryview) -> tuple[int, int]:
        arr = np.frombuffer(key, np.uint8) if len(key) else np.empty(0, np.uint8)
        h0, h1 = _md5_of(arr, self._scratch)
        return int(h0), int(h1)

    def put(self, key: bytes | memoryview, offset: int) -> None:
        """Kafka's ``put``: raises ``ValueError`` when no slot is left."""
        h0, h1 = self.digest(key)
        if not map_put(self._words, self.state, h0, h1, offset):
            raise ValueError(f"the offset map is full ({self.slots} slots)")

    def get(self, key: bytes | memoryview) -> int:
        """The latest offset of ``key``, -1 when absent."""
        h0, h1 = self.digest(key)
        return int(map_get(self._words, self.state, h0, h1))

    def __repr__(self) -> str:
        return (
            f"SkimpyOffsetMap({self.memory} bytes, {self.slots} slots, {self.size} entries, "
            f"latest offset {self.latest_offset})"
        )


def digest_bytes(h0: int, h1: int) -> bytes:
    """The 16 digest bytes of two words as :func:`md5` returns them."""
    return (h0 & (2**64 - 1)).to_bytes(8, "little") + (h1 & (2**64 - 1)).to_bytes(8, "little")
