"""A partition's leader epoch history, persisted in ``leader-epoch-checkpoint``
(Kafka's ``LeaderEpochFileCache``).

Byte layout: the file is a :class:`LeaderEpochCheckpointFile`, ``0\\n<count>\\n`` then
``<epoch> <startOffset>\\n`` per entry, oldest first; every change rewrites it atomically
(``.tmp``, fsync, rename), synchronously (Kafka flushes truncations in the background; here the
file is behind the cache only after a truncation at the log's opening, ``truncate_from_end(...,
write=False)``: the next change or the next append, whatever its epoch, writes it first, so
no batch is appended while the file holds entries above it; a reopening before that truncates
the same entries again).

An entry ``(epoch, start_offset)`` says that leader epoch ``epoch`` wrote its first batch at
``start_offset``; the epoch ends where the next entry starts, the latest one at the log end.

Invariants: epochs AND start offsets strictly increase down the list. :meth:`assign` keeps them
so the way Kafka does: when a new entry would break monotonicity, the entries it conflicts with
(from the end: epoch >= the new epoch or start offset >= the new start offset) are dropped. A file
loaded from disk is replayed through the same rule (in memory only, as Kafka does), so a file
that breaks it loads as the history it implies. Epochs are int32 >= 0, offsets int64 >= 0.

An epoch must be able to grow: the next leader election takes the highest epoch on disk plus one
(replication/controller.py), so the largest epoch held is ``MAX_LEADER_EPOCH`` (int32 max - 1).
Kafka takes a new leader's epoch from its controller, so there a batch header forged to
``2147483647`` (the field is not covered by the CRC) is simply displaced by the next leader's
``assign``; here the log is the epochs' only record, so such an epoch, from a recovered batch or
a checkpoint line, is refused when the log opens with :class:`LeaderEpochOverflowError` naming
the partition, the file (the segment holding the offset, else the checkpoint), offset and epoch.

Answers follow Kafka exactly, including its ``OffsetsForLeaderEpoch`` lookup
(:meth:`end_offset_for`): undefined results are ``(-1, -1)``
(``UNDEFINED_EPOCH``, ``UNDEFINED_EPOCH_OFFSET``).

Failure: a change is computed first, written, and only then made visible; if the write raises
(``OSError``), the cache and the file both keep the old entries. Except a truncation from the
start (:meth:`truncate_from_start`: the log start offset moved, its segments may already be
gone): it is made visible, then its write's ``OSError`` is raised. The file then still holds
entries below the log start offset, which is what a crash between the two leaves: harmless, as
the log truncates it again when it opens, and the next change rewrites it whole.

Thread safety: every method takes one internal lock, writes included, so concurrent callers see
each change whole and writes of the file are serialised. The entry list is never changed in
place, only replaced whole, so :meth:`assign` reads it without the lock to return early when the
latest entry already covers the batch (the routine append). One cache per file: two caches over
the same path do not see each other's changes.
"""

from __future__ import annotations

import bisect
import logging
import os
import threading
from collections.abc import Sequence
from itertools import pairwise
from pathlib import Path

from broker_embedded.errors import CheckpointError, KafkaLogError
from broker_embedded.storage.checkpoint_file import INT32_MAX, INT64_MAX
from broker_embedded.storage.leader_epoch_checkpoint import EpochEntry, LeaderEpochCheckpointFile
from broker_embedded.storage.log_file_utils import (
    LOG_SUFFIX,
    parse_segment_log_name,
    segment_file_stem,
)
from broker_embedded.storage.topic_partition import TopicPartition

UNDEFINED_EPOCH = -1
MAX_LEADER_EPOCH = INT32_MAX - 1
UNDEFINED_EPOCH_OFFSET = -1
_UNDEFINED = (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)

logger = logging.getLogger(__name__)


class LeaderEpochOverflowError(KafkaLogError, ValueError):
    """A leader epoch above :data:`MAX_LEADER_EPOCH`: the partition's epoch could not grow (a
    ``ValueError`` too, as every invalid entry given to :meth:`LeaderEpochFileCache.assign`)."""


def _assigned(
    entries: list[EpochEntry], new: EpochEntry
) -> tuple[list[EpochEntry], list[EpochEntry]] | None:
    """``entries`` after assigning ``new``, and the entries it displaced (newest first);
    ``None`` when nothing changes (the latest entry has the same epoch and starts at or before
    ``new``)."""
    if entries:
        latest = entries[-1]
        if latest.epoch == new.epoch and latest.start_offset <= new.start_offset:
            return None
    kept = len(entries)
    while kept and (
        entries[kept - 1].epoch >= new.epoch or entries[kept - 1].start_offset >= new.start_offset
    ):
        kept -= 1
    return [*entries[:kept], new], entries[kept:][::-1]


