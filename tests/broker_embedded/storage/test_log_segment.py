"""LogSegment: offset and timestamp lookups, fetch reads, index loading, rebuilding, verify."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from broker_embedded.errors import CorruptRecordError
from broker_embedded.record.records import iter_batches
from broker_embedded.storage.log_config import LogConfig
from broker_embedded.storage.log_file_utils import parse_segment_log_name, segment_file_stem
from broker_embedded.storage.log_segment import LogOffsetPosition, LogSegment, TimestampAndOffset
from broker_embedded.storage.offset_index import OffsetIndex
from broker_embedded.storage.partition_reader import PartitionReader
from broker_embedded.storage.segment_indexer import SegmentIndexer
from broker_embedded.storage.segment_writer import SegmentWriter
from broker_embedded.storage.time_index import TimestampOffset
from broker_embedded.storage.topic_partition import TopicPartition

from .conftest import BITNAMI, KAFKA_37, copy_tree, make_batch, random_batches, reference_records

BASE = 5000


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 300-batch segment at base offset 5000 written with its indexes by the SegmentWriter."""
    log_dir = tmp_path_factory.mktemp("segment")
    with SegmentWriter(log_dir, TopicPartition("t", 0), start_offset=BASE) as w:
        for batch in random_batches(7, 300, BASE):
            w.append(batch)
    return log_dir / "t-0" / f"{segment_file_stem(BASE)}.log"


@pytest.fixture(scope="module")
def reference(written: Path) -> list[tuple[int, int, bytes | None, bytes | None]]:
    return reference_records(written.read_bytes())


@pytest.fixture(scope="module")
def batch_table(written: Path) -> list[tuple[int, int, int, int]]:
    """(base offset, last offset, position, size) of every batch, from kafka-python."""
    data = written.read_bytes()
    records, table, position = MemoryRecords(data), [], 0
    while records.has_next():
        b = records.next_batch()
        table.append((b.base_offset, b.last_offset, position, b.size_in_bytes))
        position += b.size_in_bytes
    assert position == len(data)
    return table


def test_segment_names() -> None:
    assert segment_file_stem(14667) == "00000000000000014667"
    assert parse_segment_log_name("00000000000000014667.log") == 14667
    names = ["00000000000000014667.log.swap", "00000000000000014667.log.deleted", "14667.log"]
    for name in names + ["00000000000000014667.cleaned", "00000000000000014667.index"]:
        assert parse_segment_log_name(name) is None
    with pytest.raises(ValueError, match="not a segment file name"):
        LogSegment("/tmp/x.log")


def test_written_segment_loads_its_indexes(written: Path, batch_table: list) -> None:
    with LogSegment(written) as seg:
        assert seg.index_status == "loaded"
        assert seg.base_offset == BASE
        assert seg.next_offset == batch_table[-1][1] + 1
        assert seg.last_offset == batch_table[-1][1]
        assert seg.size_in_bytes == seg.end_of_batches == written.stat().st_size
        assert len(seg.offset_index) > 100
        assert seg.verify() == 300
        batches = list(iter_batches(written.read_bytes()))
        rebuilt = SegmentIndexer.rebuild(batches, BASE)
        assert seg.offset_index.to_bytes() == rebuilt[0].to_bytes()
        assert seg.time_index.to_bytes() == rebuilt[1].to_bytes()
        assert seg.largest_timestamp == max(b.max_timestamp for b in batches)


def test_translate_every_offset(written: Path, batch_table: list) -> None:
    with LogSegment(written) as seg:
        for target in range(BASE - 3, batch_table[-1][1] + 3):
            holding = [LogOffsetPosition(r[1], r[2], r[3]) for r in batch_table if r[1] >= target]
            assert seg.translate_offset(target) == (holding[0] if holding else None)


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_find_offset_by_timestamp_equals_a_scan(written: Path, reference: list, data) -> None:
    stamps = [r[1] for r in reference]
    anywhere = st.integers(min(stamps) - 10, max(stamps) + 10)
    target = data.draw(st.one_of(st.sampled_from(stamps), anywhere))
    floor = data.draw(st.integers(BASE - 2, reference[-1][0] + 2))
    hits = [r for r in reference if r[1] >= target and r[0] >= floor]
    with LogSegment(written) as seg:
        found = seg.find_offset_by_timestamp(target, floor)
    assert found == (TimestampAndOffset(hits[0][1], hits[0][0], 0) if hits else None)


