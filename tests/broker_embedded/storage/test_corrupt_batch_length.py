"""An impossible batch length (0x7fffffff) anywhere but the torn tail of the last segment above
the recovery point fails every read that reaches it (issue 11, defect 1: it used to be taken for
a torn tail, and the rest of its segment was skipped silently).

The log: three segments of five batches of two records each (offsets 0-9, 10-19, 20-29), written
with the real segment writer; one batch's length field is overwritten in place.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from broker_embedded.errors import CorruptRecordError
from broker_embedded.record.memory_records_builder import build_record_batch
from broker_embedded.record.record_batch import Record
from broker_embedded.record.records import iter_batches
from broker_embedded.storage.fetch_data_info import FetchIsolation
from broker_embedded.storage.log_config import LogConfig
from broker_embedded.storage.log_dir import LogDir
from broker_embedded.storage.offset_checkpoint import (
    RECOVERY_POINT_OFFSET_CHECKPOINT,
    OffsetCheckpointFile,
)
from broker_embedded.storage.segment_writer import SegmentWriter
from broker_embedded.storage.topic_partition import TopicPartition
from broker_embedded.storage.unified_log import UnifiedLog

TP = TopicPartition("orders", 0)
TS = 1_700_000_000_000
BATCHES_PER_SEGMENT, RECORDS_PER_BATCH, SEGMENTS = 5, 2, 3
PER_SEGMENT = BATCHES_PER_SEGMENT * RECORDS_PER_BATCH
LOG_END = SEGMENTS * PER_SEGMENT
IMPOSSIBLE = 0x7FFFFFFF


def batch(offset: int) -> bytes:
    records = [
        Record(o, TS + o, b"k%d" % o, b"v%d" % o) for o in range(offset, offset + RECORDS_PER_BATCH)
    ]
    return build_record_batch(records)


def write_log(log_dir: Path) -> Path:
    log_dir.mkdir()
    with SegmentWriter(log_dir, TP, clock_ms=lambda: TS) as writer:
        for offset in range(0, LOG_END, RECORDS_PER_BATCH):
            if offset and offset % PER_SEGMENT == 0:
                writer.roll()
            writer.append(batch(offset))
    return log_dir / TP.dir_name


def corrupt(partition_dir: Path, segment: int, index: int) -> tuple[Path, int, int]:
    """Overwrite the length of batch ``index`` of segment ``segment``; return the ``.log``, the
    batch's position and its base offset."""
    base = segment * PER_SEGMENT
    path = partition_dir / f"{base:020d}.log"
    position = [b.position for b in iter_batches(path.read_bytes())][index]
    with open(path, "r+b") as f:
        f.seek(position + 8)
        f.write(struct.pack(">i", IMPOSSIBLE))
    return path, position, base + index * RECORDS_PER_BATCH


def consume(reader, isolation: FetchIsolation) -> list[int]:
    """Offsets a consumer sees fetching from the start, one whole fetch at a time."""
    seen: list[int] = []
    offset = reader.log_start_offset
    while offset < reader.high_watermark:
        info = reader.fetch(offset, 1 << 20, isolation)
        batches = list(iter_batches(info.records))
        if not batches:
            break
        for b in batches:
            seen += [r.offset for r in b.records()]
        offset = batches[-1].next_offset
    return seen


def set_recovery_point(log_dir: Path, offset: int) -> None:
    OffsetCheckpointFile(log_dir / RECOVERY_POINT_OFFSET_CHECKPOINT).write({TP: offset})


# (segment, batch index): first batch, middle, last batch of a non-last segment; the first and a
# middle batch of the last segment (failing only below the recovery point)
NOT_LAST = [(0, 0), (0, 2), (0, 4), (1, 0), (1, 2), (1, 4)]


def expected_message(path: Path, position: int, offset: int) -> str:
    return f"corrupt record data in {path} at byte {position} (batch base offset {offset})"


