"""The compiled (numba) kernels of the cleaner: no Python object per record.

Input: a window of a segment (whole batches back to back, read into a buffer) described by a
PLAN table, one row per batch (``P_*`` int64 columns): where the batch is in the window, where
its records section is (in the window, or in a side buffer of decompressed sections), its header
fields, and what the Python side decided for the batch as a whole (``P_MODE``, ``P_RETAIN``,
``P_FORCE_HORIZON``; see cleaner.py for the rules: transactions, producer state, the last batch
of a round). Records are parsed with ``decode_kernel.parse_record`` (the same checks as the
columnar decoder); keys are hashed with the MD5 of ``skimpy_offset_map`` and looked up or put
there (the map's words and state arrays).

:func:`map_rows` (building the map, Kafka's ``buildOffsetMapForSegment``): for rows in
``MODE_FILTER``, every keyed record at or above ``start_offset`` is put while the map holds
fewer than its ``max_desired`` entries; at the bound the walk stops (``MAP_FULL``, the map's
latest offset being the last offset put). After each row the map's latest offset becomes the
row's last offset (when at or above ``start_offset``). A ``MODE_VERBATIM`` row (a legacy entry)
stops the walk so that Python puts its keys (``MAP_STOPPED``).

:func:`filter_rows` (Kafka's ``filterTo`` with the cleaner's ``RecordFilter``) decides per
record and writes the output of every row into ``out`` back to back:

- a record is kept when its offset is above the map's latest offset, or when it has a key whose
  latest offset in the map is at most its own and it has a value or is a tombstone whose batch
  has no delete horizon yet or one still in the future (``MODE_FILTER``); every record of a
  ``MODE_KEEP_ALL`` row and none of a ``MODE_DROP_ALL`` row is kept;
- kept records and no delete horizon to set (no kept tombstone, no ``P_FORCE_HORIZON``, or a
  horizon already set): the batch is copied byte for byte (``KIND_VERBATIM``);
- otherwise the batch is rewritten (``KIND_REWRITTEN``): the original header with its base
  offset, lastOffsetDelta, leader epoch, producer id, epoch and base sequence and codec; the
  record count of the kept records; baseTimestamp the new delete horizon (``params[1]``, bit 6
  set) when one is set now, the batch's horizon when it had one, else the first kept record's
  timestamp; maxTimestamp the largest kept timestamp (LogAppendTime: the batch's); each kept
  record re-encoded with its timestampDelta relative to that base (its offsetDelta, key, value
  and headers as they were; attributes 0), and the CRC-32C recomputed. A compressed batch's
  kept records go raw into ``raw`` (``KIND_COMPRESS``): Python compresses them and builds the
  header, which goes into the output at ``O_OUT_AT``;
- no kept record: the batch goes, unless ``P_RETAIN`` is ``RETAIN_EMPTY``: then Kafka's empty
  header (no records, no compression, baseTimestamp -1, the batch's offsets, maxTimestamp,
  timestamp type, producer fields, transactional and control bits; ``KIND_EMPTY``);
- ``RETAIN_DELETE`` rows give nothing, ``MODE_VERBATIM`` rows are copied as they are.

:func:`index_entries` computes the ``.index`` and ``.timeindex`` entries of a segment being
written, window by window (segment_indexer.py's rules, one append per batch, then the closing
entry): the cleaner keeps only the entries, never a row per batch of the segment.

Bounds: rows are checked against their buffers before they are walked; records are parsed with
checks against their section (see decode_kernel). The caller sizes ``out`` and ``raw`` for the
worst case (each kept record grows by at most 13 bytes: a timestampDelta of up to 10 bytes
instead of 1 and a length varint of up to 5 instead of 1) and ``recs`` for the largest record
count of the window. Errors come back as decode_kernel ``E_*`` codes with the row and the
record's position in its section. Thread safety: the kernels touch only their arguments and
release the GIL.
"""