def test_read_min_one_message_returns_a_whole_batch(written: Path, batch_table: list) -> None:
    with LogSegment(written) as seg:
        base, last, position, size = batch_table[10]
        for fetch_offset in (base, last):
            s = seg.read(fetch_offset, 1, min_one_message=True)
            assert s is not None
            assert (s.position, s.size_in_bytes, s.first_entry_incomplete) == (
                position,
                size,
                False,
            )
            assert bytes(s.records) == written.read_bytes()[position : position + size]
        s = seg.read(base, 0, min_one_message=True)
        assert s is not None and s.size_in_bytes == size


def test_read_without_min_one_message_respects_max_bytes(written: Path, batch_table: list) -> None:
    data = written.read_bytes()
    with LogSegment(written) as seg:
        base, _, position, size = batch_table[10]
        s = seg.read(base, 7)
        assert s is not None
        assert (s.size_in_bytes, s.first_entry_incomplete) == (7, True)
        assert bytes(s.records) == data[position : position + 7]
        s = seg.read(base, 0)
        assert s is not None and (s.size_in_bytes, s.first_entry_incomplete) == (0, True)
        s = seg.read(base, size + 100)  # a whole batch plus part of the next
        assert s is not None and bytes(s.records) == data[position : position + size + 100]
        assert not s.first_entry_incomplete
        assert list(iter_batches(s.records))[-1].last_offset == batch_table[10][1]


def test_read_stops_at_max_position_and_past_the_end(written: Path, batch_table: list) -> None:
    with LogSegment(written) as seg:
        base, _, position, _ = batch_table[5]
        limit = batch_table[8][2]
        s = seg.read(base, 10**9, max_position=limit)
        assert s is not None and s.size_in_bytes == limit - position
        assert [b.base_offset for b in iter_batches(s.records)] == [r[0] for r in batch_table[5:8]]
        s = seg.read(base, 10**9, max_position=position, min_one_message=True)
        assert s is not None and s.size_in_bytes == 0
        assert seg.read(batch_table[-1][1] + 1, 100) is None
        with pytest.raises(ValueError, match="invalid max bytes -1"):
            seg.read(base, -1)


def test_read_in_an_offset_gap_starts_at_the_next_batch(written: Path, batch_table: list) -> None:
    gaps = [(a, b) for a, b in zip(batch_table, batch_table[1:], strict=False) if b[0] > a[1] + 1]
    assert gaps, "the generated data has offset gaps"
    before, after = gaps[0]
    with LogSegment(written) as seg:
        s = seg.read(before[1] + 1, 10)
        assert s is not None and s.position == after[2]


def copy_segment(src: Path, dst_dir: Path) -> Path:
    dst_dir.mkdir(parents=True, exist_ok=True)
    for suffix in (".log", ".index", ".timeindex"):
        if src.with_suffix(suffix).exists():
            (dst_dir / (src.stem + suffix)).write_bytes(src.with_suffix(suffix).read_bytes())
    return dst_dir / src.name


