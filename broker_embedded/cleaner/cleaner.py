"""The cleaner for one log (Kafka's ``LogCleaner.Cleaner``): one round of compaction.

A round (:meth:`Cleaner.clean`, Kafka's ``doClean``):

1. The offsets (``log_to_clean.cleanable_offsets``): the first dirty offset is the
   ``cleaner-offset-checkpoint`` value (the log start offset without one, or when it lies below
   the log start or above the log end); the first uncleanable offset is the lowest of the last
   stable offset, the active segment's base offset and the base offset of the first dirty
   segment with a record newer than ``min.compaction.lag.ms``, rounded down to a segment
   boundary. The dirty section is ``[first dirty, first uncleanable)``.
2. The offset map (:class:`SkimpyOffsetMap`) is built over the dirty section, oldest first
   (later offsets overwrite): every keyed record at or above the first dirty offset, except the
   records of aborted transactions (from the ``.txnindex`` files) and control batches. When the
   map reaches its bound (``slots * load factor``) the round stops there: its end offset is the
   map's latest offset + 1 and the rest of the dirty section waits for the next round, as in
   Kafka. Otherwise the end offset is the first uncleanable offset.
3. The segments below the end offset, from the first, are grouped (Kafka's
   ``groupSegmentsBySize``: consecutive segments while the group's ``.log`` stays within
   ``segment.bytes``, its indexes within ``segment.index.bytes`` and its offsets within an int32
   of the group's base). Each group is recopied into ``<first base>.log.cleaned`` (with its
   indexes and ``.txnindex``), fsynced, and swapped in for the group's segments by
   ``UnifiedLog.replace_segments`` (crash-safe renames; see cleaning_session.py). A write that fails
   (a full disk: ``ENOSPC``) deletes the group's ``.cleaned`` files and raises
   :class:`KafkaStorageError` naming the partition and the file: the group's segments stay as
   they were, and the groups swapped in before it stay (each is complete and valid).
4. The caller records the end offset in ``cleaner-offset-checkpoint`` (log_cleaner_manager.py).

What is kept, per batch (Kafka's cleaner ``RecordFilter`` and ``MemoryRecords.filterTo``):

- a record above the map's latest offset: always; at or below it: only with a key, an offset at
  least the key's offset in the map, and a value, or a tombstone whose batch has no delete
  horizon yet or one still in the future (``now < horizon``); keyless records go;
- transactions (``CleanedTransactionMetadata``): the batches of an aborted transaction go;
  an ABORT marker stays while this pass saw batches of its transaction (and its entry goes to
  the cleaned segment's ``.txnindex``), a COMMIT marker while this pass saw batches of its
  transaction; a marker that may go is kept until its batch's delete horizon passed (the first
  cleaning that may drop it sets the horizon), then removed;
- a batch with records kept and no horizon to set is copied byte for byte; a batch that holds
  kept tombstones (or a marker that may go) and no horizon gets one: ``now +
  delete.retention.ms`` in baseTimestamp with attribute bit 6, the timestamp deltas recomputed;
  any other change rewrites the batch with its base offset, last offset, codec, producer fields
  and leader epoch (cleaner_kernel.py);
- a batch left without records goes, except (as an empty batch, Kafka's ``writeEmptyHeader``)
  the batch holding an active producer's last data offset (or, for a producer whose last entry
  is a marker, that marker's batch of the same epoch), the batch ending just below the round's
  first uncleanable offset (Kafka keeps the last batch of the round), and, in this project, the
  last batch of every group: a ``.swap`` segment's next offset then covers every segment it
  replaces, which makes recovery after a crash exact (storage/cleaning_session.py);
- legacy (magic 0/1) entries: an uncompressed entry is one record, kept or removed as above;
  a compressed wrapper is kept whole when any record in it is kept; their tombstones are kept.

Offsets never change, the order is kept, and the active segment and everything at or above the
first uncleanable offset (so above the last stable offset and the high watermark) are never
touched: a reader from the start sees at least the last value of every key, a reader in the
head sees everything.

I/O and memory: segments are read with ``pread`` into a window buffer (``window_bytes``, grown
to hold the largest batch), never mapped, so a reader or a concurrent truncation cannot fault
the cleaner and the resident memory is the map plus a few window-sized buffers whatever the log
size. Per window, ``entry_scan.scan_window`` reads the batch headers into a table, every
v2 batch's CRC-32C is checked (a mismatch is a :class:`CorruptRecordError` naming the file,
position and offset: a rewritten batch gets a new CRC, which would hide the damage), numpy and
a short Python pass over the transactional, control, compressed and legacy batches only build
the plan, and one kernel call (cleaner_kernel.py) hashes, looks up and writes the records: no
Python object per record.

Thread safety: a :class:`Cleaner` (its map and buffers) belongs to one thread; the log is
protected by its cleaning session (``UnifiedLog.cleaning_session``): one cleaner per log.
"""

