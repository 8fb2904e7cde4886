"""Followers of tiered partitions (KIP-405) in a 2-broker cluster against a real S3 server
(SeaweedFS, the session's ``s3`` fixture): a follower learns the store's end and deletes
locally only what the store holds; after a failover the new leader serves every offset from
the log start once and copies on from the store's end (cutting its segment there); a follower
restarted from the store takes the producer state and leader epochs of the stored segment
below the leader's local start, so an idempotent producer continues after a failover without
a duplicate or a sequence gap; a failing store stops neither replication nor, once it is back,
the follower's restart."""

from __future__ import annotations

import dataclasses
import itertools
import logging
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from broker_embedded.cluster import EmbeddedCluster
from broker_embedded.common.producer_record import ProducerRecord, build_batch
from broker_embedded.errors import OutOfOrderSequenceError
from broker_embedded.storage.leader_epoch_checkpoint import EpochEntry
from broker_embedded.storage.object_store import StoreLocation, StoreSettings
from broker_embedded.storage.object_store_fetch_source import ObjectStoreSource
from broker_embedded.storage.remote_log_manager import RemoteLogManager
from broker_embedded.storage.remote_log_staging import REMOTE_STAGING_DIR
from broker_embedded.storage.topic_partition import TopicPartition
from broker_embedded.storage.unified_log import UnifiedLog
from tests.broker_embedded.storage.test_remote_fetch import (
    COUNT,
    T0,
    quick_tiering_config,
    value,
    wire,
)
from tests.broker_embedded.storage.test_remote_log_manager import (
    TIERED,
    batches,
    local_bases,
    manifests,
)
from tests.s3_proxy import FaultProxy
from tests.seaweedfs import S3Server

TIMEOUT_S = 30.0