def test_preallocated_zero_filled_indexes_are_loaded(written: Path, tmp_path: Path) -> None:
    log = copy_segment(written, tmp_path)
    for suffix in (".index", ".timeindex"):
        with open(log.with_suffix(suffix), "ab") as f:
            f.truncate(10 * 1024 * 1024 // 12 * 12 if suffix == ".timeindex" else 10 * 1024 * 1024)
    with LogSegment(log) as seg, LogSegment(written) as ref:
        assert seg.index_status == "loaded"
        assert seg.offset_index.to_bytes() == ref.offset_index.to_bytes()
        assert seg.time_index.to_bytes() == ref.time_index.to_bytes()
        seg.verify()
    assert log.with_suffix(".index").stat().st_size == 10 * 1024 * 1024  # never written


def corrupt(path: Path, how: str) -> None:
    data = bytearray(path.read_bytes())
    if how == "truncated":
        data = data[:-3]
    elif how == "garbage":
        data[len(data) // 2 : len(data) // 2 + 8] = b"\x7f" * 8
    elif how == "past-the-end":
        data[-4:] = (10**8).to_bytes(4, "big")
    elif how == "wrong-offset":
        data[-8:-4] = (int.from_bytes(data[-8:-4], "big") + 1).to_bytes(4, "big")
    elif how == "first-offset-zero":  # entry 0 names the segment's first offset: reads skip on
        data[0:4] = bytes(4)
    elif how == "stale-extra-entry":
        data += (10**6).to_bytes(4, "big") + (10**8).to_bytes(4, "big")
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    ("how", "status"),
    [
        ("truncated", "not a multiple of the 8-byte entry size"),
        ("garbage", "breaks the ordering"),
        ("past-the-end", "past the end of"),
        ("wrong-offset", "does not match the batch at that position"),
        ("stale-extra-entry", "past the end of"),
        ("first-offset-zero", "entry 0 (offset 5000, position"),
        ("missing", "00005000.index is missing"),
    ],
)
def test_bad_offset_index_is_rebuilt(written: Path, tmp_path: Path, how: str, status: str) -> None:
    log = copy_segment(written, tmp_path)
    if how == "missing":
        log.with_suffix(".index").unlink()
    else:
        corrupt(log.with_suffix(".index"), how)
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in tmp_path.iterdir()}
    with LogSegment(log) as seg, LogSegment(written) as ref:
        assert seg.index_status.startswith("rebuilt: ")
        assert status in seg.index_status
        assert seg.offset_index.to_bytes() == ref.offset_index.to_bytes()
        assert seg.time_index.to_bytes() == ref.time_index.to_bytes()
        for offset in (ref.base_offset, ref.base_offset + 1, ref.next_offset - 1):
            assert seg.translate_offset(offset) == ref.translate_offset(offset)
    after = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in tmp_path.iterdir()}
    assert after == before  # read-only: nothing written, created or removed


@pytest.mark.parametrize("how", ["missing", "truncated", "past-the-end"])
def test_bad_time_index_is_rebuilt(written: Path, tmp_path: Path, how: str) -> None:
    log = copy_segment(written, tmp_path)
    path = log.with_suffix(".timeindex")
    if how == "missing":
        path.unlink()
    elif how == "truncated":
        corrupt(path, "truncated")
    else:
        data = bytearray(path.read_bytes())
        data[-4:] = (10**6).to_bytes(4, "big")
        path.write_bytes(bytes(data))
    with LogSegment(log) as seg, LogSegment(written) as ref:
        assert seg.index_status.startswith("rebuilt")
        assert seg.time_index.to_bytes() == ref.time_index.to_bytes()


def test_index_entry_pointing_mid_batch_is_rebuilt(written: Path, tmp_path: Path) -> None:
    log = copy_segment(written, tmp_path)
    data = bytearray(log.with_suffix(".index").read_bytes())
    data[4:8] = (int.from_bytes(data[4:8], "big") + 1).to_bytes(4, "big")  # entry 0, mid-batch
    log.with_suffix(".index").write_bytes(bytes(data))
    with LogSegment(log) as seg, LogSegment(written) as ref:
        assert seg.index_status.startswith("rebuilt: offset index")
        assert "entry 0 (offset" in seg.index_status
        assert seg.offset_index.to_bytes() == ref.offset_index.to_bytes()


