"""The compiled (numba) kernels of the columnar encoder: no Python object per record.

Two kernels, both ``@numba.njit(cache=True, nogil=True)`` (``kernel_primitives.jit``), run one after
the other by ``columnar_encoder``:

:func:`plan_batches` walks the rows once: it computes each record's size without its
timestampDelta and offsetDelta (``row_fixed``: attributes byte, key length varint + key, value
length varint + value, header count varint and the headers) and cuts the rows into batches. A
batch takes rows while it holds fewer than ``max_batch_records`` records and its records section
(every record with its length varint, uncompressed) stays within ``max_batch_bytes``; a row that
would break either limit opens the next batch, except that a batch always takes its first row
(a record larger than the limit goes alone). A record's size depends on its batch (its
timestampDelta is relative to the batch's first timestamp, its offsetDelta to the batch's first
row), so the cut is decided record by record with the size the record has in the batch it
would join. One row of ``BATCH_FIELDS`` per batch: first row, records bytes, max timestamp
(Kafka's: -1 unless a timestamp is larger).

:func:`write_records` writes the records of every batch into one ``uint8`` buffer, batch ``b``'s
records starting at ``starts[b]`` (the caller leaves room for headers, or writes a scratch buffer
for compression). Record layout (``DefaultRecord``; every varint zigzag, 7 bits a byte, least
significant group first): length varint (the body size), attributes int8 0, timestampDelta
varlong, offsetDelta varint, keyLength varint (-1 null) + key, valueLength varint (-1 null) +
value, headerCount varint, per header keyLength varint + UTF-8 key, valueLength varint (-1 null)
+ value.

Columns come as tuples of arrays (``columnar_encoder`` makes them from Arrow buffers, numba
compiles one signature for all of them): a binary column is ``(offsets int64[n + 1], data
uint8, validity bitmap uint8, (bit offset, has validity))``: row ``i`` is ``data[offsets[i] :
offsets[i + 1]]``, null when it has a validity bitmap whose bit ``bit offset + i`` is 0 (Arrow's
LSB order). The headers are ``(list offsets int64[n + 1], unused uint8, list validity, (bit
offset, has validity, any headers), header keys column, header values column)``: row ``i``'s
headers are entries ``[offsets[i], offsets[i + 1])`` of the two header columns, none for a null
list, and none at all when "any headers" is 0 (the list offsets are not read then).

Bounds: the caller checks that offsets lie within their data and are non-decreasing and that
every array has its rows; sizes come from those offsets and every write stays within the size
:func:`plan_batches` computed, which the caller allocated; :func:`write_records` compares where
each batch ended with the planned end. Numba's bounds checking is off.

Errors (returned, with a row): ``E_NULL_HEADER_KEY``, ``E_RECORD_TOO_LARGE`` (a record body past
2^31 - 1 bytes, which its int32 length varint cannot hold), ``E_TABLE_FULL`` (the batch table
needs more rows: the caller retries with more), ``E_SIZE_MISMATCH`` (a bug).

Speed notes (1 M records of 100-byte values: plan 12 ms, write 60 ms, of which about 36 ms are
the key and value copies at this machine's memory bandwidth): helpers take arrays and scalars,
never the column tuples (numba copies a tuple of arrays, with reference counting, at each use
in a loop: 20 times slower); the batch table does not grow inside the loop (half as fast);
copies use LLVM's memcpy (``kernel_primitives.memcpy``).

Thread safety: the kernels touch only the arrays they are given and release the GIL.
"""

from __future__ import annotations

import numpy as np

from broker_embedded.record.kernel_primitives import (
    inline,
    jit,
    memcpy,
    uvarint_size,
    varint_size,
    write_varint,
    zigzag,
)

# -- batch table -------------------------------------------------------------------------------
B_FIRST_ROW, B_RECORDS_BYTES, B_MAX_TS = 0, 1, 2
BATCH_FIELDS = 3

