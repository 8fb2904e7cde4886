"""The columnar decoder: a run of record batches straight into Arrow record batches.

Input: a run of entries as a segment slice or a Fetch response's records hold them (``bytes``,
``bytearray``, ``memoryview``, ``mmap`` or a 1-D numpy ``uint8`` array): record batches v2 (the
61-byte header of ``record_batch``, then the records, compressed as one stream when the codec is
not none) and, in old logs, legacy magic 0/1 message-set entries (``legacy_record``).

Output: ``pyarrow.RecordBatch``es whose schema is exactly Spark's Kafka source schema
(:func:`kafka_schema`, defined in kafka_schema.py): key binary, value binary, topic string,
partition int32, offset int64, timestamp timestamp[us, tz=UTC], timestampType int32 and, when
asked, headers list<element: struct<key: string, value: binary>>, null for a record without
headers (as Spark's Kafka source reads it, not an empty list). Every field is nullable, as
Spark declares it (``StructField``'s default), and the list's child is named ``element`` as
Spark's Arrow conversion names it. At most ``max_rows_per_batch`` rows per record batch, and
never more than 2^31 - 1 bytes in one binary column of one record batch (Arrow's int32 offsets).

What is decoded, following Kafka's consumer:

- every record whose offset is in [start_offset, end_offset); a run may begin with records below
  the fetch offset and may end in a partial batch (``tail="stop"`` drops it silently, as a
  consumer does; ``tail="error"`` raises :class:`TornTailError`, for the end of a log file);
- control batches (transaction markers) give no rows;
- with ``aborted_transactions`` (read_committed: the (producer id, first offset) pairs of a Fetch
  response) a transactional batch of producer P is skipped once an aborted transaction of P
  with first offset <= the batch's last offset has been seen, until P's ABORT marker (Kafka's
  ``CompletedFetch``: the aborted transactions are consumed in first-offset order up to each
  batch's last offset; this runs over every batch of the run, in range or not);
- timestamps: CreateTime = baseTimestamp + timestampDelta, LogAppendTime (attribute bit 3) =
  maxTimestamp for every record, in microseconds; timestampType 0/1, and -1 for magic 0.

Checks: the CRC-32C of every v2 batch in range (and of control batches read for markers) when
``verify_crc``, plus everything ``RecordBatch.records`` checks (see ``decode_kernel``). Batches
entirely outside the range are walked over by their headers only. Corrupt input raises
:class:`CorruptRecordError` naming ``source``, the byte position of the batch
(``base_position`` + its index in the buffer) and its base offset, never another exception.

The hot path creates no Python object per record: ``decode_kernel.scan_entries`` walks the entry
headers into a table; numpy picks the batches in range; Python checks CRCs (one ``crc32c`` call
per batch, on a helper thread for large runs so that it overlaps the kernel), decompresses
(lz4 and snappy batches in one ``decode_kernel.inflate_sections`` call per run of them, zstd
batches in one ``zstd_sections.inflate_sections`` call (one libzstd call a batch), into one side
buffer; gzip batches, and what those leave to the libraries, one ``compression.decompress`` call
each) and re-encodes legacy entries as v2 records (the slow path: legacy entries are rare); one
call of ``decode_kernel.decode_sections`` fills column buffers, which become Arrow arrays without
a copy (validity bitmaps are packed per output batch, only where there are nulls). Per-record
work is therefore the kernel's alone.

Memory: the output holds keys, values and headers once, plus per row 8 (offset) + 8
(timestamp) + 4 (timestampType) + 8 (key and value offsets) + 2 (validity) bytes; compressed
batches also hold their decompressed records while decoding, in one side buffer first sized at
three times their compressed bytes (within the budget) and doubled when that is not enough.

Inflation budget: a reader's fetch limits count compressed bytes, and a few KB of zstd can
inflate to the 256 MiB per-batch cap (``compression.MAX_DECOMPRESSED_BYTES``), so one
:func:`decode` call inflates at most ``max_inflated_bytes`` (default
:data:`MAX_INFLATED_BYTES`, 64 MiB), shared by the compressed and legacy batches it decodes.
The first such batch alone may reach the per-batch cap (so a call always advances); each later
one is decompressed with what is left of the budget (a legacy entry, rare, is re-encoded whole
while any is left); the call stops before the first batch that does not fit
(``DecodedRecords.stopped_early``; ``next_offset`` and ``end_position`` say where) and the
caller goes on from ``next_offset`` with a new fetch (a later batch's real corruption is
reported there, when it comes first). So one call holds at most max(64 MiB, one batch of up to
256 MiB) of decompressed records, and its output about as much again. :func:`decode_records`,
which returns a whole run in a list, has no budget.

Buffers come from Arrow's memory pool (its allocator keeps freed pages, so a stream of decodes
does not fault fresh pages in each time); the value buffer is reserved at the size of the records
sections and touched only as far as it is written. The first call in a process compiles the
kernels or loads them from numba's cache (:func:`warm_up` does it on purpose).

Its parts, one module each: decode_plan.py (the entries chosen, inflated within the budget),
crc_check.py (the CRCs, on a helper thread for large runs), arrow_builder.py (the kernel's buffers
as Arrow record batches); this module walks the run, runs the kernel and returns the batches.

Thread safety: decoding holds no shared state; the kernels release the GIL, so threads decode in
parallel. The input buffer must not change while it is decoded. Values here are frozen.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pyarrow as pa

from broker_embedded.errors import CorruptRecordError, TornTailError
from broker_embedded.record import decode_kernel as k
from broker_embedded.record import entry_scan as es
from broker_embedded.record.arrow_builder import ArrowBuilder, Columns
from broker_embedded.record.crc_check import CrcCheck
from broker_embedded.record.decode_plan import (
    AbortedTransactions,
    Plan,
    SideBuffer,
    Where,
    entries_in_range,
    is_v2,
    plan_decode,
    pooled,
    readonly,
)
from broker_embedded.record.entry_scan import SCAN_ERRORS, last_offset
from broker_embedded.record.kafka_schema import arrow_schema
from broker_embedded.record.varint import INT32_MAX, INT64_MAX

DEFAULT_MAX_ROWS_PER_BATCH = 65536
# Bytes of one binary column in one output record batch (Arrow int32 offsets); a module variable
# so that tests can make chunks cut on bytes without decoding gigabytes.
MAX_CHUNK_BYTES = INT32_MAX
# Decompressed bytes one decode call may inflate (see the module docstring, "Inflation budget").
MAX_INFLATED_BYTES = 64 * 1024 * 1024
_MIN_RECORD_BYTES = 7  # length varint + attributes + 5 one-byte varints


Tail = Literal["stop", "error"]


def kafka_schema(include_headers: bool = False) -> pa.Schema:
    """Spark's Kafka source schema, as Arrow (``kafka_schema.arrow_schema``, defined there)."""
    return arrow_schema(bool(include_headers))


