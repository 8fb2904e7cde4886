"""WriteTxnMarkers (an admin's abort of a hanging transaction) and DescribeLogDirs on a real
server, with raw kio requests: the marker ends the transaction in the partition (the last
stable offset moves past it, a read_committed reader sees nothing of it), errors per partition;
the log dir's partitions and their sizes as on disk."""

from __future__ import annotations

from kio.schema.describe_log_dirs.v4 import request as dreq
from kio.schema.describe_log_dirs.v4 import response as dresp
from kio.schema.write_txn_markers.v1 import request as wreq
from kio.schema.write_txn_markers.v1 import response as wresp
from kio.static.primitive import i16, i32, i64

from broker_embedded.common.producer_record import build_batch
from broker_embedded.storage.topic_partition import TopicPartition
from tests.broker_embedded.server._net import RawClient
from tests.broker_embedded.server._serve import decode_response, log_batches, served

UNKNOWN_TOPIC_OR_PARTITION = 3
TP = TopicPartition("t", 0)


def abort(client: RawClient, producer_id: int, epoch: int, *partitions: tuple[str, int]):
    topics = {}
    for name, p in partitions:
        topics.setdefault(name, []).append(i32(p))
    message = wreq.WriteTxnMarkersRequest(
        markers=(
            wreq.WritableTxnMarker(
                producer_id=i64(producer_id),
                producer_epoch=i16(epoch),
                transaction_result=False,
                coordinator_epoch=i32(3),
                topics=tuple(
                    wreq.WritableTxnMarkerTopic(name=n, partition_indexes=tuple(ps))
                    for n, ps in topics.items()
                ),
            ),
        )
    )
    answer = decode_response(wresp.WriteTxnMarkersResponse, client.call(message), True)
    return [
        (t.name, p.partition_index, p.error_code)
        for m in answer.markers
        for t in m.topics
        for p in t.partitions
    ]


def test_an_abort_marker_ends_a_hanging_transaction(tmp_path):
    with served(tmp_path) as s:
        s.broker.create_topic("t")
        batch = build_batch(
            [b"open"],
            now_ms=1_000,
            producer_id=7,
            producer_epoch=2,
            base_sequence=0,
            is_transactional=True,
        )
        s.broker.append(TP, batch).raise_error()
        log = s.broker.log_manager.get_log(TP)
        assert log is not None and log.last_stable_offset == 0  # held by the open transaction
        with RawClient(s.server) as c:
            assert abort(c, 7, 2, ("t", 0), ("t", 5), ("absent", 0)) == [
                ("t", 0, 0),
                ("t", 5, UNKNOWN_TOPIC_OR_PARTITION),
                ("absent", 0, UNKNOWN_TOPIC_OR_PARTITION),
            ]
        assert log.last_stable_offset == log.log_end_offset == 2
        marker = log_batches(tmp_path, "t", 0)[-1]
        assert (marker.is_control, marker.producer_id, marker.producer_epoch) == (True, 7, 2)


def test_describe_log_dirs_lists_partitions_and_sizes(tmp_path):
    with served(tmp_path) as s:
        s.broker.create_topic("t", partitions=2)
        s.broker.produce("t", 1, [b"a", b"b"])
        size = s.broker.log_manager.get_log(TopicPartition("t", 1)).size_in_bytes
        with RawClient(s.server) as c:
            message = dreq.DescribeLogDirsRequest(
                topics=(dreq.DescribableLogDirTopic(topic="t", partitions=(i32(1), i32(9))),)
            )
            answer = decode_response(dresp.DescribeLogDirsResponse, c.call(message), True)
    (result,) = answer.results
    assert (answer.error_code, result.error_code, result.log_dir) == (0, 0, str(tmp_path))
    assert [
        (
            t.name,
            [
                (p.partition_index, p.partition_size, p.offset_lag, p.is_future_key)
                for p in t.partitions
            ],
        )
        for t in result.topics
    ] == [("t", [(1, size, 0, False)])]
    assert size > 0 and result.total_bytes >= result.usable_bytes > 0
