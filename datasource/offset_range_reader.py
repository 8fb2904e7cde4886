"""Executor side: read one planned offset range of one partition as Arrow record batches.

:func:`read_offset_range` opens the fetch source from the task's descriptor (a log dir: its
read-only view, the broker's published high watermark and log start offset, no lock) and
fetches ``[start, end)`` the way a Kafka consumer does (``FetchSource.fetch``): each fetch asks
for at most ``fetch_bytes`` from the current offset and gets whole batches (at least one,
KIP-74; a partial last batch is dropped) below the high watermark or, under read_committed,
below the last stable offset with the aborted transactions overlapping the read. The columnar
decoder turns the complete batches into rows of ``[current, end)`` (no rows for control batches,
nor for aborted transactions under read_committed), and the next fetch starts at the offset
after the last batch decoded, as the batches say: the end of the fetch, or where the decoder's
inflation budget stopped it (``columnar_decoder.MAX_INFLATED_BYTES``: compressed batches
inflate, fetch limits count compressed bytes). Small decoded batches are joined into record
batches of up to ``COALESCE_ROWS`` rows or ``COALESCE_BYTES`` bytes before they are yielded
(Spark pays per batch). Memory stays bounded by one fetch, one decode call's inflation budget,
its decoded rows and that buffer, whatever the partition's size or compression.

A log dir is fetched in place (``LogDirFetchSource.fetch_in_place``: the records are a view of
the segment's mapping, not a copy, and the next fetch releases its pages), and its tasks fetch
at least ``LOG_DIR_FETCH_BYTES`` (8 MiB, kafka_source_options.py) at a time: one fetch then
decodes to one Arrow batch of tens of thousands of rows without a join, where 1 MiB fetches of
producer batches of 1 MB gave a few thousand rows each, joined by a copy (5 M rows of 153
bytes, uncompressed: 0.93 CPU-seconds for the reader alone before, 0.35 now). Only segments
wholly below the recovery point are viewed in place, the others copied, and a segment another
process truncated since it was mapped is a ``SegmentTruncatedError`` (an out-of-range error:
the log dir is opened again), not a SIGBUS (log_dir_fetch_source.py).

Pipelining: a source that can fetch ahead (``prefetch``: the wire source over
``kafka.bootstrap.servers``) is asked, once a fetch is decoded, for the next fetch of the range
while Spark consumes the rows of this one; at most one fetch is ahead, and none past the
range's end or the bound the last fetch reported, so memory stays bounded by one more fetch.

Offsets are not contiguous: compaction, transaction markers and aborted records leave gaps, and
a gap is never an error. A fetch that finds no batch at all means that nothing is left between
the current offset and the bound (a compacted-away tail below a high watermark at a segment's
base; control batches and aborted transactions come back as batches that decode to no rows,
never as nothing): the read ends. The source is asked to confirm it where it measures its
bytes (``byte_cut`` from the current offset to the range's end, or the bound below it: a log
dir, the object store; the wire cannot tell): batches there make the read fail with a
:class:`KafkaSourceError` naming the partition, the offset and the source (its log dir, or
its bucket and prefix) rather than end short. Data loss (the records are gone) is told apart
by the partition's offsets, re-read from a newly opened source when a fetch fails. (A log
dir's task opens its partition with the checkpoint entries its planner read, carried by the
descriptor, log_dir_fetch_source.py; the partition directory itself is read as it is at the
task, so retention or truncation since planning still makes a fetch fail or come back short.
The source opened after a failed fetch is the log dir without them: its checkpoint files as
they are now.)

- the current offset is below the log start offset (retention or DeleteRecords ran after
  planning): with ``fail_on_data_loss`` a :class:`DataLossError` naming the partition and both
  offsets, else a logged warning and the read goes on from the log start offset;
- the planned end is past the bound, or the current offset past the latest offset (the high
  watermark moved back, a truncation): a :class:`DataLossError`, else a warning and the read
  ends there.

A fetch returning bytes without one complete batch is an error (the source is inconsistent),
so the loop always advances. The generator holds the source's open files until it is exhausted
or closed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

import pyarrow as pa

from broker_embedded.errors import OffsetOutOfRangeError
from broker_embedded.record.columnar_decoder import decode
from broker_embedded.storage.fetch_data_info import IsolationLevel
from broker_embedded.storage.fetch_source import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    FetchedPartition,
    FetchSource,
)
from broker_embedded.storage.topic_partition import TopicPartition
from datasource.errors import DATA_LOSS_HINT, DataLossError, KafkaSourceError
from datasource.kafka_input_partition import KafkaInputPartition

log = logging.getLogger(__name__)

COALESCE_ROWS = 65536
COALESCE_BYTES = 8 << 20


def read_offset_range(p: KafkaInputPartition) -> Iterator[pa.RecordBatch]:
    """The rows of ``[p.start, p.end)`` of one partition, as Arrow record batches of Spark's
    Kafka schema; see the module docstring."""
    tp = TopicPartition(p.topic, p.partition)
    isolation = (
        IsolationLevel.READ_COMMITTED if p.read_committed else IsolationLevel.READ_UNCOMMITTED
    )
    source = p.source.open()
    fetch = _fetch_of(source)
    rows = _Coalescer()
    try:
        offset = p.start
        while offset < p.end:
            try:
                fetched = fetch(tp, offset, p.fetch_bytes, isolation)
            except (OffsetOutOfRangeError, FileNotFoundError):
                # the source is a snapshot (with the planned offsets): look again at what the
                # log holds now
                source.close()
                source = p.source.unplanned.open()
                fetch = _fetch_of(source)
                fetched = _refetch(source, p, tp, offset, isolation)
                if fetched is None:
                    break
                offset = fetched.fetch_offset
            decoded = decode(
                fetched.records,
                topic=p.topic,
                partition=p.partition,
                start_offset=offset,
                end_offset=p.end,
                include_headers=p.include_headers,
                source=f"{p.source.location} ({tp}, fetch at offset {offset})",
                aborted_transactions=fetched.aborted_transactions,
            )
            ahead = getattr(source, "prefetch", None)
            if ahead is not None and offset < decoded.next_offset < min(
                p.end, fetched.bound(isolation)
            ):
                ahead(tp, decoded.next_offset, p.fetch_bytes, isolation)
            for batch in decoded.batches:
                if batch.num_rows:
                    yield from rows.add(batch)
            if decoded.next_offset > offset:
                offset = decoded.next_offset
                continue
            if fetched.records:
                raise KafkaSourceError(
                    f"{tp}: a fetch at offset {offset} of {p.source.location} returned "
                    f"{len(fetched.records)} bytes without one complete batch"
                )
            # nothing at all from offset up to the bound: a gap (compaction) to the bound
            bound = fetched.bound(isolation)
            _check_nothing_left(source, p, tp, offset, bound)
            if bound < p.end:
                name = "last stable offset" if p.read_committed else "high watermark"
                _lost_after(p, tp, max(offset, bound), bound, name)
            break
        yield from rows.flush()
    finally:
        source.close()


def _check_nothing_left(
    source: FetchSource, p: KafkaInputPartition, tp: TopicPartition, offset: int, bound: int
) -> None:
    """A :class:`KafkaSourceError` when a fetch at ``offset`` found no batch though the source
    measures batches between ``offset`` and the range's end (or ``bound``, below it): a source
    that skipped data would otherwise end the read early, silently (module docstring)."""
    stop = min(bound, p.end)
    if offset >= stop:
        return
    cut = source.byte_cut(tp, offset, stop, 0, min_one_batch=True)
    if cut is not None and cut.size > 0:
        name = "last stable offset" if p.read_committed else "high watermark"
        raise KafkaSourceError(
            f"{tp}: a fetch at offset {offset} of {p.source.location} returned no batch below "
            f"the {name} {bound}, though the log holds {cut.size} bytes of batches from "
            f"offset {offset} up to {cut.offset}: the source skipped them (the read of "
            f"[{p.start}, {p.end}) would end short)"
        )


def _fetch_of(source: FetchSource) -> Callable[..., FetchedPartition]:
    """The source's fetch without a copy where it has one (a log dir's ``fetch_in_place``:
    each fetch here is decoded before the next is asked for, which is its condition)."""
    return getattr(source, "fetch_in_place", source.fetch)


def _refetch(
    source: FetchSource,
    p: KafkaInputPartition,
    tp: TopicPartition,
    offset: int,
    isolation: IsolationLevel,
) -> FetchedPartition | None:
    """The fetch at ``offset`` again, on a newly opened source, after data loss is dealt with:
    from the log start offset when ``offset`` is below it, ``None`` (the read ends) when it is
    past the latest offset."""
    log_start = source.list_offset(tp, EARLIEST_TIMESTAMP, isolation)
    assert log_start is not None
    if offset < log_start:
        offset = _lost_before(p, tp, offset, log_start)
    else:
        latest = source.list_offset(tp, LATEST_TIMESTAMP, IsolationLevel.READ_UNCOMMITTED)
        assert latest is not None
        if offset > latest:
            _lost_after(p, tp, offset, latest, "high watermark")
            return None
    return source.fetch(tp, offset, p.fetch_bytes, isolation)


class _Coalescer:
    """Joins small decoded batches into record batches of up to ``COALESCE_ROWS`` rows or
    ``COALESCE_BYTES`` bytes: Spark's cost per Arrow batch is high enough that batches of a few
    thousand rows (small fetches, small records) would halve the read rate."""

    __slots__ = ("_pending", "_rows", "_bytes")

    def __init__(self) -> None:
        self._pending: list[pa.RecordBatch] = []
        self._rows = self._bytes = 0

    def add(self, batch: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
        if self._pending and (
            self._rows + batch.num_rows > COALESCE_ROWS
            or self._bytes + batch.nbytes > COALESCE_BYTES
        ):
            yield from self.flush()
        self._pending.append(batch)
        self._rows += batch.num_rows
        self._bytes += batch.nbytes

    def flush(self) -> Iterator[pa.RecordBatch]:
        if self._pending:
            pending, self._pending = self._pending, []
            self._rows = self._bytes = 0
            yield pending[0] if len(pending) == 1 else pa.concat_batches(pending)


def _lost_before(p: KafkaInputPartition, tp: TopicPartition, offset: int, log_start: int) -> int:
    what = (
        f"{tp}: offsets [{offset}, {log_start}) of the planned range [{p.start}, {p.end}) were "
        f"deleted before they were read (the log start offset is now {log_start})"
    )
    if p.fail_on_data_loss:
        raise DataLossError(f"{what}. {DATA_LOSS_HINT}")
    log.warning("%s; failOnDataLoss=false: reading on from offset %d", what, log_start)
    return log_start


def _lost_after(p: KafkaInputPartition, tp: TopicPartition, offset: int, bound: int, name: str):
    what = (
        f"{tp}: offsets [{offset}, {p.end}) of the planned range [{p.start}, {p.end}) are no "
        f"longer available (the {name} is now {bound})"
    )
    if p.fail_on_data_loss:
        raise DataLossError(f"{what}. {DATA_LOSS_HINT}")
    log.warning("%s; failOnDataLoss=false: the read of this range ends at offset %d", what, offset)
