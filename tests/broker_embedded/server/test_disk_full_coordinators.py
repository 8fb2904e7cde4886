"""The coordinators' internal topics on a real full filesystem (a size-limited tmpfs,
tests/tmpfs_mount.py): an OffsetCommit whose ``__consumer_offsets`` append does not fit answers
NOT_COORDINATOR (Kafka's conversion of KAFKA_STORAGE_ERROR) and changes nothing, and lands once
space is back; a transaction whose records meet a full disk is retried by confluent-kafka and
commits exactly once when space is back."""

from __future__ import annotations

import time
from typing import Any

import pytest
from kio.index import load_response_schema
from kio.schema.offset_commit.v8 import request as oc
from kio.schema.offset_fetch.v7 import request as of
from kio.static.primitive import i32, i64

from broker_embedded.record.records import iter_batches
from broker_embedded.storage.log_segments import LogSegments
from tests.broker_embedded.server._net import RawClient
from tests.broker_embedded.server._serve import decode_response, served
from tests.tmpfs_mount import fill_leaving, tmpfs

NOT_COORDINATOR = 16
METADATA_BYTES = 4000  # four partitions of it: a batch that needs new pages
GROUP = "g"
DEADLINE_S = 30.0
INTERNAL = {
    "offsets_topic_num_partitions": 1,
    "offsets_topic_replication_factor": 1,
    "transaction_state_log_num_partitions": 1,
    "transaction_state_log_replication_factor": 1,
    "transaction_state_log_min_isr": 1,
}


def _call(client: RawClient, request: Any) -> Any:
    schema = load_response_schema(request.__api_key__, request.__version__)
    frame = client.call(request)
    return decode_response(schema, frame, schema.__flexible__)


def _commit(client: RawClient, offset: int) -> list[int]:
    request = oc.OffsetCommitRequest(
        group_id=GROUP,
        generation_id_or_member_epoch=i32(-1),
        member_id="",
        group_instance_id=None,
        topics=(
            oc.OffsetCommitRequestTopic(
                name="t",
                partitions=tuple(
                    oc.OffsetCommitRequestPartition(
                        partition_index=i32(p),
                        committed_offset=i64(offset),
                        committed_leader_epoch=i32(-1),
                        committed_metadata="m" * METADATA_BYTES,
                    )
                    for p in range(4)
                ),
            ),
        ),
    )
    return [p.error_code for p in _call(client, request).topics[0].partitions]


def _committed(client: RawClient) -> list[int]:
    request = of.OffsetFetchRequest(
        group_id=GROUP,
        topics=(
            of.OffsetFetchRequestTopic(name="t", partition_indexes=tuple(i32(p) for p in range(4))),
        ),
        require_stable=False,
    )
    return [p.committed_offset for p in _call(client, request).topics[0].partitions]


def test_an_offset_commit_on_a_full_disk_answers_not_coordinator_and_lands_later() -> None:
    with tmpfs(8 << 20) as mount, served(mount / "logs", **INTERNAL) as s:
        s.broker.create_topic("t", 4)
        client = RawClient(s.server)
        try:
            assert _commit(client, 5) == [0, 0, 0, 0]
            filler = fill_leaving(mount, 8 << 10)  # the 16 KB batch fails part way
            assert _commit(client, 9) == [NOT_COORDINATOR] * 4
            assert _committed(client) == [5, 5, 5, 5]
            assert s.broker.log_manager.health.failing
            filler.unlink()
            assert _commit(client, 9) == [0, 0, 0, 0]
            assert _committed(client) == [9, 9, 9, 9]
        finally:
            client.sock.close()
        offsets_dir = mount / "logs" / "__consumer_offsets-0"
        data = b"".join(
            (offsets_dir / f"{b:020d}.log").read_bytes()
            for b in LogSegments.list_dir(offsets_dir).base_offsets
        )
        batches = list(iter_batches(data, str(offsets_dir), tail="error"))
        assert all(b.is_valid() for b in batches) and len(batches) == 2


confluent_kafka = pytest.importorskip("confluent_kafka")


def test_a_transaction_meeting_a_full_disk_commits_exactly_once_when_space_is_back() -> None:
    from tests.broker_embedded.server.test_transactions_api import producer

    with tmpfs(8 << 20) as mount, served(mount / "logs", **INTERNAL) as s:
        s.broker.create_topic("tx", 1)
        p = producer(s.bootstrap, "app-1", **{"retry.backoff.ms": 100})
        p.init_transactions(DEADLINE_S)
        p.begin_transaction()
        filler = fill_leaving(mount, 16 << 10)  # the 32 KB of records fail part way
        health = s.broker.log_manager.health
        for i in range(4):
            p.produce("tx", key=b"k%d" % i, value=b"%08d" % i * 1024, partition=0)
        deadline = time.monotonic() + DEADLINE_S
        while health.failures < 2:  # answered KAFKA_STORAGE_ERROR, retried by the client
            assert time.monotonic() < deadline, "the full disk never failed an append"
            p.poll(0.05)
        filler.unlink()
        p.commit_transaction(DEADLINE_S)
        coordinator = s.broker.controller.transaction_coordinator
        assert coordinator.wait_completed("app-1", DEADLINE_S)
        directory = mount / "logs" / "tx-0"
        data = b"".join(
            (directory / f"{b:020d}.log").read_bytes()
            for b in LogSegments.list_dir(directory).base_offsets
        )
        batches = list(iter_batches(data, str(directory), tail="error"))
    keys = [r.key for b in batches if not b.is_control for r in b.records()]
    assert keys == [b"k0", b"k1", b"k2", b"k3"]
    assert [b.is_control for b in batches] == [False] * (len(batches) - 1) + [True]
