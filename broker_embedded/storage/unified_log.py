"""One partition's log as a broker holds it (Kafka's ``UnifiedLog`` with its ``LocalLog``).

Files in ``<log dir>/<topic>-<partition>/``: the segments (``<base>.log``, ``.index``,
``.timeindex``, ``.txnindex``; segment_writer.py, log_segment.py, transaction_index.py), producer
snapshots (``<offset>.snapshot``; snapshot_file.py), ``leader-epoch-checkpoint``
(leader_epoch_file_cache.py) and ``partition.metadata``. The log dir's checkpoint files (high
watermark, recovery point, log start offset) are written by the log manager from this object's
offsets.

Offsets: ``log_start_offset <= high_watermark <= log_end_offset``; the last stable offset (LSO)
is ``min(first offset of any transaction still open as of the HW, HW)``; the recovery point is the
offset below which everything was fsynced. Offsets are assigned contiguously on the leader, but a
log holds gaps (compaction, transaction markers), so nothing here assumes ``offset + 1`` exists.

Appending, as leader (:meth:`append_as_leader`, client batches validated, offsets assigned)
or as follower (:meth:`append_as_follower`, the leader's offsets kept): log_appender.py.

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
that base offset (the closed segments were fsynced when they rolled). Flushing: every
``flush.messages`` appended records, or when the log manager sees ``flush.ms`` elapsed; the
recovery point then becomes the log end offset. Each flush's time goes to :data:`FLUSH_TIMES`
(Kafka's ``LogFlushRateAndTimeMs``).

Retention, DeleteRecords and the log start offset of a tiered log (:meth:`delete_old_segments`,
:meth:`delete_records_before`, :attr:`remote_end_offset`): log_retention.py.

Opening (log_loader.py, Kafka's ``LogLoader``) first settles an interrupted cleaner swap, then
recovers the closed segments (index sanity checks; after an unclean shutdown a scan from the
segment holding the recovery point, truncating a corrupt tail); the segment writer recovers the
last segment. The producer state is then reloaded from the latest snapshot and the log
replayed after it, rebuilding the ``.txnindex`` entries of the replayed aborted transactions and,
after an unclean shutdown, the leader epochs of replayed batches newer than the cache's.
Opening a tiered log takes the log start from the checkpoint as is, 0 when it has no entry
(Kafka's ``LogLoader``); any other log's is at least its first segment's base.

Truncation (:meth:`truncate_to`, a follower dropping divergent history) removes every batch at
or above the offset (a batch holding it goes whole) and everything that followed from them: the
leader epochs, producer state, snapshots and ``.txnindex`` entries above the new log end offset;
the HW, recovery point and log start offset are capped by it.
:meth:`truncate_fully_and_start_at` restarts the log empty at an offset; a tiered follower
restarting from the store passes the stored segment's leader epochs (written in the same
checkpoint write that empties the cache) and producer snapshot (written as
``<offset>.snapshot`` and loaded).

Replacing segments (the cleaner's swap, :meth:`replace_segments`) and cleaning sessions
(:meth:`cleaning_session`; :meth:`close` stops one and waits for it): cleaning_session.py.

Reads go through a ``LocalLog`` (local_log.py, the reader the read-only view shares) with this
log's policy, :class:`OpenSegments` (open_segments.py: its segment views, the active one shared
with the writer's in-memory indexes; each segment with its ``.txnindex``). They copy the bytes
(``bytes``), so a later truncation can never pull a mapping from under a reader in this process.
A read of a tiered log in ``[log start, local log start)`` is
:class:`OffsetMovedToTieredStorageError` (the replica manager serves it from the store).
Thread safety: every public method takes the log's lock.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from broker_embedded.errors import (
    BrokerClosedError,
    KafkaStorageError,
    LogDirFailureError,
    OffsetMovedToTieredStorageError,
    OffsetOutOfRangeError,
)
from broker_embedded.latency_histogram import LatencyHistogram
from broker_embedded.record.record_batch import RecordBatch
from broker_embedded.record.records import AnyBatch
from broker_embedded.storage.checkpoint_file import write_atomically
from broker_embedded.storage.cleaning_session import CleanableLog
from broker_embedded.storage.fetch_data_info import FetchDataInfo, FetchIsolation
from broker_embedded.storage.leader_epoch_checkpoint import LEADER_EPOCH_CHECKPOINT, EpochEntry
from broker_embedded.storage.leader_epoch_file_cache import LeaderEpochFileCache
from broker_embedded.storage.local_log import LocalLog, LogOffsets
from broker_embedded.storage.log_appender import LogAppender
from broker_embedded.storage.log_config import LogConfig
from broker_embedded.storage.log_file_utils import LOG_SUFFIX, segment_file_stem
from broker_embedded.storage.log_loader import LogLoader, delete_segment_files
from broker_embedded.storage.log_retention import LogRetention
from broker_embedded.storage.log_segment import LogSegment, TimestampAndOffset
from broker_embedded.storage.log_segments import LogSegments
from broker_embedded.storage.offset_index import INDEX_SUFFIX
from broker_embedded.storage.open_segments import OpenSegments
from broker_embedded.storage.producer_state_manager import ProducerStateManager
from broker_embedded.storage.segment_writer import SegmentWriter, wall_clock_ms
from broker_embedded.storage.snapshot_file import snapshot_file_name
from broker_embedded.storage.storage_health import StorageHealth
from broker_embedded.storage.time_index import TIME_INDEX_SUFFIX
from broker_embedded.storage.topic_partition import TopicPartition
from broker_embedded.storage.transaction_index import AbortedTxn

log = logging.getLogger(__name__)
# every flush's time, process-wide as Kafka's LogFlushStats (read by the metrics endpoint)
FLUSH_TIMES = LatencyHistogram()


class UnifiedLog(LogAppender, CleanableLog, LogRetention):
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
        remote_storage_system_enable: bool = True,
    ) -> None:
        # the broker's remote.log.storage.system.enable: off, a topic's remote.storage.enable
        # does nothing (Kafka's isRemoteLogEnabled)
        self.remote_storage_system_enable = remote_storage_system_enable
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
        # the offset after the last segment in remote storage (remote_log_manager.py; Kafka's
        # highestOffsetInRemoteStorage + 1); -1 until the remote log manager has looked
        self.remote_end_offset = -1
        self.directory.mkdir(parents=True, exist_ok=True)
        loader = LogLoader(self.directory, config, clock_ms, repr(self))
        loader.settle_interrupted_swaps()
        recover = not had_clean_shutdown
        loader.load_segments(recovery_point, recover)
        self._open = OpenSegments(self.directory, config, lambda: self._writer)
        self.local_log = LocalLog(topic_partition, self.directory, self._open)
        self._writer = SegmentWriter(
            self.log_dir,
            topic_partition,
            config,
            topic_id=topic_id,
            recover=recover,
            recovery_point=recovery_point,
            start_offset=log_start_offset or 0,
            clock_ms=clock_ms,
        )
        leo = self.log_end_offset
        first = self._writer.segment_base_offsets[0]
        if self.remote_log_enabled:
            # Kafka's LogLoader: a tiered log's start is the checkpoint's, 0 without an entry
            # (the segments below the first local one are in the store; a follower killed
            # before its first checkpoint takes its leader's again); the local start is the
            # first segment's
            self.log_start_offset = min(log_start_offset or 0, leo)
        else:
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
        start = max(psm.map_end_offset, self.local_log_start_offset)
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

    def clock_ms(self) -> int:
        """This log's clock (ms since the epoch): what its retention counts from."""
        return self._clock()

    @property
    def local_log_start_offset(self) -> int:
        """The first offset held in this log dir (Kafka's ``localLogStartOffset``; ListOffsets
        EARLIEST_LOCAL): the first segment's base offset, at least the log start offset. Above
        :attr:`log_start_offset` only for a topic with ``remote.storage.enable`` whose local
        retention deleted segments already in the store."""
        return max(self.log_start_offset, self._writer.segment_base_offsets[0])

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

    @property
    def remote_log_enabled(self) -> bool:
        """Whether the log is tiered (Kafka's ``isRemoteLogEnabled``): the topic's
        ``remote.storage.enable`` and the broker's ``remote.log.storage.system.enable``."""
        return self.remote_storage_system_enable and self.config.remote_storage_enable

    @property
    def remote_copy_enabled(self) -> bool:
        """Whether the log is tiered and still copied (Kafka's
        ``remoteLogEnabledAndRemoteCopyEnabled``: not ``remote.log.copy.disable``); only then
        does local retention follow ``local.retention.*`` and wait for the store."""
        return self.remote_log_enabled and not self.config.remote_log_copy_disable

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
            local_start = self.local_log_start_offset
            if self.log_start_offset <= fetch_offset < local_start:
                raise OffsetMovedToTieredStorageError(
                    f"fetch offset {fetch_offset} of {self._where()} is in remote storage: "
                    f"below {local_start}, the first offset in {self.directory} (log start "
                    f"{self.log_start_offset})"
                )
            offsets = LogOffsets(
                local_start, hw, self.log_end_offset, self.producer_state.last_stable_offset(hw)
            )
            try:
                info = self.local_log.fetch(
                    fetch_offset,
                    max_bytes,
                    isolation,
                    offsets,
                    min_one_message=min_one_message,
                    zero_copy=zero_copy,
                )
            except OffsetOutOfRangeError as e:
                if local_start == self.log_start_offset:
                    raise
                raise OffsetOutOfRangeError(
                    f"{e} (the log starts at {self.log_start_offset} in remote storage)"
                ) from None
            if local_start == self.log_start_offset:
                return info
            return dataclasses.replace(info, log_start_offset=self.log_start_offset)

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
            start = self.local_log_start_offset if start_offset is None else start_offset
            end = self.log_end_offset if end_offset is None else end_offset
            return [
                RecordBatch(bytes(b.buffer))
                for b in self._batches(start, end)
                if isinstance(b, RecordBatch)
            ]

    def _batches(self, start: int, end: int) -> Iterator[AnyBatch]:
        return self.local_log.batches(start, end)

    def fetch_offset_by_timestamp(self, timestamp: int) -> TimestampAndOffset | None:
        """The first record with a timestamp >= ``timestamp`` (ListOffsets by time), or None."""
        with self._lock:
            self._check_open()
            return self.local_log.offset_by_timestamp(timestamp, self.local_log_start_offset)

    def offset_of_max_timestamp(self, below: int) -> TimestampAndOffset | None:
        """ListOffsets MAX_TIMESTAMP (-3): the record with the largest timestamp below offset
        ``below`` (the first such record on ties), or None for an empty range. Reads every
        batch header of the range and decodes one batch (not a hot path: an admin query)."""
        with self._lock:
            self._check_open()
            best = None
            for b in self._batches(self.local_log_start_offset, below):
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

    def _delete_segment_files(self, base: int) -> None:
        delete_segment_files(self.directory, base)

    # -- truncation --------------------------------------------------------------------------------

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
            raise self._write_failed(
                what, LogDirFailureError(f"{what} in {self.directory} failed part way: {e}")
            ) from e

    def truncate_fully_and_start_at(
        self,
        offset: int,
        *,
        log_start_offset: int | None = None,
        leader_epochs: Sequence[EpochEntry] = (),
        producer_snapshot: bytes | None = None,
    ) -> None:
        """Delete every segment and restart the log, empty, at ``offset``; its log start offset
        ``log_start_offset`` (at most ``offset``; a tiered follower's: the leader's, in the
        store) or ``offset``. A tiered follower restarting at the end of a stored segment
        (Kafka's ``buildRemoteLogAuxState``) passes that segment's ``leader_epochs`` (all
        starting below ``offset``: the cache becomes them, in the same checkpoint write that
        empties it) and its ``producer_snapshot`` (the bytes of ``<offset>.snapshot``, already
        decoded once by the caller: written to the log's directory and loaded, so the producer
        state is the leader's at ``offset``). A crash between the segments' deletion and the
        snapshot's write leaves the log empty at ``offset`` without producer state (Kafka has
        the same window)."""
        with self._lock:
            self._check_open()
            epochs = [e for e in leader_epochs if e.start_offset < offset]
            self._truncate_epochs_first(lambda: self.leader_epoch_cache.clear_and_flush(epochs))
            with self._offline_if_it_fails(f"restarting the log at offset {offset}"):
                self._truncations += 1
                self._open.drop_all()
                self._writer.close()
                for base in self.segment_base_offsets:
                    self._delete_segment_files(base)
                self.producer_state.truncate_fully_and_start_at(offset)
                self._reopen_writer(start_offset=offset)
                self.log_start_offset = self.recovery_point = offset
                if log_start_offset is not None and self.remote_log_enabled:
                    self.log_start_offset = min(log_start_offset, offset)
                snapshot = self.directory / snapshot_file_name(offset)
                if producer_snapshot is not None:
                    write_atomically(snapshot, producer_snapshot)
                self._after_truncation()
                if producer_snapshot is not None:  # _after_truncation kept the empty state
                    self.producer_state.load_snapshot(snapshot, now_ms=self._clock())
                self._truncate_epochs_from_start(self.log_start_offset)

    def _reopen_writer(self, start_offset: int = 0) -> None:
        self._writer = SegmentWriter(
            self.log_dir,
            self.topic_partition,
            self.config,
            topic_id=self.topic_id,
            start_offset=start_offset,
            clock_ms=self._clock,
        )

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
                raise self._write_failed(
                    "flushing", LogDirFailureError(f"flushing {self.directory} failed: {e}")
                ) from e
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
