"""Indexes rebuilt or written here against the .index/.timeindex files real Kafka brokers wrote.

Findings (exact, from the fixtures):

- every fixture index that Kafka wrote in one session equals a rebuild from its .log with the
  index.interval.bytes rule (4096, checked before counting the batch, entry = batch's last offset
  and start position) plus a final time index entry at close or roll;
- bitnami ``__cluster_metadata-0/00000000000000014667`` spans a clean broker restart: leader epoch
  5 starts at offset 21698 (relative 7031, byte 506534). Its time index holds the entry the clean
  shutdown appended (1750536627040, relative 7030) and its offset index entries after the restart
  are counted from byte 506534 (Kafka's bytesSinceLastIndexEntry restarts at 0 on reopen). A
  rebuild differs from entry 123 on; a writer closed and reopened at that byte matches exactly;
- every time index entry in the fixtures points at the last offset of a one-record batch, so the
  fixtures cannot tell the "first record carrying the max timestamp" rule (Kafka 3.6+ leaders,
  uncompressed) from the "batch last offset" rule (recovery, followers, KRaft log).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from broker_embedded.record.records import iter_batches
from broker_embedded.storage.log_segment import LogSegment
from broker_embedded.storage.offset_index import OffsetIndex
from broker_embedded.storage.segment_indexer import SegmentIndexer
from broker_embedded.storage.segment_writer import SegmentWriter
from broker_embedded.storage.time_index import TimeIndex, TimestampOffset
from broker_embedded.storage.topic_partition import TopicPartition

from .conftest import BITNAMI, FIXTURES, KAFKA_37

SEGMENTS_WITH_INDEXES = sorted(p.with_suffix("") for p in FIXTURES.rglob("*.index"))
RESTARTED = BITNAMI / "__cluster_metadata-0" / "00000000000000014667"


def rebuild(stem: Path) -> tuple[OffsetIndex, TimeIndex]:
    data = stem.with_suffix(".log").read_bytes()
    base = int(stem.name)
    return SegmentIndexer.rebuild(iter_batches(data, str(stem), tail="error"), base)


def test_fixture_segments_with_indexes() -> None:
    assert [str(p.relative_to(FIXTURES)) for p in SEGMENTS_WITH_INDEXES] == [
        "kafka-3.7-ldi-poc/__consumer_offsets-6/00000000000000000000",
        "kafka-bitnami-rolled/__cluster_metadata-0/00000000000000000000",
        "kafka-bitnami-rolled/__cluster_metadata-0/00000000000000014667",
        "kafka-bitnami-rolled/product-created-events-topic-0/00000000000000000000",
        "kafka-bitnami-rolled/product-created-events-topic-1/00000000000000000000",
        "kafka-bitnami-rolled/product-created-events-topic-2/00000000000000000000",
    ]


@pytest.mark.parametrize(
    "stem",
    [s for s in SEGMENTS_WITH_INDEXES if s != RESTARTED],
    ids=lambda s: f"{s.parent.name}/{s.name}",
)
def test_rebuilt_indexes_equal_kafka_files(stem: Path) -> None:
    oi, ti = rebuild(stem)
    assert oi.to_bytes() == stem.with_suffix(".index").read_bytes()
    assert ti.to_bytes() == stem.with_suffix(".timeindex").read_bytes()


def test_exact_entries_of_consumer_offsets_and_product_topic() -> None:
    oi, ti = rebuild(KAFKA_37 / "__consumer_offsets-6" / "00000000000000000000")
    assert [(o, p) for o, p in zip(oi.offsets(), oi.positions(), strict=True)] == [
        (3, 4730),
        (7, 9571),
    ]
    assert [ti.entry(i) for i in range(len(ti))] == [
        TimestampOffset(1769791783399, 3),
        TimestampOffset(1769792518093, 7),
        TimestampOffset(1769793578176, 12),  # the final entry added at close
    ]
    oi, ti = rebuild(BITNAMI / "product-created-events-topic-2" / "00000000000000000000")
    assert len(oi) == 0  # 995 bytes: never more than 4096 since the last entry
    assert [ti.entry(0)] == [TimestampOffset(1750620947985, 4)]  # only the close entry


def test_bitnami_rolled_segment_counts() -> None:
    oi, ti = rebuild(BITNAMI / "__cluster_metadata-0" / "00000000000000000000")
    assert (len(oi), len(ti)) == (257, 258)
    assert ti.last_entry == TimestampOffset(1750016306718, 14666)  # added on roll


def test_restarted_segment_differs_from_a_rebuild_exactly_after_the_restart() -> None:
    oi, ti = rebuild(RESTARTED)
    kafka_oi = OffsetIndex.load(RESTARTED.with_suffix(".index"), 14667)
    kafka_ti = TimeIndex.load(RESTARTED.with_suffix(".timeindex"), 14667)
    assert (len(oi), len(ti), len(kafka_oi), len(kafka_ti)) == (159, 160, 159, 161)
    assert oi.to_bytes(0)[: 123 * 8] == kafka_oi.to_bytes()[: 123 * 8]
    assert ti.to_bytes()[: 123 * 12] == kafka_ti.to_bytes()[: 123 * 12]
    assert oi.entry(123).offset - 14667 == 7062
    assert kafka_oi.entry(123).offset - 14667 == 7084
    assert kafka_oi.entry(123).position - 506534 == 4098  # > 4096 bytes since the restart
    assert kafka_ti.entry(123) == TimestampOffset(1750536627040, 14667 + 7030)  # clean shutdown
    with LogSegment(RESTARTED.with_suffix(".log")) as seg:
        restart = seg.translate_offset(21698)
        assert restart is not None and restart.position == 506534
        before = seg.translate_offset(21697)
        assert before is not None and before.offset == 21697
        assert seg.verify() == 9085  # Kafka's own files pass our index checks


def test_writer_replaying_the_bitnami_metadata_log_writes_kafkas_files(tmp_path: Path) -> None:
    """Segment 0, roll at 14667, clean close at the epoch 5 start, reopen, rest: byte-equal."""
    src = BITNAMI / "__cluster_metadata-0"
    tp = TopicPartition("__cluster_metadata", 0)
    seg0 = (src / "00000000000000000000.log").read_bytes()
    seg1 = (src / "00000000000000014667.log").read_bytes()
    with SegmentWriter(tmp_path, tp) as w:
        for b in iter_batches(seg0):
            w.append(b.buffer)
        w.roll(14667)
        for b in iter_batches(seg1, end=506534):
            w.append(b.buffer)
    with SegmentWriter(tmp_path, tp) as w:
        assert w.log_end_offset == 21698
        for b in iter_batches(seg1, start=506534):
            w.append(b.buffer)
        assert w.segment_base_offsets == [0, 14667]
    for name in sorted(p.name for p in src.glob("*[0-9].*index")) + [
        "00000000000000000000.log",
        "00000000000000014667.log",
    ]:
        assert (tmp_path / tp.dir_name / name).read_bytes() == (src / name).read_bytes(), name


@pytest.mark.parametrize(
    "directory",
    [KAFKA_37 / "__consumer_offsets-6", BITNAMI / "product-created-events-topic-2"],
    ids=lambda p: p.name,
)
def test_writer_replaying_one_session_writes_kafkas_files(directory: Path, tmp_path: Path) -> None:
    tp = TopicPartition.parse_dir_name(directory.name)
    data = (directory / "00000000000000000000.log").read_bytes()
    with SegmentWriter(tmp_path, tp) as w:
        for b in iter_batches(data):
            w.append(b.buffer)
    for suffix in (".log", ".index", ".timeindex"):
        name = "00000000000000000000" + suffix
        assert (tmp_path / tp.dir_name / name).read_bytes() == (directory / name).read_bytes()


def test_fixture_time_index_entries_point_at_one_record_batches() -> None:
    for stem in SEGMENTS_WITH_INDEXES:
        ti = TimeIndex.load(stem.with_suffix(".timeindex"), int(stem.name))
        with LogSegment(stem.with_suffix(".log")) as seg:
            for offset in ti.offsets().tolist():
                found = seg.translate_offset(offset)
                assert found is not None and found.offset == offset
                batch = next(seg.batches(found.position))
                assert batch.records_count == 1


def test_kraft_metadata_log_without_indexes_is_rebuilt() -> None:
    stem = KAFKA_37 / "__cluster_metadata-0" / "00000000000000000000"
    assert not stem.with_suffix(".index").exists()
    with LogSegment(stem.with_suffix(".log")) as seg:
        assert seg.index_status == "rebuilt: 00000000000000000000.index is missing"
        assert (len(seg.offset_index), len(seg.time_index)) == (85, 86)
        assert (seg.next_offset, seg.verify()) == (4929, 4814)
