"""The append path of a partition's log (Kafka's ``UnifiedLog.append`` with its
``analyzeAndValidateRecords``): :class:`LogAppender`, a base class of
:class:`~broker_embedded.storage.unified_log.UnifiedLog` holding its append methods.

Appending:

- as leader (:meth:`append_as_leader`): client batches are validated as Kafka's
  ``LogValidator`` does for record batch v2 (CRC -> CORRUPT_MESSAGE; record count equal to last
  offset delta + 1 and positive, no control batch from a client, a sequence for every idempotent
  batch, every record keyed on a compacted topic -> INVALID_RECORD; a batch above
  ``max.message.bytes`` -> MESSAGE_TOO_LARGE); a topic whose ``compression.type`` is a codec
  (not ``producer``) gets every data batch in another codec rebuilt in that codec, as Kafka's
  broker recompresses; then offsets are assigned from the log end offset,
  the leader epoch is stamped, LogAppendTime topics get the append time as max timestamp (the CRC
  is recomputed), the producer state deduplicates retried idempotent batches (the original
  offsets and timestamp are returned with ``duplicate=True``, nothing is written) and checks
  sequences and epochs. A rejected append writes nothing;
- as follower (:meth:`append_as_follower`): batches keep the leader's offsets and epochs; a
  partial last batch of a fetch response is dropped.

Both run one pass over the batch headers first (record/log_validator.py, over the one header
walk, in Python on ``kafkalog serve``: the checks
above, the offsets assigned, the summary the segment writer needs), then one ``crc32c`` call per
batch; the segment writer does not walk the batches again, and only batches with a producer id
become objects (for the producer state). Whatever that pass does not accept (an error, a
legacy batch, a codec to recompress, a compacted topic's key check) takes the Python path, one
object per batch, which raises the error: so errors and their messages come from one place.
The leader epoch cache gets one entry per leader append, and per epoch change in a follower's
batches (what assigning each batch's epoch would leave).

Thread safety: the public methods take the log's lock and the private ones run under it; they
read and write the log's own state (its writer, producer state, leader epoch cache and offsets,
set up by ``UnifiedLog.__init__``), so this class is never used alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from broker_embedded.errors import (
    MAX_RECORD_ERRORS,
    CorruptMessageError,
    CorruptRecordError,
    InvalidRecordError,
    KafkaStorageError,
    LogDirFailureError,
    RecordTooLargeError,
    RecordValidationError,
)
from broker_embedded.record import entry_scan as es
from broker_embedded.record import log_validator
from broker_embedded.record.batch_layout import (
    ATTRIBUTES_OFFSET,
    CODEC_MASK,
    CONTROL_MASK,
    TRANSACTIONAL_MASK,
)
from broker_embedded.record.header_reads import readonly_bytes
from broker_embedded.record.log_validator import (
    S_END,
    S_FIRST_OFFSET,
    S_FIRST_ROW,
    S_LAST_OFFSET,
    S_MAX_TS,
    S_OFFSET_OF_MAX_TS,
    S_OK,
    S_PRODUCERS,
    S_RECORDS,
)
from broker_embedded.record.memory_records_builder import MemoryRecordsBuilder
from broker_embedded.record.record_batch import (
    LOG_APPEND_TIME,
    RecordBatch,
    crc32c_of,
    set_base_offset,
    set_max_timestamp,
    set_partition_leader_epoch,
)
from broker_embedded.record.records import AnyBatch, iter_batches
from broker_embedded.storage.active_segment import RecordsSummary
from broker_embedded.storage.log_append_info import LogAppendInfo
from broker_embedded.storage.producer_state_manager import AppendOrigin, BatchInfo, CompletedTxn


@dataclass(frozen=True, slots=True)
class _Checked:
    """A validated client batch: where it is in the request and how many offsets it takes."""

    position: int
    offsets: int


class _Scanned(NamedTuple):
    """Batches checked by log_validator.scan: its ``rows`` (positions in the request or fetch
    response), ``data`` (the bytes they cover), their summary, records and how many carry a
    producer id. A private carrier made on every append: a named tuple is made in a third of
    a frozen dataclass's time."""

    rows: np.ndarray
    data: memoryview
    summary: RecordsSummary
    records: int
    producers: int

    @classmethod
    def of(cls, rows: np.ndarray, s: list[int], buf: bytes | bytearray | memoryview) -> _Scanned:
        start, end = int(rows[0, es.S_POS]), s[S_END]
        summary = RecordsSummary(
            s[S_FIRST_OFFSET], s[S_LAST_OFFSET], s[S_MAX_TS], s[S_OFFSET_OF_MAX_TS], end - start
        )
        return cls(rows, memoryview(buf)[start:end], summary, s[S_RECORDS], s[S_PRODUCERS])


