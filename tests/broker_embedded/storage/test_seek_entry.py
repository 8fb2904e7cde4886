"""The segment reads' compiled walk (``entry_scan.seek_entry``) against the Python walk it
shortcuts: ``LogSegment.translate_offset`` and ``local_log.whole_batches`` answer the same, and
fail with the same error, with the fast path on and off, on a clean segment and on one whose
every header byte (five ways, the length field also with extreme values) was damaged in turn,
and on a segment ending in a torn batch. A legacy (magic 1) entry takes the Python walk."""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from broker_embedded.record import entry_scan
from broker_embedded.record.kernel_primitives import readonly_bytes
from broker_embedded.record.memory_records_builder import build_record_batch
from broker_embedded.record.record_batch import Record
from broker_embedded.storage import local_log, log_segment
from broker_embedded.storage.log_config import LogConfig
from broker_embedded.storage.log_segment import LogSegment
from broker_embedded.storage.segment_writer import SegmentWriter
from broker_embedded.storage.topic_partition import TopicPartition

TP = TopicPartition("seek", 0)
TS = 1_700_000_000_000
SIZES = (1, 3, 2, 40, 1, 5)  # records per batch: batches of different sizes
HEADER = 61


def _batches() -> list[bytes]:
    out, offset = [], 0
    for n in SIZES:
        records = [
            Record(o, TS + o, b"k%d" % o, b"v%d" % o * (o % 7 + 1))
            for o in range(offset, offset + n)
        ]
        out.append(build_record_batch(records))
        offset += n
    return out


def _write(root: Path, batches: list[bytes]) -> Path:
    root.mkdir()
    # an index entry after every 100 bytes: lookups start at different batches
    config = LogConfig(index_interval_bytes=100)
    with SegmentWriter(root, TP, config, clock_ms=lambda: TS) as writer:
        for b in batches:
            writer.append(b)
    return root / TP.dir_name / f"{0:020d}.log"


def _outcome(call):  # type: ignore[no-untyped-def]
    try:
        return ("ok", call())
    except Exception as e:  # the error and its message are part of the answer
        return (type(e).__name__, str(e))


def _answers(path: Path, last: int) -> list:
    opened = _outcome(lambda: LogSegment.open(path.parent, 0, index_interval_bytes=100))
    if opened[0] != "ok":
        return [opened]
    seg = opened[1]
    try:
        got = [_outcome(lambda o=o: seg.translate_offset(o)) for o in range(last + 3)]
        for o in range(0, last + 1, 4):
            for limit in (0, 1, 60, 61, 100, 500, 10_000):
                got.append(_outcome(lambda o=o, m=limit: _read(seg, o, m)))
        return got
    finally:
        seg.close()


def _read(seg: LogSegment, offset: int, max_bytes: int):  # type: ignore[no-untyped-def]
    found = seg.read(offset, max_bytes, min_one_message=max_bytes == 0)
    if found is None:
        return None
    whole = local_log.whole_batches(seg, found)
    return (found.position, len(found.records), bytes(whole.records))


def _both(path: Path, last: int, monkeypatch: pytest.MonkeyPatch) -> tuple[list, list]:
    fast = _answers(path, last)
    odd = lambda buf, start, stop, target: (entry_scan.SEEK_ODD, start, 0, -1)  # noqa: E731
    with monkeypatch.context() as m:
        m.setattr(log_segment, "seek_entry", odd)
        m.setattr(local_log, "seek_entry", odd)
        slow = _answers(path, last)
    return fast, slow


def test_a_clean_segment_answers_as_the_python_walk(tmp_path, monkeypatch) -> None:
    path = _write(tmp_path / "d", _batches())
    seg = LogSegment.open(path.parent, 0, index_interval_bytes=100)
    assert len(seg.offset_index) >= 3  # the walks start at several batches, not all at byte 0
    seg.close()
    fast, slow = _both(path, sum(SIZES) - 1, monkeypatch)
    assert fast == slow
    assert fast[0] == ("ok", log_segment.LogOffsetPosition(0, 0, len(_batches()[0])))
    assert fast[sum(SIZES)] == ("ok", None)


