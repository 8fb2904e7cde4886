"""Test log dirs for the data source tests, built with the embedded broker, and an independent
reading of any log dir (kafka-python's record decoder over the ``.log`` files, offsets and
transactions worked out here) to compare what Spark reads with.

The source log dir (:func:`build_source_log_dir`) holds:

- ``events``: 3 partitions of about 700 records each in batches of 1 to 40 records, every codec,
  keys (some null), values (some null: tombstones), headers (some with null values), CreateTime
  timestamps that are not monotonic, small segments (several per partition) and a dense offset
  index (``index.interval.bytes`` 512);
- ``txn``: 1 partition mixing plain batches, committed and aborted transactions (one aborted
  transaction interleaved with plain records) and, at the end, a transaction left open, so that
  the last stable offset is below the high watermark;
- ``trimmed``: 1 partition of 300 records in small segments whose log start offset was moved to
  95 by DeleteRecords (data-loss tests);
- ``appendtime``: 1 partition with ``message.timestamp.type=LogAppendTime``;
- ``empty``: 1 partition without records.

The broker is closed before anything reads the log dir.
"""

from __future__ import annotations

import random
import struct
import warnings
from dataclasses import dataclass
from pathlib import Path

from broker_embedded.broker import Broker
from broker_embedded.common.producer_record import ProducerRecord

with warnings.catch_warnings():  # kafka-python's import-time DeprecationWarnings (its own code)
    warnings.simplefilter("ignore", DeprecationWarning)
    from tests.broker_embedded.record._peers import kafka_python_read

T0 = 1_700_000_000_000  # ms: record timestamps start here
EVENTS_PARTITIONS = 3
TRIMMED_LOG_START = 95
NO_RETENTION = {"retention.ms": -1, "retention.bytes": -1}


@dataclass(frozen=True)
class Row:
    """One record as Spark's Kafka schema shows it (timestamp in microseconds)."""

    key: bytes | None
    value: bytes | None
    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    headers: tuple[tuple[str, bytes | None], ...] = ()

    def without_headers(self) -> Row:
        return Row(*self.as_tuple()[:7])

    def as_tuple(self) -> tuple:
        return (
            self.key,
            self.value,
            self.topic,
            self.partition,
            self.offset,
            self.timestamp,
            self.timestamp_type,
            self.headers,
        )


# -- building ------------------------------------------------------------------------------------


def build_source_log_dir(path: Path) -> Path:
    """Write the source log dir (see the module docstring) into ``path``; return it."""
    rng = random.Random(20240601)
    with Broker(path, create=True) as broker:
        broker.create_topic(
            "events",
            EVENTS_PARTITIONS,
            config={**NO_RETENTION, "segment.bytes": 12_000, "index.interval.bytes": 512},
        )
        for p in range(EVENTS_PARTITIONS):
            _produce_events(broker, p, rng)
        _produce_transactions(broker)
        broker.create_topic("trimmed", 1, config={**NO_RETENTION, "segment.bytes": 2_000})
        for i in range(30):
            records = [
                ProducerRecord(b"t%03d" % (10 * i + j) * 20, timestamp=T0 + 10 * i + j)
                for j in range(10)
            ]
            broker.produce("trimmed", 0, records)
        assert broker.delete_records("trimmed", 0, TRIMMED_LOG_START) == TRIMMED_LOG_START
        broker.create_topic(
            "appendtime", 1, config={**NO_RETENTION, "message.timestamp.type": "LogAppendTime"}
        )
        for _ in range(5):
            broker.produce(
                "appendtime", 0, [ProducerRecord(b"a%d" % j, timestamp=T0) for j in range(10)]
            )
        broker.create_topic("empty", 1, config=NO_RETENTION)
    return path


def _produce_events(broker: Broker, partition: int, rng: random.Random) -> None:
    n = 0
    codecs = [0, 1, 2, 3, 4]
    while n < 700:
        size = rng.randint(1, 40)
        records = []
        for _ in range(size):
            key = None if rng.random() < 0.2 else b"key-%d" % rng.randint(0, 50)
            value = None if rng.random() < 0.05 else rng.randbytes(rng.randint(0, 150))
            headers = tuple(
                (f"h{h}", None if rng.random() < 0.2 else rng.randbytes(rng.randint(0, 8)))
                for h in range(rng.choice([0, 0, 1, 2]))
            )
            ts = T0 + 1000 * n + rng.randint(-2500, 2500)  # not monotonic
            records.append(ProducerRecord(value, key=key, headers=headers, timestamp=ts))
            n += 1
        broker.produce("events", partition, records, compression=codecs[n % len(codecs)])


def _produce_transactions(broker: Broker) -> None:
    broker.create_topic("txn", 1, config=NO_RETENTION)

    def plain(tag: str, k: int = 3) -> None:
        broker.produce(
            "txn", 0, [ProducerRecord(b"%s-%d" % (tag.encode(), i), timestamp=T0) for i in range(k)]
        )

    def recs(tag: str, k: int = 2) -> list[ProducerRecord]:
        return [ProducerRecord(b"%s-%d" % (tag.encode(), i), timestamp=T0) for i in range(k)]

    plain("plain-a")
    t1 = broker.transactional_producer("t1")
    t1.begin()
    t1.send("txn", 0, recs("commit-1"))
    t1.send("txn", 0, recs("commit-1b"))
    t1.commit()
    t2 = broker.transactional_producer("t2")
    t2.begin()
    t2.send("txn", 0, recs("abort-2"))
    plain("plain-b")
    t2.send("txn", 0, recs("abort-2b", 3), compression=3)
    t2.abort()
    t1.begin()
    t1.send("txn", 0, recs("commit-3"))
    t1.commit()
    plain("plain-c")
    t3 = broker.transactional_producer("t3")
    t3.begin()
    t3.send("txn", 0, recs("open-4"))  # never ended: the LSO stays here
    plain("plain-d")