def _stamp_append_time(buf: bytearray, scanned: _Scanned, append_time: int) -> _Scanned:
    """LogAppendTime: every batch's max timestamp becomes the append time (its CRC is
    recomputed); the first batch then holds the max timestamp."""
    rows = scanned.rows
    for pos in rows[:, es.S_POS].tolist():
        set_max_timestamp(buf, LOG_APPEND_TIME, append_time, pos)
    rows[:, es.S_MAX_TS] = append_time  # what the producer state keeps
    s = scanned.summary
    first_last = int(rows[0, es.S_OFFSET] + rows[0, es.S_LAST_DELTA])
    summary = RecordsSummary(s.first_offset, s.last_offset, append_time, first_last, s.size)
    return scanned._replace(summary=summary)


def _crcs_match(buf: bytes | bytearray | memoryview, rows: np.ndarray) -> bool:
    """Whether every batch of ``rows`` has the CRC-32C it stores (one ``crc32c`` call per
    batch: the package is hardware accelerated)."""
    view = memoryview(buf)
    for row in rows.tolist():  # whole rows: cheaper than a fancy index of three columns
        pos = row[es.S_POS]
        if crc32c_of(view[pos + ATTRIBUTES_OFFSET : pos + row[es.S_SIZE]]) != row[es.S_CRC]:
            return False
    return True


def _epoch_starts(rows: np.ndarray) -> list[tuple[int, int]]:
    """(leader epoch, base offset) of each replicated batch whose epoch differs from the
    batch before it: what assigning every batch's epoch changes in the cache (an epoch that
    continues changes nothing there)."""
    out = []
    previous = None
    for row in rows.tolist():
        epoch, base = row[es.S_EPOCH], row[es.S_OFFSET]
        if epoch != previous:
            out.append((epoch, base))
            previous = epoch
    return out