@dataclass(frozen=True)
class DecodedRecords:
    """What :func:`decode` returns.

    ``batches``: the rows. ``num_rows``: their count. ``next_offset``: the offset after the last
    complete entry of the run (its last offset + 1, whether or not it gave rows), or
    ``start_offset`` when the run holds no complete entry: where the next fetch starts.
    ``end_position``: the index in the buffer where the walk stopped, the start of a partial
    tail, of the first batch left for the next call, or the buffer's length.
    ``stopped_early``: the inflation budget ended the call before ``end_position`` (the
    entries from there on were not decoded: go on from ``next_offset``).
    """

    batches: tuple[pa.RecordBatch, ...]
    num_rows: int
    next_offset: int
    end_position: int
    stopped_early: bool = False


def decode_records(
    buf: Any,
    *,
    topic: str,
    partition: int,
    start_offset: int = 0,
    end_offset: int = INT64_MAX,
    include_headers: bool = False,
    source: str = "<buffer>",
    base_position: int = 0,
    aborted_transactions: AbortedTransactions | None = None,
    verify_crc: bool = True,
    max_rows_per_batch: int = DEFAULT_MAX_ROWS_PER_BATCH,
    tail: Tail = "stop",
) -> list[pa.RecordBatch]:
    """The records of ``buf`` with offsets in [start_offset, end_offset) as Arrow record batches.

    ``buf``: a run of entries (bytes, bytearray, memoryview, mmap or 1-D uint8 numpy array).
    ``topic``/``partition``: the values of those columns. ``include_headers``: add the headers
    column. ``source``/``base_position``: the file or buffer name and the position of ``buf[0]``
    in it, for error messages. ``aborted_transactions``: None for read_uncommitted, else the
    (producer id, first offset) pairs of read_committed. ``verify_crc``: check each batch's
    CRC-32C. ``max_rows_per_batch``: rows per output batch. ``tail``: "stop" drops a partial
    last batch, "error" raises :class:`TornTailError`. The whole run is decoded (no inflation
    budget: the caller asked for all of it at once).
    """
    return list(
        decode(
            buf,
            topic=topic,
            partition=partition,
            start_offset=start_offset,
            end_offset=end_offset,
            include_headers=include_headers,
            source=source,
            base_position=base_position,
            aborted_transactions=aborted_transactions,
            verify_crc=verify_crc,
            max_rows_per_batch=max_rows_per_batch,
            tail=tail,
            max_inflated_bytes=None,
        ).batches
    )


