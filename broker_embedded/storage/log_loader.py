"""Opening a partition's log: swap completion and recovery (Kafka's ``LogLoader``).

Files: the segment files of ``<log dir>/<topic>-<partition>/`` (``<base>.log``, ``.index``,
``.timeindex``, ``.txnindex``) and their transient forms: ``.cleaned`` (a cleaner's output, not
yet committed), ``.swap`` (committed replacements: the commit point of a cleaner swap is the
renaming of ``.cleaned`` to ``.swap``), ``.deleted`` and ``.tmp`` (leftovers). The producer
snapshots above the recovery range are deleted by a recovery.

:meth:`LogLoader.settle_interrupted_swaps` settles a crash at any step of a swap
(cleaning_session.py, "Replacing segments") as Kafka's ``LogLoader`` does: ``.deleted`` and ``.tmp``
files are removed; ``.swap`` files at or above the lowest ``.cleaned`` file's offset belong to an
unfinished swap and are removed with the ``.cleaned`` files (the old segments stay); the remaining
``.swap`` files complete their swap: segment files (never producer snapshots) whose offset lies
in ``[lowest .swap base, highest .swap next offset)`` are removed and the ``.swap`` files renamed
(the ``.log`` first). The cleaner keeps the last batch of every group, so that a ``.swap``
segment's next offset covers every non-empty segment it replaces: the outcome is the old segments
or the new one, never a mix.

:meth:`LogLoader.load_segments` then checks the closed segments: outside the recovery range they
get Kafka's index sanity check (a missing index file, or one that is not a whole number of
entries, is rebuilt from the ``.log``); after an unclean shutdown every segment from the one
holding the recovery point on is scanned (CRCs, offsets), a torn or corrupt tail is truncated
(and later segments deleted), their indexes are rebuilt and the producer snapshots above the
first of them are deleted, so that the producer state replay re-indexes their aborted
transactions (``LogSegment.recover``). The last segment is left to the segment writer
(segment_writer.py), which recovers it the same way. Corruption below the recovery point after a
clean shutdown is not scanned for and never truncated: a read that reaches it fails
(log_segment.py, ``check_tail``).

Thread safety: used once, by the opening thread, before the log is published.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

from broker_embedded.errors import CorruptRecordError, KafkaLogError
from broker_embedded.record.records import iter_batches
from broker_embedded.storage.checkpoint_file import fsync_dir, write_atomically
from broker_embedded.storage.log_config import LogConfig
from broker_embedded.storage.log_file_utils import LOG_SUFFIX, segment_file_stem
from broker_embedded.storage.log_segment import LogSegment
from broker_embedded.storage.log_segments import LogSegments
from broker_embedded.storage.offset_index import INDEX_SUFFIX, OffsetIndex
from broker_embedded.storage.snapshot_file import list_snapshots
from broker_embedded.storage.time_index import TIME_INDEX_SUFFIX, TimeIndex
from broker_embedded.storage.transaction_index import FILE_SUFFIX as TXN_INDEX_SUFFIX

log = logging.getLogger(__name__)

CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
DELETED_SUFFIX = ".deleted"
TRANSIENT_SUFFIXES = (CLEANED_SUFFIX, DELETED_SUFFIX, ".tmp")
SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
_STEM_DIGITS = 20


def delete_segment_files(directory: Path, base: int) -> None:
    """Remove the four files of the segment based at ``base`` (missing ones are fine)."""
    for suffix in SEGMENT_SUFFIXES:
        (directory / (segment_file_stem(base) + suffix)).unlink(missing_ok=True)


class LogLoader:
    """Settles and recovers one partition directory at open; see the module docstring."""

    __slots__ = ("directory", "config", "_clock", "_where")

    def __init__(
        self, directory: Path, config: LogConfig, clock_ms: Callable[[], int], where: str
    ) -> None:
        self.directory = directory
        self.config = config
        self._clock = clock_ms
        self._where = where

    def __repr__(self) -> str:
        return self._where

    def _path(self, base: int, suffix: str) -> Path:
        return self.directory / (segment_file_stem(base) + suffix)

    def settle_interrupted_swaps(self) -> None:
        """Kafka's ``LogLoader`` passes over transient files (module docstring, "Replacing
        segments"), limited to segment files."""
        d = self.directory
        cleaned, swaps = [], []
        changed = False
        for name in os.listdir(d):
            if name.endswith((DELETED_SUFFIX, ".tmp")):
                (d / name).unlink(missing_ok=True)
                changed = True
            elif name.endswith(CLEANED_SUFFIX) and _name_offset(name) is not None:
                cleaned.append(name)
            elif name.endswith(SWAP_SUFFIX) and _name_offset(name) is not None:
                swaps.append(name)
        if cleaned:
            lowest = min(_name_offset(n) for n in cleaned)
            for name in [n for n in swaps if _name_offset(n) >= lowest]:
                log.warning("%s: removing %s of an unfinished swap", self, name)
                (d / name).unlink(missing_ok=True)
                swaps.remove(name)
            for name in cleaned:
                (d / name).unlink(missing_ok=True)
            changed = True
        log_swaps = [n for n in swaps if n == _swap_name(_name_offset(n), LOG_SUFFIX)]
        if log_swaps:
            lo = min(_name_offset(n) for n in log_swaps)
            hi = max(_swap_next_offset(d, _name_offset(n)) for n in log_swaps)
            for name in os.listdir(d):
                offset = _name_offset(name)
                if offset is not None and lo <= offset < hi and name in _segment_names(offset):
                    log.warning("%s: removing %s, replaced by a cleaned segment", self, name)
                    (d / name).unlink(missing_ok=True)
        for name in sorted(swaps, key=lambda n: (_name_offset(n), not n.endswith(".log.swap"))):
            log.warning("%s: completing the swap of %s", self, name)
            os.replace(d / name, d / name[: -len(SWAP_SUFFIX)])
            changed = True
        if changed:
            fsync_dir(d)

    def load_segments(self, recovery_point: int, recover: bool) -> None:
        """Kafka's log loading, up to the last segment (which the segment writer opens).

        Closed segments outside the recovery range get Kafka's sanity check of their index
        files: when one is missing or not a whole number of entries, both are rebuilt from the
        ``.log``. After an unclean shutdown, every segment from the one holding the recovery
        point on is recovered, and the producer snapshots above that segment's base offset are
        deleted, so that the producer state replay covers the recovered segments (re-indexing
        their aborted transactions)."""
        listing = LogSegments.list_dir(self.directory)
        bases = listing.base_offsets
        if not bases:
            return
        start = listing.floor_index(recovery_point) if recover else len(bases) - 1
        for base in bases[:start]:
            if not self._indexes_look_sane(base):
                self._rebuild_indexes(base)
        if recover:
            for offset, path in list_snapshots(self.directory):
                if offset > bases[start]:
                    path.unlink(missing_ok=True)
            self._recover_closed_segments(bases[start:])

    def _indexes_look_sane(self, base: int) -> bool:
        for suffix, entry_size in (
            (INDEX_SUFFIX, OffsetIndex.ENTRY_SIZE),
            (TIME_INDEX_SUFFIX, TimeIndex.ENTRY_SIZE),
        ):
            try:
                if self._path(base, suffix).stat().st_size % entry_size:
                    return False
            except FileNotFoundError:
                return False
        return True

    def _rebuild_indexes(self, base: int) -> None:
        """Rewrite both index files of closed segment ``base`` from its ``.log``."""
        with LogSegment.open(
            self.directory, base, index_interval_bytes=self.config.index_interval_bytes
        ) as seg:
            log.warning("%s: segment %d: index %s", self, base, seg.index_status)
            write_atomically(self._path(base, INDEX_SUFFIX), seg.offset_index.to_bytes())
            write_atomically(self._path(base, TIME_INDEX_SUFFIX), seg.time_index.to_bytes())

    def _recover_closed_segments(self, bases: list[int]) -> None:
        """Scan the closed segments among ``bases`` (all but the last, which the segment writer
        recovers); after a truncated one, later segments are deleted (Kafka's recovery). The
        ``.txnindex`` files of the recovered segments are rebuilt by the producer state replay."""
        for i in range(len(bases) - 1):
            path = self._path(bases[i], LOG_SUFFIX)
            size = path.stat().st_size
            seg = LogSegment.recover(self.directory, bases[i], self.config, now_ms=self._clock())
            truncated = seg.size_in_bytes < size
            seg.close()
            self._path(bases[i], TXN_INDEX_SUFFIX).unlink(missing_ok=True)
            if truncated:
                log.warning("%s: %s had a corrupt tail; deleting later segments", self, path)
                for later in bases[i + 1 :]:
                    delete_segment_files(self.directory, later)
                return
        if bases:
            self._path(bases[-1], TXN_INDEX_SUFFIX).unlink(missing_ok=True)


