"""The :class:`FetchSource` of a log dir on object storage: :class:`ObjectStoreFetchSource`.

Opened from :class:`ObjectStoreSource` (a :class:`StoreLocation`: the URI and its S3A settings;
small, frozen, picklable, secrets hidden from its repr). The store holds a log dir in the
layout of log_dir_upload.py: a mirror of the log dir, one manifest per stored segment
(remote_log_segment_metadata.py). No broker is involved; every executor reads the store.

Planning (the first call that needs it): one listing of the location, and its checkpoint files
(``replication-offset-checkpoint``, ``log-start-offset-checkpoint``) read whole. A partition is
its stored segments: those with a manifest (a ``.log`` without one past the last manifest is an
upload in progress and ignored; one below it, a hole, is an error naming the key; the first
segments whose manifests are marked ``DELETE_SEGMENT_STARTED``, being deleted by a broker's
remote retention or topic deletion, are not the partition's any more, nor are those wholly
below the checkpoint's log start offset). Every manifest is read (one GET each; of a partition
of many segments :data:`MANIFEST_READS` at a time on short-lived threads, which call only the
store's ``read``, stateless) and checked: each ``.log`` has its manifest's ``size_in_bytes``
(else an :class:`ObjectChangedError` naming bucket, key and both sizes: a segment cut short
would lose rows silently), and the segments'
``[base_offset, next_offset)`` follow each other in offset order: a gap is a
:class:`KafkaLogError` naming bucket, both keys and the missing offsets; a segment based below
the previous one's ``next_offset`` (a broker that became leader copied a segment straddling the
store's end) is read from that offset on (:attr:`StoredPartition.starts`; batches below it come
from the segment before: each offset once), one wholly inside it not at all. Its log end
is the largest ``next_offset``; its high watermark the checkpoint's, no higher than the
log end (a broker's active segment is not uploaded); its log start offset the checkpoint's, no
lower than the first segment. Byte cuts (``maxBytesPerPartition``) and a cut
(``maxBytesPerTrigger``, packing by bytes) come from the offset indexes (``.index``, read whole,
once per segment) and the segments' sizes, with a walk of ranged reads after an index entry
where a cut must be exact, as a local log dir's do (log_dir_fetch_source.py's
``cut_candidates`` and ``byte_cut_in``). A task gets a descriptor carrying what planning
found of its partitions (:class:`StoredPartition`: segments, sizes, offsets), so it lists
nothing and reads no checkpoint.

Fetch (read_uncommitted): the segment holding the offset by its start, the position of the
offset index's entry at or below it (the segment's ``.index``, read once; the last
:data:`KEPT_INDEXES` used are kept), then one ranged GET of at most ``max_bytes`` plus
:data:`SEEK_SLACK` bytes from there (after a HEAD checking that the segment still has the size
planning listed and the ETag of the task's first read: object_store.py's changed objects); the
batch headers are walked (the compiled seek, no object per batch) to the batch holding the
offset, and the records returned run from it, at most ``max_bytes`` (a first batch larger than
that whole, KIP-74; a partial last batch may follow, as from a broker), cut before the batch
holding the high watermark. When the batch holding the offset lies past the bytes read (batches
larger than the slack), the next ranged GET starts at the last whole batch walked. Memory: one
fetch (``max_bytes`` plus the slack) and the kept offset indexes (a task reads its segments in
order: one at a time in practice). Never past a segment's end: a fetch returns the batches of
one segment. A segment without a batch at or after the offset (the cleaner removed its last
batches: it ends before the next one's base) is passed over for the next one below the bound,
as a local log's read does (local_log.py), so a fetch comes back empty only when no stored
batch lies between the offset and the bound.
Pipelining (``prefetch``, fetch_ahead.py, as the wire source's): the next fetch of a task runs
on one background thread while the last one is decoded; memory is one more fetch.

Offsets by timestamp: Kafka's lookup, as a local segment's (log_segment.py's
``first_record_at_or_after``): the segments in order, skipping those whose manifest's
``max_timestamp_ms`` is below the target, then in the first other one the time index entry at
or below the target, the offset index's position for it, and a walk of the batches from there
(ranged GETs of :data:`WALK_BYTES`) to the first record at or after the target and at or above
the log start offset; kept only below the high watermark.

read_committed: reads stop below the last stable offset kafkalog upload recorded
(``kafkalog-last-stable-offset-checkpoint``, for a log dir it uploaded whole; without it
read_committed is an :class:`UnsupportedOnObjectStoreError` naming the partition; the store a
broker tiers to, read with its log, to its end: ``start_at``), and a fetch
carries the aborted transactions overlapping what it returned, from the ``.txnindex`` of its
segment and the following ones until one is complete (Kafka's ``collectAbortedTransactions``;
each read once per task).

Errors: a missing object a ``FileNotFoundError`` naming bucket and key, a request that failed
after the retries an :class:`ObjectStoreError` naming bucket, key, byte range and the offset
fetched (object_store.py). Not thread-safe: one planner or one task uses a source; its
prefetch thread uses the store only while no other call does (each waits for it first).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

import numpy as np

from broker_embedded.errors import CorruptRecordError, KafkaLogError, OffsetOutOfRangeError
from broker_embedded.record import entry_scan as es
from broker_embedded.record.header_reads import readonly_bytes
from broker_embedded.record.records import AnyBatch, iter_batches
from broker_embedded.storage.fetch_ahead import FetchAhead
from broker_embedded.storage.fetch_data_info import IsolationLevel
from broker_embedded.storage.fetch_source import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    ByteCut,
    FetchedPartition,
)
from broker_embedded.storage.local_log import end_of_complete_batches
from broker_embedded.storage.log_dir_fetch_source import byte_cut_in, cut_candidates, cuts_of
from broker_embedded.storage.log_dir_upload import LAST_STABLE_OFFSET_CHECKPOINT
from broker_embedded.storage.log_file_utils import LOG_SUFFIX, segment_file_stem
from broker_embedded.storage.log_segment import TimestampAndOffset, first_record_at_or_after
from broker_embedded.storage.object_store import ObjectChangedError, ObjectStore, StoreLocation
from broker_embedded.storage.offset_checkpoint import (
    LOG_START_OFFSET_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    OffsetCheckpointFile,
)
from broker_embedded.storage.offset_index import INDEX_SUFFIX, OffsetIndex
from broker_embedded.storage.remote_index_cache import RemoteIndexCache
from broker_embedded.storage.remote_log_segment_metadata import (
    DELETE_SEGMENT_STARTED,
    RemoteLogSegmentMetadata,
    read_manifest,
)
from broker_embedded.storage.time_index import TIME_INDEX_SUFFIX, TimeIndex
from broker_embedded.storage.topic_partition import TopicPartition
from broker_embedded.storage.transaction_index import FILE_SUFFIX as TXN_INDEX_SUFFIX
from broker_embedded.storage.transaction_index import (
    AbortedTxn,
    aborted_txns_of,
    collect_aborted,
)

SEEK_SLACK = 64 << 10  # bytes read past max_bytes: the walk from an index entry to the offset
WALK_BYTES = 1 << 20  # bytes per ranged GET of a lookup by timestamp
KEPT_INDEXES = 8  # offset indexes a source keeps (a 1 GiB segment's: about 4 MiB in memory)
MANIFEST_READS = 16  # manifests a planner reads at once (a GET each: latency, not bandwidth)
_POOLED = 8  # from this many manifests on they are read on threads (fewer: in turn, cheaper)
_MAX_SEEKS = 1 << 20  # a bound on one fetch's GETs: each advances or widens the read


_FetchKey = tuple[TopicPartition, int, int, IsolationLevel]


class UnsupportedOnObjectStoreError(KafkaLogError):
    """What the object-store source does not do yet (module docstring)."""


@dataclass(frozen=True, slots=True)
class StoredPartition:
    """One partition as planning found it in the store: its segments' base offsets and
    ``.log`` sizes, its log end (the last segment's ``next_offset``), high watermark and log
    start offset, the last stable offset when the store has it, and which segments have
    aborted transactions. Small and picklable: handed to tasks."""

    bases: tuple[int, ...]
    sizes: tuple[int, ...]
    log_end_offset: int
    high_watermark: int
    log_start_offset: int
    last_stable_offset: int | None = None  # None: not uploaded (read_committed refused)
    txn_bases: tuple[int, ...] = ()  # the segments with a .txnindex
    # where each segment's reads start, when one overlaps the one before (a later segment
    # based below the previous one's next_offset: read from that offset on); () = ``bases``
    overlapped_starts: tuple[int, ...] = ()

    @property
    def starts(self) -> tuple[int, ...]:
        """The offset each segment's reads start at: its base offset, or the previous
        segment's next offset when it overlaps it (module docstring)."""
        return self.overlapped_starts or self.bases

    def next_offset(self, i: int) -> int:
        """The offset after segment ``i``'s batches (the next one's start, or the log end)."""
        return self.starts[i + 1] if i + 1 < len(self.bases) else self.log_end_offset


@dataclass(frozen=True)
class ObjectStoreSource:
    """Opens an :class:`ObjectStoreFetchSource` on ``store``; ``planned``: partitions as a
    planner found them (module docstring)."""

    store: StoreLocation
    planned: tuple[tuple[TopicPartition, StoredPartition], ...] = field(default=(), repr=False)

    @property
    def location(self) -> str:
        return f"log dir {self.store.uri}"

    @property
    def unplanned(self) -> ObjectStoreSource:
        return ObjectStoreSource(self.store) if self.planned else self

    def open(self) -> ObjectStoreFetchSource:
        return ObjectStoreFetchSource(self)


class _Segment:
    """A stored segment as :func:`cut_candidates` and :func:`byte_cut_in` read it: its offset
    index, size and next offset, positions of offsets and its batches, from ranged reads."""

    __slots__ = (
        "offset_index",
        "size_in_bytes",
        "next_offset",
        "_source",
        "_name",
        "_base",
        "_start",
    )

    def __init__(
        self, source: ObjectStoreFetchSource, tp: TopicPartition, p: StoredPartition, i: int
    ) -> None:
        self._source, self._base = source, p.bases[i]
        self._name = f"{tp.dir_name}/{segment_file_stem(self._base)}{LOG_SUFFIX}"
        self.offset_index = source._offset_index(tp, self._base)
        self.size_in_bytes = p.sizes[i]
        self.next_offset = p.next_offset(i)
        self._start = p.starts[i]

    def batches(self, start: int, end: int | None = None) -> Iterator[AnyBatch]:
        stop = self.size_in_bytes if end is None else min(end, self.size_in_bytes)
        return self._source._batches_from(self._name, stop, start, " (measuring bytes)")

    def position_of(self, offset: int) -> int:
        """The start of the batch holding ``offset``, the segment's end past its batches, 0
        before them (as a local segment's)."""
        if offset >= self.next_offset:
            return self.size_in_bytes
        offset = max(offset, self._start)  # an overlapping segment is read from its start
        if offset <= self._base:
            return 0
        for b in self.batches(self.offset_index.lookup(offset).position):
            if b.last_offset >= offset:
                return b.position
        return self.size_in_bytes


class ObjectStoreFetchSource:
    """A log dir on object storage as a :class:`FetchSource`; see the module docstring."""

    def __init__(
        self,
        descriptor: ObjectStoreSource,
        index_cache: RemoteIndexCache | None = None,
        topic_id: str = "",
    ) -> None:
        """``index_cache``: a broker's offset indexes, shared by its remote reads, keyed by
        object name and ``topic_id`` (the manifests'), so that a topic deleted and created again
        under its name is never handed the old topic's ``.index``."""
        self._descriptor = descriptor
        self._shared = index_cache
        self._topic_id = topic_id
        self._store: ObjectStore = descriptor.store.open()
        self._planned = dict(descriptor.planned)
        self._listing: dict[str, int] | None = None
        self._checkpoints: tuple[dict[TopicPartition, int], ...] | None = None
        self._partitions: dict[TopicPartition, StoredPartition] = {}
        self._index: dict[tuple[TopicPartition, int], OffsetIndex] = {}  # in order of use
        self._txn_cache: dict[tuple[TopicPartition, int], list[AbortedTxn]] = {}
        self._ahead: FetchAhead[_FetchKey, FetchedPartition] = FetchAhead("kafkalog-store")

    @property
    def descriptor(self) -> ObjectStoreSource:
        return self._descriptor

    @property
    def store(self) -> ObjectStore:
        return self._store

    def _where(self, name: str = "") -> str:
        return self._store.location.describe(name)

    # -- planning ----------------------------------------------------------------------------------

    def listing(self) -> dict[str, int]:
        """Every object of the location and its size (listed on first use)."""
        if self._listing is None:
            self._listing = self._store.list()
            if not self._listing:
                raise FileNotFoundError(
                    f"no log dir at {self._where()}: nothing is stored under that prefix (a "
                    "wrong bucket or prefix, or not uploaded yet: kafkalog upload)"
                )
        return self._listing

    def _checkpoint(self, name: str) -> dict[TopicPartition, int]:
        if name not in self.listing():
            return {}
        return OffsetCheckpointFile(self._where(name)).parse(self._store.read(name))

    def partition(self, tp: TopicPartition) -> StoredPartition:
        """``tp`` as stored (planned, or found in the listing on first use)."""
        found = self._partitions.get(tp) or self._planned.get(tp)
        if found is None:
            found = self._partitions[tp] = self._find(tp)
        return found

    def _find(self, tp: TopicPartition) -> StoredPartition:
        listing = self.listing()
        prefix = tp.dir_name + "/"
        names = [n[len(prefix) :] for n in listing if n.startswith(prefix)]
        if not names:
            raise FileNotFoundError(f"no partition {tp} in {self._where(prefix)}")
        found = (RemoteLogSegmentMetadata.base_offset_of(n) for n in names)
        manifests = sorted(b for b in found if b is not None)
        logs = {int(n[:20]) for n in names if n.endswith(LOG_SUFFIX) and n[:20].isdigit()}
        holes = sorted(logs.difference(manifests))
        if manifests and holes and holes[0] < manifests[-1]:
            key = f"{prefix}{segment_file_stem(holes[0])}{LOG_SUFFIX}"
            raise KafkaLogError(
                f"{self._where(key)} has no manifest but later segments of {tp} do: an upload "
                "was interrupted; run kafkalog upload again to complete it"
            )
        stored = self._manifests(prefix, manifests)
        if self._checkpoints is None:
            self._checkpoints = (
                self._checkpoint(REPLICATION_OFFSET_CHECKPOINT),
                self._checkpoint(LOG_START_OFFSET_CHECKPOINT),
                self._checkpoint(LAST_STABLE_OFFSET_CHECKPOINT),
            )
        hws, starts, lsos = self._checkpoints
        if not stored:
            start = starts.get(tp, 0)
            return StoredPartition((), (), start, start, start, start if tp in lsos else None)
        while len(stored) > 1 and stored[0].next_offset <= starts.get(tp, -1):
            del stored[0]  # below the log start offset: deleted (retention between uploads)
        log_names = [f"{prefix}{segment_file_stem(m.base_offset)}{LOG_SUFFIX}" for m in stored]
        missing = [n for n in log_names if n not in listing]
        if missing:
            raise FileNotFoundError(
                f"no object at {self._where(missing[0])}, though its segment's manifest is "
                "there: the store lost a segment; upload the log dir again (kafkalog upload)"
            )
        for m, name in zip(stored, log_names, strict=True):
            if listing[name] != m.size_in_bytes:
                raise ObjectChangedError(
                    f"{self._where(name)} holds {listing[name]} bytes, but its manifest "
                    f"({prefix}{RemoteLogSegmentMetadata.name_of(m.base_offset)}) says "
                    f"{m.size_in_bytes}: the segment was cut short or changed after it was "
                    "stored; upload the log dir again (kafkalog upload repairs it)"
                )
        kept, read_starts = self._contiguous(tp, prefix, stored)
        ids = {id(m) for m in kept}
        sizes = tuple(listing[n] for m, n in zip(stored, log_names, strict=True) if id(m) in ids)
        bases = tuple(m.base_offset for m in kept)
        end = max(m.next_offset for m in kept)
        log_start = max(starts.get(tp, bases[0]), bases[0])
        hw = min(max(hws.get(tp, end), log_start), end)
        lso = lsos.get(tp)
        if lso is not None:
            lso = min(max(lso, log_start), hw)
        txn_names = (f"{prefix}{segment_file_stem(b)}{TXN_INDEX_SUFFIX}" for b in bases)
        txns = tuple(b for b, n in zip(bases, txn_names, strict=True) if n in listing)
        overlapped = read_starts if read_starts != bases else ()
        return StoredPartition(bases, sizes, end, hw, log_start, lso, txns, overlapped)

    def _manifests(self, prefix: str, bases: list[int]) -> list[RemoteLogSegmentMetadata]:
        """The manifests of the segments ``bases`` (one GET each, :data:`MANIFEST_READS` at a
        time), without the first ones marked ``DELETE_SEGMENT_STARTED`` (a broker's remote
        retention or topic deletion under way, remote_log_manager.py: deletions go oldest
        first) and those deleted since the listing: no longer stored, whatever of their
        objects are left."""

        def read(base: int) -> RemoteLogSegmentMetadata | None:
            name = prefix + RemoteLogSegmentMetadata.name_of(base)
            try:
                return read_manifest(self._store, name)
            except FileNotFoundError:
                return None  # deleted since the listing

        if len(bases) >= _POOLED:
            with ThreadPoolExecutor(
                min(MANIFEST_READS, len(bases)), thread_name_prefix="kafkalog-manifests"
            ) as pool:
                read_all = list(pool.map(read, bases))
        else:
            read_all = [read(b) for b in bases]
        found: list[RemoteLogSegmentMetadata] = []
        for manifest in read_all:
            if manifest is not None and (found or manifest.state != DELETE_SEGMENT_STARTED):
                found.append(manifest)
        return found

    def _contiguous(
        self, tp: TopicPartition, prefix: str, stored: list[RemoteLogSegmentMetadata]
    ) -> tuple[list[RemoteLogSegmentMetadata], tuple[int, ...]]:
        """The segments to read, in offset order, and where each one's reads start: a gap
        between one segment's ``next_offset`` and the next one's base is an error naming both
        keys and offsets; a segment overlapping the one before (based below its
        ``next_offset``: a broker that became leader copied a segment straddling the store's
        end) is read from that offset on, one wholly inside it not at all (each offset once)."""
        kept, read_starts = [stored[0]], [stored[0].base_offset]
        end = stored[0].next_offset
        for m in stored[1:]:
            if m.base_offset > end:
                before = prefix + RemoteLogSegmentMetadata.name_of(kept[-1].base_offset)
                name = prefix + RemoteLogSegmentMetadata.name_of(m.base_offset)
                raise KafkaLogError(
                    f"offsets [{end}, {m.base_offset}) of {tp} are not in the store: "
                    f"{self._where(before)} ends at {end}, and the next segment, "
                    f"{self._where(name)}, starts at {m.base_offset} (a segment deleted from "
                    "the store, or the manifest of a compacted segment written by an older "
                    "kafkalog, ending at its last batch); upload the log dir again (kafkalog "
                    "upload)"
                )
            if m.base_offset < end and m.next_offset <= end:
                continue  # wholly inside the segment before: read there
            kept.append(m)
            read_starts.append(max(m.base_offset, end))
            end = max(end, m.next_offset)
        return kept, tuple(read_starts)

    def start_at(self, tp: TopicPartition, log_start_offset: int) -> StoredPartition:
        """``tp`` as the store a broker tiers to holds it (tiered_fetch_source.py), handed so
        to tasks (:meth:`task_source`): its log start offset raised to ``log_start_offset``
        (the broker's, when the store still holds segments below it), and read_committed
        reading to its end (a broker copies only segments below the last stable offset:
        remote_log_manager.py)."""
        p = self.partition(tp)
        start = max(p.log_start_offset, min(log_start_offset, p.log_end_offset))
        hw = max(p.high_watermark, start)
        lso = hw if p.last_stable_offset is None else max(p.last_stable_offset, start)
        if (start, hw, lso) != (p.log_start_offset, p.high_watermark, p.last_stable_offset):
            p = self._partitions[tp] = replace(
                p, log_start_offset=start, high_watermark=hw, last_stable_offset=lso
            )
        return p

    def task_source(self, tps: Iterable[TopicPartition]) -> ObjectStoreSource:
        self._ahead.settle()
        return ObjectStoreSource(
            self._descriptor.store, tuple((tp, self.partition(tp)) for tp in tps)
        )

    def topics(self) -> dict[str, tuple[int, ...]]:
        by_topic: dict[str, set[int]] = {}
        for name in self.listing():
            tp = TopicPartition.try_parse_dir_name(name.partition("/")[0]) if "/" in name else None
            if tp is not None:
                by_topic.setdefault(tp.topic, set()).add(tp.partition)
        return {t: tuple(sorted(ps)) for t, ps in sorted(by_topic.items())}

    def declared_partitions(self, topic: str) -> int | None:
        return None

    def exists(self, tp: TopicPartition) -> bool:
        self._ahead.settle()
        return bool(self._store.list(tp.dir_name))

    def list_offset(
        self, tp: TopicPartition, timestamp: int, isolation: IsolationLevel
    ) -> int | None:
        self._ahead.settle()
        p = self.partition(tp)
        latest = self._bound(tp, p, isolation)
        if timestamp == EARLIEST_TIMESTAMP:
            return p.log_start_offset
        if timestamp == LATEST_TIMESTAMP:
            return latest
        found = self.offset_for_time(tp, timestamp)
        return found.offset if found is not None and found.offset < latest else None

    def offset_for_time(self, tp: TopicPartition, timestamp: int) -> TimestampAndOffset | None:
        """The first record at or above the log start offset whose timestamp is >=
        ``timestamp`` (module docstring), with its timestamp and leader epoch; ``None``: none
        (the broker's ListOffsets of a tiered partition asks this too)."""
        self._ahead.settle()
        p = self.partition(tp)
        for i, base in enumerate(p.bases):
            if p.next_offset(i) <= p.log_start_offset:
                continue
            stem = f"{tp.dir_name}/{segment_file_stem(base)}"
            manifest_name = f"{tp.dir_name}/{RemoteLogSegmentMetadata.name_of(base)}"
            manifest = read_manifest(self._store, manifest_name)
            if manifest.max_timestamp_ms < timestamp:
                continue
            floor = max(p.log_start_offset, p.starts[i])
            name = stem + TIME_INDEX_SUFFIX
            data = self._store.read(name) if self._has(name) else b""
            entry = TimeIndex.from_bytes(data, base, source=self._where(name)).lookup(timestamp)
            position = self._offset_index(tp, base).lookup(max(entry.offset, floor)).position
            context = f" (looking up timestamp {timestamp} in {tp})"
            walk = self._batches_from(stem + LOG_SUFFIX, p.sizes[i], position, context)
            found = first_record_at_or_after(walk, timestamp, floor)
            if found is not None:
                return found
        return None

    def _batches_from(
        self, name: str, size: int, position: int, context: str
    ) -> Iterator[AnyBatch]:
        """The batches of the object ``name`` from ``position``, read :data:`WALK_BYTES` at a
        time (a larger batch whole)."""
        want = WALK_BYTES
        while position < size:
            length = min(size - position, want)
            buf = self._store.read_range(name, position, length, context, size)
            end = 0
            for b in iter_batches(buf, self._where(name), base_position=position):
                yield b
                end = b.position - position + b.size_in_bytes
            if end == 0:  # the first batch is larger than what was read
                entry = int.from_bytes(buf[8:12], "big") + 12 if len(buf) >= 12 else 0
                if entry <= len(buf) or position + len(buf) >= size:
                    where = self._where(name)
                    reason = f"the segment ends inside a batch{context}"
                    raise CorruptRecordError(reason, source=where, position=position)
                want = entry
            position += end

    def _bound(self, tp: TopicPartition, p: StoredPartition, isolation: IsolationLevel) -> int:
        """The offset reads stop below: the high watermark, or for read_committed the stored
        last stable offset (an error when the store has none for ``tp``)."""
        if isolation != IsolationLevel.READ_COMMITTED:
            return p.high_watermark
        if p.last_stable_offset is None:
            raise UnsupportedOnObjectStoreError(
                f"read_committed needs the last stable offset of {tp}, which "
                f"{self._descriptor.location} does not hold: kafkalog upload records it for a "
                "log dir no broker holds (every segment uploaded); read read_uncommitted, or "
                "upload the log dir again once its broker is stopped"
            )
        return p.last_stable_offset

    # -- fetching ----------------------------------------------------------------------------------

    def _offset_index(self, tp: TopicPartition, base: int, context: str = "") -> OffsetIndex:
        """The ``.index`` of ``tp``'s segment based at ``base``, read once and kept among the
        last :data:`KEPT_INDEXES` used (a planner measuring ranges reads each once);
        ``context`` (the offset fetched) names the read in errors."""
        key = (tp, base)
        index = self._index.pop(key, None)
        if index is None:
            name = f"{tp.dir_name}/{segment_file_stem(base)}{INDEX_SUFFIX}"
            shared = f"{name}@{self._topic_id}"  # a prefix of the name forgets it
            index = None if self._shared is None else self._shared.get(shared)
            if index is None:
                data = self._store.read(name, context) if self._has(name) else b""
                index = OffsetIndex.from_bytes(data, base, source=self._where(name))
                if self._shared is not None:
                    self._shared.put(shared, index)
            while len(self._index) >= KEPT_INDEXES:
                del self._index[next(iter(self._index))]  # the least recently used
        self._index[key] = index
        return index

    def _has(self, name: str) -> bool:
        return self._listing is None or name in self._listing

    def fetch(
        self, tp: TopicPartition, offset: int, max_bytes: int, isolation: IsolationLevel
    ) -> FetchedPartition:
        """Fetch (module docstring): the prefetched answer when :meth:`prefetch` was asked for
        exactly this fetch."""
        ahead = self._ahead.take((tp, offset, max_bytes, isolation))
        return self._fetch(tp, offset, max_bytes, isolation) if ahead is None else ahead.result()

    def prefetch(
        self, tp: TopicPartition, offset: int, max_bytes: int, isolation: IsolationLevel
    ) -> None:
        """Start the fetch :meth:`fetch` will be asked for next on a background thread, so that
        its GET overlaps the decoding of this one (offset_range_reader.py asks after each
        decode): memory is one more fetch."""
        self._ahead.start((tp, offset, max_bytes, isolation), lambda key: self._fetch(*key))

    def _fetch(
        self, tp: TopicPartition, offset: int, max_bytes: int, isolation: IsolationLevel
    ) -> FetchedPartition:
        p = self.partition(tp)
        bound = self._bound(tp, p, isolation)
        if not p.log_start_offset <= offset <= p.high_watermark:
            raise OffsetOutOfRangeError(
                f"offset {offset} of {tp} is outside [{p.log_start_offset}, "
                f"{p.high_watermark}] in {self._descriptor.location}"
            )
        i = bisect.bisect_right(p.starts, offset) - 1
        while 0 <= i < len(p.bases) and offset >= p.next_offset(i):
            i += 1  # past the segment's batches (a compacted tail): the next one
        records: bytes | memoryview = b""
        read = i
        while offset < bound and 0 <= read < len(p.bases) and p.starts[read] < bound:
            records = self._read(tp, p, read, offset, max_bytes, bound)
            if records:
                i = read
                break
            read += 1  # no batch at or after offset in it (a compacted tail): the next one
        if isolation != IsolationLevel.READ_COMMITTED:
            return FetchedPartition(tp, offset, records, p.high_watermark, -1, p.log_start_offset)
        end = end_of_complete_batches(records, bound)
        aborted = self._aborted(tp, p, max(i, 0), offset, end)
        return FetchedPartition(
            tp, offset, records, p.high_watermark, bound, p.log_start_offset, aborted
        )

    def _aborted(
        self, tp: TopicPartition, p: StoredPartition, i: int, offset: int, end: int
    ) -> tuple[tuple[int, int], ...]:
        """(producer id, first offset) of the aborted transactions overlapping ``[offset,
        end)``, from the ``.txnindex`` of segment ``i`` and the following ones until one is
        complete (Kafka's ``collectAbortedTransactions``)."""
        found: list[tuple[int, int]] = []
        for base in p.bases[i:]:
            if base not in p.txn_bases:
                continue
            context = f" (aborted transactions of a fetch at offset {offset} of {tp})"
            result = collect_aborted(self._txns(tp, base, context), offset, end)
            found += result.fetch_entries
            if result.is_complete:
                break
        return tuple(found)

    def _txns(self, tp: TopicPartition, base: int, context: str = "") -> list[AbortedTxn]:
        """The entries of ``tp``'s segment ``base``'s ``.txnindex`` (read once, kept)."""
        key = (tp, base)
        found = self._txn_cache.get(key)
        if found is None:
            name = f"{tp.dir_name}/{segment_file_stem(base)}{TXN_INDEX_SUFFIX}"
            found = self._txn_cache[key] = aborted_txns_of(
                self._store.read(name, context), self._where(name)
            )
        return found

    def _read(
        self,
        tp: TopicPartition,
        p: StoredPartition,
        i: int,
        offset: int,
        max_bytes: int,
        bound: int,
    ) -> bytes | memoryview:
        """The batches of segment ``i`` from the one holding ``offset`` (module docstring)."""
        base, size = p.bases[i], p.sizes[i]
        name = f"{tp.dir_name}/{segment_file_stem(base)}{LOG_SUFFIX}"
        context = f" (fetch at offset {offset} of {tp})"
        index = self._offset_index(tp, base, context) if offset > base else None
        position = index.lookup(offset).position if index is not None else 0
        for _ in range(_MAX_SEEKS):
            length = min(size - position, max(max_bytes, 1) + SEEK_SLACK)
            if length <= 0:
                return b""
            buf = memoryview(self._store.read_range(name, position, length, context, size))
            arr = readonly_bytes(buf)
            status, at, _, _ = es.seek_entry(arr, 0, len(buf), offset)
            if status == es.SEEK_FOUND:
                return _bounded(arr, buf, int(at), max_bytes, bound)
            if status == es.SEEK_END:
                if position + len(buf) >= size:
                    return b""
                position += int(at)
            elif status == es.SEEK_PARTIAL and at > 0:
                position += int(at)  # read again from the batch the bytes cut
            elif status == es.SEEK_PARTIAL:
                entry = int.from_bytes(buf[8:12], "big") + 12 if len(buf) >= 12 else 0
                if position + len(buf) >= size or entry <= len(buf):
                    where = self._where(name)
                    reason = f"the segment ends inside a batch{context}"
                    raise CorruptRecordError(reason, source=where, position=position)
                max_bytes = max(max_bytes, entry)  # one batch larger than the read: whole
            else:
                for _b in iter_batches(
                    buf, self._where(name), start=int(at), base_position=position
                ):
                    pass  # names the corrupt entry; a legacy one is not read here
                raise CorruptRecordError(
                    f"a legacy (magic 0/1) batch{context}: not read from object storage",
                    source=self._where(name),
                    position=position + int(at),
                )
        raise AssertionError("unreachable")

    # -- bytes of the log --------------------------------------------------------------------------

    def _segments(self, tp: TopicPartition) -> _Indexed:
        return _Indexed(self, tp)

    def byte_cut(
        self,
        tp: TopicPartition,
        start: int,
        end: int,
        max_bytes: int,
        *,
        min_one_batch: bool = False,
    ) -> ByteCut:
        """Exact, as a local log dir's (:func:`byte_cut_in`): positions from the stored offset
        indexes, the cut from a walk of ranged reads after an index entry."""
        if max_bytes < 0:
            raise ValueError(f"max_bytes must not be negative, not {max_bytes}")
        if end <= start:
            return ByteCut(start, 0)
        self._ahead.settle()
        starts = list(self.partition(tp).starts)
        return byte_cut_in(self._segments(tp), starts, start, end, max_bytes, min_one_batch)

    def byte_cuts(
        self, tp: TopicPartition, start: int, end: int, max_bytes: int
    ) -> list[int] | None:
        """As a local log dir's (log_dir_fetch_source.py), from the offset indexes read from
        the store (each once) and the segments' sizes from the listing."""
        if max_bytes < 1:
            raise ValueError(f"max_bytes must be positive, not {max_bytes}")
        self._ahead.settle()
        starts = list(self.partition(tp).starts)
        return cuts_of(
            cut_candidates(self._segments(tp), starts, start, end), start, end, max_bytes
        )

    # -- lifetime ----------------------------------------------------------------------------------

    def close(self) -> None:
        self._ahead.close()
        self._index.clear()
        self._store.release()

    def __enter__(self) -> ObjectStoreFetchSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"ObjectStoreFetchSource({self._descriptor.store.uri!r})"


class _Indexed:
    """A stored partition's segments by base offset, for :func:`cut_candidates` and
    :func:`byte_cut_in`."""

    def __init__(self, source: ObjectStoreFetchSource, tp: TopicPartition) -> None:
        self._source, self._tp = source, tp
        self._p = source.partition(tp)

    def segment(self, start: int) -> _Segment:
        """The segment whose reads start at ``start`` (its base offset unless it overlaps)."""
        i = self._p.starts.index(start)
        return _Segment(self._source, self._tp, self._p, i)


def _bounded(
    arr: np.ndarray, buf: memoryview, start: int, max_bytes: int, bound: int
) -> memoryview:
    """``buf`` from the batch at ``start``: at most ``max_bytes`` (the first batch whole), cut
    before the batch holding ``bound`` (the high watermark or the last stable offset)."""
    first = int.from_bytes(buf[start + 8 : start + 12], "big") + 12
    stop = min(len(buf), start + max(max_bytes, first))
    status, at, _, _ = es.seek_entry(arr, start, stop, bound)
    if status == es.SEEK_FOUND:
        stop = int(at)
    return buf[start:stop]
