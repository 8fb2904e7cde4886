"""The columnar encoder: Arrow columns straight into record batches v2 (the writer's hot path).

Input: one row per record: keys and values as Arrow binary arrays (``binary``, ``large_binary``,
``string`` or ``large_string``, ``Array`` or ``ChunkedArray``; a null key is written with length
-1, a null value is a tombstone; ``keys=None`` means every key is null), timestamps as int64
milliseconds (CreateTime; -1 = none, as Kafka allows), and optionally headers as an Arrow
``list<struct<key: string, value: binary>>`` (``large_list`` and the other binary types too). A
null list, or a headers column of Arrow's null type, means no headers; a null header value has
length -1; a null header key or null header is an error.

Output (:class:`EncodedBatches`): every batch back to back in ONE buffer, as a segment file or a
Produce request's records hold them, with the batch boundaries (``positions``) and the rows of
each batch (``first_rows``): the writer stages or appends the buffer with one write and can
still address single batches (``result[i]``). Each batch is byte-identical to what
``MemoryRecordsBuilder`` builds from the same records with the same options:

- batch ``i`` holds rows ``[first_rows[i], first_rows[i + 1])``; its baseOffset is
  ``base_offset + first_rows[i]`` (offsets continue across batches, one per row), its
  lastOffsetDelta ``count - 1``, its baseSequence ``base_sequence + first_rows[i]`` wrapped
  past 2^31 - 1 to 0 as Kafka's ``incrementSequence`` does (-1 stays -1);
- baseTimestamp is the batch's first timestamp, maxTimestamp the largest one (-1 if none is
  larger, Kafka's rule), the timestamp type CreateTime, partitionLeaderEpoch -1;
- attributes: the codec, and bit 4 when transactional; the records section is compressed per
  batch with ``compression.compress`` (Kafka's Java output); the CRC-32C covers [21, end).

The split (``encode_kernel.plan_batches``): a batch takes rows while it has fewer than
``max_batch_records`` and its UNCOMPRESSED records section (the 61-byte header not counted)
stays within ``max_batch_bytes``; a record larger than that goes alone in its batch. Note that
a broker checks the whole batch against ``max.message.bytes`` (1048588 by default, counting the
header and its 12-byte log overhead): an uncompressed batch of 1 MiB of records passes it by 61
bytes, so a writer for such topics wants ``max_batch_bytes <= max.message.bytes - 61``.

Hot path: no Python object per record. The kernel plans the batches from the Arrow buffers
(one pass over the offsets), then writes the records straight into the output buffer between
the gaps left for the headers (uncompressed), or into a scratch buffer that is compressed batch
by batch (one ``compress`` call per batch). Headers and CRCs are written per batch in Python.
Memory: the output, plus 8 bytes per row (record sizes) and, when compressing, the
uncompressed records; buffers come from Arrow's memory pool.

The first call in a process compiles the kernels or loads them from numba's cache
(:func:`warm_up` does it on purpose). Thread safety: no shared state; the kernels release the
GIL. The input arrays must not change during a call. :class:`EncodedBatches` is immutable.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import crc32c
import numpy as np
import pyarrow as pa

from broker_embedded.record import encode_kernel as k
from broker_embedded.record.batch_layout import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    LOG_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
)
from broker_embedded.record.compression import CompressionType, compress
from broker_embedded.record.memory_records_builder import (
    MAGIC_V2,
    NO_PRODUCER_EPOCH,
    NO_SEQUENCE,
    MemoryRecordsBuilder,
)
from broker_embedded.record.record_batch import (
    HEADER_STRUCT,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_ID,
    NO_TIMESTAMP,
    TRANSACTIONAL_MASK,
)
from broker_embedded.record.varint import INT32_MAX, INT64_MAX

DEFAULT_MAX_BATCH_BYTES = 1 << 20
_SEQUENCE_MODULUS = 1 << 31
_EMPTY_U8 = np.empty(0, np.uint8)
_EMPTY_U8.flags.writeable = False


@dataclass(frozen=True)
class EncodedBatches:
    """What :func:`encode_batches` returns: batches back to back in one buffer.

    ``data``: every batch (read-only; write it to a file or socket as it is). ``positions``:
    int64[len + 1], batch ``i`` is ``data[positions[i] : positions[i + 1]]``. ``first_rows``:
    int64[len + 1], batch ``i`` holds input rows ``[first_rows[i], first_rows[i + 1])`` (the last
    entry is the row count). ``max_timestamps``: int64[len], each batch's maxTimestamp.
    ``base_offset``: the first batch's base offset; ``next_offset``: the offset after the last
    record; ``next_sequence``: the sequence after the last record (-1 without sequences). The
    arrays are read-only. As a sequence, it holds each batch's bytes as a memoryview.
    """

    data: memoryview
    positions: np.ndarray
    first_rows: np.ndarray
    max_timestamps: np.ndarray
    base_offset: int
    next_offset: int
    next_sequence: int

    @property
    def num_rows(self) -> int:
        return int(self.first_rows[-1])

    def __len__(self) -> int:
        return len(self.positions) - 1

    def __getitem__(self, i: int) -> memoryview:
        if not -len(self) <= i < len(self):
            raise IndexError(f"batch {i} of {len(self)}")
        i %= len(self)
        return self.data[int(self.positions[i]) : int(self.positions[i + 1])]

    def __iter__(self) -> Iterator[memoryview]:
        return (self[i] for i in range(len(self)))


def encode_batches(
    keys: pa.Array | pa.ChunkedArray | None,
    values: pa.Array | pa.ChunkedArray,
    timestamps_ms: Any,
    headers: pa.Array | pa.ChunkedArray | None = None,
    *,
    compression: CompressionType | int | str = CompressionType.NONE,
    compression_level: int | None = None,
    max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
    max_batch_records: int | None = None,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    base_offset: int = 0,
) -> EncodedBatches:
    """Encode rows as record batches v2 (module docstring: input, split, output).

    ``timestamps_ms``: int64 milliseconds, one per row (>= 0, or -1 for none).
    ``compression``/``compression_level``: as ``MemoryRecordsBuilder`` (or a Kafka
    ``compression.type`` name such as ``"lz4"``). ``max_batch_bytes``:
    uncompressed records bytes per batch (at least one record per batch).
    ``max_batch_records``: records per batch (None: no limit but int32). The producer fields
    follow ``MemoryRecordsBuilder``'s rules (an idempotent batch needs an epoch and a sequence,
    a transactional one a producer id). No rows give no batches.
    """
    codec = (
        CompressionType.parse(compression)
        if isinstance(compression, str)
        else CompressionType(compression)
    )
    # the builder checks base offset, codec and producer state with Kafka's rules
    MemoryRecordsBuilder(
        base_offset,
        codec,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        is_transactional=is_transactional,
    )
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if not isinstance(values, pa.Array):
        raise TypeError(f"values must be a pyarrow array, not {type(values).__name__}")
    n = len(values)
    ts = _timestamps(timestamps_ms, n)
    max_records = INT32_MAX if max_batch_records is None else int(max_batch_records)
    if not 1 <= max_records <= INT32_MAX:
        raise ValueError(f"max_batch_records must be in [1, 2^31 - 1], not {max_batch_records}")
    if not 1 <= max_batch_bytes <= INT32_MAX - RECORD_BATCH_OVERHEAD:
        raise ValueError(f"max_batch_bytes must be in [1, 2^31 - 62], not {max_batch_bytes}")
    if base_offset + n - 1 > INT64_MAX:
        raise ValueError(f"{n} records from base offset {base_offset} pass offset 2^63 - 1")
    columns = (
        _null_column(n) if keys is None else _binary_column(keys, n, "keys"),
        _binary_column(values, n, "values"),
        _headers_column(headers, n),
    )
    if n == 0:
        return _result(_EMPTY_U8, [0], [0], [], base_offset, base_sequence, 0)

    row_fixed = np.empty(n, np.int64)
    table, nb = _plan(ts, columns, max_batch_bytes, max_records, row_fixed)
    first_rows = table[:nb, k.B_FIRST_ROW]
    records_bytes = table[:nb, k.B_RECORDS_BYTES]
    counts = np.diff(np.append(first_rows, n))
    attributes = int(codec) | (TRANSACTIONAL_MASK if is_transactional else 0)

    if codec == CompressionType.NONE:
        sizes = RECORD_BATCH_OVERHEAD + records_bytes
        positions = np.concatenate(([0], np.cumsum(sizes)))
        out = _allocate(int(positions[-1]))
        _write(ts, columns, row_fixed, table, nb, positions[:-1] + RECORD_BATCH_OVERHEAD, out)
    else:
        starts = np.concatenate(([0], np.cumsum(records_bytes)))
        scratch = _allocate(int(starts[-1]))
        _write(ts, columns, row_fixed, table, nb, starts[:-1], scratch)
        view = memoryview(scratch)
        bounds = starts.tolist()
        sections = [
            compress(codec, view[bounds[b] : bounds[b + 1]], compression_level) for b in range(nb)
        ]
        del view, scratch
        sizes = RECORD_BATCH_OVERHEAD + np.array([len(s) for s in sections], np.int64)
        positions = np.concatenate(([0], np.cumsum(sizes)))
        out = _allocate(int(positions[-1]))
        target = memoryview(out)
        for pos, section in zip(positions[:-1].tolist(), sections, strict=True):
            target[pos + RECORD_BATCH_OVERHEAD : pos + RECORD_BATCH_OVERHEAD + len(section)] = (
                section
            )
        del target

    if int(sizes.max()) - LOG_OVERHEAD > INT32_MAX:
        raise ValueError(f"a batch of {int(sizes.max())} bytes does not fit batchLength (int32)")
    max_ts = table[:nb, k.B_MAX_TS]
    _write_headers(
        memoryview(out),
        positions.tolist(),
        first_rows.tolist(),
        counts.tolist(),
        ts[first_rows].tolist(),
        max_ts.tolist(),
        (base_offset, attributes, producer_id, producer_epoch, base_sequence),
    )
    return _result(out, positions, np.append(first_rows, n), max_ts, base_offset, base_sequence, n)


def warm_up() -> float:
    """Compile the kernels (or load them from numba's cache); return the seconds it took."""
    began = time.perf_counter()
    headers = pa.array(
        [[("k", b"v")]], pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    )
    encode_batches(pa.array([b"k"]), pa.array([b"v"]), np.zeros(1, np.int64), headers)
    return time.perf_counter() - began


# -- input ---------------------------------------------------------------------------------------


def _readonly(arr: np.ndarray) -> np.ndarray:
    """A read-only contiguous view: the kernels are compiled for read-only input only."""
    arr = np.ascontiguousarray(arr)
    if arr.flags.writeable:
        arr = arr.view()
        arr.flags.writeable = False
    return arr


def _timestamps(timestamps_ms: Any, n: int) -> np.ndarray:
    if isinstance(timestamps_ms, (pa.Array, pa.ChunkedArray)):
        if timestamps_ms.null_count:
            raise ValueError("timestamps must not be null (use -1 for no timestamp)")
        timestamps_ms = timestamps_ms.to_numpy()
    ts = np.asarray(timestamps_ms)
    if ts.ndim != 1 or len(ts) != n:
        raise ValueError(f"timestamps must be 1-D with one per row ({n}), not shape {ts.shape}")
    if ts.dtype != np.int64:
        if ts.size and not np.issubdtype(ts.dtype, np.integer):
            raise TypeError(f"timestamps must be int64 milliseconds, not {ts.dtype}")
        ts = ts.astype(np.int64)
    if n:
        bad = np.flatnonzero(ts < NO_TIMESTAMP)
        if len(bad):
            raise ValueError(f"invalid negative timestamp {int(ts[bad[0]])} at row {bad[0]}")
        if ts.max() == INT64_MAX and ts.min() == NO_TIMESTAMP:
            # a timestamp delta from -1 to 2^63 - 1 does not fit a varlong (int64)
            raise ValueError("timestamps -1 and 2^63 - 1 together have no int64 delta")
    return _readonly(ts)


def _offset_width(type_: pa.DataType) -> int | None:
    if pa.types.is_binary(type_) or pa.types.is_string(type_):
        return 4
    if pa.types.is_large_binary(type_) or pa.types.is_large_string(type_):
        return 8
    return None


def _offsets(buffer: pa.Buffer | None, width: int, start: int, count: int) -> np.ndarray:
    dtype = np.int32 if width == 4 else np.int64
    if count == 1 and (buffer is None or buffer.size < width * (start + 1)):
        return np.zeros(1, np.int64)  # an empty array may come without offsets
    return np.frombuffer(buffer, dtype, count, start * width).astype(np.int64, copy=False)


def _validity(arr: pa.Array) -> tuple[np.ndarray, tuple[int, int]]:
    """A validity bitmap and (its bit offset, whether there is one)."""
    if arr.null_count == 0:
        return _EMPTY_U8, (0, 0)
    return _readonly(np.frombuffer(arr.buffers()[0], np.uint8)), (int(arr.offset), 1)


def _null_column(n: int) -> tuple[Any, ...]:
    bitmap = np.zeros((n + 7) // 8, np.uint8)
    return (_readonly(np.zeros(n + 1, np.int64)), _EMPTY_U8, _readonly(bitmap), (0, 1))


def _binary_column(arr: Any, n: int, what: str) -> tuple[Any, ...]:
    """(offsets int64[n + 1], data, validity, (bit offset, has validity)) of a binary array."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if not isinstance(arr, pa.Array):
        raise TypeError(f"{what} must be a pyarrow array, not {type(arr).__name__}")
    if len(arr) != n:
        raise ValueError(f"{what} has {len(arr)} rows, the values {n}")
    if pa.types.is_null(arr.type):
        return _null_column(n)
    width = _offset_width(arr.type)
    if width is None:
        raise TypeError(f"{what} must be binary or string (large too), not {arr.type}")
    buffers = arr.buffers()
    offsets = _offsets(buffers[1], width, arr.offset, n + 1)
    data = _EMPTY_U8 if buffers[2] is None else np.frombuffer(buffers[2], np.uint8)
    if offsets[0] < 0 or offsets[-1] > len(data) or (np.diff(offsets) < 0).any():
        raise ValueError(f"{what} has offsets outside its data or decreasing: not valid Arrow")
    valid, flags = _validity(arr)
    return (_readonly(offsets), _readonly(data), valid, flags)


def _headers_column(headers: Any, n: int) -> tuple[Any, ...]:
    """(list offsets, unused, list validity, flags, header keys, header values): see
    ``encode_kernel``; no headers at all when ``headers`` is None."""
    if isinstance(headers, (pa.Array, pa.ChunkedArray)) and pa.types.is_null(headers.type):
        if len(headers) != n:
            raise ValueError(f"headers has {len(headers)} rows, the values {n}")
        headers = None
    if headers is None:
        no_headers = _null_column(0)
        return (
            _readonly(np.zeros(1, np.int64)),
            _EMPTY_U8,
            _EMPTY_U8,
            (0, 0, 0),
            no_headers,
            no_headers,
        )
    if isinstance(headers, pa.ChunkedArray):
        headers = headers.combine_chunks()
    if not isinstance(headers, pa.Array):
        raise TypeError(f"headers must be a pyarrow array, not {type(headers).__name__}")
    if len(headers) != n:
        raise ValueError(f"headers has {len(headers)} rows, the values {n}")
    type_ = headers.type
    if pa.types.is_list(type_):
        width = 4
    elif pa.types.is_large_list(type_):
        width = 8
    else:
        raise TypeError(f"headers must be a list<struct<key, value>>, not {type_}")
    struct_type = type_.value_type
    names = (
        [struct_type.field(i).name for i in range(struct_type.num_fields)]
        if (pa.types.is_struct(struct_type))
        else []
    )
    if "key" not in names or "value" not in names:
        raise TypeError(f"headers must be a list<struct<key, value>>, not {type_}")
    offsets = _offsets(headers.buffers()[1], width, headers.offset, n + 1)
    struct = headers.values
    m = len(struct)
    if offsets[0] < 0 or offsets[-1] > m or (np.diff(offsets) < 0).any():
        raise ValueError("headers has list offsets outside its entries or decreasing")
    # flatten() applies the struct's offset, and its nulls to the children (a null key then)
    fields = struct.flatten()
    hkeys = _binary_column(fields[names.index("key")], m, "header keys")
    hvalues = _binary_column(fields[names.index("value")], m, "header values")
    valid, (bit0, has_valid) = _validity(headers)
    return (_readonly(offsets), _EMPTY_U8, valid, (bit0, has_valid, 1), hkeys, hvalues)


# -- output --------------------------------------------------------------------------------------


def _allocate(size: int) -> np.ndarray:
    """A writable uninitialised buffer from Arrow's memory pool (which reuses freed pages)."""
    return np.frombuffer(pa.allocate_buffer(size), np.uint8, size)


def _plan(
    ts: np.ndarray,
    columns: tuple[Any, ...],
    max_batch_bytes: int,
    max_records: int,
    row_fixed: np.ndarray,
) -> tuple[np.ndarray, int]:
    """The batch table (``encode_kernel.B_*``) and the batch count."""
    n = len(ts)
    # Consecutive batches hold more than max_batch_bytes together (but for a few bytes of
    # varints), so twice the data over the limit is about the most batches there can be.
    data = sum(len(c[1]) for c in columns[:2]) + len(columns[2][4][1]) + len(columns[2][5][1])
    estimate = n // max_records + 2 * (data + 8 * n) // max_batch_bytes + 16
    capacity = min(n, estimate)
    while True:
        table = np.empty((capacity, k.BATCH_FIELDS), np.int64)
        limits = (int(max_batch_bytes), int(max_records))
        err, row, nb = k.plan_batches(ts, *columns, limits, row_fixed, table)
        if err != k.E_TABLE_FULL:
            break
        capacity = min(n, 2 * capacity)  # n batches always suffice: a record each
    _check(int(err), int(row))
    return table, int(nb)


def _check(err: int, row: int) -> None:
    if err == k.E_NULL_HEADER_KEY:
        raise ValueError(f"null header key (or null header) in row {row}")
    if err == k.E_RECORD_TOO_LARGE:
        raise ValueError(f"record of row {row} is larger than 2^31 - 1 bytes")
    if err != k.E_OK:
        raise AssertionError(f"encode kernel error {err} at {row}: a bug")


def _write(
    ts: np.ndarray,
    columns: tuple[Any, ...],
    row_fixed: np.ndarray,
    table: np.ndarray,
    nb: int,
    starts: np.ndarray,
    out: np.ndarray,
) -> None:
    err, b = k.write_records(ts, *columns, row_fixed, table, nb, starts.astype(np.int64), out)
    if err != k.E_OK:
        raise AssertionError(f"encode kernel wrote batch {b} off its planned size: a bug")


def _write_headers(
    out: memoryview,
    positions: list[int],
    first_rows: list[int],
    counts: list[int],
    base_timestamps: list[int],
    max_timestamps: list[int],
    fixed: tuple[int, int, int, int, int],
) -> None:
    """Each batch's 61-byte header, then its CRC-32C over [21, end)."""
    base_offset, attributes, producer_id, producer_epoch, base_sequence = fixed
    for b, first in enumerate(first_rows):
        pos, end = positions[b], positions[b + 1]
        sequence = _sequence(base_sequence, first)
        HEADER_STRUCT.pack_into(
            out,
            pos,
            base_offset + first,
            end - pos - LOG_OVERHEAD,
            NO_PARTITION_LEADER_EPOCH,
            MAGIC_V2,
            0,
            attributes,
            counts[b] - 1,
            base_timestamps[b],
            max_timestamps[b],
            producer_id,
            producer_epoch,
            sequence,
            counts[b],
        )
        crc = crc32c.crc32c(out[pos + ATTRIBUTES_OFFSET : end])
        out[pos + CRC_OFFSET : pos + CRC_OFFSET + 4] = crc.to_bytes(4, "big")


def _sequence(base_sequence: int, increment: int) -> int:
    """Kafka's ``DefaultRecordBatch.incrementSequence``: past 2^31 - 1 it wraps to 0."""
    if base_sequence == NO_SEQUENCE:
        return NO_SEQUENCE
    return (base_sequence + increment) % _SEQUENCE_MODULUS


def _result(
    out: np.ndarray,
    positions: Any,
    first_rows: Any,
    max_timestamps: Any,
    base_offset: int,
    base_sequence: int,
    n: int,
) -> EncodedBatches:
    arrays = [np.array(a, np.int64) for a in (positions, first_rows, max_timestamps)]
    for a in arrays:
        a.flags.writeable = False
    return EncodedBatches(
        data=memoryview(out).toreadonly(),
        positions=arrays[0],
        first_rows=arrays[1],
        max_timestamps=arrays[2],
        base_offset=base_offset,
        next_offset=base_offset + n,
        next_sequence=_sequence(base_sequence, n),
    )
