"""Which compacted log to clean and when (Kafka's ``LogCleanerManager``), the
``cleaner-offset-checkpoint`` file, and the cleaner threads of a log dir (Kafka's ``LogCleaner``).

File: ``<log dir>/cleaner-offset-checkpoint`` (offset_checkpoint.py's layout: ``topic partition
firstDirtyOffset``), written atomically after every round that cleaned something, for the logs
that still exist. A missing or unreadable file means "clean from the log start offset".

Choosing a log (:meth:`LogCleanerManager.grab_filthiest_compacted_log`): among the logs with
``cleanup.policy`` containing ``compact``, not being cleaned and not marked uncleanable (a log
whose cleaning failed on bad data stays out until the log dir is reopened), with bytes to
weigh: the dirty section of each (:func:`cleanable_offsets`); a log qualifies when its dirty
ratio (cleanable bytes / (clean + cleanable bytes)) exceeds ``min.cleanable.dirty.ratio`` or,
with cleanable bytes, when a dirty segment's first batch is older than
``max.compaction.lag.ms``; the one with the highest ratio wins. A checkpoint outside
``[log start, log end]`` is reset to the log start offset (and rewritten), and one above a
truncation the log went through is lowered to it (``UnifiedLog.pop_truncation_floor``).

Threads (:class:`LogCleaner`): ``log.cleaner.threads`` daemon threads, each with its own
:class:`~broker_embedded.cleaner.cleaner.Cleaner` and offset map of
``log.cleaner.dedupe.buffer.size / threads`` bytes (load factor
``log.cleaner.io.buffer.load.factor``), made when the thread first has a log to clean (so the
map and the compiled kernels, numba, load then: ``kafkalog serve`` with compacted topics that
need no cleaning never imports numba). A thread cleans the filthiest log (one round), writes
the checkpoint, applies retention to the ``compact,delete`` logs, and sleeps
``log.cleaner.backoff.ms`` when no log needed cleaning. A pass that fails to write (a full disk:
:data:`STORAGE_ERRORS`) leaves the log as it was (cleaner.py) and cleanable: the thread logs one
warning for the episode (then a debug line per retry), sleeps ``log.cleaner.backoff.ms`` and
retries, and logs one info line when a pass succeeds again (Kafka takes the log dir offline
instead; here the broker keeps serving reads). Other errors mark the partition uncleanable until
the log dir is reopened, as in Kafka. :meth:`LogCleaner.shutdown` stops the threads: a round in
progress stops at its next window (what it swapped in so far stays: every swap is complete and
valid). :meth:`LogCleaner.clean_log` cleans one log at once in the caller's thread (tools, the
compaction job: the caller holds the log dir's lock).

The compiled cleaner is imported on first use, so that importing this module (the log manager
does) does not load numba.

Thread safety: the manager's state is guarded by its lock; checkpoint writes are serialised by
it; a log is cleaned by one thread at a time (the in-progress set, and the log's cleaning
session).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from broker_embedded.cleaner.log_to_clean import (
    LogToClean,
    OffsetsToClean,
    cleanable_offsets,
    log_to_clean,
)
from broker_embedded.errors import KafkaLogError, KafkaStorageError
from broker_embedded.storage.cleaning_lock import checkpoint_lock
from broker_embedded.storage.cleaning_session import CleaningAbortedError
from broker_embedded.storage.offset_checkpoint import (
    CLEANER_OFFSET_CHECKPOINT,
    OffsetCheckpointFile,
)
from broker_embedded.storage.segment_writer import wall_clock_ms
from broker_embedded.storage.topic_partition import TopicPartition
from broker_embedded.storage.unified_log import UnifiedLog

if TYPE_CHECKING:
    from broker_embedded.cleaner.cleaner import Cleaner
    from broker_embedded.cleaner.cleaner_stats import CleanResult

_log = logging.getLogger(__name__)

DEFAULT_DEDUPE_BUFFER_SIZE = 128 << 20
DEFAULT_LOAD_FACTOR = 0.9
DEFAULT_BACKOFF_MS = 15_000
DEFAULT_WINDOW_BYTES = 4 << 20
# what a cleaner thread retries after log.cleaner.backoff.ms (a full disk), logging once
STORAGE_ERRORS = (KafkaStorageError, OSError)


@dataclass(frozen=True)
class LogCleanerConfig:
    """The cleaner's broker settings (Kafka's ``log.cleaner.*`` names)."""

    threads: int = 1
    dedupe_buffer_size: int = DEFAULT_DEDUPE_BUFFER_SIZE
    load_factor: float = DEFAULT_LOAD_FACTOR
    backoff_ms: int = DEFAULT_BACKOFF_MS
    window_bytes: int = DEFAULT_WINDOW_BYTES

    def __post_init__(self) -> None:
        if self.threads < 0:
            raise ValueError(f"log.cleaner.threads must be >= 0, not {self.threads}")
        if self.threads and self.dedupe_buffer_size // self.threads < 24:
            raise ValueError(
                f"log.cleaner.dedupe.buffer.size {self.dedupe_buffer_size} leaves less than one "
                f"24-byte slot per cleaner thread ({self.threads} threads)"
            )
        if not 0.0 < self.load_factor <= 1.0:
            raise ValueError(
                f"log.cleaner.io.buffer.load.factor must be in (0, 1], not {self.load_factor}"
            )
        if self.backoff_ms <= 0:
            raise ValueError(f"log.cleaner.backoff.ms must be > 0, not {self.backoff_ms}")

    @property
    def map_memory(self) -> int:
        """Bytes of one thread's offset map."""
        return self.dedupe_buffer_size // max(self.threads, 1)

    def new_log_cleaner(
        self,
        log_dir: str | Path,
        logs: Callable[[], Mapping[TopicPartition, UnifiedLog]],
        *,
        clock_ms: Callable[[], int] = wall_clock_ms,
    ) -> LogCleaner:
        """The cleaner threads of ``log_dir`` with these settings (how the log manager, below
        this package, starts them: storage/log_manager.py's ``LogCleanerSettings``)."""
        return LogCleaner(self, log_dir, logs, clock_ms=clock_ms)

    @classmethod
    def from_broker_config(cls, config: Any) -> LogCleanerConfig:
        """From a ``BrokerConfig`` (its ``log_cleaner_*`` attributes)."""
        return cls(
            threads=config.log_cleaner_threads,
            dedupe_buffer_size=config.log_cleaner_dedupe_buffer_size,
            load_factor=config.log_cleaner_io_buffer_load_factor,
            backoff_ms=config.log_cleaner_backoff_ms,
        )


