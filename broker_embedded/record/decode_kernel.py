"""The compiled (numba) kernels of the columnar decoder: no Python object per record.

Three kernels, all ``@numba.njit(cache=True, nogil=True)``:

:func:`scan_entries` is the decoder's specialisation (read-only input, every magic) of the one
walk of entry headers, ``entry_scan.walk_entries``: its table (``entry_scan.S_*``), its statuses
(``entry_scan.SCAN_*``) and its rules are there. Called with a zero-row table it only counts.

:func:`decode_sections` walks the records sections listed in a table (``T_*`` columns: in the
input buffer or in a side buffer of decompressed / re-encoded sections) and fills column
buffers. Record layout (all varints zigzag): length varint, attributes int8, timestampDelta
varlong, offsetDelta varint, keyLength varint (-1 null) + key, valueLength varint (-1 null) +
value, headerCount varint, per header keyLength varint (never -1) + key, valueLength varint
(-1 null) + value. The checks equal ``RecordBatch.records``: record inside its section, no stray
bytes, offsetDelta in [0, lastOffsetDelta], exactly recordsCount records, no bytes left over.

Bounds: every byte is read through ``kernel_primitives.at`` at a position already compared with
the end of its record or section (sections are checked against their buffer first), and every
write is within capacity (rows checked per row, growable arrays reserved per section for the
most a section of that size can add). Corrupt input gives an error code (``E_*``) and a position,
never an out-of-bounds access. Numba's array bounds checking is off: these checks are the only
ones, so keep them when changing the code.

Output layout. Rows are cut into chunks of at most ``max_rows`` rows; a chunk is also closed
before the record bytes it holds would pass ``chunk_bytes`` (at most 2^31 - 1, what Arrow's int32
offsets hold), which bounds each of its streams (keys, values, header keys, header values) and
its header count. Chunk ``c`` owns rows ``[rs_c, rs_{c+1})`` and headers ``[hs_c, hs_{c+1})``.
Row-level offset arrays hold one extra slot per chunk: chunk ``c``'s Arrow offsets are
``offs[rs_c + c : rs_{c+1} + c + 1]``, starting at 0 and relative to the chunk's first byte in
its data buffer (``chunks[c, C_KEY]`` ...); header-level offsets likewise with ``hs``. Validity is
one byte per row (1 valid); chunks count their nulls. Data buffers and header-level arrays grow
inside the kernel (so their initial sizes are hints); row-level arrays must hold every row.

Speed notes (measured, 1 M records of 100-byte values): an unsigned index avoids numba's
negative-index wraparound (4x on the parse loop); the record parser is inlined at numba IR level
and runs straight through without early returns (2x); copies use LLVM's memcpy (numba's slice
assignment is a byte loop).

:func:`inflate_sections` decompresses the lz4 and snappy records sections listed in a table
(``I_*`` columns: position, end and codec in the input buffer) one after the other into a side
buffer (``lz4_frame.decode_frame``, ``snappy_block.decode``; numba's cache of this kernel holds
their code too, and is keyed on this file only: after changing them, change this file or clear
the cache), each within its room of the
inflation budget (the caller's ``first_room`` for the first row, then what is left of
``max_inflated``, never more than ``cap`` per section), and writes where each landed. It stops at
the first row it cannot finish, saying why (``INFLATE_*``): the side buffer is full (grow it and
call again from that row), the section would pass its room, or the kernel cannot decode it
(corrupt, or a frame feature left to the library); the caller takes that row through
``compression.decompress``, which decides and names the error.

The byte, varint and copy primitives are ``kernel_primitives``'s (with what each assumes).

Thread safety: the kernels touch only the arrays they are given and release the GIL (nogil):
concurrent calls on distinct output arrays are safe.
"""

from __future__ import annotations

import numpy as np

from broker_embedded.record import lz4_frame, snappy_block
from broker_embedded.record.entry_scan import NO_LIMIT
from broker_embedded.record.entry_scan_kernel import walk_entries
from broker_embedded.record.kernel_primitives import (
    inline,
    jit,
    memcpy,
    read_varint,
    read_varlong,
)