# -- errors --------------------------------------------------------------------------------------
E_OK = 0
E_NULL_HEADER_KEY = 1
E_RECORD_TOO_LARGE = 2
E_SIZE_MISMATCH = 3
E_TABLE_FULL = 4

_INT32_MAX = 0x7FFFFFFF
_NO_TIMESTAMP = -1


@inline
def _length(offsets, valid, bit0, has_valid, i):  # type: ignore[no-untyped-def]
    """Length of row ``i`` of a binary column, -1 when null (straight-line code: no early
    return, which would slow the loops around it)."""
    n = offsets[np.uint64(i + 1)] - offsets[np.uint64(i)]
    if has_valid != 0:
        bit = bit0 + i
        if (valid[np.uint64(bit >> 3)] >> (bit & 7)) & 1 == 0:
            n = np.int64(-1)
    return n


@inline
def _field_size(n):  # type: ignore[no-untyped-def]
    """A length varint and the bytes it announces (-1: null, no bytes)."""
    return varint_size(n) + max(n, 0)


@inline
def _record_size(fixed, ts_delta, offset_delta):  # type: ignore[no-untyped-def]
    """A record's body size and its size with the length varint, from its size without the two
    deltas."""
    body = fixed + uvarint_size(zigzag(ts_delta)) + varint_size(offset_delta)
    return body, varint_size(body) + body


@jit
def plan_batches(ts, keys, values, headers, limits, row_fixed, batches):  # type: ignore[no-untyped-def]
    """Size every row and cut the rows into batches (module docstring).

    ``limits`` = (max batch records bytes, max batch records). Fills ``row_fixed`` (one per row)
    and rows of ``batches``: returns ``(error, error row, batch count)``. ``E_TABLE_FULL`` when
    ``batches`` has too few rows: call again with more (growing inside the loop made it half as
    fast).
    """
    max_bytes, max_records = limits[0], limits[1]
    k_offs, _, k_valid, (k_bit0, k_has) = keys
    v_offs, _, v_valid, (v_bit0, v_has) = values
    h_offs, _, h_valid, (h_bit0, h_has, h_any), hkeys, hvalues = headers
    hk_offs, _, hk_valid, (hk_bit0, hk_has) = hkeys
    hv_offs, _, hv_valid, (hv_bit0, hv_has) = hvalues
    n = ts.shape[0]
    nb = np.int64(0)
    batch_rows = batch_bytes = np.int64(0)
    base_ts = max_ts = np.int64(_NO_TIMESTAMP)
    for i in range(n):
        # the headers: none for a null list
        first = last = np.int64(0)
        if h_any != 0:
            first = h_offs[np.uint64(i)]
            last = h_offs[np.uint64(i + 1)]
            if _length(h_offs, h_valid, h_bit0, h_has, i) < 0:
                last = first
        hbytes = np.int64(0)
        for h in range(first, last):
            klen = _length(hk_offs, hk_valid, hk_bit0, hk_has, h)
            if klen < 0:
                return E_NULL_HEADER_KEY, np.int64(i), nb
            hbytes += _field_size(klen) + _field_size(
                _length(hv_offs, hv_valid, hv_bit0, hv_has, h)
            )
        fixed = (
            1  # attributes
            + _field_size(_length(k_offs, k_valid, k_bit0, k_has, i))
            + _field_size(_length(v_offs, v_valid, v_bit0, v_has, i))
            + varint_size(last - first)
            + hbytes
        )
        t = ts[np.uint64(i)]
        body, size = _record_size(fixed, t - base_ts, batch_rows)
        if batch_rows > 0 and (batch_rows >= max_records or batch_bytes + size > max_bytes):
            batches[nb - 1, B_RECORDS_BYTES] = batch_bytes
            batches[nb - 1, B_MAX_TS] = max_ts
            batch_rows = np.int64(0)
        if batch_rows == 0:
            if nb == batches.shape[0]:
                return E_TABLE_FULL, np.int64(i), nb
            batches[nb, B_FIRST_ROW] = i
            nb += 1
            base_ts = t
            max_ts = np.int64(_NO_TIMESTAMP)
            batch_bytes = np.int64(0)
            body, size = _record_size(fixed, np.int64(0), np.int64(0))
        if body > _INT32_MAX:
            return E_RECORD_TOO_LARGE, np.int64(i), nb
        row_fixed[np.uint64(i)] = fixed
        batch_rows += 1
        batch_bytes += size
        max_ts = max(max_ts, t)
    if nb > 0:
        batches[nb - 1, B_RECORDS_BYTES] = batch_bytes
        batches[nb - 1, B_MAX_TS] = max_ts
    return E_OK, np.int64(-1), nb


