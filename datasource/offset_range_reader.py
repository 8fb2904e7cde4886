"""Executor side: read one planned offset range of one partition as Arrow record batches.

:func:`read_offset_range` opens the partition read-only (``LogDir(...).open_partition``: the
broker's published high watermark and log start offset, no lock) and fetches ``[start, end)`` the
way a Kafka consumer does: each fetch asks for at most ``fetch_bytes`` from the current offset
and gets whole batches (at least one, KIP-74; a partial last batch is dropped) below the high
watermark (``PartitionReader.read``, what ``fetch`` does for read_uncommitted, without the last
stable offset it would compute) or, under read_committed, below the last stable offset with the
aborted transactions overlapping the read (``PartitionReader.fetch``). The columnar decoder turns
the complete batches into rows of ``[current, end)`` (no rows for control batches, nor for
aborted transactions under read_committed), and the next fetch starts at the offset after the
last complete batch, as the batches say. Small decoded batches are joined into record batches of
up to ``COALESCE_ROWS`` rows or ``COALESCE_BYTES`` bytes before they are yielded (Spark pays per
batch). Memory stays bounded by one fetch, its decoded rows and that buffer, whatever the
partition's size.

Offsets are not contiguous: compaction, transaction markers and aborted records leave gaps, and
a gap is never an error. A fetch that finds no batch at all means that nothing is left between
the current offset and the bound: the read ends. Data loss (the records are gone) is told apart
by the partition's offsets, re-read from a fresh view of the log dir when a fetch fails:

- the current offset is below the log start offset (retention or DeleteRecords ran after
  planning): with ``fail_on_data_loss`` a :class:`DataLossError` naming the partition and both
  offsets, else a logged warning and the read goes on from the log start offset;
- the planned end is past the bound, or the current offset past the log end (the high watermark
  moved back, a truncation): a :class:`DataLossError`, else a warning and the read ends there.

A fetch returning bytes without one complete batch is an error (the view is inconsistent), so
the loop always advances. The generator holds the partition's open segments until it is
exhausted or closed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pyarrow as pa

from broker_embedded.errors import OffsetOutOfRangeError
from broker_embedded.record.columnar_decoder import decode
from broker_embedded.storage.fetch_data_info import FetchIsolation
from broker_embedded.storage.log_dir import LogDir
from broker_embedded.storage.partition_reader import PartitionReader
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
    reader = _open(p, tp)
    rows = _Coalescer()
    try:
        offset = p.start
        while offset < p.end:
            try:
                fetched = _fetch(reader, offset, p)
            except (OffsetOutOfRangeError, FileNotFoundError):
                # the view is a snapshot: look again at what the log holds now
                reader.close()
                reader = _open(p, tp)
                if offset < reader.log_start_offset:
                    offset = _lost_before(p, tp, offset, reader.log_start_offset)
                    continue
                if offset > reader.log_end_offset:
                    _lost_after(p, tp, offset, reader.log_end_offset, "log end offset")
                    break
                fetched = _fetch(reader, offset, p)
            records, aborted, bound = fetched
            decoded = decode(
                records,
                topic=p.topic,
                partition=p.partition,
                start_offset=offset,
                end_offset=p.end,
                include_headers=p.include_headers,
                source=f"{reader.directory} (fetch at offset {offset})",
                aborted_transactions=aborted,
            )
            for batch in decoded.batches:
                if batch.num_rows:
                    yield from rows.add(batch)
            if decoded.next_offset > offset:
                offset = decoded.next_offset
                continue
            if records:
                raise KafkaSourceError(
                    f"{tp}: a fetch at offset {offset} of {reader.directory} returned "
                    f"{len(records)} bytes without one complete batch"
                )
            # nothing at all from offset up to the bound: a gap (compaction) to the bound
            if bound < p.end:
                name = "last stable offset" if p.read_committed else "high watermark"
                _lost_after(p, tp, max(offset, bound), bound, name)
            break
        yield from rows.flush()
    finally:
        reader.close()


def _fetch(
    reader: PartitionReader, offset: int, p: KafkaInputPartition
) -> tuple[bytes, list[tuple[int, int]] | None, int]:
    """One fetch: the records (a copy), the aborted transactions as the decoder takes them
    (read_committed only) and the bound of the read (last stable offset or high watermark).
    read_uncommitted uses ``PartitionReader.read`` bounded by the high watermark, which is what
    ``fetch`` does for it, without computing the last stable offset it does not need."""
    if p.read_committed:
        info = reader.fetch(offset, p.fetch_bytes, FetchIsolation.TXN_COMMITTED)
        aborted = [(a.producer_id, a.first_offset) for a in info.aborted_transactions or ()]
        return info.records, aborted, info.last_stable_offset
    found = reader.read(offset, p.fetch_bytes)
    return bytes(found.records), None, reader.high_watermark


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


def _open(p: KafkaInputPartition, tp: TopicPartition) -> PartitionReader:
    return LogDir(p.log_dir).open_partition(tp)


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
