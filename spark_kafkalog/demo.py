"""``kafkalog demo``: the main job on an embedded default log dir.

Writes a sample log dir with the project's own segment writer (an ``events`` topic of 3
partitions with every codec, keys and headers, and a keyed ``profiles`` topic), then verifies
every CRC and index entry and summarises it with ``kafkalog dump``, then decodes each partition
with the columnar decoder and prints a small aggregation. The directory is recreated each run.
Later issues turn this into the Spark demo.
"""

from __future__ import annotations

import random
import shutil
import time
from collections import Counter
from pathlib import Path
from typing import TextIO

import pyarrow.compute as pc

from broker_embedded.record.columnar_decoder import decode_records
from broker_embedded.record.compression import CompressionType
from broker_embedded.record.memory_records_builder import build_record_batch
from broker_embedded.record.record_batch import Record
from broker_embedded.storage.log_config import LogConfig
from broker_embedded.storage.log_dir import LogDir
from broker_embedded.storage.partition_metadata import new_topic_id
from broker_embedded.storage.segment_writer import SegmentWriter
from broker_embedded.storage.topic_partition import TopicPartition
from spark_kafkalog.dump_log import dump

EVENTS_PER_PARTITION = 60_000
RECORDS_PER_BATCH = 500
EVENT_TYPES = ("page_view", "click", "add_to_cart", "purchase", "search")
CODECS = tuple(CompressionType)
START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def _event_batches(partition: int, rng: random.Random):
    offset = 0
    ts = START_MS + partition
    while offset < EVENTS_PER_PARTITION:
        records = []
        for _ in range(RECORDS_PER_BATCH):
            user = rng.randrange(5_000)
            kind = rng.choice(EVENT_TYPES)
            ts += rng.randrange(1, 40)
            value = f'{{"user":{user},"type":"{kind}","amount":{rng.randrange(1, 500)}}}'
            headers = (("source", b"web" if user % 3 else b"app"), ("trace", None))
            records.append(Record(offset, ts, f"user-{user}".encode(), value.encode(), headers))
            offset += 1
        codec = CODECS[(offset // RECORDS_PER_BATCH) % len(CODECS)]
        yield build_record_batch(records, base_offset=records[0].offset, compression=codec)


def _profile_batches(rng: random.Random):
    offset = 0
    for _ in range(40):
        records = []
        for _ in range(RECORDS_PER_BATCH):
            user = rng.randrange(5_000)
            value = None if rng.random() < 0.02 else f'{{"tier":{rng.randrange(3)}}}'.encode()
            records.append(Record(offset, START_MS + offset, f"user-{user}".encode(), value, ()))
            offset += 1
        yield build_record_batch(records, base_offset=records[0].offset)


def write_sample(log_dir: Path, seed: int = 42) -> None:
    """Write the sample topics; 1 MiB segments so partitions roll."""
    rng = random.Random(seed)
    config = LogConfig(segment_bytes=1 << 20)
    topics = {
        "events": [_event_batches(p, rng) for p in range(3)],
        "profiles": [_profile_batches(rng)],
    }
    for topic, partitions in topics.items():
        topic_id = new_topic_id()
        cfg = (
            config.with_overrides({"cleanup.policy": "compact"}) if topic == "profiles" else config
        )
        for p, batches in enumerate(partitions):
            writer = SegmentWriter(log_dir, TopicPartition(topic, p), cfg, topic_id=topic_id)
            for batch in batches:
                writer.append(batch)
            writer.close()


def aggregate(log_dir: Path, out: TextIO) -> None:
    """Decode every events partition with the columnar decoder; count events by type."""
    ld = LogDir(log_dir)
    counts: Counter[str] = Counter()
    rows = 0
    for tp in ld.partitions():
        if tp.topic != "events":
            continue
        reader = ld.open_partition(tp)
        for base in reader.base_offsets:
            seg = reader.segment(base)
            for batch in decode_records(
                seg.read(base, seg.size_in_bytes).records, topic=tp.topic, partition=tp.partition
            ):
                rows += batch.num_rows
                kinds = pc.extract_regex(
                    pc.cast(batch.column("value"), "string"), r'"type":"(?P<t>\w+)"'
                )
                for item in pc.value_counts(pc.struct_field(kinds, [0])).to_pylist():
                    counts[item["values"]] += item["counts"]
    out.write(f"\nDecoded {rows} events to Arrow; events by type:\n")
    for kind, n in counts.most_common():
        out.write(f"  {kind:<12} {n:>7}\n")


def run(log_dir: Path, out: TextIO) -> int:
    t0 = time.monotonic()
    if log_dir.exists():
        shutil.rmtree(log_dir)
    log_dir.mkdir(parents=True)
    out.write(f"Writing a sample Kafka log dir to {log_dir} ...\n")
    write_sample(log_dir)
    out.write("Verifying every CRC and index entry and summarising (kafkalog dump --verify):\n")
    dump([log_dir], out, verify=True, summary_only=True)
    aggregate(log_dir, out)
    out.write(f"\nDone in {time.monotonic() - t0:.1f} s.\n")
    return 0
