"""CreateTopics answered once the topic is registered, its partitions' logs made afterwards by
the admin queue's thread (controller.py "Creating partitions"), with a real Broker behind a
real BrokerServer and raw kio requests: the answer comes before the logs, a partition waiting
is LEADER_NOT_AVAILABLE (5) in Metadata and NOT_LEADER_OR_FOLLOWER (6) for Produce and
ListOffsets (Kafka's broker for a partition its metadata knows and it does not host yet),
every partition then becomes ready; DeleteTopics during the creation removes everything; the
bound on partitions waiting answers THROTTLING_QUOTA_EXCEEDED (v7) or REQUEST_TIMED_OUT (v4)
and creates nothing; a shutdown mid-creation is prompt and the reopened log dir completes the
acknowledged topic. A full disk during the creation (a real size-limited tmpfs) leaves the
partitions not made waiting, with no directory of theirs, until space is back.

A creation of BIG partitions takes seconds (a hundred logs a step, each step one sync), so the
partitions made last still wait when the client has read its answer; every wait is bounded.
"""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

from kio.schema.create_topics.v4 import request as ct4
from kio.schema.create_topics.v4.response import CreateTopicsResponse as CreateTopicsResponseV4
from kio.schema.create_topics.v7 import request as ct7
from kio.schema.create_topics.v7.response import CreateTopicsResponse as CreateTopicsResponseV7
from kio.schema.delete_topics.v5.request import DeleteTopicsRequest
from kio.schema.delete_topics.v5.response import DeleteTopicsResponse
from kio.schema.errors import ErrorCode
from kio.schema.list_offsets.v7 import request as lo
from kio.schema.list_offsets.v7.response import ListOffsetsResponse
from kio.schema.metadata.v9.request import MetadataRequest, MetadataRequestTopic
from kio.schema.metadata.v9.response import MetadataResponse
from kio.schema.produce.v9 import request as pr
from kio.schema.produce.v9.response import ProduceResponse
from kio.schema.types import TopicName
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64

from broker_embedded.broker import Broker
from broker_embedded.common.producer_record import build_batch
from broker_embedded.server.handlers import broker_server
from tests.broker_embedded.server._net import API_VERSIONS_V3, RawClient, config
from tests.broker_embedded.server._serve import decode_response
from tests.spark_kafkalog.test_serve import run_kafkalog
from tests.tmpfs_mount import fill_leaving, tmpfs

BIG = 3_000
WAIT_S = 120.0
SHUTDOWN_S = 10.0
TIMEOUT = i32Timedelta.parse(timedelta(seconds=60))


def create_v4(name: str, partitions: int) -> ct4.CreateTopicsRequest:
    return ct4.CreateTopicsRequest(
        topics=(
            ct4.CreatableTopic(
                name=TopicName(name),
                num_partitions=i32(partitions),
                replication_factor=i16(1),
                assignments=(),
                configs=(),
            ),
        ),
        timeout=TIMEOUT,
        validate_only=False,
    )


def create_v7(name: str, partitions: int) -> ct7.CreateTopicsRequest:
    return ct7.CreateTopicsRequest(
        topics=(
            ct7.CreatableTopic(
                name=TopicName(name),
                num_partitions=i32(partitions),
                replication_factor=i16(1),
                assignments=(),
                configs=(),
            ),
        ),
        timeout=TIMEOUT,
        validate_only=False,
    )


def created(client: RawClient, name: str, partitions: int) -> object:
    """CreateTopics v4 of ``name``: its one result."""
    frame = client.call(create_v4(name, partitions))
    (result,) = decode_response(CreateTopicsResponseV4, frame, False).topics
    return result


def metadata(client: RawClient, name: str) -> object:
    request = MetadataRequest(
        topics=(MetadataRequestTopic(name=TopicName(name)),),
        allow_auto_topic_creation=False,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )
    (topic,) = decode_response(MetadataResponse, client.call(request), True).topics
    return topic


def produce_code(client: RawClient, name: str, partition: int) -> int:
    request = pr.ProduceRequest(
        transactional_id=None,
        acks=i16(-1),
        timeout=TIMEOUT,
        topic_data=(
            pr.TopicProduceData(
                name=TopicName(name),
                partition_data=(
                    pr.PartitionProduceData(
                        index=i32(partition),
                        records=build_batch([b"v"], now_ms=int(time.time() * 1000)),
                    ),
                ),
            ),
        ),
    )
    (topic,) = decode_response(ProduceResponse, client.call(request), True).responses
    return topic.partition_responses[0].error_code


