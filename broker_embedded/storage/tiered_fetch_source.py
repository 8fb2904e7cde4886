"""A log and the store its brokers tier to, read as one log: :class:`TieredFetchSource`.

With tiered storage (KIP-405, remote_log_manager.py) a partition's log runs from its log start
offset (the earliest offset still in the store) to its high watermark, and local retention
deletes its first segments once they are in the store: offsets ``[log start offset, first local
offset)`` (ListOffsets -2 and -4) are only in the store, the rest is local. This source reads
the first part from the store (object_store_fetch_source.py: its manifests, offset indexes and
ranged reads) and the rest from the local side, as one log: one :class:`FetchSource`, one read
loop over it (offset_range_reader.py). The local side is a log dir read in place
(log_dir_fetch_source.py: its ``tiered_offsets``, from the checkpointed log start) or the
cluster over the wire (wire_fetch_source.py: the leader's ListOffsets -2 and -4), which then
serves only the local tail while every executor reads the tiered part from the store. A segment
the store holds that the local log still holds too is read locally.

Per partition, the split is the first local offset (the local side's ListOffsets -4 at the
partition's first use: a task whose local retention moved since planning splits higher, and the
store holds what went, past the segments planned: a fetch there is an out-of-range error, on
which the reader opens the source again unplanned, listing the store again). Below it:

- ``list_offset``: earliest is the log start offset, no lower than the store's first segment (a
  checkpoint behind the store's retention); earliest-local (-4) the split; latest the local
  side's; by timestamp, the store's segments first (from the log start), then the local side.
- ``fetch``: offsets below the split from the store (whole batches of one segment), the others
  from the local side (a log dir in place where the reader allows: ``fetch_in_place``); the
  partition's offsets in the answer are the log's (log start offset, the local side's high
  watermark, asked once per partition). ``prefetch`` fetches ahead on the side that answers.
- byte cuts: exact on the store's side; the local side's as it answers them (exact for a log
  dir; unknown over the wire, where the local part of a range is taken whole and counted as no
  bytes, as the planner takes an unknown range). A range spanning the split measures its store
  part up to the split and its local part from it; ``byte_cuts`` cuts each part on its own and
  at the split (a piece never spans the two).

What planning checks (:class:`RemoteLogStorageError`, naming partition, offsets and store): the
store holds the partition, and its segments reach the split (a hole between the store's last
segment and the first local one is data no reader can have). Tasks get a descriptor carrying
both sides' planned state (:meth:`TieredFetchSource.task_source`): the local side's (a log dir's
checkpoint entries) and the store's segments of the tiered partitions (with their log start
offset); a planned partition without store state is read from the local side alone, and
``unplanned`` looks at both again (the reader does after an out-of-range fetch).

read_committed below the split (Kafka's ``RemoteLogManager.read`` with its
``collectAbortedTransactions``): a fetch from the store reads up to the local side's last stable
offset (the store holds only offsets below it: a broker copies a segment once its end is at or
below the last stable offset, remote_log_manager.py), and carries the aborted transactions
overlapping what it returned from the store's ``.txnindex`` files (those whose markers were
tiered) and from the local side (those begun below the split whose markers are local, which the
store cannot know). The local ones are asked once per partition: a log dir's local segments'
``.txnindex`` (``LogDirFetchSource.aborted_transactions`` at the split); a cluster's
read_committed Fetch at the split (Kafka's broker answers the aborted transactions whose marker
is at or past the fetch offset and which begin before the end of what it returned: so those
begun below the split), or, when that answers no records (the last stable offset is at the
split), a read_committed Fetch at the offset before the split, which the broker serves from the
store with the aborted transactions of its local log (Kafka's and ``kafkalog serve``'s remote
read).

Not thread-safe: one planner or one task uses a source (each side's prefetch thread as its
module says).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from broker_embedded.errors import KafkaLogError, OffsetOutOfRangeError
from broker_embedded.storage.fetch_data_info import IsolationLevel
from broker_embedded.storage.fetch_source import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    ByteCut,
    FetchedPartition,
    FetchSource,
    FetchSourceDescriptor,
)
from broker_embedded.storage.local_log import end_of_complete_batches
from broker_embedded.storage.object_store_fetch_source import (
    ObjectStoreFetchSource,
    ObjectStoreSource,
)
from broker_embedded.storage.topic_partition import TopicPartition

UNCOMMITTED = IsolationLevel.READ_UNCOMMITTED
COMMITTED = IsolationLevel.READ_COMMITTED


class RemoteLogStorageError(KafkaLogError):
    """The store does not hold what the local side says is only there (module docstring)."""


@dataclass(frozen=True)
class TieredSource:
    """Opens a :class:`TieredFetchSource`: the local side ``local`` (a log dir, a cluster) and
    the store ``remote`` its brokers tier to; ``planned``: both carry a planner's state (module
    docstring)."""

    local: FetchSourceDescriptor
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
    """A log and its store as one :class:`FetchSource`; see the module docstring."""

    def __init__(self, descriptor: TieredSource) -> None:
        self._descriptor = descriptor
        self._local: FetchSource = descriptor.local.open()
        self._remote: ObjectStoreFetchSource | None = None
        self._splits: dict[TopicPartition, _Split | None] = {}
        self._bounds: dict[tuple[TopicPartition, IsolationLevel], int] = {}
        self._local_aborted: dict[TopicPartition, tuple[tuple[int, int], ...]] = {}

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
        """Where ``tp``'s offsets leave the store for the local side; ``None``: all local."""
        if tp in self._splits:
            return self._splits[tp]
        planned = dict(self._descriptor.remote.planned).get(tp)
        found: _Split | None = None
        if planned is not None:
            found = _Split(planned.log_start_offset, self._offset(tp, EARLIEST_LOCAL_TIMESTAMP))
        elif not self._descriptor.planned:
            tiered = self._tiered_offsets(tp)
            found = None if tiered is None else self._check(tp, *tiered)
        if found is not None and found.log_start >= found.local_start:
            found = None
        self._splits[tp] = found
        return found

    def _tiered_offsets(self, tp: TopicPartition) -> tuple[int, int] | None:
        """The local side's (log start offset, first local offset) when the first is below:
        a log dir's ``tiered_offsets``, a cluster's ListOffsets -2 and -4."""
        of_dir = getattr(self._local, "tiered_offsets", None)
        if of_dir is not None:
            return of_dir(tp)
        log_start = self._offset(tp, EARLIEST_TIMESTAMP)
        local_start = self._offset(tp, EARLIEST_LOCAL_TIMESTAMP)
        return (log_start, local_start) if log_start < local_start else None

    def _offset(
        self, tp: TopicPartition, which: int, isolation: IsolationLevel = UNCOMMITTED
    ) -> int:
        """The local side's ListOffsets ``which`` (-2, -4, -1) of ``tp``."""
        found = self._local.list_offset(tp, which, isolation)
        assert found is not None, f"ListOffsets {which} of {tp} gave no offset"
        return found

    def _bound(self, tp: TopicPartition, isolation: IsolationLevel) -> int:
        """The local side's high watermark (or last stable offset) of ``tp``, asked once."""
        key = (tp, isolation)
        if key not in self._bounds:
            self._bounds[key] = self._offset(tp, LATEST_TIMESTAMP, isolation)
        return self._bounds[key]

    def _check(self, tp: TopicPartition, log_start: int, local_start: int) -> _Split:
        """The split of a tiered partition, after checking that the store holds it up to the
        first local offset (module docstring)."""
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
        latest = self._offset(tp, LATEST_TIMESTAMP, isolation)
        found = self.remote.list_offset(tp, timestamp, UNCOMMITTED)
        if found is None or found >= split.local_start:
            found = self._local.list_offset(tp, timestamp, isolation)  # none below the split
            found = None if found is None else max(found, split.local_start)
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
        """``fetch``, above the split in place where the local side can
        (``LogDirFetchSource.fetch_in_place``)."""
        split = self.split(tp)
        if split is None or offset >= split.local_start:
            local = getattr(self._local, "fetch_in_place", self._local.fetch)
            return local(tp, offset, max_bytes, isolation)
        return self._remote_fetch(tp, split, offset, max_bytes, isolation)

    def prefetch(
        self, tp: TopicPartition, offset: int, max_bytes: int, isolation: IsolationLevel
    ) -> None:
        """The next fetch ahead, on the side that will answer it (the store's, the wire's)."""
        split = self.split(tp)
        if split is not None and offset < split.local_start:
            self.remote.prefetch(tp, offset, max_bytes, isolation)
            return
        ahead = getattr(self._local, "prefetch", None)
        if ahead is not None:
            ahead(tp, offset, max_bytes, isolation)

    def _remote_fetch(
        self,
        tp: TopicPartition,
        split: _Split,
        offset: int,
        max_bytes: int,
        isolation: IsolationLevel,
    ) -> FetchedPartition:
        stored_end = self.remote.partition(tp).log_end_offset
        if offset >= stored_end:
            raise OffsetOutOfRangeError(
                f"{tp}: offset {offset} is below the first local offset {split.local_start} "
                f"and past the segments of {self._descriptor.remote.store.uri} planned for this "
                f"read (they end at {stored_end}): the broker tiered more since planning"
            )
        fetched = self.remote.fetch(tp, offset, max_bytes, isolation)
        fetched = replace(
            fetched, high_watermark=self._bound(tp, UNCOMMITTED), log_start_offset=split.log_start
        )
        if isolation != COMMITTED:
            return fetched
        end = end_of_complete_batches(fetched.records, offset)
        aborted = set(fetched.aborted_transactions or ())
        aborted.update(t for t in self._aborted_at_split(tp, split) if t[1] < end)
        ordered = tuple(sorted(aborted, key=lambda t: (t[1], t[0])))
        return replace(
            fetched, last_stable_offset=self._bound(tp, COMMITTED), aborted_transactions=ordered
        )

    def _aborted_at_split(self, tp: TopicPartition, split: _Split) -> tuple[tuple[int, int], ...]:
        """(producer id, first offset) of the aborted transactions begun below the split whose
        markers are local (module docstring), asked once."""
        found = self._local_aborted.get(tp)
        if found is not None:
            return found
        at = split.local_start
        of_dir = getattr(self._local, "aborted_transactions", None)
        if of_dir is not None:
            found = of_dir(tp, at, at)
        else:
            fetched = self._local.fetch(tp, at, 1, COMMITTED)
            if not fetched.records:  # the last stable offset at the split: the broker's read
                fetched = self._local.fetch(tp, at - 1, 1, COMMITTED)
            found = fetched.aborted_transactions or ()
        found = self._local_aborted[tp] = tuple(t for t in found if t[1] < at)
        return found

    # -- bytes of the log --------------------------------------------------------------------------

    def byte_cut(
        self,
        tp: TopicPartition,
        start: int,
        end: int,
        max_bytes: int,
        *,
        min_one_batch: bool = False,
    ) -> ByteCut | None:
        """The store's bytes from ``start`` to the split, then the local side's (module
        docstring)."""
        split = self.split(tp)
        if split is None or start >= split.local_start:
            return self._local.byte_cut(tp, start, end, max_bytes, min_one_batch=min_one_batch)
        middle = min(end, split.local_start)
        cut = self.remote.byte_cut(tp, start, middle, max_bytes, min_one_batch=min_one_batch)
        if cut.offset < middle or middle == end:
            return cut
        one = min_one_batch and cut.offset == start
        rest = self._local.byte_cut(tp, middle, end, max_bytes - cut.size, min_one_batch=one)
        if rest is None:  # unknown (the wire): the local part whole, as no bytes
            return ByteCut(end, cut.size)
        return ByteCut(rest.offset, cut.size + rest.size)

    def byte_cuts(
        self, tp: TopicPartition, start: int, end: int, max_bytes: int
    ) -> list[int] | None:
        """Each side's cuts, and the split when the range spans it (module docstring)."""
        split = self.split(tp)
        if split is None or start >= split.local_start:
            return self._local.byte_cuts(tp, start, end, max_bytes)
        middle = min(end, split.local_start)
        cuts = self.remote.byte_cuts(tp, start, middle, max_bytes)
        if middle < end:
            cuts += [middle, *(self._local.byte_cuts(tp, middle, end, max_bytes) or ())]
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
