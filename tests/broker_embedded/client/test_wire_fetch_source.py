"""The FetchSource over the wire protocol (broker_embedded/client/wire_fetch_source.py) against a
real server (in-process, 127.0.0.1, port 0) serving a copy of the data source tests' log dir,
checked against an independent reading of the same files (kafka-python and the checkpoint
files, tests/datasource/_logdirs.py): offsets, fetches decoded to the rows, the pipelined next
fetch, Kafka's errors, and a cluster that cannot be reached (bounded, named)."""

from __future__ import annotations

import pickle
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker_embedded.client.wire_fetch_source import (
    PartitionUnavailableError,
    WireFetchSource,
    WireSource,
)
from broker_embedded.errors import OffsetOutOfRangeError, UnknownTopicOrPartitionError
from broker_embedded.record.columnar_decoder import decode
from broker_embedded.storage.fetch_data_info import IsolationLevel
from broker_embedded.storage.fetch_source import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from broker_embedded.storage.topic_partition import TopicPartition
from tests.broker_embedded.server._serve import served
from tests.datasource._logdirs import (
    EVENTS_PARTITIONS,
    TRIMMED_LOG_START,
    build_source_log_dir,
    expected_rows,
    first_offset_at,
    partition_facts,
)

COMMITTED, UNCOMMITTED = IsolationLevel.READ_COMMITTED, IsolationLevel.READ_UNCOMMITTED


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[tuple[Path, str]]:
    """(the served log dir, its bootstrap address). Served once and stopped first: the broker
    aborts the transaction the build left open when it opens the log dir, so that the files
    then tell what the server serves."""
    log_dir = build_source_log_dir(tmp_path_factory.mktemp("wire") / "logdir")
    with served(log_dir):
        pass
    with served(log_dir) as running:
        yield log_dir, running.bootstrap


@pytest.fixture
def source(cluster) -> Iterator[WireFetchSource]:
    with WireSource(cluster[1], retry_timeout_ms=5_000).open() as opened:
        yield opened


def test_descriptor_pickles_and_topics_come_from_metadata(cluster) -> None:
    descriptor = WireSource(cluster[1], client_id="t")
    again = pickle.loads(pickle.dumps(descriptor))
    assert again == descriptor and again.location == f"Kafka cluster {cluster[1]}"
    with again.open() as opened:
        assert opened.descriptor == descriptor
        assert opened.topics() == {
            "events": tuple(range(EVENTS_PARTITIONS)),
            "txn": (0,),
            "trimmed": (0,),
            "appendtime": (0,),
            "empty": (0,),
        }
        assert opened.declared_partitions("events") == EVENTS_PARTITIONS
        assert opened.exists(TopicPartition("events", 2))
        assert not opened.exists(TopicPartition("events", 3))
        assert not opened.exists(TopicPartition("nope", 0))
        assert opened.byte_cut(TopicPartition("events", 0), 0, 100, 1000) is None
        assert opened.byte_cuts(TopicPartition("events", 0), 0, 100, 1000) is None


@pytest.mark.parametrize(("topic", "partition"), [("events", 1), ("txn", 0), ("trimmed", 0)])
def test_list_offset_is_kafkas(source: WireFetchSource, cluster, topic: str, partition: int):
    facts = partition_facts(cluster[0], topic, partition)
    tp = TopicPartition(topic, partition)
    assert source.list_offset(tp, EARLIEST_TIMESTAMP, UNCOMMITTED) == facts.log_start
    assert source.list_offset(tp, LATEST_TIMESTAMP, UNCOMMITTED) == facts.high_watermark
    assert source.list_offset(tp, LATEST_TIMESTAMP, COMMITTED) == facts.last_stable
    for ts in sorted({t for _, t in facts.all_offsets})[::9] + [0, 1 << 50]:
        for isolation in (UNCOMMITTED, COMMITTED):
            expected = first_offset_at(facts, ts, isolation == COMMITTED)
            assert source.list_offset(tp, ts, isolation) == expected, (ts, isolation)


