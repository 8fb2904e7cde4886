"""The API dispatcher (Kafka's ``KafkaApis``): one handler per API key, and ApiVersions.

The API handlers (Metadata, Produce, Fetch, ...) register here with the version range they
serve; the same call fills the :class:`ApiVersionManager` table that ApiVersions advertises and
the network layer enforces, so an advertised version always has a handler::

    apis.register(3, 0, 12, metadata_handler)   # handler(request) -> None

A handler answers through :meth:`KafkaApis.send_response` (a kio response message),
:meth:`KafkaApis.send_frame_parts` (a frame built in parts, e.g. Fetch's headers and file
regions) or :meth:`KafkaApis.send_no_response`, at once or later from a delayed operation.

ApiVersions (key 18), as Kafka answers it:
- a version this broker serves: error 0, every registered range (by key), throttle 0;
- a version above our range (the client sends its newest first): UNSUPPORTED_VERSION (35) in
  a v0 body that lists ApiVersions' own range only (KIP-511), so the client retries with it;
- v3+ with a client software name or version outside ``[a-zA-Z0-9](?:[a-zA-Z0-9-.]*[a-zA-Z0-9])?``:
  INVALID_REQUEST (42) with no ranges.
Its response header is always v0 (see ``protocol``).

Thread safety: registration happens before serving (or under the manager's lock); ``handle``
reads an immutable mapping and may run on every handler thread at once.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import fields
from datetime import timedelta
from types import MappingProxyType
from typing import Any

from kio.static.primitive import i16

from broker_embedded.error_code import ErrorCode
from broker_embedded.server.admin_queue import AdminQueue
from broker_embedded.server.api_version_manager import ApiRange, ApiVersionManager
from broker_embedded.server.protocol import (
    API_VERSIONS_KEY,
    InvalidRequestError,
    body_frame,
    response_frame,
    response_schema,
    size_prefix,
)
from broker_embedded.server.request_channel import (
    Part,
    Request,
    RequestChannel,
    Response,
    parts_size,
)

log = logging.getLogger(__name__)

Handler = Callable[[Request], None]

API_VERSIONS_RANGE = (0, 4)  # Kafka 4.x
_SOFTWARE_NAME = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


class KafkaApis:
    """Dispatches requests to the registered API handlers."""

    def __init__(self, channel: RequestChannel, versions: ApiVersionManager) -> None:
        self.channel = channel
        self.versions = versions
        self._handlers: MappingProxyType[int, Handler] = MappingProxyType({})
        self._on_shutdown: list[Callable[[], None]] = []
        self.fetch_sessions: Any = None  # the Fetch API's session cache (for the metrics)
        self._admin_queue: AdminQueue | None = None
        self.register(API_VERSIONS_KEY, *API_VERSIONS_RANGE, self._handle_api_versions)

    def register(
        self, api_key: int, min_version: int, max_version: int, handler: Handler
    ) -> ApiRange:
        """Serve ``api_key`` at ``min_version..max_version`` with ``handler``."""
        entry = self.versions.register(api_key, min_version, max_version)
        self._handlers = MappingProxyType({**self._handlers, api_key: handler})
        return entry

    def register_responder(
        self, api_key: int, min_version: int, max_version: int, respond: Callable[[Request], Any]
    ) -> ApiRange:
        """Serve ``api_key`` with a handler that answers at once with ``respond(request)``, a kio
        response message (the APIs that never wait)."""
        return self.register(
            api_key, min_version, max_version, lambda r: self.send_response(r, respond(r))
        )

    def on_shutdown(self, stop: Callable[[], None]) -> None:
        """Call ``stop`` when the server shuts down, after the handler threads (e.g. a
        coordinator's timers); registered before serving."""
        self._on_shutdown.append(stop)

    @property
    def admin_queue(self) -> AdminQueue:
        """The queue the admin APIs park their requests on (admin_queue.py), made by the first
        registration that asks for it."""
        if self._admin_queue is None:
            self._admin_queue = AdminQueue(self.send_response, self.channel.close_connection)
        return self._admin_queue

    def stop_admin(self, timeout: float) -> None:
        """Stop the admin queue (its waiting requests' connections closed, the background
        creation of logs stopped after its step) within ``timeout``: first at shutdown."""
        if self._admin_queue is not None:
            self._admin_queue.stop(timeout)

    def shutdown(self) -> None:
        """Run the ``on_shutdown`` callbacks (each once, in order; a failure is logged)."""
        stops, self._on_shutdown = self._on_shutdown, []
        for stop in stops:
            try:
                stop()
            except Exception:
                log.exception("stopping %r failed", stop)

    def handle(self, request: Request) -> None:
        handler = self._handlers.get(request.header.api_key)
        if handler is None:  # the network layer lets only registered keys through
            raise InvalidRequestError(f"no handler for {request.header.api_name}")
        handler(request)

    # --- answering -------------------------------------------------------------------------

    def send_response(self, request: Request, message: Any, body_version: int | None = None):
        """Answer with a kio response message of the request's API and version."""
        frame = response_frame(request.header, message, body_version)
        self.channel.send_response(Response(request, (frame,)))

    def send_body(self, request: Request, body: bytes) -> None:
        """Answer with a response body already encoded for the request's API and version."""
        self.channel.send_response(Response(request, (body_frame(request.header, body),)))

    def send_frame_parts(
        self,
        request: Request,
        parts: Sequence[Part],
        on_done: Callable[[], None] | None = None,
    ) -> None:
        """Answer with a frame built in parts (response header and body, without the size
        prefix, which is added here from the parts' lengths)."""
        framed = (size_prefix(parts_size(parts)), *parts)
        self.channel.send_response(Response(request, framed, on_done=on_done))

    def send_no_response(self, request: Request) -> None:
        """No answer (Produce acks=0): only unmute the connection."""
        self.channel.send_response(Response(request))

    # --- ApiVersions -----------------------------------------------------------------------

    def _handle_api_versions(self, request: Request) -> None:
        version = request.header.api_version
        if request.body is None:  # a version above ours: the v0 fallback
            own = self.versions.range(API_VERSIONS_KEY)
            assert own is not None
            message = api_versions_response(0, ErrorCode.unsupported_version, (own,))
            self.send_response(request, message, body_version=0)
        elif version >= 3 and not _valid_software(request.body):
            self.send_response(request, api_versions_response(version, ErrorCode.invalid_request))
        else:
            message = api_versions_response(version, ErrorCode.none, self.versions.ranges())
            self.send_response(request, message)


def _valid_software(body: Any) -> bool:
    return all(
        _SOFTWARE_NAME.fullmatch(value)
        for value in (body.client_software_name, body.client_software_version)
    )


def api_versions_response(version: int, error: ErrorCode, ranges: Sequence[ApiRange] = ()) -> Any:
    """kio's ApiVersionsResponse of ``version``: ``error`` and the ranges (throttle 0)."""
    schema = response_schema(API_VERSIONS_KEY, version)
    assert schema is not None
    entry = sys.modules[schema.__module__].ApiVersion
    values: dict[str, Any] = {
        "error_code": error,
        "api_keys": tuple(
            entry(
                api_key=i16(r.api_key),
                min_version=i16(r.min_version),
                max_version=i16(r.max_version),
            )
            for r in ranges
        ),
        "throttle_time": timedelta(0),
    }
    names = {f.name for f in fields(schema)}
    return schema(**{k: v for k, v in values.items() if k in names})
