"""Helpers of the server tests: a running request path on 127.0.0.1 (port 0) and a raw client
that speaks the framing over a blocking socket with a timeout."""

from __future__ import annotations

import contextlib
import dataclasses
import socket
import struct
from collections.abc import Callable, Iterator

from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.static.primitive import i16, i32

from broker_embedded.broker_config import BrokerConfig
from broker_embedded.server.broker_server import BrokerServer
from broker_embedded.server.kafka_apis import KafkaApis
from broker_embedded.server.protocol import encode_body

TIMEOUT_S = 10.0
API_VERSIONS_V3 = ApiVersionsRequest(
    client_software_name="kafkalog-test", client_software_version="1.0"
)


def config(**overrides: int) -> BrokerConfig:
    """Small thread counts for a 2-core machine, plus the overrides."""
    values = {"num_network_threads": 2, "num_io_threads": 2, **overrides}
    return dataclasses.replace(BrokerConfig(), **values)


@contextlib.contextmanager
def serve(
    cfg: BrokerConfig | None = None, register: Callable[[KafkaApis], None] | None = None
) -> Iterator[BrokerServer]:
    server = BrokerServer(cfg or config(), ["PLAINTEXT://127.0.0.1:0"], register).start()
    try:
        yield server
    finally:
        server.shutdown(5.0)


def port(server: BrokerServer) -> int:
    return server.endpoints[0].port


def request_frame(message: object, correlation_id: int, client_id: str | None = "raw") -> bytes:
    """A whole request frame for a kio request message (header v1 or v2 by its version)."""
    header_class = RequestHeaderV2 if message.__flexible__ else RequestHeaderV1
    header = header_class(
        request_api_key=i16(message.__api_key__),
        request_api_version=i16(message.__version__),
        correlation_id=i32(correlation_id),
        client_id=client_id,
    )
    payload = encode_body(header) + encode_body(message)
    return struct.pack(">i", len(payload)) + payload


def raw_frame(api_key: int, version: int, correlation_id: int, body: bytes, v2: bool) -> bytes:
    """A request frame from raw parts (client id "raw"), for versions kio does not know."""
    payload = struct.pack(">hhih", api_key, version, correlation_id, 3) + b"raw"
    payload += (b"\0" if v2 else b"") + body
    return struct.pack(">i", len(payload)) + payload


class RawClient:
    """One blocking connection with a timeout."""

    def __init__(self, server: BrokerServer | int, timeout: float = TIMEOUT_S) -> None:
        number = server if isinstance(server, int) else port(server)  # or a port number
        self.sock = socket.create_connection(("127.0.0.1", number), timeout=timeout)

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_exact(self, n: int) -> bytes:
        chunks = []
        while n:
            chunk = self.sock.recv(min(n, 1 << 20))
            if not chunk:
                raise ConnectionError(f"closed with {n} bytes still expected")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def recv_frame(self) -> bytes:
        (size,) = struct.unpack(">i", self.recv_exact(4))
        return self.recv_exact(size)

    def call(self, message: object, correlation_id: int = 1) -> bytes:
        self.send(request_frame(message, correlation_id))
        return self.recv_frame()

    def closed_by_server(self) -> bool:
        """True when the server closes the connection (EOF or reset) within the timeout."""
        try:
            while self.sock.recv(65536):
                pass
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False
        return True

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
