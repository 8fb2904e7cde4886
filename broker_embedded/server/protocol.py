"""Kafka's request and response framing over kio's generated message schemas.

Frame (both directions): ``size int32`` (big-endian, the byte count that follows), then:

    request  = header + body
      header v1 = api_key int16, api_version int16, correlation_id int32,
                  client_id nullable string (int16 length, -1 = null)
      header v2 = header v1 + tagged fields (unsigned varint count, then tag/size/data);
                  client_id stays a non-compact string
      v2 is used by the flexible versions of each API (kio's ``__flexible__``); an ApiVersions
      request of any version >= 3 uses v2, even a version this broker does not know
    response = header + body
      header v0 = correlation_id int32
      header v1 = header v0 + tagged fields; used by flexible versions, EXCEPT ApiVersions
                  whose response always uses v0 (a client reads it before it knows our versions)

Message bodies are read and written by kio (``kio.serial``), generated from Kafka's JSON message
definitions. The ``records`` fields of Produce and Fetch are plain ``bytes``: one copy of the
slice, never an object per record.

Everything here is a pure function of its arguments or a cache filled under the GIL: thread-safe.
A frame that cannot be parsed raises :class:`InvalidRequestError`; the network layer closes that
connection alone (as Kafka's processor does for ``InvalidRequestException``).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_reader
from kio.serial.errors import SerialError

from broker_embedded import errors
from broker_embedded.protocol.bounds import BoundsError, check_bounds, check_header_tags
from broker_embedded.protocol.schemas import (  # noqa: F401 (re-exported to the handlers)
    API_VERSIONS_KEY,
    api_name,
    encode_body,
    has_schemas,
    reader_of,
    request_schema,
    response_schema,
    writer_of,
)

_SIZE = struct.Struct(">i")
_CORRELATION_ID = struct.Struct(">i")
_HEADER_V1 = entity_reader(RequestHeaderV1)
_HEADER_V2 = entity_reader(RequestHeaderV2)


class InvalidRequestError(errors.InvalidRequestError):
    """A request frame that is not a valid request (Kafka's INVALID_REQUEST, 42): a bad header,
    an unknown or disabled API key or version, a body that does not parse. ``client_id`` is the
    header's, when it could be read."""

    def __init__(self, reason: str, client_id: str | None = None) -> None:
        super().__init__(reason)
        self.client_id = client_id


@dataclass(frozen=True, slots=True)
class RequestHeader:
    """A request's header: which API at which version, and who asked."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    header_version: int  # 1 or 2

    @property
    def api_name(self) -> str:
        return api_name(self.api_key)

    @property
    def response_header_version(self) -> int:
        """0 or 1: v1 for flexible versions, except ApiVersions (always v0)."""
        return 1 if self.header_version == 2 and self.api_key != API_VERSIONS_KEY else 0


def request_header_version(api_key: int, api_version: int) -> int:
    """1 or 2 for an API key and version this module can read; InvalidRequestError otherwise."""
    if api_key == API_VERSIONS_KEY:
        return 2 if api_version >= 3 else 1
    schema = request_schema(api_key, api_version)
    if schema is None:
        raise InvalidRequestError(
            f"no schema for api key {api_key} ({api_name(api_key)}) version {api_version}"
        )
    return 2 if schema.__flexible__ else 1


def parse_header(
    frame: memoryview, is_enabled: Callable[[int, int], bool]
) -> tuple[RequestHeader, int]:
    """The request header at the start of ``frame`` (read-only) and the offset of the body.

    ``is_enabled(api_key, api_version)`` decides whether the request may be read at all; the
    fields that header v1 and v2 share are read first, so that even a refused request's error
    names its client id.
    """
    try:
        raw, size = _HEADER_V1(frame, 0)  # v2 = these fields + tagged fields
    except (SerialError, ValueError) as e:
        raise InvalidRequestError(f"malformed request header: {e}") from None
    api_key, api_version = raw.request_api_key, raw.request_api_version
    if not is_enabled(api_key, api_version):
        raise InvalidRequestError(
            f"api key {api_key} ({api_name(api_key)}) version {api_version} is not enabled",
            raw.client_id,
        )
    version = request_header_version(api_key, api_version)
    if version == 2:
        try:
            check_header_tags(frame, size)
            raw, size = _HEADER_V2(frame, 0)
        except (SerialError, ValueError, BoundsError) as e:
            raise InvalidRequestError(f"malformed request header: {e}", raw.client_id) from None
    header = RequestHeader(api_key, api_version, raw.correlation_id, raw.client_id, version)
    return header, size


def parse_body(header: RequestHeader, frame: memoryview, offset: int) -> Any:
    """The request body (a kio message) at ``offset``. Bytes left over after it are ignored,
    as Kafka's parsers ignore them (``AbstractRequest.parseRequest`` reads the fields and never
    checks the rest): librdkafka 2.x sends a Metadata v13 request for all topics with 3 bytes
    after the body, which Kafka serves."""
    schema = request_schema(header.api_key, header.api_version)
    if schema is None:
        raise InvalidRequestError(f"no schema for {header.api_name} version {header.api_version}")
    try:
        check_bounds(schema, frame, offset)
        body, size = reader_of(schema)(frame, offset)
    except (SerialError, ValueError, BoundsError) as e:
        raise InvalidRequestError(
            f"malformed {header.api_name} v{header.api_version} request: {e}"
        ) from None
    return body


def response_frame(header: RequestHeader, message: Any, body_version: int | None = None) -> bytes:
    """One whole response frame (size, response header, body) for ``header``'s request.

    ``message`` is the kio response of the same API; its class must be the version the client
    asked for, except ``body_version`` = 0 for the ApiVersions fallback.
    """
    expected = header.api_version if body_version is None else body_version
    if message.__api_key__ != header.api_key or message.__version__ != expected:
        raise ValueError(
            f"{type(message).__module__} answers api key {message.__api_key__} "
            f"v{message.__version__}, not {header.api_name} v{expected}"
        )
    return body_frame(header, encode_body(message))


def body_frame(header: RequestHeader, body: bytes) -> bytes:
    """One whole response frame around an encoded response body."""
    head = _CORRELATION_ID.pack(header.correlation_id)
    if header.response_header_version == 1:
        head += b"\0"  # no tagged fields
    return _SIZE.pack(len(head) + len(body)) + head + body


def size_prefix(size: int) -> bytes:
    """The 4-byte size that starts a frame of ``size`` bytes (for frames built in parts)."""
    return _SIZE.pack(size)
