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

Thread safety: decoding holds no shared state; the kernels release the GIL, so threads decode in
parallel. The input buffer must not change while it is decoded. Values here are frozen.
"""

from __future__ import annotations

import functools
import heapq
import math
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

import crc32c
import numpy as np
import pyarrow as pa

from broker_embedded.errors import CorruptRecordError, TornTailError
from broker_embedded.record import decode_kernel as k
from broker_embedded.record import entry_scan as es
from broker_embedded.record import zstd_sections
from broker_embedded.record.batch_layout import ATTRIBUTES_OFFSET, RECORD_BATCH_OVERHEAD
from broker_embedded.record.compression import (
    MAX_DECOMPRESSED_BYTES,
    CompressionType,
    decompress,
)
from broker_embedded.record.control_record import ControlRecordType
from broker_embedded.record.entry_scan import SCAN_ERRORS, last_offset, last_offsets
from broker_embedded.record.kafka_schema import arrow_headers_type, arrow_schema
from broker_embedded.record.legacy_record import LegacyRecordBatch
from broker_embedded.record.memory_records_builder import MemoryRecordsBuilder
from broker_embedded.record.record_batch import (
    CODEC_MASK,
    CONTROL_MASK,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    RecordBatch,
)
from broker_embedded.record.varint import INT32_MAX, INT64_MAX

DEFAULT_MAX_ROWS_PER_BATCH = 65536
# Bytes of one binary column in one output record batch (Arrow int32 offsets); a module variable
# so that tests can make chunks cut on bytes without decoding gigabytes.
MAX_CHUNK_BYTES = INT32_MAX
# Decompressed bytes one decode call may inflate (see the module docstring, "Inflation budget").
MAX_INFLATED_BYTES = 64 * 1024 * 1024
# Runs with at least this many bytes of batches to check get their CRCs checked on a thread.
PARALLEL_CRC_BYTES = 4 * 1024 * 1024
_MIN_RECORD_BYTES = 7  # length varint + attributes + 5 one-byte varints

HEADERS_TYPE = arrow_headers_type()
HEADER_FIELDS = tuple(HEADERS_TYPE.value_type)

Tail = Literal["stop", "error"]
AbortedTransactions = Iterable[tuple[int, int]]


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


@dataclass(frozen=True)
class _Where:
    """Where an entry sits, for error messages."""

    source: str
    base_position: int

    def corrupt(self, reason: str, pos: int, base_offset: int | None) -> CorruptRecordError:
        return CorruptRecordError(
            reason, source=self.source, position=self.base_position + pos, base_offset=base_offset
        )


@dataclass(frozen=True)
class _Plan:
    """The sections to decode: ``table`` rows (``decode_kernel.T_*``), the side buffer holding
    decompressed and re-encoded sections, and for each row its entry in the scan table.
    ``stop``: the scan-table row before which the inflation budget ended the call (``None``:
    the whole run)."""

    table: np.ndarray
    side: np.ndarray
    entry_of: np.ndarray
    stop: int | None = None


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
    where = _Where(source, base_position)
    entries, end_position = _scan(arr, where, tail)
    in_range = _in_range(entries, start_offset, end_offset)
    crc_check = _CrcCheck(memoryview(arr), entries[in_range & _v2(entries)], where, verify_crc)
    try:
        plan = _plan(
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
    batches = _ArrowBuilder(topic, partition, include_headers).build(columns)
    rows = sum(b.num_rows for b in batches)
    next_offset = _next_offset(entries, start_offset)
    return DecodedRecords(tuple(batches), rows, next_offset, end_position, plan.stop is not None)


def warm_up() -> float:
    """Compile the kernels (or load them from numba's cache); return the seconds it took."""
    began = time.perf_counter()
    empty = _readonly(np.empty(0, np.uint8))
    no_entries = np.empty((0, es.SCAN_FIELDS), np.int64)
    k.scan_entries(empty, 0, 0, no_entries)
    plan = _Plan(np.empty((0, k.TABLE_FIELDS), np.int64), empty, np.empty(0, np.int64))
    where = _Where("<warm-up>", 0)
    _run_kernel(empty, plan, no_entries, where, 0, INT64_MAX, include_headers=True, max_rows=1)
    no_sections = np.empty((0, k.INFLATE_FIELDS), np.int64)
    k.inflate_sections(empty, no_sections, _SideBuffer(0).buffer, 0, 0, -1, 0)
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


def _readonly(arr: np.ndarray) -> np.ndarray:
    """A read-only view: the kernels are compiled for read-only input only (one compilation)."""
    if arr.flags.writeable:
        arr = arr.view()
        arr.flags.writeable = False
    return arr


def _as_uint8(buf: Any) -> np.ndarray:
    if isinstance(buf, np.ndarray):
        if buf.dtype != np.uint8 or buf.ndim != 1:
            raise TypeError(f"a numpy buffer must be 1-D uint8, not {buf.ndim}-D {buf.dtype}")
        return _readonly(np.ascontiguousarray(buf))
    return _readonly(np.frombuffer(buf, dtype=np.uint8))


def _scan(arr: np.ndarray, where: _Where, tail: Tail) -> tuple[np.ndarray, int]:
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


def _v2(entries: np.ndarray) -> np.ndarray:
    return entries[:, es.S_MAGIC] == 2


def _in_range(entries: np.ndarray, start_offset: int, end_offset: int) -> np.ndarray:
    """Entries that may hold records in [start_offset, end_offset).

    A legacy wrapper's first offset is known only inside it, and a wrapper offset of 0 (produce
    data) says nothing about its last one: such entries are kept and filtered record by record.
    """
    v2 = _v2(entries)
    first_known = np.where(v2, entries[:, es.S_OFFSET], -1)
    unknown_last = ~v2 & (entries[:, es.S_OFFSET] == 0)
    return ((last_offsets(entries) >= start_offset) | unknown_last) & (first_known < end_offset)


def _next_offset(entries: np.ndarray, start_offset: int) -> int:
    if not len(entries):
        return start_offset
    return max(start_offset, last_offset(entries, -1) + 1)


def _plan(
    arr: np.ndarray,
    entries: np.ndarray,
    in_range: np.ndarray,
    where: _Where,
    aborted_transactions: AbortedTransactions | None,
    verify_crc: bool,
    max_inflated: int | None,
) -> _Plan:
    """Choose the entries that give rows, decompress and re-encode what needs it, within the
    inflation budget ``max_inflated``: a compressed or legacy batch after the first chosen one
    that does not fit what is left of it ends the plan there (``_Plan.stop``)."""
    view = memoryview(arr)
    control = _v2(entries) & (entries[:, es.S_ATTR] & CONTROL_MASK != 0)
    wanted = in_range & ~control
    if aborted_transactions is not None:
        wanted &= ~_aborted(view, entries, list(aborted_transactions), where, verify_crc)
    chosen = entries[wanted]
    table = np.zeros((len(chosen), k.TABLE_FIELDS), np.int64)
    table[:, _TABLE_COLUMNS] = chosen[:, _SCAN_COLUMNS]
    table[:, k.T_START] += RECORD_BATCH_OVERHEAD
    table[:, k.T_END] += chosen[:, es.S_POS]
    table[:, k.T_LOG_APPEND] = (chosen[:, es.S_ATTR] & TIMESTAMP_TYPE_MASK) != 0
    table[:, k.T_TS_TYPE] = table[:, k.T_LOG_APPEND]
    codecs = chosen[:, es.S_ATTR] & CODEC_MASK
    special = (chosen[:, es.S_MAGIC] != 2) | (codecs != 0)
    entry_of = np.flatnonzero(wanted)
    inflater = _Inflater(arr, chosen, table, where, max_inflated, verify_crc)
    row = inflater.run(np.flatnonzero(special), _fast_paths(chosen[:, es.S_MAGIC], codecs))
    if row is not None:  # over the budget: the next call starts with this batch
        return _Plan(table[:row], inflater.side.array(), entry_of[:row], int(entry_of[row]))
    return _Plan(table, inflater.side.array(), entry_of)


# How a run of compressed v2 batches is inflated, by the codec of its rows (``_fast_paths``):
# 0, the slow path (``compression.decompress``, one call a batch), or an index in _FAST_PATHS.
_SLOW, _KERNEL, _ZSTD = 0, 1, 2
_FAST_PATHS = {_KERNEL: k.inflate_sections, _ZSTD: zstd_sections.inflate_sections}


def _fast_paths(magics: np.ndarray, codecs: np.ndarray) -> np.ndarray:
    """Per row, the path that inflates it: lz4 and snappy in the compiled kernel, zstd through
    libzstd straight into the side buffer (when available), legacy and gzip slowly."""
    paths = np.zeros(len(codecs), np.int8)
    v2 = magics == 2
    paths[v2 & ((codecs == k.CODEC_LZ4) | (codecs == k.CODEC_SNAPPY))] = _KERNEL
    if zstd_sections.AVAILABLE:
        paths[v2 & (codecs == CompressionType.ZSTD)] = _ZSTD
    return paths


class _Inflater:
    """Decompresses (v2) and re-encodes (legacy) the special rows of a plan's decode table into
    one side buffer, within the inflation budget: runs of lz4 / snappy batches in one
    ``decode_kernel.inflate_sections`` call, runs of zstd batches in one
    ``zstd_sections.inflate_sections`` call, the other codecs (and any row those give back)
    through ``compression.decompress``."""

    def __init__(
        self,
        arr: np.ndarray,
        chosen: np.ndarray,
        table: np.ndarray,
        where: _Where,
        max_inflated: int | None,
        verify_crc: bool,
    ) -> None:
        self._arr, self._chosen, self._table = arr, chosen, table
        self._where, self._max_inflated, self._verify_crc = where, max_inflated, verify_crc
        self.side = _SideBuffer(0)

    def run(self, rows: np.ndarray, paths: np.ndarray) -> int | None:
        """Inflate the table's ``rows`` in order; the row where the budget ends the plan, or
        None. ``paths``: per table row, the path that inflates it (``_fast_paths``)."""
        # records inflate about 1.5 to 4 times: a first guess, the buffer grows when they do more
        guess = 3 * int(self._chosen[rows, es.S_SIZE].sum())
        self.side.grow(guess if self._max_inflated is None else min(guess, self._max_inflated))
        how = paths[rows]
        i = 0
        while i < len(rows):
            if how[i] != _SLOW:
                others = np.flatnonzero(how[i:] != how[i])
                run_end = i + int(others[0]) if len(others) else len(rows)
                i += self._fast_run(rows[i:run_end], _FAST_PATHS[int(how[i])])
                if i == run_end:
                    continue
            row = int(rows[i])
            if not self._inflate_slowly(row):
                return row
            i += 1
        return None

    def _room(self, row: int) -> int:
        """Bytes the batch of table row ``row`` may inflate to: the per-batch cap for the
        first row, then what is left of the budget."""
        if row == 0 or self._max_inflated is None:
            return MAX_DECOMPRESSED_BYTES
        return min(self._max_inflated - self.side.size, MAX_DECOMPRESSED_BYTES)

    def _fast_run(self, rows: np.ndarray, inflate: Callable[..., tuple[int, int, int]]) -> int:
        """Inflate ``rows`` with ``inflate`` (``decode_kernel.inflate_sections``'s contract);
        how many it finished (the next one, if any, needs the slow path)."""
        spans = np.empty((len(rows), k.INFLATE_FIELDS), np.int64)
        entries = self._chosen[rows]
        spans[:, k.I_START] = entries[:, es.S_POS] + RECORD_BATCH_OVERHEAD
        spans[:, k.I_END] = entries[:, es.S_POS] + entries[:, es.S_SIZE]
        spans[:, k.I_CODEC] = entries[:, es.S_ATTR] & CODEC_MASK
        budget = -1 if self._max_inflated is None else self._max_inflated
        done = 0
        while done < len(rows):
            status, reached, used = inflate(
                self._arr,
                spans[done:],
                self.side.buffer,
                self.side.size,
                self._room(int(rows[done])),
                budget,
                MAX_DECOMPRESSED_BYTES,
            )
            inflated = rows[done : done + reached]
            self._table[inflated, k.T_SIDE] = 1
            self._table[inflated, k.T_START] = spans[done : done + reached, k.I_OUT_START]
            self._table[inflated, k.T_END] = spans[done : done + reached, k.I_OUT_END]
            self.side.size = int(used)
            done += int(reached)
            if status != k.INFLATE_NO_ROOM:
                break
            # at least doubles: at most log2(MAX_DECOMPRESSED_BYTES) rounds per batch
            self.side.grow(len(self.side.buffer) + 1)
        return done

    def _inflate_slowly(self, row: int) -> bool:
        """Decompress (v2) or re-encode (legacy) table row ``row``'s entry into the side
        buffer; ``False`` when it needs more than its room (nothing is added). Below the
        per-batch cap, a failure is taken for a batch too large for the room: the next call
        decompresses it first, with the whole cap, and reports it if it is corrupt."""
        room = self._room(row)
        if room <= 0:
            return False
        entry, where = self._chosen[row], self._where
        pos, size = int(entry[es.S_POS]), int(entry[es.S_SIZE])
        view = memoryview(self._arr)
        if entry[es.S_MAGIC] != 2:
            _add_legacy(
                self.side, self._table[row], view[pos : pos + size], where, pos, self._verify_crc
            )
            return True
        section = view[pos + RECORD_BATCH_OVERHEAD : pos + size]
        try:
            self.side.add_section(self._table[row], _decompress(section, entry, where, room))
        except CorruptRecordError:
            if room >= MAX_DECOMPRESSED_BYTES:
                raise
            return False
        return True


# decode table columns copied from scan table columns (T_START and T_END then made positions)
_TABLE_COLUMNS = [k.T_START, k.T_END, k.T_BASE_OFFSET, k.T_LAST_DELTA, k.T_COUNT]
_TABLE_COLUMNS += [k.T_BASE_TS, k.T_MAX_TS]
_SCAN_COLUMNS = [
    es.S_POS,
    es.S_SIZE,
    es.S_OFFSET,
    es.S_LAST_DELTA,
    es.S_COUNT,
    es.S_BASE_TS,
    es.S_MAX_TS,
]


class _CrcCheck:
    """The CRC-32C check of v2 batches: at once for small runs; for large ones on a helper
    thread, overlapping decompression and the kernel (which release the GIL) on another core
    (measured: 40-45 ms instead of 53-65 ms for 1 M records). :meth:`wait` raises the first
    mismatch."""

    def __init__(self, view: memoryview, entries: np.ndarray, where: _Where, enabled: bool):
        self._error: CorruptRecordError | None = None
        self._thread: threading.Thread | None = None
        if not enabled:
            return
        if int(entries[:, es.S_SIZE].sum()) < PARALLEL_CRC_BYTES:
            _verify_crcs(view, entries, where, release_gil=-1)
            return
        self._thread = threading.Thread(
            target=self._run, args=(view, entries, where), name="kafkalog-crc", daemon=True
        )
        self._thread.start()

    def _run(self, view: memoryview, entries: np.ndarray, where: _Where) -> None:
        try:
            # releasing the GIL in every call lets the decoding thread go on at once
            _verify_crcs(view, entries, where, release_gil=1)
        except CorruptRecordError as e:
            self._error = e

    def wait(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            raise self._error


def crc_mismatch(
    view: memoryview, entries: np.ndarray, release_gil: int = -1
) -> tuple[int, int, int] | None:
    """The first v2 batch of ``entries`` (a ``decode_kernel.scan_entries`` table of ``view``)
    whose CRC-32C (``record_batch.crc32c_of``'s computation) differs from the stored one, as
    (row, stored, computed); None when all match. ``release_gil`` is the ``crc32c`` package's
    ``gil_release_mode``."""
    positions = entries[:, es.S_POS].tolist()
    ends = (entries[:, es.S_POS] + entries[:, es.S_SIZE]).tolist()
    crcs = entries[:, es.S_CRC].tolist()
    for i, (pos, end, stored) in enumerate(zip(positions, ends, crcs, strict=True)):
        actual = crc32c.crc32c(view[pos + ATTRIBUTES_OFFSET : end], gil_release_mode=release_gil)
        if actual != stored:
            return i, stored, actual
    return None


def _verify_crcs(view: memoryview, entries: np.ndarray, where: _Where, release_gil: int) -> None:
    """Raise for the first batch whose CRC does not match (:func:`crc_mismatch`)."""
    bad = crc_mismatch(view, entries, release_gil)
    if bad is not None:
        i, stored, actual = bad
        reason = f"CRC mismatch: stored {stored:#010x}, computed {actual:#010x}"
        raise where.corrupt(reason, int(entries[i, es.S_POS]), int(entries[i, es.S_OFFSET]))


def _aborted(
    view: memoryview,
    entries: np.ndarray,
    aborted: list[tuple[int, int]],
    where: _Where,
    verify_crc: bool,
) -> np.ndarray:
    """Which entries belong to aborted transactions (Kafka's consumer, read_committed)."""
    skip = np.zeros(len(entries), bool)
    if not aborted:
        return skip
    queue = [(int(first), int(pid)) for pid, first in aborted]
    heapq.heapify(queue)
    aborted_producers: set[int] = set()
    producers = np.flatnonzero((entries[:, es.S_MAGIC] == 2) & (entries[:, es.S_PRODUCER_ID] >= 0))
    for i in producers.tolist():
        entry = entries[i]
        last = last_offset(entries, i)
        while queue and queue[0][0] <= last:
            aborted_producers.add(heapq.heappop(queue)[1])
        producer_id = int(entry[es.S_PRODUCER_ID])
        if entry[es.S_ATTR] & CONTROL_MASK:
            if _is_abort_marker(view, entry, where, verify_crc):
                aborted_producers.discard(producer_id)
        elif entry[es.S_ATTR] & TRANSACTIONAL_MASK and producer_id in aborted_producers:
            skip[i] = True
    return skip


def _is_abort_marker(view: memoryview, entry: np.ndarray, where: _Where, verify: bool) -> bool:
    pos, size = int(entry[es.S_POS]), int(entry[es.S_SIZE])
    batch = RecordBatch(view[pos : pos + size], where.source, where.base_position + pos)
    if verify:
        batch.ensure_valid()
    first = next(iter(batch.records()), None)
    if first is None:
        return False
    record_type = ControlRecordType.parse_key(
        first.key, source=batch.source, position=batch.position, base_offset=batch.base_offset
    )
    return record_type == ControlRecordType.ABORT


def _decompress(section: memoryview, entry: np.ndarray, where: _Where, max_size: int) -> bytes:
    """A compressed batch's records section, decompressed (one ``decompress`` call of at most
    ``max_size`` bytes)."""
    pos, base_offset = int(entry[es.S_POS]), int(entry[es.S_OFFSET])
    codec_id = int(entry[es.S_ATTR]) & CODEC_MASK
    try:
        codec = CompressionType(codec_id)
    except ValueError:
        raise where.corrupt(f"unknown compression codec id {codec_id}", pos, base_offset) from None
    try:
        return decompress(codec, section, max_size)
    except CorruptRecordError as e:
        raise where.corrupt(e.reason, pos, base_offset) from e


class _SideBuffer:
    """Decompressed and re-encoded records sections, back to back in one growable array from
    Arrow's pool (see :func:`_pooled`): ``buffer[:size]`` is written."""

    def __init__(self, capacity: int) -> None:
        self.buffer = _pooled(max(capacity, 0), np.uint8)
        self.size = 0

    def grow(self, need: int) -> None:
        """Room for at least ``need`` bytes (doubling; what is written is kept)."""
        if need <= len(self.buffer):
            return
        bigger = _pooled(max(need, 2 * len(self.buffer)), np.uint8)
        bigger[: self.size] = self.buffer[: self.size]
        self.buffer = bigger

    def add_section(self, row: np.ndarray, data: bytes | memoryview) -> None:
        self.grow(self.size + len(data))
        row[k.T_SIDE] = 1
        row[k.T_START] = self.size
        self.buffer[self.size : self.size + len(data)] = np.frombuffer(data, np.uint8)
        self.size += len(data)
        row[k.T_END] = self.size

    def array(self) -> np.ndarray:
        """The sections written, read-only."""
        return _readonly(self.buffer[: self.size])


def _add_legacy(
    side: _SideBuffer,
    row: np.ndarray,
    entry_bytes: memoryview,
    where: _Where,
    pos: int,
    verify_crc: bool,
) -> None:
    """Re-encode a magic 0/1 entry's records as a v2 records section (the slow path)."""
    entry = LegacyRecordBatch(entry_bytes, where.source, where.base_position + pos)
    if verify_crc:
        entry.ensure_valid()
    records = list(entry.records())
    try:
        builder = MemoryRecordsBuilder(records[0].offset)
        for record in records:
            builder.append_record(record)
        built = RecordBatch(builder.build())
    except ValueError as e:
        raise where.corrupt(f"legacy entry cannot be read: {e}", pos, entry.last_offset) from e
    side.add_section(row, built.buffer[RECORD_BATCH_OVERHEAD:])
    row[k.T_BASE_OFFSET] = built.base_offset
    row[k.T_LAST_DELTA] = built.last_offset_delta
    row[k.T_COUNT] = built.records_count
    row[k.T_BASE_TS] = built.base_timestamp
    row[k.T_LOG_APPEND] = 0  # the records carry the wrapper's LogAppendTime themselves
    row[k.T_TS_TYPE] = int(entry.timestamp_type)


# -- the kernel ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Columns:
    """The kernel's output (layout: ``decode_kernel``), trimmed to what was written."""

    chunks: np.ndarray
    counts: np.ndarray
    row_i64: np.ndarray
    ts_types: np.ndarray
    row_offs: np.ndarray
    valid: np.ndarray
    data: tuple[np.ndarray, ...]


def _run_kernel(
    arr: np.ndarray,
    plan: _Plan,
    entries: np.ndarray,
    where: _Where,
    start_offset: int,
    end_offset: int,
    include_headers: bool,
    max_rows: int,
) -> _Columns:
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
    return _Columns(
        columns.chunks[: columns.counts[k.N_CHUNKS]],
        columns.counts,
        columns.row_i64,
        columns.ts_types,
        columns.row_offs,
        columns.valid,
        tuple(grown),
    )


def _allocate(rows: int, total: int, chunk_cap: int, include_headers: bool) -> _Columns:
    """Output buffers for at most ``rows`` rows from records sections of ``total`` bytes. The
    growable ones (``decode_kernel``) start at sizes that usually need no growing."""
    headers = rows + 16 if include_headers else 0
    data = (
        _pooled(min(total, 32 * rows + 64), np.uint8),  # keys
        _pooled(total, np.uint8),  # values
        np.empty(max(headers, 1), np.int32),  # header key offsets
        np.empty(max(headers, 1), np.int32),  # header value offsets
        np.empty(headers, np.uint8),  # header value validity
        np.empty(16 * headers, np.uint8),  # header keys
        np.empty(16 * headers, np.uint8),  # header values
    )
    return _Columns(
        chunks=np.empty((chunk_cap, k.CHUNK_FIELDS), np.int64),
        counts=np.zeros(k.COUNT_FIELDS, np.int64),
        row_i64=_pooled((2, rows), np.int64),
        ts_types=_pooled(rows, np.int32),
        row_offs=_pooled((3 if include_headers else 2, rows + chunk_cap), np.int32),
        valid=_pooled((2, rows), np.uint8),
        data=data,
    )


def _pooled(shape: int | tuple[int, int], dtype: type[np.generic]) -> np.ndarray:
    """An uninitialised array in Arrow's memory pool, which keeps freed pages for reuse: fresh
    pages from the OS cost about as much to fault in as the decoding itself."""
    dims = (shape,) if isinstance(shape, int) else shape
    count = math.prod(dims)
    buffer = pa.allocate_buffer(count * np.dtype(dtype).itemsize)
    array = np.frombuffer(buffer, dtype, count)
    return array if len(dims) == 1 else array.reshape(dims)


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
    err: int, counts: np.ndarray, plan: _Plan, entries: np.ndarray, where: _Where
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


class _ArrowBuilder:
    """Arrow record batches over the kernel's buffers (no copy but validity bitmaps)."""

    def __init__(self, topic: str, partition: int, include_headers: bool) -> None:
        self._topic = topic.encode("utf-8")
        self._partition = partition
        self._schema = kafka_schema(include_headers)
        self._include_headers = include_headers

    def build(self, columns: _Columns) -> list[pa.RecordBatch]:
        counts = columns.counts
        totals = [counts[n] for n in (k.N_ROWS, k.N_KEY, k.N_VALUE, k.N_HEADERS, k.N_HKEY)]
        starts = columns.chunks.tolist()
        # where each chunk ends: where the next one starts, the last one at the totals
        ends = [row[: k.C_HVALUE + 1] for row in starts[1:]]
        ends.append([*totals, counts[k.N_HVALUE]])
        return [self._batch(columns, c, starts[c], ends[c]) for c in range(len(starts))]

    def _batch(self, cols: _Columns, c: int, start: list[int], end: list[int]) -> pa.RecordBatch:
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


def _headers(cols: _Columns, c: int, start: list[int], end: list[int]) -> pa.Array:
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
