"""The one header walk (``entry_scan.walk_entries``) as each of its callers uses it, on random
and damaged runs of batches: ``records.iter_batches`` (the batch views, whose fields
``RecordBatch`` reads again with ``struct``), the columnar decoder's scan, ``scan_window`` (the
partition view and the cleaner), ``seek_entry`` (the segment reads) and ``log_validator.scan``
(appends) give the same verdict (the same entries, or an error at the same position naming the
same base offset) and the same header fields. Damage: a truncated run, a bad magic, a bad, a
negative or an oversized length, a negative record count or last offset delta, random header
bytes, random buffers; and a bad CRC where the caller checks it (the decoder, the cleaner's
window check, ``RecordBatch.ensure_valid``). A ``RecordBatch`` view made alone refuses a header
the walk refuses."""

from __future__ import annotations

import struct

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from broker_embedded.errors import CorruptRecordError, TornTailError
from broker_embedded.record import columnar_decoder, crc_check, decode_plan, log_validator
from broker_embedded.record import entry_scan as es
from broker_embedded.record.batch_layout import (
    BATCH_LENGTH_OFFSET,
    CRC_OFFSET,
    LAST_OFFSET_DELTA_OFFSET,
    MAGIC_OFFSET,
    RECORDS_COUNT_OFFSET,
)
from broker_embedded.record.kernel_primitives import readonly_bytes
from broker_embedded.record.memory_records_builder import MemoryRecordsBuilder
from broker_embedded.record.record_batch import RecordBatch
from broker_embedded.record.records import iter_batches

SOURCE = "walk.log"
BASE = 1_000  # the file position of the buffer's first byte, in messages

# fields a RecordBatch view reads with struct, against the walk's columns
V2_FIELDS = {
    es.S_OFFSET: "base_offset",
    es.S_EPOCH: "partition_leader_epoch",
    es.S_CRC: "crc",
    es.S_ATTR: "attributes",
    es.S_LAST_DELTA: "last_offset_delta",
    es.S_BASE_TS: "base_timestamp",
    es.S_MAX_TS: "max_timestamp_raw",
    es.S_PRODUCER_ID: "producer_id",
    es.S_PRODUCER_EPOCH: "producer_epoch",
    es.S_BASE_SEQUENCE: "base_sequence",
    es.S_COUNT: "records_count",
}

_batch = st.fixed_dictionaries(
    {
        "records": st.integers(1, 4),
        "gap": st.integers(0, 3),
        "epoch": st.integers(-1, 2**31 - 1),
        "pid": st.sampled_from([-1, 0, 7, 2**40]),
        "codec": st.sampled_from([0, 1]),
        "transactional": st.booleans(),
    }
)


def _v2(offset: int, spec: dict) -> bytes:
    transactional = spec["transactional"] and spec["pid"] >= 0
    builder = MemoryRecordsBuilder(
        offset,
        spec["codec"],
        producer_id=spec["pid"],
        producer_epoch=0 if spec["pid"] >= 0 else -1,
        base_sequence=0 if spec["pid"] >= 0 else -1,
        is_transactional=transactional,
        partition_leader_epoch=spec["epoch"],
    )
    for i in range(spec["records"]):
        builder.append(offset + i, 1_700_000_000_000 + i, b"k%d" % i, b"v" * i)
    return builder.build()


def _legacy(offset: int) -> bytes:
    builder = LegacyRecordBatchBuilder(1, 0, 1 << 20)
    builder.append(offset, 1_700_000_000_000, b"k", b"v")
    return bytes(builder.build())


