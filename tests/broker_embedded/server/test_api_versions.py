"""ApiVersions as Kafka answers it, checked with kio's decoder on raw frames, with kafka-python's
own protocol codec, and with aiokafka's and librdkafka's connection handshakes."""

from __future__ import annotations

import asyncio
import logging
import queue
import struct
from datetime import timedelta

import pytest
from kio.schema.api_versions.v0.request import ApiVersionsRequest as ApiVersionsRequestV0
from kio.schema.api_versions.v0.response import ApiVersion as ApiVersionV0
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0
from kio.schema.api_versions.v3.request import ApiVersionsRequest as ApiVersionsRequestV3
from kio.schema.api_versions.v3.response import ApiVersion as ApiVersionV3
from kio.schema.api_versions.v3.response import ApiVersionsResponse as ApiVersionsResponseV3
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader
from kio.static.primitive import i16

from broker_embedded.server.protocol import request_schema, response_schema

from ._net import API_VERSIONS_V3, RawClient, port, raw_frame, serve


def decode_response(frame: bytes, schema: type, correlation_id: int) -> object:
    """Response header v0 (always, for ApiVersions) then the body; nothing may follow."""
    assert struct.unpack_from(">i", frame)[0] == correlation_id
    body, size = entity_reader(schema)(frame, 4)
    assert 4 + size == len(frame)
    return body


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_every_served_version_lists_the_table(version):
    request = request_schema(18, version)
    if version >= 3:
        message = request(client_software_name="kafkalog-test", client_software_version="1.0")
    else:
        message = request()
    with serve() as server, RawClient(server) as client:
        frame = client.call(message, correlation_id=41)
    response = decode_response(frame, response_schema(18, version), 41)
    assert response.error_code == ErrorCode.none
    assert [(k.api_key, k.min_version, k.max_version) for k in response.api_keys] == [(18, 0, 4)]
    if version >= 1:
        assert response.throttle_time == timedelta(0)


def test_v3_exact_bytes():
    with serve() as server, RawClient(server) as client:
        frame = client.call(API_VERSIONS_V3, correlation_id=7)
    # header v0: correlation id; error 0; compact array of 1: (18, 0, 4, no tags);
    # throttle 0; no tagged fields
    assert frame == bytes.fromhex("00000007000002001200000004000000000000")


def test_unsupported_version_gets_the_v0_fallback():
    with serve() as server, RawClient(server) as client:
        client.send(raw_frame(18, 99, 5, b"\x00", v2=True))
        frame = client.recv_frame()
        # the connection stays usable: the client retries with our highest version
        assert decode_response(client.call(API_VERSIONS_V3, 6), ApiVersionsResponseV3, 6)
    response = decode_response(frame, ApiVersionsResponseV0, 5)
    assert response == ApiVersionsResponseV0(
        error_code=ErrorCode.unsupported_version,
        api_keys=(ApiVersionV0(api_key=i16(18), min_version=i16(0), max_version=i16(4)),),
    )
    assert frame == bytes.fromhex("00000005002300000001001200000004")


@pytest.mark.parametrize("name", ["", "-leading", "trailing.", "spa ce", "under_score"])
def test_invalid_software_name_is_invalid_request(name):
    message = ApiVersionsRequestV3(client_software_name=name, client_software_version="1.0")
    with serve() as server, RawClient(server) as client:
        frame = client.call(message, correlation_id=3)
    response = decode_response(frame, ApiVersionsResponseV3, 3)
    assert response.error_code == ErrorCode.invalid_request
    assert response.api_keys == ()


def test_registered_apis_are_advertised_and_only_they():
    def register(apis):
        apis.register(3, 0, 12, lambda request: apis.send_no_response(request))
        apis.register(1, 4, 12, lambda request: apis.send_no_response(request))

    with serve(register=register) as server, RawClient(server) as client:
        frame = client.call(API_VERSIONS_V3)
    response = decode_response(frame, ApiVersionsResponseV3, 1)
    assert response.api_keys == tuple(
        ApiVersionV3(api_key=i16(k), min_version=i16(lo), max_version=i16(hi))
        for k, lo, hi in [(1, 4, 12), (3, 0, 12), (18, 0, 4)]
    )


def test_registration_refuses_versions_without_schemas():
    def register(apis):
        with pytest.raises(ValueError, match="no kio schema for api key 1 .Fetch. v0"):
            apis.register(1, 0, 12, lambda request: None)  # Fetch v0-3 left Kafka 4
        with pytest.raises(ValueError, match="registered twice"):
            apis.register(18, 0, 3, lambda request: None)

    with serve(register=register):
        pass


