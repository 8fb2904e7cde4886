"""The topics of a log dir and their configuration: ``<log dir>/kafkalog-topics.json``.

Kafka keeps topic metadata in its metadata log; an embedded broker keeps it beside the partitions
so that a process opening the log dir read-only (a Spark planner or executor) learns each topic's
id, partition count and config without a broker. Layout (UTF-8 JSON, indented by one space,
topics and config names sorted, a final newline)::

    {"version": 1,
     "topics": {"<topic>": {"topic_id": "<base64url uuid, no padding>",
                            "partitions": <int>, "replication_factor": <int>,
                            "config": {"<kafka config name>": "<value>", ...}}}}

``config`` holds only the topic's overrides (Kafka's names, validated by log_config.py); the
effective config is the broker defaults overlaid with them. Written atomically (tmp, fsync,
rename). A missing file is the topics of Kafka's metadata log when the log dir has one (a log
dir Apache Kafka wrote in KRaft mode: cluster_metadata_log.py), else no topics; a malformed one
(not JSON, another version, a missing or mistyped field, an illegal topic name or id, an unknown
config or a bad value) is a :class:`CheckpointError` naming the file and the topic; so is a
metadata log that does not decode or holds a value kafkalog cannot parse. Values are
immutable; one writer per log dir (the log dir lock); readers anywhere.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from broker_embedded.errors import CheckpointError, KafkaLogError
from broker_embedded.storage.checkpoint_file import write_atomically
from broker_embedded.storage.cluster_metadata_log import METADATA_DIR, read_metadata_topics
from broker_embedded.storage.log_config import LogConfig, parse_overrides
from broker_embedded.storage.partition_metadata import topic_id_from_string, topic_id_to_string
from broker_embedded.storage.topic_partition import validate_topic

TOPIC_CONFIG_FILE = "kafkalog-topics.json"
VERSION = 1


@dataclass(frozen=True)
class TopicEntry:
    """One topic: its id, partition count, replication factor and config overrides."""

    topic_id: uuid.UUID
    partitions: int
    replication_factor: int = 1
    config: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    def log_config(self, defaults: LogConfig, topic: str) -> LogConfig:
        return defaults.with_overrides(self.config, topic)

    def to_json(self) -> dict:
        return {
            "topic_id": topic_id_to_string(self.topic_id),
            "partitions": self.partitions,
            "replication_factor": self.replication_factor,
            "config": dict(sorted(self.config.items())),
        }


class TopicConfigFile:
    """``kafkalog-topics.json`` at the top of a log dir."""

    __slots__ = ("path",)

    def __init__(self, log_dir: str | Path) -> None:
        self.path = Path(log_dir) / TOPIC_CONFIG_FILE

    def read(self) -> dict[str, TopicEntry]:
        """The topics, by name; without the file, those of Kafka's metadata log ({} without
        one either)."""
        try:
            data = json.loads(self.path.read_bytes())
        except FileNotFoundError:
            return self._kafka_topics()
        except (ValueError, OSError) as e:
            raise CheckpointError(f"{self.path}: not valid JSON: {e}") from None
        if not isinstance(data, dict) or data.get("version") != VERSION:
            version = data.get("version") if isinstance(data, dict) else None
            raise CheckpointError(f"{self.path}: unsupported version {version!r} (expected 1)")
        topics = data.get("topics")
        if not isinstance(topics, dict):
            raise CheckpointError(f"{self.path}: 'topics' is not an object")
        found = {}
        for topic, e in topics.items():
            try:
                found[validate_topic(topic)] = self._entry(topic, e)
            except KeyError as err:
                raise CheckpointError(
                    f"{self.path}: topic {topic!r} has no {err.args[0]!r}"
                ) from None
            except (TypeError, ValueError, KafkaLogError) as err:
                raise CheckpointError(f"{self.path}: topic {topic!r}: {err}") from None
        return found

    def _kafka_topics(self) -> dict[str, TopicEntry]:
        found = {}
        for name, t in read_metadata_topics(self.path.parent).items():
            config = dict(t.config)
            try:
                parse_overrides(config, name)
            except KafkaLogError as err:
                raise CheckpointError(
                    f"{self.path.parent / METADATA_DIR}: topic {name!r}: {err}"
                ) from None
            found[name] = TopicEntry(
                t.topic_id, t.partitions, t.replication_factor, MappingProxyType(config)
            )
        return found

    @staticmethod
    def _entry(topic: str, e: object) -> TopicEntry:
        if not isinstance(e, dict) or not isinstance(e.get("config", {}), dict):
            raise TypeError("the entry and its 'config' must be JSON objects")
        config = {str(k): str(v) for k, v in e.get("config", {}).items()}
        parse_overrides(config, topic)
        partitions, rf = int(e["partitions"]), int(e.get("replication_factor", 1))
        if partitions < 1 or rf < 1:
            raise ValueError(f"topic {topic!r}: partitions and replication factor must be >= 1")
        return TopicEntry(
            topic_id_from_string(e["topic_id"]), partitions, rf, MappingProxyType(config)
        )

    def write(self, topics: Mapping[str, TopicEntry]) -> None:
        body = {"version": VERSION, "topics": {t: topics[t].to_json() for t in sorted(topics)}}
        write_atomically(self.path, (json.dumps(body, indent=1) + "\n").encode("utf-8"))
