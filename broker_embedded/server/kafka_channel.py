"""One client connection as its network thread holds it (Kafka's ``KafkaChannel``):
:class:`KafkaChannel`, the socket with its read state (the 4-byte size prefix, then the frame
buffer growing with the bytes that arrive), its write state (the response, part and offset being
written, the open file of a file region), its TLS and SASL state and principal, and its
quota and timing state; :class:`ChannelError`, why a connection must close.

Invariants: at most one request of a connection is in flight (``in_flight``: muted) and at most
one response is being written. Thread safety: touched by its processor's thread only.
"""

from __future__ import annotations

import socket
import ssl
import time

from broker_embedded.server.request_channel import (
    Request,
    Response,
)
from broker_embedded.server.request_metrics import RequestTimes
from broker_embedded.server.security.kafka_principal import (
    ANONYMOUS,
    KafkaPrincipal,
)
from broker_embedded.server.security.listener_security import (
    ListenerSecurity,
)
from broker_embedded.server.security.sasl_authenticator import (
    SaslAuthenticator,
    SaslState,
)


class ChannelError(Exception):
    """Why a connection must close (message: the reason, for the one log line)."""


class KafkaChannel:
    """A processor's state for one socket (touched by that processor's thread only)."""

    __slots__ = (
        "id",
        "sock",
        "address",
        "client_id",
        "last_active",
        "size_buf",
        "size_got",
        "frame",
        "frame_size",
        "frame_got",
        "in_flight",
        "response",
        "part",
        "offset",
        "file_fd",
        "events",
        "security",
        "created",
        "tls",
        "handshaking",
        "sasl",
        "sasl_raw",
        "sasl_request",
        "principal",
        "times",
        "response_dequeued_ns",
        "reserved",
        "parked",
        "peer_closed",
    )

    def __init__(
        self,
        conn_id: str,
        sock: socket.socket,
        address: tuple[str, int],
        security: ListenerSecurity,
        times: RequestTimes | None = None,
    ) -> None:
        self.id = conn_id
        self.times = times  # the latency stamps of its request in flight (metrics on)
        self.response_dequeued_ns = 0
        self.sock = sock
        self.address = address
        self.security = security
        self.created = time.monotonic()
        self.tls = isinstance(sock, ssl.SSLSocket)
        self.handshaking = self.tls  # the TLS handshake is not done (wants read first)
        self.sasl: SaslAuthenticator | None = security.authenticator(address[0])
        self.sasl_raw = False  # after a SaslHandshake v0: frames are raw SASL tokens
        self.sasl_request: Request | None = None  # that handshake (raw tokens have no header)
        self.principal: KafkaPrincipal = ANONYMOUS
        self.client_id: str | None = None
        self.last_active = time.monotonic()
        self.size_buf = bytearray(4)
        self.size_got = 0
        self.frame: bytearray | None = None
        self.frame_size = 0
        self.frame_got = 0
        self.in_flight = False  # muted: a request of this connection is being handled
        self.response: Response | None = None  # being written
        self.part = 0  # index in response.parts
        self.offset = 0  # bytes of that part written
        self.file_fd: int | None = None  # the open file of a path FileRegion being sent
        self.events = 0  # selector interest now registered
        self.reserved = 0  # bytes of queued.max.request.bytes held by its frame
        self.parked = 0  # a frame size waiting for the request budget (not read meanwhile)
        self.peer_closed = False  # half-closed with bytes left to read: no longer watched

    @property
    def authenticated(self) -> bool:
        return not self.handshaking and (self.sasl is None or self.sasl.state is SaslState.COMPLETE)

    def describe(self) -> str:
        host, port = self.address
        who = f"{host}:{port}"
        return who if self.client_id is None else f"{who} (client id {self.client_id!r})"
