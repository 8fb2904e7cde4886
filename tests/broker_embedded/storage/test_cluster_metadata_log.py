"""Kafka's KRaft metadata log as the topic registry of a log dir Kafka wrote: the metadata log of a
real Kafka 3.9 broker (data/kafka-3.9-cluster-metadata, PROVENANCE.md there), and logs built
here in Kafka's record format (snapshots, deletions, re-creation, config deletes, corrupt bytes).
"""

from __future__ import annotations

import re
import shutil
import uuid
from pathlib import Path

import pytest

from broker_embedded.errors import CheckpointError
from broker_embedded.record.memory_records_builder import MemoryRecordsBuilder
from broker_embedded.record.varint import encode_uvarint
from broker_embedded.storage.cluster_metadata_log import (
    METADATA_DIR,
    MetadataTopic,
    has_metadata_log,
    read_metadata_topics,
)
from broker_embedded.storage.partition_metadata import topic_id_from_string
from broker_embedded.storage.topic_config_file import TopicConfigFile, TopicEntry

KAFKA_39 = Path(__file__).parent / "data" / "kafka-3.9-cluster-metadata"
T0 = 1_795_869_066_000
ID_A = uuid.UUID(int=0xA1)
ID_B = uuid.UUID(int=0xB2)
ID_B3 = uuid.UUID(int=0xB3)  # topic b again, after its deletion


def test_kafka_39_metadata_log() -> None:
    cfgd = topic_id_from_string("fp3Om62eQKSKFvDEF8qddg")
    assert has_metadata_log(KAFKA_39)
    assert read_metadata_topics(KAFKA_39) == {
        "cfgd": MetadataTopic(
            "cfgd",
            cfgd,
            2,
            1,
            (
                ("cleanup.policy", "compact"),
                ("min.cleanable.dirty.ratio", "0.01"),
                ("segment.bytes", "2048"),
            ),
        )
    }  # plain was deleted


