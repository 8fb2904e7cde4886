"""The segments of one partition by base offset, with floor and higher lookups (Kafka's
``LogSegments``).

A partition directory holds one ``<20 digits>.log`` per segment, named by its base offset
(log_segment.py); a segment holds the offsets from its base offset up to the next segment's.
"Which segment holds offset X" is the floor lookup: the greatest base offset <= X. Every reader
and the writer, the cleaner and the loader find segments this way, here, by bisection over the
sorted base offsets.

Invariants: the base offsets are sorted ascending and distinct (a listing sorts them; writers
keep theirs sorted). A :class:`LogSegments` wraps such a list without copying or checking it
and never changes it: the owners replace their list whole, never in place, so a reader that took
a listing keeps a consistent one.

Thread safety: immutable; any number of threads may use one.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

from broker_embedded.storage.log_file_utils import parse_segment_log_name


class LogSegments:
    """Sorted base offsets of one partition's segments; see the module docstring."""

    __slots__ = ("_bases",)

    def __init__(self, base_offsets: Sequence[int]) -> None:
        self._bases = base_offsets

    @classmethod
    def list_dir(cls, directory: str | Path) -> LogSegments:
        """The ``<20 digits>.log`` files of a partition directory (one ``os.listdir``)."""
        names = os.listdir(directory)
        return cls(sorted(b for b in map(parse_segment_log_name, names) if b is not None))

    @property
    def base_offsets(self) -> list[int]:
        return list(self._bases)

    def floor_index(self, offset: int) -> int:
        """Index of the segment that would hold ``offset`` (0 when it lies before them all)."""
        return max(bisect.bisect_right(self._bases, offset) - 1, 0)

    def floor(self, offset: int) -> int | None:
        """The base offset of the segment holding ``offset``: the greatest one <= ``offset``
        (``None`` when there is none)."""
        i = bisect.bisect_right(self._bases, offset)
        return self._bases[i - 1] if i else None

    def higher(self, offset: int) -> int | None:
        """The least base offset > ``offset`` (``None`` when there is none)."""
        i = bisect.bisect_right(self._bases, offset)
        return self._bases[i] if i < len(self._bases) else None

    def from_floor(self, offset: int) -> Sequence[int]:
        """The base offsets from the segment that would hold ``offset`` on (all of them when
        ``offset`` lies before the first): where a read from ``offset`` walks."""
        return self._bases[self.floor_index(offset) :]

    def is_last(self, base_offset: int) -> bool:
        return bool(self._bases) and self._bases[-1] == base_offset

    def __len__(self) -> int:
        return len(self._bases)

    def __iter__(self) -> Iterator[int]:
        return iter(self._bases)

    def __repr__(self) -> str:
        return f"LogSegments({list(self._bases)})"
