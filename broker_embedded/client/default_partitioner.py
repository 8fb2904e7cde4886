"""Kafka's default partitioner for keyed records: murmur2 of the key bytes.

What Kafka's Java producer does for a record with a key and no explicit partition
(``BuiltInPartitioner.partitionForKey``): ``toPositive(murmur2(key)) % numPartitions``, where

- ``murmur2`` is Kafka's ``Utils.murmur2``: MurmurHash2 (32-bit) with seed ``0x9747b28c``, mixing
  constant ``m = 0x5bd1e995`` and shift ``r = 24``, reading the key as little-endian 4-byte words
  then 1-3 tail bytes, all in Java int (wrapping 32-bit) arithmetic; it returns a SIGNED int32
  (``murmur2(b"21") == -973932308``);
- ``toPositive(n)`` is ``n & 0x7fffffff`` (not ``abs``: it keeps ``Integer.MIN_VALUE`` in range).

Records without a key are not hashed: Kafka's producer places them itself (sticky
partitioning), so :func:`partitions_for_keys` gives -1 for a null key and the caller decides.

:func:`murmur2` and :func:`partition_for_key` take one key (pure Python, for tools and tests);
:func:`partitions_for_keys` hashes a whole Arrow binary column in a compiled (numba) loop with no
Python object per key. Pure functions: thread-safe; the kernel releases the GIL.
"""

from __future__ import annotations

import time

import numpy as np
import pyarrow as pa

from broker_embedded.record.kernel_primitives import inline, jit

SEED = 0x9747B28C
_M = 0x5BD1E995
_R = 24
_MASK32 = 0xFFFFFFFF
NO_PARTITION = -1


def murmur2(key: bytes | bytearray | memoryview) -> int:
    """Kafka's ``Utils.murmur2`` of ``key``, as Java's signed int32."""
    data = bytes(key)
    length = len(data)
    h = (SEED ^ length) & _MASK32
    words = length // 4
    for i in range(0, 4 * words, 4):
        k = (int.from_bytes(data[i : i + 4], "little") * _M) & _MASK32
        k ^= k >> _R
        k = (k * _M) & _MASK32
        h = ((h * _M) & _MASK32) ^ k
    tail = data[4 * words :]
    if tail:
        h ^= int.from_bytes(tail, "little")  # the Java switch's fall-through, byte by byte
        h = (h * _M) & _MASK32
    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(n: int) -> int:
    """Kafka's ``Utils.toPositive``: ``n & 0x7fffffff``."""
    return n & 0x7FFFFFFF


def partition_for_key(key: bytes | bytearray | memoryview, num_partitions: int) -> int:
    """The partition Kafka's default partitioner picks for a record with this key."""
    _check_partitions(num_partitions)
    if key is None:
        raise ValueError("a null key has no partition: Kafka's producer places keyless records")
    return to_positive(murmur2(key)) % num_partitions


def partitions_for_keys(keys: pa.Array | pa.ChunkedArray, num_partitions: int) -> np.ndarray:
    """:func:`partition_for_key` of every key of an Arrow binary (or string, large too) column,
    as int32; -1 for a null key."""
    _check_partitions(num_partitions)
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    if not isinstance(keys, pa.Array):
        raise TypeError(f"keys must be a pyarrow array, not {type(keys).__name__}")
    n = len(keys)
    out = np.empty(n, np.int32)
    if pa.types.is_null(keys.type):
        out.fill(NO_PARTITION)
        return out
    if pa.types.is_binary(keys.type) or pa.types.is_string(keys.type):
        width, dtype = 4, np.int32
    elif pa.types.is_large_binary(keys.type) or pa.types.is_large_string(keys.type):
        width, dtype = 8, np.int64
    else:
        raise TypeError(f"keys must be binary or string (large too), not {keys.type}")
    if n == 0:
        return out
    validity, offsets_buffer, data_buffer = keys.buffers()[:3]
    offsets = np.frombuffer(offsets_buffer, dtype, n + 1, keys.offset * width).astype(np.int64)
    data = np.empty(0, np.uint8) if data_buffer is None else np.frombuffer(data_buffer, np.uint8)
    if offsets[0] < 0 or offsets[-1] > len(data) or (np.diff(offsets) < 0).any():
        raise ValueError("keys has offsets outside its data or decreasing: not valid Arrow")
    if keys.null_count:
        valid = np.frombuffer(validity, np.uint8)
        flags = (int(keys.offset), 1)
    else:
        valid = np.empty(0, np.uint8)
        flags = (0, 0)
    for arr in (offsets, data, valid):
        arr.flags.writeable = False  # one compiled signature: read-only input
    _partitions(offsets, data, valid, flags, num_partitions, out)
    return out


def _check_partitions(num_partitions: int) -> None:
    if not 1 <= num_partitions <= 0x7FFFFFFF:
        raise ValueError(f"the partition count must be in [1, 2^31 - 1], not {num_partitions}")


# -- the kernel ----------------------------------------------------------------------------------


@inline
def _byte(data, pos):  # type: ignore[no-untyped-def]
    return np.int64(data[np.uint64(pos)])


@inline
def _murmur2(data, start, end):  # type: ignore[no-untyped-def]
    """murmur2 of ``data[start:end]`` as an unsigned 32-bit value in an int64 (products of a
    32-bit value and ``_M`` < 2^31 fit in int64 before masking)."""
    length = end - start
    h = (SEED ^ length) & _MASK32
    stop = start + (length & ~3)
    for p in range(start, stop, 4):
        k = _byte(data, p) | (_byte(data, p + 1) << 8)
        k |= (_byte(data, p + 2) << 16) | (_byte(data, p + 3) << 24)
        k = (k * _M) & _MASK32
        k ^= k >> _R
        k = (k * _M) & _MASK32
        h = ((h * _M) & _MASK32) ^ k
    rest = length & 3
    if rest > 0:
        if rest == 3:
            h ^= _byte(data, stop + 2) << 16
        if rest >= 2:
            h ^= _byte(data, stop + 1) << 8
        h ^= _byte(data, stop)
        h = (h * _M) & _MASK32
    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15
    return h


@jit
def _partitions(offsets, data, valid, flags, num_partitions, out):  # type: ignore[no-untyped-def]
    """``out[i]``: the partition of key ``i`` (``data[offsets[i] : offsets[i + 1]]``), -1 when
    the validity bitmap (bit ``flags[0] + i``, when ``flags[1]``) says null."""
    bit0, has_valid = flags
    for i in range(out.shape[0]):
        part = np.int64(NO_PARTITION)
        is_null = False
        if has_valid != 0:
            bit = bit0 + i
            is_null = (valid[np.uint64(bit >> 3)] >> (bit & 7)) & 1 == 0
        if not is_null:
            h = _murmur2(data, offsets[np.uint64(i)], offsets[np.uint64(i + 1)])
            part = (h & 0x7FFFFFFF) % num_partitions
        out[np.uint64(i)] = part


def warm_up() -> float:
    """Compile the kernel (or load it from numba's cache); return the seconds it took."""
    began = time.perf_counter()
    partitions_for_keys(pa.array([b"k", None]), 1)
    return time.perf_counter() - began
