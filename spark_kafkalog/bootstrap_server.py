"""``kafkalog topics|produce|consume --bootstrap-server HOST:PORT[,...]``: the same commands as
with ``--log-dir``, against a running broker (``kafkalog serve`` or any Kafka broker) over
Kafka's protocol, through :class:`~broker_embedded.client.kafka_client.KafkaClient`.

- ``topics``: create/delete are CreateTopics/DeleteTopics; list is Metadata of every topic;
  describe is Metadata (leader, replicas, ISR, leader epoch, topic id), ListOffsets per
  partition (log start offset: earliest; high watermark: latest; last stable offset: latest
  with read_committed; log end offset: latest with Kafka's debugging replica id -2) and
  DescribeConfigs (overrides: the DYNAMIC_TOPIC_CONFIG ones; effective: every value). Output is
  the log-dir command's (topics_command.write_description).
- ``produce``: the topic's metadata asked as Kafka's producer asks it (auto-creation allowed,
  LEADER_NOT_AVAILABLE retried, bounded: ``KafkaClient.producer_topic``), so a broker that
  auto-creates topics creates it, as for ``kafka-console-producer``; :class:`WireTarget`
  builds each batch as the embedded producer does (``producer_record.build_batch``, the
  client's clock as CreateTime) and sends one Produce to the partition's leader.
- ``consume``: :class:`WireSource`: partitions from Metadata, the start and end from ListOffsets
  (end: the high watermark, or with read_committed the last stable offset, as the command
  starts each partition), then Fetch requests of at most ``FETCH_MAX_BYTES`` (1 MiB) decoded by
  the columnar decoder, so the output is byte for byte what ``consume --log-dir`` prints.

``--command-config FILE`` (all of them, and ``groups``): Kafka's client properties file, whose
``security.protocol``, ``ssl.*`` and ``sasl.*`` (``sasl.jaas.config`` included) secure the
connection as for Kafka's tools (:func:`client_config`).

Needs kio (Python 3.11+), imported with the client: the command line imports this module only
for ``--bootstrap-server``. Not thread-safe (one client, one command).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import pyarrow as pa

from broker_embedded.client.broker_connection import ClientConfig
from broker_embedded.client.client_security import ClientSecurity
from broker_embedded.client.kafka_client import (
    DEBUGGING_REPLICA_ID,
    EARLIEST,
    LATEST,
    KafkaClient,
    TopicInfo,
)
from broker_embedded.common.producer_record import ProducerRecord, build_batch
from broker_embedded.record.compression import CompressionType
from broker_embedded.storage.fetch_data_info import FetchIsolation
from broker_embedded.storage.partition_metadata import topic_id_to_string
from broker_embedded.storage.topic_partition import TopicPartition
from spark_kafkalog.console_consumer import (
    FETCH_MAX_BYTES,
    Fetched,
    PartitionOffsets,
    StartAt,
    decode_fetches,
    resolve,
)
from spark_kafkalog.topics_command import CommandError, parse_assignments, write_description

READ_UNCOMMITTED, READ_COMMITTED = 0, 1
_PROPERTY = re.compile(r"([^=:\s]+)\s*[=:\s]\s*(.*)")


def run_topics(
    action: str,
    client: KafkaClient,
    out: TextIO,
    *,
    name: str | None = None,
    partitions: int = 1,
    replication_factor: int = 1,
    configs: Iterable[str] = (),
    as_json: bool = False,
) -> int:
    """One ``kafkalog topics ACTION --bootstrap-server``; errors raise KafkaLogError."""
    if action == "create":
        assert name is not None
        overrides = parse_assignments(configs, "--config")
        client.create_topic(name, partitions, replication_factor, overrides)
        out.write(f"Created topic {name}.\n")
    elif action == "delete":
        assert name is not None
        client.delete_topic(name)
        out.write(f"Deleted topic {name}.\n")
    elif action == "list":
        for topic in sorted(t.name for t in client.metadata()):
            out.write(topic + "\n")
    else:
        topics = client.metadata(None if name is None else [name])
        for info in sorted(topics, key=lambda t: t.name):
            write_description(describe_one(client, info), out, as_json=as_json)
    return 0


def describe_one(client: KafkaClient, info: TopicInfo) -> dict:
    """What ``describe --json`` prints for one topic (topics_command.describe_one's dict)."""
    configs = client.topic_configs(info.name)
    partitions = [
        {
            "partition": p.partition,
            "leader": p.leader,
            "leaderEpoch": p.leader_epoch,
            "replicas": list(p.replicas),
            "isr": list(p.isr),
            **_offsets(client, info.name, p.partition),
        }
        for p in info.partitions
    ]
    return {
        "topic": info.name,
        "topicId": topic_id_to_string(info.topic_id) if info.topic_id is not None else "",
        "partitionCount": len(info.partitions),
        "replicationFactor": len(info.partitions[0].replicas) if info.partitions else 0,
        "configs": dict(sorted((c.name, c.value) for c in configs if c.is_override)),
        "effectiveConfigs": {c.name: c.value for c in configs},
        "partitions": partitions,
    }


def _offsets(client: KafkaClient, topic: str, partition: int) -> dict[str, int]:
    def offset(timestamp: int, isolation_level: int = READ_UNCOMMITTED, replica_id: int = -1):
        return client.list_offset(
            topic, partition, timestamp, isolation_level=isolation_level, replica_id=replica_id
        )

    return {
        "logStartOffset": offset(EARLIEST),
        "highWatermark": offset(LATEST),
        "lastStableOffset": offset(LATEST, READ_COMMITTED),
        "logEndOffset": offset(LATEST, replica_id=DEBUGGING_REPLICA_ID),
    }


@dataclass(frozen=True)
class WireTarget:
    """The console producer's batches as Produce requests (console_producer.ProduceTarget)."""

    client: KafkaClient

    def partition_count(self, topic: str) -> int:
        # as Kafka's producer: a broker that auto-creates topics creates this one
        return len(self.client.producer_topic(topic).partitions)

    def max_message_bytes(self, topic: str) -> int:
        values = {c.name: c.value for c in self.client.topic_configs(topic)}
        return int(values["max.message.bytes"] or 0)

    def produce(
        self,
        topic: str,
        partition: int,
        records: list[ProducerRecord],
        acks: int,
        compression: CompressionType,
    ) -> tuple[int, int]:
        now_ms = time.time_ns() // 1_000_000
        batch = build_batch(records, now_ms=now_ms, compression=compression)
        base = self.client.produce(topic, partition, batch, acks=acks)
        return (base, base + len(records) - 1) if base >= 0 else (-1, -1)


@dataclass(frozen=True)
class WireSource:
    """A topic read with Fetch requests (console_consumer.RecordSource)."""

    client: KafkaClient
    bootstrap: str

    def partitions(self, topic: str) -> list[int]:
        return [p.partition for p in self.client.topic(topic).partitions]

    @property
    def where(self) -> str:
        return f"on the brokers at {self.bootstrap}"

    def batches(
        self, tp: TopicPartition, start: StartAt, isolation: FetchIsolation
    ) -> Iterator[pa.RecordBatch]:
        level = READ_COMMITTED if isolation is FetchIsolation.TXN_COMMITTED else READ_UNCOMMITTED

        def offset(ts: int, isolation_level: int = READ_UNCOMMITTED) -> int:
            return self.client.list_offset(
                tp.topic, tp.partition, ts, isolation_level=isolation_level
            )

        hw = offset(LATEST)
        end = offset(LATEST, level) if level == READ_COMMITTED else hw
        offsets = PartitionOffsets(offset(EARLIEST), hw, end)

        def find_offset(ms: int) -> int | None:
            found = offset(ms, level)
            return None if found < 0 else found

        bounds = resolve(tp, offsets, start, find_offset)

        def fetch(at: int) -> Fetched:
            f = self.client.fetch(tp.topic, tp.partition, at, FETCH_MAX_BYTES, level)
            aborted = None if f.aborted_transactions is None else list(f.aborted_transactions)
            return Fetched(f.records, aborted)

        source = f"broker {self.bootstrap}"
        return decode_fetches(fetch, tp, bounds, source)


def open_client(bootstrap: str, command_config: Path | None = None) -> KafkaClient:
    """A client of the brokers at ``bootstrap`` (``HOST:PORT[,...]``; connects on first use),
    with the security properties of ``--command-config``."""
    return KafkaClient(bootstrap, client_config(command_config))


def client_config(command_config: Path | None) -> ClientConfig:
    """``--command-config FILE``: Kafka's client properties file (``key=value`` lines, ``#`` and
    ``!`` comments, a trailing backslash continues the line), as Kafka's tools take it; its
    security properties (client_security.py) secure the connections. Any other property, or a
    file that cannot be read, is a :class:`CommandError` naming the file."""
    if command_config is None:
        return ClientConfig()
    try:
        text = Path(command_config).read_text("utf-8")
        return ClientConfig(security=ClientSecurity.from_properties(read_properties(text)))
    except (OSError, ValueError) as e:
        raise CommandError(f"--command-config {command_config}: {e}") from None


def read_properties(text: str) -> dict[str, str]:
    """A Java ``.properties`` text's keys and values (``=``, ``:`` or a space separates)."""
    out: dict[str, str] = {}
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.strip()
        pending = ""
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending = line[:-1]
            continue
        if not line or line[0] in "#!":
            continue
        match = _PROPERTY.match(line)
        key, value = (match[1], match[2]) if match else (line, "")
        out[key] = value
    return out
