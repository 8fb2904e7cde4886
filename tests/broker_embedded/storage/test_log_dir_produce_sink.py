"""The write port of a log dir (broker_embedded/storage/log_dir_produce_sink.py) on real log dirs,
read back through the read port (LogDirSource): the topics' limits, a task's staged batches
invisible until the driver's commit publishes them at once, an abort leaving nothing, a
streaming writer's replayed batch appending nothing, and a log dir a broker owns told apart from
one nobody holds."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from broker_embedded.broker import Broker
from broker_embedded.record.columnar_encoder import EncodedBatches, encode_batches
from broker_embedded.storage.fetch_data_info import IsolationLevel
from broker_embedded.storage.fetch_source import LATEST_TIMESTAMP
from broker_embedded.storage.log_config import LogConfig
from broker_embedded.storage.log_dir_fetch_source import LogDirSource
from broker_embedded.storage.log_dir_produce_sink import LogDirSink, held_by_a_commit
from broker_embedded.storage.produce_sink import TopicLimits
from broker_embedded.storage.topic_partition import TopicPartition

UNCOMMITTED = IsolationLevel.READ_UNCOMMITTED


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    """Topic ``t`` (2 partitions), ``small`` (max.message.bytes 200), ``compacted``."""
    d = tmp_path / "logdir"
    with Broker(d, create=True) as b:
        b.create_topic("t", 2)
        b.create_topic("small", 1, config={"max.message.bytes": 200})
        b.create_topic("compacted", 1, config={"cleanup.policy": "compact"})
    return d


def encoded(values: list[bytes]) -> EncodedBatches:
    n = len(values)
    keys = pa.array([b"k%d" % i for i in range(n)])
    return encode_batches(keys, pa.array(values, pa.binary()), np.full(n, 1000, np.int64))


def latest(log_dir: Path, partition: int) -> int:
    source = LogDirSource(str(log_dir)).open()
    try:
        return source.list_offset(TopicPartition("t", partition), LATEST_TIMESTAMP, UNCOMMITTED)
    finally:
        source.close()


def test_topic_limits_come_from_the_topics_file(log_dir: Path) -> None:
    sink = LogDirSink(log_dir)
    default = LogConfig().max_message_bytes
    assert sink.location == f"log dir {log_dir}"
    assert sink.topic_limits("t") == TopicLimits(2, default, False)
    assert sink.topic_limits("small") == TopicLimits(1, 200, False)
    assert sink.topic_limits("small").max_batch_bytes == 200 - 61
    assert sink.topic_limits("compacted") == TopicLimits(1, default, True)
    assert sink.topic_limits("missing") is None
    assert sorted(sink.topics()) == ["compacted", "small", "t"]
    assert sink.has_topic("t") and not sink.has_topic("missing")


def test_staged_batches_show_only_when_the_driver_commits(log_dir: Path) -> None:
    sink = LogDirSink(log_dir)
    tasks = [sink.appender("job1", f"task{i}") for i in range(2)]
    assert tasks[0].producer_fields("t", 0) == {}
    tasks[0].append("t", 1, encoded([b"a", b"b"]))
    tasks[1].append("t", 1, encoded([b"c"]))
    tasks[1].append("t", 0, encoded([b"d"]))
    files = [f for task in tasks for f in task.finish()]
    assert [(f.topic, f.partition, f.records) for f in files] == [
        ("t", 1, 2),
        ("t", 0, 1),
        ("t", 1, 1),
    ]
    assert (latest(log_dir, 0), latest(log_dir, 1)) == (0, 0)
    done = sink.commit("job1", files)
    assert done == {TopicPartition("t", 0): (0, 1), TopicPartition("t", 1): (0, 3)}
    assert (latest(log_dir, 0), latest(log_dir, 1)) == (1, 3)


def test_an_aborted_job_leaves_nothing(log_dir: Path) -> None:
    sink = LogDirSink(log_dir)
    task = sink.appender("job2", "task0")
    task.append("t", 0, encoded([b"a"]))
    task.finish()
    sink.abort("job2")
    assert sink.commit("job2", []) == {}
    assert latest(log_dir, 0) == 0
    assert not (log_dir / ".kafkalog-staging" / "job2").exists()


def test_a_replayed_micro_batch_appends_nothing(log_dir: Path) -> None:
    sink = LogDirSink(log_dir)
    for job in ("run1", "run2"):  # the same batch 0 of query q, staged by two runs
        task = sink.appender(job, "task0")
        task.append_batch("t", 0, bytes(encoded([b"once"]).data), records=1)
        done = sink.commit(job, task.finish(), writer_id="q", batch_id=0)
        assert done == ({TopicPartition("t", 0): (0, 1)} if job == "run1" else {})
    assert latest(log_dir, 0) == 1


def test_a_broker_owning_the_log_dir_is_not_a_brief_holder(log_dir: Path) -> None:
    sink = LogDirSink(log_dir)
    assert not sink.locked()
    with Broker(log_dir):
        assert sink.locked()
        assert not held_by_a_commit(sink.lock_holder())
    assert not sink.locked()
