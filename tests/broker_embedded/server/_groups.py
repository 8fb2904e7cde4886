"""Helpers of the consumer group tests: bounded confluent-kafka consumers polled round-robin on
the test thread (librdkafka heartbeats from its own threads), producing a topic's records."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

TIMEOUT_S = 30.0
GROUP_BROKER_CONFIG = {
    "group_initial_rebalance_delay_ms": 0,
    "group_min_session_timeout_ms": 1_000,
}


def consumer_config(bootstrap: str, group: str, **extra: object) -> dict:
    return {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 300,
        "partition.assignment.strategy": "range",
        "topic.metadata.refresh.interval.ms": 1000,
        **extra,
    }


def produce(bootstrap: str, topic: str, partitions: int, per_partition: int, tag: str) -> set:
    """``per_partition`` records into each partition; the (partition, value) pairs sent."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    sent = set()
    for p in range(partitions):
        for i in range(per_partition):
            value = f"{tag}-{p}-{i}".encode()
            producer.produce(topic, value=value, partition=p)
            sent.add((p, value))
    assert producer.flush(TIMEOUT_S) == 0
    return sent


def assignments(consumers: Sequence) -> list[list[int]]:
    return [sorted(tp.partition for tp in c.assignment()) for c in consumers]


def poll_until(
    consumers: Sequence,
    done: Callable[[], bool],
    on_message: Callable[[object, object], None] | None = None,
    timeout: float = TIMEOUT_S,
) -> None:
    """Poll every consumer in turn until ``done()``; each message goes to ``on_message(c, m)``."""
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"not done after {timeout} s: {assignments(consumers)}"
        for c in consumers:
            m = c.poll(0.05)
            if m is not None and m.error() is None and on_message is not None:
                on_message(c, m)
