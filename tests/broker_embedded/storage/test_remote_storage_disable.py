"""KIP-950's topic configs of tiered storage against a real S3 server (SeaweedFS, the session's
``s3`` fixture): ``remote.log.copy.disable`` (the store turns read only: nothing more is
copied, local segments go by ``retention.*`` and the log start follows them, remote retention
deleting the stored segments below it) and ``remote.log.delete.on.disable`` (needed to turn
``remote.storage.enable`` off; the store's segments are then deleted and the log starts at its
first local offset), validated with Kafka 3.9's messages (LogConfig.java)."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker_embedded.storage.log_config import InvalidConfigError
from broker_embedded.storage.remote_log_pending_deletions import PENDING_FILE
from broker_embedded.storage.topic_partition import TopicPartition
from tests.broker_embedded.storage.test_remote_fetch import COUNT, T0, tiered_broker, value
from tests.broker_embedded.storage.test_remote_log_manager import TIERED, local_bases, manifests
from tests.seaweedfs import S3Server

TP = TopicPartition("tiered", 0)
# Kafka 3.9's messages (LogConfig.validateTurningOffRemoteStorageWithDelete and
# validateRetentionConfigsWhenRemoteCopyDisabled), with the topic kafkalog adds
TURNING_OFF = (
    "It is invalid to disable remote storage without deleting remote data. If you want to keep "
    "the remote data and turn to read only, please set "
    "`remote.storage.enable=true,remote.log.copy.disable=true`. If you want to disable remote "
    "storage and delete all remote data, please set "
    "`remote.storage.enable=false,remote.log.delete.on.disable=true`. (topic 'tiered')"
)
COPY_DISABLED = (
    "When `remote.log.copy.disable` is set to true, the `local.retention.{0}` and "
    "`retention.{0}` must be set to the identical value because there will be no more logs "
    "copied to the remote storage. (topic '{1}')"
)


def test_the_configs_are_validated_as_kafka_validates_them(s3: S3Server, tmp_path: Path) -> None:
    uri = f"s3://{s3.new_bucket('kip950')}/b0"
    with tiered_broker(tmp_path / "l", uri, s3) as broker:
        read_only = {"remote.storage.enable": "true", "remote.log.copy.disable": "true"}
        for config, unit in (
            ({"local.retention.ms": "1000"}, "ms"),
            ({"retention.bytes": "9000", "local.retention.bytes": "5000"}, "bytes"),
        ):
            with pytest.raises(InvalidConfigError) as refused:
                broker.create_topic("c", config={**read_only, **config})
            assert str(refused.value) == COPY_DISABLED.format(unit, "c")
        same = {"retention.ms": "1000", "local.retention.ms": "1000"}
        broker.create_topic("c", config={**read_only, **same})
        with pytest.raises(InvalidConfigError) as refused:
            broker.alter_topic_config("tiered", {"segment.bytes": "1024"})
        assert str(refused.value) == TURNING_OFF
        with pytest.raises(InvalidConfigError, match="'yes' for remote.log.copy.disable"):
            broker.alter_topic_config("tiered", {**TIERED, "remote.log.copy.disable": "yes"})
        broker.alter_topic_config("tiered", {**TIERED, "remote.log.delete.on.disable": "true"})
        assert broker.topic_config("tiered")["remote.log.delete.on.disable"] == "true"
        assert broker.topic_config("c")["remote.log.copy.disable"] == "true"
        assert broker.topic_config("tiered")["remote.log.copy.disable"] == "false"


def test_copy_disabled_copies_nothing_more_and_retention_moves_the_log_start(
    s3: S3Server, tmp_path: Path
) -> None:
    """A tiered topic turned read only: its new closed segments are not copied, and
    local.retention.ms 0 no longer deletes; retention.bytes deletes the oldest local segments
    (stored or not) and moves the log start past them, and the stored segments below it are
    then deleted from the store."""
    uri = f"s3://{s3.new_bucket('copyoff')}/b0"
    with tiered_broker(tmp_path / "l", uri, s3) as broker:
        rlm, unified = broker.remote_log_manager, broker.log_manager.get_log(TP)
        stored = manifests(rlm.location, TP)
        end = max(m.next_offset for m in stored.values())
        assert unified.local_log_start_offset == end
        read_only = {**TIERED, "remote.log.copy.disable": "true"}
        broker.alter_topic_config("tiered", read_only)
        for i in range(COUNT, 2 * COUNT):
            broker.produce("tiered", 0, [value(i)])
        assert rlm.run_once() == 0 and manifests(rlm.location, TP) == stored
        assert unified.delete_old_segments() == 0  # retention.ms (7 days), not local.retention.ms
        bases = local_bases(tmp_path / "l", TP)
        sizes = [(tmp_path / "l" / "tiered-0" / f"{b:020d}.log").stat().st_size for b in bases]
        keep = sum(sizes[-3:])  # the active segment and the two closed ones before it
        broker.alter_topic_config("tiered", {**read_only, "retention.bytes": str(keep)})
        assert unified.delete_old_segments() == len(bases) - 3
        assert local_bases(tmp_path / "l", TP) == bases[-3:]
        assert unified.log_start_offset == unified.local_log_start_offset == bases[-3] > end
        assert broker.list_offsets("tiered", 0, -2).offset == bases[-3]
        assert rlm.run_once() == 0
        assert manifests(rlm.location, TP) == {}  # all below the log start
        assert rlm.deleted == len(stored)


def test_turning_tiering_off_deletes_the_store_s_segments(s3: S3Server, tmp_path: Path) -> None:
    """``remote.storage.enable=false`` with ``remote.log.delete.on.disable=true``: the log
    starts at its first local offset at once, and the partition's objects go from the store;
    the log is then an ordinary one (retention.*, no remote reads)."""
    uri = f"s3://{s3.new_bucket('tieroff')}/b0"
    with tiered_broker(tmp_path / "l", uri, s3) as broker:
        rlm, unified = broker.remote_log_manager, broker.log_manager.get_log(TP)
        local_start = unified.local_log_start_offset
        assert local_start > 0 and unified.log_start_offset == 0
        off = {"segment.bytes": "1024", "remote.log.delete.on.disable": "true"}
        broker.alter_topic_config("tiered", off)
        assert unified.log_start_offset == local_start and unified.remote_end_offset == -1
        assert broker.list_offsets("tiered", 0, -2).offset == local_start
        rlm.run_once()  # (the pass it scheduled may have run already)
        assert rlm.location.open().list("tiered-0/") == {}
        assert not (tmp_path / "l" / PENDING_FILE).exists()
        broker.produce("tiered", 0, [value(COUNT)])
        found = broker.list_offsets("tiered", 0, T0)  # the first record by time: local now
        assert found.offset == local_start
