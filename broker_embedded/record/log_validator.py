"""One pass over the batches of an append (the header part of Kafka's ``LogValidator``
and ``analyzeAndValidateRecords``): the broker's fast path for a produce request on the leader
and a fetch response on a follower.

:func:`scan` walks ``buf[0:end]`` (a uint8 array: a follower's fetched bytes read-only,
``header_reads.readonly_bytes``, a leader's copy of a request writable, for
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

Plain Python over the one header walk (``entry_scan.walk``: as written in a server that has not
loaded the compiled kernels, compiled in one that has; the same function), then the per-batch
checks over the table's rows as Python ints: no numba on ``kafkalog serve``'s produce path. One
walk into a table of ``end // 61`` rows (every v2 batch has a 61-byte header, so the walk never
wraps it), not a counting walk first.

Limits: at most ``end // 61`` rows, so the table is bounded by the input. Thread safety: pure
functions of their arguments.
"""

from __future__ import annotations

import struct

import numpy as np

from broker_embedded.record import entry_scan as es
from broker_embedded.record.batch_layout import (
    BASE_OFFSET_OFFSET,
    CONTROL_MASK,
    PARTITION_LEADER_EPOCH_OFFSET,
    RECORD_BATCH_OVERHEAD,
    TRANSACTIONAL_MASK,
)

LEADER = 0
FOLLOWER = 1

# table columns: the header walk's (entry_scan.S_*); S_OFFSET is replaced on the leader by the
# base offset assigned
COLUMNS = es.SCAN_FIELDS
# summary entries
S_OK, S_ROWS, S_FIRST_ROW, S_END, S_FIRST_OFFSET, S_LAST_OFFSET = 0, 1, 2, 3, 4, 5
S_RECORDS, S_MAX_TS, S_OFFSET_OF_MAX_TS, S_PRODUCERS = 6, 7, 8, 9
SUMMARY = 10

_POS, _SIZE, _OFFSET, _ATTR, _DELTA = es.S_POS, es.S_SIZE, es.S_OFFSET, es.S_ATTR, es.S_LAST_DELTA
_MAX_TS, _PID, _COUNT, _SEQ = es.S_MAX_TS, es.S_PRODUCER_ID, es.S_COUNT, es.S_BASE_SEQUENCE
_put_offset = struct.Struct(">q").pack_into  # baseOffset int64
_put_epoch = struct.Struct(">i").pack_into  # partitionLeaderEpoch int32


def _walk(buf: np.ndarray, end: int, mode: int, table: np.ndarray) -> tuple[int, int, bool]:
    """(v2 batches walked into ``table``, where they end, structure ok) of ``buf[:end]``: the
    header walk over v2 entries only; a partial last batch is ok on a follower only."""
    n, status, stop, _, _ = es.walk(buf, 0, end, True, es.NO_LIMIT, False, 0, table)
    partial = status == es.SCAN_TAIL_SHORT or status == es.SCAN_TAIL_TRUNCATED
    return int(n), int(stop), status == es.SCAN_OK or (mode == FOLLOWER and partial)


def _leader_row_ok(row: list[int], max_message_bytes: int, from_client: bool) -> bool:
    """The log's per-batch header checks of a leader append (log_appender._validate_batch)."""
    attributes = row[_ATTR]
    control = (attributes & CONTROL_MASK) != 0
    pid = row[_PID]
    count = row[_COUNT]
    return not (
        row[_SIZE] > max_message_bytes
        or count <= 0
        or count != row[_DELTA] + 1
        or (control and from_client)
        or (pid >= 0 and row[_SEQ] < 0 and not control)
        or ((attributes & TRANSACTIONAL_MASK) != 0 and pid < 0)
    )


def scan(
    buf: np.ndarray,
    end: int,
    mode: int,
    next_offset: int,
    max_message_bytes: int,
    from_client: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """The batch table and summary of ``buf[:end]`` (module docstring)."""
    summary = [0] * SUMMARY
    table = np.empty((end // RECORD_BATCH_OVERHEAD, COLUMNS), np.int64)
    n, stop, ok = _walk(buf, end, mode, table)
    table = table[:n]
    summary[S_ROWS] = n
    summary[S_END] = stop
    if not ok or (n == 0 and mode == LEADER):
        return table, np.array(summary, np.int64)
    rows = table.tolist()
    if mode == LEADER:
        done = _check_leader(rows, next_offset, max_message_bytes, from_client, summary)
        if done:
            table[:, _OFFSET] = [row[_OFFSET] for row in rows]
    else:
        done = _check_follower(rows, next_offset, summary)
    summary[S_OK] = int(done)
    return table, np.array(summary, np.int64)


def _check_leader(
    rows: list[list[int]],
    next_offset: int,
    max_message_bytes: int,
    from_client: bool,
    summary: list[int],
) -> bool:
    """The leader's per-batch checks, its offsets assigned (into ``rows``), and the summary."""
    offset = next_offset
    for row in rows:
        if not _leader_row_ok(row, max_message_bytes, from_client):
            return False
        row[_OFFSET] = offset
        offset += row[_DELTA] + 1
    _summarize(rows, 0, summary)
    return True


def _check_follower(rows: list[list[int]], next_offset: int, summary: list[int]) -> bool:
    """A follower's rows: those below ``next_offset`` skipped (only before the kept ones), the
    kept ones' offsets increasing from at least ``next_offset``; then the summary."""
    first = -1
    previous_last = -1
    for i, row in enumerate(rows):
        last = row[_OFFSET] + row[_DELTA]
        if last < next_offset:
            if first >= 0:
                return False  # a batch below the log end after a kept one
            continue
        if first < 0:
            first = i
            if row[_OFFSET] < next_offset:
                return False
        elif row[_OFFSET] <= previous_last:
            return False  # offsets must increase
        previous_last = last
    _summarize(rows, len(rows) if first < 0 else first, summary)
    return True


def _summarize(rows: list[list[int]], first: int, summary: list[int]) -> None:
    """The summary of the kept ``rows[first:]`` (module docstring)."""
    kept = rows[first:]
    max_ts = of_max = last = -1
    records = producers = 0
    for row in kept:
        last = row[_OFFSET] + row[_DELTA]
        records += row[_COUNT]
        producers += row[_PID] >= 0
        if row[_MAX_TS] > max_ts:
            max_ts, of_max = row[_MAX_TS], last
    summary[S_FIRST_ROW] = first
    summary[S_FIRST_OFFSET] = kept[0][_OFFSET] if kept else 0
    summary[S_LAST_OFFSET] = last
    summary[S_RECORDS] = records
    summary[S_PRODUCERS] = producers
    summary[S_MAX_TS] = max_ts
    summary[S_OFFSET_OF_MAX_TS] = last if of_max < 0 else of_max


def assign(buf: np.ndarray, table: np.ndarray, leader_epoch: int) -> None:
    """Write each row's ``es.S_OFFSET`` and ``leader_epoch`` into its batch header in ``buf``."""
    epoch = int(leader_epoch)
    for row in table.tolist():
        pos = row[_POS]
        _put_offset(buf, pos + BASE_OFFSET_OFFSET, row[_OFFSET])
        _put_epoch(buf, pos + PARTITION_LEADER_EPOCH_OFFSET, epoch)
