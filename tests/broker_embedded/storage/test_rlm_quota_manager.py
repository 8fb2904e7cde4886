"""Tiered storage's byte-rate quotas (KIP-956): the rate and throttle time as Kafka's
``RLMQuotaManager`` computes them, the copier held to ``remote.log.manager.copy.max.bytes.per.
second`` (and stopped promptly while it waits), and a consumer's remote read answered without
records, and without an error, while ``remote.log.manager.fetch.max.bytes.per.second`` is
exceeded. Against a real S3 server (the session's ``s3`` fixture)."""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path

from broker_embedded.broker import Broker
from broker_embedded.broker_config import BrokerConfig
from broker_embedded.common.fetch_request import FetchRequest, PartitionFetch
from broker_embedded.record.records import iter_batches
from broker_embedded.storage.log_config import InvalidConfigError
from broker_embedded.storage.rlm_quota_manager import RLMQuotaManager, RLMQuotaManagerConfig
from broker_embedded.storage.topic_partition import TopicPartition
from tests.broker_embedded.storage.test_remote_fetch import tiered_broker, value
from tests.broker_embedded.storage.test_remote_log_manager import (
    TIERED,
    local_bases,
    manifests,
    tiering_config,
)
from tests.seaweedfs import S3Server


class Clock:
    def __init__(self) -> None:
        self.ms = 0.0

    def __call__(self) -> float:
        return self.ms


def test_the_rate_and_throttle_time_are_kafka_s() -> None:
    """1,000 bytes a second over 11 samples of 1 s: 5,000 bytes at once is a rate of 5,000 over
    the one-window minimum, 4 s to wait; at 4 s the rate over the 4 s since is 1,250, 1 s more;
    at 5 s it is the quota; once its sample is 11 windows old the bytes no longer count."""
    clock = Clock()
    quota = RLMQuotaManager(RLMQuotaManagerConfig(1000, 11, 1), clock)
    assert quota.throttle_time_ms() == 0
    quota.record(5000)
    assert quota.throttle_time_ms() == 4000
    clock.ms = 4000
    assert quota.throttle_time_ms() == 1000
    clock.ms = 5000
    assert quota.throttle_time_ms() == 0
    quota.record(6000)  # a new sample: 11,000 bytes over 5 s
    assert quota.throttle_time_ms() == 6000
    clock.ms = 11_000  # the first sample is 11 windows old: 6,000 bytes over 6 s
    assert quota.throttle_time_ms() == 0
    clock.ms = 16_000
    assert quota.throttle_time_ms() == 0


def test_the_ring_holds_at_most_its_samples() -> None:
    """A sample a window: with 2 samples of 1 s, the third window's bytes push out the first's."""
    clock = Clock()
    quota = RLMQuotaManager(RLMQuotaManagerConfig(100, 2, 1), clock)
    quota.record(900)
    clock.ms = 1000
    quota.record(300)
    clock.ms = 1999  # 1,200 bytes over 1.999 s
    assert quota.throttle_time_ms() == round((1200 / 1.999 - 100) / 100 * 1999)
    clock.ms = 2000  # the first sample is 2 windows old
    quota.record(0)
    assert quota.throttle_time_ms() == round((300 / 1.0 - 100) / 100 * 1000)


def test_the_default_quota_never_throttles() -> None:
    quota = RLMQuotaManager(RLMQuotaManagerConfig(), Clock())
    quota.record(1 << 62)
    assert quota.throttle_time_ms() == 0


def test_the_quota_configs_are_broker_configs_with_kafka_s_bounds() -> None:
    config = BrokerConfig.from_mapping(
        {
            "broker": {
                "remote.log.manager.copy.max.bytes.per.second": 2048,
                "remote.log.manager.fetch.quota.window.num": 3,
            }
        }
    )
    assert config.remote_copy_quota == RLMQuotaManagerConfig(2048, 11, 1)
    assert config.remote_fetch_quota == RLMQuotaManagerConfig((1 << 63) - 1, 3, 1)
    bad = {"broker": {"remote.log.manager.copy.quota.window.size.seconds": 0}}
    try:
        BrokerConfig.from_mapping(bad, "b.toml")
    except InvalidConfigError as e:
        assert str(e) == (
            "b.toml: invalid value 0 for broker config remote.log.manager.copy.quota.window."
            "size.seconds: must be an integer >= 1"
        )
    else:
        raise AssertionError("a window of 0 s was accepted")


