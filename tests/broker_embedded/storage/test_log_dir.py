"""LogDir and PartitionReader over real Kafka log dirs, checked against kafka-python."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker_embedded.errors import CheckpointError, OffsetOutOfRangeError
from broker_embedded.record.records import iter_batches
from broker_embedded.storage.log_dir import LogDir
from broker_embedded.storage.offset_checkpoint import OffsetCheckpointFile
from broker_embedded.storage.partition_reader import PartitionReader
from broker_embedded.storage.topic_partition import TopicPartition

from .conftest import BITNAMI, KAFKA_37, LOG_DIRS

PCE = "product-created-events-topic"
PARTITIONS = {
    KAFKA_37: {
        # partition: (segments, log start, high watermark, log end)
        TopicPartition("TestTopicPatient", 0): ([0], 0, 3, 3),
        TopicPartition("__cluster_metadata", 0): ([0], 0, 4929, 4929),
        TopicPartition("__consumer_offsets", 6): ([0], 0, 13, 13),
    },
    BITNAMI: {
        TopicPartition("__cluster_metadata", 0): ([0, 14667], 0, 23767, 23767),
        TopicPartition(PCE, 0): ([0], 0, 0, 0),
        TopicPartition(PCE, 1): ([0], 0, 0, 0),
        TopicPartition(PCE, 2): ([0], 0, 5, 5),
    },
}


def kafka_python_records(directory: Path) -> list[tuple]:
    from kafka.record.memory_records import MemoryRecords

    out = []
    for log in sorted(directory.glob("*.log")):
        records = MemoryRecords(log.read_bytes())
        while records.has_next():
            for r in records.next_batch():
                headers = tuple((k, v) for k, v in r.headers)
                out.append((r.offset, r.timestamp, r.key, r.value, headers))
    return out


def fetch_all(reader: PartitionReader, max_bytes: int) -> list[tuple]:
    """Consume the partition the way a consumer does: fetch, skip below the offset, drop the
    partial tail, continue at the next batch."""
    out, offset, fetches = [], reader.log_start_offset, 0
    while offset < reader.high_watermark:
        got = reader.read(offset, max_bytes)
        fetches += 1
        batches = list(iter_batches(got.records, tail="stop"))
        assert batches, f"no whole batch at offset {offset}"
        for b in batches:
            for r in b.records():
                if r.offset >= offset:
                    out.append((r.offset, r.timestamp, r.key, r.value, r.headers))
        offset = batches[-1].next_offset
    assert reader.read(offset, max_bytes).size_in_bytes == 0
    return out


@pytest.mark.parametrize("path", LOG_DIRS, ids=lambda p: p.name)
def test_fixture_log_dirs_open_with_exact_offsets(path: Path) -> None:
    log_dir = LogDir(path)
    assert log_dir.partitions() == sorted(PARTITIONS[path])
    for tp, (segments, start, hw, end) in PARTITIONS[path].items():
        with log_dir.open_partition(tp) as reader:
            assert reader.topic_partition == tp
            assert reader.base_offsets == segments
            assert (reader.log_start_offset, reader.high_watermark, reader.log_end_offset) == (
                start,
                hw,
                end,
            )


def test_log_dir_checkpoints() -> None:
    bitnami = LogDir(BITNAMI)
    assert bitnami.high_watermarks == {
        TopicPartition(PCE, 0): 0,
        TopicPartition(PCE, 2): 5,
        TopicPartition(PCE, 1): 0,
    }
    assert bitnami.recovery_points == bitnami.high_watermarks
    assert bitnami.log_start_offsets == {} == bitnami.cleaner_offsets
    assert bitnami.meta_properties()["cluster.id"] == "WnLkTHhkQaiJbwP8FClPhw"
    k37 = LogDir(KAFKA_37)
    assert (k37.high_watermarks, k37.recovery_points, k37.log_start_offsets) == ({}, {}, {})
    assert k37.meta_properties() == {
        "node.id": "1",
        "directory.id": "XHhkr4tkSsD900pOQ8pPfg",
        "version": "1",
        "cluster.id": "q1w2e3r4t5y6u7i8o9p0",
    }


@pytest.mark.parametrize(
    ("path", "tp"),
    [(path, tp) for path, tps in PARTITIONS.items() for tp in tps],
    ids=lambda x: x.name if isinstance(x, Path) else str(x),
)
@pytest.mark.parametrize("max_bytes", [1, 70_000])
def test_every_record_equals_kafka_python(path: Path, tp: TopicPartition, max_bytes: int) -> None:
    with LogDir(path).open_partition(tp) as reader:
        ours = fetch_all(reader, max_bytes)
        assert ours == kafka_python_records(path / tp.dir_name)
        assert len(ours) == PARTITIONS[path][tp][3]  # offsets 0.. LEO-1 are all there


def test_kafka_python_sees_the_header_values() -> None:
    with LogDir(BITNAMI).open_partition(TopicPartition(PCE, 2)) as reader:
        records = fetch_all(reader, 1)
    assert [r[4][0][0] for r in records] == ["__TypeId__"] * 5


def test_read_at_the_segment_boundary() -> None:
    with LogDir(BITNAMI).open_partition(TopicPartition("__cluster_metadata", 0)) as reader:
        last_of_first = reader.read(14666, 1)
        assert last_of_first.segment_base_offset == 0
        assert next(iter_batches(last_of_first.records)).last_offset == 14666
        first_of_second = reader.read(14667, 1)
        assert (first_of_second.segment_base_offset, first_of_second.position) == (14667, 0)
        assert next(iter_batches(first_of_second.records)).base_offset == 14667
        assert reader.find_offset_by_timestamp(1750536627041).offset == 21698
        assert reader.find_offset_by_timestamp(10**15) is None


def test_high_watermark_and_log_start_bound_reads(bitnami_copy: Path) -> None:
    tp = TopicPartition(PCE, 2)
    OffsetCheckpointFile(bitnami_copy / "replication-offset-checkpoint").write({tp: 3})
    OffsetCheckpointFile(bitnami_copy / "log-start-offset-checkpoint").write({tp: 1})
    with LogDir(bitnami_copy).open_partition(tp) as reader:
        assert (reader.log_start_offset, reader.high_watermark, reader.log_end_offset) == (1, 3, 5)
        got = reader.read(1, 10**6)
        assert [b.base_offset for b in iter_batches(got.records)] == [1, 2]
        assert reader.read(3, 10**6).size_in_bytes == 0  # at the HW: empty, no error
        assert reader.read(5, 10**6).size_in_bytes == 0  # at the LEO: empty, no error
        got = reader.read(3, 10**6, max_offset=5)  # a follower reads to the LEO
        assert [b.base_offset for b in iter_batches(got.records)] == [3, 4]
        for offset in (0, 6):
            with pytest.raises(OffsetOutOfRangeError, match=f"offset {offset} of topic") as e:
                reader.read(offset, 100)
            assert f"{PCE}-2" in str(e.value) and "[1, 5]" in str(e.value)


def test_checkpoint_values_are_clamped(bitnami_copy: Path) -> None:
    tp = TopicPartition(PCE, 2)
    OffsetCheckpointFile(bitnami_copy / "replication-offset-checkpoint").write({tp: 99})
    OffsetCheckpointFile(bitnami_copy / "log-start-offset-checkpoint").write({tp: -7})
    with LogDir(bitnami_copy).open_partition(tp) as reader:
        assert (reader.log_start_offset, reader.high_watermark) == (0, 5)


def test_non_partition_entries_are_skipped(kafka37_copy: Path) -> None:
    for name in ("lost+found", "t-0.6ad0b6a7b39f4d4a8e5c8e0e4d2d6e1a-delete", "t-0.x-future"):
        (kafka37_copy / name).mkdir()
    (kafka37_copy / "u-0").write_bytes(b"a file, not a directory")
    (kafka37_copy / "TestTopicPatient-0" / "00000000000000000000.log.swap").write_bytes(b"x")
    (kafka37_copy / "TestTopicPatient-0" / "00000000000000000003.log.deleted").write_bytes(b"x")
    log_dir = LogDir(kafka37_copy)
    assert log_dir.partitions() == sorted(PARTITIONS[KAFKA_37])
    with log_dir.open_partition(TopicPartition("TestTopicPatient", 0)) as reader:
        assert reader.base_offsets == [0]
    with pytest.raises(FileNotFoundError, match="no partition directory"):
        log_dir.open_partition(TopicPartition("u", 0))


def test_malformed_checkpoint_in_a_log_dir(kafka37_copy: Path) -> None:
    (kafka37_copy / "recovery-point-offset-checkpoint").write_bytes(b"0\n1\nt 0\n")
    with pytest.raises(CheckpointError, match="recovery-point-offset-checkpoint, line 3"):
        LogDir(kafka37_copy)
    with pytest.raises(FileNotFoundError):
        LogDir(kafka37_copy / "nope")


def test_missing_indexes_of_a_copied_dir_are_rebuilt_without_writing(kafka37_copy: Path) -> None:
    directory = kafka37_copy / "__consumer_offsets-6"
    (directory / "00000000000000000000.index").unlink()
    (directory / "00000000000000000000.timeindex").write_bytes(bytes(12 * 1000))
    before = sorted((p.name, p.stat().st_size) for p in directory.iterdir())
    with LogDir(kafka37_copy).open_partition(TopicPartition("__consumer_offsets", 6)) as reader:
        seg = reader.segment(0)
        assert seg.index_status == "rebuilt: 00000000000000000000.index is missing"
        assert (
            seg.offset_index.to_bytes()
            == (KAFKA_37 / directory.name / "00000000000000000000.index").read_bytes()
        )
        assert fetch_all(reader, 1) == kafka_python_records(KAFKA_37 / directory.name)
    assert sorted((p.name, p.stat().st_size) for p in directory.iterdir()) == before