# -- a compaction job's checkpoint entry -------------------------------------------------------


def read_cleaner_checkpoint(log_dir: str | Path, tp: TopicPartition) -> int | None:
    """The first dirty offset of ``tp`` in ``cleaner-offset-checkpoint`` (None: none, or an
    unreadable file, which means "clean from the log start offset")."""
    try:
        return OffsetCheckpointFile(Path(log_dir) / CLEANER_OFFSET_CHECKPOINT).read().get(tp)
    except FileNotFoundError:
        return None
    except KafkaLogError as e:
        _log.warning("ignoring %s: %s", Path(log_dir) / CLEANER_OFFSET_CHECKPOINT, e)
        return None


def record_cleaner_checkpoint(log_dir: str | Path, tp: TopicPartition, offset: int) -> None:
    """Set the entry of ``tp`` in ``cleaner-offset-checkpoint`` for a compaction job holding its
    partition cleaning lock: read, set, atomic write, under ``checkpoint.lock``
    (cleaning_lock.py), as other tasks update their partitions' entries meanwhile."""
    path = Path(log_dir) / CLEANER_OFFSET_CHECKPOINT
    with checkpoint_lock(log_dir):
        f = OffsetCheckpointFile(path)
        try:
            entries = f.read_or_empty()
        except KafkaLogError as e:
            _log.warning("rewriting unreadable %s: %s", path, e)
            entries = {}
        entries[tp] = offset
        f.write(dict(sorted(entries.items())))


# -- the manager -------------------------------------------------------------------------------


