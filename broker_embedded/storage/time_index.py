"""A segment's time index, the ``.timeindex`` file (Kafka's ``TimeIndex``).

Byte layout: a run of 12-byte big-endian entries ``int64 timestamp, int32 relativeOffset``. An
entry (T, O) says: T is the largest timestamp in the segment up to the batch holding offset
``base + O``, and no record before that batch carries a timestamp >= T. Which offset of that
batch O names depends on who appended it: Kafka's recovery, followers and the KRaft metadata log
store the batch's last offset; a Kafka 3.6+ leader stores the offset of the first record carrying
the max timestamp for uncompressed CreateTime batches.

Entries are added with offset index entries, only when the max timestamp so far grew, plus a
final entry when the segment is closed or rolled (see
:mod:`broker_embedded.storage.segment_indexer`).

Invariants: timestamps strictly increase, relative offsets never decrease. A zero-filled
preallocated tail is not part of the entries (see :mod:`broker_embedded.storage.abstract_index`).

Lookup (Kafka's): the largest entry whose timestamp is <= the target, else
``(NO_TIMESTAMP, base offset)``; the first record with timestamp >= target is at or after the
position the offset index gives for that entry's offset, found by a forward scan.

Thread safety: one appender, any number of lock-free readers (see ``AbstractIndex``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from broker_embedded.errors import InvalidOffsetError
from broker_embedded.storage.abstract_index import AbstractIndex

TIME_INDEX_SUFFIX = ".timeindex"
NO_TIMESTAMP = -1


@dataclass(frozen=True, slots=True)
class TimestampOffset:
    """A time index entry with an absolute offset."""

    timestamp: int
    offset: int


class TimeIndex(AbstractIndex):
    """The ``.timeindex`` entries of one segment."""

    ENTRY_SIZE = 12
    FILE_DTYPE = np.dtype([("k", ">i8"), ("v", ">i4")])
    VALUES_STRICTLY_INCREASE = False
    KIND = "time index"

    __slots__ = ()

    def timestamps(self) -> np.ndarray:
        keys, _ = self._columns()
        return keys.copy()

    def offsets(self) -> np.ndarray:
        """Absolute offsets of the entries (int64)."""
        _, values = self._columns()
        return values + self.base_offset

    def entry(self, slot: int) -> TimestampOffset:
        keys, values = self._columns()
        return TimestampOffset(int(keys[slot]), self.base_offset + int(values[slot]))

    @property
    def last_entry(self) -> TimestampOffset:
        """The last entry, or ``(NO_TIMESTAMP, base offset)`` when empty (as Kafka)."""
        n = self.entries
        return self.entry(n - 1) if n else TimestampOffset(NO_TIMESTAMP, self.base_offset)

    def lookup(self, target_timestamp: int) -> TimestampOffset:
        """The largest entry with timestamp <= target, else ``(NO_TIMESTAMP, base offset)``."""
        slot = self._floor_slot(target_timestamp)
        return self.entry(slot) if slot >= 0 else TimestampOffset(NO_TIMESTAMP, self.base_offset)

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> bool:
        """Kafka's ``maybeAppend``: append only when ``timestamp`` exceeds the last entry's.

        Raises :class:`IndexFullError` when full (unless ``skip_full_check``, used for the final
        entry of a closing segment) and :class:`InvalidOffsetError` when the offset or the
        timestamp goes backwards. Returns whether an entry was appended.
        """
        with self._lock:
            if not skip_full_check:
                self._check_not_full()
            last = self._last  # the last entry as ints: no entry object per append
            last_ts = NO_TIMESTAMP if last is None else last[0]
            if last is not None and (offset < self.base_offset + last[1] or timestamp < last_ts):
                raise InvalidOffsetError(
                    f"time index {self.source}: entry (timestamp {timestamp}, offset {offset}) "
                    f"goes below the last entry (timestamp {last_ts}, offset "
                    f"{self.base_offset + last[1]})"
                )
            if timestamp <= last_ts:
                return False
            self._append_raw(timestamp, self.relative_offset(offset))
            return True