from __future__ import annotations

import numpy as np

from broker_embedded.cleaner.skimpy_offset_map import (
    M_ENTRIES,
    M_LATEST,
    M_MAX_DESIRED,
    map_get,
    map_put,
    md5,
    prefetch_slot,
)
from broker_embedded.record.batch_layout import (
    ATTRIBUTES_OFFSET,
    BASE_TIMESTAMP_OFFSET,
    BATCH_LENGTH_OFFSET,
    CODEC_MASK,
    CONTROL_MASK,
    CRC_OFFSET,
    DELETE_HORIZON_MASK,
    LOG_OVERHEAD,
    MAX_TIMESTAMP_OFFSET,
    RECORD_BATCH_OVERHEAD,
    RECORDS_COUNT_OFFSET,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
)
from broker_embedded.record.decode_kernel import (
    E_BAD_SECTION,
    E_LEFT_OVER,
    E_OFFSET_DELTA,
    E_OK,
    E_TOO_FEW,
    parse_record,
)
from broker_embedded.record.kernel_primitives import (
    crc32c,
    inline,
    jit,
    last_offset,
    memcpy,
    put_be,
    varint_size,
    write_varint,
)

# -- plan table (one row per batch of a window) ------------------------------------------------
P_POS, P_SIZE, P_SRC, P_REC_START, P_REC_END, P_BASE_OFFSET, P_LAST_DELTA, P_COUNT = range(8)
P_ATTR, P_BASE_TS, P_MAX_TS, P_MODE, P_RETAIN, P_FORCE_HORIZON = range(8, 14)
PLAN_FIELDS = 14

MODE_FILTER = 0  # the map decides per record
MODE_KEEP_ALL = 1  # every record kept (a control batch)
MODE_DROP_ALL = 2  # no record kept (aborted data, a marker past its horizon)
MODE_VERBATIM = 3  # a legacy entry: kept as it is (Python decided)

RETAIN_DELETE_EMPTY = 0  # Kafka's BatchRetention.DELETE_EMPTY
RETAIN_EMPTY = 1  # RETAIN_EMPTY: an empty header when no record is kept
RETAIN_DELETE = 2  # DELETE: the batch goes whatever its records

# -- outcome table -----------------------------------------------------------------------------
O_KIND, O_START, O_END, O_RETAINED, O_BASE_TS, O_MAX_TS, O_ATTR, O_OUT_AT = range(8)
OUTCOME_FIELDS = 8
KIND_DROPPED, KIND_VERBATIM, KIND_REWRITTEN, KIND_EMPTY, KIND_COMPRESS = range(5)

# -- records parsed ahead by filter_rows (one row each) -----------------------------------------
G_START, G_TAIL, G_END, G_TS, G_OFFSET, G_KLEN, G_VLEN, G_H0, G_H1 = range(9)
G_FIELDS = 9
LOOK_AHEAD = 16  # records hashed (and their slots prefetched) before the first is probed

# -- map_rows result -----------------------------------------------------------------------------
R_STATUS, R_ROW, R_RECORDS, R_ERR, R_ERR_POS, R_ERR_A, R_ERR_B = range(7)
RESULT_FIELDS = 7
MAP_DONE, MAP_FULL, MAP_STOPPED, MAP_ERROR = range(4)

MAX_RECORD_GROWTH = 13
_EMPTY_KEEPS = TIMESTAMP_TYPE_MASK | TRANSACTIONAL_MASK | CONTROL_MASK


# -- helpers -------------------------------------------------------------------------------------


@inline
def _section_ok(plan, r, buf, side):  # type: ignore[no-untyped-def]
    n = side.shape[0] if plan[r, P_SRC] else buf.shape[0]
    s, e = plan[r, P_REC_START], plan[r, P_REC_END]
    pos, size = plan[r, P_POS], plan[r, P_SIZE]
    return 0 <= s <= e <= n and 0 <= pos and pos + size <= buf.shape[0]


