"""SegmentWriter: Kafka's roll rules, index files, reopening, recovery, append validation."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_embedded.errors import (
    CorruptRecordError,
    InconsistentTopicIdError,
    InvalidOffsetError,
    TornTailError,
)
from broker_embedded.record.records import iter_batches
from broker_embedded.storage.active_segment import INDEX_WRITE_ENTRIES
from broker_embedded.storage.log_config import LogConfig
from broker_embedded.storage.log_segment import LogSegment, TimestampAndOffset
from broker_embedded.storage.offset_index import OffsetIndex
from broker_embedded.storage.partition_reader import PartitionReader
from broker_embedded.storage.segment_indexer import SegmentIndexer
from broker_embedded.storage.segment_writer import SegmentWriter
from broker_embedded.storage.time_index import TimeIndex, TimestampOffset
from broker_embedded.storage.topic_partition import TopicPartition

from .conftest import KAFKA_37, copy_tree, make_batch, random_batches, reference_records

TP = TopicPartition("orders", 3)
SMALL = LogConfig().with_overrides({"segment.bytes": 64 * 1024})


def segment_files(directory: Path, suffix: str) -> list[Path]:
    return sorted(directory.glob(f"{'[0-9]' * 20}{suffix}"))


def assert_closed_segments_are_kafka_exact(directory: Path, interval: int = 4096) -> None:
    """Every segment's index files hold exactly the entries a rebuild of its .log gives."""
    for log in segment_files(directory, ".log"):
        batches = list(iter_batches(log.read_bytes(), str(log), tail="error"))
        oi, ti = SegmentIndexer.rebuild(batches, int(log.stem), index_interval_bytes=interval)
        assert log.with_suffix(".index").read_bytes() == oi.to_bytes(), log.name
        assert log.with_suffix(".timeindex").read_bytes() == ti.to_bytes(), log.name
        assert log.with_suffix(".index").stat().st_size == 8 * len(oi)
        assert log.with_suffix(".timeindex").stat().st_size == 12 * len(ti)


@pytest.fixture(scope="module")
def rolled(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[bytes]]:
    """400 batches through a 64 KiB segment.bytes writer, closed and reopened halfway."""
    log_dir = tmp_path_factory.mktemp("rolled")
    batches = random_batches(11, 400)
    with SegmentWriter(log_dir, TP, SMALL) as w:
        for b in batches[:200]:
            w.append(b)
    with SegmentWriter(log_dir, TP, SMALL) as w:
        for b in batches[200:]:
            w.append(b)
    return log_dir / TP.dir_name, batches


def test_rolls_by_segment_bytes_exactly_as_kafka(rolled: tuple[Path, list[bytes]]) -> None:
    directory, batches = rolled
    logs = segment_files(directory, ".log")
    assert len(logs) > 20
    sizes = {b[:8]: len(b) for b in batches}  # batch base offset bytes -> size
    for log, nxt in zip(logs, logs[1:], strict=False):
        size = log.stat().st_size
        first = nxt.read_bytes()[:8]
        assert size <= 64 * 1024
        assert size > 64 * 1024 - sizes[first]  # the next batch did not fit: roll
        assert int(nxt.stem) == int.from_bytes(first, "big")  # based at the incoming offset
    assert b"".join(p.read_bytes() for p in logs) == b"".join(batches)


def test_index_files_equal_a_rebuild_and_are_trimmed(rolled: tuple[Path, list[bytes]]) -> None:
    # One 64 KiB segment may span the reopen; a reopen restarts the byte counter, so only
    # segments created after it are compared with a plain rebuild.
    directory, _ = rolled
    logs = segment_files(directory, ".log")
    for log in logs:
        seg = LogSegment(log)
        assert seg.index_status == "loaded"
        assert seg.verify() > 0
        seg.close()
    reopen_base = max(int(p.stem) for p in logs if int(p.stem) <= _offset_of_batch(rolled, 200))
    tmp = directory.parent / "only-after-reopen"
    tmp.mkdir()
    for log in logs:
        if int(log.stem) > reopen_base:
            for suffix in (".log", ".index", ".timeindex"):
                (tmp / (log.stem + suffix)).write_bytes(log.with_suffix(suffix).read_bytes())
    assert len(segment_files(tmp, ".log")) > 5
    assert_closed_segments_are_kafka_exact(tmp)


