"""The partition count of ``__consumer_offsets`` on a log dir Kafka wrote: adopted from the
directories found (a copy holding only some partitions) it grows to
``offsets.topic.num.partitions``; declared by Kafka's KRaft metadata log it stays, because Kafka
places its groups by that count (group_metadata_manager.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

from broker_embedded.broker import Broker
from broker_embedded.coordinator.group_metadata_manager import GroupMetadataManager
from broker_embedded.storage.cluster_metadata_log import METADATA_DIR

TESTS = Path(__file__).resolve().parents[2]
OTHER_PROTOCOLS = TESTS / "spark_kafkalog" / "data" / "kafka-3.9-other-protocols"
METADATA = TESTS / "broker_embedded" / "storage" / "data" / "kafka-3.9-cluster-metadata"


def offsets_partitions(log_dir: Path) -> int:
    with Broker(log_dir) as broker:
        return GroupMetadataManager(broker.controller, broker.config).partition_count()


def test_adopted_count_grows(tmp_path: Path) -> None:
    shutil.copytree(OTHER_PROTOCOLS, tmp_path / "d")  # __consumer_offsets-0..2, no metadata log
    assert offsets_partitions(tmp_path / "d") == 50


def test_count_in_a_kraft_log_dir_stays(tmp_path: Path) -> None:
    shutil.copytree(OTHER_PROTOCOLS, tmp_path / "d")
    shutil.copytree(METADATA / METADATA_DIR, tmp_path / "d" / METADATA_DIR)
    assert offsets_partitions(tmp_path / "d") == 3
    assert sorted(p.name for p in (tmp_path / "d").glob("__consumer_offsets-*")) == [
        f"__consumer_offsets-{p}" for p in range(3)
    ]
