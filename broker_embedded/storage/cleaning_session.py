"""The log's side of cleaning (Kafka's ``UnifiedLog.replaceSegments`` and what the cleaner reads
of a log): :class:`CleanableLog`, a base class of
:class:`~broker_embedded.storage.unified_log.UnifiedLog` holding its cleaning methods, and the
values they hand the cleaner (:class:`CleaningSnapshot`, :class:`LastRecord`,
:class:`CleaningSession`).

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

Cleaning sessions (:meth:`CleanableLog.cleaning_session`): a cleaner works outside the log's
lock, reading closed segments; ``UnifiedLog.close`` stops a session (the cleaner sees it between
windows) and waits for it to end, and a truncation makes the session's
:meth:`replace_segments` refuse (:class:`CleaningAbortedError`), as do replaced segments that
retention deleted meanwhile.

Thread safety: the session flags are guarded by the log's cleaning condition, everything else
by the log's lock; the methods work on the log's own state (unified_log.py), so this class is
never used alone.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from broker_embedded.errors import KafkaLogError
from broker_embedded.storage.checkpoint_file import fsync_dir
from broker_embedded.storage.log_file_utils import LOG_SUFFIX, segment_file_stem
from broker_embedded.storage.log_loader import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    SEGMENT_SUFFIXES,
    SWAP_SUFFIX,
)
from broker_embedded.storage.snapshot_file import snapshot_file_name


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
    log_start_offset: int  # the local log start (the cleaner reads local segments only)
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

    def __init__(self, log: CleanableLog, truncations: int) -> None:
        self.log = log
        self.truncations = truncations

    def check(self) -> None:
        """Raise :class:`CleaningAbortedError` once the log stops cleaning."""
        if self.log._cleaning_stopped:
            raise CleaningAbortedError(f"cleaning of {self.log} stopped: the log is closing")


def _cleaned_name(offset: int, suffix: str) -> str:
    return segment_file_stem(offset) + suffix + CLEANED_SUFFIX


class CleanableLog:
    """The cleaning methods of a log (module docstring); a base class of ``UnifiedLog``."""

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
                tuple(bases),
                tuple(self._segment_size(b) for b in bases),
                self.active_segment_base_offset,
                self._writer.active_segment.size_in_bytes,
                self.local_log_start_offset,
                self.log_end_offset,
                self.last_stable_offset,
                self._truncations,
            )

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