def _offset_of_batch(rolled: tuple[Path, list[bytes]], i: int) -> int:
    return int.from_bytes(rolled[1][i][:8], "big")


@pytest.fixture(scope="module")
def rolled_records(rolled: tuple[Path, list[bytes]]) -> list:
    return reference_records(b"".join(rolled[1]))


@settings(max_examples=120, deadline=None)
@given(data=st.data())
def test_lookups_across_segments_equal_a_scan(
    rolled: tuple[Path, list[bytes]], rolled_records: list, data
) -> None:
    directory, records = rolled[0], rolled_records
    offsets = [r[0] for r in records]
    stamps = [r[1] for r in records]
    with PartitionReader(directory) as reader:
        assert (reader.log_start_offset, reader.log_end_offset) == (0, offsets[-1] + 1)
        offset = data.draw(st.integers(0, offsets[-1] + 1))
        got = reader.read(offset, data.draw(st.integers(0, 100_000)))
        holding = [r for r in records if r[0] >= offset]
        if holding:
            first = next(iter_batches(got.records, tail="stop"), None) if len(got.records) else None
            assert got.size_in_bytes > 0 and first is not None
            assert first.base_offset <= holding[0][0] <= first.last_offset
        else:
            assert got.size_in_bytes == 0
        anywhere = st.integers(min(stamps) - 5, max(stamps) + 5)
        target = data.draw(st.one_of(st.sampled_from(stamps), anywhere))
        hits = [r for r in records if r[1] >= target]
        expected = TimestampAndOffset(hits[0][1], hits[0][0], 0) if hits else None
        assert reader.find_offset_by_timestamp(target) == expected


def test_reopen_continues_the_last_segment(tmp_path: Path) -> None:
    batches = random_batches(3, 30)
    with SegmentWriter(tmp_path, TP) as w:
        for b in batches[:10]:
            w.append(b)
        end = w.log_end_offset
    with SegmentWriter(tmp_path, TP) as w:
        assert w.log_end_offset == end
        assert w.active_segment.index_status == "reopened, indexes loaded"
        with pytest.raises(InvalidOffsetError, match="below the log end offset"):
            w.append(batches[9])
        for b in batches[10:]:
            info = w.append(b)
        assert info is not None and info.segment_base_offset == 0 and not info.rolled
    directory = tmp_path / TP.dir_name
    assert (directory / "00000000000000000000.log").read_bytes() == b"".join(batches)
    with LogSegment(directory / "00000000000000000000.log") as seg:
        assert seg.verify() == 30


def test_roll_by_offset_overflow(tmp_path: Path) -> None:
    with SegmentWriter(tmp_path, TP) as w:
        w.append(make_batch(0, [(1, b"a", b"1")]))
        info = w.append(make_batch(1 << 31, [(2, b"b", b"2")]))
        assert info is not None and info.rolled and info.segment_base_offset == 1 << 31
        info = w.append(make_batch((1 << 31) + (1 << 31) - 1, [(3, b"c", b"3")]))
        assert info is not None and not info.rolled
        assert w.segment_base_offsets == [0, 1 << 31]


def test_empty_active_segment_is_replaced_not_rolled(tmp_path: Path) -> None:
    with SegmentWriter(tmp_path, TP) as w:
        info = w.append(make_batch(5 << 31, [(1, b"a", b"1")]))
        assert info is not None and info.segment_base_offset == 5 << 31
        assert w.segment_base_offsets == [5 << 31]
    names = sorted(p.name for p in (tmp_path / TP.dir_name).iterdir())
    assert names == [f"{5 << 31:020d}{s}" for s in (".index", ".log", ".timeindex")]


