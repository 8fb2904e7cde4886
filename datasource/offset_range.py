"""Offset ranges of topic partitions and how they are cut into Spark partitions.

:class:`OffsetRange`: the offsets ``[start, end)`` of one topic partition (Spark's
``KafkaOffsetRange``: ``fromOffset`` inclusive, ``untilOffset`` exclusive). Its ``size`` counts
offsets, not records: compaction, transaction markers and aborted transactions leave gaps, so a
range may hold fewer records than its size (never more).

:class:`OffsetRangeCalculator` turns the planned ranges (one per topic partition) into the ranges
of the Spark partitions, in this order:

1. empty ranges are dropped;
2. ``max_bytes_per_partition`` (kafkalog's own): a range is cut where the bytes read since the
   last cut reach the limit, at batch boundaries found in the offset index (``byte_cuts``, given
   by the planner, which has the log dir), so that a skewed partition spreads over several
   tasks; each piece holds about that many bytes (at least one batch);
3. ``max_records_per_partition`` (Spark's ``maxRecordsPerPartition``): a range larger than the
   limit is cut into ``ceil(size / limit)`` equal pieces;
4. ``min_partitions`` (Spark's ``minPartitions``): while there are fewer ranges than it, Spark's
   ``KafkaOffsetRangeCalculator`` rule applies: a range whose proportional share of
   ``min_partitions`` (``round(size / total * min_partitions)``, half up) is 1 stays whole; the
   others share the remaining count proportionally to their sizes, each cut into equal pieces
   (the last piece takes the rounding).

Without any of the three, each topic partition is one Spark partition. Values are frozen.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from broker_embedded.storage.topic_partition import TopicPartition

# (range, max bytes) -> offsets strictly inside the range where to cut it, increasing
ByteCuts = Callable[["OffsetRange", int], Sequence[int]]


@dataclass(frozen=True, slots=True, order=True)
class OffsetRange:
    """Offsets ``[start, end)`` of one topic partition."""

    topic: str
    partition: int
    start: int
    end: int

    def __post_init__(self) -> None:
        if not 0 <= self.start <= self.end:
            raise ValueError(
                f"offset range [{self.start}, {self.end}) of {self.topic}-{self.partition} "
                "is not 0 <= start <= end"
            )

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    @property
    def size(self) -> int:
        return self.end - self.start

    def split_at(self, cuts: Sequence[int]) -> list[OffsetRange]:
        """The pieces between increasing ``cuts`` (each strictly inside the range)."""
        bounds = [self.start, *cuts, self.end]
        if any(not a < b for a, b in zip(bounds, bounds[1:], strict=False)):
            raise ValueError(f"cuts {list(cuts)} are not increasing inside {self}")
        return [
            OffsetRange(self.topic, self.partition, a, b)
            for a, b in zip(bounds, bounds[1:], strict=False)
        ]

    def divided(self, parts: int) -> list[OffsetRange]:
        """``parts`` pieces of (nearly) equal size; empty pieces left out."""
        remaining, start, pieces = self.size, self.start, []
        for i in range(parts):
            this = remaining // (parts - i)
            remaining -= this
            if this:
                pieces.append(OffsetRange(self.topic, self.partition, start, start + this))
            start += this
        return pieces

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition} [{self.start}, {self.end})"


@dataclass(frozen=True)
class OffsetRangeCalculator:
    """Cuts planned ranges into Spark partitions; see the module docstring."""

    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    max_bytes_per_partition: int | None = None

    def __post_init__(self) -> None:
        for name in ("min_partitions", "max_records_per_partition", "max_bytes_per_partition"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be positive, not {value}")

    def ranges(
        self, ranges: Sequence[OffsetRange], byte_cuts: ByteCuts | None = None
    ) -> list[OffsetRange]:
        """The ranges of the Spark partitions, in input order; ``byte_cuts`` is needed with
        ``max_bytes_per_partition``."""
        out = [r for r in ranges if r.size > 0]
        if self.max_bytes_per_partition is not None:
            if byte_cuts is None:
                raise ValueError("max_bytes_per_partition needs byte_cuts")
            limit = self.max_bytes_per_partition
            out = [piece for r in out for piece in r.split_at(byte_cuts(r, limit))]
        if self.max_records_per_partition is not None:
            limit = self.max_records_per_partition
            out = [piece for r in out for piece in r.divided(math.ceil(r.size / limit))]
        if self.min_partitions is not None and len(out) < self.min_partitions:
            out = _spread(out, self.min_partitions)
        return out


def _share(size: int, total: int, parts: int) -> int:
    """Spark's ``getPartCount``: ``max(round(size / total * parts), 1)``, rounding half up."""
    return max(math.floor(size / total * parts + 0.5), 1)


def _spread(ranges: list[OffsetRange], min_partitions: int) -> list[OffsetRange]:
    total = sum(r.size for r in ranges)
    whole = [_share(r.size, total, min_partitions) == 1 for r in ranges]
    split_total = total - sum(r.size for r, w in zip(ranges, whole, strict=True) if w)
    split_parts = max(min_partitions - sum(whole), 1)
    out: list[OffsetRange] = []
    for r, w in zip(ranges, whole, strict=True):
        out += [r] if w else r.divided(_share(r.size, split_total, split_parts))
    return out