# -- decode table (one row per records section) ------------------------------------------------
T_SIDE, T_START, T_END, T_BASE_OFFSET, T_LAST_DELTA, T_COUNT = 0, 1, 2, 3, 4, 5
T_BASE_TS, T_MAX_TS, T_LOG_APPEND, T_TS_TYPE = 6, 7, 8, 9
TABLE_FIELDS = 10

# -- inflation table (one row per lz4 / snappy records section) --------------------------------
I_START, I_END, I_CODEC, I_OUT_START, I_OUT_END = 0, 1, 2, 3, 4
INFLATE_FIELDS = 5
CODEC_SNAPPY, CODEC_LZ4 = 2, 3

INFLATE_DONE = 0  # every row inflated
INFLATE_NO_ROOM = 1  # the side buffer is full at the returned row
INFLATE_OVER = 2  # the returned row would pass its room of the budget
INFLATE_FAILED = 3  # the kernel cannot decode the returned row (corrupt or unsupported)

# -- chunk table -------------------------------------------------------------------------------
C_ROW, C_KEY, C_VALUE, C_HEADER, C_HKEY, C_HVALUE = 0, 1, 2, 3, 4, 5
C_KEY_NULLS, C_VALUE_NULLS, C_HVALUE_NULLS = 6, 7, 8
CHUNK_FIELDS = 9

# -- counters (the ``counts`` array) -----------------------------------------------------------
N_ROWS, N_CHUNKS, N_HEADERS, N_KEY, N_VALUE, N_HKEY, N_HVALUE = 0, 1, 2, 3, 4, 5, 6
N_ERR_TABLE_ROW, N_ERR_POS, N_ERR_A, N_ERR_B = 7, 8, 9, 10
COUNT_FIELDS = 11

# -- decode error codes (N_ERR_POS: the record's byte in its section) ---------------------------
E_OK = 0
E_BAD_SECTION = 1  # a table row outside its buffer (a bug, not bad data)
E_VARINT = 2  # truncated or over-long varint / varlong (A: 1 truncated, 2 too long)
E_RECORD_LENGTH = 3  # record length negative or past the section (A: length, B: bytes left)
E_TRUNCATED = 4  # a fixed field or a key/value/header past the record end (A: length)
E_STRAY_BYTES = 5  # bytes between the last field and the record end (A: how many)
E_OFFSET_DELTA = 6  # offsetDelta outside [0, lastOffsetDelta] (A: delta, B: lastOffsetDelta)
E_TOO_FEW = 7  # fewer records than recordsCount (A: declared, B: found)
E_LEFT_OVER = 8  # bytes after recordsCount records (A: declared, B: bytes left)
E_HEADER_COUNT = 9  # negative or impossible header count (A: count)
E_NULL_HEADER_KEY = 10
E_NEGATIVE_LENGTH = 11  # a length below -1 (A: length)
E_CAPACITY = 12  # row or chunk capacity exceeded (a bug, not bad data)
E_TIMESTAMP = 13  # a timestamp whose microseconds overflow int64 (A: the timestamp in ms)

# Spark's timestamps are microseconds in an int64: milliseconds beyond this overflow (Spark's own
# Kafka source fails such a record too, in DateTimeUtils.millisToMicros).
MAX_TIMESTAMP_MS = (1 << 63) // 1000 - 1

_MIN_HEADER_BYTES = 2  # key length varint + value length varint
_MIN_RECORD_BYTES = 7  # length varint, attributes, five one-byte varints


# -- entry scan --------------------------------------------------------------------------------


@jit
def scan_entries(buf, start, end, table):  # type: ignore[no-untyped-def]
    """The decoder's walk: ``entry_scan.walk_entries`` over every entry of ``buf[start:end]``,
    whatever its magic, filling ``table`` rows while they last (a table of no rows counts)."""
    return walk_entries(buf, start, end, False, NO_LIMIT, False, 0, table)