def test_topic_config_file_falls_back_to_kafka_metadata(tmp_path: Path) -> None:
    shutil.copytree(KAFKA_39, tmp_path, dirs_exist_ok=True)
    entry = TopicConfigFile(tmp_path).read()["cfgd"]
    assert entry == TopicEntry(
        topic_id_from_string("fp3Om62eQKSKFvDEF8qddg"),
        2,
        1,
        {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01", "segment.bytes": "2048"},
    )
    TopicConfigFile(tmp_path).write({"other": TopicEntry(ID_A, 3)})  # kafkalog's own file wins
    assert TopicConfigFile(tmp_path).read() == {"other": TopicEntry(ID_A, 3)}


def test_no_metadata_log_is_no_topics(tmp_path: Path) -> None:
    assert not has_metadata_log(tmp_path)
    assert read_metadata_topics(tmp_path) == {} == TopicConfigFile(tmp_path).read()


# -- Kafka's records, built here (field layouts: cluster_metadata_log.py) -----------------------


def _frame(api_key: int, version: int, body: bytes) -> bytes:
    return encode_uvarint(1) + encode_uvarint(api_key) + encode_uvarint(version) + body


def _str(s: str | None) -> bytes:
    if s is None:
        return b"\x00"
    raw = s.encode()
    return encode_uvarint(len(raw) + 1) + raw


def topic_record(name: str, topic_id: uuid.UUID) -> bytes:
    return _frame(2, 0, _str(name) + topic_id.bytes + b"\x00")


def partition_record(topic_id: uuid.UUID, partition: int, replicas: int = 1) -> bytes:
    body = partition.to_bytes(4, "big") + topic_id.bytes + encode_uvarint(replicas + 1)
    body += b"".join(r.to_bytes(4, "big") for r in range(replicas))
    body += b"\x01\x00\x00\x01" + b"\x00" * 12 + b"\x01\x00"  # isr .. directories: not read
    return _frame(3, 1, body)


def config_record(topic: str, name: str, value: str | None, resource_type: int = 2) -> bytes:
    return _frame(4, 0, bytes([resource_type]) + _str(topic) + _str(name) + _str(value) + b"\x00")


def remove_topic_record(topic_id: uuid.UUID) -> bytes:
    return _frame(9, 0, topic_id.bytes + b"\x00")


def batch(base_offset: int, *values: bytes, control: bool = False) -> bytes:
    b = MemoryRecordsBuilder(base_offset, is_control=control)
    for v in values:
        b.append(None, T0, None, v)
    return b.build()


def write_metadata(log_dir: Path, name: str, *batches: bytes) -> Path:
    folder = log_dir / METADATA_DIR
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_bytes(b"".join(batches))
    return path


def test_deletes_recreation_and_config_changes(tmp_path: Path) -> None:
    write_metadata(
        tmp_path,
        "00000000000000000000.log",
        batch(
            0,
            topic_record("a", ID_A),
            partition_record(ID_A, 0, 3),
            config_record("a", "retention.ms", "1000"),
            config_record("a", "segment.ms", "5"),
            config_record("", "log.retention.ms", "7", resource_type=4),
            config_record("a", "confluent.unknown", "x"),
        ),
        batch(
            6,
            _frame(20, 0, b"\x00"),
            partition_record(ID_A, 1, 3),
            config_record("a", "segment.ms", None),
        ),
        batch(
            9,
            topic_record("b", ID_B),
            partition_record(ID_B, 0),
            config_record("b", "cleanup.policy", "compact"),
            remove_topic_record(ID_B),
        ),
        batch(13, topic_record("b", ID_B3), partition_record(ID_B3, 0)),
    )
    assert read_metadata_topics(tmp_path) == {
        "a": MetadataTopic("a", ID_A, 2, 3, (("retention.ms", "1000"),)),
        "b": MetadataTopic("b", ID_B3, 1, 1, ()),
    }


def test_snapshot_then_the_log_after_it(tmp_path: Path) -> None:
    write_metadata(
        tmp_path,
        "00000000000000000003-0000000001.checkpoint",
        batch(0, b"snapshot header", control=True),
        batch(
            0,
            topic_record("a", ID_A),
            partition_record(ID_A, 0),
            config_record("a", "retention.ms", "1"),
        ),
    )
    write_metadata(
        tmp_path,
        "00000000000000000000.log",
        batch(
            0,
            topic_record("old", ID_B),
            partition_record(ID_B, 0),
            config_record("old", "retention.ms", "2"),
        ),
        batch(3, partition_record(ID_A, 1), config_record("a", "retention.ms", "9")),
    )
    assert read_metadata_topics(tmp_path) == {
        "a": MetadataTopic("a", ID_A, 2, 1, (("retention.ms", "9"),))
    }


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (_frame(2, 0, b"\x05ab"), "TopicRecord.Name needs 4 bytes"),
        (b"\x02\x02\x00", "frame version 2"),
        (_frame(4, 0, b"\x02\x02a"), "ConfigRecord.Name"),
    ],
)
def test_undecodable_record_names_file_and_offset(tmp_path: Path, value: bytes, reason) -> None:
    path = write_metadata(
        tmp_path, "00000000000000000000.log", batch(0, topic_record("a", ID_A)), batch(1, value)
    )
    where = re.escape(str(path))
    with pytest.raises(
        CheckpointError,
        match=f"{where}: the KRaft metadata record at offset 1 does not decode: .*{reason}",
    ):
        read_metadata_topics(tmp_path)


def test_bad_config_value_names_metadata_log_and_topic(tmp_path: Path) -> None:
    write_metadata(
        tmp_path,
        "00000000000000000000.log",
        batch(
            0,
            topic_record("a", ID_A),
            partition_record(ID_A, 0),
            config_record("a", "retention.ms", "soon"),
        ),
    )
    where = re.escape(str(tmp_path / METADATA_DIR))
    with pytest.raises(
        CheckpointError, match=f"{where}: topic 'a': invalid value 'soon' for retention.ms"
    ):
        TopicConfigFile(tmp_path).read()


def test_corrupt_batch_names_the_file(tmp_path: Path) -> None:
    data = bytearray(batch(0, topic_record("a", ID_A)))
    data[16] = 7  # the magic byte
    path = write_metadata(tmp_path, "00000000000000000000.log", bytes(data))
    with pytest.raises(
        CheckpointError, match=f"{re.escape(str(path))}: Kafka's metadata log does not decode"
    ):
        read_metadata_topics(tmp_path)