def test_verify_finds_a_bad_crc(written: Path, tmp_path: Path, batch_table: list) -> None:
    log = copy_segment(written, tmp_path)
    data = bytearray(log.read_bytes())
    position = batch_table[42][2]
    data[position + 70] ^= 0xFF
    log.write_bytes(bytes(data))
    with LogSegment(log) as seg:
        with pytest.raises(CorruptRecordError, match=f"at byte {position} .*CRC mismatch"):
            seg.verify()


def test_torn_tail_is_not_read(written: Path, tmp_path: Path, batch_table: list) -> None:
    log = copy_segment(written, tmp_path)
    with open(log, "ab") as f:
        f.write(make_batch(10**6, [(1, b"k", b"v" * 500)])[:200])
    with LogSegment(log) as seg:
        assert seg.index_status == "loaded"
        assert seg.size_in_bytes == seg.end_of_batches + 200
        assert seg.next_offset == batch_table[-1][1] + 1
        assert seg.translate_offset(seg.next_offset) is None
        with pytest.raises(CorruptRecordError, match="torn tail"):
            seg.verify()


def test_empty_segment(tmp_path: Path) -> None:
    log = tmp_path / "00000000000000000042.log"
    log.write_bytes(b"")
    with LogSegment(log) as seg:
        assert (seg.next_offset, seg.size_in_bytes, seg.is_empty) == (42, 0, True)
        assert seg.index_status.startswith("rebuilt")
        assert seg.read(42, 100) is None
        assert seg.translate_offset(0) is None
        assert seg.find_offset_by_timestamp(0) is None
        assert seg.verify() == 0
        assert list(seg.batches()) == []


def test_non_empty_indexes_of_an_empty_log_are_rebuilt(tmp_path: Path) -> None:
    log = tmp_path / "00000000000000000000.log"
    log.write_bytes(b"")
    log.with_suffix(".index").write_bytes(b"")
    log.with_suffix(".timeindex").write_bytes((5).to_bytes(8, "big") + (0).to_bytes(4, "big"))
    with LogSegment(log) as seg:
        assert "outside the offsets" in seg.index_status
        assert len(seg.time_index) == 0


def test_views_outlive_close(written: Path) -> None:
    seg = LogSegment(written)
    s = seg.read(BASE, 100, min_one_message=True)
    seg.close()
    assert s is not None and len(bytes(s.records)) == s.size_in_bytes
    seg.close()