def test_roll_by_time(tmp_path: Path) -> None:
    config = LogConfig().with_overrides({"segment.ms": 1000})
    with SegmentWriter(tmp_path, TP, config) as w:
        w.append(make_batch(0, [(10_000, None, b"a")]))
        assert not w.append(make_batch(1, [(11_000, None, b"b")])).rolled  # waited 1000, not more
        assert w.append(make_batch(2, [(11_001, None, b"c")])).rolled
        assert not w.append(make_batch(3, [(5, None, b"d")])).rolled  # old timestamps don't roll
    compacted = config.with_overrides({"cleanup.policy": "compact", "max.compaction.lag.ms": 10})
    (tmp_path / "c").mkdir()
    with SegmentWriter(tmp_path / "c", TP, compacted) as w:
        w.append(make_batch(0, [(10_000, b"k", b"a")]))
        assert w.append(make_batch(1, [(10_011, b"k", b"b")])).rolled


def test_roll_without_timestamps_uses_the_clock(tmp_path: Path) -> None:
    now = [1_000_000]
    config = LogConfig().with_overrides({"segment.ms": 100})
    with SegmentWriter(tmp_path, TP, config, clock_ms=lambda: now[0]) as w:
        w.append(make_batch(0, [(-1, None, b"a")]))
        now[0] += 100
        assert not w.append(make_batch(1, [(-1, None, b"b")])).rolled
        now[0] += 1
        assert w.append(make_batch(2, [(-1, None, b"c")])).rolled


def test_roll_when_an_index_is_full(tmp_path: Path) -> None:
    config = LogConfig().with_overrides({"segment.index.bytes": 24, "index.interval.bytes": 0})
    with SegmentWriter(tmp_path, TP, config) as w:
        rolled_at = [
            i for i in range(12) if w.append(make_batch(i, [(100 + i, None, b"x")])).rolled
        ]
    # 3 offset / 2 time entries fit, the first batch of a segment is never indexed: the time
    # index fills first; the close entry repeats the last timestamp, so nothing is added
    assert rolled_at == [3, 6, 9]
    directory = tmp_path / TP.dir_name
    for log in segment_files(directory, ".log"):
        assert TimeIndex.load(log.with_suffix(".timeindex"), int(log.stem)).entries == 2
    assert_closed_segments_are_kafka_exact(directory, interval=0)


def test_final_time_index_entry_on_close_and_roll(tmp_path: Path) -> None:
    with SegmentWriter(tmp_path, TP) as w:
        w.append(make_batch(0, [(50, None, b"a"), (70, None, b"b")]))
        w.append(make_batch(2, [(60, None, b"c")]))
        w.roll()
        w.append(make_batch(3, [(40, None, b"d")]))
    d = tmp_path / TP.dir_name
    assert TimeIndex.load(d / f"{0:020d}.timeindex", 0).last_entry == TimestampOffset(70, 1)
    assert TimeIndex.load(d / f"{3:020d}.timeindex", 3).last_entry == TimestampOffset(40, 3)
    assert (d / f"{0:020d}.index").read_bytes() == b""


def test_leader_offset_of_max_timestamp_is_stored(tmp_path: Path) -> None:
    with SegmentWriter(tmp_path, TP) as w:
        w.append(
            make_batch(0, [(90, None, b"a"), (50, None, b"b"), (90, None, b"c")]),
            offset_of_max_timestamp=0,
        )
        with pytest.raises(InvalidOffsetError, match="outside .3, 3."):
            w.append(make_batch(3, [(1, None, b"a")]), offset_of_max_timestamp=7)
    d = tmp_path / TP.dir_name
    assert TimeIndex.load(d / f"{0:020d}.timeindex", 0).last_entry == TimestampOffset(90, 0)
    with LogSegment(d / f"{0:020d}.log") as seg:
        seg.verify()
        assert seg.find_offset_by_timestamp(60) == TimestampAndOffset(90, 0, 0)