def test_v0_request_from_kio_round_trip():
    with serve() as server, RawClient(server) as client:
        frame = client.call(ApiVersionsRequestV0(), correlation_id=2**31 - 1)
    assert decode_response(frame, ApiVersionsResponseV0, 2**31 - 1).error_code == ErrorCode.none


def test_kafka_python_codec_reads_our_answers():
    """kafka-python's own protocol codec: its newest ApiVersions request, our response parsed by
    its parser (correlation id checked by it); then v0."""
    from kafka.protocol.metadata import ApiVersionsRequest
    from kafka.protocol.parser import KafkaProtocol

    with serve() as server, RawClient(server) as client:
        for version in (ApiVersionsRequest.max_version, 0):
            codec = KafkaProtocol(client_id="kafka-python-test")
            kwargs = {}
            if version >= 3:
                kwargs = {"client_software_name": "kafka-python", "client_software_version": "3"}
            codec.send_request(ApiVersionsRequest(version=version, **kwargs))
            client.send(b"".join(codec.bytes_to_send))
            frame = client.recv_frame()
            ((correlation_id, response),) = codec.receive_bytes(
                struct.pack(">i", len(frame)) + frame
            )
            assert correlation_id == 1
            assert response.error_code == 0
            assert [(k.api_key, k.min_version, k.max_version) for k in response.api_keys] == [
                (18, 0, 4)
            ]


def test_kafka_python_connection_handshake(caplog):
    """kafka-python's client connects, negotiates ApiVersions, then fails on Metadata, which is
    not served yet: its log shows the handshake finished."""
    from kafka.net.compat import KafkaNetClient

    with serve() as server, caplog.at_level(logging.INFO, logger="kafka"):
        client = KafkaNetClient(bootstrap_servers=f"127.0.0.1:{port(server)}")
        try:
            with pytest.raises(Exception):  # noqa: B017 - Metadata is refused by design
                client.check_version(timeout_ms=3000)
        finally:
            client.close()
    identified = [
        r.getMessage() for r in caplog.records if "Broker version identified" in r.getMessage()
    ]
    assert identified, [r.getMessage() for r in caplog.records]


def test_aiokafka_connection_sends_api_versions():
    """aiokafka's connection looks the versions up itself when it connects; a second request
    then goes at the highest version both sides have (its v2)."""
    from aiokafka.conn import create_conn
    from aiokafka.protocol.admin import ApiVersionRequest

    async def probe(p: int):
        conn = await asyncio.wait_for(create_conn("127.0.0.1", p, client_id="aiokafka-test"), 10)
        try:
            request = ApiVersionRequest()
            return request.prepare({18: (0, 4)}).API_VERSION, await asyncio.wait_for(
                conn.send(request), 10
            )
        finally:
            conn.close()

    with serve() as server:
        version, response = asyncio.run(probe(port(server)))
    assert version == 2
    assert response.error_code == 0
    assert [tuple(k) for k in response.api_versions] == [(18, 0, 4)]


def test_librdkafka_negotiates_api_versions():
    """librdkafka (confluent-kafka) logs the broker's API table after its ApiVersions request."""
    from confluent_kafka.admin import AdminClient

    lines: queue.Queue[str] = queue.Queue()

    class Capture(logging.Handler):
        def emit(self, record):
            lines.put(record.getMessage())

    logger = logging.getLogger("librdkafka-test")
    logger.addHandler(Capture())
    logger.setLevel(logging.DEBUG)
    with serve() as server:
        admin = AdminClient(
            {
                "bootstrap.servers": f"127.0.0.1:{port(server)}",
                "debug": "protocol,feature",
                "logger": logger,
            }
        )
        seen = []
        try:
            for _ in range(200):
                admin.poll(0.05)
                while not lines.empty():
                    seen.append(lines.get())
                if any("Enabling feature ApiVersion" in s for s in seen):
                    break
        finally:
            del admin
    text = "\n".join(seen)
    assert "Sent ApiVersionRequest (v3" in text, text
    assert "Received ApiVersionResponse (v3, 15 bytes, CorrId 1" in text, text
    assert "ApiKey ApiVersion (18) Versions 0..4" in text, text
    assert "Enabling feature ApiVersion" in text, text
