"""The fast open of a read-only view (a planner opens thousands) against the full one.

Fast: a partition directory whose entries fit one ``getdents64`` call listed once, and a last
segment's short tail (after its offset index's last entry) read with one ``pread``. Full: the
paths these replace, which every open took before (two equal listings; the tail walked in the
segment's mapping), chosen by setting ``partition_reader._ONE_READ_BYTES`` to 0 and
``log_segment._PREAD_TAIL_BYTES`` to -1. On every damaged log dir below, both give the same
offsets, the same segments (ends, largest timestamps, index status) and the same errors, and
the batch planner the same tasks or the same error; a few cases also check the values
themselves.

The log: one partition of three segments of five batches of two records each (offsets 0-9,
10-19, 20-29; ``index.interval.bytes`` 1, so every batch but a segment's first has an offset
index entry), written with the real segment writer, then damaged in place, read with a recovery
point of 0 (a partial batch at the end is a torn write) or 30 (it is corruption).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from pathlib import Path

import pytest

from broker_embedded.record.memory_records_builder import build_record_batch
from broker_embedded.record.record_batch import Record
from broker_embedded.record.records import iter_batches
from broker_embedded.storage import log_segment, partition_reader
from broker_embedded.storage.log_config import LogConfig
from broker_embedded.storage.log_dir import LogDir, PartitionCheckpoints, open_partition_with
from broker_embedded.storage.offset_checkpoint import (
    RECOVERY_POINT_OFFSET_CHECKPOINT,
    OffsetCheckpointFile,
)
from broker_embedded.storage.segment_writer import SegmentWriter
from broker_embedded.storage.topic_partition import TopicPartition
from datasource.kafka_batch_reader import KafkaBatchReader
from datasource.kafka_input_partition import ranges_of
from datasource.kafka_source_options import KafkaSourceOptions

TP = TopicPartition("orders", 0)
TS = 1_700_000_000_000
PER_BATCH, PER_SEGMENT, LOG_END = 2, 10, 30
LAST = f"{20:020d}"  # the last segment's file stem
IMPOSSIBLE = 0x7FFFFFFF


def write_log(log_dir: Path, value_bytes: int = 4) -> Path:
    log_dir.mkdir(parents=True)
    config = LogConfig(index_interval_bytes=1)
    with SegmentWriter(log_dir, TP, config, clock_ms=lambda: TS) as writer:
        for offset in range(0, LOG_END, PER_BATCH):
            if offset and offset % PER_SEGMENT == 0:
                writer.roll()
            records = [
                Record(o, TS + o, b"k%d" % o, b"v" * value_bytes)
                for o in range(offset, offset + PER_BATCH)
            ]
            writer.append(build_record_batch(records))
    return log_dir / TP.dir_name


def _positions(path: Path) -> list[int]:
    return [b.position for b in iter_batches(path.read_bytes())]


def _overwrite(path: Path, position: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        f.write(data)


def _length(stem: str, batch: int) -> Callable[[Path], None]:
    def damage(d: Path) -> None:
        log = d / f"{stem}.log"
        _overwrite(log, _positions(log)[batch] + 8, struct.pack(">i", IMPOSSIBLE))

    return damage


def _truncate(d: Path) -> None:
    log = d / f"{LAST}.log"
    os.truncate(log, log.stat().st_size - 7)


def _bad_magic(d: Path) -> None:
    log = d / f"{LAST}.log"
    _overwrite(log, _positions(log)[-1] + 16, b"\x09")


def _remove(suffix: str) -> Callable[[Path], None]:
    return lambda d: (d / f"{LAST}{suffix}").unlink()


def _append(suffix: str, data: bytes) -> Callable[[Path], None]:
    def damage(d: Path) -> None:
        with open(d / f"{LAST}{suffix}", "ab") as f:
            f.write(data)

    return damage


def _preallocated(d: Path) -> None:
    _append(".index", bytes(800))(d)
    _append(".timeindex", bytes(1200))(d)


def _empty_last(d: Path) -> None:
    for suffix in (".log", ".index", ".timeindex"):
        (d / f"{LOG_END:020d}{suffix}").write_bytes(b"")


DAMAGES: dict[str, Callable[[Path], None]] = {
    "intact": lambda d: None,
    "torn tail": _truncate,
    "impossible length, last batch": _length(LAST, -1),
    "impossible length, middle of last segment": _length(LAST, 1),
    "impossible length, middle segment": _length(f"{10:020d}", 2),
    "bad magic, last batch": _bad_magic,
    "offset index missing": _remove(".index"),
    "time index missing": _remove(".timeindex"),
    "offset index out of order": _append(".index", struct.pack(">ii", 1, 1)),
    "offset index past the end": _append(".index", struct.pack(">ii", 9, 1 << 20)),
    "time index past the offsets": _append(".timeindex", struct.pack(">qi", TS + 99, 50)),
    "index file of half an entry": _append(".index", b"\x00\x00\x00\x07"),
    "preallocated indexes": _preallocated,
    "empty last segment": _empty_last,
}


def _segment_facts(seg: log_segment.LogSegment) -> tuple:
    return (
        seg.base_offset,
        seg.next_offset,
        seg.end_of_batches,
        seg.size_in_bytes,
        seg.largest_timestamp,
        seg.index_status,
        seg.offset_index.to_bytes(),
        seg.time_index.to_bytes(),
    )


def _open_facts(log_dir: Path) -> tuple:
    """The view's offsets and every segment's facts, or the error opening it."""
    try:
        with LogDir(log_dir).open_partition(TP) as view:
            segments = [_segment_facts(s) for s in view.segments()]
            return view.log_start_offset, view.high_watermark, view.log_end_offset, segments
    except Exception as e:  # noqa: BLE001 (the error is what is compared)
        return type(e).__name__, str(e)


def _plan(log_dir: Path) -> object:
    """The batch planner's tasks (their ranges and descriptors), or its error."""
    reader = KafkaBatchReader(
        KafkaSourceOptions.parse({"path": str(log_dir), "subscribe": "orders"})
    )
    try:
        return [(ranges_of(t), t) for t in reader.partitions()]
    except Exception as e:  # noqa: BLE001
        return type(e).__name__, str(e)


