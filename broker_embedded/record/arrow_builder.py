"""Arrow record batches over the columnar decoder's buffers (:class:`ArrowBuilder`): the
kernel's output (:class:`Columns`, layout in ``decode_kernel``) cut into record batches of
Spark's Kafka source schema (columnar_decoder.py), with no copy but the validity bitmaps
(packed per output batch, only where there are nulls), a record without headers as null, and
invalid UTF-8 in header keys replaced as Java decodes it.

Thread safety: a builder belongs to one decode call; the cached topic and partition columns are
immutable Arrow arrays, shared.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from broker_embedded.record import decode_kernel as k
from broker_embedded.record.kafka_schema import arrow_headers_type, arrow_schema

HEADERS_TYPE = arrow_headers_type()
HEADER_FIELDS = tuple(HEADERS_TYPE.value_type)


@dataclass(frozen=True)
class Columns:
    """The kernel's output (layout: ``decode_kernel``), trimmed to what was written."""

    chunks: np.ndarray
    counts: np.ndarray
    row_i64: np.ndarray
    ts_types: np.ndarray
    row_offs: np.ndarray
    valid: np.ndarray
    data: tuple[np.ndarray, ...]


class ArrowBuilder:
    """Arrow record batches over the kernel's buffers (no copy but validity bitmaps)."""

    def __init__(self, topic: str, partition: int, include_headers: bool) -> None:
        self._topic = topic.encode("utf-8")
        self._partition = partition
        self._schema = arrow_schema(bool(include_headers))
        self._include_headers = include_headers

    def build(self, columns: Columns) -> list[pa.RecordBatch]:
        counts = columns.counts
        totals = [counts[n] for n in (k.N_ROWS, k.N_KEY, k.N_VALUE, k.N_HEADERS, k.N_HKEY)]
        starts = columns.chunks.tolist()
        # where each chunk ends: where the next one starts, the last one at the totals
        ends = [row[: k.C_HVALUE + 1] for row in starts[1:]]
        ends.append([*totals, counts[k.N_HVALUE]])
        return [self._batch(columns, c, starts[c], ends[c]) for c in range(len(starts))]

    def _batch(self, cols: Columns, c: int, start: list[int], end: list[int]) -> pa.RecordBatch:
        r0, r1 = start[k.C_ROW], end[k.C_ROW]
        n = r1 - r0
        key_data, value_data = cols.data[0], cols.data[1]
        topic, partition = self._constant_columns(n)
        keys = _binary(
            pa.binary(),
            _chunk_offsets(cols.row_offs[0], c, r0, r1),
            key_data[start[k.C_KEY] : end[k.C_KEY]],
            cols.valid[0, r0:r1],
            start[k.C_KEY_NULLS],
        )
        values = _binary(
            pa.binary(),
            _chunk_offsets(cols.row_offs[1], c, r0, r1),
            value_data[start[k.C_VALUE] : end[k.C_VALUE]],
            cols.valid[1, r0:r1],
            start[k.C_VALUE_NULLS],
        )
        arrays = [
            keys,
            values,
            topic,
            partition,
            _primitive(pa.int64(), cols.row_i64[0, r0:r1]),
            _primitive(self._schema.field("timestamp").type, cols.row_i64[1, r0:r1]),
            _primitive(pa.int32(), cols.ts_types[r0:r1]),
        ]
        if self._include_headers:
            arrays.append(_headers(cols, c, start, end))
        return pa.RecordBatch.from_arrays(arrays, schema=self._schema)

    def _constant_columns(self, n: int) -> tuple[pa.Array, pa.Array]:
        return _constant_columns(self._topic, self._partition, n)


@functools.lru_cache(maxsize=64)
def _constant_columns(topic: bytes, partition: int, n: int) -> tuple[pa.Array, pa.Array]:
    """The topic and partition columns of ``n`` rows (immutable: shared between calls)."""
    offsets = np.arange(n + 1, dtype=np.int32) * np.int32(len(topic))
    buffers = [None, pa.py_buffer(offsets), pa.py_buffer(topic * n)]
    partitions = pa.py_buffer(np.full(n, partition, np.int32))
    return (
        pa.Array.from_buffers(pa.string(), n, buffers),
        pa.Array.from_buffers(pa.int32(), n, [None, partitions]),
    )


def _chunk_offsets(offsets: np.ndarray, c: int, first: int, last: int) -> np.ndarray:
    """Chunk ``c``'s Arrow offsets for items [first, last): one extra slot per chunk before it."""
    return offsets[first + c : last + c + 1]


def _primitive(type_: pa.DataType, values: np.ndarray) -> pa.Array:
    return pa.Array.from_buffers(type_, len(values), [None, pa.py_buffer(values)])


def _bitmap(valid: np.ndarray, nulls: int) -> pa.Buffer | None:
    if nulls == 0:
        return None
    return pa.py_buffer(np.packbits(valid, bitorder="little"))


def _binary(
    type_: pa.DataType, offsets: np.ndarray, data: np.ndarray, valid: np.ndarray | None, nulls: int
) -> pa.Array:
    bitmap = None if valid is None else _bitmap(valid, nulls)
    buffers = [bitmap, pa.py_buffer(offsets), pa.py_buffer(data)]
    return pa.Array.from_buffers(type_, len(offsets) - 1, buffers, null_count=nulls)


def _headers(cols: Columns, c: int, start: list[int], end: list[int]) -> pa.Array:
    r0, r1 = start[k.C_ROW], end[k.C_ROW]
    h0, h1 = start[k.C_HEADER], end[k.C_HEADER]
    hkey_offs, hvalue_offs, hvalue_valid, hkey_data, hvalue_data = cols.data[2:]
    keys = _binary(
        pa.string(),
        _chunk_offsets(hkey_offs, c, h0, h1),
        hkey_data[start[k.C_HKEY] : end[k.C_HKEY]],
        None,
        0,
    )
    values = _binary(
        pa.binary(),
        _chunk_offsets(hvalue_offs, c, h0, h1),
        hvalue_data[start[k.C_HVALUE] : end[k.C_HVALUE]],
        hvalue_valid[h0:h1],
        start[k.C_HVALUE_NULLS],
    )
    struct = pa.StructArray.from_arrays([_valid_utf8(keys), values], fields=list(HEADER_FIELDS))
    offsets = _chunk_offsets(cols.row_offs[2], c, r0, r1)
    # a record without headers is null, not [] (Spark's Kafka source): valid where any header
    has_headers = offsets[1:] != offsets[:-1]
    nulls = (r1 - r0) - int(np.count_nonzero(has_headers))
    buffers = [_bitmap(has_headers, nulls), pa.py_buffer(offsets)]
    return pa.Array.from_buffers(
        HEADERS_TYPE, r1 - r0, buffers, null_count=nulls, children=[struct]
    )


def _valid_utf8(keys: pa.Array) -> pa.Array:
    """Header keys as Java reads them: invalid UTF-8 becomes U+FFFD (the slow path, rare)."""
    try:
        keys.validate(full=True)
        return keys
    except pa.ArrowInvalid:
        raw = keys.view(pa.binary()).to_pylist()
        return pa.array([b.decode("utf-8", "replace") for b in raw], pa.string())
