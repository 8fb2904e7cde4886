"""The latest view of a batch read (``view=latest``): per topic partition, the latest record of
every key of the planned range, computed on the executor with the cleaner's offset map.

What a task returns for its range ``[start, end)`` (one task per topic partition: the planner
never splits a partition under this view, as a key's versions would fall into different tasks):
for every key, the record with the largest offset, with that record's value, offset, timestamp
and headers; none for a key whose latest record is a tombstone (null value) unless
``keep_tombstones``; none for records without a key (counted, one warning per task). Under
read_committed, aborted records and control batches are not rows of the decoder, so they never
count. A key found in several partitions gives one row per partition (Kafka's default
partitioner puts a key in one partition).

How (no Python object per record; the kernels are in latest_view_kernel.py): the range is read
through the fetch source (offset_range_reader.py, a log dir or a cluster) once per pass, as
Arrow batches:

1. build: a :class:`SkimpyOffsetMap` of ``map_bytes * 24 / 32`` bytes (24-byte slots: MD5 of
   the key, latest offset) gets every key of the round; offsets increase, so a key's slot ends
   with its latest offset;
2. emit: the rows whose offset equals their key's slot are the latest records; they are
   filtered out of the batch (tombstones dropped unless kept) and yielded.

Rounds (the cleaner's bound, never an unbounded dictionary): a round takes the keys whose digest
falls in one bucket ``(level, bucket)`` (latest_view_kernel.py). When pass 1 is about to put a
new key into a map at the cleaner's bound (``load_factor`` of the slots), the round is split:
the entries of the upper half bucket leave the map (``take_entries``, ``put_entries``) and wait
for a later round, and pass 1 goes on. Each round costs two reads of the range; a split briefly
holds a copy of the entries it keeps (24 bytes each, half of the map's entries on average)
beside the map. Splits stop at ``MAX_LEVEL`` (2^16 rounds): a :class:`LatestViewError` naming
the partition and ``view.mapSize``.

Collisions: the map is keyed by a 128-bit MD5, as the cleaner's (Kafka's cleaner lets two keys
with one MD5 share a slot; the older key would then be dropped). Here pass 2 also keeps, per
slot, a seeded 64-bit FNV-1a hash of the first key it meets (``8`` more bytes per slot, inside
``map_bytes``); a key of the slot with another hash flags it, and a third pass (only then)
reads the flagged slots' rows, finds the latest of each distinct key among them by its bytes
(at most ``MAX_COLLIDED_KEYS`` keys: beyond, a :class:`LatestViewError`) and emits those not
emitted in pass 2. A live key is lost only if two distinct keys of one partition share their
MD5 AND the task's randomly seeded 64-bit hash: for n keys, at most n^2 / 2^129 by accident,
and for constructed MD5 collisions at most 2^-64 per colliding pair.

Consistency: the passes read the same planned range. A log that its broker cleans or deletes
meanwhile (a log dir a broker owns, or a cluster) can lose, between the passes, a record that
pass 1 saw (retention, or compaction of a record superseded after the planned end): that key
then gives no row (the time travel of ``endingOffsets`` over a compacted topic only sees what
compaction left), and data loss below the log start offset follows ``failOnDataLoss`` as in
every read.

Memory: the map and its fingerprints (``map_bytes``; one round's at a time), a split's copy,
one fetch and its decoded batch, and the output batches being joined. Thread safety: one task's
state only.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, fields, replace

import numpy as np
import pyarrow as pa

from broker_embedded.cleaner.skimpy_offset_map import (
    BYTES_PER_ENTRY,
    MD5_SCRATCH_BYTES,
    SkimpyOffsetMap,
)
from datasource import latest_view_kernel as k
from datasource.errors import KafkaSourceError
from datasource.kafka_input_partition import KafkaInputPartition
from datasource.kafka_source_options import MIN_VIEW_MAP_BYTES, KafkaSourceOptions
from datasource.offset_range_reader import _Coalescer, read_offset_range

log = logging.getLogger(__name__)

SLOT_BYTES = BYTES_PER_ENTRY + 8  # the map's slot and its fingerprint
DEFAULT_MAP_BYTES = 64 << 20
MAX_LEVEL = 16
MAX_COLLIDED_KEYS = 1 << 16
FULL_MASK = (-1, -1)
KEY, VALUE, OFFSET = 0, 1, 4  # columns of Spark's Kafka schema


class LatestViewError(KafkaSourceError):
    """The latest view cannot be computed within its bounds (too many rounds, too many keys
    with colliding hashes): the message names the partition and the option to raise."""


@dataclass(frozen=True)
class LatestInputPartition(KafkaInputPartition):
    """A :class:`KafkaInputPartition` read as its latest view: ``keep_tombstones`` (a null-value
    row for a key whose latest record is a tombstone), ``map_bytes`` (the offset map's bound)."""

    keep_tombstones: bool = False
    map_bytes: int = DEFAULT_MAP_BYTES


@dataclass(frozen=True)
class _Cols:
    """One batch's columns as the kernels take them."""

    koff: np.ndarray
    kdata: np.ndarray
    kvalid: np.ndarray
    offsets: np.ndarray

    @classmethod
    def of(cls, batch: pa.RecordBatch) -> _Cols:
        keys = batch.column(KEY)
        _validity, off_buf, data_buf = keys.buffers()
        koff = np.frombuffer(off_buf, np.int32)[keys.offset : keys.offset + len(keys) + 1]
        kdata = np.frombuffer(data_buf, np.uint8) if data_buf else np.empty(0, np.uint8)
        kvalid = keys.is_valid().to_numpy(zero_copy_only=False)
        offsets = batch.column(OFFSET).to_numpy()
        return cls(koff, kdata, kvalid, offsets)


class _Round:
    """One round: its bucket ``(level, bucket)``, its map and, from pass 2, the fingerprints
    and collision flags of the map's slots; with the task's kernel scratch buffers, digest mask
    and fingerprint seed."""

    def __init__(
        self, p: LatestInputPartition, level: int, bucket: int, mask: tuple[int, int], seed: int
    ) -> None:
        self.p, self.level, self.bucket, self.mask, self.seed = p, level, bucket, mask, seed
        slots = max(p.map_bytes, MIN_VIEW_MAP_BYTES) // SLOT_BYTES
        self.map = SkimpyOffsetMap(slots * BYTES_PER_ENTRY)
        self.scratch = np.zeros(MD5_SCRATCH_BYTES, np.uint8)
        self.group = np.zeros((k.LOOK_AHEAD, k.GROUP_FIELDS), np.int64)
        self.fps = self.flags = np.zeros(0, np.int64)

    def args(self, cols: _Cols) -> tuple:
        """The arguments every kernel starts with."""
        m = self.map
        return (
            cols.koff,
            cols.kdata,
            cols.kvalid,
            cols.offsets,
            m.words,
            m.state,
            self.scratch,
            self.level,
            self.bucket,
            self.mask[0],
            self.mask[1],
            self.group,
        )

    def build(self, pending: list[tuple[int, int]]) -> int:
        """Pass 1, splitting the round at the map's bound (new rounds go to ``pending``); the
        number of keyless records read."""
        nulls = 0
        for _batch, cols in _batches(self.p, False):
            nulls += int(len(cols.kvalid) - cols.kvalid.sum())
            i = 0
            while (i := int(k.build_rows(*self.args(cols), i))) < len(cols.offsets):
                pending.append(self._split())
        return nulls

    def _split(self) -> tuple[int, int]:
        """Halve the round's bucket: the upper half leaves the map; its round."""
        p, m = self.p, self.map
        if self.level >= MAX_LEVEL:
            raise LatestViewError(
                f"{p.topic}-{p.partition} [{p.start}, {p.end}): the latest view would need more "
                f"than {1 << MAX_LEVEL} rounds of an offset map of {m.slots} keys; raise the "
                "option view.mapSize"
            )
        tmp = np.empty((m.size, 3), np.int64)
        kept = int(k.take_entries(m.words, m.state, self.level, tmp))
        upper = (self.level + 1, self.bucket | (1 << self.level))
        self.level += 1
        m.clear()
        k.put_entries(m.words, m.state, tmp, kept)
        return upper

    def emit(self, out: _Coalescer) -> Iterator[pa.RecordBatch]:
        """Pass 2 and, when a slot was flagged, pass 3."""
        p = self.p
        self.fps = np.zeros(self.map.slots, np.int64)
        self.flags = np.zeros(self.map.slots, np.bool_)
        flagged = 0
        for batch, cols in _batches(p, p.include_headers):
            keep = np.empty(len(cols.offsets), np.bool_)
            flagged += k.emit_rows(*self.args(cols), self.seed, self.fps, self.flags, keep)
            yield from _emit(out, batch, keep, p.keep_tombstones)
        if flagged:
            for row in self._collided():
                yield from _emit(out, row, None, p.keep_tombstones)

    def _collided(self) -> Iterator[pa.RecordBatch]:
        """Pass 3: the latest row of every key of the flagged slots not emitted by pass 2."""
        p = self.p
        latest: dict[bytes, tuple[bool, pa.RecordBatch]] = {}
        for batch, cols in _batches(p, p.include_headers):
            sel = np.empty(len(cols.offsets), np.int8)
            if not k.collided_rows(*self.args(cols), self.flags, sel):
                continue
            rows = np.flatnonzero(sel)
            taken = batch.take(pa.array(rows))
            for j, key in enumerate(taken.column(KEY).to_pylist()):  # flagged rows only: rare
                latest[key] = (bool(sel[rows[j]] == 2), taken.slice(j, 1))
            if len(latest) > MAX_COLLIDED_KEYS:
                raise LatestViewError(
                    f"{p.topic}-{p.partition} [{p.start}, {p.end}): more than "
                    f"{MAX_COLLIDED_KEYS} keys share hashes of the latest view's offset map"
                )
        return (row for emitted, row in latest.values() if not emitted)


def read_latest(
    p: LatestInputPartition, mask: tuple[int, int] = FULL_MASK
) -> Iterator[pa.RecordBatch]:
    """The latest view of ``p``'s range; see the module docstring. ``mask`` narrows the digests
    (tests force collisions with it)."""
    seed = secrets.randbits(63)
    pending = [(0, 0)]
    keyless = -1
    out = _Coalescer()
    while pending:
        rnd = _Round(p, *pending.pop(), mask, seed)
        nulls = rnd.build(pending)
        keyless = nulls if keyless < 0 else keyless
        yield from rnd.emit(out)
        del rnd  # its map goes before the next round's
    yield from out.flush()
    if keyless:
        log.warning(
            "%s-%d: %d records without a key in [%d, %d) are left out of the latest view",
            p.topic,
            p.partition,
            keyless,
            p.start,
            p.end,
        )


def _batches(p: KafkaInputPartition, headers: bool) -> Iterator[tuple[pa.RecordBatch, _Cols]]:
    """One read of the range (headers only when they are emitted)."""
    for batch in read_offset_range(replace(p, include_headers=headers)):
        yield batch, _Cols.of(batch)


def _emit(
    out: _Coalescer, batch: pa.RecordBatch, keep: np.ndarray | None, keep_tombstones: bool
) -> Iterator[pa.RecordBatch]:
    """The rows of ``batch`` to return (``keep``, tombstones dropped unless kept), joined."""
    if keep is None:
        keep = np.ones(batch.num_rows, np.bool_)
    if not keep_tombstones:
        keep &= batch.column(VALUE).is_valid().to_numpy(zero_copy_only=False)
    if keep.any():
        yield from out.add(batch.filter(pa.array(keep)))


def latest_partitions(
    parts: list[KafkaInputPartition], options: KafkaSourceOptions
) -> list[LatestInputPartition]:
    """The planned partitions read as their latest view, as ``options`` say."""
    map_bytes = options.view_map_bytes or DEFAULT_MAP_BYTES
    return [
        LatestInputPartition(
            **{f.name: getattr(p, f.name) for f in fields(p)},
            keep_tombstones=options.view_keep_tombstones,
            map_bytes=map_bytes,
        )
        for p in parts
    ]