@st.composite
def runs(draw: st.DrawFn) -> tuple[bytes, list[int]]:
    """Batches back to back (a legacy entry among them, sometimes), and where each starts."""
    specs = draw(st.lists(_batch, min_size=1, max_size=5))
    legacy_at = draw(st.one_of(st.none(), st.integers(0, len(specs))))
    out, starts, offset = bytearray(), [], draw(st.integers(0, 2**40))
    for i, spec in enumerate(specs):
        if i == legacy_at:
            starts.append(len(out))
            out += _legacy(offset)
            offset += 1
        starts.append(len(out))
        out += _v2(offset, spec)
        offset += spec["records"] + spec["gap"]
    return bytes(out), starts


def _put(buf: bytearray, at: int, fmt: str, value: int) -> None:
    if at + struct.calcsize(fmt) <= len(buf):
        struct.pack_into(fmt, buf, at, value)


@st.composite
def damaged(draw: st.DrawFn) -> bytes:
    """A run with one kind of damage at one entry (or none), or random bytes."""
    if draw(st.integers(0, 9)) == 0:
        return draw(st.binary(max_size=200))
    data, starts = draw(runs())
    buf = bytearray(data)
    at = draw(st.sampled_from(starts))
    kind = draw(
        st.sampled_from(
            ["none", "truncate", "magic", "length", "count", "delta", "header byte", "crc"]
        )
    )
    if kind == "truncate":
        del buf[draw(st.integers(0, len(buf))) :]
    elif kind == "magic":
        buf[at + MAGIC_OFFSET] = draw(st.integers(0, 255))
    elif kind == "length":
        length = draw(
            st.one_of(
                st.integers(-(2**31), 2**31 - 1),
                st.integers(-2, 60),
                st.just(len(buf) - at - 12 + 1),  # one byte past the buffer
            )
        )
        _put(buf, at + BATCH_LENGTH_OFFSET, ">i", length)
    elif kind == "count":
        _put(buf, at + RECORDS_COUNT_OFFSET, ">i", draw(st.integers(-(2**31), 3)))
    elif kind == "delta":
        _put(buf, at + LAST_OFFSET_DELTA_OFFSET, ">i", draw(st.integers(-(2**31), 3)))
    elif kind == "header byte":
        byte = at + draw(st.integers(0, 60))
        if byte < len(buf):
            buf[byte] = draw(st.integers(0, 255))
    elif kind == "crc":
        buf[at + CRC_OFFSET] ^= 0x01
    return bytes(buf)


# -- each caller's verdict: (entries as (position, size, magic), error) --------------------------


def _error(e: CorruptRecordError) -> tuple:
    return (isinstance(e, TornTailError), e.position, e.base_offset)


def _python_walk(data: bytes, tail: str) -> tuple[list, tuple | None, list]:
    """iter_batches: the entries, the error, and the views."""
    views: list = []
    try:
        for b in iter_batches(data, SOURCE, base_position=BASE, tail=tail):  # type: ignore[arg-type]
            views.append(b)
    except CorruptRecordError as e:
        return _entries_of(views), _error(e), views
    return _entries_of(views), None, views


def _entries_of(views: list) -> list:
    return [(b.position - BASE, b.size_in_bytes, b.magic) for b in views]


def _rows(table: np.ndarray) -> list:
    return [tuple(r) for r in table[:, [es.S_POS, es.S_SIZE, es.S_MAGIC]].tolist()]


def _decoder_walk(data: bytes, tail: str) -> tuple[list, tuple | None, np.ndarray]:
    where = decode_plan.Where(SOURCE, BASE)
    try:
        table, _ = columnar_decoder._scan(readonly_bytes(data), where, tail)  # type: ignore[arg-type]
    except CorruptRecordError as e:
        return [], _error(e), np.empty((0, es.SCAN_FIELDS), np.int64)
    return _rows(table), None, table