# -- records -----------------------------------------------------------------------------------


@jit
def inflate_sections(buf, rows, side, used, first_room, max_inflated, cap):  # type: ignore[no-untyped-def]
    """Decompress ``rows`` (``I_*``) from ``buf`` into ``side[used:]``; ``max_inflated`` < 0:
    no budget. ``(status, row reached, side bytes used)`` (module docstring)."""
    for i in range(rows.shape[0]):
        room = (
            first_room if i == 0 else (cap if max_inflated < 0 else min(max_inflated - used, cap))
        )
        if room <= 0:
            return INFLATE_OVER, i, used
        start, end = rows[i, I_START], rows[i, I_END]
        if start < 0 or end > buf.shape[0] or start > end:
            return INFLATE_FAILED, i, used
        limit = min(side.shape[0], used + room)
        if rows[i, I_CODEC] == CODEC_LZ4:
            status, out = lz4_frame.decode_frame(buf, start, end, side, used, limit)
        else:
            status, out = snappy_block.decode(buf, start, end, side, used, limit)
        if status == lz4_frame.NO_ROOM:
            return (INFLATE_OVER if limit == used + room else INFLATE_NO_ROOM), i, used
        if status != lz4_frame.OK:
            return INFLATE_FAILED, i, used
        rows[i, I_OUT_START] = used
        rows[i, I_OUT_END] = out
        used = out
    return INFLATE_DONE, rows.shape[0], used


@inline
def _read_length(buf, pos, end):  # type: ignore[no-untyped-def]
    """A key/value length varint and the bytes it announces, within ``end``.

    Returns (length, position after the bytes, error code, detail); the position is -1 after an
    error (also when ``pos`` already was).
    """
    n, p = read_varint(buf, pos, end)
    if p < 0:
        return n, p, E_VARINT, n
    if n < -1:
        return n, np.int64(-1), E_NEGATIVE_LENGTH, n
    if n > end - p:
        return n, np.int64(-1), E_TRUNCATED, n
    return n, p + max(n, 0), E_OK, np.int64(0)


@jit
def _walk_headers(buf, pos, end, count):  # type: ignore[no-untyped-def]
    """Validate ``count`` headers: (position after them, key bytes, value bytes, error, detail)."""
    kbytes = np.int64(0)
    vbytes = np.int64(0)
    p = pos
    for _ in range(count):
        n, p, err, detail = _read_length(buf, p, end)
        if err != E_OK:
            return p, kbytes, vbytes, err, detail
        if n < 0:
            return np.int64(-1), kbytes, vbytes, E_NULL_HEADER_KEY, np.int64(0)
        kbytes += n
        n, p, err, detail = _read_length(buf, p, end)
        if err != E_OK:
            return p, kbytes, vbytes, err, detail
        vbytes += max(n, 0)
    return p, kbytes, vbytes, E_OK, np.int64(0)


