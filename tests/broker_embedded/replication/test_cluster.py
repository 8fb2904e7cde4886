"""Replication in an embedded cluster of real brokers on real files: placement, acks=all, the
high watermark, ISR shrink and expansion, min.insync.replicas, restarts and truncation of
divergent history, killing the leader under load, and reopening a whole cluster."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import pytest

from broker_embedded.broker import Broker
from broker_embedded.cluster import EmbeddedCluster
from broker_embedded.errors import (
    InvalidReplicationFactorError,
    KafkaApiError,
    NotEnoughReplicasError,
)
from broker_embedded.replica_manager.list_offsets import LATEST_TIMESTAMP
from broker_embedded.replication.replica_assignment import (
    BrokerMetadata,
    assign_replicas_to_brokers,
)
from broker_embedded.storage.topic_partition import TopicPartition
from tests.broker_embedded.replication._cluster_util import (
    consumer_fetch,
    epoch_file_bytes,
    fast_config,
    fetched_records,
    in_sync,
    log_file_bytes,
    log_of,
    records_of,
    values_at,
    wait_until,
)

TP = TopicPartition("t", 0)
MIN_ISR_2 = {"min.insync.replicas": "2"}


def leader_id(cluster: EmbeddedCluster, tp: TopicPartition = TP) -> int:
    return cluster.controller.partition_state(tp).leader


def followers(cluster: EmbeddedCluster, tp: TopicPartition = TP) -> list[int]:
    state = cluster.controller.partition_state(tp)
    return [b for b in state.replicas if b != state.leader]


def assert_replicas_identical(cluster: EmbeddedCluster, tp: TopicPartition, ids: list[int]) -> None:
    """Same records at the same offsets with the same epochs, same .log bytes, same
    leader-epoch-checkpoint bytes, on every replica in ``ids``."""
    first = cluster.brokers[ids[0]]
    for b in ids[1:]:
        other = cluster.brokers[b]
        assert records_of(log_of(other, tp)) == records_of(log_of(first, tp)), b
        assert log_file_bytes(other, tp) == log_file_bytes(first, tp), b
        assert epoch_file_bytes(other, tp) == epoch_file_bytes(first, tp), b


# -- 1. placement ----------------------------------------------------------------------------------


def test_placement_follows_replica_assignment_with_round_robin_leaders(make_cluster) -> None:
    cluster = make_cluster(3)
    md = cluster.create_topic("t", 6, 3, rng=random.Random(11))
    expected = assign_replicas_to_brokers(
        [BrokerMetadata(b) for b in range(3)], 6, 3, rng=random.Random(11)
    )
    assert {p.partition: list(p.replicas) for p in md.partitions} == expected
    leaders = [p.leader for p in md.partitions]
    assert leaders == [expected[p][0] for p in range(6)]  # the first replica leads
    assert all((leaders[p + 1] - leaders[p]) % 3 == 1 for p in range(5))  # round-robin
    assert all(p.isr == p.replicas and p.leader_epoch == 0 for p in md.partitions)
    for p in md.partitions:  # the brokers agree with the controller
        tp = TopicPartition("t", p.partition)
        for b in p.replicas:
            partition = cluster.brokers[b].replica_manager.partitions[tp]
            assert partition.is_leader == (b == p.leader)
            assert partition.leader_epoch == 0


def test_rack_aware_placement_spans_both_racks(make_cluster) -> None:
    racks = {0: "a", 1: "a", 2: "a", 3: "b", 4: "b", 5: "b"}
    cluster = make_cluster(6, racks=racks)
    md = cluster.create_topic("t", 12, 3, rng=random.Random(5))
    expected = assign_replicas_to_brokers(
        [BrokerMetadata(b, r) for b, r in racks.items()], 12, 3, rng=random.Random(5)
    )
    assert {p.partition: list(p.replicas) for p in md.partitions} == expected
    for p in md.partitions:
        assert len(set(p.replicas)) == 3
        assert {racks[b] for b in p.replicas} == {"a", "b"}
    two = cluster.create_topic("two", 6, 2)
    for p in two.partitions:
        assert sorted(racks[b] for b in p.replicas) == ["a", "b"]  # one replica per rack


def test_replication_factor_above_live_brokers_is_refused(make_cluster) -> None:
    cluster = make_cluster(3)
    with pytest.raises(InvalidReplicationFactorError):
        cluster.create_topic("t", 1, 4)
    cluster.stop_broker(2)
    with pytest.raises(InvalidReplicationFactorError):
        cluster.create_topic("t", 1, 3)
    assert cluster.create_topic("t", 2, 2).replication_factor == 2
    assert all(2 not in p.replicas for p in cluster.describe_topic("t").partitions)


# -- 2. replication --------------------------------------------------------------------------------


def test_acks_all_returns_once_every_isr_member_has_the_records(make_cluster) -> None:
    cluster = make_cluster(3)
    cluster.create_topic("t", 1, 3, MIN_ISR_2)
    for i in range(20):
        r = cluster.produce("t", 0, [f"v{i}-{j}".encode() for j in range(i % 3 + 1)])
        isr = cluster.controller.partition_state(TP).isr
        assert len(isr) == 3
        for b in isr:  # right after the answer, no waiting
            assert log_of(cluster.brokers[b], TP).log_end_offset >= r.last_offset + 1, (i, b)
        assert log_of(cluster.brokers[leader_id(cluster)], TP).high_watermark >= r.last_offset + 1
    leader = log_of(cluster.brokers[leader_id(cluster)], TP)
    assert leader.log_end_offset == sum(i % 3 + 1 for i in range(20)) == 39
    assert leader.high_watermark == 39
    # Followers learn the HW from their next fetch.
    wait_until(lambda: in_sync(cluster, TP, [0, 1, 2]), "followers learn the HW")
    assert_replicas_identical(cluster, TP, [leader_id(cluster), *followers(cluster)])
    assert [e.epoch for e in leader.leader_epoch_cache.entries()] == [0]
    assert {epoch for _, _, epoch in records_of(leader)} == {0}
    assert values_at(leader)[38] == b"v19-1"


# -- 3. killing the leader under acks=all load -----------------------------------------------------


def test_kill_leader_under_acks_all_load_loses_nothing_acknowledged(make_cluster) -> None:
    cluster = make_cluster(3)
    cluster.create_topic("t", 1, 3, MIN_ISR_2)
    acked: dict[int, bytes] = {}
    seen: dict[int, bytes | None] = {}
    problems: list[str] = []
    stop = threading.Event()  # the producers
    read_to: list[int] = []  # the consumer stops once at this offset
    lock = threading.Lock()

    def produce(name: str) -> None:
        n = 0
        while not stop.is_set():
            value = f"{name}-{n}".encode()
            try:
                r = cluster.produce("t", 0, [value], acks="all", timeout_ms=10_000)
            except KafkaApiError:  # not acknowledged: a producer retries (a new value here)
                time.sleep(0.005)
            else:
                with lock:
                    if r.base_offset in acked:
                        problems.append(f"offset {r.base_offset} acknowledged twice")
                    acked[r.base_offset] = value
            n += 1

    def consume() -> None:
        position = 0
        while not read_to or position < read_to[0]:
            try:
                result = consumer_fetch(cluster, TP, position, max_wait_ms=20, timeout_ms=5_000)
            except KafkaApiError as e:  # no leader within 5 s
                problems.append(f"consumer: {e!r}")
                continue
            if result.error is not None:
                problems.append(f"consumer at {position}: {result.error!r}")
                time.sleep(0.01)
                continue
            for offset, value in fetched_records(result):
                if offset < position:
                    continue
                if offset >= result.high_watermark:
                    problems.append(f"read offset {offset} above the HW {result.high_watermark}")
                seen[offset] = value
                position = offset + 1

    threads = [threading.Thread(target=produce, args=(f"p{i}",)) for i in range(2)]
    consumer = threading.Thread(target=consume)
    for t in [*threads, consumer]:
        t.start()
    try:
        wait_until(lambda: len(acked) >= 40, "40 acknowledged records")
        old = leader_id(cluster)
        old_epoch = cluster.controller.partition_state(TP).leader_epoch
        cluster.stop_broker(old, clean=False)  # mid-stream, as a killed process
        state = cluster.controller.partition_state(TP)
        assert state.leader not in (old, -1) and state.leader_epoch == old_epoch + 1
        before = len(acked)
        wait_until(lambda: len(acked) >= before + 40, "40 more acknowledged by the new leader")
        cluster.restart_broker(old)
        wait_until(lambda: old in cluster.controller.partition_state(TP).isr, "old leader rejoins")
        after = len(acked)
        wait_until(lambda: len(acked) >= after + 20, "20 more with the old leader back")
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)
        read_to.append(max(acked, default=-1) + 1)  # the consumer reads everything acknowledged
        consumer.join(timeout=30)
    assert not any(t.is_alive() for t in [*threads, consumer])
    assert problems == []
    wait_until(lambda: in_sync(cluster, TP, [0, 1, 2]), "all replicas caught up")
    final = values_at(log_of(cluster.brokers[leader_id(cluster)], TP))
    lost = {o: v for o, v in acked.items() if final.get(o) != v}
    assert lost == {}, f"acknowledged records lost or changed: {sorted(lost)[:10]}"
    vanished = {o: v for o, v in seen.items() if final.get(o) != v}
    assert vanished == {}, f"records read below the HW later changed: {sorted(vanished)[:10]}"
    assert set(acked) <= set(seen)  # the consumer read every acknowledged record
    assert_replicas_identical(cluster, TP, [0, 1, 2])


# -- 4. a slow follower ----------------------------------------------------------------------------


def test_paused_follower_delays_acks_all_until_it_leaves_the_isr(make_cluster) -> None:
    lag_ms = 1_000
    cluster = make_cluster(3, config=fast_config(lag_ms=lag_ms))
    cluster.create_topic("t", 1, 3, MIN_ISR_2)
    cluster.produce("t", 0, [b"first"])
    wait_until(lambda: in_sync(cluster, TP, [0, 1, 2]), "all in sync")
    leader = cluster.brokers[leader_id(cluster)]
    slow = followers(cluster)[0]
    done: dict[str, object] = {}

    def produce() -> None:
        start = time.monotonic()
        done["result"] = cluster.produce("t", 0, [b"slow"], acks="all", timeout_ms=20_000)
        done["elapsed"] = time.monotonic() - start

    cluster.pause_broker(slow)
    thread = threading.Thread(target=produce)
    thread.start()
    try:
        wait_until(lambda: log_of(leader, TP).log_end_offset == 2, "the leader appended")
        # Still waiting for the paused follower: not visible, not acknowledged.
        assert log_of(leader, TP).high_watermark == 1
        early = consumer_fetch(cluster, TP, 1)
        assert (early.error, early.high_watermark, early.records) == (None, 1, b"")
        assert cluster.list_offsets("t", 0, LATEST_TIMESTAMP).offset == 1
        assert slow in cluster.controller.partition_state(TP).isr
        assert thread.is_alive()
        thread.join(timeout=15)
        assert not thread.is_alive()
    finally:
        cluster.resume_broker(slow) if thread.is_alive() else None
        thread.join(timeout=30)
    assert done["result"].base_offset == 1  # type: ignore[attr-defined]
    assert done["elapsed"] >= (lag_ms - 300) / 1000  # the lag time had to pass first
    assert slow not in cluster.controller.partition_state(TP).isr
    assert log_of(leader, TP).high_watermark == 2
    late = consumer_fetch(cluster, TP, 1)
    assert fetched_records(late) == [(1, b"slow")]
    cluster.produce("t", 0, [b"more"])  # the HW moves on without the paused follower
    assert log_of(leader, TP).high_watermark == 3
    assert log_of(cluster.brokers[slow], TP).log_end_offset <= 2

    cluster.resume_broker(slow)
    wait_until(lambda: slow in cluster.controller.partition_state(TP).isr, "rejoins the ISR")
    wait_until(lambda: in_sync(cluster, TP, [0, 1, 2]), "catches up")
    assert_replicas_identical(cluster, TP, [0, 1, 2])


# -- 5. min.insync.replicas ------------------------------------------------------------------------


def test_min_insync_replicas_blocks_acks_all_and_the_high_watermark(make_cluster) -> None:
    cluster = make_cluster(3)
    cluster.create_topic("t", 1, 3, MIN_ISR_2)
    cluster.produce("t", 0, [b"a"])
    leader = leader_id(cluster)
    down = followers(cluster)
    for b in down:
        cluster.stop_broker(b, clean=False)
    assert cluster.controller.partition_state(TP).isr == (leader,)
    with pytest.raises(NotEnoughReplicasError):
        cluster.produce("t", 0, [b"refused"], acks="all")
    r = cluster.produce("t", 0, [b"b", b"c"], acks=1)
    assert (r.base_offset, r.last_offset) == (1, 2)
    lg = log_of(cluster.brokers[leader], TP)
    assert (lg.log_end_offset, lg.high_watermark) == (3, 1)  # appended, not committed
    assert consumer_fetch(cluster, TP, 1).records == b""
    assert cluster.list_offsets("t", 0, LATEST_TIMESTAMP).offset == 1
    assert values_at(lg) == {0: b"a", 1: b"b", 2: b"c"}  # nothing of the refused produce

    cluster.restart_broker(down[0])
    wait_until(lambda: lg.high_watermark == 3, "HW advances once a follower rejoins")
    assert cluster.controller.partition_state(TP).isr == tuple(sorted((leader, down[0])))
    assert fetched_records(consumer_fetch(cluster, TP, 1)) == [(1, b"b"), (2, b"c")]
    assert cluster.produce("t", 0, [b"d"], acks="all").base_offset == 3


# -- 6. restarts and divergent history -------------------------------------------------------------


def test_crashed_follower_recovers_a_torn_tail_and_rejoins(make_cluster) -> None:
    cluster = make_cluster(3)
    cluster.create_topic("t", 1, 3, MIN_ISR_2)
    for i in range(5):
        cluster.produce("t", 0, [f"a{i}".encode()])
    victim = followers(cluster)[1]
    wait_until(lambda: in_sync(cluster, TP, [0, 1, 2]), "in sync")
    cluster.stop_broker(victim, clean=False)
    segment = max((Path(cluster.brokers[victim].log_dir) / TP.dir_name).glob("*.log"))
    with segment.open("ab") as f:  # a write torn by the crash
        f.write(b"\x00\x00\x00\x00\x00\x00\x00\x05\x00\x00\x01")
    for i in range(5):
        cluster.produce("t", 0, [f"b{i}".encode()])
    assert victim not in cluster.controller.partition_state(TP).isr
    restarted = cluster.restart_broker(victim)
    wait_until(lambda: in_sync(cluster, TP, [0, 1, 2]), "the restarted follower rejoins")
    assert [v for _, v, _ in records_of(log_of(restarted, TP))] == [
        *(f"a{i}".encode() for i in range(5)),
        *(f"b{i}".encode() for i in range(5)),
    ]
    assert_replicas_identical(cluster, TP, [0, 1, 2])


def test_old_leader_truncates_its_divergent_suffix(make_cluster) -> None:
    # A long fetch wait: the followers' fetches are waiting in the leader when they are paused,
    # and would return the acks=1 records if a paused broker still applied responses.
    cluster = make_cluster(3, config=fast_config(fetch_wait_ms=1_000))
    cluster.create_topic("t", 1, 3, MIN_ISR_2)
    cluster.produce("t", 0, [b"a", b"b"])
    wait_until(lambda: in_sync(cluster, TP, [0, 1, 2]), "in sync")
    old = leader_id(cluster)
    f1, f2 = followers(cluster)
    cluster.pause_broker(f1)
    cluster.pause_broker(f2)
    r = cluster.produce("t", 0, [b"divergent-1", b"divergent-2"], acks=1)
    assert (r.base_offset, r.last_offset) == (2, 3)
    cluster.stop_broker(old, clean=False)
    assert log_of(cluster.brokers[f1], TP).log_end_offset == 2  # the paused ones applied nothing
    assert log_of(cluster.brokers[f2], TP).log_end_offset == 2
    cluster.resume_broker(f1)
    cluster.resume_broker(f2)
    state = cluster.controller.partition_state(TP)
    assert state.leader in (f1, f2) and state.leader_epoch == 1
    new = cluster.brokers[state.leader]
    r = cluster.produce("t", 0, [b"new-1", b"new-2", b"new-3"], acks="all")
    assert (r.base_offset, r.last_offset) == (2, 4)

    restarted = cluster.restart_broker(old)
    wait_until(lambda: in_sync(cluster, TP, [0, 1, 2]), "the old leader truncates and rejoins")
    expected = [(0, b"a", 0), (1, b"b", 0), (2, b"new-1", 1), (3, b"new-2", 1), (4, b"new-3", 1)]
    assert records_of(log_of(restarted, TP)) == expected
    assert records_of(log_of(new, TP)) == expected
    assert [
        (e.epoch, e.start_offset) for e in log_of(restarted, TP).leader_epoch_cache.entries()
    ] == [
        (0, 0),
        (1, 2),
    ]
    assert epoch_file_bytes(restarted, TP) == b"0\n2\n0 0\n1 2\n"
    assert_replicas_identical(cluster, TP, [0, 1, 2])


# -- 8. reopening a whole cluster ------------------------------------------------------------------


def test_reopened_cluster_has_topics_assignments_data_and_higher_epochs(
    make_cluster, tmp_path: Path
) -> None:
    base = tmp_path / "reopen"
    cluster = make_cluster(3, base_dir=base)
    cluster.create_topic("t", 3, 3, MIN_ISR_2)
    cluster.create_topic("u", 2, 2, {"cleanup.policy": "delete"})
    written: dict[TopicPartition, list[tuple[int, bytes | None]]] = {}
    for topic, n in (("t", 3), ("u", 2)):
        for p in range(n):
            tp = TopicPartition(topic, p)
            for i in range(4):
                value = f"{topic}{p}-{i}".encode()
                r = cluster.produce(topic, p, [value])
                written.setdefault(tp, []).append((r.base_offset, value))
    before = {t: cluster.describe_topic(t) for t in ("t", "u")}
    epoch_before = cluster.controller.epoch
    cluster.close()

    reopened = make_cluster(3, base_dir=base)
    assert reopened.controller.epoch > epoch_before
    assert reopened.controller.topics() == ["t", "u"]
    for t, md in before.items():
        now = reopened.describe_topic(t)
        assert now.topic_id == md.topic_id and dict(now.config) == dict(md.config)
        assert [p.replicas for p in now.partitions] == [p.replicas for p in md.partitions]
        for p_now, p_before in zip(now.partitions, md.partitions, strict=True):
            assert p_now.leader in p_now.replicas
            assert p_now.leader_epoch > p_before.leader_epoch
    for tp, expected in written.items():
        replicas = list(reopened.controller.partition_state(tp).replicas)
        wait_until(lambda tp=tp, r=replicas: in_sync(reopened, tp, r), f"{tp} in sync")
        assert fetched_records(consumer_fetch(reopened, tp, 0)) == expected
        for b in replicas:
            assert [(o, v) for o, v, _ in records_of(log_of(reopened.brokers[b], tp))] == expected
    assert reopened.produce("t", 0, [b"after"]).base_offset == 4


def test_reopen_never_lets_a_lagging_replica_lead(make_cluster, tmp_path: Path) -> None:
    """A replica that was out of the ISR when the cluster closed must not become leader on
    reopen (it would truncate acknowledged records away on the others)."""
    base = tmp_path / "lagging"
    cluster = make_cluster(3, base_dir=base)
    cluster.create_topic("t", 1, 3, MIN_ISR_2)
    cluster.produce("t", 0, [b"a", b"b"])
    lagging = 0  # the first to register on reopen
    cluster.stop_broker(lagging, clean=False)
    for i in range(5):
        cluster.produce("t", 0, [f"x{i}".encode()], acks="all")
    cluster.close()

    reopened = make_cluster(3, base_dir=base)
    state = reopened.controller.partition_state(TP)
    assert state.leader != lagging
    # A record in the new epoch: the leader wrote its epoch's start into its checkpoint when it
    # was elected, the followers write it when they replicate the first batch of that epoch.
    wait_until(lambda: in_sync(reopened, TP, [0, 1, 2]), "all in sync after reopen")
    assert reopened.produce("t", 0, [b"new"]).base_offset == 7
    wait_until(lambda: in_sync(reopened, TP, [0, 1, 2]), "all learn the HW")
    expected = [b"a", b"b", *(f"x{i}".encode() for i in range(5)), b"new"]
    for b in range(3):
        assert [v for _, v, _ in records_of(log_of(reopened.brokers[b], TP))] == expected, b
    assert_replicas_identical(reopened, TP, [0, 1, 2])


# -- the single-broker default ---------------------------------------------------------------------


def test_single_broker_default_goes_through_the_same_code(tmp_path: Path) -> None:
    broker = Broker(tmp_path / "solo", create=True)
    try:
        md = broker.create_topic("t", 2)
        assert [(p.leader, p.leader_epoch, p.replicas, p.isr) for p in md.partitions] == [
            (0, 0, (0,), (0,)),
            (0, 0, (0,), (0,)),
        ]
        r = broker.produce("t", 1, [b"x", b"y"], acks="all")
        assert (r.base_offset, r.last_offset) == (0, 1)
        assert log_of(broker, TopicPartition("t", 1)).high_watermark == 2
        got = consumer_fetch(broker, TopicPartition("t", 1), 0)
        assert fetched_records(got) == [(0, b"x"), (1, b"y")]
    finally:
        broker.close()
    broker = Broker(tmp_path / "solo", create=True)
    try:
        md = broker.describe_topic("t")
        # One above the epochs in the log: the empty partition 0 has none left (an epoch
        # entry at or above the log end offset is dropped on load, as in Kafka).
        assert [(p.leader, p.leader_epoch) for p in md.partitions] == [(0, 0), (0, 1)]
        got = consumer_fetch(broker, TopicPartition("t", 1), 0)
        assert fetched_records(got) == [(0, b"x"), (1, b"y")]
        assert broker.produce("t", 1, [b"z"]).base_offset == 2
    finally:
        broker.close()