def _window_walk(data: bytes) -> tuple[list, tuple | None, np.ndarray]:
    """scan_window over the whole buffer, resumed after each table, as the partition view and
    the cleaner call it."""
    arr = readonly_bytes(data)
    tables, pos = [], 0
    try:
        while pos < len(arr):
            scanned = es.scan_window(arr, pos, len(arr), SOURCE, BASE)
            if not len(scanned.table):
                break
            tables.append(scanned.table)
            pos = scanned.end
    except CorruptRecordError as e:
        table = np.concatenate([np.empty((0, es.SCAN_FIELDS), np.int64), *tables])
        return _rows(table), _error(e), table
    table = np.concatenate([np.empty((0, es.SCAN_FIELDS), np.int64), *tables])
    return _rows(table), None, table


def _fields(views: list, table: np.ndarray) -> None:
    """The walk's row of each entry holds what its view read."""
    assert len(views) == len(table)
    for i, (b, row) in enumerate(zip(views, table.tolist(), strict=True)):
        assert (row[es.S_POS] + BASE, row[es.S_SIZE], row[es.S_MAGIC]) == (
            b.position,
            b.size_in_bytes,
            b.magic,
        )
        if b.magic == 2:
            assert {c: row[c] for c in V2_FIELDS} == {
                c: getattr(b, a) for c, a in V2_FIELDS.items()
            }
        else:
            assert (row[es.S_OFFSET], row[es.S_CRC], row[es.S_LAST_DELTA]) == (
                b.last_offset,
                b.crc,
                0,
            )
        assert es.last_offset(table, i) == _int64(b.last_offset)


def _int64(n: int) -> int:
    return (n + 2**63) % 2**64 - 2**63


def _legacy_failed(data: bytes, error: tuple | None) -> bool:
    """Whether an error of the Python walk came from a legacy entry's own checks (its key and
    value lengths: ``LegacyRecordBatch``), past the header walk, which passed that entry."""
    if error is None or error[0]:
        return False
    arr = readonly_bytes(data)
    walked = es.walk_entries(arr, error[1] - BASE, len(arr), False, 1, False, 0, es.NO_ROWS)
    return walked[1] in (es.SCAN_OK, es.SCAN_FULL)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(damaged())
def test_every_caller_sees_the_same_entries_and_the_same_error(data: bytes) -> None:
    for tail in ("stop", "error"):
        entries, error, views = _python_walk(data, tail)
        decoded, decoder_error, table = _decoder_walk(data, tail)
        if not _legacy_failed(data, error):  # the decoder checks legacy records later
            assert decoder_error == error
            if error is None:
                assert decoded == entries
                _fields(views, table)
            else:
                _a_view_refuses_it(data, error)
    entries, error, views = _python_walk(data, "stop")
    walked, window_error, table = _window_walk(data)
    assert walked[: len(entries)] == entries
    _fields(views, table[: len(views)])
    if not _legacy_failed(data, error):
        assert (walked, window_error) == (entries, error)


def _a_view_refuses_it(data: bytes, error: tuple) -> None:
    """A ``RecordBatch`` view (its own header checks, for a batch handed over alone) over the
    bytes from where the walk failed refuses them too, naming the same base offset."""
    pos = error[1] - BASE
    try:
        RecordBatch(data[pos:], SOURCE, error[1])
    except CorruptRecordError as e:
        assert e.position == error[1]
        assert e.base_offset in (error[2], None if len(data) - pos < 61 else error[2])
    else:
        raise AssertionError(f"a RecordBatch view accepts the header the walk refused at {pos}")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(damaged(), st.integers(0, 8))
