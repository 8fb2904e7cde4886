"""A log dir that a live Apache Kafka 3.9 wrote, and what Kafka's own consumer read from it.

:func:`populate` drives a running Kafka 3.9 broker (its log dir ``data_dir``) with confluent-kafka:

- ``c-none``, ``c-gzip``, ``c-snappy``, ``c-lz4``, ``c-zstd``: :data:`CODEC_RECORDS` records each,
  produced in that codec, with keys (every 11th null), values, headers (every 7th record a
  header with a null value) and explicit CreateTime timestamps;
- ``txn`` (2 partitions): a committed, an aborted and a committed transaction;
- ``compacted`` (cleanup.policy=compact, small segments, min.cleanable.dirty.ratio 0.01): rounds
  of updates of 10 keys and a tombstone, then waits until Kafka's cleaner cleaned it up to its
  active segment (``cleaner-offset-checkpoint``), bounded;
- ``retention`` (segment.bytes and retention.bytes small): waits until ListOffsets earliest is
  above 0, bounded;
- ``logappend`` (message.timestamp.type=LogAppendTime);
- groups: ``g-classic`` (a confluent-kafka consumer of ``c-none``, committed offset 150),
  ``g-txn`` (committed offsets on ``txn``), ``g-admin`` (offsets set by AlterConsumerGroupOffsets
  on ``c-zstd``: a group with no members and an empty protocol type).

The broker runs with :data:`BROKER_OVERRIDES`: Kafka's retention check and cleaner look for
work every half second instead of 30 s after the start then every 5 min (the retention check)
and every 15 s (the cleaner), which the fixture would wait for.

:func:`read_all` reads every topic from the running broker with a confluent-kafka consumer
(assigned partitions, from the log start to the end) in one isolation level: the reference the
tests compare kafkalog with. Every wait is bounded.
"""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic  # noqa: F401

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
CODEC_RECORDS = 300
# ten minutes ago, whole seconds: recent enough for the default retention.ms (7 days), which
# would delete older records at the first retention check
BASE_TS = (int(time.time()) - 600) * 1000
TOPICS = {  # name: (partitions, configs)
    "retention": (1, {"segment.bytes": "1024", "retention.bytes": "2048"}),
    **{f"c-{codec}": (1, {}) for codec in CODECS},
    "txn": (2, {}),
    "compacted": (
        1,
        {
            "cleanup.policy": "compact",
            "segment.bytes": "1024",
            "min.cleanable.dirty.ratio": "0.01",
            "segment.ms": "100",
        },
    ),
    "logappend": (1, {"message.timestamp.type": "LogAppendTime"}),
}
GROUP_OFFSETS = {  # group: {(topic, partition): offset}
    "g-classic": {("c-none", 0): 150},
    "g-txn": {("txn", 0): 5, ("txn", 1): 7},
    "g-admin": {("c-zstd", 0): 42},
}
WAIT_S = 150.0
BROKER_OVERRIDES = {
    "log.initial.task.delay.ms": "0",
    "log.retention.check.interval.ms": "500",
    "log.cleaner.backoff.ms": "500",
}

Row = tuple  # (topic, partition, offset, key, value, headers, timestamp_type, timestamp)


def populate(bootstrap: str, data_dir: Path) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    _create(admin, ["retention"])
    _produce_retention(bootstrap)
    _create(admin, [t for t in TOPICS if t != "retention"])
    for codec in CODECS:
        _produce_codec(bootstrap, codec)
    _produce_txn(bootstrap)
    _produce_logappend(bootstrap)
    _produce_compacted(bootstrap)
    _commit_groups(bootstrap, admin)
    _wait(lambda: _earliest(bootstrap, "retention", 0) > 0, "retention to delete a segment")
    _wait(lambda: _cleaned(data_dir, "compacted-0"), "the cleaner to clean compacted-0 whole")


def _create(admin: AdminClient, names: list[str]) -> None:
    new = [NewTopic(n, TOPICS[n][0], 1, config=TOPICS[n][1]) for n in names]
    for future in admin.create_topics(new, operation_timeout=30).values():
        future.result(timeout=60)


def _producer(bootstrap: str, **conf: object) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **conf})


