"""A confluent-kafka consumer that reads assigned partitions to their end, for tests that check
what a topic holds with an independent client (read_committed or read_uncommitted)."""

from __future__ import annotations

import time

import confluent_kafka
from confluent_kafka import Consumer, KafkaException
from confluent_kafka import TopicPartition as CTP


def consume(
    bootstrap: str, topic: str, partitions: int, isolation: str, timeout_s: float = 60.0
) -> list[tuple[int, bytes, bytes, int, int]]:
    """(partition, key, value, timestamp type, timestamp) of every record of ``topic`` a
    consumer with ``isolation`` reads up to the end of each partition (the LSO under
    read_committed), in order per partition; AssertionError if an end is not reached within
    ``timeout_s``."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "check",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        c.assign([CTP(topic, p, 0) for p in range(partitions)])
        got, eof = [], set()
        deadline = time.monotonic() + timeout_s
        while len(eof) < partitions and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() == confluent_kafka.KafkaError._PARTITION_EOF:
                    eof.add(m.partition())
                    continue
                raise KafkaException(m.error())
            got.append((m.partition(), m.key(), m.value(), *m.timestamp()))
        assert len(eof) == partitions, f"no EOF on every partition within {timeout_s} s"
        return got
    finally:
        c.close()
