"""Helpers for the embedded-cluster tests: a fast broker config, polling with a deadline, and
reading a replica's log (records, file bytes, leader-epoch-checkpoint) straight from a broker."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from broker_embedded.broker import Broker
from broker_embedded.broker_config import BrokerConfig
from broker_embedded.cluster import EmbeddedCluster
from broker_embedded.common.fetch_request import (
    FetchRequest,
    PartitionFetch,
    PartitionFetchResult,
)
from broker_embedded.record.record_batch import RecordBatch
from broker_embedded.record.records import iter_batches
from broker_embedded.storage.leader_epoch_checkpoint import LEADER_EPOCH_CHECKPOINT
from broker_embedded.storage.topic_partition import TopicPartition
from broker_embedded.storage.unified_log import UnifiedLog

T = TypeVar("T")

DEADLINE_S = 20.0  # generous: these tests poll, and a loaded CI machine is slow


def fast_config(
    *, lag_ms: int = 1_500, fetch_wait_ms: int = 50, backoff_ms: int = 50
) -> BrokerConfig:
    """Small replication timings, so that ISR changes happen within a test."""
    return dataclasses.replace(
        BrokerConfig(),
        replica_lag_time_max_ms=lag_ms,
        replica_fetch_wait_max_ms=fetch_wait_ms,
        replica_fetch_backoff_ms=backoff_ms,
    )


def wait_until(
    condition: Callable[[], T], what: str, timeout_s: float = DEADLINE_S, interval_s: float = 0.01
) -> T:
    """Poll ``condition`` until it returns something truthy (returned); fail after the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"not within {timeout_s} s: {what}")
        time.sleep(interval_s)


def log_of(broker: Broker, tp: TopicPartition) -> UnifiedLog:
    lg = broker.log_manager.get_log(tp)
    assert lg is not None, f"broker {broker.broker_id} has no log for {tp}"
    return lg


def records_of(lg: UnifiedLog) -> list[tuple[int, bytes | None, int]]:
    """(offset, value, partition leader epoch) of every record in a log."""
    return [
        (r.offset, r.value, b.partition_leader_epoch) for b in lg.batches() for r in b.records()
    ]


def values_at(lg: UnifiedLog) -> dict[int, bytes | None]:
    return {offset: value for offset, value, _ in records_of(lg)}


def log_file_bytes(broker: Broker, tp: TopicPartition) -> bytes:
    """The concatenated ``.log`` segment files of a replica, as on disk."""
    directory = Path(broker.log_dir) / tp.dir_name
    return b"".join(p.read_bytes() for p in sorted(directory.glob("*.log")))


def epoch_file_bytes(broker: Broker, tp: TopicPartition) -> bytes:
    return (Path(broker.log_dir) / tp.dir_name / LEADER_EPOCH_CHECKPOINT).read_bytes()


def fetched_records(result: PartitionFetchResult) -> list[tuple[int, bytes | None]]:
    """(offset, value) of the complete batches of a fetch result."""
    out = []
    for b in iter_batches(result.records, "<fetch>", tail="stop"):
        assert isinstance(b, RecordBatch)
        out.extend((r.offset, r.value) for r in b.records())
    return out


def consumer_fetch(
    target: EmbeddedCluster | Broker,
    tp: TopicPartition,
    offset: int,
    *,
    max_wait_ms: int = 0,
    timeout_ms: int = 10_000,
) -> PartitionFetchResult:
    """A read_uncommitted consumer fetch of one partition (through the leader, for a cluster)."""
    request = FetchRequest((PartitionFetch(tp, offset),), max_wait_ms=max_wait_ms)
    if isinstance(target, EmbeddedCluster):
        return target.fetch(request, timeout_ms=timeout_ms).partitions[0]
    return target.fetch(request).partitions[0]


def in_sync(cluster: EmbeddedCluster, tp: TopicPartition, brokers: list[int]) -> bool:
    """Every broker in ``brokers`` is in the ISR and has the leader's log end offset and HW."""
    state = cluster.controller.partition_state(tp)
    if state.leader < 0 or any(b not in state.isr for b in brokers):
        return False
    leader = log_of(cluster.brokers[state.leader], tp)
    for b in brokers:
        lg = log_of(cluster.brokers[b], tp)
        if (lg.log_end_offset, lg.high_watermark) != (leader.log_end_offset, leader.log_end_offset):
            return False
    return True