def _name_offset(name: str) -> int | None:
    """The offset a partition file's name starts with (20 digits and a dot), else None."""
    stem = name[:_STEM_DIGITS]
    if len(name) > _STEM_DIGITS and name[_STEM_DIGITS] == "." and stem.isdigit():
        return int(stem)
    return None


def _segment_names(offset: int) -> tuple[str, ...]:
    return tuple(segment_file_stem(offset) + x for x in SEGMENT_SUFFIXES)


def _swap_name(offset: int | None, suffix: str) -> str:
    return "" if offset is None else segment_file_stem(offset) + suffix + SWAP_SUFFIX


def _swap_next_offset(directory: Path, base: int) -> int:
    """The offset after the last complete batch of ``<base>.log.swap`` (its base offset when it
    holds none), read from the last entry of its ``.index.swap`` on when that one is usable
    (else from the start: a recovery-time read of the whole file)."""
    path = directory / _swap_name(base, LOG_SUFFIX)
    start = 0
    try:
        start = OffsetIndex.load(
            directory / _swap_name(base, INDEX_SUFFIX), base
        ).last_entry.position
    except (OSError, KafkaLogError):
        pass
    with open(path, "rb") as f:
        for first in dict.fromkeys((start, 0)):
            f.seek(first)
            next_offset = None
            try:
                for b in iter_batches(f.read(), str(path), tail="stop"):
                    next_offset = b.next_offset
            except CorruptRecordError:
                pass
            if next_offset is not None:
                return next_offset
    return base
