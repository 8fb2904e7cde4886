"""One blocking connection to one broker (the part of Kafka's ``NetworkClient`` a
:class:`~broker_embedded.client.kafka_client.KafkaClient` holds per broker):
:class:`BrokerConnection`, with the API keys and versions this client speaks
(:data:`CLIENT_VERSIONS`), the broker addresses (:class:`BrokerAddress`), the client's config
(:class:`ClientConfig`) and the connection errors.

Frames (kio's schemas, broker_embedded/protocol/schemas.py, the server's too): a request is
``size int32`` + request header v1 (api key int16, version int16, correlation id int32, client id
nullable string) or v2 (v1 + tagged fields) for flexible versions, then the body; a response is
``size int32`` + correlation id int32 (+ tagged fields for flexible versions except
ApiVersions) + body. The correlation id of each response must be the request's.

Security (``client_security.py``, ``ClientConfig.security``): TLS wraps the socket at connect
(SSL, SASL_SSL); on SASL listeners the SASL exchange follows ApiVersions, before any other
request. A refused authentication raises ``SaslAuthenticationError`` naming the broker.

Versions: on connecting, ApiVersions v3 (v0 when the broker answers UNSUPPORTED_VERSION); each
API is then sent at the highest version both this client (:data:`CLIENT_VERSIONS`) and the broker
support; none in common is an :class:`UnsupportedVersionError` naming the broker.


Limits: connecting takes at most ``connect_timeout_s`` and each request at most
``request_timeout_s`` (socket timeouts: :class:`BrokerConnectionError` naming the broker, the
connection closed); a response frame larger than ``max_response_bytes`` is refused unread (same
error). Thread safety: none; a connection belongs to its client, one client per thread.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1

from broker_embedded.client.client_security import ClientSecurity, authenticate
from broker_embedded.error_code import ErrorCode
from broker_embedded.errors import KafkaLogError, api_error
from broker_embedded.protocol.schemas import (
    API_VERSIONS_KEY,
    api_name,
    make,
    reader_of,
    request_schema,
    response_schema,
    types_of,
    writer_of,
)

PRODUCE, FETCH, LIST_OFFSETS, METADATA = 0, 1, 2, 3
CREATE_TOPICS, DELETE_TOPICS, DESCRIBE_CONFIGS, CREATE_PARTITIONS = 19, 20, 32, 37
OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR, DESCRIBE_GROUPS, LIST_GROUPS = 8, 9, 10, 15, 16
INIT_PRODUCER_ID = 22
ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN, END_TXN, TXN_OFFSET_COMMIT = 24, 25, 26, 28
DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = 29, 30, 31
# What this client can build and read (topic names, not ids: Fetch v13+ and DeleteTopics v6+
# name topics by id).
CLIENT_VERSIONS = {
    PRODUCE: (3, 9),
    FETCH: (4, 12),
    LIST_OFFSETS: (2, 7),
    METADATA: (1, 12),
    API_VERSIONS_KEY: (0, 3),
    CREATE_TOPICS: (2, 7),
    DELETE_TOPICS: (1, 5),
    DESCRIBE_CONFIGS: (1, 4),
    CREATE_PARTITIONS: (0, 3),
    OFFSET_COMMIT: (2, 8),
    OFFSET_FETCH: (2, 7),
    FIND_COORDINATOR: (1, 3),
    DESCRIBE_GROUPS: (0, 5),
    LIST_GROUPS: (0, 4),
    INIT_PRODUCER_ID: (0, 5),
    ADD_PARTITIONS_TO_TXN: (0, 3),
    ADD_OFFSETS_TO_TXN: (0, 3),
    END_TXN: (0, 3),
    TXN_OFFSET_COMMIT: (0, 3),
    DESCRIBE_ACLS: (1, 3),
    CREATE_ACLS: (1, 3),
    DELETE_ACLS: (1, 3),  # `kafkalog acls`
}
_SIZE = struct.Struct(">i")


class BrokerConnectionError(KafkaLogError):
    """A broker that cannot be reached, times out, closes the connection or sends a frame that
    is not a response to the request; the message names the broker's address."""


class UnsupportedVersionError(KafkaLogError):
    """A broker serving no version of an API that this client can speak."""


@dataclass(frozen=True, slots=True)
class BrokerAddress:
    host: str
    port: int

    @classmethod
    def parse_list(cls, text: str) -> tuple[BrokerAddress, ...]:
        """``HOST:PORT[,HOST:PORT...]`` (``--bootstrap-server``); ValueError when malformed."""
        out = []
        for item in text.split(","):
            host, sep, port = item.strip().rpartition(":")
            if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ValueError(f"{item.strip()!r} is not HOST:PORT")
            out.append(cls(host.strip("[]"), int(port)))
        return tuple(out)

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class ClientConfig:
    client_id: str = "kafkalog"
    connect_timeout_s: float = 10.0
    request_timeout_s: float = 30.0
    max_response_bytes: int = 64 << 20
    retries: int = 5
    retry_backoff_s: float = 0.2
    retry_timeout_s: float = 60.0  # no retry starts later than this after the first attempt
    security: ClientSecurity = ClientSecurity()  # TLS and SASL (client_security.py)


