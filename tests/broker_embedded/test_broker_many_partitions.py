"""A broker's log dir of many partitions: creating them and reopening it are bounded in time
(the admin storm of issue 27: creation and restart must not cost a fsync round or a checkpoint
rewrite per partition), and a reopened log dir serves every partition with its records.

The log dir is built with the broker's own code: one topic of one partition holding records,
whose partition directory is copied (a partition's files carry no partition number; the topic's
id is the same for all) and the topic registered with that many partitions, as the topics file
of a broker that created them holds it. Bounds are generous for a loaded machine; the exact
figures are benchmarks/admin_storm.py's.
"""

from __future__ import annotations

import dataclasses
import shutil
import time
from pathlib import Path

from broker_embedded.broker import Broker
from broker_embedded.storage.partition_metadata import (
    PARTITION_METADATA_FILE,
    PartitionMetadataFile,
)
from broker_embedded.storage.topic_config_file import TopicConfigFile
from broker_embedded.storage.topic_partition import TopicPartition
from tests.broker_embedded._broker_util import fetch_one

PARTITIONS = 3_000
# Hang guards, not speed claims (a busy machine must pass; the speeds are measured by
# benchmarks/broker.py and docs/performance.md "Many partitions"): a log dir reopened or
# created one partition at a time with a sync each would take minutes.
OPEN_BOUND_S = 60.0
RECOVER_BOUND_S = 120.0  # after a crash each log is also recovered (its records scanned)
CREATE_PARTITIONS = 1_000
CREATE_BOUND_S = 60.0


def many_partitions(log_dir: Path, partitions: int) -> None:
    with Broker(log_dir, create=True) as broker:
        broker.create_topic("t", 1)
        broker.produce("t", 0, [b"first", b"second"])
    source = log_dir / "t-0"
    for p in range(1, partitions):
        shutil.copytree(source, log_dir / f"t-{p}")
    topics = TopicConfigFile(log_dir)
    entries = topics.read()
    entries["t"] = dataclasses.replace(entries["t"], partitions=partitions)
    topics.write(entries)


def assert_serves_every_partition(broker: Broker, partitions: int) -> None:
    assert len(broker.describe_topic("t").partitions) == partitions
    for p in (0, partitions // 2, partitions - 1):
        result = fetch_one(broker, "t", p, 0)
        assert result.error is None and result.high_watermark == 2
        assert broker.log_manager.get_log(TopicPartition("t", p)).log_end_offset == 2


def test_reopening_a_log_dir_of_3000_partitions_is_quick_clean_or_not(tmp_path: Path) -> None:
    log_dir = tmp_path / "logs"
    many_partitions(log_dir, PARTITIONS)
    started = time.monotonic()
    broker = Broker(log_dir)
    clean_s = time.monotonic() - started
    assert_serves_every_partition(broker, PARTITIONS)
    broker.crash()  # as a SIGKILL leaves it: no clean-shutdown marker, nothing flushed
    started = time.monotonic()
    with Broker(log_dir) as broker:
        unclean_s = time.monotonic() - started
        assert_serves_every_partition(broker, PARTITIONS)
    assert clean_s < OPEN_BOUND_S and unclean_s < RECOVER_BOUND_S, (clean_s, unclean_s)


def test_creating_1000_partitions_is_quick_and_they_survive_a_crash(tmp_path: Path) -> None:
    log_dir = tmp_path / "logs"
    broker = Broker(log_dir, create=True)
    started = time.monotonic()
    broker.create_topic("t", CREATE_PARTITIONS)
    created_s = time.monotonic() - started
    broker.produce("t", CREATE_PARTITIONS - 1, [b"first", b"second"])
    broker.crash()
    with Broker(log_dir) as broker:
        assert len(broker.describe_topic("t").partitions) == CREATE_PARTITIONS
        tp = TopicPartition("t", CREATE_PARTITIONS - 1)
        assert broker.log_manager.get_log(tp).log_end_offset == 2
    assert created_s < CREATE_BOUND_S


def test_a_partition_left_with_empty_files_by_a_power_loss_opens_repaired(tmp_path: Path) -> None:
    """A creation's files are synced once at its end (checkpoint_file.one_sync): a power loss
    before that can leave them empty. The partition (nothing acknowledged in it) opens, its
    ``partition.metadata`` written again with the topic's id."""
    log_dir = tmp_path / "logs"
    broker = Broker(log_dir, create=True)
    broker.create_topic("t", 2)
    topic_id = broker.describe_topic("t").topic_id
    broker.crash()
    for name in ("partition.metadata", "leader-epoch-checkpoint", "00000000000000000000.index"):
        (log_dir / "t-1" / name).write_bytes(b"")
    with Broker(log_dir) as broker:
        assert [p.leader for p in broker.describe_topic("t").partitions] == [0, 0]
        broker.produce("t", 1, [b"after"])
        assert fetch_one(broker, "t", 1, 0).high_watermark == 1
    metadata = PartitionMetadataFile(log_dir / "t-1" / PARTITION_METADATA_FILE).read()
    assert metadata.topic_id == topic_id