def list_offsets_code(client: RawClient, name: str, partition: int) -> int:
    request = lo.ListOffsetsRequest(
        replica_id=i32(-1),
        isolation_level=i8(0),
        topics=(
            lo.ListOffsetsTopic(
                name=TopicName(name),
                partitions=(
                    lo.ListOffsetsPartition(
                        partition_index=i32(partition),
                        current_leader_epoch=i32(-1),
                        timestamp=i64(-1),
                    ),
                ),
            ),
        ),
    )
    (topic,) = decode_response(ListOffsetsResponse, client.call(request), True).topics
    return topic.partitions[0].error_code


def wait_ready(client: RawClient, name: str, partitions: int) -> None:
    """Until Metadata gives every partition of ``name`` a leader (bounded)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        topic = metadata(client, name)
        codes = [p.error_code for p in topic.partitions]
        if len(codes) == partitions and set(codes) == {ErrorCode.none}:
            return
        assert time.monotonic() < deadline, f"{name}: {codes.count(5)} partitions still wait"
        time.sleep(0.1)


def dirs(log_dir: Path, name: str) -> int:
    return len(list(log_dir.glob(f"{name}-*")))


def test_the_answer_comes_before_the_logs_and_every_partition_becomes_ready(tmp_path: Path):
    log_dir = tmp_path / "logs"
    with Broker(log_dir, create=True, config=config()) as broker:
        server = broker_server(broker, ["PLAINTEXT://127.0.0.1:0"], config()).start()
        try:
            with RawClient(server.endpoints[0].port, timeout=WAIT_S) as client:
                # one step's worth while nothing waits: made before the answer
                assert created(client, "small", 5).error_code == ErrorCode.none
                assert produce_code(client, "small", 4) == ErrorCode.none
                result = created(client, "big", BIG)
                assert result.error_code == ErrorCode.none
                last = BIG - 1  # made last: its step comes after the others
                topic = metadata(client, "big")
                assert topic.error_code == ErrorCode.none
                waiting = topic.partitions[last]
                assert (waiting.error_code, waiting.leader_id, waiting.isr_nodes) == (
                    ErrorCode.leader_not_available,
                    -1,
                    (),
                )
                assert waiting.replica_nodes == (broker.broker_id,)
                assert produce_code(client, "big", last) == ErrorCode.not_leader_or_follower
                assert list_offsets_code(client, "big", last) == ErrorCode.not_leader_or_follower
                assert dirs(log_dir, "big") < BIG
                assert created(client, "big", 1).error_code == ErrorCode.topic_already_exists
                client.call(API_VERSIONS_V3)
                wait_ready(client, "big", BIG)
                assert produce_code(client, "big", last) == ErrorCode.none
                assert produce_code(client, "big", 0) == ErrorCode.none
            assert dirs(log_dir, "big") == BIG
            assert dirs(log_dir, "small") == 5
            assert broker.controller.pending_partitions() == 0
        finally:
            server.shutdown(SHUTDOWN_S)


def test_delete_topics_during_the_creation_removes_everything(tmp_path: Path):
    log_dir = tmp_path / "logs"
    with Broker(log_dir, create=True, config=config()) as broker:
        server = broker_server(broker, ["PLAINTEXT://127.0.0.1:0"], config()).start()
        try:
            with RawClient(server.endpoints[0].port, timeout=WAIT_S) as client:
                assert created(client, "big", BIG).error_code == ErrorCode.none
                assert metadata(client, "big").partitions[-1].error_code == (
                    ErrorCode.leader_not_available
                )
                deleted = DeleteTopicsRequest(topic_names=(TopicName("big"),), timeout=TIMEOUT)
                (done,) = decode_response(
                    DeleteTopicsResponse, client.call(deleted), True
                ).responses
                assert done.error_code == ErrorCode.none
                assert broker.controller.pending_partitions() == 0
                assert dirs(log_dir, "big") == 0
                assert metadata(client, "big").error_code == ErrorCode.unknown_topic_or_partition
                assert created(client, "big", 5).error_code == ErrorCode.none  # anew
                wait_ready(client, "big", 5)
            assert dirs(log_dir, "big") == 5
        finally:
            server.shutdown(SHUTDOWN_S)
    with Broker(log_dir) as reopened:
        assert [len(reopened.describe_topic(t).partitions) for t in reopened.list_topics()] == [5]


def test_partitions_beyond_the_bound_are_refused_and_nothing_is_created(tmp_path: Path):
    """At most ``max_pending_partitions`` wait: a creation beyond is answered at once,
    THROTTLING_QUOTA_EXCEEDED with a throttle time at v7, REQUEST_TIMED_OUT at v4, creating
    nothing; a single creation larger than the bound passes when nothing waits."""
    log_dir = tmp_path / "logs"
    with Broker(log_dir, create=True, config=config()) as broker:
        broker.controller.max_pending_partitions = 10
        server = broker_server(broker, ["PLAINTEXT://127.0.0.1:0"], config()).start()
        try:
            with RawClient(server.endpoints[0].port, timeout=WAIT_S) as client:
                assert created(client, "big", BIG).error_code == ErrorCode.none
                frame = client.call(create_v7("v7", 1))
                answer = decode_response(CreateTopicsResponseV7, frame, True)
                (v7,) = answer.topics
                assert v7.error_code == ErrorCode.throttling_quota_exceeded
                assert answer.throttle_time == timedelta(seconds=1)
                assert v7.error_message.startswith("topic 'v7': 1 partitions refused for now: ")
                v4 = created(client, "v4", 1)
                assert v4.error_code == ErrorCode.request_timed_out
                assert broker.list_topics() == ["big"]
                assert dirs(log_dir, "v4") == dirs(log_dir, "v7") == 0
                wait_ready(client, "big", BIG)
                assert created(client, "v4", 1).error_code == ErrorCode.none
        finally:
            server.shutdown(SHUTDOWN_S)


def test_a_shutdown_mid_creation_is_prompt_and_the_reopening_completes_the_topic(
    tmp_path: Path,
):
    log_dir = tmp_path / "logs"
    broker = Broker(log_dir, create=True, config=config())
    server = broker_server(broker, ["PLAINTEXT://127.0.0.1:0"], config()).start()
    with RawClient(server.endpoints[0].port, timeout=WAIT_S) as client:
        assert created(client, "big", BIG).error_code == ErrorCode.none  # acknowledged
    started = time.monotonic()
    server.shutdown(SHUTDOWN_S)
    waiting = broker.controller.pending_partitions("big")
    broker.close()
    assert time.monotonic() - started < SHUTDOWN_S
    assert waiting > 0, "the creation ended before the shutdown: nothing was tested"
    assert dirs(log_dir, "big") < BIG
    with Broker(log_dir) as reopened:
        topic = reopened.describe_topic("big")
        assert len(topic.partitions) == BIG
        assert {p.leader for p in topic.partitions} == {reopened.broker_id}
    assert dirs(log_dir, "big") == BIG
    verify = run_kafkalog(
        "dump", "--verify", "--summary", *sorted(log_dir.glob("big-*")), timeout=WAIT_S
    )
    assert verify.returncode == 0, verify.stdout[-2000:] + verify.stderr[-2000:]


def test_a_full_disk_during_the_creation_leaves_partitions_waiting_until_space_is_back(
    tmp_path: Path,
):
    partitions = 1_000  # about 12 KiB of files each on the tmpfs
    with tmpfs(64 << 20, parent=tmp_path) as mount:
        log_dir = mount / "logs"
        with Broker(log_dir, create=True, config=config()) as broker:
            controller = broker.controller
            server = broker_server(broker, ["PLAINTEXT://127.0.0.1:0"], config()).start()
            try:
                with RawClient(server.endpoints[0].port, timeout=WAIT_S) as client:
                    assert created(client, "big", partitions).error_code == ErrorCode.none
                    with controller._lock:  # no step runs while the disk fills up
                        filler = fill_leaving(mount, 0)
                    deadline = time.monotonic() + WAIT_S
                    while not controller.creation_failing:
                        assert time.monotonic() < deadline, "no step failed on the full disk"
                        time.sleep(0.05)
                    with controller._lock:  # between steps: whole logs only
                        waiting = controller.pending_partitions("big")
                        assert waiting > 0
                        made = {int(d.name.rsplit("-", 1)[1]) for d in log_dir.glob("big-*")}
                        assert made == set(range(partitions - waiting))
                    topic = metadata(client, "big")
                    assert topic.partitions[-1].error_code == ErrorCode.leader_not_available
                    filler.unlink()
                    wait_ready(client, "big", partitions)
                assert not controller.creation_failing
                assert dirs(log_dir, "big") == partitions
            finally:
                server.shutdown(SHUTDOWN_S)
