"""Follower fetchers against real leaders: truncation through leader epochs (also through an
epoch the new leader never saw), a follower behind the leader's log start, and the log start
offset following the leader's."""

from __future__ import annotations

from broker_embedded.storage.topic_partition import TopicPartition
from tests.broker_embedded.replication._cluster_util import (
    epoch_file_bytes,
    in_sync,
    log_file_bytes,
    log_of,
    records_of,
    wait_until,
)

TP = TopicPartition("t", 0)


def test_follower_truncates_through_an_epoch_the_new_leader_never_saw(make_cluster) -> None:
    """A leads epoch 0; B leads epoch 1 and writes "x" that nobody replicates; C leads epoch 2.
    B asks C for the end of epoch 1: C answers epoch 0 ending at 2, and B truncates "x"."""
    cluster = make_cluster(3)
    md = cluster.create_topic("t", 1, 3)
    a, b, c = md.partitions[0].replicas
    cluster.produce("t", 0, [b"r0", b"r1"])
    wait_until(lambda: in_sync(cluster, TP, [0, 1, 2]), "in sync")

    cluster.pause_broker(c)
    cluster.stop_broker(a, clean=False)  # B (next in the ISR, in assignment order) leads
    state = cluster.controller.partition_state(TP)
    assert (state.leader, state.leader_epoch) == (b, 1)
    assert cluster.produce("t", 0, [b"x"], acks=1).base_offset == 2  # only B has it
    cluster.stop_broker(b, clean=False)  # C (paused, still in the ISR) leads
    state = cluster.controller.partition_state(TP)
    assert (state.leader, state.leader_epoch) == (c, 2)
    cluster.resume_broker(c)
    assert log_of(cluster.brokers[c], TP).log_end_offset == 2  # it never saw "x"
    assert cluster.produce("t", 0, [b"y"], acks=1).base_offset == 2

    cluster.restart_broker(b)
    cluster.restart_broker(a)
    wait_until(lambda: in_sync(cluster, TP, [0, 1, 2]), "A and B truncate and rejoin")
    expected = [(0, b"r0", 0), (1, b"r1", 0), (2, b"y", 2)]
    for broker in (a, b, c):
        assert records_of(log_of(cluster.brokers[broker], TP)) == expected, broker
        assert epoch_file_bytes(cluster.brokers[broker], TP) == b"0\n2\n0 0\n2 2\n", broker
        assert log_file_bytes(cluster.brokers[broker], TP) == log_file_bytes(cluster.brokers[c], TP)


def test_follower_behind_the_leaders_log_start_restarts_there(make_cluster) -> None:
    cluster = make_cluster(3)
    cluster.create_topic("t", 1, 3)
    cluster.produce("t", 0, [b"a0", b"a1"])
    wait_until(lambda: in_sync(cluster, TP, [0, 1, 2]), "in sync")
    state = cluster.controller.partition_state(TP)
    leader = cluster.brokers[state.leader]
    behind, other = (r for r in state.replicas if r != state.leader)
    cluster.stop_broker(behind)
    for i in range(2, 10):
        cluster.produce("t", 0, [f"a{i}".encode()])
    assert leader.delete_records("t", 0, 6) == 6
    # The in-sync follower follows the leader's log start offset.
    wait_until(lambda: log_of(cluster.brokers[other], TP).log_start_offset == 6, "log start")

    restarted = cluster.restart_broker(behind)
    wait_until(lambda: in_sync(cluster, TP, [0, 1, 2]), "the follower restarts at offset 6")
    lg = log_of(restarted, TP)
    assert (lg.log_start_offset, lg.log_end_offset) == (6, 10)
    assert [(o, v) for o, v, _ in records_of(lg)] == [(i, f"a{i}".encode()) for i in range(6, 10)]
    assert restarted.log_manager.get_log(TP).segment_base_offsets == [6]
