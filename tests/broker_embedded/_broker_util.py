"""Helpers for the broker tests: one-partition fetches, the bytes of a partition's log files and
decoding with kafka-python (an independent implementation)."""

from __future__ import annotations

import time
import warnings
from pathlib import Path

from broker_embedded.broker import Broker
from broker_embedded.common.fetch_request import (
    FetchRequest,
    PartitionFetch,
    PartitionFetchResult,
)
from broker_embedded.storage.fetch_data_info import IsolationLevel
from broker_embedded.storage.topic_partition import TopicPartition

with warnings.catch_warnings():  # kafka-python's import-time DeprecationWarnings (its own code)
    warnings.simplefilter("ignore", DeprecationWarning)
    from tests.broker_embedded.record._peers import PeerBatch, kafka_python_read

NOW = int(time.time()) * 1000  # record timestamps: recent enough for a 7-day retention.ms


def fetch_one(
    broker: Broker,
    topic: str,
    partition: int,
    offset: int,
    *,
    partition_max_bytes: int = 1 << 20,
    current_leader_epoch: int = -1,
    **request: object,
) -> PartitionFetchResult:
    """A fetch of one partition that does not wait (unless ``max_wait_ms`` is given)."""
    request.setdefault("max_wait_ms", 0)
    pf = PartitionFetch(
        TopicPartition(topic, partition), offset, partition_max_bytes, current_leader_epoch
    )
    response = broker.fetch(FetchRequest((pf,), **request))  # type: ignore[arg-type]
    assert len(response.partitions) == 1
    return response.partitions[0]


def read_committed(broker: Broker, topic: str, partition: int, offset: int) -> PartitionFetchResult:
    return fetch_one(
        broker, topic, partition, offset, isolation_level=IsolationLevel.READ_COMMITTED
    )


def log_bytes(broker: Broker, topic: str, partition: int) -> bytes:
    """The concatenated ``.log`` files of a partition, read from disk."""
    directory = Path(broker.log_dir) / f"{topic}-{partition}"
    return b"".join(p.read_bytes() for p in sorted(directory.glob("*.log")))


def peer_batches(data: bytes) -> list[PeerBatch]:
    """What kafka-python reads from a run of batches (it drops a partial last batch)."""
    return kafka_python_read(data)


def peer_values(data: bytes) -> list[tuple[int, bytes | None]]:
    """(offset, value) of every data record kafka-python finds (control batches skipped)."""
    return [(r.offset, r.value) for b in peer_batches(data) if not b.is_control for r in b.records]


def checkpoint(log_dir: Path, name: str) -> dict[tuple[str, int], int]:
    """A log dir checkpoint file (Kafka's text layout: version 0, count, then "topic partition
    offset" lines) as {(topic, partition): offset}, parsed here independently."""
    lines = (Path(log_dir) / name).read_text("utf-8").splitlines()
    assert lines[0] == "0" and int(lines[1]) == len(lines) - 2, lines
    out = {}
    for line in lines[2:]:
        topic, partition, offset = line.split()
        out[(topic, int(partition))] = int(offset)
    return out