from __future__ import annotations

import logging
import os
import struct
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from broker_embedded.cleaner import cleaner_kernel as ck
from broker_embedded.cleaner.cleaned_transaction_metadata import (
    CleanedTransactionMetadata,
    control_record_type,
)
from broker_embedded.cleaner.cleaner_stats import CleanerStats, CleanResult
from broker_embedded.cleaner.cleaner_window import Window, WindowReader
from broker_embedded.cleaner.log_to_clean import OffsetsToClean, cleanable_offsets
from broker_embedded.cleaner.segment_groups import Segment, cleanable_segments, group_segments
from broker_embedded.cleaner.skimpy_offset_map import MD5_SCRATCH_BYTES, SkimpyOffsetMap
from broker_embedded.errors import KafkaLogError, KafkaStorageError
from broker_embedded.record import decode_kernel as dk
from broker_embedded.record import entry_scan as es
from broker_embedded.record.batch_layout import (
    ATTRIBUTES_OFFSET,
    BASE_TIMESTAMP_OFFSET,
    BATCH_LENGTH_OFFSET,
    CRC_OFFSET,
    LOG_OVERHEAD,
    MAX_TIMESTAMP_OFFSET,
    RECORD_BATCH_OVERHEAD,
    RECORDS_COUNT_OFFSET,
)
from broker_embedded.record.compression import CompressionType, compress
from broker_embedded.record.control_record import ControlRecordType
from broker_embedded.record.legacy_record import LegacyRecordBatch
from broker_embedded.record.record_batch import (
    CODEC_MASK,
    CONTROL_MASK,
    DELETE_HORIZON_MASK,
    TRANSACTIONAL_MASK,
    crc32c_of,
)
from broker_embedded.storage.cleaning_session import (
    CleaningAbortedError,
    CleaningSession,
    LastRecord,
)
from broker_embedded.storage.log_file_utils import LOG_SUFFIX, segment_file_stem
from broker_embedded.storage.log_loader import CLEANED_SUFFIX
from broker_embedded.storage.offset_index import INDEX_SUFFIX, OffsetIndex
from broker_embedded.storage.segment_writer import wall_clock_ms
from broker_embedded.storage.time_index import TIME_INDEX_SUFFIX, TimeIndex
from broker_embedded.storage.transaction_index import FILE_SUFFIX as TXN_INDEX_SUFFIX
from broker_embedded.storage.transaction_index import AbortedTxn
from broker_embedded.storage.unified_log import UnifiedLog

_log = logging.getLogger(__name__)

DEFAULT_WINDOW_BYTES = 4 << 20
_HEADER_PATCH = struct.Struct(">i")


# -- results ---------------------------------------------------------------------------------


# -- transactions ----------------------------------------------------------------------------


# -- segments and groups ---------------------------------------------------------------------


# -- the cleaner -------------------------------------------------------------------------------