@pytest.mark.parametrize("isolation", [UNCOMMITTED, COMMITTED])
@pytest.mark.parametrize("pipelined", [False, True])
def test_fetches_decode_to_the_partition(
    source: WireFetchSource, cluster, isolation: IsolationLevel, pipelined: bool
) -> None:
    for topic, partition in [("txn", 0), ("events", 2)]:
        facts = partition_facts(cluster[0], topic, partition)
        tp, committed = TopicPartition(topic, partition), isolation == COMMITTED
        offset, rows, fetches = facts.log_start, [], 0
        while True:
            fetched = source.fetch(tp, offset, 300, isolation)
            fetches += 1
            assert (fetched.topic_partition, fetched.fetch_offset) == (tp, offset)
            assert (fetched.high_watermark, fetched.log_start_offset) == (
                facts.high_watermark,
                facts.log_start,
            )
            assert (fetched.aborted_transactions is None) == (not committed)
            decoded = decode(
                fetched.records,
                topic=topic,
                partition=partition,
                start_offset=offset,
                aborted_transactions=fetched.aborted_transactions,
            )
            rows += [r for b in decoded.batches for r in b.to_pylist()]
            if decoded.next_offset == offset:
                break
            offset = decoded.next_offset
            if pipelined and offset < fetched.bound(isolation):
                source.prefetch(tp, offset, 300, isolation)
        assert fetches > 3
        expected = expected_rows(facts, read_committed=committed)
        assert [(r["offset"], r["key"], r["value"]) for r in rows] == [
            (r.offset, r.key, r.value) for r in expected
        ]


def test_a_prefetch_not_taken_is_dropped(source: WireFetchSource, cluster) -> None:
    tp = TopicPartition("events", 0)
    source.prefetch(tp, 100, 1000, UNCOMMITTED)
    assert source.list_offset(tp, EARLIEST_TIMESTAMP, UNCOMMITTED) == 0  # waits for it
    source.prefetch(tp, 100, 1000, UNCOMMITTED)
    fetched = source.fetch(tp, 200, 1000, UNCOMMITTED)  # another offset: fetched anew
    first = decode(fetched.records, topic="events", partition=0, start_offset=200)
    assert first.batches[0].column("offset")[0].as_py() == 200


def test_kafkas_errors_are_the_domain_errors(source: WireFetchSource) -> None:
    with pytest.raises(OffsetOutOfRangeError, match="offset 3 of topic 'trimmed' partition 0"):
        source.fetch(TopicPartition("trimmed", 0), 3, 1000, UNCOMMITTED)
    fetched = source.fetch(TopicPartition("trimmed", 0), TRIMMED_LOG_START, 1000, UNCOMMITTED)
    assert fetched.log_start_offset == TRIMMED_LOG_START
    with pytest.raises(UnknownTopicOrPartitionError, match="'events' has no partition 7"):
        source.fetch(TopicPartition("events", 7), 0, 1000, UNCOMMITTED)


def test_an_unreachable_cluster_is_a_bounded_named_error() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    descriptor = WireSource(
        f"127.0.0.1:{port}",
        retries=3,
        retry_backoff_ms=50,
        retry_timeout_ms=2_000,
        connect_timeout_ms=500,
    )
    began = time.monotonic()
    with descriptor.open() as source, pytest.raises(PartitionUnavailableError) as e:
        source.fetch(TopicPartition("events", 1), 42, 1000, UNCOMMITTED)
    assert time.monotonic() - began < 10
    message = str(e.value)
    assert f"Fetch of events-1 at offset 42 from Kafka cluster 127.0.0.1:{port}" in message
    assert f"cannot connect to broker 127.0.0.1:{port}" in message


def test_a_record_larger_than_the_fetch_size_still_arrives(tmp_path: Path) -> None:
    """KIP-74: a 5 MB record with fetches of 1 MB comes whole, between small ones."""
    from broker_embedded.common.producer_record import ProducerRecord

    big = bytes(range(256)) * (5 * 4096)
    with served(tmp_path / "big") as running:
        running.broker.create_topic("big", 1, config={"max.message.bytes": 8 << 20})
        for value in (b"before", big, b"after"):
            running.broker.produce("big", 0, [ProducerRecord(value)])
        with WireSource(running.bootstrap).open() as source:
            values, offset = [], 0
            while offset < 3:
                fetched = source.fetch(TopicPartition("big", 0), offset, 1 << 20, UNCOMMITTED)
                decoded = decode(fetched.records, topic="big", partition=0, start_offset=offset)
                values += [v for b in decoded.batches for v in b.column("value").to_pylist()]
                offset = decoded.next_offset
    assert values == [b"before", big, b"after"]