def _flush(p: Producer) -> None:
    if p.flush(60) != 0:
        raise AssertionError("records not delivered within 60 s")


def _produce_retention(bootstrap: str) -> None:
    p = _producer(bootstrap, **{"linger.ms": 0})
    for i in range(60):
        p.produce("retention", value=b"r" * 100, key=f"k{i}".encode(), timestamp=BASE_TS + i)
        _flush(p)  # one batch each: segments of 1 KiB roll every few records


def codec_record(codec: str, i: int) -> tuple[bytes | None, bytes, list, int]:
    key = None if i % 11 == 0 else f"k{i}".encode()
    headers = [("i", str(i).encode()), ("codec", codec.encode())]
    if i % 7 == 0:
        headers.append(("nothing", None))
    return key, f"{codec}-{i}-".encode() * 3, headers, BASE_TS + 1000 + i


def _produce_codec(bootstrap: str, codec: str) -> None:
    p = _producer(bootstrap, **{"compression.type": codec})
    for i in range(CODEC_RECORDS):
        key, value, headers, ts = codec_record(codec, i)
        p.produce(f"c-{codec}", value=value, key=key, headers=headers, timestamp=ts)
        if i % 100 == 99:
            _flush(p)
    _flush(p)


def _produce_txn(bootstrap: str) -> None:
    p = _producer(bootstrap, **{"transactional.id": "kafka-written-txn"})
    p.init_transactions(60)
    for name, count, commit in (("t1", 20, True), ("t2", 15, False), ("t3", 10, True)):
        p.begin_transaction()
        for i in range(count):
            p.produce(
                "txn",
                value=f"{name}-{i}".encode(),
                key=f"{name}k{i}".encode(),
                partition=i % 2,
                timestamp=BASE_TS + 2000 + i,
            )
        if commit:
            p.commit_transaction(60)
        else:
            _flush(p)
            p.abort_transaction(60)


def _produce_logappend(bootstrap: str) -> None:
    p = _producer(bootstrap)
    for i in range(20):
        p.produce("logappend", value=f"la-{i}".encode(), key=b"same", timestamp=BASE_TS + i)
    _flush(p)


def _produce_compacted(bootstrap: str) -> None:
    p = _producer(bootstrap, **{"linger.ms": 0})
    for round_ in range(4):
        for i in range(10):
            p.produce(
                "compacted",
                key=f"k{i}".encode(),
                value=f"r{round_}-{i}".encode() * 8,
                timestamp=BASE_TS + 3000 + round_ * 10 + i,
            )
            _flush(p)
        time.sleep(0.15)  # past segment.ms: the next append rolls a segment
    p.produce("compacted", key=b"k3", value=None, timestamp=BASE_TS + 3100)  # a tombstone
    _flush(p)
    time.sleep(0.15)
    p.produce("compacted", key=b"k9", value=b"last", timestamp=BASE_TS + 3101)  # rolls again
    _flush(p)


def _commit_groups(bootstrap: str, admin: AdminClient) -> None:
    from confluent_kafka import ConsumerGroupTopicPartitions

    for group in ("g-classic", "g-txn"):
        c = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False}
        )
        offsets = [TopicPartition(t, p, o) for (t, p), o in GROUP_OFFSETS[group].items()]
        c.commit(offsets=offsets, asynchronous=False)
        c.close()
    offsets = [TopicPartition(t, p, o) for (t, p), o in GROUP_OFFSETS["g-admin"].items()]
    futures = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions("g-admin", offsets)])
    for future in futures.values():
        future.result(timeout=60)


def _earliest(bootstrap: str, topic: str, partition: int) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "probe"})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)[0]
    finally:
        c.close()


def _cleaned(data_dir: Path, partition_dir: str) -> bool:
    """The cleaner's checkpoint of ``partition_dir`` is at its active segment: all of the log
    below it cleaned (with the records of the last rounds)."""
    topic, _, partition = partition_dir.rpartition("-")
    path = data_dir / "cleaner-offset-checkpoint"
    lines = path.read_text().splitlines()[2:] if path.exists() else []
    active = max(int(p.stem) for p in (data_dir / partition_dir).glob("*.log"))
    return any(line.split() == [topic, partition, str(active)] for line in lines)


