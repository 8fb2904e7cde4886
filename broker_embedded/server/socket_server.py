"""The network layer (Kafka's ``SocketServer``): acceptors, processors and connection quotas.

Threads:
- one :class:`Acceptor` per listener: accepts TCP connections, applies the connection quotas,
  and hands each connection to a processor, round-robin;
- ``num.network.threads`` :class:`Processor` s: each owns its connections (non-blocking sockets
  in one ``selectors`` selector), reads whole request frames, parses header and body (kio),
  puts the request on the :class:`RequestChannel`, and writes the responses that come back on
  its response queue (byte buffers with ``sendmsg``, file regions with ``os.sendfile``).

Frames: ``size int32`` + ``size`` bytes (see ``protocol``). A processor reads exactly one frame
per connection and then mutes it (stops reading) until that request's response is written, so
responses on a connection go out in request order whatever the handler threads do; pipelined
requests wait in the kernel's socket buffer. A frame's buffer grows with the bytes that arrive
(never allocated from a size the client only claims), so memory follows received data.

Limits (Kafka's names, from ``BrokerConfig``) and what happens at each:
- ``socket.request.max.bytes``: a frame size above it, or a negative size, closes the
  connection before any of the frame is read.
- ``socket.listen.backlog.size``: connections the OS completes and queues for the acceptor;
  beyond it the OS ignores or refuses new ones (clients retry).
- ``max.connections.per.ip``: a connection beyond it is closed at accept (one log line).
- ``max.connections``: at the limit the acceptor waits for a connection to close before it
  accepts the next one (as Kafka does); clients wait in the listen backlog. Its default is
  below the process's descriptor limit (broker_config.py), so accept does not run out of them.
- Out of descriptors at accept (EMFILE/ENFILE, e.g. ``max.connections`` set above the limit):
  one error line per episode, retries backing off from 50 ms to 1 s, and one line when accepting
  works again; connections wait in the listen backlog meanwhile.
- ``queued.max.request.bytes`` (a :class:`MemoryPool`): a frame above :data:`FIRST_CHUNK`
  reserves its declared size before its bytes are read, and gives it back when its response is
  written or its connection closes. Reservations succeed while any budget is left (as Kafka's
  pool: at most the budget plus one frame); when none is left the connection is not read (its
  bytes wait in the kernel) until a reservation is released. Smaller frames (every usual
  request) are read without a reservation, so a large frame stuck half-sent never stops them.
- ``connections.max.idle.ms``: a connection with no request in flight and no traffic for that
  long is closed (checked about once a second).
- ``queued.max.requests``: a processor blocks on the full request queue, so it reads nothing
  more until a handler takes a request (back-pressure, not drops).

A muted connection (its request in flight, or waiting for the request budget) is watched for its
client's close (epoll RDHUP): a client that closes while its request waits (a long poll in the
purgatory) has its connection closed at once and the operations waiting to answer it dropped
(``RequestChannel.connection_closed``). A client that half-closes with more requests sent
behind the waiting one has the waiting one completed now (``RequestChannel.complete_waiting``),
and the requests behind it are read and answered as usual.

Whatever a client does wrong (malformed frame, bad size, truncated request, unknown or disabled
API key or version, disconnecting mid-request) closes that connection alone, with one log line
naming the client and the reason; the processor goes on serving its other connections.

Shutdown (:meth:`SocketServer.stop_accepting`, :meth:`SocketServer.drain`,
:meth:`SocketServer.shutdown`): acceptors close their listen sockets; processors stop reading
new requests and keep writing responses to in-flight ones until none is left or the deadline
passes; then every connection is closed and the unsent responses' ``on_done`` run. Every wait
is bounded.

Security (``security/``): each listener has a security protocol (PLAINTEXT, SSL,
SASL_PLAINTEXT, SASL_SSL; see ``security_config``).
- TLS (SSL, SASL_SSL): the processor wraps the accepted socket (``do_handshake_on_connect`` off)
  and drives the handshake from its selector, one ``do_handshake`` per readiness event
  (``SSLWantRead`` / ``SSLWantWrite`` choose the interest), so a handshake never blocks the loop.
  Bytes go through ``SSLSocket.send`` (no ``sendmsg``), and a :class:`FileRegion` is read with
  ``os.pread`` in :data:`TLS_CHUNK` pieces and sent encrypted: ``sendfile`` cannot go through
  TLS, so TLS connections alone take this copy path; PLAINTEXT keeps zero-copy. Decrypted bytes
  that ``ssl`` buffered while the connection was muted are read when it is unmuted (the
  selector cannot see them).
- SASL (SASL_PLAINTEXT, SASL_SSL): until the exchange completes only ApiVersions (handed to the
  handlers as usual), SaslHandshake and SaslAuthenticate (answered here, by the connection's
  :class:`SaslAuthenticator`) are read; any other request closes the connection, and a frame
  larger than ``sasl.server.max.receive.size`` does too. After SaslHandshake v0 the client's
  frames are raw SASL tokens, answered as raw tokens. A failed authentication is answered
  SASL_AUTHENTICATION_FAILED (58) after the delay the server's authentication limiter gives it
  (``connection.failed.authentication.delay.ms``, doubling with the principal's or address's
  recent failures; security/authentication_limiter.py), held in a per-processor timer heap (the
  loop never sleeps on it), and the connection is closed; a success while its principal is
  being guessed is held as long.
- A connection not authenticated (TLS handshake and SASL) within ``authentication.timeout.ms``
  is closed (checked with the idle connections).
- Each request carries its listener's name and the connection's principal (``User:ANONYMOUS``,
  the client certificate's subject on SSL, the SASL user on SASL listeners) for the handlers.

Metrics (request_metrics.py): a processor adds its time in ``select`` to its ``idle`` clock.
With ``Processor.metrics`` set (``BrokerServer(request_metrics=True)``), each connection has one
:class:`RequestTimes` its requests carry; the processor resets it when it queues a request,
stamps when it takes the response, and adds the request's six times to its own
:class:`RequestMetrics` when the last byte is written.

Thread safety: a processor's connections are touched only by its own thread; other threads
reach it through its new-connection deque, its response deque and its wakeup socket.
:class:`ConnectionQuotas` is shared under a lock.
"""

