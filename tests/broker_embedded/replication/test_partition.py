"""The leader's bookkeeping of its followers (partition.py) through real follower fetches: the
high watermark rule, caught-up times and what a fetch beyond the log end must not count as."""

from __future__ import annotations

import time

from broker_embedded.common.fetch_request import FetchRequest, PartitionFetch
from broker_embedded.errors import OffsetOutOfRangeError
from broker_embedded.storage.topic_partition import TopicPartition
from tests.broker_embedded.replication._cluster_util import in_sync, log_of, wait_until

TP = TopicPartition("t", 0)


def _a_record_the_paused_follower_lacks(make_cluster):
    """A 2-broker cluster in sync at offset 1, then the follower paused (its fetcher stops
    reporting) and one more record appended with acks=1: (cluster, leader broker, follower id,
    leader's log) with log end offset 2 and HW 1."""
    cluster = make_cluster(2)
    cluster.create_topic("t", 1, 2)
    cluster.produce("t", 0, [b"a"])
    wait_until(lambda: in_sync(cluster, TP, [0, 1]), "in sync")
    state = cluster.controller.partition_state(TP)
    leader = cluster.brokers[state.leader]
    follower = next(r for r in state.replicas if r != state.leader)
    cluster.pause_broker(follower)
    cluster.produce("t", 0, [b"b"], acks=1)
    lg = log_of(leader, TP)
    assert (lg.log_end_offset, lg.high_watermark) == (2, 1)
    return cluster, leader, follower, lg


def _follower_fetch(cluster, follower: int, offset: int, *, max_wait_ms: int) -> FetchRequest:
    """A fetch as ``follower`` sends it, at ``offset`` and the current leader epoch."""
    epoch = cluster.controller.partition_state(TP).leader_epoch
    return FetchRequest(
        (PartitionFetch(TP, offset, current_leader_epoch=epoch),),
        replica_id=follower,
        max_wait_ms=max_wait_ms,
    )


def test_a_fetch_beyond_the_log_end_does_not_count_as_caught_up(make_cluster) -> None:
    """A follower fetching above the leader's log end offset (diverged, not yet truncated) is
    answered OFFSET_OUT_OF_RANGE and must not move the high watermark."""
    cluster, leader, follower, lg = _a_record_the_paused_follower_lacks(make_cluster)
    request = _follower_fetch(cluster, follower, 5, max_wait_ms=0)
    answer = leader.fetch(request).partitions[0]
    assert isinstance(answer.error, OffsetOutOfRangeError)
    assert lg.high_watermark == 1  # the follower does not have offset 1
    partition = leader.replica_manager.partitions[TP]
    assert partition.replica_states()[follower].log_end_offset == 1
    cluster.resume_broker(follower)
    wait_until(lambda: in_sync(cluster, TP, [0, 1]), "the follower catches up")
    assert lg.high_watermark == 2


def test_high_watermark_is_the_smallest_isr_log_end_and_followers_learn_it(make_cluster) -> None:
    cluster = make_cluster(3)
    cluster.create_topic("t", 1, 3)
    cluster.produce("t", 0, [b"a", b"b", b"c"])
    wait_until(lambda: in_sync(cluster, TP, [0, 1, 2]), "in sync")
    state = cluster.controller.partition_state(TP)
    leader = cluster.brokers[state.leader]
    f1, f2 = (r for r in state.replicas if r != state.leader)
    cluster.pause_broker(f1)
    cluster.produce("t", 0, [b"d"], acks=1)
    # f2 fetches offset 3 (not yet the HW: f1 lags); f1 still holds the HW at 3.
    wait_until(lambda: log_of(cluster.brokers[f2], TP).log_end_offset == 4, "f2 replicates")
    wait_until(
        lambda: leader.replica_manager.partitions[TP].replica_states()[f2].log_end_offset == 4,
        "the leader records f2's progress",
    )
    assert log_of(leader, TP).high_watermark == 3
    assert log_of(cluster.brokers[f2], TP).high_watermark == 3  # min(leader HW, own LEO)
    assert log_of(cluster.brokers[f1], TP).log_end_offset == 3
    cluster.resume_broker(f1)
    wait_until(lambda: in_sync(cluster, TP, [0, 1, 2]), "f1 catches up, all learn HW 4")
    for b in range(3):
        assert log_of(cluster.brokers[b], TP).high_watermark == 4


def test_a_follower_fetch_that_moves_the_high_watermark_is_answered_at_once(make_cluster) -> None:
    """The fetch whose own offset moves the HW gets the new HW at once, without waiting its
    max wait for records and without a delayed fetch left in the purgatory."""
    cluster, leader, follower, lg = _a_record_the_paused_follower_lacks(make_cluster)
    request = _follower_fetch(cluster, follower, 2, max_wait_ms=30_000)
    began = time.monotonic()
    answer = leader.fetch(request).partitions[0]
    assert time.monotonic() - began < 10  # not the 30 s max wait
    assert (answer.error, answer.records, answer.high_watermark) == (None, b"", 2)
    assert lg.high_watermark == 2
    # The paused follower's fetcher may still be completing its last fetch (50 ms max wait)
    # in its own thread; this fetch's 30 s wait would keep one pending well past the deadline.
    pg = leader.replica_manager.fetch_purgatory
    wait_until(lambda: pg.pending == 0, "no delayed fetch left", timeout_s=5)
    cluster.resume_broker(follower)
    wait_until(lambda: in_sync(cluster, TP, [0, 1]), "the follower catches up")