def _truncated_from_end(entries: list[EpochEntry], end_offset: int) -> list[EpochEntry]:
    """``entries`` without those starting at or after ``end_offset``."""
    kept = bisect.bisect_left(entries, end_offset, key=lambda e: e.start_offset)
    return entries[:kept]


def _truncated_from_start(entries: list[EpochEntry], start_offset: int) -> list[EpochEntry]:
    """``entries`` with the log starting at ``start_offset``: the entry covering it now starts
    there, the entries before it are gone."""
    covered = bisect.bisect_right(entries, start_offset, key=lambda e: e.start_offset)
    if covered == 0:
        return entries
    first = EpochEntry(entries[covered - 1].epoch, start_offset)
    return [first, *entries[covered:]]


class LeaderEpochFileCache:
    """The leader epochs of ``topic_partition``, kept in the checkpoint file ``checkpoint_path``.

    The file is read if it exists; it is only created by the first change.
    """

    __slots__ = ("topic_partition", "_checkpoint", "_lock", "_entries", "_file_behind")

    def __init__(self, topic_partition: TopicPartition, checkpoint_path: str | Path) -> None:
        self.topic_partition = topic_partition
        self._checkpoint = LeaderEpochCheckpointFile(checkpoint_path)
        self._lock = threading.Lock()
        self._entries: list[EpochEntry] = []
        self._file_behind = False  # a truncation at opening not written yet
        for entry in self._checkpoint.read_or_empty():
            self._load(entry)

    @property
    def path(self) -> Path:
        return self._checkpoint.path

    def __repr__(self) -> str:
        return f"LeaderEpochFileCache({self.topic_partition}, {self.entries()!r})"

    # -- reads ---------------------------------------------------------------------------------

    def entries(self) -> list[EpochEntry]:
        """A copy of the entries, oldest first."""
        with self._lock:
            return list(self._entries)

    @property
    def latest_entry(self) -> EpochEntry | None:
        with self._lock:
            return self._entries[-1] if self._entries else None

    @property
    def latest_epoch(self) -> int | None:
        entry = self.latest_entry
        return None if entry is None else entry.epoch

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch of the last entry starting at or before ``offset``; ``None`` if none does."""
        with self._lock:
            i = bisect.bisect_right(self._entries, offset, key=lambda e: e.start_offset)
            return self._entries[i - 1].epoch if i else None

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """``(epoch, end offset)`` for an ``OffsetsForLeaderEpoch`` request, as Kafka answers:

        - the latest epoch: ``(requested_epoch, log_end_offset)``;
        - an older epoch: the largest known epoch <= ``requested_epoch``, and the start offset of
          the first epoch above ``requested_epoch`` (its end);
        - an epoch below the first known one: ``(requested_epoch, first entry's start offset)``
          (the history before it is gone; the follower replicates from there);
        - ``-1``, an epoch above the latest one, or an empty cache: ``(-1, -1)``.
        """
        with self._lock:
            entries = self._entries
            if requested_epoch == UNDEFINED_EPOCH:
                return _UNDEFINED
            if entries and entries[-1].epoch == requested_epoch:
                return requested_epoch, log_end_offset
            higher = bisect.bisect_right(entries, requested_epoch, key=lambda e: e.epoch)
            if higher == len(entries):
                return _UNDEFINED
            end = entries[higher].start_offset
            if higher == 0:
                return requested_epoch, end
            return entries[higher - 1].epoch, end

    # -- changes -------------------------------------------------------------------------------

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` starts at ``start_offset`` (called for each appended batch).

        A negative epoch (a batch without one) is ignored. Nothing changes when the latest entry
        already has ``epoch`` and starts at or before ``start_offset``. Otherwise the entries
        whose epoch >= ``epoch`` or whose start offset >= ``start_offset`` are removed from the
        end, the new entry is appended and the file is rewritten.
        """
        if epoch < 0:
            return
        entries = self._entries  # the routine case: no entry made, no lock taken
        if entries and entries[-1].epoch == epoch and entries[-1].start_offset <= start_offset:
            if self._file_behind:
                with self._lock:
                    self._replace(self._entries)
            return
        new = self._checked(epoch, start_offset)
        with self._lock:
            change = _assigned(self._entries, new)
            if change is None:
                if self._file_behind:
                    self._replace(self._entries)
                return
            entries, displaced = change
            self._replace(entries)
        # Displacing one entry that starts where the new one does is routine (no data was
        # written in that epoch); anything else means the history diverged.
        if len(displaced) > 1 or (displaced and displaced[0].start_offset != start_offset):
            logger.warning(
                "%s: new entry %s truncated conflicting entries %s",
                self._prefix(),
                new,
                displaced,
            )

    def truncate_from_end(self, end_offset: int, *, write: bool = True) -> None:
        """Drop the entries starting at or after ``end_offset`` (the log was truncated to it).

        A negative ``end_offset`` (undefined) changes nothing. ``write=False`` (the log's
        opening, where the leader's next epoch usually rewrites the file at once): the file is
        written by the next change or append (module docstring).
        """
        if end_offset < 0:
            return
        with self._lock:
            entries = _truncated_from_end(self._entries, end_offset)
            if len(entries) == len(self._entries):
                return
            if write:
                self._replace(entries)
            else:
                self._entries, self._file_behind = entries, True

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at ``start_offset``: entries wholly below it go, and the entry
        covering it keeps its epoch but starts at ``start_offset``. An entry starting exactly
        there, or a ``start_offset`` before the first entry, changes nothing. A write that fails
        raises ``OSError`` after the change is made (module docstring).
        """
        with self._lock:
            entries = _truncated_from_start(self._entries, start_offset)
            if entries != self._entries:
                self._entries = entries  # visible even if the write fails (module docstring)
                self._checkpoint.write(entries)

    def clear_and_flush(self, entries: Sequence[EpochEntry] = ()) -> None:
        """Drop every entry and write an empty checkpoint (``0\\n0\\n``), or one of
        ``entries`` (a follower restarting its log from remote storage takes the stored
        segment's epochs: Kafka's ``assign(List<EpochEntry>)`` after its truncation), in one
        write."""
        new = [self._checked(e.epoch, e.start_offset) for e in entries]
        if any(a.epoch >= b.epoch or a.start_offset > b.start_offset for a, b in pairwise(new)):
            raise ValueError(f"{self._prefix()}: leader epochs {new} do not increase")
        with self._lock:
            self._replace(new)

    # -- internals -----------------------------------------------------------------------------

    def _replace(self, entries: list[EpochEntry]) -> None:
        """Write ``entries``, then make them the cache's; caller holds the lock."""
        self._checkpoint.write(entries)
        self._entries = entries
        self._file_behind = False

    def _load(self, entry: EpochEntry) -> None:
        if entry.epoch < 0 or entry.start_offset < 0:
            raise CheckpointError(
                f"leader epoch checkpoint {self.path} of {self.topic_partition} holds an invalid "
                f"entry: epoch {entry.epoch}, start offset {entry.start_offset}"
            )
        if entry.epoch > MAX_LEADER_EPOCH:
            raise self._overflow(entry.epoch, entry.start_offset, self.path, "the checkpoint")
        change = _assigned(self._entries, entry)
        if change is not None:
            self._entries = change[0]

    def _checked(self, epoch: int, start_offset: int) -> EpochEntry:
        if epoch > MAX_LEADER_EPOCH and 0 <= start_offset <= INT64_MAX:
            segment = self._segment_holding(start_offset)
            source = "the epoch assigned" if segment is None else "the batch header"
            raise self._overflow(epoch, start_offset, segment or self.path, source)
        if epoch > INT32_MAX or not 0 <= start_offset <= INT64_MAX:
            raise ValueError(
                f"{self._prefix()}: invalid leader epoch entry: epoch {epoch}, "
                f"start offset {start_offset}"
            )
        return EpochEntry(epoch, start_offset)

    def _overflow(
        self, epoch: int, offset: int, file: Path, source: str
    ) -> LeaderEpochOverflowError:
        return LeaderEpochOverflowError(
            f"{self.topic_partition}: leader epoch {epoch} at offset {offset} in {file} cannot "
            f"grow: the next leader epoch would exceed the int32 maximum {INT32_MAX} "
            f"({source} is corrupt or forged)"
        )

    def _segment_holding(self, offset: int) -> Path | None:
        """The ``.log`` segment of this partition with the greatest base offset at or below
        ``offset``, if any (used only to name the file in an error: lists the directory)."""
        directory = self.path.parent
        names = os.listdir(directory) if directory.is_dir() else []
        bases = sorted(b for b in map(parse_segment_log_name, names) if b is not None)
        i = bisect.bisect_right(bases, offset)
        return directory / (segment_file_stem(bases[i - 1]) + LOG_SUFFIX) if i else None

    def _prefix(self) -> str:
        return f"leader epoch cache of {self.topic_partition} ({self.path})"