class LogCleanerManager:
    """The cleaning state of one log dir's compacted logs; see the module docstring.

    ``logs``: returns the log dir's current logs (a copy the caller may iterate)."""

    def __init__(
        self,
        log_dir: str | Path,
        logs: Callable[[], Mapping[TopicPartition, UnifiedLog]],
        *,
        clock_ms: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self.log_dir = Path(log_dir)
        self._logs = logs
        self._clock = clock_ms
        self._lock = threading.Lock()
        self._file = OffsetCheckpointFile(self.log_dir / CLEANER_OFFSET_CHECKPOINT)
        try:
            self._checkpoints = self._file.read_or_empty()
        except KafkaLogError as e:
            _log.warning("ignoring %s: %s", self._file.path, e)
            self._checkpoints = {}
        self._in_progress: set[TopicPartition] = set()
        self._uncleanable: set[TopicPartition] = set()
        self.dirtiest_log_cleanable_ratio = 0.0

    # -- checkpoints ---------------------------------------------------------------------------

    def all_cleaner_checkpoints(self) -> dict[TopicPartition, int]:
        with self._lock:
            return dict(self._checkpoints)

    def update_checkpoint(self, tp: TopicPartition, offset: int | None) -> None:
        """Set (``None``: remove) the first dirty offset of ``tp`` and rewrite the file, keeping
        the entries of the logs that still exist."""
        with self._lock:
            self._update_locked(tp, offset)

    def _update_locked(self, tp: TopicPartition, offset: int | None) -> None:
        if offset is None:
            self._checkpoints.pop(tp, None)
        else:
            self._checkpoints[tp] = offset
        existing = self._logs()
        self._checkpoints = {p: o for p, o in sorted(self._checkpoints.items()) if p in existing}
        self._file.write(self._checkpoints)

    def forget(self, partitions: Iterable[TopicPartition]) -> None:
        """Drop deleted partitions (their checkpoints and uncleanable marks)."""
        with self._lock:
            changed = False
            for tp in partitions:
                changed |= self._checkpoints.pop(tp, None) is not None
                self._uncleanable.discard(tp)
            if changed:
                self._file.write(self._checkpoints)

    # -- choosing ------------------------------------------------------------------------------

    def _checkpoint_for(self, tp: TopicPartition, lg: UnifiedLog) -> int | None:
        """Under the lock: the checkpoint, lowered to a truncation the log went through."""
        checkpoint = self._checkpoints.get(tp)
        floor = lg.pop_truncation_floor()
        if floor is not None and checkpoint is not None and checkpoint > floor:
            self._update_locked(tp, floor)
            checkpoint = floor
        return checkpoint

    def log_to_clean(self, tp: TopicPartition, lg: UnifiedLog, now_ms: int) -> LogToClean:
        """How dirty ``lg`` is now (fixing an invalid checkpoint on the way)."""
        with self._lock:
            snap = lg.cleaning_snapshot()
            offsets = cleanable_offsets(lg, snap, self._checkpoint_for(tp, lg), now_ms)
            if offsets.force_update_checkpoint:
                self._update_locked(tp, offsets.first_dirty_offset)
            return log_to_clean(lg, snap, offsets, now_ms)

    def grab_filthiest_compacted_log(self, now_ms: int | None = None) -> LogToClean | None:
        """The dirtiest log that should be cleaned now, marked in progress; None if none."""
        now = self._clock() if now_ms is None else now_ms
        candidates = []
        for tp, lg in sorted(self._logs().items()):
            if not lg.config.compact or lg.is_closed:
                continue
            with self._lock:
                if tp in self._in_progress or tp in self._uncleanable:
                    continue
            try:
                ltc = self.log_to_clean(tp, lg, now)
            except KafkaLogError as e:  # closed meanwhile, ...
                _log.debug("skipping %s: %s", tp, e)
                continue
            if ltc.total_bytes > 0:
                candidates.append((tp, ltc))
        self.dirtiest_log_cleanable_ratio = max(
            (ltc.cleanable_ratio for _, ltc in candidates), default=0.0
        )
        ready = [
            (tp, ltc)
            for tp, ltc in candidates
            if (ltc.need_compaction_now and ltc.cleanable_bytes > 0)
            or ltc.cleanable_ratio > ltc.log.config.min_cleanable_dirty_ratio
        ]
        with self._lock:
            ready = [(tp, ltc) for tp, ltc in ready if tp not in self._in_progress]
            if not ready:
                return None
            tp, ltc = max(ready, key=lambda item: item[1].cleanable_ratio)
            self._in_progress.add(tp)
            return ltc

    def begin_cleaning(self, tp: TopicPartition) -> bool:
        """Mark ``tp`` in progress (False: another thread cleans it)."""
        with self._lock:
            if tp in self._in_progress:
                return False
            self._in_progress.add(tp)
            return True

    def done_cleaning(self, tp: TopicPartition, end_offset: int | None) -> None:
        """The end of a round: record ``end_offset`` (None: nothing to record)."""
        with self._lock:
            self._in_progress.discard(tp)
            if end_offset is not None and self._checkpoints.get(tp) != end_offset:
                self._update_locked(tp, end_offset)

    def mark_uncleanable(self, tp: TopicPartition) -> None:
        with self._lock:
            self._in_progress.discard(tp)
            self._uncleanable.add(tp)

    @property
    def uncleanable_partitions(self) -> frozenset[TopicPartition]:
        with self._lock:
            return frozenset(self._uncleanable)

    def deletable_logs(self) -> list[UnifiedLog]:
        """The ``compact,delete`` logs not being cleaned (their retention runs after cleaning)."""
        with self._lock:
            busy = set(self._in_progress)
        return [
            lg
            for tp, lg in sorted(self._logs().items())
            if lg.config.compact and lg.config.delete and tp not in busy and not lg.is_closed
        ]


# -- the threads -------------------------------------------------------------------------------


class LogCleaner:
    """The cleaner threads of one log dir; see the module docstring."""

    def __init__(
        self,
        config: LogCleanerConfig,
        log_dir: str | Path,
        logs: Callable[[], Mapping[TopicPartition, UnifiedLog]],
        *,
        clock_ms: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self.config = config
        self._clock = clock_ms
        self._logs = logs
        self.manager = LogCleanerManager(log_dir, logs, clock_ms=clock_ms)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self.last_results: dict[TopicPartition, CleanResult] = {}
        # for the metrics endpoint: when the last pass ended (-1: none yet), bytes of the rounds
        # that cleaned something (Kafka's CleanerStats bytesRead / bytesWritten, added up)
        self.last_run_ms = -1
        self.bytes_read = 0
        self.bytes_written = 0

    @property
    def is_started(self) -> bool:
        return bool(self._threads)

    def forget(self, partitions: Iterable[TopicPartition]) -> None:
        """Drop deleted partitions' cleaning state (:meth:`LogCleanerManager.forget`)."""
        self.manager.forget(partitions)

    def new_cleaner(self) -> Cleaner:
        """A cleaner with its own offset map of :attr:`LogCleanerConfig.map_memory` bytes."""
        from broker_embedded.cleaner.cleaner import Cleaner
        from broker_embedded.cleaner.skimpy_offset_map import SkimpyOffsetMap

        offset_map = SkimpyOffsetMap(self.config.map_memory, self.config.load_factor)
        return Cleaner(
            offset_map,
            window_bytes=self.config.window_bytes,
            clock_ms=self._clock,
            should_stop=self._stop.is_set,
        )

    def startup(self) -> None:
        """Start the cleaner threads (once)."""
        with self._lock:
            if self._threads or self._stop.is_set():
                return
            for i in range(self.config.threads):
                t = threading.Thread(
                    target=self._run, name=f"kafka-log-cleaner-thread-{i}", daemon=True
                )
                self._threads.append(t)
                t.start()

    def shutdown(self, timeout: float | None = None) -> None:
        """Stop the threads; a round in progress stops at its next window."""
        self._stop.set()
        with self._lock:
            threads = list(self._threads)
        for t in threads:
            if t is not threading.current_thread():
                t.join(timeout)

    def _run(self) -> None:
        cleaner: Cleaner | None = None

        def this_threads_cleaner() -> Cleaner:
            """Made when this thread first has a log to clean: its offset map, and the compiled
            kernels (numba), load then, not when a compacted topic merely exists."""
            nonlocal cleaner
            if cleaner is None:
                cleaner = self.new_cleaner()
            return cleaner

        failures = 0  # this thread's passes in a row that failed to write (a full disk)
        while not self._stop.is_set():
            try:
                cleaned = self.clean_once(this_threads_cleaner)
                if failures:
                    _log.info(
                        "log cleaner: a pass succeeded after %d that failed to write", failures
                    )
                    failures = 0
            except STORAGE_ERRORS as e:  # a full disk: not the log's fault, retried
                failures += 1
                self._log_storage_failure(e, failures)
                cleaned = False
            except Exception:  # keep the thread alive: the next pass retries
                _log.exception("log cleaner pass failed")
                cleaned = False
            if not cleaned:
                self._stop.wait(self.config.backoff_ms / 1000)

    def _log_storage_failure(self, error: BaseException, failures: int) -> None:
        """One warning per episode of failed writes (its first pass), a debug line per retry."""
        if failures == 1:
            _log.warning(
                "log cleaner: %s; retried every log.cleaner.backoff.ms (%d ms) until it succeeds",
                error,
                self.config.backoff_ms,
            )
        else:
            _log.debug("log cleaner: attempt %d failed too: %s", failures, error)

    def clean_once(self, cleaner: Cleaner | Callable[[], Cleaner]) -> bool:
        """Clean the filthiest log (one round), then apply retention to ``compact,delete``
        logs; True if a log was cleaned. ``cleaner`` may be a function giving it, called only
        when there is a log to clean."""
        ltc = self.manager.grab_filthiest_compacted_log()
        cleaned = False
        if ltc is not None:
            try:
                if callable(cleaner):
                    cleaner = cleaner()
            except BaseException:
                self.manager.done_cleaning(ltc.log.topic_partition, None)
                raise
            self._clean(cleaner, ltc.log.topic_partition, ltc)
            cleaned = True
        for lg in self.manager.deletable_logs():
            if self._stop.is_set():
                break
            try:
                lg.delete_old_segments()
            except KafkaLogError as e:
                _log.debug("retention of %s skipped: %s", lg, e)
        self.last_run_ms = self._clock()
        return cleaned

    def clean_log(
        self, tp: TopicPartition, cleaner: Cleaner | None = None, *, now_ms: int | None = None
    ) -> CleanResult | None:
        """One round over the log of ``tp`` now, whatever its dirty ratio (None when another
        thread is cleaning it or the log does not exist)."""
        lg = self._logs().get(tp)
        if lg is None or not self.manager.begin_cleaning(tp):
            return None
        try:
            ltc = self.manager.log_to_clean(tp, lg, self._clock() if now_ms is None else now_ms)
            cleaner = cleaner or self.new_cleaner()
        except BaseException:
            self.manager.done_cleaning(tp, None)
            raise
        return self._clean(cleaner, tp, ltc, now_ms=now_ms)

    def _clean(
        self, cleaner: Cleaner, tp: TopicPartition, ltc: LogToClean, *, now_ms: int | None = None
    ) -> CleanResult | None:
        """Under the in-progress mark of ``tp`` (released here)."""
        end = None
        try:
            offsets = OffsetsToClean(ltc.first_dirty_offset, ltc.first_uncleanable_offset)
            result = cleaner.clean(ltc.log, now_ms=now_ms, offsets=offsets)
            self.last_results[tp] = result
            if result.cleaned:
                end = result.end_offset
                with self._lock:
                    self.bytes_read += result.stats.bytes_read
                    self.bytes_written += result.stats.bytes_written
                _log.info("cleaned %s: %s", tp, result)
            return result
        except CleaningAbortedError as e:
            _log.info("cleaning of %s aborted: %s", tp, e)
            return None
        except STORAGE_ERRORS:
            raise  # the disk's fault, not the log's: it stays cleanable (the caller reports)
        except Exception:
            _log.exception("cleaning %s failed: the partition is marked uncleanable", tp)
            self.manager.mark_uncleanable(tp)
            raise
        finally:
            self.manager.done_cleaning(tp, end)
