"""The one interface the data source reads a log through: :class:`FetchSource`.

A reader of Kafka's log needs what a Kafka consumer gets from a broker, and no more:

- the topics and their partitions (Metadata);
- offsets (ListOffsets): with :data:`EARLIEST_TIMESTAMP` the log start offset (with tiered
  storage, KIP-405, the earliest offset in remote storage; :data:`EARLIEST_LOCAL_TIMESTAMP`:
  the first offset in local storage, where a source knows it), with
  :data:`LATEST_TIMESTAMP` the high watermark (read_uncommitted) or the last stable offset
  (read_committed), with a timestamp the first offset whose record timestamp is >= it, ``None``
  when no such offset lies below the latest one;
- fetches (Fetch): from an offset, at most ``max_bytes`` of whole batches (at least one, KIP-74;
  the first may begin below the offset, a partial last batch may follow) below the high
  watermark or the last stable offset, with the partition's offsets and, for read_committed, the
  aborted transactions overlapping the read (:class:`FetchedPartition`);
- for splitting a range into pieces of about so many bytes (``maxBytesPerPartition``,
  ``maxBytesPerTrigger``): byte cuts (:meth:`FetchSource.byte_cut`, :meth:`FetchSource.byte_cuts`).
  A source that cannot tell bytes (over the wire they are at best estimates) returns ``None``
  ("unknown") and the planner falls back to offsets: no split, and no byte limit on a trigger
  beyond its offsets. The log-dir source answers exactly, from the offset indexes.

Three implementations: the log dir (log_dir_fetch_source.py, beside the storage), a log dir on
object storage (object_store_fetch_source.py: ranged reads of the stored segments) and the wire
protocol (a Kafka client's Metadata, ListOffsets and Fetch). Everything here maps onto those
responses: ``FetchedPartition`` carries exactly the fields of a Fetch response partition, and
the aborted transactions as its (producer id, first offset) pairs.

A source is opened from a small frozen, picklable :class:`FetchSourceDescriptor` (``open()``):
Spark pickles input partitions to executors, which open their own source from it. What a source
reports is a snapshot of the partition's offsets as of its first use; opening again from the
descriptor sees newer ones. Offsets outside ``[log start offset, log end]`` are an
``OffsetOutOfRangeError``; a partition gone altogether a ``FileNotFoundError`` (log dir) or an
``UnknownTopicOrPartitionError``. Values here are immutable (thread-safe); a source itself is
used by one thread.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from broker_embedded.storage.fetch_data_info import IsolationLevel
from broker_embedded.storage.topic_partition import TopicPartition

EARLIEST_TIMESTAMP = -2  # ListOffsets: the log start offset
LATEST_TIMESTAMP = -1  # ListOffsets: the high watermark, or the LSO for read_committed
EARLIEST_LOCAL_TIMESTAMP = -4  # ListOffsets (KIP-405): the first offset in local storage


@dataclass(frozen=True, slots=True, eq=False)
class FetchedPartition:
    """One partition of a Fetch response: ``records`` (whole batches from the one holding
    ``fetch_offset``, maybe a partial last one; a copy, never a view of a file), the partition's
    offsets, and for read_committed the aborted transactions overlapping the read as
    (producer id, first offset) pairs (``None`` for read_uncommitted). ``last_stable_offset``
    is -1 when the source did not compute it (read_uncommitted)."""

    topic_partition: TopicPartition
    fetch_offset: int
    records: bytes
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted_transactions: tuple[tuple[int, int], ...] | None = None

    def bound(self, isolation: IsolationLevel) -> int:
        """The offset the read stopped below: the LSO for read_committed, else the HW."""
        if isolation == IsolationLevel.READ_COMMITTED:
            return self.last_stable_offset
        return self.high_watermark


@dataclass(frozen=True, slots=True)
class ByteCut:
    """A batch boundary ``offset`` and the ``size`` in bytes of the log up to it."""

    offset: int
    size: int


class FetchSource(Protocol):
    """Reads one log (a log dir, a cluster); see the module docstring."""

    @property
    def descriptor(self) -> FetchSourceDescriptor:
        """What opens this source again (small, frozen, picklable)."""
        ...

    def topics(self) -> dict[str, tuple[int, ...]]:
        """Every topic and its partitions (sorted), as of the source's opening."""
        ...

    def declared_partitions(self, topic: str) -> int | None:
        """How many partitions ``topic`` should have (for messages), ``None`` when unknown."""
        ...

    def exists(self, tp: TopicPartition) -> bool:
        """Whether ``tp`` exists now (not as of the opening)."""
        ...

    def list_offset(
        self, tp: TopicPartition, timestamp: int, isolation: IsolationLevel
    ) -> int | None:
        """ListOffsets: :data:`EARLIEST_TIMESTAMP`, :data:`LATEST_TIMESTAMP` or a timestamp
        (ms; see the module docstring). ``None`` only for a timestamp."""
        ...

    def fetch(
        self, tp: TopicPartition, offset: int, max_bytes: int, isolation: IsolationLevel
    ) -> FetchedPartition:
        """Fetch: whole batches from the one holding ``offset``, at most ``max_bytes`` unless
        the first batch alone is larger."""
        ...

    def byte_cut(
        self,
        tp: TopicPartition,
        start: int,
        end: int,
        max_bytes: int,
        *,
        min_one_batch: bool = False,
    ) -> ByteCut | None:
        """The furthest batch boundary in ``[start, end]`` such that the batches from the one
        holding ``start`` up to it take at most ``max_bytes`` bytes of the log, and those
        bytes; ``end`` when all fit, ``start`` when the first batch does not (unless
        ``min_one_batch``, which takes it whatever its size). ``None``: unknown."""
        ...

    def byte_cuts(
        self, tp: TopicPartition, start: int, end: int, max_bytes: int
    ) -> list[int] | None:
        """Offsets inside ``(start, end)`` cutting it into pieces of about ``max_bytes``
        bytes of the log each. ``None``: unknown."""
        ...

    def task_source(self, tps: Iterable[TopicPartition]) -> FetchSourceDescriptor:
        """What a task reading ``tps`` opens: :attr:`descriptor`, or one that also carries what
        this source read of them (a log dir's checkpoint entries), so that the task need not
        read it again."""
        ...

    def close(self) -> None: ...


class FetchSourceDescriptor(Protocol):
    """A small frozen value that opens a :class:`FetchSource` (pickled to Spark executors)."""

    @property
    def location(self) -> str:
        """What the source reads, for messages (e.g. ``log dir /data/kafka``)."""
        ...

    @property
    def unplanned(self) -> FetchSourceDescriptor:
        """This descriptor without what a planner handed it (:meth:`FetchSource.task_source`):
        its sources see the log as it is now in every respect."""
        ...

    def open(self) -> FetchSource:
        """A new source, seeing the log as it is now, except what the descriptor carries from
        its planner (see :attr:`unplanned`)."""
        ...
