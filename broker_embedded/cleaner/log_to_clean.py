"""Which offsets of a compacted log to clean, and how much it weighs (Kafka's ``LogToClean``
and ``LogCleanerManager.cleanableOffsets``): shared by the cleaner threads' choice
(log_cleaner_manager.py), the cleaner itself (cleaner.py) and the compaction job.

The dirty section runs from the cleaner checkpoint (the log start offset when there is none, or
when it lies outside ``[log start, log end]``) to the first uncleanable offset: the least of the
last stable offset, the active segment's base and the first segment younger than
``min.compaction.lag.ms``, rounded down to a segment boundary.

Thread safety: pure functions over a log's :class:`CleaningSnapshot`; values are frozen.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from broker_embedded.storage.cleaning_session import CleaningSnapshot
from broker_embedded.storage.log_segments import LogSegments
from broker_embedded.storage.unified_log import UnifiedLog

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class OffsetsToClean:
    """Kafka's ``OffsetsToClean``: the dirty section, and whether the checkpoint was invalid."""

    first_dirty_offset: int
    first_uncleanable_offset: int
    force_update_checkpoint: bool = False


@dataclass(frozen=True, slots=True)
class LogToClean:
    """A compacted log as the cleaner manager weighs it (Kafka's ``LogToClean``)."""

    log: UnifiedLog
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    cleanable_bytes: int
    need_compaction_now: bool = False

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        return self.cleanable_bytes / self.total_bytes if self.total_bytes else 0.0


def cleanable_offsets(
    log: UnifiedLog,
    snap: CleaningSnapshot,
    last_clean_offset: int | None,
    now_ms: int,
) -> OffsetsToClean:
    """Kafka's ``cleanableOffsets``: the dirty section of ``log`` given its checkpoint (see
    cleaner.py, step 1), the first uncleanable offset rounded down to a segment boundary."""
    start = snap.log_start_offset
    checkpoint = start if last_clean_offset is None else last_clean_offset
    force = False
    if checkpoint < start or checkpoint > snap.log_end_offset:
        if last_clean_offset is not None and not (log.config.delete and checkpoint < start):
            where = "below the log start offset" if checkpoint < start else "past the log end"
            _log.warning(
                "%s: cleaner checkpoint %d is %s; cleaning from %d", log, checkpoint, where, start
            )
        checkpoint, force = start, True
    candidates = [snap.last_stable_offset, snap.active_base_offset]
    lag = max(log.config.min_compaction_lag_ms, 0)
    bases = (*snap.base_offsets, snap.active_base_offset)
    if lag > 0:
        dirty = snap.base_offsets[LogSegments(bases).floor_index(checkpoint) :]
        stamps = log.segment_timestamps(dirty)
        for base in dirty:
            if base in stamps and stamps[base][0] > now_ms - lag:
                candidates.append(base)
                break
    uncleanable = min(candidates)
    if uncleanable >= bases[0]:
        uncleanable = bases[LogSegments(bases).floor_index(uncleanable)]
    return OffsetsToClean(checkpoint, max(checkpoint, uncleanable), force)


def log_to_clean(
    log: UnifiedLog, snap: CleaningSnapshot, offsets: OffsetsToClean, now_ms: int
) -> LogToClean:
    """Kafka's ``LogToClean`` with its max compaction delay (``max.compaction.lag.ms``)."""
    first_dirty, uncleanable = offsets.first_dirty_offset, offsets.first_uncleanable_offset
    bases = (*snap.base_offsets, snap.active_base_offset)
    sizes = (*snap.sizes, snap.active_size)
    clean = sum(s for b, s in zip(bases, sizes, strict=True) if b < first_dirty)
    lo = LogSegments(bases).floor_index(first_dirty)
    cleanable = sum(s for b, s in zip(bases[lo:], sizes[lo:], strict=True) if b < uncleanable)
    need_now = False
    max_lag = max(log.config.max_compaction_lag_ms, 0)
    cleanable_until = now_ms - max_lag
    if cleanable_until > 0:
        dirty = snap.base_offsets[LogSegments(bases).floor_index(first_dirty) :]
        firsts = [f for _, f in log.segment_timestamps(dirty).values() if f > 0]
        need_now = bool(firsts) and min(firsts) < cleanable_until
    return LogToClean(log, first_dirty, uncleanable, clean, cleanable, need_now)