from __future__ import annotations

import fcntl
import heapq
import itertools
import logging
import os
import select
import selectors
import socket
import ssl
import struct
import termios
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from broker_embedded.broker_config import BrokerConfig
from broker_embedded.error_code import ErrorCode
from broker_embedded.server.api_version_manager import ApiVersionManager
from broker_embedded.server.protocol import (
    API_VERSIONS_KEY,
    InvalidRequestError,
    parse_body,
    parse_header,
    response_frame,
)
from broker_embedded.server.request_channel import (
    FileRegion,
    MemoryPool,
    Request,
    RequestChannel,
    Response,
)
from broker_embedded.server.request_metrics import IdleClock, RequestMetrics, RequestTimes
from broker_embedded.server.security.authentication_limiter import (
    AuthenticationLimiter,
    LimiterConfig,
)
from broker_embedded.server.security.kafka_principal import (
    ANONYMOUS,
    KafkaPrincipal,
    certificate_principal,
)
from broker_embedded.server.security.listener_security import (
    SASL_AUTHENTICATE_KEY,
    SASL_HANDSHAKE_KEY,
    ListenerSecurity,
    sasl_authenticate_response,
    sasl_handshake_response,
)
from broker_embedded.server.security.sasl_authenticator import (
    SaslAuthenticationError,
    SaslAuthenticator,
    SaslState,
)
from broker_embedded.server.security.scram_credentials import CredentialStore
from broker_embedded.server.security.security_config import (
    Listener,
    SecurityConfig,
    SecurityProtocol,
    parse_listener,
)
from broker_embedded.server.security.ssl_context import server_context

log = logging.getLogger(__name__)

POLL_TIMEOUT_S = 0.3
IDLE_CHECK_INTERVAL_S = 1.0
FIRST_CHUNK = 64 << 10  # a frame buffer starts this large and doubles up to the frame's size
ACCEPT_BACKOFF_S = (0.05, 1.0)  # out of descriptors, accept retries after 50 ms, doubling to 1 s
MAX_SENDMSG_BUFFERS = 64
TLS_CHUNK = 256 << 10  # bytes copied into one SSLSocket.send (a FileRegion: one pread)
_SIZE = struct.Struct(">i")
_INT = struct.Struct("i")

if hasattr(select, "epoll"):  # Linux: epoll reports a peer's close (RDHUP) without read interest
    _READ, _WRITE, _HANGUP = select.EPOLLIN, select.EPOLLOUT, select.EPOLLRDHUP
    _GONE = select.EPOLLHUP | select.EPOLLERR
    _new_poll, _POLL_UNIT = select.epoll, 1.0
else:  # poll(2): a full close (HUP) is seen, a half close only where POLLRDHUP exists
    _READ, _WRITE, _HANGUP = select.POLLIN, select.POLLOUT, getattr(select, "POLLRDHUP", 0)
    _GONE = select.POLLHUP | select.POLLERR
    _new_poll, _POLL_UNIT = select.poll, 1000.0  # type: ignore[assignment]


class _Poller:
    """The processor's sockets in one epoll (``poll`` elsewhere), each with its data: interest
    ``_READ``, ``_WRITE``, or ``_HANGUP`` alone for a muted connection (only its close is
    watched). Processor thread only."""

    def __init__(self) -> None:
        self._poll = _new_poll()
        self._data: dict[int, Any] = {}

    def register(self, sock: socket.socket, events: int, data: Any) -> None:
        self._poll.register(sock.fileno(), events)
        self._data[sock.fileno()] = data

    def modify(self, sock: socket.socket, events: int, data: Any) -> None:
        self._poll.modify(sock.fileno(), events)
        self._data[sock.fileno()] = data

    def unregister(self, sock: socket.socket) -> None:
        self._poll.unregister(sock.fileno())
        del self._data[sock.fileno()]

    def select(self, timeout: float) -> list[tuple[Any, int]]:
        ready = self._poll.poll(timeout * _POLL_UNIT)
        return [(self._data[fd], events) for fd, events in ready if fd in self._data]

    def close(self) -> None:
        close = getattr(self._poll, "close", None)
        if close is not None:
            close()


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A listener: ``PLAINTEXT://host:port`` (port 0: the OS picks one)."""

    host: str
    port: int

    @classmethod
    def parse(cls, listener: str) -> Endpoint:
        scheme, sep, rest = listener.partition("://")
        host, colon, port = rest.rpartition(":")
        if not sep or scheme.upper() != "PLAINTEXT" or not colon or not port.isdigit():
            raise ValueError(f"listener {listener!r} is not PLAINTEXT://host:port")
        return cls(host.strip("[]"), int(port))

    def listener(self) -> Listener:
        return Listener("PLAINTEXT", SecurityProtocol.PLAINTEXT, self.host, self.port)


