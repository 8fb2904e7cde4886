"""A log dir and the store its broker tiers to, read as one log: :class:`TieredFetchSource`.

With tiered storage (KIP-405, remote_log_manager.py) a partition's log runs from its log start
offset (``log-start-offset-checkpoint``: the earliest offset still in the store) to its high
watermark, and local retention deletes its first segments once they are in the store: offsets
``[log start offset, first local offset)`` are only in the store
(``LogDirFetchSource.tiered_offsets``), the rest is in the log dir. This source reads the first
part from the store (object_store_fetch_source.py: its manifests, offset indexes and ranged
reads) and the rest from the log dir in place (log_dir_fetch_source.py), as one log: one
:class:`FetchSource`, one read loop over it (offset_range_reader.py). A segment the store holds
that the dir still holds too is read locally.

Per partition, the split is the first local offset (the local view's log start offset, read at
the partition's first use: a task whose local retention moved since planning splits higher,
and the store holds what went). Below it:

- ``list_offset``: earliest is the log start offset, no lower than the store's first segment (a
  checkpoint behind the store's retention); earliest-local (-4) the split; latest the log
  dir's; by timestamp, the store's segments first (from the log start), then the dir's.
- ``fetch``: offsets below the split from the store (whole batches of one segment), the others
  from the dir (in place where the reader allows: ``fetch_in_place``); the partition's offsets
  in the answer are the log's (log start offset, the dir's high watermark). ``prefetch``
  fetches ahead below the split (the store's round trips), and does nothing above it.
- byte cuts: exact on both sides, the store's bytes then the dir's; a range spanning the split
  measures its store part up to the split and its local part from it; ``byte_cuts`` cuts each
  part on its own and at the split (a piece never spans the two).

What planning checks (:class:`RemoteLogStorageError`, naming partition, offsets and store): the
store holds the partition, and its segments reach the split (a hole between the store's last
segment and the dir's first is data no reader can have). Tasks get a descriptor carrying both
sides' planned state (:meth:`TieredFetchSource.task_source`): the log dir's checkpoint entries,
and the store's segments of the tiered partitions (with their log start offset); a planned
partition without store state is read from the dir alone, and ``unplanned`` looks at both again
(the reader does after an out-of-range fetch).

read_committed is not supported below the split (the store a broker tiers to has no last stable
offset: object_store_fetch_source.py); such a read is an ``UnsupportedOnObjectStoreError``.

Not thread-safe: one planner or one task uses a source (the store side's prefetch thread as
object_store_fetch_source.py says).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from broker_embedded.errors import KafkaLogError
from broker_embedded.storage.fetch_data_info import IsolationLevel
from broker_embedded.storage.fetch_source import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    ByteCut,
    FetchedPartition,
)
from broker_embedded.storage.log_dir_fetch_source import LogDirFetchSource, LogDirSource
from broker_embedded.storage.object_store_fetch_source import (
    ObjectStoreFetchSource,
    ObjectStoreSource,
)
from broker_embedded.storage.topic_partition import TopicPartition


class RemoteLogStorageError(KafkaLogError):
    """The store does not hold what the log dir says is only there (module docstring)."""


@dataclass(frozen=True)
class TieredSource:
    """Opens a :class:`TieredFetchSource`: the log dir ``local`` and the store ``remote`` its
    broker tiers to; ``planned``: both carry a planner's state (module docstring)."""

    local: LogDirSource
    remote: ObjectStoreSource
    planned: bool = False

    @property
    def location(self) -> str:
        return f"{self.local.location} with remote storage {self.remote.store.uri}"

    @property
    def unplanned(self) -> TieredSource:
        return TieredSource(self.local.unplanned, self.remote.unplanned)

    def open(self) -> TieredFetchSource:
        return TieredFetchSource(self)


@dataclass(frozen=True, slots=True)
class _Split:
    """A tiered partition: offsets from ``log_start`` below ``local_start`` are in the store."""

    log_start: int
    local_start: int