class LogAppender:
    """The append methods of a log (module docstring); a base class of ``UnifiedLog``."""

    def append_as_leader(
        self,
        records: bytes | bytearray | memoryview,
        leader_epoch: int,
        origin: AppendOrigin = AppendOrigin.CLIENT,
    ) -> LogAppendInfo:
        """Validate client batches, assign offsets and append them; see the module docstring."""
        with self._lock:
            self._check_open()
            buf = bytearray(records)
            scanned = self._scan_as_leader(buf, origin, leader_epoch)
            if scanned is None:
                return self._append_as_leader_checked_in_python(buf, leader_epoch, origin)
            now = self._clock()
            append_time = now if self.config.log_append_time else -1
            if append_time >= 0:
                scanned = _stamp_append_time(buf, scanned, append_time)
            return self._append_scanned(scanned, origin, leader_epoch, append_time, now)

    def _scan_as_leader(
        self, buf: bytearray, origin: AppendOrigin, leader_epoch: int
    ) -> _Scanned | None:
        """The fast path's checks (log_validator.py), the CRCs and the topic's codec, then the
        offsets and ``leader_epoch`` written into ``buf``; ``None`` when anything needs the
        Python path (which then raises the error, or recompresses, or checks the keys of a
        compacted topic)."""
        config = self.config
        if config.compact:
            return None
        arr = np.frombuffer(buf, np.uint8)
        table, s = log_validator.scan(
            arr,
            len(buf),
            log_validator.LEADER,
            self.log_end_offset,
            config.max_message_bytes,
            origin is AppendOrigin.CLIENT,
        )
        if not s[S_OK] or not _crcs_match(buf, table):
            return None
        target = config.target_codec
        if target is not None and any(
            a & CODEC_MASK != target and not a & CONTROL_MASK for a in table[:, es.S_ATTR]
        ):
            return None
        log_validator.assign(arr, table, leader_epoch)  # outside the CRC: it stays valid
        return _Scanned.of(table, s.tolist(), buf)

    def _append_as_leader_checked_in_python(
        self, buf: bytearray, leader_epoch: int, origin: AppendOrigin
    ) -> LogAppendInfo:
        """The slow path: one Python object per batch (the fast path's refusals, legacy
        batches, recompression and compacted topics)."""
        checked = self._validate(buf, origin)
        if self._needs_recompression(buf):
            buf = self._recompress(buf)
            checked = self._validate(buf, origin)  # sizes changed: check them again
        now = self._clock()
        next_offset = self.log_end_offset
        append_time = now if self.config.log_append_time else -1
        for c in checked:
            set_base_offset(buf, next_offset, c.position)
            set_partition_leader_epoch(buf, leader_epoch, c.position)
            if append_time >= 0:
                set_max_timestamp(buf, LOG_APPEND_TIME, append_time, c.position)
            next_offset += c.offsets
        return self._append(buf, origin, leader_epoch, append_time, now)

    def append_as_follower(self, records: bytes | bytearray | memoryview) -> LogAppendInfo | None:
        """Append the complete batches of a fetch response at or above the log end offset, with
        the leader's offsets and epochs; ``None`` when nothing was new."""
        with self._lock:
            self._check_open()
            view = memoryview(records).toreadonly()
            table, s = log_validator.scan(
                readonly_bytes(view),
                len(view),
                log_validator.FOLLOWER,
                self.log_end_offset,
                0,
                False,
            )
            summary = s.tolist()
            rows = table[summary[S_FIRST_ROW] :]
            if not summary[S_OK] or not _crcs_match(view, rows):
                return self._append_as_follower_checked_in_python(view)
            if not len(rows):
                return None
            scanned = _Scanned.of(rows, summary, view)
            return self._append_scanned(scanned, AppendOrigin.REPLICATION, None, -1, self._clock())

    def _append_as_follower_checked_in_python(self, view: memoryview) -> LogAppendInfo | None:
        """The slow path of :meth:`append_as_follower` (legacy batches, and the errors)."""
        leo = self.log_end_offset
        start = end = None
        for b in iter_batches(view, f"fetch response for {self._where()}", tail="stop"):
            if b.last_offset < leo:
                continue
            if not b.is_valid():
                raise CorruptMessageError(
                    f"{self._where()}: replicated batch at offset {b.base_offset} fails its CRC"
                )
            start = b.position if start is None else start
            end = b.position + b.size_in_bytes
        if start is None:
            return None
        return self._append(
            bytes(view[start:end]), AppendOrigin.REPLICATION, None, -1, self._clock()
        )

    def _validate(self, buf: bytearray, origin: AppendOrigin) -> list[_Checked]:
        where = self._where()
        checked = []
        try:
            batches = list(iter_batches(buf, f"produce request for {where}", tail="error"))
        except CorruptRecordError as e:
            raise CorruptMessageError(f"{where}: {e}") from None
        if not batches:
            raise InvalidRecordError(f"{where}: the produce request holds no record batch")
        for b in batches:
            self._validate_batch(b, origin)
            checked.append(_Checked(b.position, b.last_offset_delta + 1))
        return checked

    def _needs_recompression(self, buf: bytearray) -> bool:
        target = self.config.target_codec
        return target is not None and any(
            b.compression != target and not b.is_control for b in iter_batches(buf)
        )

    def _recompress(self, buf: bytearray) -> bytearray:
        """Rebuild every data batch whose codec is not the topic's ``compression.type`` (as
        Kafka's broker does: a slow path, one Python object per record, only taken when the
        producer's codec differs from the topic's)."""
        target = self.config.target_codec
        out = bytearray()
        for b in iter_batches(buf):
            if b.compression == target or b.is_control:
                out += b.buffer
                continue
            builder = MemoryRecordsBuilder(
                0,
                target,
                producer_id=b.producer_id,
                producer_epoch=b.producer_epoch,
                base_sequence=b.base_sequence,
                is_transactional=b.is_transactional,
            )
            for r in b.records():
                builder.append(r.offset - b.base_offset, r.timestamp, r.key, r.value, r.headers)
            out += builder.build()
        return out

    def _validate_batch(self, b: AnyBatch, origin: AppendOrigin) -> None:
        where = f"{self._where()}, batch at byte {b.position} of the request"
        if not isinstance(b, RecordBatch):
            raise InvalidRecordError(f"{where}: magic {b.magic} is not supported, send magic 2")
        if b.size_in_bytes > self.config.max_message_bytes:
            raise RecordTooLargeError(
                f"{where}: batch of {b.size_in_bytes} bytes exceeds max.message.bytes "
                f"{self.config.max_message_bytes}"
            )
        if not b.is_valid():
            raise CorruptMessageError(f"{where}: CRC mismatch")
        if b.records_count <= 0 or b.records_count != b.last_offset_delta + 1:
            raise InvalidRecordError(
                f"{where}: record count {b.records_count} does not match last offset delta "
                f"{b.last_offset_delta}"
            )
        if b.is_control and origin is AppendOrigin.CLIENT:
            raise InvalidRecordError(f"{where}: clients may not send control batches")
        if b.producer_id >= 0 and b.base_sequence < 0 and not b.is_control:
            raise InvalidRecordError(
                f"{where}: producer {b.producer_id} sent a batch without a sequence number"
            )
        if b.is_transactional and b.producer_id < 0:
            raise InvalidRecordError(f"{where}: transactional batch without a producer id")
        # the coordinators' own records always have keys: their writes (every offset commit
        # and transaction state change) skip the columnar decode of the check
        if self.config.compact and not b.is_control and origin is AppendOrigin.CLIENT:
            self._require_keys(b, where)

    def _require_keys(self, b: RecordBatch, where: str) -> None:
        """Kafka's ``validateKey``: every record of a compacted topic has a key, else a
        :class:`RecordValidationError` naming the keyless records by index in the batch."""
        import numpy as np

        from broker_embedded.record.columnar_decoder import decode  # numba: load on first use

        tp = self.topic_partition
        decoded = decode(b.buffer, topic=tp.topic, partition=tp.partition, verify_crc=False)
        keyless, base = [], 0
        for rb in decoded.batches:
            nulls = rb.column("key").is_null().to_numpy(zero_copy_only=False)
            keyless.append(np.flatnonzero(nulls) + base)
            base += rb.num_rows
        indexes = np.concatenate(keyless) if keyless else np.empty(0, np.int64)
        if len(indexes):
            why = f"Compacted topic cannot accept message without key in topic partition {tp}"
            kept = indexes[:MAX_RECORD_ERRORS].tolist()
            reason = f"{where}: compacted topic {tp.topic!r} does not accept records without a key"
            raise RecordValidationError(reason, [(i, why) for i in kept], len(indexes))

    def _append(
        self,
        buf: bytes | bytearray,
        origin: AppendOrigin,
        leader_epoch: int | None,
        append_time: int,
        now: int,
    ) -> LogAppendInfo:
        """The slow path's append: the batches walked again, one object each."""
        batches = [b for b in iter_batches(buf, str(self.directory)) if isinstance(b, RecordBatch)]
        epochs = [
            (b.partition_leader_epoch if leader_epoch is None else leader_epoch, b.base_offset)
            for b in batches
        ]
        records = sum(b.records_count for b in batches)
        return self._append_batches(
            buf, batches, None, epochs, records, None, origin, append_time, now
        )

    def _append_scanned(
        self,
        scanned: _Scanned,
        origin: AppendOrigin,
        leader_epoch: int | None,
        append_time: int,
        now: int,
    ) -> LogAppendInfo:
        """The fast path's append of the batches of ``scanned``. Only batches with a producer
        id become objects, for the producer state."""
        summary = scanned.summary
        data = scanned.data
        infos = self._producer_batches(data, scanned.rows) if scanned.producers else []
        if leader_epoch is not None:
            epochs = [(leader_epoch, summary.first_offset)]
        else:
            epochs = _epoch_starts(scanned.rows)
        return self._append_batches(
            data,
            infos,
            summary.last_offset + 1,
            epochs,
            scanned.records,
            summary,
            origin,
            append_time,
            now,
        )

    def _producer_batches(self, data: bytes | bytearray | memoryview, rows: np.ndarray) -> list:
        """The batches of ``rows`` with a producer id, as the producer state reads them."""
        base = int(rows[0, es.S_POS])
        view = memoryview(data)
        out: list[RecordBatch | BatchInfo] = []
        for row in rows.tolist():
            if row[es.S_PRODUCER_ID] < 0:
                continue
            pos = row[es.S_POS] - base
            if row[es.S_ATTR] & CONTROL_MASK:  # the marker's type is in its record
                out.append(RecordBatch(view[pos : pos + row[es.S_SIZE]], position=pos))
                continue
            delta = row[es.S_LAST_DELTA]
            seq = row[es.S_BASE_SEQUENCE]
            out.append(
                BatchInfo(
                    row[es.S_OFFSET],
                    row[es.S_OFFSET] + delta,
                    row[es.S_PRODUCER_ID],
                    row[es.S_PRODUCER_EPOCH],
                    seq,
                    -1 if seq < 0 else (seq + delta) & 0x7FFFFFFF,
                    row[es.S_MAX_TS],
                    bool(row[es.S_ATTR] & TRANSACTIONAL_MASK),
                )
            )
        return out

    def _append_batches(
        self,
        buf: bytes | bytearray | memoryview,
        batches: Sequence[RecordBatch | BatchInfo],
        next_offset: int | None,
        epochs: list[tuple[int, int]],
        records: int,
        summary: RecordsSummary | None,
        origin: AppendOrigin,
        append_time: int,
        now: int,
    ) -> LogAppendInfo:
        """Check the producer state, write, then apply it, the leader epochs (``epochs``: each
        batch's, or where they change) and the flush policy."""
        psm = self.producer_state
        # No batch with a producer id (the fast path hands only those): nothing to check, and
        # applying would only move the map end offset, which trivial_end does after the write.
        trivial_end = next_offset if not batches else None
        update = (
            None
            if trivial_end is not None
            else psm.analyze(batches, origin, next_offset=next_offset)
        )
        dup = None if update is None else update.duplicate
        if dup is not None:
            # Kafka answers a duplicate with the original batch's max timestamp as its log
            # append time, whatever the topic's timestamp type (UnifiedLog.append).
            return LogAppendInfo(
                dup.first_offset,
                dup.last_offset,
                dup.timestamp,
                dup.timestamp,
                self.log_start_offset,
                0,
                0,
                duplicate=True,
            )
        writer = self._writer
        if summary is None:
            summary = writer.summarize(buf)
            if summary is None:
                raise InvalidRecordError(f"{self._where()}: nothing to append")
        first_base = writer.active_segment.base_offset
        try:
            for epoch, start in epochs:  # before the write, as Kafka's maybeAssignEpochStartOffset
                self.leader_epoch_cache.assign(epoch, start)
            writer.append_summarized(buf, summary, now)
        except (OSError, KafkaStorageError) as e:  # nothing written: the segment was cut back
            raise self._write_failed("appending to", e) from e
        self.health.succeeded()
        base = writer.active_segment.base_offset
        if base != first_base:  # before the update: the snapshot is the state below the new base
            if psm.map_end_offset < base:  # offsets skipped (replicated gaps)
                psm.update_map_end_offset(base)
                if update is not None:
                    update = psm.analyze(batches, origin, next_offset=next_offset)
            self._on_roll()
        if update is None:
            psm.update_map_end_offset(trivial_end)
            completed = []
        else:
            completed = psm.apply(update)
        if completed:
            self._index_aborted_after_write(completed)
        self._unflushed_records += records
        if self._unflushed_records >= self.config.flush_messages:
            self.flush()
        return LogAppendInfo(
            summary.first_offset,
            summary.last_offset,
            summary.max_timestamp,
            append_time,
            self.log_start_offset,
            records,
            summary.size,
        )

    def _index_aborted(self, completed: list[CompletedTxn]) -> None:
        for txn in completed:
            if txn.is_aborted:
                base = self._floor_base(txn.last_offset)
                self._open.segment(base).txn_index.append(txn.aborted_txn())

    def _index_aborted_after_write(self, completed: list[CompletedTxn]) -> None:
        """The ``.txnindex`` entries of the aborts an append completed. The markers are in the
        log: if an entry cannot be written, read_committed reads would show aborted records,
        so the log goes offline until a restart recovers it (which rebuilds the entries)."""
        try:
            self._index_aborted(completed)
        except OSError as e:
            self._write_failed(
                "indexing an aborted transaction of",
                LogDirFailureError(
                    f"the .txnindex entry of an abort marker in {self.directory} could not be "
                    f"written: {e}"
                ),
            )
