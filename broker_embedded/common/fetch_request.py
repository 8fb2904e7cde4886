"""A fetch request and its response, as the broker's fetch path takes and gives them (Kafka's
``FetchRequest`` / ``FetchResponse`` data, without the wire encoding).

Request: who fetches (``replica_id`` -1 for consumers, the broker id for followers), how long
the broker may wait (``max_wait_ms``) for at least ``min_bytes``, the response's byte budget
(``max_bytes``, capped by the broker's ``fetch.max.bytes``), the isolation level, and per
partition the fetch offset, the partition's byte budget and the fetcher's idea of the current
leader epoch (-1: not checked).

Response: per partition, in request order, an error (a :class:`KafkaApiError`, ``None`` when
fine), the high watermark, last stable offset and log start offset, the aborted transactions
(read_committed only) and the raw record bytes (possibly starting below the fetch offset, ending
after the last whole batch within the limits; empty when not even the first batch fits what the
partition may return, unless it is the first partition with data, which returns one whole batch:
KIP-74). ``readable_bytes`` counts the bytes found within the limits, the partial batch a limit
cut included, as Kafka's ``DelayedFetch`` counts them against ``min_bytes``.
A zero-copy read (the Fetch API's) leaves ``records`` empty and names the bytes in the segment
file instead (``region``, a :class:`SegmentRegion`); ``size_in_bytes`` counts either.

Immutable values: thread-safe.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker_embedded.errors import KafkaApiError
from broker_embedded.storage.fetch_data_info import IsolationLevel, SegmentRegion
from broker_embedded.storage.topic_partition import TopicPartition
from broker_embedded.storage.transaction_index import AbortedTxn

CONSUMER_REPLICA_ID = -1
NO_LEADER_EPOCH = -1
DEFAULT_PARTITION_MAX_BYTES = 1 << 20  # max.partition.fetch.bytes
DEFAULT_MAX_BYTES = 50 << 20  # fetch.max.bytes (client)
DEFAULT_MAX_WAIT_MS = 500


@dataclass(frozen=True, slots=True)
class PartitionFetch:
    """One partition of a fetch request."""

    topic_partition: TopicPartition
    fetch_offset: int
    partition_max_bytes: int = DEFAULT_PARTITION_MAX_BYTES
    current_leader_epoch: int = NO_LEADER_EPOCH


@dataclass(frozen=True, slots=True)
class FetchRequest:
    """A fetch of several partitions; see the module docstring."""

    partitions: tuple[PartitionFetch, ...]
    replica_id: int = CONSUMER_REPLICA_ID
    max_wait_ms: int = DEFAULT_MAX_WAIT_MS
    min_bytes: int = 1
    max_bytes: int = DEFAULT_MAX_BYTES
    isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED

    @property
    def is_from_follower(self) -> bool:
        return self.replica_id >= 0


@dataclass(frozen=True, slots=True, eq=False)
class PartitionFetchResult:
    """One partition of a fetch response."""

    topic_partition: TopicPartition
    error: KafkaApiError | None = None
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    aborted_transactions: tuple[AbortedTxn, ...] | None = None
    records: bytes = b""
    region: SegmentRegion | None = None
    readable_bytes: int = 0

    @property
    def size_in_bytes(self) -> int:
        return len(self.records) if self.region is None else self.region.length

    @property
    def error_code(self) -> int:
        return 0 if self.error is None else self.error.code

    @property
    def error_name(self) -> str:
        return "NONE" if self.error is None else self.error.name


@dataclass(frozen=True, slots=True, eq=False)
class FetchResponse:
    """The partitions of a fetch response, in request order."""

    partitions: tuple[PartitionFetchResult, ...]

    def partition(self, tp: TopicPartition) -> PartitionFetchResult:
        for p in self.partitions:
            if p.topic_partition == tp:
                return p
        raise KeyError(f"{tp} is not in this fetch response")

    @property
    def size_in_bytes(self) -> int:
        return sum(p.size_in_bytes for p in self.partitions)

    @property
    def readable_bytes(self) -> int:
        """What counts against ``min_bytes`` (see the module docstring)."""
        return sum(max(p.readable_bytes, p.size_in_bytes) for p in self.partitions)
