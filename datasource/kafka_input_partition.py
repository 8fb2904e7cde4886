"""What one Spark task of a ``kafkalog`` read gets: a :class:`KafkaInputPartition`, or a
:class:`PackedInputPartition` of several read in turn.

A :class:`KafkaInputPartition` is a small frozen value, pickled by Spark from the planner to an
executor: the descriptor of the fetch source (``FetchSourceDescriptor``: for a log dir its
absolute path, ``LogDirSource``, with the checkpoint entries the planner read for the task's
partitions), the topic partition and its planned offsets ``[start, end)``, and how to read them
(isolation, headers, bytes per fetch, data-loss policy). The executor opens the source from the
descriptor itself (offset_range_reader.py), and under read_committed learns the aborted
transactions from each fetch, as a Kafka consumer does.

:func:`plan_tasks` packs the planned ranges into tasks (range_packing.py): a task of one range
is its :class:`KafkaInputPartition`, a task of several a :class:`PackedInputPartition` of them
(frozen too, their descriptors shared, so pickled once); :func:`ranges_of` gives the ranges of
either, which the readers read one after the other with the same per-range code.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyspark.sql.datasource import InputPartition

from broker_embedded.storage.fetch_source import FetchSourceDescriptor
from datasource.offset_range import OffsetRange

if TYPE_CHECKING:
    from datasource.kafka_offset_reader import KafkaOffsetReader
    from datasource.kafka_source_options import KafkaSourceOptions


@dataclass(frozen=True)
class KafkaInputPartition(InputPartition):
    """Read ``[start, end)`` of ``topic``-``partition`` from the source ``source`` opens."""

    source: FetchSourceDescriptor
    topic: str
    partition: int
    start: int
    end: int
    read_committed: bool = False
    include_headers: bool = False
    fetch_bytes: int = 1 << 20
    fail_on_data_loss: bool = True

    @classmethod
    def for_ranges(
        cls,
        source: FetchSourceDescriptor,
        ranges: Iterable[OffsetRange],
        options: KafkaSourceOptions,
    ) -> list[KafkaInputPartition]:
        """One partition per planned range, read as ``options`` say."""
        return [
            cls(
                source,
                r.topic,
                r.partition,
                r.start,
                r.end,
                options.read_committed,
                options.include_headers,
                options.task_fetch_bytes,
                options.fail_on_data_loss,
            )
            for r in ranges
        ]

    @property
    def offset_range(self) -> OffsetRange:
        return OffsetRange(self.topic, self.partition, self.start, self.end)


@dataclass(frozen=True)
class PackedInputPartition(InputPartition):
    """Several planned ranges that one Spark task reads in turn (range_packing.py)."""

    parts: tuple[KafkaInputPartition, ...]


def ranges_of(partition: InputPartition) -> tuple[KafkaInputPartition, ...]:
    """The ranges a task reads: none for Spark's placeholder partition of an empty plan."""
    if isinstance(partition, PackedInputPartition):
        return partition.parts
    return (partition,) if isinstance(partition, KafkaInputPartition) else ()


def plan_tasks(
    offsets: KafkaOffsetReader,
    ranges: Sequence[OffsetRange],
    options: KafkaSourceOptions,
    as_read: Callable[[list[KafkaInputPartition]], Sequence[KafkaInputPartition]] = list,
) -> list[KafkaInputPartition | PackedInputPartition]:
    """The tasks of ``ranges``, packed as ``options`` say, each with a source descriptor for
    its partitions (``offsets.task_source``); ``as_read`` turns a task's ranges into what is
    read (the latest view's partitions)."""
    tasks: list[KafkaInputPartition | PackedInputPartition] = []
    for group in options.packer.pack(ranges, offsets.range_bytes):
        source = offsets.task_source(sorted({r.topic_partition for r in group}))
        parts = as_read(KafkaInputPartition.for_ranges(source, group, options))
        tasks.append(parts[0] if len(parts) == 1 else PackedInputPartition(tuple(parts)))
    return tasks