@pytest.mark.parametrize(
    ("records", "error", "message"),
    [
        (make_batch(0, [(1, None, b"a")])[:-1], TornTailError, "torn tail"),
        (
            make_batch(0, [(1, None, b"a")]) + make_batch(0, [(1, None, b"b")]),
            InvalidOffsetError,
            "starts at offset 0, not above the previous batch's last offset 0",
        ),
        (b"\x00" * 12, CorruptRecordError, "too few for an entry header"),
    ],
)
def test_bad_appends_are_rejected(
    tmp_path: Path, records: bytes, error: type, message: str
) -> None:
    with SegmentWriter(tmp_path, TP) as w:
        with pytest.raises(error, match=message) as e:
            w.append(records)
        assert "orders-3" in str(e.value)
        assert w.log_end_offset == 0
    assert (tmp_path / TP.dir_name / f"{0:020d}.log").read_bytes() == b""


def test_bad_crc_is_rejected(tmp_path: Path) -> None:
    batch = bytearray(make_batch(0, [(1, b"k", b"value")]))
    batch[-1] ^= 1
    with SegmentWriter(tmp_path, TP) as w:
        with pytest.raises(CorruptRecordError, match="CRC mismatch"):
            w.append(bytes(batch))
        assert w.append(b"") is None


def test_partition_metadata(tmp_path: Path) -> None:
    tid = uuid.UUID("cdc06720-0ec2-465d-bdc1-7ba1fe09cba1")
    with SegmentWriter(tmp_path, TP, topic_id=tid):
        pass
    path = tmp_path / TP.dir_name / "partition.metadata"
    assert path.read_bytes() == b"version: 0\ntopic_id: zcBnIA7CRl29wXuh_gnLoQ"
    with SegmentWriter(tmp_path, TP, topic_id=tid):
        pass
    with pytest.raises(InconsistentTopicIdError, match="zcBnIA7CRl29wXuh_gnLoQ"):
        SegmentWriter(tmp_path, TP, topic_id=uuid.UUID(int=7))


def test_recover_truncates_a_torn_tail_and_rebuilds_indexes(tmp_path: Path) -> None:
    batches = random_batches(5, 40, gaps=False)
    with SegmentWriter(tmp_path, TP) as w:
        for b in batches[:30]:
            w.append(b)
    log = tmp_path / TP.dir_name / f"{0:020d}.log"
    good = log.read_bytes()
    with open(log, "ab") as f:
        f.write(batches[30][:100])  # a crash in the middle of a write
    (log.with_suffix(".index")).write_bytes(b"\x00" * 5)
    with SegmentWriter(tmp_path, TP) as w:  # a partial batch at the end forces recovery
        assert w.active_segment.index_status == "recovered, 100 bytes truncated"
        assert log.read_bytes() == good
        for b in batches[30:]:
            w.append(b)
    with LogSegment(log) as seg:
        assert seg.index_status == "loaded" and seg.verify() == 40


def test_recover_stops_at_a_corrupt_batch(tmp_path: Path) -> None:
    batches = random_batches(6, 20, gaps=False)
    with SegmentWriter(tmp_path, TP) as w:
        for b in batches:
            w.append(b)
    log = tmp_path / TP.dir_name / f"{0:020d}.log"
    data = bytearray(log.read_bytes())
    cut = sum(len(b) for b in batches[:15])
    data[cut + 80] ^= 0xFF
    log.write_bytes(bytes(data))
    with SegmentWriter(tmp_path, TP, recover=True) as w:
        assert w.active_segment.index_status == f"recovered, {len(data) - cut} bytes truncated"
        assert w.log_end_offset == int.from_bytes(batches[15][:8], "big")
    assert_closed_segments_are_kafka_exact(tmp_path / TP.dir_name)