@inline
def parse_record(buf, pos, end):  # type: ignore[no-untyped-def]
    """Validate the record at ``buf[pos:end]`` (``end``: the section end, within ``buf``; ``pos``
    at or after the section start). Inlined: also the cleaner kernel's record parser.

    Returns (error, detail, record end, timestampDelta, offsetDelta, key length, key end, value
    length, value end, header count, headers position, header key bytes, header value bytes).
    Key and value bytes end at "key end" / "value end"; lengths are -1 for null. The first error
    wins; after a failed read the position is -1 and every later read fails at once, so the code
    runs straight through: returning early instead compiles to a loop twice as slow.
    """
    length, p = read_varint(buf, pos, end)
    if p < 0 or length < 1 or length > end - p:
        err = E_VARINT if p < 0 else E_RECORD_LENGTH
        z = np.int64(0)
        return err, length, z, z, z, z, z, z, z, z, z, z, z
    rec_end = p + length
    err = E_OK
    detail = np.int64(0)
    ts_delta, p = read_varlong(buf, p + 1, rec_end)  # after the unused attributes byte
    if p < 0:
        err, detail = E_VARINT, ts_delta
    offset_delta, p = read_varint(buf, p, rec_end)
    if p < 0 and err == E_OK:
        err, detail = E_VARINT, offset_delta
    klen, key_end, e, d = _read_length(buf, p, rec_end)
    if e != E_OK and err == E_OK:
        err, detail = e, d
    vlen, value_end, e, d = _read_length(buf, key_end, rec_end)
    if e != E_OK and err == E_OK:
        err, detail = e, d
    hcount, p = read_varint(buf, value_end, rec_end)
    if p < 0:
        if err == E_OK:
            err, detail = E_VARINT, hcount
    elif hcount < 0 or hcount > (rec_end - p) >> 1:  # a header takes at least 2 bytes
        if err == E_OK:
            err, detail = E_HEADER_COUNT, hcount
        p = np.int64(-1)
    headers_at = p
    hkbytes = hvbytes = np.int64(0)
    if p >= 0 and hcount > 0:
        p, hkbytes, hvbytes, e, d = _walk_headers(buf, p, rec_end, hcount)
        if e != E_OK and err == E_OK:
            err, detail = e, d
    if err == E_OK and p != rec_end:
        err, detail = E_STRAY_BYTES, rec_end - p
    return (
        err,
        detail,
        rec_end,
        ts_delta,
        offset_delta,
        klen,
        key_end,
        vlen,
        value_end,
        hcount,
        headers_at,
        hkbytes,
        hvbytes,
    )


@jit
def _grow(arr, need):  # type: ignore[no-untyped-def]
    """``arr`` itself if it holds ``need`` items, else a copy at least twice as large."""
    if need <= arr.shape[0]:
        return arr
    bigger = np.empty(max(need, 2 * arr.shape[0]), arr.dtype)
    bigger[: arr.shape[0]] = arr
    return bigger


@jit
def _copy_headers(src, pos, end, count, out, first_header, slot, base):  # type: ignore[no-untyped-def]
    """Copy ``count`` validated headers at ``src[pos:]`` into ``out`` = (key offsets, value
    offsets, value validity, key data, value data, key bytes used, value bytes used): header
    ``first_header + i`` gets offset slot ``slot + i``, relative to ``base`` = (key data start,
    value data start) of its chunk. Returns (key bytes used, value bytes used, nulls)."""
    hkey_offs, hvalue_offs, hvalue_valid, hkey_data, hvalue_data, kpos, vpos = out
    nulls = 0
    p = pos
    for i in range(count):
        n, p, _, _ = _read_length(src, p, end)
        memcpy(hkey_data, kpos, src, p - n, n)
        kpos += n
        n, p, _, _ = _read_length(src, p, end)
        if n < 0:
            hvalue_valid[first_header + i] = 0
            nulls += 1
        else:
            hvalue_valid[first_header + i] = 1
            memcpy(hvalue_data, vpos, src, p - n, n)
            vpos += n
        hkey_offs[slot + i] = kpos - base[0]
        hvalue_offs[slot + i] = vpos - base[1]
    return kpos, vpos, nulls


@jit
def _fail(counts, row, pos, a, b):  # type: ignore[no-untyped-def]
    counts[N_ERR_TABLE_ROW] = row
    counts[N_ERR_POS] = pos
    counts[N_ERR_A] = a
    counts[N_ERR_B] = b


@jit
def _open_chunk(chunks, c, first_row, sizes, row_offs):  # type: ignore[no-untyped-def]
    """Start chunk ``c`` at row ``first_row`` and the current stream ends ``sizes`` (key, value,
    header count, header key, header value bytes)."""
    chunks[c, C_ROW] = first_row
    for s in range(5):
        chunks[c, C_KEY + s] = sizes[s]
    chunks[c, C_KEY_NULLS] = 0
    chunks[c, C_VALUE_NULLS] = 0
    chunks[c, C_HVALUE_NULLS] = 0
    row_offs[:, first_row + c] = 0  # (row_offs has no header-list row without headers)


