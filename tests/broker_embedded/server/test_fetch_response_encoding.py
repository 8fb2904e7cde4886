"""The Fetch response encoder (headers by kio around the record bytes) against kio's own encoding
of the same whole response with the records as bytes, byte for byte, for every version served:
file regions, inline bytes, empty and erroneous partitions, aborted transactions (none, empty,
some), several topics, names (< v13) and ids (v13+), a records length that needs a two-byte
varint."""

from __future__ import annotations

import os
import uuid

import pytest

from broker_embedded.server.handlers.fetch import FETCH_VERSIONS
from broker_embedded.server.handlers.fetch_response import (
    PartitionResponse,
    fetch_response_parts,
    group_by_topic,
)
from broker_embedded.server.protocol import RequestHeader, response_frame, response_schema
from broker_embedded.server.request_channel import FileRegion
from tests.broker_embedded.server._fetch import expected, partition_data

DATA = os.urandom(1000)


@pytest.mark.parametrize("version", range(FETCH_VERSIONS[0], FETCH_VERSIONS[1] + 1))
def test_parts_equal_kios_encoding(tmp_path, version):
    path = tmp_path / "segment.log"
    path.write_bytes(DATA)
    flexible = response_schema(1, version).__flexible__
    header = RequestHeader(1, version, 12345, "c", 2 if flexible else 1)
    a, b = (uuid.uuid4(), uuid.uuid4()) if version >= 13 else ("a", "b")
    region = FileRegion(100, 300, path=str(path))  # 300 + 1 needs two varint bytes
    wire = [
        (a, PartitionResponse(0, 0, 10, 9, 2, ((5, 3), (6, 4)), -1, region)),
        (a, PartitionResponse(1, 6)),
        (b, PartitionResponse(2, 0, 3, 3, 0, (), -1, b"abc")),
        (a, PartitionResponse(3, 0, 7, 7, 7, None, -1, FileRegion(0, 0, path=str(path)))),
    ]
    parts = fetch_response_parts(header, group_by_topic(wire), session_id=77)
    sent = b"".join(
        DATA[p.position : p.position + p.length] if isinstance(p, FileRegion) else p for p in parts
    )
    message = expected(
        version,
        [
            (
                a,
                [
                    partition_data(
                        version,
                        0,
                        hw=10,
                        lso=9,
                        log_start=2,
                        aborted=((5, 3), (6, 4)),
                        records=DATA[100:400],
                    ),
                    partition_data(version, 1, error=6),
                ],
            ),
            (b, [partition_data(version, 2, hw=3, lso=3, log_start=0, aborted=(), records=b"abc")]),
            (a, [partition_data(version, 3, hw=7, lso=7, log_start=7)]),
        ],
        session_id=77,
    )
    assert sent == response_frame(header, message)[4:]
    assert sum(isinstance(p, FileRegion) for p in parts) == 2