@inline
def _write_field(out, pos, offsets, data, n, i):  # type: ignore[no-untyped-def]
    """Row ``i`` of a binary column (length ``n``, -1 null) as a length varint and its bytes."""
    pos = write_varint(out, pos, n)
    if n > 0:
        memcpy(out, pos, data, offsets[np.uint64(i)], n)
    return pos + max(n, 0)


@jit
def write_records(ts, keys, values, headers, row_fixed, batches, nb, starts, out):  # type: ignore[no-untyped-def]
    """Write the records of batches ``[0, nb)`` (planned by :func:`plan_batches`) into ``out``,
    batch ``b``'s at ``starts[b]``. Returns ``(error, batch)``: ``E_SIZE_MISMATCH`` if a batch
    did not end where it was planned to (a bug)."""
    k_offs, k_data, k_valid, (k_bit0, k_has) = keys
    v_offs, v_data, v_valid, (v_bit0, v_has) = values
    h_offs, _, h_valid, (h_bit0, h_has, h_any), hkeys, hvalues = headers
    hk_offs, hk_data, hk_valid, (hk_bit0, hk_has) = hkeys
    hv_offs, hv_data, hv_valid, (hv_bit0, hv_has) = hvalues
    n = ts.shape[0]
    for b in range(nb):
        first_row = batches[b, B_FIRST_ROW]
        last_row = batches[b + 1, B_FIRST_ROW] if b + 1 < nb else n
        base_ts = ts[np.uint64(first_row)]
        pos = starts[b]
        for i in range(first_row, last_row):
            ts_delta = ts[np.uint64(i)] - base_ts
            offset_delta = i - first_row
            body, _ = _record_size(row_fixed[np.uint64(i)], ts_delta, offset_delta)
            pos = write_varint(out, pos, body)
            out[np.uint64(pos)] = 0  # attributes
            pos = write_varint(out, pos + 1, ts_delta)  # a varlong: the same int64 zigzag
            pos = write_varint(out, pos, offset_delta)
            klen = _length(k_offs, k_valid, k_bit0, k_has, i)
            pos = _write_field(out, pos, k_offs, k_data, klen, i)
            vlen = _length(v_offs, v_valid, v_bit0, v_has, i)
            pos = _write_field(out, pos, v_offs, v_data, vlen, i)
            if h_any == 0:
                out[np.uint64(pos)] = 0  # no headers
                pos += 1
                continue
            first = h_offs[np.uint64(i)]
            last = h_offs[np.uint64(i + 1)]
            if _length(h_offs, h_valid, h_bit0, h_has, i) < 0:
                last = first
            pos = write_varint(out, pos, last - first)
            for h in range(first, last):
                hklen = _length(hk_offs, hk_valid, hk_bit0, hk_has, h)
                pos = _write_field(out, pos, hk_offs, hk_data, hklen, h)
                hvlen = _length(hv_offs, hv_valid, hv_bit0, hv_has, h)
                pos = _write_field(out, pos, hv_offs, hv_data, hvlen, h)
        if pos != starts[b] + batches[b, B_RECORDS_BYTES]:
            return E_SIZE_MISMATCH, np.int64(b)
    return E_OK, np.int64(-1)
