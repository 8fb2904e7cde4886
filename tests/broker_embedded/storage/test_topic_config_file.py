"""kafkalog-topics.json: exact bytes, round trip, effective config, and every malformed file
reported as a CheckpointError naming the file."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from broker_embedded.errors import CheckpointError
from broker_embedded.storage.log_config import LogConfig
from broker_embedded.storage.topic_config_file import TOPIC_CONFIG_FILE, TopicConfigFile, TopicEntry

ID_A = uuid.UUID("00000000-0000-0000-0000-000000000001")  # AAAAAAAAAAAAAAAAAAAAAQ
ID_B = uuid.UUID("b1a2c3d4-e5f6-4789-8abc-def012345678")


def test_writes_exact_bytes_and_reads_them_back(tmp_path: Path) -> None:
    f = TopicConfigFile(tmp_path)
    topics = {
        "zeta": TopicEntry(ID_B, 3, 2, {"segment.ms": "60000", "cleanup.policy": "compact"}),
        "alpha": TopicEntry(ID_A, 1),
    }
    f.write(topics)
    assert (tmp_path / TOPIC_CONFIG_FILE).read_text("utf-8") == (
        '{\n "version": 1,\n "topics": {\n  "alpha": {\n   "topic_id": "AAAAAAAAAAAAAAAAAAAAAQ",\n'
        '   "partitions": 1,\n   "replication_factor": 1,\n   "config": {}\n  },\n'
        '  "zeta": {\n   "topic_id": "saLD1OX2R4mKvN7wEjRWeA",\n   "partitions": 3,\n'
        '   "replication_factor": 2,\n   "config": {\n    "cleanup.policy": "compact",\n'
        '    "segment.ms": "60000"\n   }\n  }\n }\n}\n'
    )
    assert f.read() == topics
    assert not (tmp_path / f"{TOPIC_CONFIG_FILE}.tmp").exists()
    f.write({"alpha": topics["alpha"]})  # replaced whole
    assert f.read() == {"alpha": TopicEntry(ID_A, 1)}


def test_missing_file_is_no_topics(tmp_path: Path) -> None:
    assert TopicConfigFile(tmp_path).read() == {}


def test_effective_config_overlays_the_overrides_on_the_defaults() -> None:
    defaults = LogConfig().with_overrides({"segment.bytes": "4096", "retention.ms": "1000"})
    e = TopicEntry(ID_A, 1, 1, {"retention.ms": "5", "cleanup.policy": "compact,delete"})
    config = e.log_config(defaults, "t")
    assert (config.segment_bytes, config.retention_ms) == (4096, 5)
    assert (config.compact, config.delete) == (True, True)


GOOD = {"topic_id": "AAAAAAAAAAAAAAAAAAAAAQ", "partitions": 1}

MALFORMED = {
    "not_json": (b"{oops", "not valid JSON"),
    "a_list": (b"[1, 2]", "unsupported version None"),
    "version_2": ({"version": 2, "topics": {}}, "unsupported version 2"),
    "topics_a_list": ({"version": 1, "topics": []}, "'topics' is not an object"),
    "entry_a_string": ({"version": 1, "topics": {"t": "x"}}, "topic 't': the entry"),
    "config_null": ({"version": 1, "topics": {"t": {**GOOD, "config": None}}}, "'config' must"),
    "no_partitions": (
        {"version": 1, "topics": {"t": {"topic_id": GOOD["topic_id"]}}},
        "topic 't' has no 'partitions'",
    ),
    "zero_partitions": (
        {"version": 1, "topics": {"t": {**GOOD, "partitions": 0}}},
        "partitions and replication factor must be >= 1",
    ),
    "bad_topic_id": (
        {"version": 1, "topics": {"t": {**GOOD, "topic_id": "short"}}},
        "topic id 'short'",
    ),
    "illegal_topic_name": ({"version": 1, "topics": {"a/b": GOOD}}, "topic 'a/b'"),
    "unknown_config": (
        {"version": 1, "topics": {"t": {**GOOD, "config": {"segment.size": 1}}}},
        "unknown config 'segment.size' for topic 't'",
    ),
    "bad_config_value": (
        {"version": 1, "topics": {"t": {**GOOD, "config": {"retention.ms": "x"}}}},
        "invalid value 'x' for retention.ms",
    ),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_file_is_a_checkpoint_error_naming_it(tmp_path: Path, case: str) -> None:
    content, fragment = MALFORMED[case]
    path = tmp_path / TOPIC_CONFIG_FILE
    path.write_bytes(content if isinstance(content, bytes) else json.dumps(content).encode())
    with pytest.raises(CheckpointError) as e:
        TopicConfigFile(tmp_path).read()
    assert str(e.value).startswith(f"{path}: ") and fragment in str(e.value)
