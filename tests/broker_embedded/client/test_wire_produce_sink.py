"""The write port over the wire (broker_embedded/client/wire_produce_sink.py) against a real
in-process BrokerServer (127.0.0.1, port 0), read back by confluent-kafka: a topic's limits from
Metadata and DescribeConfigs, an idempotent task's batches visible as produced and counted per
partition, a transactional task's batches and offset commit visible only once the driver's own
sink ends the transaction."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from broker_embedded.client.wire_fetch_source import WireSource
from broker_embedded.client.wire_produce_sink import WireSink
from broker_embedded.storage.log_config import LogConfig
from broker_embedded.storage.produce_sink import TopicLimits
from tests.broker_embedded.client.test_idempotent_producer import encode
from tests.broker_embedded.server._serve import served

pytest.importorskip("confluent_kafka")
from tests.broker_embedded.server._consume import consume  # noqa: E402


def values(bootstrap: str, topic: str, partitions: int, isolation: str) -> list[tuple[int, bytes]]:
    return [(p, v) for p, _, v, _, _ in consume(bootstrap, topic, partitions, isolation, 20.0)]


def test_topic_limits_come_from_metadata_and_describe_configs(tmp_path: Path) -> None:
    with served(tmp_path / "b") as s:
        s.broker.create_topic("small", 2, config={"max.message.bytes": 5000})
        s.broker.create_topic("compacted", 1, config={"cleanup.policy": "compact"})
        with WireSink(WireSource(s.bootstrap)) as sink:
            assert sink.location == f"Kafka cluster {s.bootstrap}"
            assert sink.topic_limits("small") == TopicLimits(2, 5000, False)
            assert sink.topic_limits("small").max_batch_bytes == 5000 - 61
            default = LogConfig().max_message_bytes
            assert sink.topic_limits("compacted") == TopicLimits(1, default, True)
            assert sink.topic_limits("missing") is None


def test_an_idempotent_task_produces_as_it_appends(tmp_path: Path) -> None:
    with served(tmp_path / "b") as s:
        s.broker.create_topic("t", 2)
        with WireSink(WireSource(s.bootstrap)) as sink:
            task = sink.producer()
            assert task.handle is None
            for batch in ([b"a", b"b"], [b"c"]):
                task.append("t", 1, encode(batch, **task.producer_fields("t", 1)))
            task.append("t", 0, encode([b"d"], **task.producer_fields("t", 0)))
            assert task.produced() == (("t", 0, 1), ("t", 1, 3))
            assert task.producer_fields("t", 1)["base_sequence"] == 3
            expected = [(0, b"d"), (1, b"a"), (1, b"b"), (1, b"c")]
            assert sorted(values(s.bootstrap, "t", 2, "read_uncommitted")) == expected


def test_a_transactional_task_is_visible_once_the_driver_commits(tmp_path: Path) -> None:
    with served(tmp_path / "b") as s:
        s.broker.create_topic("t", 1)
        cluster = WireSource(s.bootstrap)
        with WireSink(cluster) as sink:
            task = sink.transactional_producer("tx-0", 60_000)
            task.append("t", 0, encode([b"x", b"y"], **task.producer_fields("t", 0)))
            task.commit_offset("g", "t", 0, 5)
            handle = task.handle
            assert handle is not None and handle.transactional_id == "tx-0"
            assert values(s.bootstrap, "t", 1, "read_committed") == []  # open: below the LSO
        with WireSink(cluster) as driver:
            assert driver.committed_offset("other", "t", 0) == -1  # a group without commits
            driver.end_transaction(handle, commit=True)
            assert values(s.bootstrap, "t", 1, "read_committed") == [(0, b"x"), (0, b"y")]
            # EndTxn answers at PrepareCommit; the offset shows once the markers are written
            deadline = time.monotonic() + 10
            while driver.committed_offset("g", "t", 0) != 5 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert driver.committed_offset("g", "t", 0) == 5