@jit
def _reserve(data, used, section_bytes, chunks_after, want_headers):  # type: ignore[no-untyped-def]
    """``data`` grown to take whatever one section of ``section_bytes`` can add: its keys,
    values and header bytes are within the section, each header takes 2 bytes or more, each
    record 7 or more (and may open a chunk). ``used`` = (key, value, header count, header key,
    header value) ends; ``chunks_after`` the chunk count so far."""
    key_data, value_data, hkey_offs, hvalue_offs, hvalue_valid, hkey_data, hvalue_data = data
    key_data = _grow(key_data, used[0] + section_bytes)
    value_data = _grow(value_data, used[1] + section_bytes)
    if want_headers:
        headers = used[2] + section_bytes // _MIN_HEADER_BYTES
        slots = headers + chunks_after + section_bytes // _MIN_RECORD_BYTES + 1
        hkey_offs = _grow(hkey_offs, slots)
        hvalue_offs = _grow(hvalue_offs, slots)
        hvalue_valid = _grow(hvalue_valid, headers)
        hkey_data = _grow(hkey_data, used[3] + section_bytes)
        hvalue_data = _grow(hvalue_data, used[4] + section_bytes)
    return key_data, value_data, hkey_offs, hvalue_offs, hvalue_valid, hkey_data, hvalue_data