class Cleaner(WindowReader):
    """Cleans one log at a time with a bounded offset map; see the module docstring.

    ``offset_map``: the map (its memory is the cleaner's bound). ``window_bytes``: bytes read
    per window. ``should_stop``: polled between windows (a shutting-down cleaner thread).
    """

    def __init__(
        self,
        offset_map: SkimpyOffsetMap,
        *,
        window_bytes: int = DEFAULT_WINDOW_BYTES,
        clock_ms: Callable[[], int] = wall_clock_ms,
        should_stop: Callable[[], bool] | None = None,
    ) -> None:
        self.offset_map = offset_map
        self.window_bytes = window_bytes
        self._clock = clock_ms
        self._should_stop = should_stop
        self._read = np.empty(window_bytes, np.uint8)
        self._side = np.empty(0, np.uint8)
        self._out = np.empty(0, np.uint8)
        self._raw = np.empty(0, np.uint8)
        self._recs = np.empty((0, 4), np.int64)
        self._scratch = np.zeros(MD5_SCRATCH_BYTES, np.uint8)
        self._result = np.zeros(ck.RESULT_FIELDS, np.int64)
        self._puts = np.zeros((ck.LOOK_AHEAD, 3), np.int64)
        self._ahead = np.zeros((ck.LOOK_AHEAD, ck.G_FIELDS), np.int64)

    # -- a round -----------------------------------------------------------------------------

    def clean(
        self,
        log: UnifiedLog,
        last_clean_offset: int | None = None,
        *,
        now_ms: int | None = None,
        offsets: OffsetsToClean | None = None,
    ) -> CleanResult:
        """One round over ``log`` from its checkpointed first dirty offset
        (``last_clean_offset``); :class:`CleaningAbortedError` when the log closed, was
        truncated or lost a segment meanwhile (what was swapped in so far stays: it is valid)."""
        now = self._clock() if now_ms is None else now_ms
        with log.cleaning_session() as session:
            try:
                return self._round(log, session, last_clean_offset, now, offsets)
            except FileNotFoundError as e:  # retention or a truncation removed a segment
                raise CleaningAbortedError(f"{log}: {e.filename} disappeared") from e

    def _round(
        self,
        log: UnifiedLog,
        session: CleaningSession,
        last_clean_offset: int | None,
        now: int,
        offsets: OffsetsToClean | None,
    ) -> CleanResult:
        snap = log.cleaning_snapshot()
        if offsets is None:
            offsets = cleanable_offsets(log, snap, last_clean_offset, now)
        first_dirty = offsets.first_dirty_offset
        uncleanable = offsets.first_uncleanable_offset
        stats = CleanerStats()
        if uncleanable <= first_dirty or not snap.base_offsets:
            return CleanResult(first_dirty, uncleanable, first_dirty, 0, 0.0, False, stats)
        segments = cleanable_segments(snap)
        started = time.monotonic()
        full = self._build_offset_map(log, segments, first_dirty, uncleanable, session, stats)
        end_offset = self.offset_map.latest_offset + 1
        stats.map_seconds = time.monotonic() - started
        started = time.monotonic()
        to_clean = [s for s in segments if s.base < end_offset]
        groups = group_segments(
            to_clean,
            log.directory,
            log.config.segment_bytes,
            log.config.segment_index_bytes,
            uncleanable,
        )
        upper = groups[-1][-1].next_base if groups else end_offset
        txns = CleanedTransactionMetadata(log.collect_aborted_transactions(segments[0].base, upper))
        horizon = now + log.config.delete_retention_ms
        for group in groups:
            self._clean_group(log, group, txns, now, horizon, uncleanable, session, stats)
        stats.clean_seconds = time.monotonic() - started
        m = self.offset_map
        return CleanResult(first_dirty, uncleanable, end_offset, m.size, m.utilization, full, stats)

    def _check(self, session: CleaningSession) -> None:
        session.check()
        if self._should_stop is not None and self._should_stop():
            raise CleaningAbortedError(f"cleaning of {session.log} stopped: the cleaner stops")

    # -- reading windows ---------------------------------------------------------------------

    # -- building the map --------------------------------------------------------------------

    def _build_offset_map(
        self,
        log: UnifiedLog,
        segments: list[Segment],
        start: int,
        end: int,
        session: CleaningSession,
        stats: CleanerStats,
    ) -> bool:
        """Kafka's ``buildOffsetMap``; True when the map reached its bound."""
        m = self.offset_map
        m.clear()
        txns = CleanedTransactionMetadata(log.collect_aborted_transactions(start, end))
        dirty = [s for s in segments if s.next_base > start and s.base < end]
        for s in dirty:
            if self._map_segment(log, s, start, txns, session, stats):
                return True
            m.update_latest_offset(min(s.next_base, end) - 1)
        return False

    def _map_segment(
        self,
        log: UnifiedLog,
        segment: Segment,
        start: int,
        txns: CleanedTransactionMetadata,
        session: CleaningSession,
        stats: CleanerStats,
    ) -> bool:
        m = self.offset_map
        path = log.directory / (segment_file_stem(segment.base) + LOG_SUFFIX)
        position = 0
        if start > segment.base:
            try:
                index = OffsetIndex.load(path.with_suffix(INDEX_SUFFIX), segment.base)
                position = index.lookup(start).position
            except (OSError, KafkaLogError):  # a missing or bad index: scan from the start
                position = 0
        for window in self._windows(path, position, segment.size):
            self._check(session)
            plan = self._base_plan(window)
            self._plan_map_transactions(window, plan, txns)
            stats.map_bytes_read += len(window.data)
            r, n = 0, len(plan)
            while r < n:
                ck.map_rows(
                    window.data,
                    self._side,
                    plan,
                    r,
                    n,
                    start,
                    m.words,
                    m.state,
                    self._scratch,
                    self._puts,
                    self._result,
                )
                res = self._result
                stats.map_records_read += int(res[ck.R_RECORDS])
                status, row = int(res[ck.R_STATUS]), int(res[ck.R_ROW])
                if status == ck.MAP_ERROR:
                    raise self._decode_error(
                        path,
                        window,
                        plan,
                        row,
                        int(res[ck.R_ERR]),
                        int(res[ck.R_ERR_A]),
                        int(res[ck.R_ERR_B]),
                    )
                if status == ck.MAP_FULL:
                    return True
                if status == ck.MAP_STOPPED:
                    if self._map_legacy(window, plan, row, start):
                        return True
                    r = row + 1
                    continue
                r = n
        return False

    def _map_legacy(self, window: Window, plan: np.ndarray, row: int, start: int) -> bool:
        """Put the keys of a legacy entry (the slow path); True when the map is full."""
        m = self.offset_map
        pos, size = int(plan[row, ck.P_POS]), int(plan[row, ck.P_SIZE])
        entry = LegacyRecordBatch(memoryview(window.data)[pos : pos + size], "<legacy>", pos)
        for record in entry.records():
            if record.key is not None and record.offset >= start:
                if m.is_full:
                    return True
                m.put(record.key, record.offset)
        if entry.last_offset >= start:
            m.update_latest_offset(entry.last_offset)
        return False

    def _plan_map_transactions(
        self, window: Window, plan: np.ndarray, txns: CleanedTransactionMetadata
    ) -> None:
        """Control batches and aborted transactional batches put no key."""
        t = window.table
        special = (t[:, es.S_MAGIC] == 2) & (
            (t[:, es.S_ATTR] & (TRANSACTIONAL_MASK | CONTROL_MASK)) != 0
        )
        for r in np.nonzero(special)[0].tolist():
            pid = int(t[r, es.S_PRODUCER_ID])
            last = es.last_offset(t, r)
            if t[r, es.S_ATTR] & CONTROL_MASK:
                txns.on_control_batch(pid, last, self._control_type_of(window, t, r))
                plan[r, ck.P_MODE] = ck.MODE_DROP_ALL
            elif txns.on_batch(pid, last):
                plan[r, ck.P_MODE] = ck.MODE_DROP_ALL

    def _control_type_of(self, window: Window, t: np.ndarray, r: int) -> ControlRecordType | None:
        pos, size = int(t[r, es.S_POS]), int(t[r, es.S_SIZE])
        return control_record_type(
            memoryview(window.data)[pos : pos + size], "<control batch>", window.position + pos
        )

    # -- recopying a group -------------------------------------------------------------------

    def _clean_group(
        self,
        log: UnifiedLog,
        group: list[Segment],
        txns: CleanedTransactionMetadata,
        now: int,
        horizon: int,
        upper_bound: int,
        session: CleaningSession,
        stats: CleanerStats,
    ) -> None:
        """Kafka's ``cleanSegments``: recopy ``group`` into ``<first base>.*.cleaned`` and swap
        it in."""
        self._check(session)
        d = log.directory
        base = group[0].base
        stem = segment_file_stem(base)
        cleaned = [
            d / (stem + x + CLEANED_SUFFIX)
            for x in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
        ]
        producers = log.last_records_of_active_producers()
        txns.cleaned_index = []
        last_nonempty = max((i for i, s in enumerate(group) if s.size > 0), default=-1)
        indexes = _GroupIndexes(base, log.config.index_interval_bytes)
        with _storage_failure(log, cleaned[0]):
            fd = os.open(cleaned[0], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        written = 0
        try:
            for i, s in enumerate(group):
                path = d / (segment_file_stem(s.base) + LOG_SUFFIX)
                for window in self._windows(path, 0, s.size):
                    self._check(session)
                    group_last = i == last_nonempty and window.is_last
                    pieces, rows = self._clean_window(
                        path, window, txns, producers, now, horizon, upper_bound, group_last, stats
                    )
                    if len(rows):
                        rows[:, 0] += written
                        indexes.add(rows)
                    with _storage_failure(log, cleaned[0]):
                        for piece in pieces:
                            _write_all(fd, piece)
                            written += len(piece)
            with _storage_failure(log, cleaned[0]):
                os.fsync(fd)
        except BaseException:
            os.close(fd)
            for p in cleaned:
                p.unlink(missing_ok=True)
            raise
        os.close(fd)
        try:
            self._write_indexes(log, indexes, txns.cleaned_index, cleaned)
            mtime = os.stat(d / (segment_file_stem(group[-1].base) + LOG_SUFFIX)).st_mtime_ns
            os.utime(cleaned[0], ns=(mtime, mtime))
            log.replace_segments(base, [s.base for s in group], session)
        except BaseException:
            for p in cleaned:
                p.unlink(missing_ok=True)
            raise
        stats.bytes_written += written
        stats.segments_cleaned += len(group)
        stats.groups += 1

    def _write_indexes(
        self,
        log: UnifiedLog,
        indexes: _GroupIndexes,
        aborted: list[AbortedTxn],
        cleaned: list[Path],
    ) -> None:
        offset_index, time_index = indexes.close()
        for path, data in (
            (cleaned[1], offset_index.to_bytes()),
            (cleaned[2], time_index.to_bytes()),
            (cleaned[3], b"".join(t.to_bytes() for t in aborted)),
        ):
            if path is cleaned[3] and not data:
                path.unlink(missing_ok=True)
                continue
            with _storage_failure(log, path), open(path, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())

    def _clean_window(
        self,
        path: Path,
        window: Window,
        txns: CleanedTransactionMetadata,
        producers: dict[int, LastRecord],
        now: int,
        horizon: int,
        upper_bound: int,
        group_last: bool,
        stats: CleanerStats,
    ) -> tuple[list[memoryview | bytes], np.ndarray]:
        """Filter one window: the pieces to write and the (position in the output, size, last
        offset, max timestamp) rows of the batches written."""
        t = window.table
        plan = self._base_plan(window)
        n = len(plan)
        last_offsets = es.last_offsets(t)
        v2 = t[:, es.S_MAGIC] == 2
        retain = np.where(last_offsets + 1 == upper_bound, ck.RETAIN_EMPTY, ck.RETAIN_DELETE_EMPTY)
        if group_last:
            retain[-1] = ck.RETAIN_EMPTY
        pids = t[:, es.S_PRODUCER_ID]
        if producers:
            ids = np.fromiter(producers, np.int64, len(producers))
            order = np.argsort(ids)
            ids = ids[order]
            lasts = np.array(
                [
                    -1 if producers[p].last_data_offset is None else producers[p].last_data_offset
                    for p in ids.tolist()
                ],
                np.int64,
            )
            slot = np.minimum(np.searchsorted(ids, pids), len(ids) - 1)
            last_of_producer = (
                v2 & (pids >= 0) & (ids[slot] == pids) & (lasts[slot] == last_offsets)
            )
            retain[last_of_producer] = ck.RETAIN_EMPTY
        special = v2 & ((t[:, es.S_ATTR] & (TRANSACTIONAL_MASK | CONTROL_MASK)) != 0)
        for r in np.nonzero(special)[0].tolist():
            self._plan_transactional(window, plan, retain, r, txns, producers, now)
        plan[:, ck.P_RETAIN] = retain
        legacy = np.nonzero(~v2)[0]
        for r in legacy.tolist():  # no empty legacy entry exists: a kept one stays whole
            if retain[r] != ck.RETAIN_EMPTY and not self._keep_legacy(window, plan, r):
                plan[r, ck.P_RETAIN] = ck.RETAIN_DELETE
        # capacities: every kept record may grow by MAX_RECORD_GROWTH bytes
        counts = np.maximum(t[:, es.S_COUNT], 0)
        records = int(counts.sum())
        out_need = len(window.data) + ck.MAX_RECORD_GROWTH * records + RECORD_BATCH_OVERHEAD * n
        if len(self._out) < out_need:
            self._out = np.empty(max(out_need, 2 * len(self._out)), np.uint8)
        side_used = int(plan[:, ck.P_REC_END][plan[:, ck.P_SRC] == 1].max(initial=0))
        raw_need = side_used + ck.MAX_RECORD_GROWTH * records
        if len(self._raw) < raw_need:
            self._raw = np.empty(max(raw_need, 2 * len(self._raw)), np.uint8)
        most = int(counts.max(initial=0))
        if len(self._recs) < most:
            self._recs = np.empty((max(most, 2 * len(self._recs)), 4), np.int64)
        m = self.offset_map
        outcome = np.empty((n, ck.OUTCOME_FIELDS), np.int64)
        params = np.array([now, horizon], np.int64)
        err, row, _pos, a, b, opos, _rpos = ck.filter_rows(
            window.data,
            self._side,
            plan,
            m.words,
            m.state,
            params,
            self._out,
            self._raw,
            outcome,
            self._recs,
            self._scratch,
            self._ahead,
        )
        if err != dk.E_OK:
            raise self._decode_error(path, window, plan, int(row), int(err), int(a), int(b))
        kinds = outcome[:, ck.O_KIND]
        kept = kinds != ck.KIND_DROPPED
        sizes = outcome[:, ck.O_END] - outcome[:, ck.O_START]
        pieces: list[memoryview | bytes] = []
        cursor = 0
        out = memoryview(self._out)
        for r in np.nonzero(kinds == ck.KIND_COMPRESS)[0].tolist():
            built = self._compressed_batch(window, plan, outcome, r)
            at = int(outcome[r, ck.O_OUT_AT])
            if at > cursor:
                pieces.append(out[cursor:at])
            pieces.append(built)
            sizes[r] = len(built)
            cursor = at
        if opos > cursor:
            pieces.append(out[cursor:opos])
        rows = np.empty((int(kept.sum()), 4), np.int64)
        kept_sizes = sizes[kept]
        rows[:, 0] = np.cumsum(kept_sizes) - kept_sizes
        rows[:, 1] = kept_sizes
        rows[:, 2] = last_offsets[kept]
        rows[:, 3] = outcome[kept, ck.O_MAX_TS]
        stats.bytes_read += len(window.data)
        stats.batches_read += n
        stats.batches_written += len(rows)
        stats.records_read += records
        stats.records_retained += int(outcome[kept, ck.O_RETAINED].sum())
        return pieces, rows

    def _plan_transactional(
        self,
        window: Window,
        plan: np.ndarray,
        retain: np.ndarray,
        r: int,
        txns: CleanedTransactionMetadata,
        producers: dict[int, LastRecord],
        now: int,
    ) -> None:
        """Kafka's ``checkBatchRetention`` for a transactional or control batch."""
        t = window.table
        pid = int(t[r, es.S_PRODUCER_ID])
        last = es.last_offset(t, r)
        attr = int(t[r, es.S_ATTR])
        if attr & CONTROL_MASK:
            can_discard = txns.on_control_batch(pid, last, self._control_type_of(window, t, r))
            has_horizon = bool(attr & DELETE_HORIZON_MASK)
            discard = can_discard and has_horizon and int(t[r, es.S_BASE_TS]) <= now
            plan[r, ck.P_FORCE_HORIZON] = int(can_discard)
            plan[r, ck.P_MODE] = ck.MODE_DROP_ALL if discard else ck.MODE_KEEP_ALL
            entry = producers.get(pid)
            epoch = int(t[r, es.S_PRODUCER_EPOCH])
            last_of_producer = (
                entry is not None
                and entry.last_data_offset is None
                and epoch == entry.producer_epoch
            )
        else:
            discard = txns.on_batch(pid, last)
            plan[r, ck.P_MODE] = ck.MODE_DROP_ALL if discard else ck.MODE_FILTER
            entry = producers.get(pid)
            last_of_producer = entry is not None and entry.last_data_offset == last
        if pid >= 0 and last_of_producer:
            retain[r] = ck.RETAIN_EMPTY
        elif retain[r] == ck.RETAIN_EMPTY:
            pass  # the last batch of the round or of the group
        elif discard:
            retain[r] = ck.RETAIN_DELETE
        else:
            retain[r] = ck.RETAIN_DELETE_EMPTY

    def _keep_legacy(self, window: Window, plan: np.ndarray, r: int) -> bool:
        """Whether a legacy entry stays (any record in it kept; tombstones kept)."""
        m = self.offset_map
        pos, size = int(plan[r, ck.P_POS]), int(plan[r, ck.P_SIZE])
        entry = LegacyRecordBatch(memoryview(window.data)[pos : pos + size], "<legacy>", pos)
        latest = m.latest_offset
        for record in entry.records():
            if record.offset > latest:
                return True
            if record.key is not None and record.offset >= m.get(record.key):
                return True
        return False

    def _compressed_batch(
        self, window: Window, plan: np.ndarray, outcome: np.ndarray, r: int
    ) -> bytes:
        """A rewritten compressed batch: the kept records (in the raw buffer) compressed in the
        batch's codec, under its patched header."""
        start, end = int(outcome[r, ck.O_START]), int(outcome[r, ck.O_END])
        attr = int(outcome[r, ck.O_ATTR])
        records = compress(CompressionType(attr & CODEC_MASK), memoryview(self._raw)[start:end])
        pos = int(plan[r, ck.P_POS])
        buf = bytearray(RECORD_BATCH_OVERHEAD + len(records))
        buf[:RECORD_BATCH_OVERHEAD] = window.data[pos : pos + RECORD_BATCH_OVERHEAD].tobytes()
        buf[RECORD_BATCH_OVERHEAD:] = records
        _HEADER_PATCH.pack_into(buf, BATCH_LENGTH_OFFSET, len(buf) - LOG_OVERHEAD)
        struct.pack_into(">h", buf, ATTRIBUTES_OFFSET, attr)
        struct.pack_into(">q", buf, BASE_TIMESTAMP_OFFSET, int(outcome[r, ck.O_BASE_TS]))
        struct.pack_into(">q", buf, MAX_TIMESTAMP_OFFSET, int(outcome[r, ck.O_MAX_TS]))
        struct.pack_into(">i", buf, RECORDS_COUNT_OFFSET, int(outcome[r, ck.O_RETAINED]))
        struct.pack_into(">I", buf, CRC_OFFSET, crc32c_of(memoryview(buf)[ATTRIBUTES_OFFSET:]))
        return bytes(buf)


class _GroupIndexes:
    """The ``.index`` and ``.timeindex`` entries of a cleaned segment, added window by window
    (only the entries are kept: one per ``index.interval.bytes`` of output)."""

    def __init__(self, base: int, interval: int) -> None:
        self.base = base
        self.interval = interval
        self.state = ck.new_index_state(base)
        self.offset_entries: list[np.ndarray] = []
        self.time_entries: list[np.ndarray] = []

    def _run(self, rows: np.ndarray, closing: bool) -> None:
        n = len(rows)
        oi = np.zeros((n + 1, 2), np.int64)
        ti = np.zeros((n + 1, 2), np.int64)
        cols = [np.ascontiguousarray(rows[:, c]) for c in range(4)]
        noi, nti = ck.index_entries(*cols, self.base, self.interval, self.state, oi, ti, closing)
        self.offset_entries.append(oi[:noi])
        self.time_entries.append(ti[:nti])

    def add(self, rows: np.ndarray) -> None:
        """Rows of (position in the segment, size, last offset, max timestamp) per batch."""
        self._run(rows, False)

    def close(self) -> tuple[OffsetIndex, TimeIndex]:
        self._run(np.empty((0, 4), np.int64), True)
        oi = np.concatenate(self.offset_entries)
        ti = np.concatenate(self.time_entries)
        return (
            OffsetIndex(self.base, keys=oi[:, 0], values=oi[:, 1]),
            TimeIndex(self.base, keys=ti[:, 0], values=ti[:, 1]),
        )


@contextmanager
def _storage_failure(log: UnifiedLog, path: Path) -> Iterator[None]:
    """An ``OSError`` writing ``path`` (a full disk: ``ENOSPC``) as a
    :class:`KafkaStorageError` naming the partition and the file (the caller deletes what it
    wrote: the log is as before the group)."""
    try:
        yield
    except OSError as e:
        raise KafkaStorageError(
            f"cleaning {log.topic_partition} in {log.directory}: writing {path} failed: "
            f"[Errno {e.errno}] {e.strerror}; the segments it replaces are kept"
        ) from e


def _write_all(fd: int, data: memoryview | bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]
