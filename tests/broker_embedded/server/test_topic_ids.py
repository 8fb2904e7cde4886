"""Topic ids resolved through the controller's topic-id map (one O(1) lookup per topic named
by id): the map follows creation, growth, deletion, a controller successor and a reload from
``controller.json``; over Fetch v13+ a deleted-and-recreated topic's old id is
UNKNOWN_TOPIC_ID (100) while its new id reads the new topic."""

from __future__ import annotations

import uuid

import pytest

from broker_embedded.broker import Broker
from broker_embedded.cluster import EmbeddedCluster
from tests.broker_embedded.server._fetch import decode, fetch_request, fetch_server
from tests.broker_embedded.server._net import RawClient, request_frame

UNKNOWN_TOPIC_ID = 100


def test_the_map_follows_the_topics(tmp_path):
    with EmbeddedCluster(tmp_path / "c", 2) as cluster:
        a = cluster.create_topic("a", 1, 2).topic_id
        b = cluster.create_topic("b", 2, 1).topic_id
        controller = cluster.controller
        controller.create_partitions("b", 4)
        assert (controller.topic_name(a), controller.topic_name(b)) == ("a", "b")
        controller.delete_topic("a")
        assert controller.topic_name(a) is None
        successor = controller.successor()
        assert (successor.topic_name(a), successor.topic_name(b)) == (None, "b")
        assert cluster.brokers[0].topic_name(b) == "b"
    with EmbeddedCluster(tmp_path / "c", 2) as reloaded:  # from controller.json
        assert reloaded.controller.topic_name(b) == "b"
        assert reloaded.controller.topic_name(uuid.uuid4()) is None


@pytest.mark.parametrize("version", [13, 16, 18])
def test_fetch_by_a_recreated_topics_old_id(tmp_path, version):
    with Broker(tmp_path, create=True) as broker:
        old = broker.create_topic("t").topic_id
        broker.produce("t", 0, [b"old"])
        broker.delete_topic("t")
        new = broker.create_topic("t").topic_id
        broker.produce("t", 0, [b"new-1", b"new-2"])
        assert old != new
        with fetch_server(broker) as (server, _), RawClient(server) as c:
            parts = [(0, 0, 1 << 20, -1)]
            c.send(request_frame(fetch_request(version, [(old, parts), (new, parts)]), 1))
            response = decode(version, c.recv_frame())
    by_id = {t.topic_id: t.partitions[0] for t in response.responses}
    assert (by_id[old].error_code, by_id[old].high_watermark, by_id[old].records) == (
        UNKNOWN_TOPIC_ID,
        -1,
        b"",
    )
    assert (by_id[new].error_code, by_id[new].high_watermark) == (0, 2)