@jit
def decode_sections(  # type: ignore[no-untyped-def]
    buf, side, table, params, row_i64, ts_types, row_offs, valid, chunks, counts, data
):
    """Decode the records of every section in ``table`` whose offset is in
    [start_offset, end_offset) into column buffers (layout: module docstring).

    ``params`` = (start_offset, end_offset, max_rows, chunk_bytes, want_headers). Row-level
    outputs: ``row_i64[0]`` offsets, ``row_i64[1]`` timestamps in microseconds, ``ts_types``
    timestampType, ``row_offs[0..2]`` key, value and header-list offsets, ``valid[0..1]`` key and
    value validity. ``data`` = (key data, value data, header key offsets, header value offsets,
    header value validity, header key data, header value data) may grow: the function returns
    ``(error code, data)``. On error ``counts`` names the table row, the record's position in its
    section and two details (see ``E_*``).
    """
    start_offset, end_offset, max_rows, chunk_bytes = params[0], params[1], params[2], params[3]
    want_headers = params[4] != 0
    nrows = c = chunk_rows = chunk_src = np.int64(0)
    kpos = vpos = nhdr = hkpos = hvpos = np.int64(0)
    # where the current chunk starts in each stream
    k0 = v0 = h0 = hk0 = hv0 = np.int64(0)
    err = E_OK
    if chunks.shape[0] == 0 or row_offs.shape[1] < row_i64.shape[1] + chunks.shape[0]:
        _fail(counts, 0, 0, row_offs.shape[1], row_i64.shape[1] + chunks.shape[0])
        err = E_CAPACITY
    else:
        _open_chunk(chunks, 0, 0, (kpos, vpos, nhdr, hkpos, hvpos), row_offs)
        data = _reserve(data, (kpos, vpos, nhdr, hkpos, hvpos), 0, 1, True)
        data[2][0] = data[3][0] = 0
    for t in range(table.shape[0]):
        if err != E_OK:
            break
        src = side if table[t, T_SIDE] else buf
        p, end = table[t, T_START], table[t, T_END]
        if p < 0 or end > src.shape[0] or p > end:
            _fail(counts, t, p, end, src.shape[0])
            err = E_BAD_SECTION
            break
        data = _reserve(data, (kpos, vpos, nhdr, hkpos, hvpos), end - p, c + 1, want_headers)
        key_data, value_data, hkey_offs, hvalue_offs, hvalue_valid, hkey_data, hvalue_data = data
        first, declared, found = p, table[t, T_COUNT], np.int64(0)
        last_delta, base_offset = table[t, T_LAST_DELTA], table[t, T_BASE_OFFSET]
        log_append, ts_type = table[t, T_LOG_APPEND] != 0, table[t, T_TS_TYPE]
        base_ts = table[t, T_BASE_TS]
        while p < end:
            if found == declared:
                _fail(counts, t, p - first, declared, end - p)
                err = E_LEFT_OVER
                break
            (
                err,
                detail,
                rec_end,
                ts_delta,
                offset_delta,
                klen,
                key_end,
                vlen,
                value_end,
                hcount,
                headers_at,
                hkbytes,
                hvbytes,
            ) = parse_record(src, p, end)
            if err == E_OK and not 0 <= offset_delta <= last_delta:
                err, detail = E_OFFSET_DELTA, offset_delta
            if err != E_OK:
                _fail(counts, t, p - first, detail, last_delta)
                break
            found += 1
            rec_start, p = p, rec_end
            offset = base_offset + offset_delta
            if offset < start_offset or offset >= end_offset:
                continue
            kn, vn = max(klen, 0), max(vlen, 0)
            if not want_headers:
                hcount = np.int64(0)
            # a record's keys, values, header bytes and header count are within its bytes
            rec_bytes = rec_end - rec_start
            if chunk_rows > 0 and (chunk_rows >= max_rows or chunk_src + rec_bytes > chunk_bytes):
                c += 1
                if c >= chunks.shape[0]:
                    _fail(counts, t, p - first, c, chunks.shape[0])
                    err = E_CAPACITY
                    break
                _open_chunk(chunks, c, nrows, (kpos, vpos, nhdr, hkpos, hvpos), row_offs)
                k0, v0, h0, hk0, hv0 = kpos, vpos, nhdr, hkpos, hvpos
                chunk_src = np.int64(0)
                if want_headers:
                    hkey_offs[nhdr + c] = hvalue_offs[nhdr + c] = 0
                chunk_rows = 0
            if nrows >= row_i64.shape[1]:
                _fail(counts, t, p - first, nrows, row_i64.shape[1])
                err = E_CAPACITY
                break
            ts = table[t, T_MAX_TS] if log_append else base_ts + ts_delta
            if not -MAX_TIMESTAMP_MS <= ts <= MAX_TIMESTAMP_MS:
                _fail(counts, t, rec_start - first, ts, 0)
                err = E_TIMESTAMP
                break
            row = np.uint64(nrows)
            row_i64[0, row] = offset
            row_i64[1, row] = ts * 1000
            ts_types[row] = ts_type
            valid[0, row] = klen >= 0
            valid[1, row] = vlen >= 0
            if klen < 0:
                chunks[c, C_KEY_NULLS] += 1
            if vlen < 0:
                chunks[c, C_VALUE_NULLS] += 1
            memcpy(key_data, kpos, src, key_end - kn, kn)
            kpos += kn
            memcpy(value_data, vpos, src, value_end - vn, vn)
            vpos += vn
            slot = np.uint64(nrows + c + 1)
            row_offs[0, slot] = kpos - k0
            row_offs[1, slot] = vpos - v0
            if hcount > 0:
                out = (hkey_offs, hvalue_offs, hvalue_valid, hkey_data, hvalue_data, hkpos, hvpos)
                hkpos, hvpos, nulls = _copy_headers(
                    src, headers_at, rec_end, hcount, out, nhdr, nhdr + c + 1, (hk0, hv0)
                )
                chunks[c, C_HVALUE_NULLS] += nulls
                nhdr += hcount
            if want_headers:
                row_offs[2, slot] = nhdr - h0
            nrows += 1
            chunk_rows += 1
            chunk_src += rec_bytes
        if err == E_OK and found != declared:
            _fail(counts, t, end - first, declared, found)
            err = E_TOO_FEW
    counts[N_ROWS] = nrows
    counts[N_CHUNKS] = c + 1 if nrows > 0 else 0
    counts[N_HEADERS] = nhdr
    counts[N_KEY] = kpos
    counts[N_VALUE] = vpos
    counts[N_HKEY] = hkpos
    counts[N_HVALUE] = hvpos
    return err, data
