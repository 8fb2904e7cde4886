"""Packing small offset ranges into one Spark task, as Spark's file sources pack small files.

Spark's Python data source pays a fixed cost per task (about 27 ms on 2 cores, whatever the task
reads: a worker round trip, the plan and the Arrow stream), so a log dir of 10,000 partitions
of ten records each read as 10,000 tasks spends minutes on that cost alone. The planner
therefore hands a task several ranges (:class:`RangePacker`, after the cuts of offset_range.py),
by the rule of Spark's ``FilePartition.getFilePartitions``:

- each range costs its bytes of the log plus ``open_cost`` (Spark's
  ``spark.sql.files.openCostInBytes``, 4 MiB: what opening a partition costs, counted in bytes
  it could have read meanwhile); a range's bytes are exact for a log dir (the offset indexes,
  ``FetchSource.byte_cut``); where they are unknown (over ``kafka.bootstrap.servers``) they are
  estimated as :data:`ESTIMATED_BYTES_PER_OFFSET` per offset;
- the task size: ``max_bytes`` (Spark's ``spark.sql.files.maxPartitionBytes``, 128 MiB) or, with
  ``min_partitions``, ``min(max_bytes, max(open_cost, total cost / min_partitions))`` (Spark's
  ``bytesPerCore``, with ``minPartitions`` for the cores: the planner cannot see Spark's
  parallelism);
- only small ranges are packed: a range of at least ``open_cost`` bytes costs more to read
  than to open and stays a task of its own, one task per topic partition as in Spark's Kafka
  connector, so packing never takes parallelism from partitions of real size (the planner
  cannot see Spark's cores to spread them as ``bytesPerCore`` does);
- the small ranges, largest first (ties in plan order), fill the current task while its bytes so far
  plus the next range's bytes stay within the task size (Spark's next-fit; a range larger than
  the task size is a task alone: ranges are never cut here, ``maxBytesPerPartition`` cuts them);
  with ``max_records`` (``maxRecordsPerPartition``) a task also holds at most that many
  offsets, so that option keeps its meaning per task;
- with ``min_partitions``, a packing into fewer tasks than ``min(min_partitions, ranges)`` is
  dropped: every range is then a task of its own, as without packing, so ``minPartitions``
  keeps Spark's meaning (at least that many tasks).

A task's ranges keep their plan order (topic, partition, offsets); tasks come in Spark's order
(the one holding the largest range first). ``max_bytes=0`` turns packing off: one task per
range. Ranges of one topic partition (cut by bytes or records) may share a task or not; a task
reads its ranges in turn. Whole-partition ranges (the latest view's) pack without harm: a key's
versions stay in one range. Values are frozen; :meth:`RangePacker.pack` is a pure function of
its arguments.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from datasource.offset_range import OffsetRange

DEFAULT_PACK_BYTES = 128 << 20  # Spark's spark.sql.files.maxPartitionBytes
DEFAULT_OPEN_COST = 4 << 20  # Spark's spark.sql.files.openCostInBytes
# A range's bytes where the source cannot tell them (the wire protocol): Kafka records are
# typically hundreds of bytes to a few KiB; overestimating keeps large partitions apart.
ESTIMATED_BYTES_PER_OFFSET = 1024


@dataclass(frozen=True)
class RangePacker:
    """Packs ranges into tasks; see the module docstring."""

    max_bytes: int = DEFAULT_PACK_BYTES
    open_cost: int = DEFAULT_OPEN_COST
    min_partitions: int | None = None
    max_records: int | None = None

    def __post_init__(self) -> None:
        if self.max_bytes < 0 or self.open_cost < 0:
            raise ValueError(
                f"max_bytes ({self.max_bytes}) and open_cost ({self.open_cost}) must not be "
                "negative"
            )

    def pack(
        self, ranges: Sequence[OffsetRange], bytes_of: Callable[[OffsetRange], int | None]
    ) -> list[list[OffsetRange]]:
        """The ranges of each task; ``bytes_of`` tells a range's bytes (``None``: unknown)."""
        if self.max_bytes == 0 or len(ranges) < 2:
            return [[r] for r in ranges]
        sizes = [_estimated(r, bytes_of(r)) for r in ranges]
        target = self._target(sum(sizes) + self.open_cost * len(ranges))
        order = sorted(range(len(ranges)), key=lambda i: -sizes[i])
        tasks: list[list[int]] = []
        current: list[int] = []
        used = records = 0
        for i in order:
            r = ranges[i]
            if sizes[i] >= self.open_cost:  # costs more to read than to open: alone
                tasks.append([i])
                continue
            full = used + sizes[i] > target or (
                self.max_records is not None and records + r.size > self.max_records
            )
            if current and full:
                tasks.append(current)
                current, used, records = [], 0, 0
            current.append(i)
            used += sizes[i] + self.open_cost
            records += r.size
        if current:
            tasks.append(current)
        if self.min_partitions is not None and len(tasks) < min(self.min_partitions, len(ranges)):
            return [[r] for r in ranges]
        return [[ranges[i] for i in sorted(task)] for task in tasks]

    def _target(self, total_cost: int) -> int:
        if self.min_partitions is None:
            return self.max_bytes
        return min(self.max_bytes, max(self.open_cost, total_cost // self.min_partitions))


def _estimated(r: OffsetRange, size: int | None) -> int:
    return r.size * ESTIMATED_BYTES_PER_OFFSET if size is None else size