class BrokerConnection:
    """One socket to one broker, with the API versions it negotiated."""

    def __init__(self, address: BrokerAddress, config: ClientConfig) -> None:
        self.address = address
        self.config = config
        self._correlation_id = 0
        self._sock = self._connect(address, config)
        self._sock.settimeout(config.request_timeout_s)
        self.versions: dict[int, int] = {}
        try:
            self.versions = self._negotiate()
            if config.security.uses_sasl:
                authenticate(self.send, config.security, str(address))
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        self._sock.close()

    @staticmethod
    def _connect(address: BrokerAddress, config: ClientConfig) -> socket.socket:
        """TCP, and the TLS handshake for SSL/SASL_SSL, within ``connect_timeout_s``."""
        try:
            sock = socket.create_connection(
                (address.host, address.port), timeout=config.connect_timeout_s
            )
        except OSError as e:
            raise BrokerConnectionError(f"cannot connect to broker {address}: {e}") from None
        if not config.security.uses_tls:
            return sock
        try:
            return config.security.ssl_context().wrap_socket(sock, server_hostname=address.host)
        except (OSError, ValueError) as e:  # ssl.SSLError is an OSError
            sock.close()
            raise BrokerConnectionError(f"TLS with broker {address} failed: {e}") from None

    def _negotiate(self) -> dict[int, int]:
        response = self.send(
            API_VERSIONS_KEY, 3, client_software_name="kafkalog", client_software_version="1"
        )
        if response.error_code == ErrorCode.unsupported_version:
            response = self.send(API_VERSIONS_KEY, 0)
        if response.error_code != ErrorCode.none:
            raise api_error(int(response.error_code), f"ApiVersions from broker {self.address}")
        served = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
        versions = {}
        for key, (low, high) in CLIENT_VERSIONS.items():
            if key in served and max(low, served[key][0]) <= min(high, served[key][1]):
                versions[key] = min(high, served[key][1])
        return versions

    def version(self, api_key: int) -> int:
        version = self.versions.get(api_key)
        if version is None:
            raise UnsupportedVersionError(
                f"broker {self.address} serves no version of {api_name(api_key)} that this "
                f"client speaks ({CLIENT_VERSIONS[api_key][0]}..{CLIENT_VERSIONS[api_key][1]})"
            )
        return version

    def request(
        self, api_key: int, build: Callable[[Any], dict[str, Any]], *, expect_response=True
    ) -> Any:
        """Send ``api_key`` at the negotiated version; ``build(types)`` gives the body's values
        (``types``: the kio module of that version's nested request classes)."""
        version = self.version(api_key)
        schema = request_schema(api_key, version)
        assert schema is not None
        return self.send(
            api_key, version, expect_response=expect_response, **build(types_of(schema))
        )

    def send(self, api_key: int, version: int, *, expect_response=True, **values: Any) -> Any:
        schema, reply = request_schema(api_key, version), response_schema(api_key, version)
        assert schema is not None and reply is not None
        self._correlation_id += 1
        header_schema = schema.__header_schema__
        header = make(
            header_schema,
            request_api_key=api_key,
            request_api_version=version,
            correlation_id=self._correlation_id,
            client_id=self.config.client_id,
        )
        buf = bytearray(4)
        _Appender(buf).write_with(writer_of(header_schema), header)
        _Appender(buf).write_with(writer_of(schema), make(schema, **values))
        _SIZE.pack_into(buf, 0, len(buf) - 4)
        what = f"{api_name(api_key)} v{version} to broker {self.address}"
        try:
            self._sock.sendall(buf)
            if not expect_response:
                return None
            frame = self._read_frame(what)
        except TimeoutError:
            self.close()
            raise BrokerConnectionError(
                f"{what}: no response within {self.config.request_timeout_s} s"
            ) from None
        except OSError as e:
            self.close()
            raise BrokerConnectionError(f"{what}: {e}") from None
        return self._parse(frame, reply, what)

    def _parse(self, frame: memoryview, reply: type, what: str) -> Any:
        (correlation_id,) = _SIZE.unpack_from(frame, 0)
        if correlation_id != self._correlation_id:
            self.close()
            raise BrokerConnectionError(
                f"{what}: response correlation id {correlation_id}, expected {self._correlation_id}"
            )
        offset = 4
        if reply.__flexible__ and reply.__api_key__ != API_VERSIONS_KEY:
            _, offset = reader_of(ResponseHeaderV1)(frame, 0)
        try:
            body, _ = reader_of(reply)(frame, offset)
        except Exception as e:  # kio's SerialError, ValueError, struct.error
            self.close()
            raise BrokerConnectionError(f"{what}: malformed response: {e}") from None
        return body

    def _read_frame(self, what: str) -> memoryview:
        (size,) = _SIZE.unpack(self._read_exactly(4, what))
        if not 4 <= size <= self.config.max_response_bytes:
            raise OSError(
                f"response of {size} bytes (at most {self.config.max_response_bytes} accepted)"
            )
        return memoryview(self._read_exactly(size, what)).toreadonly()

    def _read_exactly(self, n: int, what: str) -> bytearray:
        buf = bytearray(n)
        view, got = memoryview(buf), 0
        while got < n:
            k = self._sock.recv_into(view[got:])
            if k == 0:
                raise OSError("the broker closed the connection")
            got += k
        return buf


class _Appender:
    """A writable stream appending to a bytearray (kio's writers take a stream)."""

    def __init__(self, buf: bytearray) -> None:
        self.buf = buf

    def write(self, data: bytes) -> int:
        self.buf += data
        return len(data)

    def write_with(self, writer: Any, message: Any) -> None:
        writer(self, message)