def test_copies_are_held_to_the_copy_quota(s3: S3Server, tmp_path: Path) -> None:
    """At 2,048 bytes a second, the copier waits between segments: when it records its last
    segment the rate of the others is within the quota, so copying them took at least their
    bytes over the quota."""
    uri = f"s3://{s3.new_bucket('copyq')}/b0"
    tp = TopicPartition("tiered", 0)
    config = dataclasses.replace(
        tiering_config(uri, s3), remote_log_manager_copy_max_bytes_per_second=2048
    )
    logs = tmp_path / "logs"
    with Broker(logs, config=config, create=True) as broker:
        broker.create_topic("tiered", config=TIERED)
        for i in range(40):
            broker.produce("tiered", 0, [value(i)])
        closed = local_bases(logs, tp)
        sizes = [(logs / tp.dir_name / f"{b:020d}.log").stat().st_size for b in closed[:-1]]
        rlm = broker.remote_log_manager
        started = time.monotonic()
        copied = rlm.copied + rlm.run_once()
        took = time.monotonic() - started
        assert copied == len(sizes) >= 6
        assert sorted(manifests(rlm.location, tp)) == closed[:-1]
        assert took >= (sum(sizes) - max(sizes)) / 2048 - 1.0


def test_a_copier_waiting_for_its_quota_stops_at_close(s3: S3Server, tmp_path: Path) -> None:
    """At 1 byte a second the copier copies one segment, then would wait for minutes: closing
    the manager ends the wait, and the next segment is not copied."""
    uri = f"s3://{s3.new_bucket('copyw')}/b0"
    tp = TopicPartition("tiered", 0)
    config = dataclasses.replace(
        tiering_config(uri, s3), remote_log_manager_copy_max_bytes_per_second=1
    )
    with Broker(tmp_path / "logs", config=config, create=True) as broker:
        broker.create_topic("tiered", config=TIERED)
        for i in range(20):
            broker.produce("tiered", 0, [value(i)])
        rlm = broker.remote_log_manager
        done = threading.Event()
        passes = threading.Thread(target=lambda: (rlm.run_once(), done.set()), daemon=True)
        passes.start()
        deadline = time.monotonic() + 60
        while rlm.copy_quota.throttle_time_ms() == 0 and time.monotonic() < deadline:
            time.sleep(0.05)  # until the first segment is recorded and the copier waits
        assert rlm.copy_quota.throttle_time_ms() > 60_000
        rlm.close()
        assert done.wait(30), "the copier still waits for its quota after close()"
        assert len(manifests(rlm.location, tp)) <= 1


def test_a_remote_read_over_the_fetch_quota_answers_no_records(
    s3: S3Server, tmp_path: Path
) -> None:
    """At 1 byte a second, the first remote read is served and counted; the next consumer
    fetch of an offset only in the store answers no records and no error (Kafka: the consumer
    fetches again), while a fetch of the local tail is served as ever."""
    uri = f"s3://{s3.new_bucket('fetchq')}/b0"
    tp = TopicPartition("tiered", 0)
    with tiered_broker(
        tmp_path / "l", uri, s3, remote_log_manager_fetch_max_bytes_per_second=1
    ) as broker:
        lg = broker.log_manager.get_log(tp)
        local = lg.local_log_start_offset
        assert local > 0
        first = broker.fetch(FetchRequest((PartitionFetch(tp, 0, 1 << 20),), max_wait_ms=0))
        part = first.partitions[0]
        assert part.error is None and [b.base_offset for b in iter_batches(part.records)][0] == 0
        assert broker.remote_log_manager.fetch_quota.throttle_time_ms() > 0
        again = broker.fetch(FetchRequest((PartitionFetch(tp, 0, 1 << 20),), max_wait_ms=0))
        part = again.partitions[0]
        assert (part.error, part.records, part.log_start_offset) == (None, b"", 0)
        tail = broker.fetch(FetchRequest((PartitionFetch(tp, local, 1 << 20),), max_wait_ms=0))
        assert [b.base_offset for b in iter_batches(tail.partitions[0].records)][0] == local
