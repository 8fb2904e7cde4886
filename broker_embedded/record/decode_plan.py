"""The plan of one columnar decode (columnar_decoder.py): which entries of a run give rows (in
the offset range, not control batches, not in an aborted transaction as Kafka's consumer skips
them under read_committed) and their decode table (``decode_kernel.T_*`` rows), with the
compressed and legacy entries inflated into one side buffer first (:class:`Inflater`: runs of
lz4 / snappy batches in one ``decode_kernel.inflate_sections`` call, runs of zstd batches in one
``zstd_sections.inflate_sections`` call, other codecs and legacy entries one at a time), within
the inflation budget (columnar_decoder.py, "Inflation budget"): the plan stops
(:attr:`Plan.stop`) before the first batch that does not fit. Also :class:`Where` (an entry's
place, for errors) and the buffers the decoder shares (:func:`readonly`, :func:`pooled`).

Invariants: a plan's table rows are in entry order, each pointing at its records section in the
input or in the side buffer (``T_SIDE``). Thread safety: no shared state; a plan belongs to one
decode call.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from broker_embedded.errors import CorruptRecordError
from broker_embedded.record import decode_kernel as k
from broker_embedded.record import entry_scan as es
from broker_embedded.record import zstd_sections
from broker_embedded.record.batch_layout import RECORD_BATCH_OVERHEAD
from broker_embedded.record.compression import MAX_DECOMPRESSED_BYTES, CompressionType, decompress
from broker_embedded.record.control_record import ControlRecordType
from broker_embedded.record.entry_scan import last_offset, last_offsets
from broker_embedded.record.legacy_record import LegacyRecordBatch
from broker_embedded.record.memory_records_builder import MemoryRecordsBuilder
from broker_embedded.record.record_batch import (
    CODEC_MASK,
    CONTROL_MASK,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    RecordBatch,
)

AbortedTransactions = Iterable[tuple[int, int]]


@dataclass(frozen=True)
class Where:
    """Where an entry sits, for error messages."""

    source: str
    base_position: int

    def corrupt(self, reason: str, pos: int, base_offset: int | None) -> CorruptRecordError:
        return CorruptRecordError(
            reason, source=self.source, position=self.base_position + pos, base_offset=base_offset
        )


@dataclass(frozen=True)
class Plan:
    """The sections to decode: ``table`` rows (``decode_kernel.T_*``), the side buffer holding
    decompressed and re-encoded sections, and for each row its entry in the scan table.
    ``stop``: the scan-table row before which the inflation budget ended the call (``None``:
    the whole run)."""

    table: np.ndarray
    side: np.ndarray
    entry_of: np.ndarray
    stop: int | None = None


def is_v2(entries: np.ndarray) -> np.ndarray:
    return entries[:, es.S_MAGIC] == 2


def entries_in_range(entries: np.ndarray, start_offset: int, end_offset: int) -> np.ndarray:
    """Entries that may hold records in [start_offset, end_offset).

    A legacy wrapper's first offset is known only inside it, and a wrapper offset of 0 (produce
    data) says nothing about its last one: such entries are kept and filtered record by record.
    """
    v2 = is_v2(entries)
    first_known = np.where(v2, entries[:, es.S_OFFSET], -1)
    unknown_last = ~v2 & (entries[:, es.S_OFFSET] == 0)
    return ((last_offsets(entries) >= start_offset) | unknown_last) & (first_known < end_offset)


def plan_decode(
    arr: np.ndarray,
    entries: np.ndarray,
    in_range: np.ndarray,
    where: Where,
    aborted_transactions: AbortedTransactions | None,
    verify_crc: bool,
    max_inflated: int | None,
) -> Plan:
    """Choose the entries that give rows, decompress and re-encode what needs it, within the
    inflation budget ``max_inflated``: a compressed or legacy batch after the first chosen one
    that does not fit what is left of it ends the plan there (``Plan.stop``)."""
    view = memoryview(arr)
    control = is_v2(entries) & (entries[:, es.S_ATTR] & CONTROL_MASK != 0)
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
    inflater = Inflater(arr, chosen, table, where, max_inflated, verify_crc)
    row = inflater.run(np.flatnonzero(special), _fast_paths(chosen[:, es.S_MAGIC], codecs))
    if row is not None:  # over the budget: the next call starts with this batch
        return Plan(table[:row], inflater.side.array(), entry_of[:row], int(entry_of[row]))
    return Plan(table, inflater.side.array(), entry_of)


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


class Inflater:
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
        where: Where,
        max_inflated: int | None,
        verify_crc: bool,
    ) -> None:
        self._arr, self._chosen, self._table = arr, chosen, table
        self._where, self._max_inflated, self._verify_crc = where, max_inflated, verify_crc
        self.side = SideBuffer(0)

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


def _aborted(
    view: memoryview,
    entries: np.ndarray,
    aborted: list[tuple[int, int]],
    where: Where,
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


def _is_abort_marker(view: memoryview, entry: np.ndarray, where: Where, verify: bool) -> bool:
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


def _decompress(section: memoryview, entry: np.ndarray, where: Where, max_size: int) -> bytes:
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


class SideBuffer:
    """Decompressed and re-encoded records sections, back to back in one growable array from
    Arrow's pool (see :func:`pooled`): ``buffer[:size]`` is written."""

    def __init__(self, capacity: int) -> None:
        self.buffer = pooled(max(capacity, 0), np.uint8)
        self.size = 0

    def grow(self, need: int) -> None:
        """Room for at least ``need`` bytes (doubling; what is written is kept)."""
        if need <= len(self.buffer):
            return
        bigger = pooled(max(need, 2 * len(self.buffer)), np.uint8)
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
        return readonly(self.buffer[: self.size])


def _add_legacy(
    side: SideBuffer,
    row: np.ndarray,
    entry_bytes: memoryview,
    where: Where,
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


def readonly(arr: np.ndarray) -> np.ndarray:
    """A read-only view: the kernels are compiled for read-only input only (one compilation)."""
    if arr.flags.writeable:
        arr = arr.view()
        arr.flags.writeable = False
    return arr


def pooled(shape: int | tuple[int, int], dtype: type[np.generic]) -> np.ndarray:
    """An uninitialised array in Arrow's memory pool, which keeps freed pages for reuse: fresh
    pages from the OS cost about as much to fault in as the decoding itself."""
    dims = (shape,) if isinstance(shape, int) else shape
    count = math.prod(dims)
    buffer = pa.allocate_buffer(count * np.dtype(dtype).itemsize)
    array = np.frombuffer(buffer, dtype, count)
    return array if len(dims) == 1 else array.reshape(dims)
