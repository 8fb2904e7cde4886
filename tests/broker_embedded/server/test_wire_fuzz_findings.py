"""Frames the wire fuzz campaign (``benchmarks/fuzz.py --only wire``) found, as regression tests.

Each costs its own connection (closed with one log line naming the reason, no traceback), and
the server keeps serving, on the same network thread (one processor here):

- a compact array count of 2^32 - 2 in a 20-byte Metadata v9 frame: kio's native reader asked
  for 32 GiB and its allocation failure aborted the whole process;
- an unknown tagged field in the request header or body: kio raised KeyError, which the network
  thread did not expect, so it ended and its connections were never served again;
- null for a non-nullable array (Produce's topic_data): kio returned None and the handler
  failed with a TypeError traceback;
- a Metadata v10 topic asked for with a null name: the response (whose name is not nullable
  before v12) failed to encode, a traceback;
- CreatePartitions to 2^31 - 1 partitions (one int32 of the request set to its maximum): the
  handler thread went on creating partition directories until disk or descriptors ran out; now
  more than 10,000 partitions in one CreateTopics or CreatePartitions request is
  POLICY_VIOLATION (44) for each of its topics, Kafka's controller's cap.
"""

from __future__ import annotations

import datetime
import logging
import struct
import subprocess
import sys
import uuid
from pathlib import Path

from kio.schema.create_partitions.v3 import request as cp3
from kio.schema.create_partitions.v3 import response as cp3_response
from kio.schema.create_topics.v7 import request as ct7
from kio.schema.create_topics.v7 import response as ct7_response
from kio.schema.metadata.v10 import request as meta10
from kio.schema.produce.v9.request import ProduceRequest

from ._net import API_VERSIONS_V3, RawClient, request_frame
from ._serve import decode_response, served

ROOT = Path(__file__).resolve().parents[3]
ONE_S = datetime.timedelta(seconds=1)