def test_every_damaged_header_byte_answers_as_the_python_walk(tmp_path, monkeypatch) -> None:
    batches = _batches()
    clean = _write(tmp_path / "clean", batches)
    starts = np.cumsum([0, *map(len, batches)])[:-1].tolist()
    data = clean.read_bytes()
    cases = 0
    for start in starts:
        for at in range(start, start + HEADER):
            for value in (data[at] ^ 0xFF, data[at] ^ 0x01, 0x00, 0x7F, 0x80):
                if value == data[at]:
                    continue
                shutil.rmtree(tmp_path / "bad", ignore_errors=True)
                shutil.copytree(clean.parent, tmp_path / "bad")
                path = tmp_path / "bad" / clean.name
                damaged = bytearray(data)
                damaged[at] = value
                path.write_bytes(bytes(damaged))
                fast, slow = _both(path, sum(SIZES) - 1, monkeypatch)
                assert fast == slow, f"byte {at} set to {value:#x}"
                cases += 1
    assert cases >= 3 * len(starts) * HEADER  # at least three values differ from each byte


@pytest.mark.parametrize("length", [0, 48, 49, 0x7FFFFFFF, -1, -0x80000000])
def test_extreme_lengths_answer_as_the_python_walk(tmp_path, monkeypatch, length) -> None:
    batches = _batches()
    path = _write(tmp_path / "d", batches)
    data = bytearray(path.read_bytes())
    struct.pack_into(">i", data, len(batches[0]) + len(batches[1]) + 8, length)
    path.write_bytes(bytes(data))
    fast, slow = _both(path, sum(SIZES) - 1, monkeypatch)
    assert fast == slow


def test_a_torn_last_batch_and_a_legacy_entry_answer_as_the_python_walk(
    tmp_path, monkeypatch
) -> None:
    batches = _batches()
    path = _write(tmp_path / "d", batches)
    for cut in (1, 12, 17, 30, len(batches[-1]) - 1):
        torn = tmp_path / f"torn{cut}"
        shutil.copytree(path.parent, torn)
        (torn / path.name).write_bytes(path.read_bytes()[:-cut])
        fast, slow = _both(torn / path.name, sum(SIZES) - 1, monkeypatch)
        assert fast == slow, f"cut {cut}"
    builder = LegacyRecordBatchBuilder(1, 0, 1 << 20)  # kafka-python's magic 1 writer
    builder.append(sum(SIZES), TS, b"k", b"v")
    legacy = bytes(builder.build())
    mixed = tmp_path / "mixed"
    shutil.copytree(path.parent, mixed)
    (mixed / path.name).write_bytes(path.read_bytes() + legacy)
    fast, slow = _both(mixed / path.name, sum(SIZES), monkeypatch)
    assert fast == slow
    assert fast[sum(SIZES)][0] == "ok" and fast[sum(SIZES)][1].position == len(path.read_bytes())


def test_seek_entry_walks_to_the_target_and_stops_at_stop() -> None:
    data = b"".join(_batches())
    arr = readonly_bytes(data)
    size0 = len(_batches()[0])
    assert entry_scan.seek_entry(arr, 0, len(data), 0) == (entry_scan.SEEK_FOUND, 0, size0, 0)
    assert entry_scan.seek_entry(arr, 0, len(data), 1)[:2] == (entry_scan.SEEK_FOUND, size0)
    assert entry_scan.seek_entry(arr, 0, len(data), 10**9) == (
        entry_scan.SEEK_END,
        len(data),
        0,
        -1,
    )
    assert entry_scan.seek_entry(arr, 0, size0 + 16, 10**9) == (
        entry_scan.SEEK_PARTIAL,
        size0,
        0,
        -1,
    )
    assert entry_scan.seek_entry(arr, 0, len(data) - 1, entry_scan.NO_TARGET)[0] == (
        entry_scan.SEEK_PARTIAL
    )
