"""One compiled pass over the batches of an append (the header part of Kafka's ``LogValidator``
and ``analyzeAndValidateRecords``): the broker's fast path for a produce request on the leader
and a fetch response on a follower.

:func:`scan` walks ``buf[0:end]`` (a uint8 array: a follower's fetched bytes read-only,
``kernel_primitives.readonly_bytes``, a leader's copy of a request writable, for
:func:`assign`; record batches v2 back to back, layout in batch_layout.py) once and returns a
table of their header fields, one row per batch (the walk's table: its columns are
``entry_scan.S_*``; ``S_CRC`` is the stored CRC-32C as an unsigned value), and a
summary (the ``S_*`` entries). It never raises and never decides an error message: it says
``S_OK`` = 1 only when every check the slow path (``records.iter_batches``, ``RecordBatch``
and the log's per-batch checks) makes on headers passes, and 0 otherwise. Callers then run
the slow path, which raises the exact error Kafka answers (so an error is always reported by
one piece of code). The checks:

- structure, every entry: the one header walk, ``entry_scan.walk_entries``, over v2 entries
  (a legacy entry, an unknown magic, a short, negative-count or negative-delta header, each
  needs the slow path). A partial last entry is an error on the leader; on a follower the
  walk stops before it (``S_END``: where the complete batches end), as a consumer drops it;
- ``mode == LEADER`` (a client's or the coordinator's append): per batch its size at most
  ``max_message_bytes``, ``recordsCount == lastOffsetDelta + 1`` and positive, no control batch
  when ``from_client``, a base sequence for every producer id outside control batches, a
  producer id for every transactional batch; base offsets are then assigned from
  ``next_offset`` (``es.S_OFFSET``, not written to ``buf``: :func:`assign` does that);
- ``mode == FOLLOWER`` (a replicated fetch response): batches whose last offset is below
  ``next_offset`` (the follower's log end offset) are skipped (``S_FIRST_ROW`` is the first
  kept row; a skipped batch after a kept one is an error), the kept ones must have strictly
  increasing offsets, the first at or above ``next_offset``.

The CRCs are left to the caller (the ``crc32c`` package, hardware accelerated, runs several
times faster than a compiled table lookup): the column ``S_CRC`` holds each stored value.

The summary covers the kept rows: first and last offset, record count, max timestamp and the
offset of its first batch reaching it (the last offset of the last batch when no timestamp is
above -1), as ``segment_writer.summarize_records`` computes it, and how many batches carry a
producer id (only those need the producer state's Python checks).

:func:`assign` writes the assigned base offsets and a partition leader epoch into the header of
each row's batch (neither is covered by the CRC). The buffer must be the caller's own.

Limits: at most ``end // 61`` rows (every batch has a 61-byte header), so the table is bounded
by the input. Thread safety: pure functions of their arguments; compiled with ``nogil``.
"""

from __future__ import annotations

import numpy as np

from broker_embedded.record import entry_scan as es
from broker_embedded.record.batch_layout import (
    BASE_OFFSET_OFFSET,
    CONTROL_MASK,
    PARTITION_LEADER_EPOCH_OFFSET,
    TRANSACTIONAL_MASK,
)
from broker_embedded.record.kernel_primitives import jit, put_be, readonly_bytes

LEADER = 0
FOLLOWER = 1

# table columns: the header walk's (entry_scan.S_*); S_OFFSET is replaced on the leader by the
# base offset assigned
COLUMNS = es.SCAN_FIELDS
# summary entries
S_OK, S_ROWS, S_FIRST_ROW, S_END, S_FIRST_OFFSET, S_LAST_OFFSET = 0, 1, 2, 3, 4, 5
S_RECORDS, S_MAX_TS, S_OFFSET_OF_MAX_TS, S_PRODUCERS = 6, 7, 8, 9
SUMMARY = 10


@jit
def _walk(buf, end, mode, table):  # type: ignore[no-untyped-def]
    """(v2 batches walked into ``table``, where they end, structure ok) of ``buf[:end]``: the
    header walk over v2 entries only; a partial last batch is ok on a follower only."""
    n, status, stop, _, _ = es.walk_entries(buf, 0, end, True, es.NO_LIMIT, False, 0, table)
    partial = status == es.SCAN_TAIL_SHORT or status == es.SCAN_TAIL_TRUNCATED
    return n, stop, status == es.SCAN_OK or (mode == FOLLOWER and partial)