class TieredFetchSource:
    """A log dir and its store as one :class:`FetchSource`; see the module docstring."""

    def __init__(self, descriptor: TieredSource) -> None:
        self._descriptor = descriptor
        self._local: LogDirFetchSource = descriptor.local.open()
        self._remote: ObjectStoreFetchSource | None = None
        self._splits: dict[TopicPartition, _Split | None] = {}

    @property
    def descriptor(self) -> TieredSource:
        return self._descriptor

    @property
    def remote(self) -> ObjectStoreFetchSource:
        """The store's source (opened on first use: a log read locally needs no store)."""
        if self._remote is None:
            self._remote = self._descriptor.remote.open()
        return self._remote

    def split(self, tp: TopicPartition) -> _Split | None:
        """Where ``tp``'s offsets leave the store for the dir; ``None``: all in the dir."""
        if tp in self._splits:
            return self._splits[tp]
        planned = dict(self._descriptor.remote.planned).get(tp)
        local_start = self._local.view(tp).log_start_offset
        found: _Split | None = None
        if planned is not None:
            found = _Split(planned.log_start_offset, local_start)
        elif not self._descriptor.planned:
            tiered = self._local.tiered_offsets(tp)
            found = None if tiered is None else self._check(tp, *tiered)
        if found is not None and found.log_start >= found.local_start:
            found = None
        self._splits[tp] = found
        return found

    def _check(self, tp: TopicPartition, log_start: int, local_start: int) -> _Split:
        """The split of a tiered partition, after checking that the store holds it up to the
        dir's first offset (module docstring)."""
        where = self._descriptor.remote.store.uri
        try:
            p = self.remote.partition(tp)
        except FileNotFoundError:
            p = None
        if p is None or not p.bases:
            raise RemoteLogStorageError(
                f"{tp}: offsets [{log_start}, {local_start}) are only in remote storage, but "
                f"{where} holds no segment of {tp} (is it the store the broker tiers to, its "
                "rsm.config.location?)"
            )
        if p.log_end_offset < local_start:
            raise RemoteLogStorageError(
                f"{tp}: offsets [{p.log_end_offset}, {local_start}) are neither in "
                f"{self._descriptor.local.location}, which starts at {local_start}, nor in "
                f"{where}, whose segments of {tp} end at {p.log_end_offset}"
            )
        p = self.remote.start_at(tp, log_start)
        return _Split(p.log_start_offset, local_start)

    def task_source(self, tps: Iterable[TopicPartition]) -> TieredSource:
        chosen = list(tps)
        tiered = [tp for tp in chosen if self.split(tp) is not None]
        remote = self.remote.task_source(tiered) if tiered else self._descriptor.remote.unplanned
        return TieredSource(self._local.task_source(chosen), remote, planned=True)

    # -- metadata and offsets ----------------------------------------------------------------------

    def topics(self) -> dict[str, tuple[int, ...]]:
        return self._local.topics()

    def declared_partitions(self, topic: str) -> int | None:
        return self._local.declared_partitions(topic)

    def exists(self, tp: TopicPartition) -> bool:
        return self._local.exists(tp)

    def list_offset(
        self, tp: TopicPartition, timestamp: int, isolation: IsolationLevel
    ) -> int | None:
        split = self.split(tp)
        if split is None or timestamp == LATEST_TIMESTAMP:
            return self._local.list_offset(tp, timestamp, isolation)
        if timestamp == EARLIEST_TIMESTAMP:
            return split.log_start
        if timestamp == EARLIEST_LOCAL_TIMESTAMP:
            return split.local_start
        latest = self._local.list_offset(tp, LATEST_TIMESTAMP, isolation)
        assert latest is not None
        found = self.remote.list_offset(tp, timestamp, IsolationLevel.READ_UNCOMMITTED)
        if found is None or found >= split.local_start:
            local = self._local.view(tp).find_offset_by_timestamp(timestamp)
            found = None if local is None else local.offset
        return found if found is not None and found < latest else None

    # -- fetching ----------------------------------------------------------------------------------

    def fetch(
        self, tp: TopicPartition, offset: int, max_bytes: int, isolation: IsolationLevel
    ) -> FetchedPartition:
        split = self.split(tp)
        if split is None or offset >= split.local_start:
            return self._local.fetch(tp, offset, max_bytes, isolation)
        return self._remote_fetch(tp, split, offset, max_bytes, isolation)

    def fetch_in_place(
        self, tp: TopicPartition, offset: int, max_bytes: int, isolation: IsolationLevel
    ) -> FetchedPartition:
        """``fetch``, above the split in place (``LogDirFetchSource.fetch_in_place``)."""
        split = self.split(tp)
        if split is None or offset >= split.local_start:
            return self._local.fetch_in_place(tp, offset, max_bytes, isolation)
        return self._remote_fetch(tp, split, offset, max_bytes, isolation)

    def prefetch(
        self, tp: TopicPartition, offset: int, max_bytes: int, isolation: IsolationLevel
    ) -> None:
        """The store's fetch ahead below the split (object_store_fetch_source.py)."""
        split = self.split(tp)
        if split is not None and offset < split.local_start:
            self.remote.prefetch(tp, offset, max_bytes, isolation)

    def _remote_fetch(
        self, tp: TopicPartition, split: _Split, offset: int, max_bytes: int,
        isolation: IsolationLevel,
    ) -> FetchedPartition:  # fmt: skip
        fetched = self.remote.fetch(tp, offset, max_bytes, isolation)
        view = self._local.view(tp)
        lso = -1 if isolation != IsolationLevel.READ_COMMITTED else view.last_stable_offset
        return replace(fetched, high_watermark=view.high_watermark, last_stable_offset=lso,
                       log_start_offset=split.log_start)  # fmt: skip

    # -- bytes of the log --------------------------------------------------------------------------

    def byte_cut(
        self,
        tp: TopicPartition,
        start: int,
        end: int,
        max_bytes: int,
        *,
        min_one_batch: bool = False,
    ) -> ByteCut:
        """The store's bytes from ``start`` to the split, then the dir's (module docstring)."""
        split = self.split(tp)
        if split is None or start >= split.local_start:
            return self._local.byte_cut(tp, start, end, max_bytes, min_one_batch=min_one_batch)
        middle = min(end, split.local_start)
        cut = self.remote.byte_cut(tp, start, middle, max_bytes, min_one_batch=min_one_batch)
        if cut.offset < middle or middle == end:
            return cut
        one = min_one_batch and cut.offset == start
        rest = self._local.byte_cut(tp, middle, end, max_bytes - cut.size, min_one_batch=one)
        return ByteCut(rest.offset, cut.size + rest.size)

    def byte_cuts(self, tp: TopicPartition, start: int, end: int, max_bytes: int) -> list[int]:
        """Each side's cuts, and the split when the range spans it (module docstring)."""
        split = self.split(tp)
        if split is None or start >= split.local_start:
            return self._local.byte_cuts(tp, start, end, max_bytes)
        middle = min(end, split.local_start)
        cuts = self.remote.byte_cuts(tp, start, middle, max_bytes)
        if middle < end:
            cuts += [middle, *self._local.byte_cuts(tp, middle, end, max_bytes)]
        return cuts

    # -- lifetime ----------------------------------------------------------------------------------

    def close(self) -> None:
        try:
            self._local.close()
        finally:
            if self._remote is not None:
                self._remote.close()

    def __enter__(self) -> TieredFetchSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"TieredFetchSource({self._descriptor.location!r})"