@jit
def _fail(result, status, row, err, pos, a, b):  # type: ignore[no-untyped-def]
    result[R_STATUS] = status
    result[R_ROW] = row
    result[R_ERR] = err
    result[R_ERR_POS] = pos
    result[R_ERR_A] = a
    result[R_ERR_B] = b


# -- building the map ------------------------------------------------------------------------


@jit
def _put_group(words, state, group, n):  # type: ignore[no-untyped-def]
    """Put the ``n`` (digest, offset) rows of ``group`` in order; False once the map is at its
    bound (the rest is not put)."""
    for j in range(n):
        if state[M_ENTRIES] >= state[M_MAX_DESIRED]:
            return False
        map_put(words, state, group[j, 0], group[j, 1], group[j, 2])
    return True


@jit
def map_rows(buf, side, plan, r0, r1, start_offset, words, state, scratch, group, result):  # type: ignore[no-untyped-def]
    """Put the keys of rows ``[r0, r1)`` into the map (module docstring), hashing up to
    ``len(group)`` keys ahead (``group``: int64 rows of digest and offset) and prefetching
    their slots. Fills ``result``: status (``MAP_*``), the row it stopped at, records read, and
    an error's code, position and details."""
    records = np.int64(0)
    result[R_ERR] = E_OK
    ahead = group.shape[0]
    for r in range(r0, r1):
        mode = plan[r, P_MODE]
        if mode == MODE_VERBATIM:
            result[R_STATUS] = MAP_STOPPED
            result[R_ROW] = r
            result[R_RECORDS] = records
            return
        if not _section_ok(plan, r, buf, side):
            _fail(result, MAP_ERROR, r, E_BAD_SECTION, 0, 0, 0)
            result[R_RECORDS] = records
            return
        base_offset = plan[r, P_BASE_OFFSET]
        last_delta = plan[r, P_LAST_DELTA]
        if mode == MODE_FILTER:
            src = side if plan[r, P_SRC] else buf
            p, end = plan[r, P_REC_START], plan[r, P_REC_END]
            first, declared, found = p, plan[r, P_COUNT], np.int64(0)
            pending = 0
            while p < end:
                if found == declared:
                    _fail(result, MAP_ERROR, r, E_LEFT_OVER, p - first, declared, end - p)
                    result[R_RECORDS] = records
                    return
                (
                    err,
                    detail,
                    rec_end,
                    _ts,
                    offset_delta,
                    klen,
                    key_end,
                    _vlen,
                    _vend,
                    _hc,
                    _ha,
                    _hk,
                    _hv,
                ) = parse_record(src, p, end)
                if err == E_OK and not 0 <= offset_delta <= last_delta:
                    err, detail = E_OFFSET_DELTA, offset_delta
                if err != E_OK:
                    _fail(result, MAP_ERROR, r, err, p - first, detail, last_delta)
                    result[R_RECORDS] = records
                    return
                offset = base_offset + offset_delta
                if klen >= 0 and offset >= start_offset:
                    h0, h1 = md5(src, key_end - klen, klen, scratch)
                    prefetch_slot(words, state, h0, h1)
                    group[pending, 0] = h0
                    group[pending, 1] = h1
                    group[pending, 2] = offset
                    pending += 1
                    if pending == ahead:
                        if not _put_group(words, state, group, pending):
                            result[R_STATUS] = MAP_FULL
                            result[R_ROW] = r
                            result[R_RECORDS] = records
                            return
                        pending = 0
                found += 1
                records += 1
                p = rec_end
            if found != declared:
                _fail(result, MAP_ERROR, r, E_TOO_FEW, end - first, declared, found)
                result[R_RECORDS] = records
                return
            if not _put_group(words, state, group, pending):
                result[R_STATUS] = MAP_FULL
                result[R_ROW] = r
                result[R_RECORDS] = records
                return
        last = last_offset(base_offset, last_delta)
        if last >= start_offset:
            state[M_LATEST] = last
    result[R_STATUS] = MAP_DONE
    result[R_ROW] = r1
    result[R_RECORDS] = records


