"""The closed segments a cleaning round works on (:class:`Segment`: base offset, the next
segment's base offset, ``.log`` size, from the log's :class:`CleaningSnapshot`) and their groups
(:func:`group_segments`, Kafka's ``groupSegmentsBySize``): consecutive segments while the
group's ``.log`` stays within ``segment.bytes``, its indexes within ``segment.index.bytes`` and
its offsets within an int32 of the group's base, so that each group is recopied into one
segment. Reads only index file sizes; thread safety: pure functions and frozen values.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from broker_embedded.storage.cleaning_session import (
    CleaningSnapshot,
)
from broker_embedded.storage.log_file_utils import segment_file_stem
from broker_embedded.storage.offset_index import INDEX_SUFFIX
from broker_embedded.storage.time_index import TIME_INDEX_SUFFIX

INT32_MAX = (1 << 31) - 1


@dataclass(frozen=True, slots=True)
class Segment:
    base: int
    next_base: int  # the next segment's base offset (the active one's for the last)
    size: int


def cleanable_segments(snap: CleaningSnapshot) -> list[Segment]:
    bases = (*snap.base_offsets, snap.active_base_offset)
    return [
        Segment(b, bases[i + 1], s)
        for i, (b, s) in enumerate(zip(snap.base_offsets, snap.sizes, strict=True))
    ]


def group_segments(
    segments: Sequence[Segment],
    directory: Path,
    max_size: int,
    max_index_size: int,
    first_uncleanable_offset: int,
) -> list[list[Segment]]:
    """Kafka's ``groupSegmentsBySize``."""

    def index_sizes(s: Segment) -> tuple[int, int]:
        stem = directory / segment_file_stem(s.base)
        out = []
        for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):
            try:
                out.append(os.stat(str(stem) + suffix).st_size)
            except FileNotFoundError:
                out.append(0)
        return out[0], out[1]

    groups: list[list[Segment]] = []
    rest = list(segments)
    i = 0
    while i < len(rest):
        group = [rest[i]]
        log_size = rest[i].size
        oi, ti = index_sizes(rest[i])
        i += 1
        while i < len(rest):
            s = rest[i]
            s_oi, s_ti = index_sizes(s)
            last = rest[i + 1].base - 1 if i + 1 < len(rest) else first_uncleanable_offset - 1
            if not (
                log_size + s.size <= max_size
                and oi + s_oi <= max_index_size
                and ti + s_ti <= max_index_size
                and (s.size == 0 or last - group[0].base <= INT32_MAX)
            ):
                break
            group.append(s)
            log_size += s.size
            oi += s_oi
            ti += s_ti
            i += 1
        groups.append(group)
    return groups
