"""KIP-951 ``current_leader`` and ``node_endpoints`` on NOT_LEADER_OR_FOLLOWER, as Kafka's
``KafkaApis`` fills them: Produce v10+ and Fetch v16+ sent to a follower of a three-broker
cluster (EmbeddedCluster, each broker behind its own BrokerServer on 127.0.0.1); and the
Fetch frame with the tags set equals kio's encoding byte for byte."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import sys
import uuid
from collections.abc import Iterator

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.produce.v9 import request as req9
from kio.schema.produce.v9 import response as resp9
from kio.schema.produce.v10 import request as req10
from kio.schema.produce.v10 import response as resp10
from kio.static.primitive import i32

from broker_embedded.cluster import EmbeddedCluster
from broker_embedded.server.broker_server import BrokerServer
from broker_embedded.server.handlers import register_all
from broker_embedded.server.handlers.api_context import ApiContext, Node
from broker_embedded.server.handlers.fetch_response import (
    PartitionResponse,
    fetch_response_parts,
    group_by_topic,
)
from broker_embedded.server.protocol import RequestHeader, response_frame, response_schema
from tests.broker_embedded.server._fetch import decode, expected, fetch_request, partition_data
from tests.broker_embedded.server._net import RawClient, config, request_frame
from tests.broker_embedded.server.test_produce_api import batch

TOPIC = "led"


@dataclasses.dataclass
class Cluster:
    cluster: EmbeddedCluster
    servers: dict[int, BrokerServer]

    def node(self, broker_id: int) -> Node:
        e = self.servers[broker_id].endpoints[0]
        return Node(broker_id, e.host, e.port, self.cluster.brokers[broker_id].rack)


@contextlib.contextmanager
def served_cluster(tmp_path, n: int = 3) -> Iterator[Cluster]:
    """``n`` brokers, each behind its own server; Metadata names them all (as ``kafkalog serve
    --brokers n``)."""
    racks = {i: f"rack-{i}" for i in range(n)}
    cluster = EmbeddedCluster(tmp_path / "c", n, racks=racks, config=config())
    served = Cluster(cluster, {})
    try:
        for i, broker in cluster.brokers.items():
            ctx = ApiContext.of(broker, lambda: tuple(served.node(j) for j in served.servers))
            server = BrokerServer(
                broker.config,
                ["PLAINTEXT://127.0.0.1:0"],
                lambda apis, ctx=ctx: register_all(apis, ctx),
            )
            served.servers[i] = server.start()
        yield served
    finally:
        for server in served.servers.values():
            server.shutdown(5.0)
        cluster.close()


def produce(c: Cluster, broker_id: int, module, partition: int = 0):
    message = module.ProduceRequest(
        transactional_id=None,
        acks=1,
        timeout=datetime.timedelta(seconds=5),
        topic_data=(
            module.TopicProduceData(
                name=TOPIC,
                partition_data=(module.PartitionProduceData(index=partition, records=batch()),),
            ),
        ),
    )
    response_module = resp10 if module is req10 else resp9
    with RawClient(c.servers[broker_id]) as client:
        frame = client.call(message)
    from tests.broker_embedded.server._serve import decode_response

    return decode_response(response_module.ProduceResponse, frame, True)


def fetch(c: Cluster, broker_id: int, version: int, topic_id: uuid.UUID):
    with RawClient(c.servers[broker_id]) as client:
        client.send(request_frame(fetch_request(version, [(topic_id, [(0, 0, 1 << 20, -1)])]), 1))
        return decode(version, client.recv_frame())


def test_produce_to_a_follower_names_the_leader(tmp_path):
    with served_cluster(tmp_path) as c:
        meta = c.cluster.create_topic(TOPIC, 1, 3)
        p0 = meta.partitions[0]
        follower = next(b for b in p0.replicas if b != p0.leader)
        r10 = produce(c, follower, req10)
        old = produce(c, follower, req9)
        ok = produce(c, p0.leader, req10)
        leader = c.node(p0.leader)
    (p,) = r10.responses[0].partition_responses
    assert p.error_code == ErrorCode.not_leader_or_follower
    assert (p.current_leader.leader_id, p.current_leader.leader_epoch) == (
        p0.leader,
        p0.leader_epoch,
    )
    assert [(n.node_id, n.host, n.port, n.rack) for n in r10.node_endpoints] == [
        (leader.node_id, leader.host, leader.port, f"rack-{p0.leader}")
    ]
    (p9,) = old.responses[0].partition_responses  # v9 has no such fields
    assert p9.error_code == ErrorCode.not_leader_or_follower
    (good,) = ok.responses[0].partition_responses
    assert good.error_code == ErrorCode.none and ok.node_endpoints == ()
    assert good.current_leader == resp10.LeaderIdAndEpoch()  # the default: not sent


@pytest.mark.parametrize("version", [13, 15, 16, 18])
def test_fetch_from_a_follower_names_the_leader_from_v16(tmp_path, version):
    with served_cluster(tmp_path) as c:
        meta = c.cluster.create_topic(TOPIC, 1, 3)
        p0 = meta.partitions[0]
        follower = next(b for b in p0.replicas if b != p0.leader)
        response = fetch(c, follower, version, meta.topic_id)
        leader = c.node(p0.leader)
    (topic,) = response.responses
    (p,) = topic.partitions
    assert p.error_code == ErrorCode.not_leader_or_follower
    if version < 16:  # Kafka fills them from v16 (the tag exists from v12)
        assert (p.current_leader.leader_id, p.current_leader.leader_epoch) == (-1, -1)
        return
    assert (p.current_leader.leader_id, p.current_leader.leader_epoch) == (
        p0.leader,
        p0.leader_epoch,
    )
    assert [(n.node_id, n.host, n.port, n.rack) for n in response.node_endpoints] == [
        (leader.node_id, leader.host, leader.port, f"rack-{p0.leader}")
    ]


@pytest.mark.parametrize("version", range(12, 19))
def test_tagged_fields_equal_kios_encoding(version):
    header = RequestHeader(1, version, 321, "c", 2)
    topic = uuid.uuid4() if version >= 13 else "t"
    wire = [
        (topic, PartitionResponse(0, 6, current_leader=(2, 7))),
        (topic, PartitionResponse(1, 0, 5, 5, 0, None, -1, b"xyz")),
    ]
    nodes = (Node(2, "127.0.0.1", 9094, "r2"),)
    parts = fetch_response_parts(header, group_by_topic(wire), node_endpoints=nodes)
    m = sys.modules[response_schema(1, version).__module__]
    leader = m.LeaderIdAndEpoch(leader_id=i32(2), leader_epoch=i32(7))
    first = dataclasses.replace(partition_data(version, 0, error=6), current_leader=leader)
    message = expected(
        version,
        [(topic, [first, partition_data(version, 1, hw=5, lso=5, log_start=0, records=b"xyz")])],
    )
    if version >= 16:
        endpoint = m.NodeEndpoint(node_id=i32(2), host="127.0.0.1", port=i32(9094), rack="r2")
        message = dataclasses.replace(message, node_endpoints=(endpoint,))
    assert b"".join(parts) == response_frame(header, message)[4:]
