"""The ``--json`` outputs scripts rely on (docs/operating/index.md): ``kafkalog dump --summary
--json`` over a log dir Kafka wrote, field for field against kafka-python's reading of every
segment, and ``kafkalog topics describe --json``, the whole object, checked against the files
the broker wrote (partition.metadata, leader-epoch-checkpoint)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from kafka.record.memory_records import MemoryRecords

from tests.fixture_paths import FIXTURES

BITNAMI = FIXTURES / "kafka-logdirs" / "kafka-bitnami-rolled"
CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
# Kafka's topic configs with the broker's built-in defaults (conf/broker.toml), as strings
DEFAULTS = {
    "cleanup.policy": "delete",
    "segment.bytes": "1073741824",
    "segment.ms": "604800000",
    "segment.index.bytes": "10485760",
    "index.interval.bytes": "4096",
    "retention.ms": "604800000",
    "retention.bytes": "-1",
    "max.message.bytes": "1048588",
    "message.timestamp.type": "CreateTime",
    "min.insync.replicas": "1",
    "flush.messages": "9223372036854775807",
    "flush.ms": "9223372036854775807",
    "delete.retention.ms": "86400000",
    "min.compaction.lag.ms": "0",
    "max.compaction.lag.ms": "9223372036854775807",
    "min.cleanable.dirty.ratio": "0.5",
    "compression.type": "producer",
    "file.delete.delay.ms": "60000",
    "remote.storage.enable": "false",
    "local.retention.ms": "-2",
    "local.retention.bytes": "-2",
    "remote.log.copy.disable": "false",
    "remote.log.delete.on.disable": "false",
    "unclean.leader.election.enable": "false",
}


def kafka_python_summary(segment: Path) -> dict:
    """The summary fields of one segment, from kafka-python's batches."""
    records = MemoryRecords(segment.read_bytes())
    batches = []
    while (batch := records.next_batch()) is not None:
        batches.append(batch)
    codecs: dict[str, int] = {}
    for b in batches:
        codecs[CODECS[b.compression_type]] = codecs.get(CODECS[b.compression_type], 0) + 1
    topic, _, partition = segment.parent.name.rpartition("-")
    return {
        "summary": str(segment),
        "topic": topic,
        "partition": int(partition),
        "segmentBaseOffset": int(segment.stem),
        "batches": len(batches),
        "records": sum(b.records_count for b in batches),
        "bytes": sum(b.size_in_bytes for b in batches),
        "firstOffset": batches[0].base_offset if batches else None,
        "lastOffset": batches[-1].last_offset if batches else None,
        "codecs": codecs,
        "invalidCrcs": sum(not b.validate_crc() for b in batches),
    }


def test_dump_summary_json_of_a_kafka_log_dir(cli, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    shutil.copytree(BITNAMI, logs)
    code, out, err = cli("dump --summary --json --verify", logs)
    assert (code, err) == (0, "")
    segments = sorted(logs.glob("*/*.log"))
    expected = [kafka_python_summary(s) for s in segments]
    assert [json.loads(line) for line in out.splitlines()] == expected
    assert sum(e["records"] for e in expected) > 0
    assert all(e["bytes"] == Path(e["summary"]).stat().st_size for e in expected)


def test_dump_summary_json_of_a_file_outside_a_partition_dir(cli, tmp_path: Path) -> None:
    seg = tmp_path / "copy.log"
    shutil.copy(next(BITNAMI.glob("product-created-events-topic-0/*.log")), seg)
    code, out, _ = cli("dump --summary --json", seg)
    (line,) = out.splitlines()
    row = json.loads(line)
    assert (code, row["topic"], row["partition"], row["segmentBaseOffset"]) == (0, None, None, None)


def test_topics_describe_json_is_the_documented_object(cli, tmp_path: Path) -> None:
    d = tmp_path / "logs"
    create = f"topics create orders --partitions 2 --config retention.ms=3600000 --log-dir {d}"
    assert cli(create)[0] == 0
    assert cli(f"produce --topic orders --partition 1 --log-dir {d}", stdin=b"a\nb\n")[0] == 0
    code, out, err = cli(f"topics describe orders --json --log-dir {d}")
    assert (code, err) == (0, "")
    (line,) = out.splitlines()
    topic_id = (d / "orders-0" / "partition.metadata").read_text().split("topic_id: ")[1].strip()
    # leader-epoch-checkpoint: version, count, then "epoch start_offset" lines
    epoch_1 = (d / "orders-1" / "leader-epoch-checkpoint").read_text().split("\n")[-2].split()
    assert json.loads(line) == {
        "topic": "orders",
        "topicId": topic_id,
        "partitionCount": 2,
        "replicationFactor": 1,
        "configs": {"retention.ms": "3600000"},
        "effectiveConfigs": DEFAULTS | {"retention.ms": "3600000"},
        "partitions": [
            {
                "partition": 0,
                "leader": 0,
                "leaderEpoch": 0,
                "replicas": [0],
                "isr": [0],
                "logStartOffset": 0,
                "highWatermark": 0,
                "lastStableOffset": 0,
                "logEndOffset": 0,
            },
            {
                "partition": 1,
                "leader": 0,
                "leaderEpoch": int(epoch_1[0]),
                "replicas": [0],
                "isr": [0],
                "logStartOffset": 0,
                "highWatermark": 2,
                "lastStableOffset": 2,
                "logEndOffset": 2,
            },
        ],
    }
    assert list(json.loads(line)) == [
        "topic",
        "topicId",
        "partitionCount",
        "replicationFactor",
        "configs",
        "effectiveConfigs",
        "partitions",
    ]
