"""Log dirs for the compaction job tests, and the plain-Python model of what was produced.

Records are produced through an embedded broker whose own cleaner is off (the job does the
cleaning). The model keeps every record produced, by partition and offset; "latest value per
key" is computed from it with dicts, independently of the cleaner.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

from broker_embedded.broker import Broker
from broker_embedded.broker_config import BrokerConfig
from broker_embedded.common.producer_record import ProducerRecord

NO_CLEANER = BrokerConfig(log_cleaner_threads=0)
SEGMENT_GLOB = "[0-9]" * 20 + ".log"

Row = tuple[int, bytes, bytes | None]  # offset, key, value


@dataclass
class TopicModel:
    """Every record produced to a topic: partition -> [(offset, key, value)]."""

    records: dict[int, list[Row]] = field(default_factory=dict)

    def latest(self) -> dict[tuple[int, bytes], tuple[int, bytes | None]]:
        """(partition, key) -> (offset, value) of the last record of each key."""
        out = {}
        for p, rows in self.records.items():
            for offset, key, value in rows:
                out[(p, key)] = (offset, value)
        return out

    def by_offset(self) -> dict[tuple[int, int], tuple[bytes, bytes | None]]:
        return {(p, o): (k, v) for p, rows in self.records.items() for o, k, v in rows}

    @property
    def count(self) -> int:
        return sum(len(rows) for rows in self.records.values())


def produce_updates(
    broker: Broker,
    topic: str,
    partitions: int,
    *,
    keys: int,
    batches: int,
    per_batch: int = 50,
    seed: int = 1,
    tombstone_rate: float = 0.05,
    value_bytes: int = 80,
    model: TopicModel | None = None,
) -> TopicModel:
    """Keyed updates (some tombstones) to every partition of ``topic``, recorded in a model."""
    rng = random.Random(seed)
    model = model or TopicModel()
    for p in range(partitions):
        rows = model.records.setdefault(p, [])
        for _ in range(batches):
            batch = []
            for _ in range(per_batch):
                key = b"key-%d" % rng.randrange(keys)
                value = None if rng.random() < tombstone_rate else rng.randbytes(value_bytes)
                batch.append(ProducerRecord(key=key, value=value))
            result = broker.produce(topic, p, batch, acks=1)
            assert result.error is None, result.error
            rows += [(result.base_offset + i, r.key, r.value) for i, r in enumerate(batch)]
    return model


def build_compacted(
    log_dir: Path,
    topic: str = "profiles",
    partitions: int = 4,
    *,
    keys: int = 300,
    batches: int = 120,
    segment_bytes: int = 100_000,
    seed: int = 1,
    extra_topics: bool = True,
    keep_open: bool = False,
) -> tuple[TopicModel, Broker | None]:
    """A log dir with a compacted topic full of updates (and, with ``extra_topics``, a topic
    with the delete policy that the job must leave alone)."""
    broker = Broker(log_dir, config=NO_CLEANER, create=True)
    config = {"cleanup.policy": "compact", "segment.bytes": segment_bytes}
    broker.create_topic(topic, partitions, config=config)
    model = produce_updates(broker, topic, partitions, keys=keys, batches=batches, seed=seed)
    if extra_topics:
        broker.create_topic("events", 2)
        for p in range(2):
            broker.produce("events", p, [ProducerRecord(value=b"e%d" % i) for i in range(20)])
    if keep_open:
        return model, broker
    broker.close()
    return model, None


def partition_files(log_dir: Path, topic: str, partition: int) -> dict[str, bytes]:
    """Every segment, index and snapshot file of a partition, by name (to prove no change)."""
    d = log_dir / f"{topic}-{partition}"
    return {f.name: f.read_bytes() for f in sorted(d.iterdir()) if f.is_file()}