def wait_for(what: str, done: Callable[[], object], timeout_s: float = TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def record(i: int) -> ProducerRecord:
    return ProducerRecord(value(i), timestamp=T0 + 10 * i)


def stored_ranges(cluster: EmbeddedCluster, tp: TopicPartition) -> list[tuple[int, int]]:
    location = next(iter(cluster.brokers.values())).remote_log_manager.location
    return [(b, m.next_offset) for b, m in sorted(manifests(location, tp).items())]


def test_a_follower_deletes_locally_only_what_the_store_holds_and_leads_on_from_it(
    s3: S3Server, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The follower rolls a segment where its leader does not (as Kafka's replicas do with
    segment.jitter.ms), so its segments are cut elsewhere. The leader tiers and deletes
    locally; the follower learns the store's end from its manifests and deletes exactly its
    segments wholly below it, never the one holding it (a store refusing the listing: logged,
    nothing moves). Failover: the new leader reads offset 0 on from the store and its log,
    copies from the store's end on (its segment holding that end cut there, over what a copy
    killed half way left), and the store then holds the log without a hole or an overlap."""
    uri = f"s3://{s3.new_bucket('followret')}/c"
    tp = TopicPartition("tiered", 0)
    cluster = EmbeddedCluster(tmp_path / "c", 2, config=quick_tiering_config(uri, s3))
    try:
        cluster.create_topic("tiered", 1, 2, config={**TIERED, "local.retention.ms": "0"})
        leader = cluster.leader_for(tp)
        (fid,) = {0, 1} - {leader.broker_id}
        follower = cluster.brokers[fid]
        led, lg = leader.log_manager.get_log(tp), follower.log_manager.get_log(tp)
        for i in range(COUNT):
            cluster.produce("tiered", 0, [record(i)])  # acks=all: the follower holds each
            if i == 2:
                lg.roll()  # the follower alone: its later segments start 3 further
        wait_for("the follower's high watermark", lambda: lg.high_watermark == COUNT)
        before = local_bases(follower.log_dir, tp)
        assert before[:2] == [0, 3] and not set(before[2:]) & set(local_bases(leader.log_dir, tp))
        follower.remote_log_manager.run_once()  # nothing in the store: nothing deleted
        lg.delete_old_segments()
        assert (lg.remote_end_offset, local_bases(follower.log_dir, tp)) == (-1, before)

        assert leader.remote_log_manager.run_once() > 0
        led.delete_old_segments()
        end = stored_ranges(cluster, tp)[-1][1]
        assert led.local_log_start_offset == end and end not in before
        listing_fails(s3, follower.remote_log_manager.location.uri, tp, lg, caplog)
        follower.remote_log_manager.run_once()
        lg.delete_old_segments()
        assert lg.remote_end_offset == end
        holding = max(b for b in before if b < end)  # the segment holding the store's end
        assert local_bases(follower.log_dir, tp) == [b for b in before if b >= holding]
        assert (lg.log_start_offset, lg.local_log_start_offset) == (0, holding)

        wait_for(
            "the follower in the ISR", lambda: fid in cluster.controller.partition_state(tp).isr
        )
        cluster.stop_broker(leader.broker_id)
        wait_for(
            "the follower leading", lambda: cluster.controller.partition_state(tp).leader == fid
        )
        for i in range(COUNT, COUNT + 20):  # rolls the segment holding the store's end
            follower.produce("tiered", 0, [record(i)], acks=1)
        wait_for("the high watermark", lambda: lg.high_watermark == COUNT + 20)
        # what a copy of the cut killed half way leaves: its staged files, a partial object
        staging = follower.log_dir / REMOTE_STAGING_DIR / tp.dir_name
        staging.mkdir(parents=True)
        (staging / f"{end:020d}.log").write_bytes(b"half")
        follower.remote_log_manager.location.open().write(f"tiered-0/{end:020d}.log", b"half")
        assert follower.remote_log_manager.run_once() > 0
        assert not staging.parent.exists()
        ranges = stored_ranges(cluster, tp)
        assert ranges[0][0] == 0 and all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
        assert end in [b for b, _ in ranges]  # the segment holding it was cut there
        assert ranges[-1][1] == local_bases(follower.log_dir, tp)[-1]
        remote = ObjectStoreSource(follower.remote_log_manager.location).open()
        stored = [b[0] for b in batches(remote, tp)]
        assert stored == list(range(ranges[-1][1]))  # each batch once
        with wire(follower) as bootstrap:
            seen = consume_from_0(bootstrap, "tiered", COUNT + 20)
    finally:
        cluster.close()
    assert seen == [(i, value(i)) for i in range(COUNT + 20)]


def listing_fails(s3: S3Server, uri: str, tp: TopicPartition, lg: UnifiedLog, caplog) -> None:
    """A follower's remote log manager whose store refuses connections: its pass logs the
    partition's listing with its prefix and moves nothing; with the store back it learns the
    store's end."""
    settings = StoreSettings.parse({**s3.options(), "fs.s3a.endpoint": "http://127.0.0.1:1"})
    location = StoreLocation(uri, settings)
    rlm = RemoteLogManager(9, lg.log_dir, location, dict, 3_600_000, followers=lambda: {tp: lg})
    try:
        with caplog.at_level(logging.ERROR, "broker_embedded.storage.remote_log_manager"):
            assert rlm.run_once() == 0
        assert lg.remote_end_offset == -1
        assert any(
            f"of followed {tp} in {location.describe(tp.dir_name + '/')} failed" in r.getMessage()
            for r in caplog.records
        )
    finally:
        rlm.close()


def consume_from_0(bootstrap: str, topic: str, count: int) -> list[tuple[int, bytes]]:
    """Kafka's consumer (confluent-kafka) from offset 0 of partition 0 of ``topic``: (offset,
    value) of ``count`` records (fewer after :data:`TIMEOUT_S`)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer
    from confluent_kafka import TopicPartition as KafkaTopicPartition

    seen: list[tuple[int, bytes]] = []
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"remote-follower-{topic}",
            "enable.auto.commit": False,
            "max.partition.fetch.bytes": 1024,
        }
    )
    try:
        consumer.assign([KafkaTopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + TIMEOUT_S
        while len(seen) < count and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None:
                assert m.error() is None, m.error()
                seen.append((m.offset(), m.value()))
    finally:
        consumer.close()
    return seen


def test_a_follower_restarted_from_the_store_takes_its_producer_state_and_leader_epochs(
    s3: S3Server, tmp_path: Path
) -> None:
    """An idempotent producer's 20 batches, then 40 plain ones, while the follower is down; the
    leader tiers and deletes locally past them. The follower restarts, gets
    OFFSET_MOVED_TO_TIERED_STORAGE, and rebuilds from the stored segment below the leader's
    local start: its log restarts at that segment's end with the leader's epochs and the
    producer's state (its snapshot in the store; no batch of that producer is local). After a
    failover to it, the producer's retry of its last batch is a duplicate (its offset, nothing
    appended), a sequence gap is OUT_OF_ORDER_SEQUENCE_NUMBER, the next sequence is appended,
    and every record is in the log once. While its store is unreachable the follower backs off
    and stays where it was; once the store is back it rebuilds; killed after that and
    restarted, it has the state from its disk."""
    uri = f"s3://{s3.new_bucket('auxstate')}/c"
    tp = TopicPartition("idem", 0)
    config = quick_tiering_config(uri, s3)
    with FaultProxy(s3.endpoint) as proxy:
        cluster = EmbeddedCluster(tmp_path / "c", 2, config=config)
        try:
            cluster.create_topic("idem", 1, 2, config={**TIERED, "local.retention.ms": "0"})
            leader = cluster.leader_for(tp)
            (fid,) = {0, 1} - {leader.broker_id}
            cluster.stop_broker(fid)
            pid, epoch = cluster.init_producer_id()

            def idempotent(seq: int, i: int) -> bytes:
                return build_batch(
                    [record(i)], now_ms=T0, producer_id=pid, producer_epoch=epoch, base_sequence=seq
                )

            for i in range(20):
                assert leader.append(tp, idempotent(i, i), acks=1).error is None
            for i in range(20, COUNT):
                leader.produce("idem", 0, [record(i)], acks=1)
            led = leader.log_manager.get_log(tp)
            wait_for("the stopped follower out of the ISR", lambda: led.high_watermark == COUNT)
            assert leader.remote_log_manager.run_once() > 0
            led.delete_old_segments()
            local_start = led.local_log_start_offset
            assert local_start > 20 and led.log_start_offset == 0
            epochs = led.leader_epoch_cache.entries()

            rsm = tuple(
                (k, proxy.endpoint if k == "fs.s3a.endpoint" else v) for k, v in config.rsm_config
            )
            cluster.config = dataclasses.replace(config, rsm_config=rsm)
            proxy.stop()  # the follower's store is gone: it cannot rebuild
            follower = cluster.restart_broker(fid)
            lg, rlm = follower.log_manager.get_log(tp), follower.remote_log_manager
            wait_for("two refused builds", lambda: rlm.aux_state_failures >= 2)
            assert (lg.log_end_offset, rlm.aux_states_built) == (0, 0)  # nothing fetched
            proxy.start()
            for attempt in ("rebuilt", "killed and restarted"):  # its state is on its disk
                if attempt != "rebuilt":
                    cluster.stop_broker(fid, clean=False)
                    follower = cluster.restart_broker(fid)
                    lg, rlm = follower.log_manager.get_log(tp), follower.remote_log_manager
                wait_for(
                    f"the follower {attempt} caught up", lambda lg=lg: lg.log_end_offset == COUNT
                )
                assert (lg.log_start_offset, lg.local_log_start_offset) == (0, local_start)
                assert lg.producer_state.last_entry(pid).last_seq == 19
                assert lg.leader_epoch_cache.entries() == epochs
                assert rlm.aux_states_built == (attempt == "rebuilt")
            wait_for(
                "the follower in the ISR", lambda: fid in cluster.controller.partition_state(tp).isr
            )

            cluster.stop_broker(leader.broker_id)
            wait_for(
                "the follower leading", lambda: cluster.controller.partition_state(tp).leader == fid
            )
            new_epoch = cluster.controller.partition_state(tp).leader_epoch
            retry = follower.append(tp, idempotent(19, 19), acks=1)
            assert (retry.error, retry.base_offset, lg.log_end_offset) == (None, 19, COUNT)
            gap = follower.append(tp, idempotent(21, COUNT), acks=1)
            assert isinstance(gap.error, OutOfOrderSequenceError)
            next_one = follower.append(tp, idempotent(20, COUNT), acks=1)
            assert (next_one.error, next_one.base_offset) == (None, COUNT)
            assert lg.leader_epoch_cache.entries() == [*epochs, EpochEntry(new_epoch, COUNT)]
            seen = [(b.base_offset, next(b.records()).value) for b in lg.batches()]
            remote = ObjectStoreSource(rlm.location).open()
            stored = [b[0] for b in batches(remote, tp, local_start)]
        finally:
            cluster.close()
    assert stored == list(range(local_start))
    assert seen == [(i, value(i)) for i in range(local_start, COUNT + 1)]


@pytest.mark.slow  # kafkalog serve with two brokers, stops and a start: 13 s alone, 31 s by a hog
def test_an_idempotent_producer_goes_on_through_a_failover_to_a_follower_rebuilt_from_the_store(
    s3: S3Server, tmp_path: Path
) -> None:
    """``kafkalog serve --brokers 2`` tiering to the store; confluent-kafka's idempotent
    producer sends 20 records while the follower is stopped, a plain producer 40 more, and
    the leader tiers and deletes them locally. The follower, started again, rebuilds from the
    store; after a failover to it Kafka's own ``kafka-transactions describe-producers`` finds
    the producer at its last sequence (19, from the stored snapshot: none of its batches is
    local), and the producer goes on without an error: every record once, in order."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from tests.kafka39 import kafka_tool
    from tests.spark_kafkalog._serve_proc import ServeProcess

    uri = f"s3://{s3.new_bucket('idemserve')}/c"
    tp = TopicPartition("idem", 0)
    rsm = "".join(f'"{k}" = "{v}"\n' for k, v in {"location": uri, **s3.options()}.items())
    config = tmp_path / "broker.toml"
    config.write_text(
        '[broker]\n"remote.log.storage.system.enable" = true\n'
        '"remote.log.manager.task.interval.ms" = 100\n"log.retention.check.interval.ms" = 100\n'
        '"replica.lag.time.max.ms" = 500\n"replica.fetch.backoff.ms" = 50\n'
        f"[rsm_config]\n{rsm}"
    )
    logs = tmp_path / "c"
    with ServeProcess(logs, "--broker-config", config, brokers=2, stderr=tmp_path / "err") as serve:
        admin = AdminClient({"bootstrap.servers": serve.bootstrap})
        topic = NewTopic("idem", 1, 2, config={**TIERED, "local.retention.ms": "0"})
        admin.create_topics([topic])["idem"].result(TIMEOUT_S)

        def partition():
            return admin.list_topics("idem", timeout=TIMEOUT_S).topics["idem"].partitions[0]

        leader = partition().leader
        (fid,) = set(serve.ports) - {leader}
        assert serve.control(f"stop {fid}") == f"broker {fid} stopped"
        errors: list[object] = []

        def sent(err, _msg) -> None:
            if err is not None:
                errors.append(err)

        idempotent = Producer(
            {
                "bootstrap.servers": serve.bootstrap,
                "enable.idempotence": True,
                "linger.ms": 0,
                "message.timeout.ms": 60_000,
            }
        )
        plain = Producer({"bootstrap.servers": serve.bootstrap, "acks": "all", "linger.ms": 0})
        for i in range(COUNT):
            producer = idempotent if i < 20 else plain
            producer.produce("idem", value(i), partition=0, on_delivery=sent)
            assert producer.flush(TIMEOUT_S) == 0  # one batch each
        wait_for(
            "the producer's batches tiered and deleted locally",
            lambda: local_bases(logs / f"broker-{leader}", tp)[0] >= 20,
        )
        assert serve.control(f"start {fid}").startswith(f"broker {fid} listening on")
        wait_for("the rebuilt follower in the ISR", lambda: len(partition().isrs) == 2)
        assert local_bases(logs / f"broker-{fid}", tp)[0] >= 20  # restarted above them
        assert serve.control(f"stop {leader}") == f"broker {leader} stopped"
        wait_for("the follower leading", lambda: partition().leader == fid)
        described = kafka_tool(
            "kafka-transactions",
            "--bootstrap-server",
            f"127.0.0.1:{serve.ports[fid]}",
            "describe-producers",
            "--topic",
            "idem",
            "--partition",
            "0",
            work=tmp_path,
        )
        rows = [line.split() for line in described.stdout.splitlines() if line.strip()]
        assert (
            rows[0][:4] == ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence"]
            and len(rows) == 2
        )
        assert rows[1][3] == "19"
        for i in range(COUNT, COUNT + 10):
            idempotent.produce("idem", value(i), partition=0, on_delivery=sent)
        assert idempotent.flush(TIMEOUT_S) == 0 and errors == []
        seen = consume_from_0(serve.bootstrap, "idem", COUNT + 10)
        assert serve.terminate() == 0
    assert seen == [(i, value(i)) for i in range(COUNT + 10)]
