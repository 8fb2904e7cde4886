"""One partition's log as a broker holds it (Kafka's ``UnifiedLog`` with its ``LocalLog``).

Files in ``<log dir>/<topic>-<partition>/``: the segments (``<base>.log``, ``.index``,
``.timeindex``, ``.txnindex``; segment_writer.py, log_segment.py, transaction_index.py), producer
snapshots (``<offset>.snapshot``; producer_state_manager.py), ``leader-epoch-checkpoint``
(leader_epoch_file_cache.py) and ``partition.metadata``. The log dir's checkpoint files (high
watermark, recovery point, log start offset) are written by the log manager from this object's
offsets.

Offsets: ``log_start_offset <= high_watermark <= log_end_offset``; the last stable offset (LSO)
is ``min(first offset of any transaction still open as of the HW, HW)``; the recovery point is the
offset below which everything was fsynced. Offsets are assigned contiguously on the leader, but a
log holds gaps (compaction, transaction markers), so nothing here assumes ``offset + 1`` exists.

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

Both run one compiled pass over the batch headers first (record/log_validator.py: the checks
above, the offsets assigned, the summary the segment writer needs), then one ``crc32c`` call per
batch; the segment writer does not walk the batches again, and only batches with a producer id
become objects (for the producer state). Whatever that pass does not accept (an error, a
legacy batch, a codec to recompress, a compacted topic's key check) takes the Python path, one
object per batch, which raises the error: so errors and their messages come from one place.
The leader epoch cache gets one entry per leader append, and per epoch change in a follower's
batches (what assigning each batch's epoch would leave).

A full disk (any failed write of an append) is answered :class:`KafkaStorageError`
(KAFKA_STORAGE_ERROR, 56) with nothing appended: the segment cuts the ``.log`` back, and the
producer state, the high watermark and the log end offset move only after a whole write, so an
idempotent producer's retry is accepted once space is back (not OUT_OF_ORDER_SEQUENCE_NUMBER) and
a duplicate of it is recognised. The leader epoch is assigned before the write, as Kafka's
``maybeAssignEpochStartOffset`` (an entry at the log end offset with nothing after it is
harmless; so is one the log found at its end when it opened and could not drop for want of
space). Writes after a successful append (a producer snapshot at a roll, index entries) that
fail are counted and skipped, never turning a written append into an error a retry would
duplicate. The log keeps serving, so it recovers by itself when space returns; each episode is
logged once per log dir (storage_health.py). What cannot be undone (the cut itself failing, an
fsync failing, the ``.txnindex`` entry of a written abort marker) takes the log offline, as Kafka
takes a failed log dir offline: every request for it answers KAFKA_STORAGE_ERROR
(:class:`LogDirFailureError`), closing leaves it as a crash would, and the broker's next start
recovers it (truncating at the first invalid batch) since no clean-shutdown marker is written.

Rolling follows segment_writer.py. At each roll, as in Kafka, the producer state is snapshotted
at the new segment's base offset (the state of the log below it) and the recovery point moves to
that base offset (the closed segments were fsynced when they rolled). Retention
(:meth:`delete_old_segments`) deletes whole segments, oldest first and never the active one, when
their largest timestamp is older than ``retention.ms``, while the log exceeds
``retention.bytes``, or when they lie wholly below the log start offset; only segments wholly
below the high watermark go. :meth:`delete_records_before` moves the log start offset (Kafka's
DeleteRecords; not above the HW). Flushing: every ``flush.messages`` appended records, or when the
log manager sees ``flush.ms`` elapsed; the recovery point then becomes the log end offset. Each
flush's time goes to :data:`FLUSH_TIMES` (Kafka's ``LogFlushRateAndTimeMs``).

Opening (log_loader.py, Kafka's ``LogLoader``) first settles an interrupted cleaner swap, then
recovers the closed segments (index sanity checks; after an unclean shutdown a scan from the
segment holding the recovery point, truncating a corrupt tail); the segment writer recovers the
last segment. The producer state is then reloaded from the latest snapshot and the log
replayed after it, rebuilding the ``.txnindex`` entries of the replayed aborted transactions and,
after an unclean shutdown, the leader epochs of replayed batches newer than the cache's.

Truncation (:meth:`truncate_to`, a follower dropping divergent history) removes every batch at
or above the offset (a batch holding it goes whole) and everything that followed from them: the
leader epochs, producer state, snapshots and ``.txnindex`` entries above the new log end offset;
the HW, recovery point and log start offset are capped by it.
:meth:`truncate_fully_and_start_at` restarts the log empty at an offset.

Replacing segments (the cleaner, :meth:`replace_segments`; Kafka's ``replaceSegments``): the
cleaner writes a group's replacement as ``<base>.log.cleaned`` (with ``.index``, ``.timeindex``
and ``.txnindex`` ``.cleaned`` files, fsynced), based at the group's first base offset. Under the
log's lock its files are renamed ``.cleaned`` -> ``.swap`` (the ``.log`` first) and the directory
fsynced: that is the commit point. Then every file of the replaced segments is renamed
``.deleted``, the ``.swap`` files take their final names (the ``.log`` first), the directory is
fsynced and the ``.deleted`` files are removed, and so are the producer snapshots at the base
offsets of the replaced segments but the first (Kafka's ``deleteProducerSnapshots``). Only
renames: a reader in another process that holds a replaced segment open keeps reading the old
inode. Opening settles a crash at any step (log_loader.py): the outcome is the old segments or
the new one, never a mix.

Cleaning sessions (:meth:`cleaning_session`): a cleaner works outside the log's lock, reading
closed segments; :meth:`close` stops a session (the cleaner sees it between windows) and waits
for it to end, and a truncation makes the session's :meth:`replace_segments` refuse
(:class:`CleaningAbortedError`), as do replaced segments that retention deleted meanwhile.

Reads go through a ``LocalLog`` (local_log.py, the reader the read-only view shares) with this
log's policy, :class:`OpenSegments` (its segment views, the active one shared with the writer's
in-memory indexes; each segment with its ``.txnindex``). They copy the bytes (``bytes``), so a
later truncation can never pull a mapping from under a reader in this process. Thread safety: every
public method takes the log's lock.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, TypeVar

import numpy as np

from broker_embedded.errors import (
    MAX_RECORD_ERRORS,
    BrokerClosedError,
    CorruptMessageError,
    CorruptRecordError,
    InvalidRecordError,
    KafkaLogError,
    KafkaStorageError,
    LogDirFailureError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    RecordValidationError,
)
from broker_embedded.latency_histogram import LatencyHistogram
from broker_embedded.record import log_validator
from broker_embedded.record.batch_layout import (
    ATTRIBUTES_OFFSET,
    CODEC_MASK,
    CONTROL_MASK,
    TRANSACTIONAL_MASK,
)
from broker_embedded.record.kernel_primitives import readonly_bytes
from broker_embedded.record.log_validator import (
    C_ATTRIBUTES,
    C_BASE,
    C_BASE_SEQUENCE,
    C_CRC,
    C_EPOCH,
    C_LAST_DELTA,
    C_MAX_TS,
    C_POSITION,
    C_PRODUCER_EPOCH,
    C_PRODUCER_ID,
    C_SIZE,
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
from broker_embedded.storage.checkpoint_file import fsync_dir
from broker_embedded.storage.fetch_data_info import FetchDataInfo, FetchIsolation
from broker_embedded.storage.leader_epoch_checkpoint import LEADER_EPOCH_CHECKPOINT
from broker_embedded.storage.leader_epoch_file_cache import LeaderEpochFileCache
from broker_embedded.storage.local_log import LocalLog, LogOffsets, Walked
from broker_embedded.storage.log_config import LogConfig
from broker_embedded.storage.log_loader import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    SEGMENT_SUFFIXES,
    SWAP_SUFFIX,
    LogLoader,
    delete_segment_files,
)
from broker_embedded.storage.log_segment import (
    LOG_SUFFIX,
    LogSegment,
    RecordsSummary,
    TimestampAndOffset,
    segment_file_stem,
)
from broker_embedded.storage.log_segments import LogSegments
from broker_embedded.storage.offset_index import INDEX_SUFFIX
from broker_embedded.storage.producer_state_manager import (
    AppendOrigin,
    BatchInfo,
    CompletedTxn,
    ProducerStateManager,
    list_snapshots,
    snapshot_file_name,
)
from broker_embedded.storage.segment_writer import SegmentWriter, wall_clock_ms
from broker_embedded.storage.storage_health import StorageHealth
from broker_embedded.storage.time_index import TIME_INDEX_SUFFIX
from broker_embedded.storage.topic_partition import TopicPartition
from broker_embedded.storage.transaction_index import (
    AbortedTxn,
    TxnIndexSearchResult,
)

log = logging.getLogger(__name__)
T = TypeVar("T")
B = TypeVar("B")
# every flush's time, process-wide as Kafka's LogFlushStats (read by the metrics endpoint)
FLUSH_TIMES = LatencyHistogram()


class CleaningAbortedError(KafkaLogError):
    """A cleaning session was stopped (the log closed, truncated, or its segments changed)."""


@dataclass(frozen=True, slots=True)
class CleaningSnapshot:
    """What a cleaner needs of a log, read under its lock: the closed segments' base offsets
    and ``.log`` sizes (oldest first), the active segment's base offset and size, the log start,
    end and last stable offsets, and the truncation count at the time."""

    base_offsets: tuple[int, ...]
    sizes: tuple[int, ...]
    active_base_offset: int
    active_size: int
    log_start_offset: int
    log_end_offset: int
    last_stable_offset: int
    truncations: int


@dataclass(frozen=True, slots=True)
class LastRecord:
    """An active producer's last data offset (None: its last entry is a marker) and epoch."""

    last_data_offset: int | None
    producer_epoch: int


