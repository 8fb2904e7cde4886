"""A segment's offset index, the ``.index`` file (Kafka's ``OffsetIndex``).

Byte layout: a run of 8-byte big-endian entries ``int32 relativeOffset, int32 position``: the
batch (or the first batch of one append) starting at byte ``position`` of the segment's ``.log``
holds offsets up to ``base offset + relativeOffset``, and every batch before it ends below that
offset. The index is sparse: the writer adds an entry when more than ``index.interval.bytes``
were appended since the last one (see :mod:`broker_embedded.storage.segment_indexer`).

Invariants: relative offsets and positions strictly increase; relative offsets fit an int32.
A zero-filled preallocated tail is not part of the entries (see
:mod:`broker_embedded.storage.abstract_index`).

Lookup: the largest entry whose offset is <= the target gives the position to start a forward
scan of the ``.log`` from; with no such entry, the scan starts at byte 0.

Thread safety: one appender, any number of lock-free readers (see ``AbstractIndex``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from broker_embedded.errors import InvalidOffsetError
from broker_embedded.storage.abstract_index import AbstractIndex, floor_slot

INDEX_SUFFIX = ".index"


@dataclass(frozen=True, slots=True)
class OffsetPosition:
    """An offset index entry with an absolute offset."""

    offset: int
    position: int


class OffsetIndex(AbstractIndex):
    """The ``.index`` entries of one segment."""

    ENTRY_SIZE = 8
    FILE_DTYPE = np.dtype([("k", ">i4"), ("v", ">i4")])
    VALUES_STRICTLY_INCREASE = True
    KIND = "offset index"

    __slots__ = ()

    def offsets(self) -> np.ndarray:
        """Absolute offsets of the entries (int64)."""
        keys, _ = self._columns()
        return keys + self.base_offset

    def positions(self) -> np.ndarray:
        _, values = self._columns()
        return values.copy()

    def floor_position(self, position: int) -> int:
        """The largest entry position at or below ``position`` (a batch start), 0 when none."""
        _, values, n = self._state
        slot = floor_slot(values, n, position)
        return int(values[slot]) if slot >= 0 else 0

    def entry(self, slot: int) -> OffsetPosition:
        keys, values = self._columns()
        return OffsetPosition(self.base_offset + int(keys[slot]), int(values[slot]))

    @property
    def last_entry(self) -> OffsetPosition:
        """The last entry, or ``(base offset, 0)`` when the index is empty (as Kafka)."""
        n = self.entries
        return self.entry(n - 1) if n else OffsetPosition(self.base_offset, 0)

    @property
    def last_offset(self) -> int:
        return self.last_entry.offset

    def lookup(self, target_offset: int) -> OffsetPosition:
        """The largest entry with offset <= ``target_offset``, else ``(base offset, 0)``."""
        slot = self._floor_slot(target_offset - self.base_offset)
        return self.entry(slot) if slot >= 0 else OffsetPosition(self.base_offset, 0)

    def append(self, offset: int, position: int) -> None:
        """Append an entry: Kafka's rules (not full, offset and position above the last entry)."""
        with self._lock:
            self._check_not_full()
            rel = self.relative_offset(offset)
            last = self._last
            if last is not None:
                last_rel, last_position = last
                if rel <= last_rel or position <= last_position:
                    raise InvalidOffsetError(
                        f"offset index {self.source}: entry (offset {offset}, position "
                        f"{position}) is not above the last entry (offset "
                        f"{self.base_offset + last_rel}, position {last_position})"
                    )
            elif position < 0:
                raise InvalidOffsetError(
                    f"offset index {self.source}: negative position {position} for offset {offset}"
                )
            self._append_raw(rel, position)