def decode(
    buf: Any,
    *,
    topic: str,
    partition: int,
    start_offset: int = 0,
    end_offset: int = INT64_MAX,
    include_headers: bool = False,
    source: str = "<buffer>",
    base_position: int = 0,
    aborted_transactions: AbortedTransactions | None = None,
    verify_crc: bool = True,
    max_rows_per_batch: int = DEFAULT_MAX_ROWS_PER_BATCH,
    tail: Tail = "stop",
    max_inflated_bytes: int | None = MAX_INFLATED_BYTES,
) -> DecodedRecords:
    """:func:`decode_records`, also telling where the run ended (:class:`DecodedRecords`), and
    inflating at most ``max_inflated_bytes`` (``None``: no budget) of decompressed records
    beyond the first compressed batch (see the module docstring, "Inflation budget")."""
    _check_arguments(topic, partition, start_offset, end_offset, max_rows_per_batch, tail)
    arr = _as_uint8(buf)
    where = Where(source, base_position)
    entries, end_position = _scan(arr, where, tail)
    in_range = entries_in_range(entries, start_offset, end_offset)
    crc_check = CrcCheck(memoryview(arr), entries[in_range & is_v2(entries)], where, verify_crc)
    try:
        plan = plan_decode(
            arr, entries, in_range, where, aborted_transactions, verify_crc, max_inflated_bytes
        )
        if plan.stop is not None:
            end_position = int(entries[plan.stop, es.S_POS])
            entries = entries[: plan.stop]
        # the topic column's bytes must fit Arrow's int32 offsets too
        max_rows = min(max_rows_per_batch, INT32_MAX // max(1, len(topic.encode("utf-8"))))
        columns = _run_kernel(
            arr, plan, entries, where, start_offset, end_offset, include_headers, max_rows
        )
    finally:
        crc_check.wait()  # a CRC error comes first, as in Kafka's consumer
    batches = ArrowBuilder(topic, partition, include_headers).build(columns)
    rows = sum(b.num_rows for b in batches)
    next_offset = _next_offset(entries, start_offset)
    return DecodedRecords(tuple(batches), rows, next_offset, end_position, plan.stop is not None)


def warm_up() -> float:
    """Compile the kernels (or load them from numba's cache); return the seconds it took."""
    began = time.perf_counter()
    empty = readonly(np.empty(0, np.uint8))
    no_entries = np.empty((0, es.SCAN_FIELDS), np.int64)
    k.scan_entries(empty, 0, 0, no_entries)
    plan = Plan(np.empty((0, k.TABLE_FIELDS), np.int64), empty, np.empty(0, np.int64))
    where = Where("<warm-up>", 0)
    _run_kernel(empty, plan, no_entries, where, 0, INT64_MAX, include_headers=True, max_rows=1)
    no_sections = np.empty((0, k.INFLATE_FIELDS), np.int64)
    k.inflate_sections(empty, no_sections, SideBuffer(0).buffer, 0, 0, -1, 0)
    return time.perf_counter() - began


# -- input ---------------------------------------------------------------------------------------


def _check_arguments(
    topic: str, partition: int, start: int, end: int, max_rows: int, tail: str
) -> None:
    if not isinstance(topic, str):
        raise TypeError(f"topic must be a str, not {type(topic).__name__}")
    if not -(1 << 31) <= partition <= INT32_MAX:
        raise ValueError(f"partition {partition} outside int32")
    if not 0 <= start <= INT64_MAX or not 0 <= end <= INT64_MAX:
        raise ValueError(f"offset range [{start}, {end}) outside [0, 2^63)")
    if max_rows < 1:
        raise ValueError(f"max_rows_per_batch must be positive, not {max_rows}")
    if tail not in ("stop", "error"):
        raise ValueError(f"tail must be 'stop' or 'error', not {tail!r}")


def _as_uint8(buf: Any) -> np.ndarray:
    if isinstance(buf, np.ndarray):
        if buf.dtype != np.uint8 or buf.ndim != 1:
            raise TypeError(f"a numpy buffer must be 1-D uint8, not {buf.ndim}-D {buf.dtype}")
        return readonly(np.ascontiguousarray(buf))
    return readonly(np.frombuffer(buf, dtype=np.uint8))


def _scan(arr: np.ndarray, where: Where, tail: Tail) -> tuple[np.ndarray, int]:
    """The scan table of the complete entries, and where the walk stopped."""
    count = np.empty((0, es.SCAN_FIELDS), np.int64)
    n, status, pos, offset, detail = k.scan_entries(arr, 0, len(arr), count)
    table = np.empty((n, es.SCAN_FIELDS), np.int64)
    k.scan_entries(arr, 0, len(arr), table)
    base_offset = None if offset < 0 else int(offset)
    if status in (es.SCAN_TAIL_SHORT, es.SCAN_TAIL_TRUNCATED):
        if tail == "error":
            if status == es.SCAN_TAIL_SHORT:
                reason = f"{detail} bytes left, too few for an entry header"
            else:
                reason = f"batch of {detail} bytes but only {len(arr) - pos} remain"
            raise TornTailError(
                f"torn tail: {reason}",
                source=where.source,
                position=where.base_position + pos,
                base_offset=base_offset,
            )
        return table, int(pos)
    if status != es.SCAN_OK:
        raise where.corrupt(SCAN_ERRORS[status].format(detail=detail), pos, base_offset)
    return table, int(pos)


# -- planning --------------------------------------------------------------------------------------


def _next_offset(entries: np.ndarray, start_offset: int) -> int:
    if not len(entries):
        return start_offset
    return max(start_offset, last_offset(entries, -1) + 1)


# -- the kernel ----------------------------------------------------------------------------------


def _run_kernel(
    arr: np.ndarray,
    plan: Plan,
    entries: np.ndarray,
    where: Where,
    start_offset: int,
    end_offset: int,
    include_headers: bool,
    max_rows: int,
) -> Columns:
    table = plan.table
    lengths = table[:, k.T_END] - table[:, k.T_START]
    rows = int(np.minimum(table[:, k.T_COUNT], lengths // _MIN_RECORD_BYTES).sum())
    total = int(lengths.sum())
    chunk_bytes = max(1, MAX_CHUNK_BYTES)
    chunk_cap = rows // max_rows + 10 * (total // chunk_bytes + 1) + 1
    params = np.array(
        [start_offset, end_offset, max_rows, chunk_bytes, int(include_headers)], np.int64
    )
    columns = _allocate(rows, total, chunk_cap, include_headers)
    data = columns.data
    err, grown = k.decode_sections(
        arr,
        plan.side,
        table,
        params,
        columns.row_i64,
        columns.ts_types,
        columns.row_offs,
        columns.valid,
        columns.chunks,
        columns.counts,
        data,
    )
    if err != k.E_OK:
        raise _decode_error(int(err), columns.counts, plan, entries, where)
    return Columns(
        columns.chunks[: columns.counts[k.N_CHUNKS]],
        columns.counts,
        columns.row_i64,
        columns.ts_types,
        columns.row_offs,
        columns.valid,
        tuple(grown),
    )


def _allocate(rows: int, total: int, chunk_cap: int, include_headers: bool) -> Columns:
    """Output buffers for at most ``rows`` rows from records sections of ``total`` bytes. The
    growable ones (``decode_kernel``) start at sizes that usually need no growing."""
    headers = rows + 16 if include_headers else 0
    data = (
        pooled(min(total, 32 * rows + 64), np.uint8),  # keys
        pooled(total, np.uint8),  # values
        np.empty(max(headers, 1), np.int32),  # header key offsets
        np.empty(max(headers, 1), np.int32),  # header value offsets
        np.empty(headers, np.uint8),  # header value validity
        np.empty(16 * headers, np.uint8),  # header keys
        np.empty(16 * headers, np.uint8),  # header values
    )
    return Columns(
        chunks=np.empty((chunk_cap, k.CHUNK_FIELDS), np.int64),
        counts=np.zeros(k.COUNT_FIELDS, np.int64),
        row_i64=pooled((2, rows), np.int64),
        ts_types=pooled(rows, np.int32),
        row_offs=pooled((3 if include_headers else 2, rows + chunk_cap), np.int32),
        valid=pooled((2, rows), np.uint8),
        data=data,
    )


_DECODE_ERRORS = {
    k.E_BAD_SECTION: "records section [{pos}, {a}) outside a buffer of {b} bytes",
    k.E_VARINT: "{varint} varint",
    k.E_RECORD_LENGTH: "record length {a} runs past the batch",
    k.E_TRUNCATED: "length {a} runs past the record",
    k.E_STRAY_BYTES: "{a} stray bytes after the last field",
    k.E_OFFSET_DELTA: "record offset delta {a} outside [0, {b}]",
    k.E_TOO_FEW: "batch declares {a} records but holds only {b}",
    k.E_LEFT_OVER: "bytes left over after {a} records",
    k.E_HEADER_COUNT: "impossible header count {a}",
    k.E_NULL_HEADER_KEY: "null header key",
    k.E_NEGATIVE_LENGTH: "negative length {a}",
    k.E_CAPACITY: "decoder capacity exceeded ({a} of {b}): a bug",
    k.E_TIMESTAMP: "timestamp {a} ms is out of Spark's range (microseconds overflow 64 bits)",
}


def _decode_error(
    err: int, counts: np.ndarray, plan: Plan, entries: np.ndarray, where: Where
) -> CorruptRecordError:
    row = int(counts[k.N_ERR_TABLE_ROW])
    a, b, pos = int(counts[k.N_ERR_A]), int(counts[k.N_ERR_B]), int(counts[k.N_ERR_POS])
    varint = {1: "truncated", 2: "over-long"}.get(a, "bad")
    reason = _DECODE_ERRORS[err].format(a=a, b=b, pos=pos, varint=varint)
    if err not in (k.E_TOO_FEW, k.E_CAPACITY, k.E_BAD_SECTION):
        side = len(plan.table) > row and plan.table[row, k.T_SIDE]
        reason += f" in the record at byte {pos} of the {'decompressed ' if side else ''}records"
    if len(plan.entry_of) <= row:
        return CorruptRecordError(reason, source=where.source)
    entry = entries[plan.entry_of[row]]
    return where.corrupt(reason, int(entry[es.S_POS]), int(entry[es.S_OFFSET]))


# -- Arrow ---------------------------------------------------------------------------------------