class CleaningSession:
    """One cleaner working on a log (see :meth:`UnifiedLog.cleaning_session`)."""

    __slots__ = ("log", "truncations")

    def __init__(self, log: UnifiedLog, truncations: int) -> None:
        self.log = log
        self.truncations = truncations

    def check(self) -> None:
        """Raise :class:`CleaningAbortedError` once the log stops cleaning."""
        if self.log._cleaning_stopped:
            raise CleaningAbortedError(f"cleaning of {self.log} stopped: the log is closing")


@dataclass(frozen=True, slots=True)
class LogAppendInfo:
    """What an append did: the offsets it got (the original ones for a duplicate)."""

    first_offset: int
    last_offset: int
    max_timestamp: int
    log_append_time: int
    log_start_offset: int
    num_records: int
    size: int
    duplicate: bool = False


@dataclass(frozen=True, slots=True)
class _Checked:
    """A validated client batch: where it is in the request and how many offsets it takes."""

    position: int
    offsets: int


class UnifiedLog:
    """One partition's log; see the module docstring."""

    def __init__(
        self,
        log_dir: str | Path,
        topic_partition: TopicPartition,
        config: LogConfig,
        *,
        topic_id: uuid.UUID | None = None,
        recovery_point: int = 0,
        log_start_offset: int | None = None,
        high_watermark: int | None = None,
        had_clean_shutdown: bool = True,
        clock_ms: Callable[[], int] = wall_clock_ms,
        on_offsets_changed: Callable[[UnifiedLog], None] | None = None,
        health: StorageHealth | None = None,
    ) -> None:
        self.topic_partition = topic_partition
        self.log_dir = Path(log_dir)
        self.health = StorageHealth(self.log_dir) if health is None else health
        self.failure: str | None = None  # why the log went offline (LogDirFailureError)
        self.directory = self.log_dir / topic_partition.dir_name
        self.config = config
        self.topic_id = topic_id
        self._clock = clock_ms
        self._listener = on_offsets_changed
        self._lock = threading.RLock()
        self._closed = False
        self._unflushed_records = 0
        self.last_flush_ms = self._clock()
        self._cleaning_cond = threading.Condition()
        self._cleaning_active = False
        self._cleaning_stopped = False
        self._truncations = 0
        self._truncation_floor: int | None = None
        self.directory.mkdir(parents=True, exist_ok=True)
        loader = LogLoader(self.directory, config, clock_ms, repr(self))
        loader.settle_interrupted_swaps()
        recover = not had_clean_shutdown
        loader.load_segments(recovery_point, recover)
        self._open = OpenSegments(self.directory, config, lambda: self._writer)
        self.local_log = LocalLog(topic_partition, self.directory, self._open)
        self._writer = SegmentWriter(
            self.log_dir, topic_partition, config, topic_id=topic_id, recover=recover,
            recovery_point=recovery_point, start_offset=log_start_offset or 0, clock_ms=clock_ms,
        )  # fmt: skip
        leo = self.log_end_offset
        first = self._writer.segment_base_offsets[0]
        self.log_start_offset = min(max(log_start_offset or 0, first), leo)
        self.leader_epoch_cache = LeaderEpochFileCache(
            topic_partition, self.directory / LEADER_EPOCH_CHECKPOINT
        )
        self.leader_epoch_cache.truncate_from_end(leo, write=False)  # the next change writes
        self._truncate_epochs_from_start(self.log_start_offset)
        self.producer_state = ProducerStateManager(topic_partition, self.directory)
        self._rebuild_producer_state(restore_epochs=recover)
        hw = self.log_start_offset if high_watermark is None else high_watermark
        self.high_watermark = min(max(hw, self.log_start_offset), leo)
        self.producer_state.on_high_watermark_updated(self.high_watermark)
        self.recovery_point = min(recovery_point, leo)
        if recover:
            self.flush()

    # -- opening ---------------------------------------------------------------------------------

    def _rebuild_producer_state(self, restore_epochs: bool = False) -> None:
        """Reload the latest snapshot, then replay the log after it, re-indexing the aborted
        transactions the replay completes. With ``restore_epochs`` (recovery), a replayed batch
        whose leader epoch is newer than the cache's latest adds its entry, as Kafka's segment
        recovery does (a crash may fall between a batch's write and its epoch's checkpoint)."""
        psm = self.producer_state
        psm.truncate_and_reload(self.log_start_offset, self.log_end_offset, now_ms=self._clock())
        start = psm.map_end_offset
        if start >= self.log_end_offset:
            return
        for base in LogSegments(self.segment_base_offsets).from_floor(start):
            self._open.segment(base).txn_index.truncate_to(start)
        cache = self.leader_epoch_cache

        def replayed() -> Iterator[RecordBatch]:
            for b in self._batches(start, self.log_end_offset):
                if not isinstance(b, RecordBatch):
                    continue
                epoch = b.partition_leader_epoch
                if restore_epochs and epoch >= 0 and epoch > (cache.latest_epoch or -1):
                    cache.assign(epoch, b.base_offset)
                yield b

        completed = psm.replay(replayed())
        psm.update_map_end_offset(self.log_end_offset)
        self._index_aborted(completed)
        psm.take_snapshot()

    # -- state -------------------------------------------------------------------------------------

    @property
    def log_end_offset(self) -> int:
        return self._writer.log_end_offset

    @property
    def segment_base_offsets(self) -> list[int]:
        return self._writer.segment_base_offsets

    @property
    def active_segment_base_offset(self) -> int:
        return self._writer.active_segment.base_offset

    @property
    def last_stable_offset(self) -> int:
        with self._lock:
            return self.producer_state.last_stable_offset(self.high_watermark)

    @property
    def size_in_bytes(self) -> int:
        with self._lock:
            return sum(self._segment_size(b) for b in self.segment_base_offsets)

    @property
    def is_closed(self) -> bool:
        return self._closed

    @property
    def truncations(self) -> int:
        """How many truncations this log went through since it was opened."""
        return self._truncations

    def pop_truncation_floor(self) -> int | None:
        """The lowest log end offset a truncation left since the last call (None: no
        truncation); the cleaner manager lowers its checkpoint to it."""
        with self._lock:
            floor, self._truncation_floor = self._truncation_floor, None
            return floor

    def __repr__(self) -> str:
        return f"UnifiedLog({self.topic_partition}, {self.directory})"

    def _where(self) -> str:
        tp = self.topic_partition
        return f"topic {tp.topic!r} partition {tp.partition}"

    def _check_open(self) -> None:
        if self._closed:
            raise BrokerClosedError(f"the log of {self._where()} in {self.directory} is closed")
        if self.failure is not None:
            raise LogDirFailureError(
                f"the log of {self._where()} in {self.directory} is offline until the broker "
                f"restarts and recovers it: {self.failure}"
            )

    def _write_failed(self, what: str, error: OSError | KafkaStorageError) -> KafkaStorageError:
        """Count a failed write (one log line per episode, storage_health.py) and the error
        the request gets: KAFKA_STORAGE_ERROR; a write that could not be undone takes the log
        offline (:class:`LogDirFailureError`)."""
        self.health.failed(f"{what} {self._where()}", error)
        if isinstance(error, LogDirFailureError) and self.failure is None:
            self.failure = str(error)
        if isinstance(error, KafkaStorageError):
            return error
        return KafkaStorageError(f"{what} {self._where()} in {self.directory} failed: {error}")

    def _changed(self) -> None:
        if self._listener is not None:
            self._listener(self)

    # -- appends -----------------------------------------------------------------------------------

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
        table, s = log_validator.scan(arr, len(buf), log_validator.LEADER, self.log_end_offset,
                                      config.max_message_bytes,
                                      origin is AppendOrigin.CLIENT)  # fmt: skip
        if not s[S_OK] or not _crcs_match(buf, table):
            return None
        target = config.target_codec
        if target is not None and any(
            a & CODEC_MASK != target and not a & CONTROL_MASK for a in table[:, C_ATTRIBUTES]
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
            table, s = log_validator.scan(readonly_bytes(view), len(view),
                                          log_validator.FOLLOWER, self.log_end_offset, 0,
                                          False)  # fmt: skip
            summary = s.tolist()
            rows = table[summary[S_FIRST_ROW] :]
            if not summary[S_OK] or not _crcs_match(view, rows):
                return self._append_as_follower_checked_in_python(view)
            if not len(rows):
                return None
            scanned = _Scanned.of(rows, summary, view)
            return self._append_scanned(scanned, AppendOrigin.REPLICATION, None, -1,
                                        self._clock())  # fmt: skip

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
        return self._append(bytes(view[start:end]), AppendOrigin.REPLICATION, None, -1,
                            self._clock())  # fmt: skip

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
                0, target, producer_id=b.producer_id, producer_epoch=b.producer_epoch,
                base_sequence=b.base_sequence, is_transactional=b.is_transactional,
            )  # fmt: skip
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
        epochs = [(b.partition_leader_epoch if leader_epoch is None else leader_epoch,
                   b.base_offset) for b in batches]  # fmt: skip
        records = sum(b.records_count for b in batches)
        return self._append_batches(buf, batches, None, epochs, records, None, origin,
                                    append_time, now)  # fmt: skip

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
        return self._append_batches(data, infos, summary.last_offset + 1, epochs,
                                    scanned.records, summary, origin, append_time,
                                    now)  # fmt: skip

    def _producer_batches(self, data: bytes | bytearray | memoryview, rows: np.ndarray) -> list:
        """The batches of ``rows`` with a producer id, as the producer state reads them."""
        base = int(rows[0, C_POSITION])
        view = memoryview(data)
        out: list[RecordBatch | BatchInfo] = []
        for row in rows.tolist():
            if row[C_PRODUCER_ID] < 0:
                continue
            pos = row[C_POSITION] - base
            if row[C_ATTRIBUTES] & CONTROL_MASK:  # the marker's type is in its record
                out.append(RecordBatch(view[pos : pos + row[C_SIZE]], position=pos))
                continue
            delta = row[C_LAST_DELTA]
            seq = row[C_BASE_SEQUENCE]
            out.append(BatchInfo(
                row[C_BASE], row[C_BASE] + delta, row[C_PRODUCER_ID], row[C_PRODUCER_EPOCH], seq,
                -1 if seq < 0 else (seq + delta) & 0x7FFFFFFF, row[C_MAX_TS],
                bool(row[C_ATTRIBUTES] & TRANSACTIONAL_MASK),
            ))  # fmt: skip
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
            return LogAppendInfo(dup.first_offset, dup.last_offset, dup.timestamp, dup.timestamp,
                                 self.log_start_offset, 0, 0, duplicate=True)  # fmt: skip
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
        return LogAppendInfo(summary.first_offset, summary.last_offset, summary.max_timestamp,
                             append_time, self.log_start_offset, records, summary.size)  # fmt: skip

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
            self._write_failed("indexing an aborted transaction of", LogDirFailureError(
                f"the .txnindex entry of an abort marker in {self.directory} could not be "
                f"written: {e}"))  # fmt: skip

    def _on_roll(self) -> None:
        """A new active segment: the old one's files are closed (and fsynced); snapshot the
        producer state at the new base offset and move the recovery point there (Kafka flushes
        up to the new segment at each roll). The append is done: a snapshot that cannot be
        written is counted and skipped (recovery replays from an older one)."""
        self._snapshot_producer_state()
        self._open.flush_views()
        base = self._writer.active_segment.base_offset
        if base > self.recovery_point:
            self.recovery_point = base
            self._changed()

    def roll(self) -> None:
        """Close the active segment and start a new one at the log end offset (Kafka's
        ``roll``); nothing happens when the active segment is empty."""
        with self._lock:
            self._check_open()
            before = self._writer.active_segment.base_offset
            self._writer.roll(now_ms=self._clock())
            if self._writer.active_segment.base_offset != before:
                self._on_roll()

    # -- cleaning ----------------------------------------------------------------------------------

    @contextlib.contextmanager
    def cleaning_session(self) -> Iterator[CleaningSession]:
        """The one cleaner of this log at a time: :class:`CleaningAbortedError` when the log is
        closing or another session is open. :meth:`close` waits for the session to end."""
        with self._cleaning_cond:
            if self._cleaning_stopped or self._closed:
                raise CleaningAbortedError(f"{self} is closed")
            if self._cleaning_active:
                raise CleaningAbortedError(f"{self} is already being cleaned")
            self._cleaning_active = True
        try:
            with self._lock:
                session = CleaningSession(self, self._truncations)
            yield session
        finally:
            with self._cleaning_cond:
                self._cleaning_active = False
                self._cleaning_cond.notify_all()

    def _stop_cleaning(self) -> None:
        """Stop a cleaning session and wait for it to end (never under the log's lock: the
        session may be waiting for it)."""
        with self._cleaning_cond:
            self._cleaning_stopped = True
            while self._cleaning_active:
                self._cleaning_cond.wait()

    def cleaning_snapshot(self) -> CleaningSnapshot:
        with self._lock:
            self._check_open()
            bases = self.segment_base_offsets[:-1]
            return CleaningSnapshot(
                tuple(bases), tuple(self._segment_size(b) for b in bases),
                self.active_segment_base_offset, self._writer.active_segment.size_in_bytes,
                self.log_start_offset, self.log_end_offset,
                self.last_stable_offset, self._truncations,
            )  # fmt: skip

    def segment_timestamps(self, base_offsets: Iterable[int]) -> dict[int, tuple[int, int]]:
        """(largest timestamp, first batch's max timestamp) of closed segments (-1 when a
        segment holds none); segments no longer in the log are left out."""
        with self._lock:
            self._check_open()
            present = set(self.segment_base_offsets[:-1])
            out = {}
            for base in base_offsets:
                if base in present:
                    view = self._open.segment(base)
                    first = next(iter(view.batches()), None)
                    out[base] = (
                        view.largest_timestamp,
                        -1 if first is None else first.max_timestamp,
                    )
            return out

    def last_records_of_active_producers(self) -> dict[int, LastRecord]:
        """Kafka's ``lastRecordsOfActiveProducers``: per producer, the offset of its last data
        batch and its epoch."""
        with self._lock:
            out = {}
            for pid, entry in self.producer_state.producers.items():
                last = entry.last_data_offset
                out[pid] = LastRecord(last if last >= 0 else None, entry.producer_epoch)
            return out

    def replace_segments(
        self, new_base: int, old_bases: Sequence[int], session: CleaningSession
    ) -> None:
        """Swap in ``<new_base>.*.cleaned`` for the closed segments ``old_bases`` (module
        docstring); :class:`CleaningAbortedError` (nothing renamed) when the session stopped,
        the log was truncated since the session began, or a segment to replace is gone or
        active."""
        with self._lock:
            session.check()
            self._check_open()
            if session.truncations != self._truncations:
                raise CleaningAbortedError(f"{self} was truncated while it was being cleaned")
            bases = self.segment_base_offsets
            closed = set(bases[:-1])
            if not old_bases or new_base != old_bases[0] or not closed.issuperset(old_bases):
                raise CleaningAbortedError(
                    f"{self}: segments {list(old_bases)} are no longer all closed segments of the "
                    "log (deleted by retention meanwhile?)"
                )
            d = self.directory
            cleaned = [self._path(new_base, x + CLEANED_SUFFIX) for x in SEGMENT_SUFFIXES]
            cleaned = [p for p in cleaned if p.exists()]
            if not cleaned or cleaned[0].name != _cleaned_name(new_base, LOG_SUFFIX):
                raise CleaningAbortedError(f"{self}: no cleaned segment {new_base} to swap in")
            swaps = []
            for p in cleaned:  # the .log first
                swap = p.with_name(p.name[: -len(CLEANED_SUFFIX)] + SWAP_SUFFIX)
                os.rename(p, swap)
                swaps.append(swap)
            fsync_dir(d)  # committed: a crash from here on completes the swap
            doomed = []
            for base in old_bases:
                self._open.drop(base)
                for x in SEGMENT_SUFFIXES:
                    p = self._path(base, x)
                    if p.exists():
                        gone = p.with_name(p.name + DELETED_SUFFIX)
                        os.rename(p, gone)
                        doomed.append(gone)
            for swap in swaps:
                os.rename(swap, swap.with_name(swap.name[: -len(SWAP_SUFFIX)]))
            fsync_dir(d)
            for base in old_bases[1:]:
                self._writer.forget_segment(base)
            for p in doomed:
                p.unlink(missing_ok=True)
            for base in old_bases[1:]:  # as Kafka's deleteProducerSnapshots of the replaced
                (d / snapshot_file_name(base)).unlink(missing_ok=True)

    # -- high watermark ----------------------------------------------------------------------------

    def update_high_watermark(self, offset: int) -> int:
        """Set the HW (clamped to [log start, log end]); returns the value set."""
        with self._lock:
            hw = min(max(offset, self.log_start_offset), self.log_end_offset)
            if hw != self.high_watermark:
                self.high_watermark = hw
                self.producer_state.on_high_watermark_updated(hw)
                self._changed()
            return hw

    def maybe_increment_high_watermark(self, offset: int) -> bool:
        """Move the HW up to ``offset`` (never down); True when it moved."""
        with self._lock:
            old = self.high_watermark
            return offset > old and self.update_high_watermark(offset) > old

    # -- reads -------------------------------------------------------------------------------------

    def read(
        self,
        fetch_offset: int,
        max_bytes: int,
        isolation: FetchIsolation = FetchIsolation.HIGH_WATERMARK,
        *,
        min_one_message: bool = True,
        zero_copy: bool = False,
    ) -> FetchDataInfo:
        """Kafka's log read (``LocalLog.fetch``); OFFSET_OUT_OF_RANGE outside [log start, log
        end]. ``zero_copy``: the records as a region of the segment file (fetch_data_info.py)."""
        with self._lock:
            self._check_open()
            hw = self.high_watermark
            offsets = LogOffsets(self.log_start_offset, hw, self.log_end_offset,
                                 self.producer_state.last_stable_offset(hw))  # fmt: skip
            return self.local_log.fetch(fetch_offset, max_bytes, isolation, offsets,
                                        min_one_message=min_one_message,
                                        zero_copy=zero_copy)  # fmt: skip

    def collect_aborted_transactions(
        self, fetch_offset: int, upper_bound_offset: int
    ) -> tuple[AbortedTxn, ...]:
        """The aborted transactions overlapping [fetch_offset, upper_bound_offset)."""
        with self._lock:
            return self.local_log.aborted_transactions(fetch_offset, upper_bound_offset)

    def batches(self, start_offset: int | None = None, end_offset: int | None = None) -> list:
        """Copies of the batches holding offsets in [start, end) (tests and tools; not a hot
        path)."""
        with self._lock:
            start = self.log_start_offset if start_offset is None else start_offset
            end = self.log_end_offset if end_offset is None else end_offset
            return [RecordBatch(bytes(b.buffer)) for b in self._batches(start, end)
                    if isinstance(b, RecordBatch)]  # fmt: skip

    def _batches(self, start: int, end: int) -> Iterator[AnyBatch]:
        return self.local_log.batches(start, end)

    def fetch_offset_by_timestamp(self, timestamp: int) -> TimestampAndOffset | None:
        """The first record with a timestamp >= ``timestamp`` (ListOffsets by time), or None."""
        with self._lock:
            self._check_open()
            return self.local_log.offset_by_timestamp(timestamp, self.log_start_offset)

    def offset_of_max_timestamp(self, below: int) -> TimestampAndOffset | None:
        """ListOffsets MAX_TIMESTAMP (-3): the record with the largest timestamp below offset
        ``below`` (the first such record on ties), or None for an empty range. Reads every
        batch header of the range and decodes one batch (not a hot path: an admin query)."""
        with self._lock:
            self._check_open()
            best = None
            for b in self._batches(self.log_start_offset, below):
                if isinstance(b, RecordBatch) and not b.is_control and b.base_offset < below:
                    if best is None or b.max_timestamp > best.max_timestamp:
                        best = RecordBatch(bytes(b.buffer))  # the walk may reuse its buffer
            if best is None:
                return None
            epoch = best.partition_leader_epoch
            record = next(r for r in best.records() if r.timestamp == best.max_timestamp)
            return TimestampAndOffset(record.timestamp, record.offset, None if epoch < 0 else epoch)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetsForLeaderEpoch: (largest epoch <= ``epoch``, its end offset) or (-1, -1)."""
        with self._lock:
            return self.leader_epoch_cache.end_offset_for(epoch, self.log_end_offset)

    # -- files -----------------------------------------------------------------------------------

    def _path(self, base: int, suffix: str) -> Path:
        return self.directory / (segment_file_stem(base) + suffix)

    def _floor_base(self, offset: int) -> int:
        bases = self.segment_base_offsets
        return bases[LogSegments(bases).floor_index(offset)]

    def _segment_size(self, base: int) -> int:
        if base == self._writer.active_segment.base_offset:
            return self._writer.active_segment.size_in_bytes
        return self._path(base, LOG_SUFFIX).stat().st_size

    # -- retention and truncation ------------------------------------------------------------------

    def delete_old_segments(self, now_ms: int | None = None) -> int:
        """Apply retention (time, size, log start offset); return the segments deleted."""
        with self._lock:
            self._check_open()
            now = self._clock() if now_ms is None else now_ms
            deleted = 0
            if self.config.delete and self.config.retention_ms >= 0:
                deleted += self._delete_while(lambda b, _: now - self._largest_ts(b) >
                                              self.config.retention_ms)  # fmt: skip
            if self.config.delete and self.config.retention_bytes >= 0:
                excess = [self.size_in_bytes - self.config.retention_bytes]

                def over_size(base: int, size: int) -> bool:
                    if excess[0] - size < 0:
                        return False
                    excess[0] -= size
                    return True

                deleted += self._delete_while(over_size)
            deleted += self._delete_while(lambda b, _: self._next_base(b) <= self.log_start_offset)
            return deleted

    def _largest_ts(self, base: int) -> int:
        ts = self._open.segment(base).largest_timestamp
        if ts < 0:  # no timestamps: Kafka uses the file's modification time
            return int(self._path(base, LOG_SUFFIX).stat().st_mtime * 1000)
        return ts

    def _next_base(self, base: int) -> int:
        bases = self.segment_base_offsets
        return bases[bases.index(base) + 1]

    def _delete_while(self, predicate: Callable[[int, int], bool]) -> int:
        """Delete closed segments from the oldest while ``predicate(base, size)`` holds and the
        segment lies wholly below the high watermark."""
        bases = self.segment_base_offsets[:-1]
        doomed = []
        for base in bases:
            if self._next_base(base) > self.high_watermark:
                break
            if not predicate(base, self._segment_size(base)):
                break
            doomed.append(base)
        if not doomed:
            return 0
        new_start = self._next_base(doomed[-1])
        for base in doomed:
            self._delete_segment(base)
        self._set_log_start_offset(max(self.log_start_offset, new_start))
        return len(doomed)

    def _delete_segment(self, base: int) -> None:
        self._open.drop(base)
        self._writer.forget_segment(base)
        self._delete_segment_files(base)

    def _delete_segment_files(self, base: int) -> None:
        delete_segment_files(self.directory, base)

    def _set_log_start_offset(self, offset: int) -> None:
        if offset == self.log_start_offset:
            return
        self.log_start_offset = offset
        if self.high_watermark < offset:
            self.high_watermark = offset
        self._truncate_epochs_from_start(offset)
        for snap_offset, path in list_snapshots(self.directory):
            if snap_offset < offset:
                path.unlink(missing_ok=True)
        self._changed()

    def _truncate_epochs_from_start(self, offset: int) -> None:
        """The leader epoch cache follows the log start offset. A checkpoint write that fails
        (a full disk) is counted, not raised: the cache changed in memory, and the file's extra
        entries below the log start are harmless (leader_epoch_file_cache.py), so DeleteRecords
        and retention still delete the segments below, which is how a full disk is freed."""
        try:
            self.leader_epoch_cache.truncate_from_start(offset)
        except OSError as e:
            self.health.failed(f"writing the leader epoch checkpoint of {self._where()}", e)

    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: move the log start offset up to ``offset`` (at most the HW) and delete
        the segments wholly below it; returns the new log start offset."""
        with self._lock:
            self._check_open()
            if offset > self.high_watermark or offset < 0:
                raise OffsetOutOfRangeError(
                    f"cannot delete records of {self._where()} before offset {offset}: it is "
                    f"outside [0, {self.high_watermark}] (the high watermark)"
                )
            if offset > self.log_start_offset:
                self._set_log_start_offset(offset)
                self._delete_while(lambda b, _: self._next_base(b) <= self.log_start_offset)
            return self.log_start_offset

    def truncate_to(self, offset: int) -> bool:
        """Remove every batch at or above ``offset`` (a follower dropping divergent history);
        True if anything was removed."""
        with self._lock:
            self._check_open()
            if offset >= self.log_end_offset:
                return False
            if offset <= self.segment_base_offsets[0]:
                self.truncate_fully_and_start_at(max(offset, 0))
                return True
            self._truncate_epochs_first(lambda: self.leader_epoch_cache.truncate_from_end(offset))
            with self._offline_if_it_fails(f"truncating to offset {offset}"):
                self._truncations += 1
                self._open.drop_all()
                bases = self.segment_base_offsets
                self._writer.close()
                for base in [b for b in bases if b >= offset]:
                    self._delete_segment_files(base)
                keep = max(b for b in bases if b < offset)
                with LogSegment.open(self.directory, keep) as seg:
                    cut = seg.position_of(offset)
                os.truncate(self._path(keep, LOG_SUFFIX), cut)
                for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):
                    self._path(keep, suffix).unlink(missing_ok=True)
                self._reopen_writer()
                self._after_truncation()
            return True

    def _truncate_epochs_first(self, truncate: Callable[[], None]) -> None:
        """A truncation cuts the leader epoch cache first: if its checkpoint cannot be written
        (a full disk), nothing changed and the caller gets :class:`KafkaStorageError` (a
        follower retries). A crash after it leaves fewer epochs than the log holds, which only
        makes the next truncation check more conservative."""
        try:
            truncate()
        except OSError as e:
            raise self._write_failed("truncating the leader epochs of", e) from e

    @contextlib.contextmanager
    def _offline_if_it_fails(self, what: str) -> Iterator[None]:
        """The rest of a truncation cannot be undone half way: a write that fails (no inode
        for the new segment) takes the log offline until a restart recovers it."""
        try:
            yield
        except (OSError, KafkaStorageError) as e:
            raise self._write_failed(what, LogDirFailureError(
                f"{what} in {self.directory} failed part way: {e}")) from e  # fmt: skip

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and restart the log, empty, at ``offset``."""
        with self._lock:
            self._check_open()
            self._truncate_epochs_first(self.leader_epoch_cache.clear_and_flush)
            with self._offline_if_it_fails(f"restarting the log at offset {offset}"):
                self._truncations += 1
                self._open.drop_all()
                self._writer.close()
                for base in self.segment_base_offsets:
                    self._delete_segment_files(base)
                self.producer_state.truncate_fully_and_start_at(offset)
                self._reopen_writer(start_offset=offset)
                self.log_start_offset = self.recovery_point = offset
                self._after_truncation()

    def _reopen_writer(self, start_offset: int = 0) -> None:
        self._writer = SegmentWriter(self.log_dir, self.topic_partition, self.config,
                                     topic_id=self.topic_id, start_offset=start_offset,
                                     clock_ms=self._clock)  # fmt: skip

    def _after_truncation(self) -> None:
        leo = self.log_end_offset
        floor = self._truncation_floor
        self._truncation_floor = leo if floor is None else min(floor, leo)
        self.log_start_offset = min(self.log_start_offset, leo)  # Kafka: min(target, log start)
        # entries at or above leo can only be the last segment's: the later ones were deleted
        self._writer.active_segment.txn_index.truncate_to(leo)
        self.leader_epoch_cache.truncate_from_end(leo)
        self._rebuild_producer_state()
        self.high_watermark = min(max(self.high_watermark, self.log_start_offset), leo)
        self.recovery_point = min(self.recovery_point, leo)
        self._changed()

    # -- flushing and closing ----------------------------------------------------------------------

    def flush(self) -> None:
        """fsync everything appended; the recovery point becomes the log end offset."""
        with self._lock:
            self._check_open()
            began = time.monotonic_ns()
            try:
                self._writer.flush()
                self._open.flush_views()
            except OSError as e:  # an fsync that failed: what it covered may be lost
                raise self._write_failed("flushing", LogDirFailureError(
                    f"flushing {self.directory} failed: {e}")) from e  # fmt: skip
            FLUSH_TIMES.observe(time.monotonic_ns() - began)
            self._unflushed_records = 0
            self.last_flush_ms = self._clock()
            if self.recovery_point != self.log_end_offset:
                self.recovery_point = self.log_end_offset
                self._changed()

    def maybe_flush_by_time(self, now_ms: int) -> bool:
        """Flush when ``flush.ms`` passed since the last flush and records are waiting."""
        with self._lock:
            if self._closed or self.failure is not None or self._unflushed_records == 0:
                return False
            if now_ms - self.last_flush_ms < self.config.flush_ms:
                return False
            self.flush()
            return True

    def update_config(self, config: LogConfig) -> None:
        """Take a topic's altered config (Kafka's ``updateConfig``): appends, rolls, retention,
        compaction and fetches follow it from now on; segments already written stay as they
        are (their index sizes, their records, their codec)."""
        with self._lock:
            self.config = config
            self._open.config = config
            self._writer.reconfigure(config)

    def close(self) -> None:
        """Flush, snapshot the producer state and close every file (idempotent)."""
        self._stop_cleaning()
        with self._lock:
            if self._closed:
                return
            if self.failure is None:
                try:
                    self.flush()
                    self._writer.close()
                except LogDirFailureError:
                    pass  # counted where it failed; self.failure is set
                except (OSError, KafkaStorageError) as e:
                    failed = LogDirFailureError(f"closing {self.directory} failed: {e}")
                    self._write_failed("closing", failed)
                else:
                    self._snapshot_producer_state()
            if self.failure is not None:  # as a crash leaves it: the next start recovers it
                self._writer.abandon()
            self._open.drop_all(abandon=self.failure is not None)
            self._closed = True

    def _snapshot_producer_state(self) -> None:
        """Snapshot the producer state (at a roll or close); a failed write is counted,
        not raised: recovery replays from an older snapshot."""
        try:
            self.producer_state.take_snapshot()
        except OSError as e:  # recovery replays from an older snapshot
            self.health.failed(f"writing the producer snapshot of {self._where()}", e)

    def close_without_flush(self) -> None:
        """Close the files as a crashing process would leave them: no flush, no snapshot, no
        final index entries written (for fault drills)."""
        self._stop_cleaning()
        with self._lock:
            self._open.drop_all(abandon=True)
            self._writer.abandon()
            self._closed = True


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
        start, end = int(rows[0, C_POSITION]), s[S_END]
        summary = RecordsSummary(s[S_FIRST_OFFSET], s[S_LAST_OFFSET], s[S_MAX_TS],
                                 s[S_OFFSET_OF_MAX_TS], end - start)  # fmt: skip
        return cls(rows, memoryview(buf)[start:end], summary, s[S_RECORDS], s[S_PRODUCERS])


def _stamp_append_time(buf: bytearray, scanned: _Scanned, append_time: int) -> _Scanned:
    """LogAppendTime: every batch's max timestamp becomes the append time (its CRC is
    recomputed); the first batch then holds the max timestamp."""
    rows = scanned.rows
    for pos in rows[:, C_POSITION].tolist():
        set_max_timestamp(buf, LOG_APPEND_TIME, append_time, pos)
    rows[:, C_MAX_TS] = append_time  # what the producer state keeps
    s = scanned.summary
    first_last = int(rows[0, C_BASE] + rows[0, C_LAST_DELTA])
    summary = RecordsSummary(s.first_offset, s.last_offset, append_time, first_last, s.size)
    return scanned._replace(summary=summary)


def _crcs_match(buf: bytes | bytearray | memoryview, rows: np.ndarray) -> bool:
    """Whether every batch of ``rows`` has the CRC-32C it stores (one ``crc32c`` call per
    batch: the package is hardware accelerated)."""
    view = memoryview(buf)
    for row in rows.tolist():  # whole rows: cheaper than a fancy index of three columns
        pos = row[C_POSITION]
        if crc32c_of(view[pos + ATTRIBUTES_OFFSET : pos + row[C_SIZE]]) != row[C_CRC]:
            return False
    return True


def _epoch_starts(rows: np.ndarray) -> list[tuple[int, int]]:
    """(leader epoch, base offset) of each replicated batch whose epoch differs from the
    batch before it: what assigning every batch's epoch changes in the cache (an epoch that
    continues changes nothing there)."""
    out = []
    previous = None
    for row in rows.tolist():
        epoch, base = row[C_EPOCH], row[C_BASE]
        if epoch != previous:
            out.append((epoch, base))
            previous = epoch
    return out


def _cleaned_name(offset: int, suffix: str) -> str:
    return segment_file_stem(offset) + suffix + CLEANED_SUFFIX


class OpenSegments:
    """The broker's :class:`~broker_embedded.storage.local_log.SegmentAccess`: the segments of
    the writer's listing, opened on first use and kept until the log drops them (retention,
    truncation, a swap), the active one the writer's own segment open for appending (its reads
    see every append through the indexes being appended to). Each segment owns its
    ``.txnindex``, which the log appends to in whichever segment holds an abort marker.
    Nothing is ever stale under the log's lock, so every operation runs once. Used under the
    log's lock only."""

    __slots__ = ("directory", "config", "_writer", "_views")

    recovery_point = 0  # the broker truncated any torn tail when it opened the log

    def __init__(
        self, directory: Path, config: LogConfig, writer: Callable[[], SegmentWriter]
    ) -> None:
        self.directory = directory
        self.config = config
        self._writer = writer
        self._views: dict[int, LogSegment] = {}

    def listing(self) -> LogSegments:
        return LogSegments(self._writer().segment_base_offsets)

    def attempt(self, op: Callable[[LogSegments], T], offset: int | None, what: str) -> T:
        return op(self.listing())

    def resume(
        self, start: int, what: str, walk: Callable[[LogSegments, int, Walked], Iterator[B]]
    ) -> Iterator[B]:
        return walk(self.listing(), start, _nothing)

    def check_in_place(self, seg: LogSegment) -> None:
        pass  # segments change only under the log's lock

    def segment(self, base: int) -> LogSegment:
        active = self._writer().active_segment
        if base == active.base_offset:
            return active  # open for appending: its reads see every append
        view = self._views.get(base)
        if view is None:
            view = LogSegment.open(
                self.directory, base, index_interval_bytes=self.config.index_interval_bytes
            )
            self._views[base] = view
        return view

    def drop(self, base: int, *, abandon: bool = False) -> None:
        """Close the view of closed segment ``base`` (``abandon``: without fsync, as a crash)."""
        view = self._views.pop(base, None)
        if view is not None:
            view.abandon() if abandon else view.close()

    def drop_all(self, *, abandon: bool = False) -> None:
        for base in list(self._views):
            self.drop(base, abandon=abandon)

    def flush_views(self) -> None:
        """fsync the ``.txnindex`` files appended to in closed segments."""
        for view in self._views.values():
            view.flush()

    def collect_aborted(
        self, seg: LogSegment, fetch_offset: int, upper: int
    ) -> TxnIndexSearchResult:
        return seg.collect_aborted(fetch_offset, upper)


def _nothing(seg: LogSegment) -> None:
    """A walk's progress, of no use where nothing goes stale."""
