"""The controller's state file (``controller.json``) on a real full filesystem (a tmpfs,
tests/tmpfs_mount.py), under an :class:`EmbeddedCluster` of three brokers on the same disk.

An ISR change that cannot be written is refused (KAFKA_STORAGE_ERROR) and changes nothing, so
the leader's next proposal (same partition epoch) is committed once space is back; a new
producer id that cannot be written is refused and handed out once space is back; a broker that
stops while the disk is full still has its leadership moved to an ISR member, which takes
writes once space is back, and the file catches up at the next change.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

import pytest

from broker_embedded.cluster import EmbeddedCluster
from broker_embedded.errors import KafkaStorageError
from broker_embedded.storage.topic_partition import TopicPartition
from tests.tmpfs_mount import fill_leaving, tmpfs

TP = TopicPartition("t", 0)


def _stored_isr(base: Path) -> list[int]:
    state = json.loads((base / "controller.json").read_text())
    return sorted(state["topics"]["t"]["partition_states"]["0"]["isr"])


def test_controller_changes_on_a_full_disk(tmp_path: Path) -> None:
    with tmpfs(8 << 20) as mount:
        base = mount / "c"
        cluster = EmbeddedCluster(base, 3)
        try:
            cluster.create_topic("t", 1, 3, {"min.insync.replicas": "2"})
            controller = cluster.controller
            state = controller.partition_state(TP)
            assert sorted(state.isr) == [0, 1, 2] and _stored_isr(base) == [0, 1, 2]
            follower = next(b for b in state.isr if b != state.leader)
            proposal = replace(state, isr=tuple(b for b in state.isr if b != follower))
            pid = cluster.init_producer_id()[0]
            filler = fill_leaving(mount, 0)

            with pytest.raises(KafkaStorageError, match="controller.json"):
                controller.alter_partition(TP, state.leader, proposal)
            assert controller.partition_state(TP) == state  # nothing changed
            with pytest.raises(KafkaStorageError, match="controller.json"):
                cluster.init_producer_id()

            cluster.stop_broker(state.leader)  # a fact: leadership moves though the file lags
            moved = controller.partition_state(TP)
            assert moved.leader not in (state.leader, -1)
            assert moved.leader_epoch == state.leader_epoch + 1
            assert _stored_isr(base) == [0, 1, 2]  # lags

            filler.unlink()
            assert cluster.init_producer_id()[0] == pid + 1  # the refused id was not used
            cluster.restart_broker(state.leader)
            assert controller.partition_state(TP).leader == moved.leader
            # the file catches up; the restarted broker rejoins the ISR meanwhile (another change)
            deadline = time.monotonic() + 30
            while _stored_isr(base) != sorted(controller.partition_state(TP).isr):
                assert time.monotonic() < deadline, "controller.json did not catch up in 30 s"
                time.sleep(0.05)
        finally:
            cluster.close()