class ConnectionQuotas:
    """Open connections per client IP and in all; shared by acceptors and processors."""

    def __init__(self, max_connections: int, max_per_ip: int) -> None:
        self.max_connections = max_connections
        self.max_per_ip = max_per_ip
        self._per_ip: dict[str, int] = {}
        self._total = 0
        self._slot_free = threading.Condition()

    def acquire(self, ip: str, stopping: threading.Event) -> str | None:
        """Count a new connection from ``ip``, waiting while ``max.connections`` are open;
        returns why it must be refused instead (or "stopping")."""
        with self._slot_free:
            while self._total >= self.max_connections:
                if stopping.is_set():
                    return "the server is stopping"
                self._slot_free.wait(POLL_TIMEOUT_S)
            count = self._per_ip.get(ip, 0)
            if count >= self.max_per_ip:
                return f"{ip} already has max.connections.per.ip={self.max_per_ip} connections"
            self._per_ip[ip] = count + 1
            self._total += 1
            return None

    def release(self, ip: str) -> None:
        with self._slot_free:
            left = self._per_ip[ip] - 1
            if left:
                self._per_ip[ip] = left
            else:
                del self._per_ip[ip]
            self._total -= 1
            self._slot_free.notify()

    def count(self, ip: str | None = None) -> int:
        with self._slot_free:
            return self._total if ip is None else self._per_ip.get(ip, 0)


class _ConnectionError(Exception):
    """Why a connection must close (message: the reason, for the one log line)."""


class _Connection:
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


