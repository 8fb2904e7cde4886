"""What one Spark task of a ``kafkalog`` read gets: :class:`KafkaInputPartition`.

A small frozen value, pickled by Spark from the planner to an executor: the descriptor of the
fetch source (``FetchSourceDescriptor``: for a log dir its absolute path, ``LogDirSource``),
the topic partition and its planned offsets ``[start, end)``, and how to read them (isolation,
headers, bytes per fetch, data-loss policy). It carries no state of the log: the executor opens
the source from the descriptor itself (offset_range_reader.py), and under read_committed learns
the aborted transactions from each fetch, as a Kafka consumer does.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyspark.sql.datasource import InputPartition

from broker_embedded.storage.fetch_source import FetchSourceDescriptor
from datasource.offset_range import OffsetRange

if TYPE_CHECKING:
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
        return [cls(source, r.topic, r.partition, r.start, r.end, options.read_committed,
                    options.include_headers, options.fetch_bytes, options.fail_on_data_loss)
                for r in ranges]  # fmt: skip

    @property
    def offset_range(self) -> OffsetRange:
        return OffsetRange(self.topic, self.partition, self.start, self.end)