@jit
def _leader_row_ok(table, i, max_message_bytes, from_client):  # type: ignore[no-untyped-def]
    """The log's per-batch header checks of a leader append (log_appender._validate_batch)."""
    attributes = table[i, es.S_ATTR]
    control = (attributes & CONTROL_MASK) != 0
    pid = table[i, es.S_PRODUCER_ID]
    count = table[i, es.S_COUNT]
    return not (
        table[i, es.S_SIZE] > max_message_bytes
        or count <= 0
        or count != table[i, es.S_LAST_DELTA] + 1
        or (control and from_client)
        or (pid >= 0 and table[i, es.S_BASE_SEQUENCE] < 0 and not control)
        or ((attributes & TRANSACTIONAL_MASK) != 0 and pid < 0)
    )


@jit
def scan(buf, end, mode, next_offset, max_message_bytes, from_client):  # type: ignore[no-untyped-def]
    """The batch table and summary of ``buf[:end]`` (module docstring)."""
    summary = np.zeros(SUMMARY, np.int64)
    n, stop, ok = _walk(buf, end, mode, np.empty((0, COLUMNS), np.int64))
    table = np.empty((n, COLUMNS), np.int64)
    summary[S_ROWS] = n
    summary[S_END] = stop
    if not ok or (n == 0 and mode == LEADER):
        return table, summary
    _walk(buf, end, mode, table)
    first = -1
    offset = next_offset
    max_ts = np.int64(-1)
    of_max = np.int64(-1)
    records = np.int64(0)
    producers = 0
    previous_last = np.int64(-1)
    for i in range(n):
        last_delta = table[i, es.S_LAST_DELTA]
        if mode == LEADER:
            if not _leader_row_ok(table, i, max_message_bytes, from_client):
                return table, summary
            table[i, es.S_OFFSET] = offset
            offset += last_delta + 1
        elif table[i, es.S_OFFSET] + last_delta < next_offset:
            if first >= 0:
                return table, summary  # a batch below the log end after a kept one
            continue
        elif first >= 0 and table[i, es.S_OFFSET] <= previous_last:
            return table, summary  # offsets must increase
        if first < 0:
            first = i
            summary[S_FIRST_OFFSET] = table[i, es.S_OFFSET]
        previous_last = table[i, es.S_OFFSET] + last_delta
        records += table[i, es.S_COUNT]
        producers += table[i, es.S_PRODUCER_ID] >= 0
        if table[i, es.S_MAX_TS] > max_ts:
            max_ts = table[i, es.S_MAX_TS]
            of_max = previous_last
    if first < 0:
        first = n
    if first < n and summary[S_FIRST_OFFSET] < next_offset:
        return table, summary
    summary[S_FIRST_ROW] = first
    summary[S_LAST_OFFSET] = previous_last
    summary[S_RECORDS] = records
    summary[S_PRODUCERS] = producers
    summary[S_MAX_TS] = max_ts
    summary[S_OFFSET_OF_MAX_TS] = previous_last if of_max < 0 else of_max
    summary[S_OK] = 1
    return table, summary


@jit
def assign(buf, table, leader_epoch):  # type: ignore[no-untyped-def]
    """Write each row's ``es.S_OFFSET`` and ``leader_epoch`` into its batch header in ``buf``."""
    for i in range(table.shape[0]):
        pos = table[i, es.S_POS]
        put_be(buf, pos + BASE_OFFSET_OFFSET, table[i, es.S_OFFSET], 8)
        put_be(buf, pos + PARTITION_LEADER_EPOCH_OFFSET, leader_epoch, 4)


def warm_up() -> None:
    """Compile the signatures the broker uses: :func:`scan` over a read-only array (a
    follower's fetched bytes) and over a writable one (a leader's copy of a request, which
    :func:`assign` then writes)."""
    from broker_embedded.record.memory_records_builder import MemoryRecordsBuilder

    builder = MemoryRecordsBuilder(0, 0)
    builder.append(None, 0, b"k", b"v")
    buf = bytearray(builder.build())
    scan(readonly_bytes(buf), len(buf), FOLLOWER, 0, 0, False)
    arr = np.frombuffer(buf, np.uint8)
    table, _ = scan(arr, len(buf), LEADER, 0, 1 << 20, True)
    assign(arr, table, 0)