# -- filtering and rewriting -----------------------------------------------------------------


@jit
def _write_header(out, at, buf, pos, length, attr, base_ts, max_ts, count):  # type: ignore[no-untyped-def]
    """The original header at ``buf[pos:]`` copied to ``out[at:]`` with new batchLength,
    attributes, baseTimestamp, maxTimestamp and recordsCount (and no CRC yet)."""
    memcpy(out, at, buf, pos, RECORD_BATCH_OVERHEAD)
    put_be(out, at + BATCH_LENGTH_OFFSET, length, 4)
    put_be(out, at + ATTRIBUTES_OFFSET, attr, 2)
    put_be(out, at + BASE_TIMESTAMP_OFFSET, base_ts, 8)
    put_be(out, at + MAX_TIMESTAMP_OFFSET, max_ts, 8)
    put_be(out, at + RECORDS_COUNT_OFFSET, count, 4)


@jit
def _write_records(target, tpos, src, recs, kept, base_ts):  # type: ignore[no-untyped-def]
    """Re-encode the kept records (``recs`` rows: record start, start of its offsetDelta,
    record end, timestamp) at ``target[tpos:]`` with timestampDeltas relative to ``base_ts``
    (the offsetDelta, key, value and headers copied as they are); returns the end position."""
    for i in range(kept):
        tail, rec_end, ts = recs[i, 1], recs[i, 2], recs[i, 3]
        ts_delta = ts - base_ts
        n = rec_end - tail
        tpos = write_varint(target, tpos, 1 + varint_size(ts_delta) + n)
        target[tpos] = 0  # attributes
        tpos = write_varint(target, tpos + 1, ts_delta)  # a varlong: the same int64 zigzag
        memcpy(target, tpos, src, tail, n)
        tpos += n
    return tpos