def _full_open(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(partition_reader, "_ONE_READ_BYTES", 0)
    monkeypatch.setattr(log_segment, "_PREAD_TAIL_BYTES", -1)


@pytest.fixture(autouse=True)
def _no_settling(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(partition_reader, "_SETTLE_DELAYS", ())  # a partial batch stays


def _damaged(tmp_path: Path, damage: str, recovery_point: int, value_bytes: int = 4) -> Path:
    log_dir = tmp_path / "logdir"
    DAMAGES[damage](write_log(log_dir, value_bytes))
    OffsetCheckpointFile(log_dir / RECOVERY_POINT_OFFSET_CHECKPOINT).write({TP: recovery_point})
    return log_dir


@pytest.mark.parametrize("recovery_point", [0, LOG_END])
@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_fast_open_equals_the_full_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: str, recovery_point: int
) -> None:
    log_dir = _damaged(tmp_path, damage, recovery_point)
    fast, fast_plan = _open_facts(log_dir), _plan(log_dir)
    with monkeypatch.context() as m:
        _full_open(m)
        assert _open_facts(log_dir) == fast
        assert _plan(log_dir) == fast_plan


def test_a_tail_longer_than_one_read_is_walked_in_the_mapping(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log_dir = _damaged(tmp_path, "torn tail", 0, value_bytes=40_000)  # batches of 80 KB
    fast = _open_facts(log_dir)
    assert fast[2] == LOG_END - PER_BATCH  # the torn batch is not part of the log
    _full_open(monkeypatch)
    assert _open_facts(log_dir) == fast


def test_values_of_the_fast_open(tmp_path: Path) -> None:
    """What the comparison above compares, for some cases: the torn tail is cut above the
    recovery point and an error below it; a corrupt length in the middle of the last segment
    behind a valid offset index leaves the log end where it was (reads reaching it fail)."""
    intact = _open_facts(_damaged(tmp_path / "a", "intact", LOG_END))
    assert intact[:3] == (0, LOG_END, LOG_END)
    assert [s[5] for s in intact[3]] == ["loaded"] * 3
    torn = _open_facts(_damaged(tmp_path / "b", "torn tail", 0))
    assert torn[:3] == (0, LOG_END - PER_BATCH, LOG_END - PER_BATCH)
    below = _open_facts(_damaged(tmp_path / "c", "torn tail", LOG_END))
    assert below[0] == "CorruptRecordError" and f"{LAST}.log" in below[1]
    assert "at offset 28" in below[1] and "not a torn tail" in below[1]
    middle = _open_facts(_damaged(tmp_path / "d", "impossible length, middle of last segment", 0))
    assert middle[:3] == (0, LOG_END, LOG_END)
    missing = _open_facts(_damaged(tmp_path / "e", "offset index missing", LOG_END))
    assert missing[2] == LOG_END
    assert missing[3][-1][5] == f"rebuilt: {LAST}.index is missing"


def test_a_missing_partition_directory_is_named(tmp_path: Path) -> None:
    log_dir = tmp_path / "logdir"
    write_log(log_dir)
    gone = TopicPartition("orders", 1)
    with pytest.raises(FileNotFoundError, match=f"no partition directory {log_dir / 'orders-1'}"):
        open_partition_with(log_dir, gone, PartitionCheckpoints(5, 0, 5))
    (log_dir / "orders-2").write_bytes(b"")  # a file, not a directory
    with pytest.raises(FileNotFoundError, match="no partition directory"):
        open_partition_with(log_dir, TopicPartition("orders", 2), PartitionCheckpoints(5, 0, 5))