@pytest.mark.parametrize(
    "log",
    [
        BITNAMI / "__cluster_metadata-0" / "00000000000000014667.log",
        KAFKA_37 / "__consumer_offsets-6" / "00000000000000000000.log",
    ],
    ids=lambda p: p.parent.name,
)
def test_fixture_offsets_translate_like_a_scan(log: Path) -> None:
    base = int(log.stem)
    batches = [(b.base_offset, b.last_offset, b.position) for b in iter_batches(log.read_bytes())]
    with LogSegment(log) as seg:
        assert seg.index_status == "loaded"
        for first, last, position in batches:
            for offset in {first, last, (first + last) // 2}:
                found = seg.translate_offset(offset)
                assert found is not None and (found.offset, found.position) == (last, position)
        assert seg.translate_offset(base) is not None


def test_fixture_segment_copies_with_preallocated_indexes(tmp_path: Path) -> None:
    log_dir = copy_tree(BITNAMI, tmp_path / "b")
    log = log_dir / "__cluster_metadata-0" / "00000000000000014667.log"
    for suffix, entry_size in ((".index", 8), (".timeindex", 12)):
        os.truncate(log.with_suffix(suffix), 10 * 1024 * 1024 // entry_size * entry_size)
    with LogSegment(log) as seg:
        assert seg.index_status == "loaded"
        assert (len(seg.offset_index), len(seg.time_index)) == (159, 161)
        assert (
            seg.offset_index.to_bytes()
            == OffsetIndex.load(
                BITNAMI / "__cluster_metadata-0" / "00000000000000014667.index", 14667
            ).to_bytes()
        )


def test_timestamp_lookup_starts_below_the_target_not_at_the_next_entry(tmp_path: Path) -> None:
    """The time index is searched for the largest entry <= target (Kafka's rule): a record
    reaching the target between two entries (offset 2 here) comes before the first entry >=
    target, so starting the scan at that entry would miss it."""
    config = LogConfig().with_overrides({"index.interval.bytes": 1000})
    values = [(100, 2000), (90, 400), (150, 600), (200, 10)]  # (timestamp, value size)
    with SegmentWriter(tmp_path, TopicPartition("t", 0), config) as w:
        for offset, (ts, size) in enumerate(values):
            w.append(make_batch(offset, [(ts, None, b"v" * size)]))
    with LogSegment(tmp_path / "t-0" / "00000000000000000000.log") as seg:
        ti = seg.time_index
        assert [ti.entry(i) for i in range(len(ti))] == [
            TimestampOffset(100, 0),
            TimestampOffset(200, 3),
        ]
        assert ti.lookup(150) == TimestampOffset(100, 0)
        assert seg.find_offset_by_timestamp(150) == TimestampAndOffset(150, 2, 0)
        assert seg.find_offset_by_timestamp(151) == TimestampAndOffset(200, 3, 0)
        assert seg.find_offset_by_timestamp(95) == TimestampAndOffset(100, 0, 0)
        assert seg.find_offset_by_timestamp(95, starting_offset=1) == TimestampAndOffset(150, 2, 0)


def test_segment_with_legacy_messages_then_v2(tmp_path: Path) -> None:
    """A log written before and after a message format upgrade: magic 1 messages, a gzip
    magic 1 wrapper (offset = its last inner offset, as a broker writes it), then v2."""
    plain = LegacyRecordBatchBuilder(1, 0, 1 << 20)
    for i in range(3):
        plain.append(i, 1000 + i, b"k", b"v" * 100)
    wrapped = LegacyRecordBatchBuilder(1, 1, 1 << 20)
    for i in range(3):
        wrapped.append(i, 2000 + i, None, b"w" * 100)
    wrapper = bytearray(wrapped.build())
    wrapper[:8] = (5).to_bytes(8, "big")  # not covered by the legacy CRC
    log = tmp_path / "00000000000000000000.log"
    data = bytes(plain.build()) + bytes(wrapper) + make_batch(6, [(3000, b"z", b"z")])
    log.write_bytes(data)
    with LogSegment(log, index_interval_bytes=0) as seg:
        assert [b.magic for b in seg.batches()] == [1, 1, 1, 1, 2]
        assert (seg.next_offset, seg.verify()) == (7, 5)
        assert seg.offset_index.offsets().tolist() == [1, 2, 5, 6]
        found = seg.translate_offset(4)
        assert found is not None and found.offset == 5
        with PartitionReader(tmp_path.rename(tmp_path.parent / "legacy-0")) as reader:
            records = [
                (r.offset, r.timestamp, r.value) for b in reader.batches() for r in b.records()
            ]
    assert records == [(r[0], r[1], r[3]) for r in reference_records(data)]
    assert [r[0] for r in records] == list(range(7))


def test_impossible_length_behind_a_valid_index_fails_reads(written: Path, tmp_path: Path) -> None:
    # the index's last entry points past the forged batch, so the segment loads as whole: reads
    # from its start must fail, not end early (the fuzz campaign's silent skip of 30 records)
    log = copy_segment(written, tmp_path)
    data = bytearray(log.read_bytes())
    data[8:12] = (0x7FFFFFFF).to_bytes(4, "big")
    log.write_bytes(bytes(data))
    with LogSegment(log) as seg, LogSegment(written) as ref:
        assert seg.index_status == "loaded"
        assert seg.end_of_batches == ref.end_of_batches
        with pytest.raises(CorruptRecordError, match="at byte 0: the batch at byte 0 does not fit"):
            seg.translate_offset(seg.base_offset)
        with pytest.raises(CorruptRecordError, match="does not fit before the end"):
            list(seg.batches())