@pytest.mark.parametrize("isolation", list(FetchIsolation))
@pytest.mark.parametrize(("segment", "index"), NOT_LAST)
def test_read_only_view_fails_at_a_corrupt_length_in_a_segment_that_is_not_the_last(
    tmp_path: Path, segment: int, index: int, isolation: FetchIsolation
) -> None:
    path, position, offset = corrupt(write_log(tmp_path / "d"), segment, index)
    with LogDir(tmp_path / "d").open_partition(TP) as reader:
        with pytest.raises(CorruptRecordError) as e:
            consume(reader, isolation)
        assert str(e.value).startswith(expected_message(path, position, offset))
        assert (e.value.source, e.value.position, e.value.base_offset) == (
            str(path),
            position,
            offset,
        )
        assert f"length {IMPOSSIBLE}" in str(e.value)
        with pytest.raises(CorruptRecordError):
            list(reader.batches())
        with pytest.raises(CorruptRecordError):
            reader.find_offset_by_timestamp(TS + LOG_END - 1)  # in the last segment


@pytest.mark.parametrize("index", [0, 2, 4])
def test_last_segment_tail_below_the_recovery_point_is_corruption(
    tmp_path: Path, index: int
) -> None:
    path, position, offset = corrupt(write_log(tmp_path / "d"), SEGMENTS - 1, index)
    set_recovery_point(tmp_path / "d", LOG_END)
    with pytest.raises(CorruptRecordError) as e:  # its log end offset is unknown
        LogDir(tmp_path / "d").open_partition(TP)
    assert str(e.value).startswith(expected_message(path, position, offset))
    assert f"below its recovery point {LOG_END}" in str(e.value)


@pytest.mark.parametrize("index", [0, 2, 4])
def test_last_segment_tail_above_the_recovery_point_is_a_torn_write(
    tmp_path: Path, index: int
) -> None:
    corrupt(write_log(tmp_path / "d"), SEGMENTS - 1, index)
    torn_at = (SEGMENTS - 1) * PER_SEGMENT + index * RECORDS_PER_BATCH
    set_recovery_point(tmp_path / "d", torn_at)
    with LogDir(tmp_path / "d").open_partition(TP) as reader:
        assert reader.log_end_offset == torn_at
        assert consume(reader, FetchIsolation.LOG_END) == list(range(torn_at))


@pytest.mark.parametrize(("segment", "index"), NOT_LAST)
def test_broker_open_after_clean_shutdown_fails_at_a_corrupt_length_and_truncates_nothing(
    tmp_path: Path, segment: int, index: int
) -> None:
    """Kafka scans nothing below the recovery point after a clean shutdown: nothing is truncated.
    Without a producer snapshot the open replays the whole log, which reaches the batch."""
    partition_dir = write_log(tmp_path / "d")
    path, position, offset = corrupt(partition_dir, segment, index)
    size = path.stat().st_size
    with pytest.raises(CorruptRecordError) as e:
        UnifiedLog(tmp_path / "d", TP, LogConfig(), recovery_point=LOG_END, clock_ms=lambda: TS)
    assert (e.value.source, e.value.position, e.value.base_offset) == (str(path), position, offset)
    assert path.stat().st_size == size


@pytest.mark.parametrize("index", [0, 2, 4])
def test_broker_open_after_clean_shutdown_refuses_a_last_segment_corrupt_below_the_recovery_point(
    tmp_path: Path, index: int
) -> None:
    partition_dir = write_log(tmp_path / "d")
    path, position, offset = corrupt(partition_dir, SEGMENTS - 1, index)
    size = path.stat().st_size
    with pytest.raises(CorruptRecordError) as e:
        UnifiedLog(tmp_path / "d", TP, LogConfig(), recovery_point=LOG_END, clock_ms=lambda: TS)
    assert (e.value.source, e.value.position, e.value.base_offset) == (str(path), position, offset)
    assert path.stat().st_size == size  # not truncated


def test_broker_recovery_above_the_recovery_point_truncates_as_kafka_does(tmp_path: Path) -> None:
    """After an unclean shutdown, segments from the recovery point on are scanned: a corrupt
    batch there ends the log (Kafka's recovery), later segments go."""
    partition_dir = write_log(tmp_path / "d")
    path, position, offset = corrupt(partition_dir, 1, 2)
    lg = UnifiedLog(
        tmp_path / "d",
        TP,
        LogConfig(),
        recovery_point=PER_SEGMENT,
        had_clean_shutdown=False,
        clock_ms=lambda: TS,
    )
    try:
        assert lg.log_end_offset == offset
        assert lg.segment_base_offsets == [0, PER_SEGMENT]
    finally:
        lg.close()
    assert path.stat().st_size == position