@jit
def filter_rows(buf, side, plan, words, state, params, out, raw, outcome, recs, scratch, group):  # type: ignore[no-untyped-def]
    """Filter and write every row of ``plan`` (module docstring). ``params`` = (now, new delete
    horizon); ``group``: int64 rows (``G_FIELDS`` columns) for the records parsed ahead.
    Returns ``(error, row, position, detail A, detail B, out bytes, raw bytes)``."""
    latest = state[M_LATEST]
    ahead = group.shape[0]
    now, new_horizon = params[0], params[1]
    opos = np.int64(0)
    rpos = np.int64(0)
    for r in range(plan.shape[0]):
        outcome[r, O_KIND] = KIND_DROPPED
        outcome[r, O_START] = opos
        outcome[r, O_END] = opos
        outcome[r, O_OUT_AT] = opos
        outcome[r, O_RETAINED] = 0
        retain = plan[r, P_RETAIN]
        mode = plan[r, P_MODE]
        if retain == RETAIN_DELETE:
            continue
        if not _section_ok(plan, r, buf, side):
            return E_BAD_SECTION, r, np.int64(0), np.int64(0), np.int64(0), opos, rpos
        pos, size = plan[r, P_POS], plan[r, P_SIZE]
        attr = plan[r, P_ATTR]
        if mode == MODE_VERBATIM:
            memcpy(out, opos, buf, pos, size)
            outcome[r, O_KIND] = KIND_VERBATIM
            outcome[r, O_END] = opos + size
            outcome[r, O_MAX_TS] = plan[r, P_MAX_TS]
            opos += size
            continue
        has_horizon = (attr & DELETE_HORIZON_MASK) != 0
        log_append = (attr & TIMESTAMP_TYPE_MASK) != 0
        base_ts, max_ts = plan[r, P_BASE_TS], plan[r, P_MAX_TS]
        count = plan[r, P_COUNT]
        kept = np.int64(0)
        all_kept = True
        tombstones = False
        if mode == MODE_DROP_ALL:
            all_kept = count == 0
        else:
            src = side if plan[r, P_SRC] else buf
            p, end = plan[r, P_REC_START], plan[r, P_REC_END]
            first, found = p, np.int64(0)
            base_offset, last_delta = plan[r, P_BASE_OFFSET], plan[r, P_LAST_DELTA]
            while p < end:
                # parse up to len(group) records, hashing the keys to look up and prefetching
                # their slots; then decide them in order
                n = 0
                while p < end and n < ahead:
                    if found == count:
                        return E_LEFT_OVER, r, p - first, count, end - p, opos, rpos
                    (
                        err,
                        detail,
                        rec_end,
                        ts_delta,
                        offset_delta,
                        klen,
                        key_end,
                        vlen,
                        _vend,
                        _hc,
                        _ha,
                        _hk,
                        _hv,
                    ) = parse_record(src, p, end)
                    if err == E_OK and not 0 <= offset_delta <= last_delta:
                        err, detail = E_OFFSET_DELTA, offset_delta
                    if err != E_OK:
                        return err, r, p - first, detail, last_delta, opos, rpos
                    found += 1
                    offset = base_offset + offset_delta
                    lookup = mode == MODE_FILTER and offset <= latest and klen >= 0
                    group[n, G_START] = p
                    group[n, G_TAIL] = (
                        key_end - max(klen, 0) - varint_size(klen) - varint_size(offset_delta)
                    )
                    group[n, G_END] = rec_end
                    group[n, G_TS] = max_ts if log_append else base_ts + ts_delta
                    group[n, G_OFFSET] = offset
                    group[n, G_KLEN] = klen
                    group[n, G_VLEN] = vlen
                    if lookup:
                        h0, h1 = md5(src, key_end - klen, klen, scratch)
                        prefetch_slot(words, state, h0, h1)
                        group[n, G_H0] = h0
                        group[n, G_H1] = h1
                    n += 1
                    p = rec_end
                for j in range(n):
                    offset = group[j, G_OFFSET]
                    keep = True
                    if mode == MODE_FILTER and offset <= latest:
                        if group[j, G_KLEN] < 0:
                            keep = False
                        elif offset < map_get(words, state, group[j, G_H0], group[j, G_H1]):
                            keep = False
                        elif group[j, G_VLEN] < 0 and has_horizon and now >= base_ts:
                            keep = False
                    if keep:
                        recs[kept, 0] = group[j, G_START]
                        recs[kept, 1] = group[j, G_TAIL]
                        recs[kept, 2] = group[j, G_END]
                        recs[kept, 3] = group[j, G_TS]
                        kept += 1
                        if group[j, G_VLEN] < 0:
                            tombstones = True
                    else:
                        all_kept = False
            if found != count:
                return E_TOO_FEW, r, end - first, count, found, opos, rpos
        outcome[r, O_RETAINED] = kept
        if kept > 0:
            set_horizon = (tombstones or plan[r, P_FORCE_HORIZON] != 0) and not has_horizon
            if all_kept and not set_horizon:
                memcpy(out, opos, buf, pos, size)
                outcome[r, O_KIND] = KIND_VERBATIM
                outcome[r, O_END] = opos + size
                outcome[r, O_MAX_TS] = max_ts
                opos += size
                continue
            if set_horizon:
                new_base, new_attr = new_horizon, attr | DELETE_HORIZON_MASK
            elif has_horizon:
                new_base, new_attr = base_ts, attr
            else:
                new_base, new_attr = recs[0, 3], attr
            new_max = max_ts
            if not log_append:
                new_max = np.int64(-1)
                for i in range(kept):
                    new_max = max(new_max, recs[i, 3])
            src = side if plan[r, P_SRC] else buf
            outcome[r, O_BASE_TS] = new_base
            outcome[r, O_MAX_TS] = new_max
            outcome[r, O_ATTR] = new_attr
            if attr & CODEC_MASK:
                end_raw = _write_records(raw, rpos, src, recs, kept, new_base)
                outcome[r, O_KIND] = KIND_COMPRESS
                outcome[r, O_START] = rpos
                outcome[r, O_END] = end_raw
                rpos = end_raw
                continue
            end_out = _write_records(out, opos + RECORD_BATCH_OVERHEAD, src, recs, kept, new_base)
            _write_header(
                out,
                opos,
                buf,
                pos,
                end_out - opos - LOG_OVERHEAD,
                new_attr,
                new_base,
                new_max,
                kept,
            )
            put_be(out, opos + CRC_OFFSET, crc32c(out, opos + ATTRIBUTES_OFFSET, end_out), 4)
            outcome[r, O_KIND] = KIND_REWRITTEN
            outcome[r, O_END] = end_out
            opos = end_out
        elif retain == RETAIN_EMPTY:
            _write_header(
                out,
                opos,
                buf,
                pos,
                RECORD_BATCH_OVERHEAD - LOG_OVERHEAD,
                attr & _EMPTY_KEEPS,
                -1,
                max_ts,
                0,
            )
            crc = crc32c(out, opos + ATTRIBUTES_OFFSET, opos + RECORD_BATCH_OVERHEAD)
            put_be(out, opos + CRC_OFFSET, crc, 4)
            outcome[r, O_KIND] = KIND_EMPTY
            outcome[r, O_END] = opos + RECORD_BATCH_OVERHEAD
            outcome[r, O_MAX_TS] = max_ts
            opos += RECORD_BATCH_OVERHEAD
    z = np.int64(0)
    return E_OK, np.int64(-1), z, z, z, opos, rpos


