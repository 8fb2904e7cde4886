"""The controller of an embedded cluster: leader epochs at each election, NOT_LEADER_OR_FOLLOWER
from non-leaders, a replaced (stale) controller fenced by its epoch, offline partitions, and the
controller's lock order (it calls brokers with its lock held; leaders must not call it while
holding a partition lock)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from broker_embedded.common.fetch_request import FetchRequest, PartitionFetch
from broker_embedded.errors import (
    FencedLeaderEpochError,
    InvalidUpdateVersionError,
    KafkaApiError,
    NotLeaderOrFollowerError,
    StaleControllerEpochError,
)
from broker_embedded.replica_manager.list_offsets import LATEST_TIMESTAMP
from broker_embedded.replica_manager.partition import LeaderAndIsr
from broker_embedded.storage.topic_partition import TopicPartition
from tests.broker_embedded.replication._cluster_util import (
    consumer_fetch,
    fast_config,
    fetched_records,
    in_sync,
    log_of,
    records_of,
    wait_until,
)

TP = TopicPartition("t", 0)


def test_leader_epoch_bumps_at_every_election_and_stamps_the_batches(make_cluster) -> None:
    cluster = make_cluster(3)
    cluster.create_topic("t", 1, 3)
    leaders, epochs = [], []
    for i in range(3):
        state = cluster.controller.partition_state(TP)
        leaders.append(state.leader)
        epochs.append(state.leader_epoch)
        cluster.produce("t", 0, [f"e{i}".encode()])
        if i < 2:
            isr = list(state.isr)
            wait_until(lambda isr=isr: in_sync(cluster, TP, isr), "in sync")
            cluster.stop_broker(state.leader)
    assert epochs == [0, 1, 2]
    assert len(set(leaders)) == 3  # each election moved the leadership
    leader = cluster.brokers[leaders[-1]]
    assert leader.replica_manager.partitions[TP].leader_epoch == 2
    assert records_of(log_of(leader, TP)) == [(0, b"e0", 0), (1, b"e1", 1), (2, b"e2", 2)]
    entries = log_of(leader, TP).leader_epoch_cache.entries()
    assert [(e.epoch, e.start_offset) for e in entries] == [(0, 0), (1, 1), (2, 2)]
    # A restarted replica does not take the leadership back: no election, no bump.
    cluster.restart_broker(leaders[0])
    assert cluster.controller.partition_state(TP).leader_epoch == 2
    assert cluster.controller.partition_state(TP).leader == leaders[-1]


def test_non_leader_brokers_answer_not_leader_or_follower(make_cluster) -> None:
    cluster = make_cluster(3)
    cluster.create_topic("t", 1, 3)
    cluster.produce("t", 0, [b"a"])
    state = cluster.controller.partition_state(TP)
    for b in state.replicas:
        if b == state.leader:
            continue
        follower = cluster.brokers[b]
        with pytest.raises(NotLeaderOrFollowerError):
            follower.produce("t", 0, [b"x"], acks=1)
        result = consumer_fetch(follower, TP, 0)
        assert isinstance(result.error, NotLeaderOrFollowerError)
        assert (result.error_code, result.records) == (6, b"")
        with pytest.raises(NotLeaderOrFollowerError):
            follower.list_offsets("t", 0, LATEST_TIMESTAMP)
    leader = cluster.brokers[state.leader]
    assert leader.produce("t", 0, [b"b"], acks="all").base_offset == 1
    # A fetch carrying an older leader epoch is fenced, a newer one unknown.
    cluster.stop_broker(state.leader)
    new = cluster.controller.partition_state(TP)
    assert consumer_fetch(cluster.brokers[new.leader], TP, 0).error is None
    fenced = cluster.brokers[new.leader].fetch(
        FetchRequest((PartitionFetch(TP, 0, current_leader_epoch=new.leader_epoch - 1),))
    )
    assert isinstance(fenced.partitions[0].error, FencedLeaderEpochError)
    assert fenced.partitions[0].error_code == 74


def test_successor_fences_the_old_controller(make_cluster) -> None:
    cluster = make_cluster(3)
    cluster.create_topic("t", 1, 3)
    cluster.produce("t", 0, [b"a"])
    old = cluster.controller
    new = old.successor()
    assert new.epoch == old.epoch + 1
    assert cluster.controller is new  # the cluster follows the successor
    cluster.controller = new  # and assigning it back is the same
    assert cluster.controller is new
    for b in cluster.brokers.values():
        assert b.controller is new
        assert b.replica_manager.controller_epoch == new.epoch  # told at once
    with pytest.raises(StaleControllerEpochError):
        old.create_topic("u", 1, 1)
    state = old.partition_state(TP)
    with pytest.raises(StaleControllerEpochError):
        old.alter_partition(TP, state.leader, state)
    with pytest.raises(StaleControllerEpochError):
        old.successor()
    with pytest.raises(StaleControllerEpochError):
        old.broker_stopped(state.leader)
    assert new.partition_state(TP) == state  # nothing changed by the refused calls
    # A LeaderAndIsr stamped with the old epoch is refused by every broker.
    demote = LeaderAndIsr(-1, state.leader_epoch + 5, (), state.replicas, 99)
    for b in cluster.brokers.values():
        with pytest.raises(StaleControllerEpochError):
            b.replica_manager.become_leader_or_follower(old.epoch, {TP: demote})
    assert cluster.brokers[state.leader].replica_manager.partitions[TP].is_leader
    # The successor works: topics, elections, ISR changes, restarts.
    assert new.create_topic("u", 1, 3).partitions[0].leader_epoch == 0
    assert cluster.produce("t", 0, [b"b"]).base_offset == 1
    cluster.stop_broker(state.leader)
    assert new.partition_state(TP).leader_epoch == state.leader_epoch + 1
    restarted = cluster.restart_broker(state.leader)
    assert restarted.controller is new
    wait_until(lambda: in_sync(cluster, TP, [0, 1, 2]), "the restarted broker rejoins")
    stored = json.loads((cluster.base_dir / "controller.json").read_text())
    assert stored["controller_epoch"] == new.epoch


def test_alter_partition_checks_leader_and_partition_epochs(make_cluster) -> None:
    cluster = make_cluster(3)
    cluster.create_topic("t", 1, 3)
    c = cluster.controller
    state = c.partition_state(TP)
    follower = next(b for b in state.replicas if b != state.leader)
    shrink = LeaderAndIsr(
        state.leader, state.leader_epoch, (state.leader,), state.replicas, state.partition_epoch
    )
    with pytest.raises(FencedLeaderEpochError):  # not the leader
        c.alter_partition(TP, follower, shrink)
    with pytest.raises(InvalidUpdateVersionError):
        c.alter_partition(
            TP,
            state.leader,
            LeaderAndIsr(
                state.leader,
                state.leader_epoch,
                (state.leader,),
                state.replicas,
                state.partition_epoch - 1,
            ),
        )
    committed = c.alter_partition(TP, state.leader, shrink)
    assert (committed.isr, committed.partition_epoch) == ((state.leader,), 1)
    assert c.partition_state(TP) == committed


def test_partition_goes_offline_and_back_with_its_last_isr_member(make_cluster) -> None:
    cluster = make_cluster(3)
    cluster.create_topic("t", 1, 3)
    cluster.produce("t", 0, [b"a", b"b"])
    wait_until(lambda: in_sync(cluster, TP, [0, 1, 2]), "in sync")
    order = list(cluster.controller.partition_state(TP).replicas)
    order.reverse()  # the leader (first replica) stops last
    epoch = cluster.controller.partition_state(TP).leader_epoch
    for b in order:
        cluster.stop_broker(b)
    last = order[-1]
    state = cluster.controller.partition_state(TP)
    assert (state.leader, state.isr) == (-1, (last,))
    md = cluster.describe_topic("t").partitions[0]
    assert (md.leader, md.offline_replicas) == (-1, md.replicas)
    refused = cluster.append(TP, b"", timeout_ms=200)  # nobody to take it
    assert isinstance(refused.error, NotLeaderOrFollowerError)

    cluster.restart_broker(order[0])  # not in the last ISR: stays offline
    assert cluster.controller.partition_state(TP).leader == -1
    cluster.restart_broker(last)
    state = cluster.controller.partition_state(TP)
    assert state.leader == last
    assert state.leader_epoch > epoch
    assert fetched_records(consumer_fetch(cluster, TP, 0)) == [(0, b"a"), (1, b"b")]
    cluster.restart_broker(order[1])
    wait_until(lambda: in_sync(cluster, TP, [0, 1, 2]), "all three back in the ISR")
    assert cluster.produce("t", 0, [b"c"]).base_offset == 2


def test_leaders_never_call_the_controller_holding_a_partition_lock(make_cluster) -> None:
    """The controller calls brokers with its lock held (LeaderAndIsr takes partition locks); an
    ISR expansion must therefore not hold the partition lock while it waits for the
    controller, or the two deadlock."""
    cluster = make_cluster(3)
    cluster.create_topic("t", 1, 3)
    cluster.produce("t", 0, [b"a"])
    leader_id = cluster.controller.partition_state(TP).leader
    follower = next(b for b in range(3) if b != leader_id)
    cluster.stop_broker(follower)
    cluster.produce("t", 0, [b"b", b"c"])
    partition = cluster.brokers[leader_id].replica_manager.partitions[TP]
    controller = cluster.controller
    with controller._lock:  # the controller is busy (as while it sends LeaderAndIsr)
        cluster.restart_broker(follower)  # reentrant: same thread
        restarted = cluster.brokers[follower]
        wait_until(lambda: log_of(restarted, TP).log_end_offset == 3, "the follower catches up")
        # Its next fetch (within a fetch wait, 50 ms) makes the leader propose the ISR
        # expansion, which waits for the controller: meanwhile the partition lock stays free.
        for _ in range(10):
            got = partition.lock.acquire(timeout=2)
            assert got, "the partition lock is held while waiting for the controller"
            partition.lock.release()
            time.sleep(0.05)
        assert follower not in controller.partition_state(TP).isr  # still waiting
    wait_until(lambda: in_sync(cluster, TP, [0, 1, 2]), "the expansion completes")


def test_controller_store_keeps_partition_states(make_cluster, tmp_path: Path) -> None:
    base = tmp_path / "store"
    cluster = make_cluster(3, base_dir=base)
    cluster.create_topic("t", 2, 2)
    cluster.stop_broker(cluster.controller.partition_state(TP).leader)
    stored = json.loads((base / "controller.json").read_text())
    states = stored["topics"]["t"]["partition_states"]
    for p in range(2):
        s = cluster.controller.partition_state(TopicPartition("t", p))
        expected = {
            "leader": s.leader,
            "leader_epoch": s.leader_epoch,
            "isr": list(s.isr),
            "partition_epoch": s.partition_epoch,
        }
        assert states[str(p)] == expected
    assert states["0"]["leader_epoch"] == 1
    assert stored["controller_epoch"] == cluster.controller.epoch


def test_concurrent_elections_and_isr_changes_do_not_deadlock(make_cluster) -> None:
    """Brokers stopping and restarting (controller -> brokers) while followers rejoin and
    leaders shrink ISRs (brokers -> controller), on several partitions at once."""
    cluster = make_cluster(3, config=fast_config(lag_ms=200, fetch_wait_ms=10, backoff_ms=10))
    cluster.create_topic("t", 6, 3)
    stop = threading.Event()
    errors: list[BaseException] = []

    def produce() -> None:
        n = 0
        while not stop.is_set():
            try:
                cluster.produce("t", n % 6, [f"v{n}".encode()], acks=1, timeout_ms=2_000)
            except KafkaApiError:
                pass  # e.g. a partition offline for a moment: fine, not a hang
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)
                return
            n += 1

    thread = threading.Thread(target=produce)
    thread.start()
    done = threading.Event()

    def drill() -> None:
        try:
            for i in range(6):
                b = i % 3
                cluster.stop_broker(b, clean=i % 2 == 0)
                cluster.restart_broker(b)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)
        finally:
            done.set()

    driller = threading.Thread(target=drill)
    driller.start()
    try:
        assert done.wait(60), "the drill hung (deadlock?)"
    finally:
        stop.set()
        driller.join(timeout=30)
        thread.join(timeout=30)
    assert errors == []
    for p in range(6):
        tp = TopicPartition("t", p)
        wait_until(lambda tp=tp: in_sync(cluster, tp, [0, 1, 2]), f"{tp} back in sync")
