"""Checkpoint files, leader epoch checkpoints and partition.metadata against the fixtures."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from broker_embedded.errors import CheckpointError
from broker_embedded.storage.leader_epoch_checkpoint import EpochEntry, LeaderEpochCheckpointFile
from broker_embedded.storage.offset_checkpoint import OffsetCheckpointFile
from broker_embedded.storage.partition_metadata import (
    METADATA_TOPIC_ID,
    PartitionMetadata,
    PartitionMetadataFile,
    new_topic_id,
    topic_id_from_string,
    topic_id_to_string,
)
from broker_embedded.storage.topic_partition import TopicPartition

from .conftest import BITNAMI, FIXTURES, KAFKA_37

PCE = "product-created-events-topic"


def test_bitnami_offset_checkpoints_exact_values() -> None:
    hw = OffsetCheckpointFile(BITNAMI / "replication-offset-checkpoint").read()
    assert list(hw.items()) == [
        (TopicPartition(PCE, 0), 0),
        (TopicPartition(PCE, 2), 5),
        (TopicPartition(PCE, 1), 0),
    ]
    recovery = OffsetCheckpointFile(BITNAMI / "recovery-point-offset-checkpoint").read()
    assert list(recovery.items()) == [
        (TopicPartition(PCE, 0), 0),
        (TopicPartition(PCE, 1), 0),
        (TopicPartition(PCE, 2), 5),
    ]
    assert OffsetCheckpointFile(BITNAMI / "log-start-offset-checkpoint").read() == {}
    assert OffsetCheckpointFile(BITNAMI / "cleaner-offset-checkpoint").read() == {}  # 0 bytes


@pytest.mark.parametrize(
    "name",
    [
        "replication-offset-checkpoint",
        "recovery-point-offset-checkpoint",
        "log-start-offset-checkpoint",
    ],
)
def test_offset_checkpoints_round_trip_byte_for_byte(name: str, tmp_path: Path) -> None:
    original = (BITNAMI / name).read_bytes()
    f = OffsetCheckpointFile(tmp_path / name)
    f.write(OffsetCheckpointFile(BITNAMI / name).read())
    assert (tmp_path / name).read_bytes() == original
    assert os.listdir(tmp_path) == [name]  # the .tmp file was renamed away


def test_empty_checkpoint_is_written_as_kafka_writes_it(tmp_path: Path) -> None:
    f = OffsetCheckpointFile(tmp_path / "cleaner-offset-checkpoint")
    assert f.read_or_empty() == {}
    f.write(OffsetCheckpointFile(BITNAMI / "cleaner-offset-checkpoint").read())
    assert (
        f.path.read_bytes() == b"0\n0\n" == (BITNAMI / "log-start-offset-checkpoint").read_bytes()
    )


def test_offset_checkpoint_write_then_read(tmp_path: Path) -> None:
    offsets = {
        TopicPartition("__consumer_offsets", 49): 123456789012,
        TopicPartition("a.b-c_d", 0): 0,
        TopicPartition("x", 2147483647): -1,
    }
    f = OffsetCheckpointFile(tmp_path / "replication-offset-checkpoint")
    f.write(offsets)
    assert f.path.read_bytes() == (
        b"0\n3\n__consumer_offsets 49 123456789012\na.b-c_d 0 0\nx 2147483647 -1\n"
    )
    assert f.read() == offsets
    f.write({})
    assert f.read() == {}


@pytest.mark.parametrize(
    ("content", "line", "reason"),
    [
        (b"1\n0\n", 1, "unrecognized version 1"),
        (b"x\n0\n", 1, "version 'x' is not an integer"),
        (b"0\nthree\n", 2, "entry count 'three'"),
        (b"0\n2\nt 0 5\n", 3, "header says 2 entries, the file holds 1"),
        (b"0\n1\nt 0 5\nt 1 6\n", 4, "header says 1 entries, the file holds 2"),
        (b"0\n1\nt 0\n", 3, "got 2 fields"),
        (b"0\n1\nt 0 5 7\n", 3, "got 4 fields"),
        (b"0\n1\nt x 5\n", 3, "partition 'x'"),
        (b"0\n1\nt -1 5\n", 3, "partition -1 is out of range"),
        (b"0\n1\nt 0 5.0\n", 3, "offset '5.0'"),
        (b"0\n1\nt 0 99999999999999999999\n", 3, "offset 99999999999999999999 is out of range"),
        (b"0\n1\n../x 0 5\n", 3, "topic name '../x' is illegal"),
        (b"0\n2\nt 0 5\n\n", 4, "got 0 fields"),
        (b"0\n1\n\xff 0 5\n", 1, "not UTF-8"),
    ],
)
def test_malformed_offset_checkpoint(
    tmp_path: Path, content: bytes, line: int, reason: str
) -> None:
    path = tmp_path / "replication-offset-checkpoint"
    path.write_bytes(content)
    with pytest.raises(CheckpointError) as e:
        OffsetCheckpointFile(path).read()
    message = str(e.value)
    assert str(path) in message
    assert reason in message
    if "UTF-8" not in reason:
        assert f"line {line}:" in message


def test_checkpoint_reader_follows_kafka_leniencies(tmp_path: Path) -> None:
    path = tmp_path / "c"
    f = OffsetCheckpointFile(path)
    for content in (b"", b"0\n", b"0"):
        path.write_bytes(content)
        assert f.read() == {}
    path.write_bytes(b"0\r\n1\r\nt\t3   +7 \r\n")
    assert f.read() == {TopicPartition("t", 3): 7}
    path.write_bytes(b"0\n2\nt 0 5\nt 0 6\n")  # a repeated partition: the last line wins
    assert f.read() == {TopicPartition("t", 0): 6}
    with pytest.raises(FileNotFoundError):
        OffsetCheckpointFile(tmp_path / "missing").read()


def test_leader_epoch_checkpoints_of_fixtures() -> None:
    def read(path: Path) -> list[EpochEntry]:
        return LeaderEpochCheckpointFile(path / "leader-epoch-checkpoint").read()

    assert read(BITNAMI / "__cluster_metadata-0") == [
        EpochEntry(1, 0),
        EpochEntry(2, 3442),
        EpochEntry(3, 3612),
        EpochEntry(4, 14667),
        EpochEntry(5, 21698),
    ]
    for p in range(3):
        assert read(BITNAMI / f"{PCE}-{p}") == [EpochEntry(2, 0)]
    assert read(KAFKA_37 / "TestTopicPatient-0") == [EpochEntry(0, 0)]
    assert read(KAFKA_37 / "__consumer_offsets-6") == [EpochEntry(0, 0)]


def test_leader_epoch_checkpoints_round_trip(tmp_path: Path) -> None:
    files = sorted(FIXTURES.rglob("leader-epoch-checkpoint"))
    assert len(files) == 6
    for i, src in enumerate(files):
        dst = LeaderEpochCheckpointFile(tmp_path / f"{i}")
        dst.write(LeaderEpochCheckpointFile(src).read())
        assert dst.path.read_bytes() == src.read_bytes()


@pytest.mark.parametrize(
    ("content", "reason"),
    [(b"0\n1\n1\n", "got 1 fields"), (b"0\n1\n2147483648 0\n", "epoch 2147483648 is out of range")],
)
def test_malformed_leader_epoch_checkpoint(tmp_path: Path, content: bytes, reason: str) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_bytes(content)
    with pytest.raises(CheckpointError) as e:
        LeaderEpochCheckpointFile(path).read()
    assert f"{path}, line 3: " in str(e.value)
    assert reason in str(e.value)


TOPIC_IDS = {
    KAFKA_37 / "TestTopicPatient-0": "B3_HiNPgSQ6oxG9ZZ6ED5A",
    KAFKA_37 / "__consumer_offsets-6": "gSnfpEbtQfSDpxM2lhEn9A",
    KAFKA_37 / "__cluster_metadata-0": "AAAAAAAAAAAAAAAAAAAAAQ",
    BITNAMI / "__cluster_metadata-0": "AAAAAAAAAAAAAAAAAAAAAQ",
    BITNAMI / f"{PCE}-0": "zcBnIA7CRl29wXuh_gnLoQ",
    BITNAMI / f"{PCE}-1": "zcBnIA7CRl29wXuh_gnLoQ",
    BITNAMI / f"{PCE}-2": "zcBnIA7CRl29wXuh_gnLoQ",
}


@pytest.mark.parametrize("directory", sorted(TOPIC_IDS), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_partition_metadata_of_fixtures(directory: Path, tmp_path: Path) -> None:
    src = directory / "partition.metadata"
    meta = PartitionMetadataFile(src).read()
    assert topic_id_to_string(meta.topic_id) == TOPIC_IDS[directory]
    assert meta.version == 0
    dst = PartitionMetadataFile(tmp_path / "partition.metadata")
    dst.write(meta.topic_id)
    assert dst.path.read_bytes() == src.read_bytes()
    assert not dst.path.read_bytes().endswith(b"\n")


def test_topic_id_values() -> None:
    assert topic_id_from_string("AAAAAAAAAAAAAAAAAAAAAQ") == METADATA_TOPIC_ID == uuid.UUID(int=1)
    assert topic_id_from_string("B3_HiNPgSQ6oxG9ZZ6ED5A") == uuid.UUID(
        "077fc788-d3e0-490e-a8c4-6f5967a103e4"
    )
    for _ in range(200):
        tid = new_topic_id()
        assert not topic_id_to_string(tid).startswith("-")
        assert topic_id_from_string(topic_id_to_string(tid)) == tid
    assert PartitionMetadata(uuid.UUID(int=1)).to_bytes() == (
        b"version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ"
    )


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"version: 1\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ", "unsupported version '1'"),
        (b"version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA", "zero topic id"),
        (b"version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAA", "not 22 URL-safe base64"),
        (b"version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAA+Q", "not 22 URL-safe base64"),
        (b"version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAR", "not in canonical form"),
        (b"version: 0\ntopicid: AAAAAAAAAAAAAAAAAAAAAQ", "expected 'topic_id: <value>'"),
        (b"version: 0", "expected 2 lines, found 1"),
        (b"", "expected 2 lines, found 0"),
    ],
)
def test_malformed_partition_metadata(tmp_path: Path, content: bytes, reason: str) -> None:
    path = tmp_path / "partition.metadata"
    path.write_bytes(content)
    with pytest.raises(CheckpointError, match=reason) as e:
        PartitionMetadataFile(path).read()
    assert str(path) in str(e.value)


def test_partition_metadata_accepts_trailing_newline(tmp_path: Path) -> None:
    path = tmp_path / "partition.metadata"
    path.write_bytes(b"version: 0\ntopic_id: zcBnIA7CRl29wXuh_gnLoQ\n")
    assert topic_id_to_string(PartitionMetadataFile(path).read().topic_id) == (
        "zcBnIA7CRl29wXuh_gnLoQ"
    )