def test_appending_to_a_kafka_partition(tmp_path: Path) -> None:
    log_dir = copy_tree(KAFKA_37, tmp_path / "k")
    tp = TopicPartition("__consumer_offsets", 6)
    index = log_dir / tp.dir_name / f"{0:020d}.index"
    with open(index, "ab") as f:
        f.truncate(10 * 1024 * 1024)  # as a running broker leaves it: preallocated
    with SegmentWriter(
        log_dir, tp, topic_id=uuid.UUID("8129dfa4-46ed-41f4-83a7-1336961127f4")
    ) as w:
        assert w.log_end_offset == 13
        assert w.active_segment.index_status == "reopened, indexes loaded"
        assert index.stat().st_size == 16  # trimmed before appending
        for i in range(3):
            w.append(make_batch(13 + i, [(1769793578176 + i, b"k", b"v" * 3000)]))
    with LogSegment(log_dir / tp.dir_name / f"{0:020d}.log") as seg:
        assert (seg.next_offset, seg.verify()) == (16, 16)
        assert len(seg.offset_index) == 3
        assert seg.time_index.last_entry == TimestampOffset(1769793578178, 15)


def test_appends_are_visible_to_readers_before_flush(tmp_path: Path) -> None:
    with SegmentWriter(tmp_path, TP) as w:
        w.append(make_batch(0, [(1, b"k", b"v")]))
        with PartitionReader(tmp_path / TP.dir_name) as r:
            assert r.log_end_offset == 1
            assert r.read(0, 1000).size_in_bytes == len(make_batch(0, [(1, b"k", b"v")]))


def test_index_entries_reach_their_files_before_flush(tmp_path: Path) -> None:
    """A reader in another process loads the active segment's indexes from disk, so entries
    must not wait for a flush (else every read scans the .log from its start): they are written
    in groups of INDEX_WRITE_ENTRIES, so the files hold a prefix at most that many short."""
    with SegmentWriter(tmp_path, TP) as w:
        active = w.active_segment
        oi, ti = active.offset_index, active.time_index
        index_path, time_path = active.paths()[1:]
        n = 0
        while len(oi) < INDEX_WRITE_ENTRIES + 3:  # an entry every 4096+ bytes of 1078-byte batches
            w.append(make_batch(n, [(1000 + n, b"k", b"v" * 1000)]))
            n += 1
        assert len(ti) == len(oi) == INDEX_WRITE_ENTRIES + 3
        on_disk = INDEX_WRITE_ENTRIES
        assert index_path.read_bytes() == oi.to_bytes()[: on_disk * OffsetIndex.ENTRY_SIZE]
        assert time_path.read_bytes() == ti.to_bytes()[: on_disk * TimeIndex.ENTRY_SIZE]
        with LogSegment(active.paths()[0]) as seg:  # the prefix on disk gives the same answers
            assert seg.index_status == "loaded"
            assert seg.offset_index.offsets().tolist() == oi.offsets().tolist()[:on_disk]
            assert seg.next_offset == n
            for offset in (0, n // 2, n - 1):
                assert seg.translate_offset(offset) == active.translate_offset(offset)
        w.flush()
        assert index_path.read_bytes() == oi.to_bytes()
        assert time_path.read_bytes() == ti.to_bytes()


def test_reads_of_new_appends_slice_one_mapping_of_the_active_segment(tmp_path: Path) -> None:
    """A read after each append (a follower or a consumer at the end of the log) slices the
    mapping reserved past the file's end instead of mapping the file again; the bytes read are
    the ones appended, and a segment that outgrows the reservation is mapped again, larger."""
    config = LogConfig(segment_bytes=1 << 30)
    with SegmentWriter(tmp_path, TP, config=config) as w:
        active = w.active_segment
        sent, mappings = [], set()
        for i in range(200):
            batch = make_batch(i, [(1000 + i, b"k", bytes([i]) * 300)])
            w.append(batch)
            sent.append(batch)
            got = active.read(i, 1 << 20)
            assert bytes(got.records) == batch
            mappings.add(id(active._append.mapped))
        assert len(mappings) == 1  # 200 reads of new appends, one mapping
        assert bytes(active.read(0, 1 << 20).records) == b"".join(sent)
        first = active._append.mapped
        assert len(first) == len(sent[0]) + (8 << 20)  # 8 MiB past the end at the first read
        big = make_batch(200, [(2000, b"k", b"x" * (9 << 20))])  # past the reservation
        w.append(big)
        assert bytes(active.read(200, 10 << 20).records) == big
        assert active._append.mapped is not first and len(active._append.mapped) >= 18 << 20
