"""What a cleaning round did (Kafka's ``CleanerStats``) and what it covered
(:class:`CleanResult`: the first dirty and first uncleanable offsets, the new checkpoint, the
offset map's use). Thread safety: :class:`CleanerStats` is filled by the one thread running the
round and read after it; :class:`CleanResult` is a frozen value.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class CleanerStats:
    """What a round did (Kafka's ``CleanerStats``)."""

    map_bytes_read: int = 0
    map_records_read: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_retained: int = 0
    batches_read: int = 0
    batches_written: int = 0
    segments_cleaned: int = 0
    groups: int = 0
    map_seconds: float = 0.0
    clean_seconds: float = 0.0


@dataclass(frozen=True)
class CleanResult:
    """One round: the offsets it covered and the new checkpoint (``end_offset``)."""

    first_dirty_offset: int
    first_uncleanable_offset: int
    end_offset: int
    map_entries: int
    map_utilization: float
    map_full: bool
    stats: CleanerStats = field(default_factory=CleanerStats)

    @property
    def cleaned(self) -> bool:
        return self.end_offset > self.first_dirty_offset