def resized(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


# Metadata v9, correlation id 253, client id "fuzz"; topics: compact count ff ff ff ff 0f
HUGE_COUNT = resized(bytes.fromhex("00030009000000fd000466757a7a00ffffffff0f00010100"))


def answered_after(frame: bytes, caplog, log_dir: Path) -> list[str]:
    """Send ``frame``; the server must close that connection and still answer ApiVersions on a
    new one (one network thread: the same one). The WARNING+ lines logged, each checked to be
    one line without a traceback."""
    with served(log_dir, num_network_threads=1, num_io_threads=1) as s:
        with RawClient(s.server, timeout=5) as bad:
            bad.send(frame)
            assert bad.closed_by_server()
        with RawClient(s.server, timeout=5) as good:
            assert good.call(API_VERSIONS_V3, 7)[:4] == struct.pack(">i", 7)
    records = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert all(r.exc_info is None and r.levelno == logging.WARNING for r in records), [
        r.getMessage() for r in records
    ]
    return [r.getMessage() for r in records]


CHILD = """
import struct, sys
from tests.broker_embedded.server._net import API_VERSIONS_V3, RawClient
from tests.broker_embedded.server._serve import served
with served(sys.argv[2], num_network_threads=1, num_io_threads=1) as s:
    with RawClient(s.server, timeout=5) as bad:
        bad.send(bytes.fromhex(sys.argv[1]))
        assert bad.closed_by_server()
    with RawClient(s.server, timeout=5) as good:
        assert good.call(API_VERSIONS_V3, 7)[:4] == struct.pack(">i", 7)
print("served")
"""


def test_a_huge_compact_array_count_closes_the_connection_not_the_process(tmp_path) -> None:
    # in a child process: before the fix, this frame aborted the process that parsed it
    done = subprocess.run(
        [sys.executable, "-c", CHILD, HUGE_COUNT.hex(), str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stdout.strip()) == (0, "served"), done.stderr[-2000:]
    reason = "malformed Metadata v9 request: topics: length 4294967294 with 4 bytes left"
    assert reason in done.stderr


def test_an_unknown_tagged_field_in_the_header(caplog, tmp_path) -> None:
    frame = request_frame(API_VERSIONS_V3, 1)  # header v2: ... client id "raw", tags 0x00
    at = 4 + 10 + 3
    assert frame[at] == 0
    tagged = frame[4:at] + b"\x01\x01\x01x" + frame[at + 1 :]  # 1 field: tag 1, 1 byte
    lines = answered_after(resized(tagged), caplog, tmp_path)
    assert len(lines) == 1 and "malformed request header: unknown tagged field 1" in lines[0], lines


def test_an_unknown_tagged_field_in_the_body(caplog, tmp_path) -> None:
    frame = request_frame(API_VERSIONS_V3, 1)
    assert frame[-1] == 0  # the body's tagged fields
    lines = answered_after(resized(frame[4:-1] + b"\x01\x05\x01x"), caplog, tmp_path)
    reason = "malformed ApiVersions v3 request: unknown tagged field 5"
    assert len(lines) == 1 and reason in lines[0], lines


def test_null_for_a_non_nullable_array(caplog, tmp_path) -> None:
    one_s = datetime.timedelta(seconds=1)
    produce = ProduceRequest(transactional_id=None, acks=1, timeout=one_s, topic_data=())
    frame = request_frame(produce, 1)
    assert frame[-2:] == b"\x01\x00"  # topic_data: compact count 0 + 1, then no tags
    lines = answered_after(frame[:-2] + b"\x00\x00", caplog, tmp_path)
    assert len(lines) == 1 and "null for the non-nullable field topic_data" in lines[0], lines


def test_a_null_topic_name_below_metadata_v12(caplog, tmp_path) -> None:
    topic = meta10.MetadataRequestTopic(topic_id=uuid.UUID(int=5), name=None)
    request = meta10.MetadataRequest(
        topics=(topic,),
        allow_auto_topic_creation=False,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )
    lines = answered_after(request_frame(request, 1), caplog, tmp_path)
    assert len(lines) == 1 and "topic name can not be null for Metadata v10" in lines[0], lines


def test_create_partitions_of_2_31_minus_1_is_a_policy_violation(tmp_path) -> None:
    topic = cp3.CreatePartitionsTopic(name="s", count=2**31 - 1, assignments=None)
    request = cp3.CreatePartitionsRequest(topics=(topic,), timeout=ONE_S, validate_only=False)
    with served(tmp_path) as s:
        s.broker.create_topic("s", 1)
        with RawClient(s.server, timeout=10) as client:
            frame = client.call(request, 9)
        partitions = len(s.broker.describe_topic("s").partitions)
    answer = decode_response(cp3_response.CreatePartitionsResponse, frame, True)
    assert [(r.name, r.error_code, r.error_message) for r in answer.results] == [
        (
            "s",
            44,
            "Excessively large number of partitions per request: 2147483647 requested, "
            "at most 10000",
        ),
    ]
    assert partitions == 1


def test_create_topics_over_10000_partitions_in_all_is_a_policy_violation(tmp_path) -> None:
    topics = tuple(
        ct7.CreatableTopic(
            name=name, num_partitions=5001, replication_factor=1, assignments=(), configs=()
        )
        for name in ("a", "b")
    )
    request = ct7.CreateTopicsRequest(topics=topics, timeout=ONE_S, validate_only=False)
    with served(tmp_path) as s:
        with RawClient(s.server, timeout=10) as client:
            frame = client.call(request, 9)
        names = s.broker.list_topics()
    answer = decode_response(ct7_response.CreateTopicsResponse, frame, True)
    reason = "Excessively large number of partitions per request: 10002 requested, at most 10000"
    assert [(t.name, t.error_code, t.error_message) for t in answer.topics] == [
        ("a", 44, reason),
        ("b", 44, reason),
    ]
    assert names == []