# -- indexes of a written segment ----------------------------------------------------------------


# index_entries state: bytes since the last offset index entry, max timestamp so far and its
# offset, the last time index entry's timestamp
I_SINCE, I_MAX_TS, I_MAX_TS_OFFSET, I_TI_LAST = range(4)
INDEX_STATE_FIELDS = 4


def new_index_state(base: int) -> np.ndarray:
    return np.array([0, -1, base, -1], np.int64)


@jit
def index_entries(positions, sizes, lasts, max_ts, base, interval, st, oi, ti, closing):  # type: ignore[no-untyped-def]
    """Offset and time index entries for more batches ``(positions, sizes, last offsets, max
    timestamps)`` of a segment based at ``base`` (segment_indexer.py's rules: one append per
    batch; with ``closing``, then the closing time index entry). ``st``: the indexer's state
    (``I_*``, from :func:`new_index_state`), carried from call to call. ``oi`` rows: (relative
    offset, position); ``ti`` rows: (timestamp, relative offset); both need
    ``len(positions) + 1`` rows. Returns the entry counts written."""
    noi = np.int64(0)
    nti = np.int64(0)
    since, mts, mts_offset, ti_last = st[I_SINCE], st[I_MAX_TS], st[I_MAX_TS_OFFSET], st[I_TI_LAST]
    for i in range(positions.shape[0]):
        if max_ts[i] > mts:
            mts, mts_offset = max_ts[i], lasts[i]
        if since > interval:
            oi[noi, 0] = lasts[i] - base
            oi[noi, 1] = positions[i]
            noi += 1
            if mts > ti_last:
                ti[nti, 0] = mts
                ti[nti, 1] = mts_offset - base
                nti += 1
                ti_last = mts
            since = 0
        since += sizes[i]
    if closing and mts > ti_last:
        ti[nti, 0] = mts
        ti[nti, 1] = mts_offset - base
        nti += 1
        ti_last = mts
    st[I_SINCE], st[I_MAX_TS], st[I_MAX_TS_OFFSET], st[I_TI_LAST] = since, mts, mts_offset, ti_last
    return noi, nti