# -- reading independently -----------------------------------------------------------------------


@dataclass(frozen=True)
class PartitionFacts:
    """What kafka-python and the checkpoint files say about one partition."""

    rows: tuple[Row, ...]  # data records (no control records), offset order, from log start
    all_offsets: tuple[tuple[int, int], ...]  # (offset, timestamp ms) of every record, markers too
    aborted: frozenset[int]  # offsets of records of aborted transactions
    log_start: int
    high_watermark: int
    last_stable: int


def checkpoint(log_dir: Path, name: str) -> dict[tuple[str, int], int]:
    """A log dir checkpoint file as {(topic, partition): offset} ({} when missing)."""
    path = Path(log_dir) / name
    if not path.exists():
        return {}
    lines = path.read_text("utf-8").splitlines()
    out = {}
    for line in lines[2:]:
        topic, partition, offset = line.split()
        out[(topic, int(partition))] = int(offset)
    return out


def partition_facts(log_dir: Path, topic: str, partition: int) -> PartitionFacts:
    directory = Path(log_dir) / f"{topic}-{partition}"
    segments = sorted(directory.glob("*.log"))
    data = b"".join(p.read_bytes() for p in segments)
    batches = kafka_python_read(data)
    first_base = int(segments[0].stem) if segments else 0
    leo = batches[-1].last_offset + 1 if batches else first_base
    log_start = max(
        checkpoint(log_dir, "log-start-offset-checkpoint").get((topic, partition), 0), first_base
    )
    hw = checkpoint(log_dir, "replication-offset-checkpoint").get((topic, partition), leo)
    hw = min(max(hw, log_start), leo)
    rows, all_offsets, aborted = [], [], set()
    open_txn: dict[int, list[int]] = {}  # producer id -> offsets of its open transaction
    first_open: dict[int, int] = {}
    for b in batches:
        for r in b.records:
            all_offsets.append((r.offset, r.timestamp))
        if b.base_offset >= hw:
            continue
        if b.is_control:
            marker_type = struct.unpack(">hh", b.records[0].key)[1]  # 0 ABORT, 1 COMMIT
            if marker_type == 0:
                aborted.update(open_txn.get(b.producer_id, ()))
            open_txn.pop(b.producer_id, None)
            first_open.pop(b.producer_id, None)
            continue
        if b.is_transactional:
            open_txn.setdefault(b.producer_id, []).extend(r.offset for r in b.records)
            first_open.setdefault(b.producer_id, b.base_offset)
        for r in b.records:
            if r.offset >= log_start:
                ts_us = r.timestamp * 1000
                rows.append(
                    Row(
                        r.key,
                        r.value,
                        topic,
                        partition,
                        r.offset,
                        ts_us,
                        b.timestamp_type,
                        tuple(r.headers),
                    )
                )
    lso = max(min([hw, *first_open.values()]), log_start)
    return PartitionFacts(tuple(rows), tuple(all_offsets), frozenset(aborted), log_start, hw, lso)


def expected_rows(
    facts: PartitionFacts,
    start: int | None = None,
    end: int | None = None,
    *,
    read_committed: bool = False,
    include_headers: bool = False,
) -> list[Row]:
    """The rows a read of ``[start, end)`` (defaults: log start, latest) must give."""
    latest = facts.last_stable if read_committed else facts.high_watermark
    lo = facts.log_start if start is None else start
    hi = latest if end is None else min(end, latest)
    out = []
    for r in facts.rows:
        if lo <= r.offset < hi and not (read_committed and r.offset in facts.aborted):
            out.append(r if include_headers else r.without_headers())
    return out


def first_offset_at(facts: PartitionFacts, timestamp_ms: int, read_committed: bool = False):
    """Kafka's ListOffsets by timestamp, worked out by a scan: the first offset >= log start
    whose record timestamp is >= ``timestamp_ms``, below the latest offset; else ``None``."""
    latest = facts.last_stable if read_committed else facts.high_watermark
    for offset, ts in facts.all_offsets:
        if facts.log_start <= offset < latest and ts >= timestamp_ms:
            return offset
    return None


def batch_bounds(log_dir: Path, topic: str, partition: int) -> list[tuple[int, int]]:
    """(base offset, size in bytes) of every batch in the partition's ``.log`` files, walking
    the framing (int64 base offset, int32 length) independently."""
    out = []
    for path in sorted((Path(log_dir) / f"{topic}-{partition}").glob("*.log")):
        data, pos = path.read_bytes(), 0
        while pos + 12 <= len(data):
            base, length = struct.unpack_from(">qi", data, pos)
            out.append((base, 12 + length))
            pos += 12 + length
    return out


def spark_rows(df) -> list[Row]:
    """The rows of a DataFrame of the Kafka schema, sorted by topic, partition, offset."""
    table = df.toArrow()
    ts = table.column("timestamp").cast("int64").to_pylist()
    cols = {name: table.column(name).to_pylist() for name in table.column_names}
    headers = cols.get("headers")
    out = []
    for i in range(table.num_rows):
        h = () if headers is None else tuple((e["key"], e["value"]) for e in headers[i] or ())
        out.append(
            Row(
                cols["key"][i],
                cols["value"][i],
                cols["topic"][i],
                cols["partition"][i],
                cols["offset"][i],
                ts[i],
                cols["timestampType"][i],
                h,
            )
        )
    return sorted(out, key=lambda r: (r.topic, r.partition, r.offset))