def _wait(done, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"Kafka 3.9: waited {WAIT_S:.0f} s for {what}")
        time.sleep(0.5)


def read_all(bootstrap: str, isolation: str) -> dict[str, list[Row]]:
    """Every record of every topic of :data:`TOPICS` as Kafka's consumer reads it: every
    partition assigned at once from its log start, read until each reports its end (a consumer
    per partition took 2 s each, mostly waiting for metadata and the first fetch)."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "reference-reader",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "enable.partition.eof": True,
        }
    )
    try:
        parts = [(t, p) for t, (n, _) in TOPICS.items() for p in range(n)]
        marks = {tp: _watermarks(c, TopicPartition(*tp)) for tp in parts}
        rows = _read_partitions(c, {tp: low for tp, (low, _) in marks.items()})
        for tp, (_, high) in marks.items():
            assert high >= (rows[tp][-1][2] + 1 if rows[tp] else 0), tp
        return {t: [r for p in range(n) for r in rows[(t, p)]] for t, (n, _) in TOPICS.items()}
    finally:
        c.close()


_NOT_READY = (
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError._TIMED_OUT,
)


def _watermarks(c: Consumer, tp: TopicPartition) -> tuple[int, int]:
    """ListOffsets earliest and latest; retried while the broker is not leader yet (a Kafka
    just restarted answers NOT_LEADER_OR_FOLLOWER until its metadata catches up)."""
    deadline = time.monotonic() + 60
    while True:
        try:
            return c.get_watermark_offsets(tp, timeout=10)
        except KafkaException as e:
            if e.args[0].code() not in _NOT_READY or time.monotonic() > deadline:
                raise
        time.sleep(0.5)


def _read_partitions(c: Consumer, starts: dict[tuple[str, int], int]) -> dict[tuple, list[Row]]:
    """The records of each (topic, partition) from its start offset to its end, in order."""
    rows: dict[tuple, list[Row]] = {tp: [] for tp in starts}
    c.assign([TopicPartition(t, p, low) for (t, p), low in starts.items()])
    ended: set[tuple[str, int]] = set()
    deadline = time.monotonic() + 60
    while len(ended) < len(starts):
        if time.monotonic() > deadline:
            raise AssertionError(f"not at the end within 60 s: {sorted(set(starts) - ended)}")
        m = c.poll(1.0)
        if m is None:
            continue
        topic, p = m.topic(), m.partition()
        if m.error():
            if m.error().code() == KafkaError._PARTITION_EOF:
                ended.add((topic, p))
                continue
            raise AssertionError(f"{topic}-{p}: {m.error()}")
        ts_type, ts = m.timestamp()
        rows[(topic, p)].append(
            (topic, p, m.offset(), m.key(), m.value(), tuple(m.headers() or ()), ts_type - 1, ts)
        )
    return rows


def group_offsets(bootstrap: str) -> dict[str, dict[tuple[str, int], int]]:
    """The committed offsets of the groups of :data:`GROUP_OFFSETS` (OffsetFetch)."""
    from confluent_kafka import ConsumerGroupTopicPartitions

    admin = AdminClient({"bootstrap.servers": bootstrap})
    out = {}
    for group in GROUP_OFFSETS:
        futures = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
        found = futures[group].result(timeout=60)
        out[group] = {(tp.topic, tp.partition): tp.offset for tp in found.topic_partitions}
    return out


def produce_and_commit(bootstrap: str) -> None:
    """10 gzip records ``s<i>``/``served-<i>`` appended to ``c-gzip``; ``g-classic`` commits
    offset 200 of ``c-none``."""
    p = _producer(bootstrap, **{"compression.type": "gzip"})
    for i in range(10):
        p.produce(
            "c-gzip",
            key=f"s{i}".encode(),
            value=f"served-{i}".encode(),
            timestamp=BASE_TS + 4000 + i,
        )
    _flush(p)
    c = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "g-classic", "enable.auto.commit": False}
    )
    c.commit(offsets=[TopicPartition("c-none", 0, 200)], asynchronous=False)
    c.close()