def test_the_seek_answers_as_the_python_walk(data: bytes, pick: int) -> None:
    """``seek_entry`` from byte 0 to a target: the entry the Python walk finds, or the place
    where it ends (``SEEK_END``), meets a partial entry (``SEEK_PARTIAL``) or something the seek
    leaves to it, a legacy entry or an error (``SEEK_ODD``)."""
    entries, error, views = _python_walk(data, "error")
    lasts = [_int64(b.last_offset) for b in views]
    targets = sorted({0, *lasts, *(_int64(x + 1) for x in lasts), es.NO_TARGET})
    target = targets[pick % len(targets)]
    expected: tuple | None = None
    for b in views:
        if b.magic != 2:
            expected = (es.SEEK_ODD, b.position - BASE, 0, -1)
            break
        if _int64(b.last_offset) >= target:
            expected = (es.SEEK_FOUND, b.position - BASE, b.size_in_bytes, _int64(b.last_offset))
            break
    if expected is None:
        pos = entries[-1][0] + entries[-1][1] if entries else 0
        if error is None:
            expected = (es.SEEK_END, len(data), 0, -1)
        elif len(data) - pos > MAGIC_OFFSET and data[pos + MAGIC_OFFSET] in (0, 1):
            expected = (es.SEEK_ODD, pos, 0, -1)  # a legacy entry, whole or not
        else:
            assert error[1] == BASE + pos
            expected = (es.SEEK_PARTIAL if error[0] else es.SEEK_ODD, pos, 0, -1)
    got = es.seek_entry(readonly_bytes(data), 0, len(data), target)
    assert tuple(int(x) for x in got) == expected


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(damaged())
def test_the_append_validator_accepts_only_what_the_python_walk_accepts(data: bytes) -> None:
    """A follower's append: its walk is whole only when the Python walk yields v2 batches only
    (a partial last one dropped; a legacy one, whole or partial, is the slow path's), and then
    has the same rows with the same fields."""
    arr = readonly_bytes(data)
    no_rows = np.empty((0, log_validator.COLUMNS), np.int64)
    n, stop, ok = log_validator._walk(arr, len(data), log_validator.FOLLOWER, no_rows)
    table, summary = log_validator.scan(arr, len(data), log_validator.FOLLOWER, 0, 0, False)
    entries, error, views = _python_walk(data, "stop")
    end = entries[-1][0] + entries[-1][1] if entries else 0
    legacy_tail = len(data) - end > MAGIC_OFFSET and data[end + MAGIC_OFFSET] in (0, 1)
    assert ok == (error is None and all(b.magic == 2 for b in views) and not legacy_tail)
    assert (int(summary[log_validator.S_ROWS]), int(summary[log_validator.S_END])) == (n, stop)
    if summary[log_validator.S_OK]:
        assert ok
    if ok:
        assert (n, stop) == (len(views), end)
        _fields(views, table)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs(), st.data())
def test_a_bad_crc_is_named_alike_by_every_caller_that_checks_it(
    run: tuple, data: st.DataObject
) -> None:
    raw, starts = run
    buf = bytearray(raw)
    at = data.draw(st.sampled_from(starts))
    if buf[at + MAGIC_OFFSET] != 2:
        return  # a legacy entry's CRC is its own (CRC-32 of the message)
    buf[at + CRC_OFFSET] ^= 0x80
    views = list(iter_batches(bytes(buf), SOURCE, base_position=BASE))
    bad = next(b for b in views if b.magic == 2 and not b.is_valid())
    assert bad.position == BASE + at
    expected = (bad.position, bad.base_offset)
    try:
        bad.ensure_valid()
    except CorruptRecordError as e:
        assert (e.position, e.base_offset) == expected
    try:
        columnar_decoder.decode_records(
            bytes(buf), topic="t", partition=0, source=SOURCE, base_position=BASE
        )
    except CorruptRecordError as e:
        assert (e.position, e.base_offset) == expected
        assert "CRC" in str(e)
    else:
        raise AssertionError("the decoder read a batch whose CRC does not match")
    table = es.scan_window(readonly_bytes(bytes(buf)), 0, len(buf), SOURCE, BASE).table
    v2 = table[table[:, es.S_MAGIC] == 2]
    row, stored, _ = crc_check.crc_mismatch(memoryview(bytes(buf)), v2)
    assert (BASE + int(v2[row, es.S_POS]), int(v2[row, es.S_OFFSET]), stored) == (
        *expected,
        bad.crc,
    )