class Processor(threading.Thread):
    """A network thread: owns connections, reads frames, writes responses."""

    def __init__(
        self,
        processor_id: int,
        config: BrokerConfig,
        channel: RequestChannel,
        versions: ApiVersionManager,
        quotas: ConnectionQuotas,
        request_pool: MemoryPool | None = None,
    ) -> None:
        super().__init__(name=f"kafka-network-thread-{processor_id}", daemon=True)
        self.processor_id = processor_id
        self._max_request = config.socket_request_max_bytes
        self._idle_s = config.connections_max_idle_ms / 1000
        self._channel = channel
        self._versions = versions
        self._quotas = quotas
        self._selector = _Poller()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector.register(self._wake_r, _READ, None)
        self._pool = request_pool or MemoryPool(config.queued_max_request_bytes)
        self._pool.add_listener(self.wakeup)
        self._parked: dict[str, _Connection] = {}  # waiting for the request budget, in order
        self._new: deque[tuple[socket.socket, tuple[str, int], ListenerSecurity]] = deque()
        # failed authentications' answers, held until their delay: (due, seq, conn id, response)
        self._delayed: list[tuple[float, int, str, Response]] = []
        self._seq = itertools.count()
        self._tls_pending: set[str] = set()  # unmuted TLS connections with decrypted bytes
        self._responses = channel.add_processor(processor_id, self.wakeup)
        self._connections: dict[str, _Connection] = {}
        self._next_index = 0
        self._running = True
        self._draining = False
        self._next_idle_check = time.monotonic() + IDLE_CHECK_INTERVAL_S
        self.idle = IdleClock()  # time in select
        self.metrics: RequestMetrics | None = None  # set before start: request metrics on

    # --- called from other threads -------------------------------------------------------

    def wakeup(self) -> None:
        try:
            self._wake_w.send(b"\0")
        except (BlockingIOError, OSError):
            pass  # already woken (buffer full), or closed at shutdown

    def accept(
        self, sock: socket.socket, address: tuple[str, int], security: ListenerSecurity
    ) -> None:
        self._new.append((sock, address, security))
        self.wakeup()

    def begin_drain(self) -> None:
        """Stop reading requests; keep writing responses to in-flight ones."""
        self._draining = True
        self.wakeup()

    def stop(self) -> None:
        self._running = False
        self.wakeup()

    def in_flight(self) -> int:
        """Requests of this processor's connections not yet answered (read from another thread:
        a snapshot, good enough to wait on)."""
        return sum(1 for c in list(self._connections.values()) if c.in_flight)

    def connection_count(self) -> int:
        return len(self._connections)

    # --- the processor thread --------------------------------------------------------------

    def run(self) -> None:
        try:
            while self._running:
                self._configure_new_connections()
                self._process_new_responses()
                self._process_delayed()
                self._resume_parked()
                self._read_tls_pending()
                self._poll()
                self._close_idle()
        except Exception:
            log.exception("processor %d failed; closing its connections", self.processor_id)
        finally:
            self.close_all()

    def _configure_new_connections(self) -> None:
        while self._new:
            sock, address, security = self._new.popleft()
            if self._draining or not self._running:
                sock.close()
                self._quotas.release(address[0])
                continue
            local_host, local_port = sock.getsockname()[:2]
            conn_id = f"{local_host}:{local_port}-{address[0]}:{address[1]}-{self._next_index}"
            self._next_index += 1
            if security.ssl_context is not None:
                try:
                    sock = security.ssl_context.wrap_socket(
                        sock, server_side=True, do_handshake_on_connect=False
                    )
                except (OSError, ValueError) as e:  # e.g. the client already went away
                    log.warning("closing connection from %s:%d: %s", *address, e)
                    sock.close()
                    self._quotas.release(address[0])
                    continue
            times = None if self.metrics is None else RequestTimes()
            conn = _Connection(conn_id, sock, address, security, times)
            self._connections[conn_id] = conn
            self._channel.connection_opened(conn_id)
            self._update_events(conn)

    def _process_new_responses(self) -> None:
        while self._responses:
            response = self._responses.popleft()
            conn = self._connections.get(response.request.connection_id)
            if conn is None:
                response.done()  # its connection closed meanwhile
                continue
            if conn.response is not None or not conn.in_flight:
                header = response.request.header
                log.error(
                    "dropping a second response to %s request %d from %s",
                    header.api_name,
                    header.correlation_id,
                    conn.describe(),
                )
                response.done()
                continue
            if response.close_connection and not response.parts:
                self._close(conn, response.close_reason or "closed by the request handler")
                response.done()
                continue
            conn.response, conn.part, conn.offset = response, 0, 0
            if conn.times is not None:
                conn.response_dequeued_ns = time.monotonic_ns()
            self._write(conn)

    def _poll(self) -> None:
        timeout = POLL_TIMEOUT_S
        if self._tls_pending:
            timeout = 0.0
        elif self._delayed:
            timeout = max(0.0, min(timeout, self._delayed[0][0] - time.monotonic()))
        waited = time.monotonic_ns()
        ready = self._selector.select(timeout)
        self.idle.idle_ns += time.monotonic_ns() - waited
        for conn, events in ready:
            if conn is None:
                self._drain_wakeups()
                continue
            if conn.handshaking:
                self._handshake(conn)
                continue
            if conn.events == _HANGUP:  # muted: only its close is watched
                self._hung_up(conn, events)
                continue
            if events & (_WRITE | _GONE) and conn.response is not None:
                self._write(conn)
            if events & (_READ | _GONE) and conn.id in self._connections:
                self._read(conn)

    def _hung_up(self, conn: _Connection, events: int) -> None:
        """The client of a muted connection closed or half-closed it (module docstring)."""
        if not events & _GONE and _has_unread_bytes(conn):
            conn.peer_closed = True  # requests follow: answer the waiting one, then read them
            self._update_events(conn)
            if conn.in_flight:
                self._channel.complete_waiting(conn.id)
            return
        waited = "its request waited" if conn.in_flight else "its frame waited for memory"
        log.debug("connection from %s closed by the client while %s", conn.describe(), waited)
        self._close(conn, "", quiet=True)

    def _drain_wakeups(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, OSError):
            pass

    def _update_events(self, conn: _Connection, handshake: int = _READ) -> None:
        if conn.handshaking:
            events = handshake | (_WRITE if conn.response is not None else 0)
        elif conn.response is not None:
            events = _WRITE
        elif conn.in_flight or conn.parked or self._draining:
            events = 0 if conn.peer_closed else _HANGUP  # muted: watch for the client's close
        else:
            events = _READ
        if events == conn.events:
            return
        if conn.events == 0:
            self._selector.register(conn.sock, events, conn)
        elif events == 0:
            self._selector.unregister(conn.sock)
        else:
            self._selector.modify(conn.sock, events, conn)
        conn.events = events

    # --- TLS and SASL ----------------------------------------------------------------------

    def _handshake(self, conn: _Connection) -> None:
        """One step of the TLS handshake; on completion the connection reads requests."""
        sock = conn.sock
        assert isinstance(sock, ssl.SSLSocket)
        try:
            sock.do_handshake()
        except ssl.SSLWantReadError:
            self._update_events(conn, _READ)
            return
        except ssl.SSLWantWriteError:
            self._update_events(conn, _WRITE)
            return
        except (OSError, ValueError) as e:  # ssl.SSLError is an OSError
            self._close(conn, f"TLS handshake failed: {e}")
            return
        conn.handshaking = False
        conn.last_active = time.monotonic()
        if conn.sasl is None:  # SSL: the certificate is who the client is
            conn.principal = certificate_principal(sock.getpeercert())
        self._update_events(conn)
        if sock.pending():
            self._tls_pending.add(conn.id)

    def _read_tls_pending(self) -> None:
        """Read the TLS connections whose decrypted bytes wait inside ``ssl`` (not visible to
        the selector) now that they are unmuted."""
        pending, self._tls_pending = self._tls_pending, set()
        for conn_id in pending:
            conn = self._connections.get(conn_id)
            if conn is not None and not conn.in_flight:
                self._read(conn)

    def _authenticate_frame(self, conn: _Connection, frame: memoryview) -> None:
        """A frame of a connection in its SASL exchange (module docstring)."""
        sasl = conn.sasl
        assert sasl is not None
        if conn.sasl_raw:
            assert conn.sasl_request is not None
            self._sasl_token(conn, conn.sasl_request, bytes(frame), raw=True)
            return
        request = self._parse(conn, frame)
        key, version = request.header.api_key, request.header.api_version
        if key == API_VERSIONS_KEY:
            self._queue(conn, request)
        elif key == SASL_HANDSHAKE_KEY:
            ok = sasl.handshake(request.body.mechanism)
            error = ErrorCode.none if ok else ErrorCode.unsupported_sasl_mechanism
            answer = sasl_handshake_response(version, error, sasl.mechanisms)
            conn.sasl_raw = ok and version == 0
            conn.sasl_request = request
            reason = "" if ok else f"SASL mechanism {request.body.mechanism!r} is not enabled"
            self._answer(conn, Response(request, (response_frame(request.header, answer),),
                                        close_connection=not ok, close_reason=reason))  # fmt: skip
        elif key == SASL_AUTHENTICATE_KEY:
            self._sasl_token(conn, request, request.body.auth_bytes, raw=False)
        else:
            raise _ConnectionError(
                f"{request.header.api_name} request before SASL authentication on listener "
                f"{conn.security.listener.name}"
            )

    def _sasl_token(self, conn: _Connection, request: Request, token: bytes, raw: bool) -> None:
        sasl = conn.sasl
        assert sasl is not None
        version = request.header.api_version
        try:
            answer = sasl.evaluate(token)
        except SaslAuthenticationError as e:
            if raw:  # no error frame exists after a v0 handshake: close after the delay
                response = Response(request, close_connection=True, close_reason=str(e))
            else:
                message = sasl_authenticate_response(
                    version, ErrorCode.sasl_authentication_failed, str(e), b""
                )
                response = Response(request, (response_frame(request.header, message),),
                                    close_connection=True, close_reason=str(e))  # fmt: skip
            self._delay(conn, response, conn.security.failed(sasl, conn.address[0]))
            return
        hold = 0.0
        if sasl.state is SaslState.COMPLETE:
            conn.sasl_raw = False
            assert sasl.principal is not None
            conn.principal = sasl.principal
            hold = conn.security.succeeded(sasl)  # while its user is guessed: as a failure
        if raw:
            parts: tuple[bytes, ...] = (_SIZE.pack(len(answer)) + answer,)
        else:
            message = sasl_authenticate_response(version, ErrorCode.none, "", answer)  # Kafka: ""
            parts = (response_frame(request.header, message),)
        if hold:
            self._delay(conn, Response(request, parts), hold)
        else:
            self._answer(conn, Response(request, parts))

    def _answer(self, conn: _Connection, response: Response) -> None:
        """Write a response built on this thread (the SASL exchange) to a muted connection."""
        conn.in_flight = True
        conn.response, conn.part, conn.offset = response, 0, 0
        self._write(conn)

    def _delay(self, conn: _Connection, response: Response, delay_s: float) -> None:
        """Hold an authentication's answer ``delay_s`` (the connection stays muted), then write
        it (and close, after a failure)."""
        conn.in_flight = True
        self._update_events(conn)
        due = time.monotonic() + delay_s
        heapq.heappush(self._delayed, (due, next(self._seq), conn.id, response))

    def _process_delayed(self) -> None:
        now = time.monotonic()
        while self._delayed and self._delayed[0][0] <= now:
            _, _, conn_id, response = heapq.heappop(self._delayed)
            conn = self._connections.get(conn_id)
            if conn is None:
                response.done()
            elif response.parts:
                conn.response, conn.part, conn.offset = response, 0, 0
                self._write(conn)  # closes after the parts (close_connection)
            else:
                self._close(conn, response.close_reason)
                response.done()

    # --- reading ---------------------------------------------------------------------------

    def _read(self, conn: _Connection) -> None:
        if self._draining:
            return  # read interest is being dropped; a partial frame is abandoned
        try:
            # a frame answered on this thread (the SASL exchange) may have closed it
            while (
                not conn.in_flight
                and not conn.parked
                and conn.id in self._connections
                and self._read_some(conn)
            ):
                pass
        except _ConnectionError as e:
            self._close(conn, str(e))

    def _read_some(self, conn: _Connection) -> bool:
        """One recv; True while more may be readable at once."""
        buf, start = (
            (conn.size_buf, conn.size_got) if conn.frame is None else (conn.frame, conn.frame_got)
        )
        try:
            # no view outlives the call: the frame's bytearray must stay resizable
            n = conn.sock.recv_into(memoryview(buf)[start:])
        except (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return False
        except ssl.SSLZeroReturnError:
            n = 0  # the client closed its TLS session
        except ConnectionResetError as e:
            if conn.size_got or conn.frame is not None:
                raise _ConnectionError(f"read failed: {e}") from None
            n = 0  # a reset between requests is a client going away, as a clean close is
        except OSError as e:
            raise _ConnectionError(f"read failed: {e}") from None
        if n == 0:
            self._disconnected(conn)
            return False
        conn.last_active = time.monotonic()
        if conn.frame is None:
            conn.size_got += n
            if conn.size_got == 4:
                self._start_frame(conn)
        else:
            conn.frame_got += n
            if conn.frame_got == len(conn.frame) < conn.frame_size:
                self._grow_frame(conn)
        if conn.frame is not None and conn.frame_got == conn.frame_size:
            self._complete_frame(conn)
        return not conn.parked

    def _disconnected(self, conn: _Connection) -> None:
        if conn.size_got == 0:
            self._close(conn, "", quiet=True)  # a clean close between requests
        elif conn.frame is None:
            self._close(conn, f"disconnected after {conn.size_got} of the 4 size bytes")
        else:
            self._close(
                conn,
                f"disconnected mid-request after {conn.frame_got} of {conn.frame_size} bytes",
            )

    def _start_frame(self, conn: _Connection) -> None:
        (size,) = _SIZE.unpack(conn.size_buf)
        if size < 0:
            raise _ConnectionError(f"invalid frame size {size}")
        if size > self._max_request:
            raise _ConnectionError(
                f"frame of {size} bytes exceeds socket.request.max.bytes={self._max_request}"
            )
        if size > conn.security.max_token and not conn.authenticated:
            raise _ConnectionError(
                f"frame of {size} bytes before authentication exceeds "
                f"sasl.server.max.receive.size={conn.security.max_token}"
            )
        conn.frame_size = size
        conn.frame_got = 0
        if size > FIRST_CHUNK and not self._pool.try_reserve(size):
            conn.parked = size  # read when the request budget has room (_resume_parked)
            self._parked[conn.id] = conn
            self._update_events(conn)
            return
        conn.reserved = size if size > FIRST_CHUNK else 0
        conn.frame = bytearray(min(size, FIRST_CHUNK))

    def _resume_parked(self) -> None:
        """Read the connections that waited for the request budget, oldest first, while it
        has room."""
        while self._parked and self._pool.available > 0:
            conn_id, conn = next(iter(self._parked.items()))
            if not self._pool.try_reserve(conn.parked):
                return
            del self._parked[conn_id]
            conn.reserved, conn.parked = conn.parked, 0
            conn.frame = bytearray(FIRST_CHUNK)
            self._update_events(conn)
            self._read(conn)

    def _release_reservation(self, conn: _Connection) -> None:
        if conn.reserved:
            self._pool.release(conn.reserved)
            conn.reserved = 0

    def _grow_frame(self, conn: _Connection) -> None:
        """A buffer twice as large (at most the frame) with the bytes so far: a new zeroed
        bytearray, whose pages cost memory only once bytes arrive in them."""
        assert conn.frame is not None
        grown = bytearray(min(conn.frame_size, 2 * len(conn.frame)))
        grown[: len(conn.frame)] = conn.frame
        conn.frame = grown

    def _complete_frame(self, conn: _Connection) -> None:
        frame = conn.frame
        assert frame is not None
        conn.frame = None
        conn.size_got = 0
        view = memoryview(frame).toreadonly()  # kio reads read-only
        if not conn.authenticated:
            self._authenticate_frame(conn, view)
            return
        self._queue(conn, self._parse(conn, view))

    def _queue(self, conn: _Connection, request: Request) -> None:
        """Hand a request to the handlers; the connection is muted until its response."""
        conn.in_flight = True
        self._update_events(conn)
        if conn.times is not None:
            conn.times.reset()
        if not self._channel.send_request(request, lambda: self._running):
            raise _ConnectionError("the server stopped before the request was queued")

    def _parse(self, conn: _Connection, frame: memoryview) -> Request:
        try:
            header, offset = parse_header(frame, self._versions.is_enabled)
            conn.client_id = header.client_id
            body = None  # an ApiVersions version above ours: answered by the v0 fallback
            own = self._versions.range(header.api_key)
            if header.api_key != API_VERSIONS_KEY or header.api_version in own:
                body = parse_body(header, frame, offset)
        except InvalidRequestError as e:
            conn.client_id = e.client_id
            raise _ConnectionError(str(e)) from None
        except Exception as e:  # a bug in parsing: this connection alone pays for it
            log.exception("parsing a request from %s failed", conn.describe())
            raise _ConnectionError(f"unparsable request: {e!r}") from None
        return Request(
            self.processor_id,
            conn.id,
            conn.address,
            header,
            body,
            len(frame),
            time.monotonic_ns(),
            conn.security.listener.name,
            conn.principal,
            conn.times,
        )

    # --- writing ---------------------------------------------------------------------------

    def _write(self, conn: _Connection) -> None:
        response = conn.response
        assert response is not None
        parts = response.parts
        try:
            while conn.part < len(parts):
                part = parts[conn.part]
                sent = (
                    self._send_file(conn, part)
                    if isinstance(part, FileRegion)
                    else self._send_buffers(conn, parts)
                )
                if not sent:
                    self._update_events(conn)  # wait until writable
                    return
        except _ConnectionError as e:
            self._close(conn, str(e))
            return
        self._finish_response(conn, response)

    def _send_buffers(self, conn: _Connection, parts: Sequence[object]) -> bool:
        """sendmsg of the byte parts from the current one up to the next file region; False
        when the socket takes nothing now."""
        views = [memoryview(parts[conn.part])[conn.offset :]]  # type: ignore[arg-type]
        for part in parts[conn.part + 1 : conn.part + MAX_SENDMSG_BUFFERS]:
            if isinstance(part, FileRegion):
                break
            views.append(memoryview(part))  # type: ignore[arg-type]
        try:
            n = self._send_tls(conn, _tls_chunk(views)) if conn.tls else conn.sock.sendmsg(views)
        except (BlockingIOError, InterruptedError):
            return False
        except OSError as e:
            raise _ConnectionError(f"write failed: {e}") from None
        conn.last_active = time.monotonic()
        for view in views:
            if n < len(view):
                conn.offset += n
                return True
            n -= len(view)
            conn.part += 1
            conn.offset = 0
        return True

    def _send_file(self, conn: _Connection, region: FileRegion) -> bool:
        """One os.sendfile of the region's rest; False when the socket takes nothing now."""
        remaining = region.length - conn.offset
        if remaining:
            fd = self._region_fd(conn, region)
            try:
                if conn.tls:  # sendfile cannot encrypt: a copy through ssl
                    chunk = os.pread(fd, min(remaining, TLS_CHUNK), region.position + conn.offset)
                    n = self._send_tls(conn, chunk) if chunk else 0
                else:
                    n = os.sendfile(
                        conn.sock.fileno(), fd, region.position + conn.offset,
                        min(remaining, 1 << 30),
                    )  # fmt: skip
            except (BlockingIOError, InterruptedError):
                self._close_region_file(conn)  # a path region is opened again when writable
                return False
            except OSError as e:
                raise _ConnectionError(f"sendfile of {region.name} failed: {e}") from None
            if n == 0:
                raise _ConnectionError(
                    f"{region.name} ends before byte {region.position + region.length} of its "
                    "file region"
                )
            conn.last_active = time.monotonic()
            conn.offset += n
            if n < remaining:
                return True
        self._close_region_file(conn)
        conn.part += 1
        conn.offset = 0
        return True

    @staticmethod
    def _send_tls(conn: _Connection, data: Any) -> int:
        """One ``SSLSocket.send``; BlockingIOError while TLS wants to wait (a retry sends the
        same bytes again, as OpenSSL requires)."""
        try:
            return conn.sock.send(data)
        except (ssl.SSLWantWriteError, ssl.SSLWantReadError):
            raise BlockingIOError from None

    def _region_fd(self, conn: _Connection, region: FileRegion) -> int:
        if region.fd is not None:
            return region.fd
        if conn.file_fd is None:
            try:
                fd = os.open(region.path, os.O_RDONLY | os.O_CLOEXEC)  # type: ignore[arg-type]
            except OSError as e:
                raise _ConnectionError(f"cannot open {region.path}: {e}") from None
            conn.file_fd = fd
            if region.file_id is not None:
                st = os.fstat(fd)
                if (st.st_dev, st.st_ino) != region.file_id:
                    raise _ConnectionError(f"{region.path} was replaced while it was being sent")
        return conn.file_fd

    def _close_region_file(self, conn: _Connection) -> None:
        if conn.file_fd is not None:
            os.close(conn.file_fd)
            conn.file_fd = None

    def _finish_response(self, conn: _Connection, response: Response) -> None:
        conn.response = None
        if conn.response_dequeued_ns and self.metrics is not None and conn.times is not None:
            header, request = response.request.header, response.request
            self.metrics.finished(header.api_key, header.api_version, request.received_ns,
                                  conn.times, conn.response_dequeued_ns)  # fmt: skip
        conn.response_dequeued_ns = 0
        response.done()
        if response.close_connection:
            self._close(conn, response.close_reason or "closed after its response")
            return
        conn.in_flight = False  # unmute: the next pipelined request may be read
        self._release_reservation(conn)
        self._update_events(conn)
        if conn.tls and conn.sock.pending():  # type: ignore[attr-defined]
            self._tls_pending.add(conn.id)

    # --- closing ---------------------------------------------------------------------------

    def _close(self, conn: _Connection, reason: str, quiet: bool = False) -> None:
        if self._connections.pop(conn.id, None) is None:
            return
        if not quiet:
            log.warning("closing connection from %s: %s", conn.describe(), reason)
        if conn.events:
            self._selector.unregister(conn.sock)
            conn.events = 0
        conn.sock.close()
        self._close_region_file(conn)
        self._quotas.release(conn.address[0])
        self._release_reservation(conn)
        self._parked.pop(conn.id, None)
        self._channel.connection_closed(conn.id)
        if conn.response is not None:
            response, conn.response = conn.response, None
            response.done()

    def _close_idle(self) -> None:
        now = time.monotonic()
        if self._draining:
            for conn in list(self._connections.values()):
                self._update_events(conn)  # drop read interest
        if now < self._next_idle_check:
            return
        self._next_idle_check = now + IDLE_CHECK_INTERVAL_S
        for conn in list(self._connections.values()):
            if not conn.authenticated and now - conn.created > conn.security.auth_timeout_s:
                timeout = conn.security.auth_timeout_s * 1000
                self._close(
                    conn, f"not authenticated within authentication.timeout.ms={timeout:.0f}"
                )
            elif not conn.in_flight and now - conn.last_active > self._idle_s:
                self._close(
                    conn, f"idle for more than connections.max.idle.ms={self._idle_s * 1000:.0f}"
                )

    def close_all(self) -> None:
        """Close every connection and the selector: on this thread when it ends, or by the
        server for a processor that never started."""
        for conn in list(self._connections.values()):
            self._close(conn, "the server is shutting down", quiet=True)
        while self._new:
            sock, address, _ = self._new.popleft()
            sock.close()
            self._quotas.release(address[0])
        while self._delayed:
            heapq.heappop(self._delayed)[3].done()
        self._channel.remove_processor(self.processor_id)  # runs on_done of unsent responses
        self._selector.close()
        self._wake_r.close()
        self._wake_w.close()


class Acceptor(threading.Thread):
    """Accepts connections on one listener and hands them to the processors, round-robin."""

    def __init__(
        self,
        security: ListenerSecurity,
        processors: Sequence[Processor],
        quotas: ConnectionQuotas,
        backlog: int,
    ) -> None:
        listener = security.listener
        super().__init__(name=f"kafka-acceptor-{listener}", daemon=True)
        family = socket.AF_INET6 if ":" in listener.host else socket.AF_INET
        self._listen = socket.create_server(
            (listener.host, listener.port), family=family, backlog=backlog
        )
        self._listen.setblocking(False)
        self.endpoint = Endpoint(listener.host, self._listen.getsockname()[1])
        self.listener = listener.at_port(self.endpoint.port)
        self.security = security
        self._processors = processors
        self._quotas = quotas
        self._next = 0
        self._stopping = threading.Event()
        self._failing_since: float | None = None  # accept failing (out of descriptors) since
        self._backoff = ACCEPT_BACKOFF_S[0]

    def stop(self) -> None:
        self._stopping.set()

    def close(self) -> None:
        """Close the listen socket (done by the thread when it ends)."""
        self._listen.close()

    def run(self) -> None:
        with selectors.DefaultSelector() as selector:
            selector.register(self._listen, selectors.EVENT_READ)
            try:
                while not self._stopping.is_set():
                    if selector.select(POLL_TIMEOUT_S):
                        self._accept_one()
            finally:
                self._listen.close()

    def _accept_failed(self, error: OSError) -> None:
        """One log line per episode, then retries backing off up to ACCEPT_BACKOFF_S[1]."""
        if self._failing_since is None:
            self._failing_since = time.monotonic()
            host, port = self._listen.getsockname()[:2]
            log.error("accepting on %s:%d failed: %s; retrying every %.2f-%.0f s until it works "
                      "(clients wait in the listen backlog)", host, port, error,
                      *ACCEPT_BACKOFF_S)  # fmt: skip
        else:
            self._backoff = min(2 * self._backoff, ACCEPT_BACKOFF_S[1])
        self._stopping.wait(self._backoff)

    def _accept_one(self) -> None:
        try:
            sock, address = self._listen.accept()
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:  # e.g. out of file descriptors: back off, keep the listener
            self._accept_failed(e)
            return
        if self._failing_since is not None:
            host, port = self._listen.getsockname()[:2]
            log.warning("accepting on %s:%d again after %.1f s", host, port,
                        time.monotonic() - self._failing_since)  # fmt: skip
            self._failing_since, self._backoff = None, ACCEPT_BACKOFF_S[0]
        refused = self._quotas.acquire(address[0], self._stopping)
        if refused is not None:
            log.warning("refused connection from %s:%d: %s", address[0], address[1], refused)
            sock.close()
            return
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        processor = self._processors[self._next % len(self._processors)]
        self._next += 1
        processor.accept(sock, address[:2], self.security)


class SocketServer:
    """Acceptors for the listeners, ``num.network.threads`` processors, and the request
    channel they share with the request handlers (created here, as in Kafka)."""

    def __init__(
        self,
        config: BrokerConfig,
        versions: ApiVersionManager,
        listeners: Sequence[Endpoint | Listener | str],
        security: SecurityConfig | None = None,
        credentials: CredentialStore | None = None,
    ) -> None:
        """``listeners``: a string ``NAME://host:port`` is resolved through
        ``security.listener.security.protocol.map``; an :class:`Endpoint` is PLAINTEXT.
        ``credentials``: the users' store, needed by SASL listeners."""
        self.config = config
        securities = listener_securities(listeners, security or SecurityConfig(), credentials)
        self.request_channel = RequestChannel(config.queued_max_requests)
        self.quotas = ConnectionQuotas(config.max_connections, config.max_connections_per_ip)
        self.request_pool = MemoryPool(config.queued_max_request_bytes)
        self.processors = [
            Processor(i, config, self.request_channel, versions, self.quotas, self.request_pool)
            for i in range(config.num_network_threads)
        ]
        self.acceptors: list[Acceptor] = []
        self._started = False
        try:
            for security_of in securities:
                self.acceptors.append(Acceptor(security_of, self.processors, self.quotas,
                                               config.socket_listen_backlog_size))  # fmt: skip
        except BaseException:
            self.shutdown(0)
            raise

    @property
    def endpoints(self) -> list[Endpoint]:
        """The bound listeners (a port 0 listener shows the port the OS chose)."""
        return [a.endpoint for a in self.acceptors]

    @property
    def listeners(self) -> list[Listener]:
        """The bound listeners with their names and security protocols."""
        return [a.listener for a in self.acceptors]

    def start(self) -> None:
        for thread in (*self.processors, *self.acceptors):
            thread.start()
        self._started = True

    def stop_accepting(self, timeout: float) -> None:
        """Close the listen sockets (joins the acceptors within ``timeout``)."""
        deadline = time.monotonic() + timeout
        for acceptor in self.acceptors:
            acceptor.stop()
        for acceptor in self.acceptors:
            if acceptor.is_alive():
                acceptor.join(max(0.0, deadline - time.monotonic()))

    def drain(self, timeout: float) -> bool:
        """Stop reading requests and wait up to ``timeout`` for the in-flight ones to be
        answered; True when none is left."""
        deadline = time.monotonic() + timeout
        for processor in self.processors:
            processor.begin_drain()
        while any(p.in_flight() for p in self.processors):
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)
        return True

    def shutdown(self, timeout: float) -> None:
        """Stop every thread and close every socket, within about ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        self.stop_accepting(timeout)
        for processor in self.processors:
            processor.stop()
        for processor in self.processors:
            if processor.is_alive():
                processor.join(max(0.0, deadline - time.monotonic()))
            elif not self._started:
                processor.close_all()
        for acceptor in self.acceptors:
            if not acceptor.is_alive():
                acceptor.close()

    def connection_count(self) -> int:
        return self.quotas.count()


def _has_unread_bytes(conn: _Connection) -> bool:
    """Whether the client sent bytes not read yet (in the kernel, or decrypted inside ssl)."""
    if conn.tls and conn.sock.pending():  # type: ignore[attr-defined]
        return True
    try:
        (count,) = _INT.unpack(fcntl.ioctl(conn.sock.fileno(), termios.FIONREAD, b"\0" * 4))
    except OSError:
        return False
    return count > 0


def _tls_chunk(views: list[memoryview]) -> memoryview | bytes:
    """Up to :data:`TLS_CHUNK` bytes of ``views`` for one ``SSLSocket.send`` (a copy when
    several small buffers are joined)."""
    if len(views) == 1 or len(views[0]) >= TLS_CHUNK:
        return views[0][:TLS_CHUNK]
    taken, size = [], 0
    for view in views:
        taken.append(view[: TLS_CHUNK - size])
        size += len(taken[-1])
        if size >= TLS_CHUNK:
            break
    return b"".join(taken)


def listener_securities(
    listeners: Sequence[Endpoint | Listener | str],
    config: SecurityConfig,
    credentials: CredentialStore | None,
) -> list[ListenerSecurity]:
    """Each listener with its security; one TLS context for all TLS listeners (built only if
    one is TLS). ValueError or InvalidConfigError naming what is wrong."""
    resolved = []
    for listener in listeners:
        if isinstance(listener, str):
            listener = parse_listener(listener, config.protocol_map)
        elif isinstance(listener, Endpoint):
            listener = listener.listener()
        resolved.append(listener)
    tls = server_context(config) if any(li.protocol.uses_tls for li in resolved) else None
    limiter = AuthenticationLimiter(LimiterConfig.of(config))  # one for every listener
    return [ListenerSecurity.of(li, config, credentials, tls, limiter) for li in resolved]
