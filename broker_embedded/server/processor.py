"""A network thread (Kafka's ``Processor``): owns its connections (non-blocking sockets in one
:class:`Poller`), reads whole request frames, parses header and body (kio), puts the request on
the :class:`RequestChannel`, and writes the responses that come back on its response queue
(transport_layer.py). What it does at each limit, muting, the SASL exchange, the idle and
authentication timeouts and shutdown: socket_server.py's docstring.

Invariants: one frame read per connection, then the connection is muted until that request's
response is written (responses go out in request order); a frame's buffer grows with the bytes
that arrive, from :data:`FIRST_CHUNK`. Thread safety: a processor's connections are touched only
by its own thread; other threads reach it through its new-connection deque, its response deque
and its wakeup socket.
"""

from __future__ import annotations

import fcntl
import heapq
import itertools
import logging
import socket
import ssl
import struct
import termios
import threading
import time
from collections import deque

from broker_embedded.broker_config import BrokerConfig
from broker_embedded.error_code import ErrorCode
from broker_embedded.server.api_version_manager import ApiVersionManager
from broker_embedded.server.connection_quotas import POLL_TIMEOUT_S, ConnectionQuotas
from broker_embedded.server.kafka_channel import ChannelError, KafkaChannel
from broker_embedded.server.protocol import (
    API_VERSIONS_KEY,
    InvalidRequestError,
    parse_body,
    parse_header,
    response_frame,
)
from broker_embedded.server.request_channel import (
    MemoryPool,
    Request,
    RequestChannel,
    Response,
)
from broker_embedded.server.request_metrics import IdleClock, RequestMetrics, RequestTimes
from broker_embedded.server.security.listener_security import (
    SASL_AUTHENTICATE_KEY,
    SASL_HANDSHAKE_KEY,
    ListenerSecurity,
    sasl_authenticate_response,
    sasl_handshake_response,
)
from broker_embedded.server.security.sasl_authenticator import (
    SaslAuthenticationError,
    SaslState,
)
from broker_embedded.server.selector import GONE, HANGUP, READ, WRITE, Poller
from broker_embedded.server.transport_layer import TransportLayer

log = logging.getLogger(__name__)
IDLE_CHECK_INTERVAL_S = 1.0
FIRST_CHUNK = 64 << 10  # a frame buffer starts this large and doubles up to the frame's size
_SIZE = struct.Struct(">i")
_INT = struct.Struct("i")


class Processor(TransportLayer, threading.Thread):
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
        self._selector = Poller()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector.register(self._wake_r, READ, None)
        self._pool = request_pool or MemoryPool(config.queued_max_request_bytes)
        self._pool.add_listener(self.wakeup)
        self._parked: dict[str, KafkaChannel] = {}  # waiting for the request budget, in order
        self._new: deque[tuple[socket.socket, tuple[str, int], ListenerSecurity]] = deque()
        # failed authentications' answers, held until their delay: (due, seq, conn id, response)
        self._delayed: list[tuple[float, int, str, Response]] = []
        self._seq = itertools.count()
        self._tls_pending: set[str] = set()  # unmuted TLS connections with decrypted bytes
        self._responses = channel.add_processor(processor_id, self.wakeup)
        self._connections: dict[str, KafkaChannel] = {}
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
            conn = KafkaChannel(conn_id, sock, address, security, times)
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
            if conn.events == HANGUP:  # muted: only its close is watched
                self._hung_up(conn, events)
                continue
            if events & (WRITE | GONE) and conn.response is not None:
                self._write(conn)
            if events & (READ | GONE) and conn.id in self._connections:
                self._read(conn)

    def _hung_up(self, conn: KafkaChannel, events: int) -> None:
        """The client of a muted connection closed or half-closed it (module docstring)."""
        if not events & GONE and _has_unread_bytes(conn):
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

    def _update_events(self, conn: KafkaChannel, handshake: int = READ) -> None:
        if conn.handshaking:
            events = handshake | (WRITE if conn.response is not None else 0)
        elif conn.response is not None:
            events = WRITE
        elif conn.in_flight or conn.parked or self._draining:
            events = 0 if conn.peer_closed else HANGUP  # muted: watch for the client's close
        else:
            events = READ
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

    def _authenticate_frame(self, conn: KafkaChannel, frame: memoryview) -> None:
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
            self._answer(
                conn,
                Response(
                    request,
                    (response_frame(request.header, answer),),
                    close_connection=not ok,
                    close_reason=reason,
                ),
            )
        elif key == SASL_AUTHENTICATE_KEY:
            self._sasl_token(conn, request, request.body.auth_bytes, raw=False)
        else:
            raise ChannelError(
                f"{request.header.api_name} request before SASL authentication on listener "
                f"{conn.security.listener.name}"
            )

    def _sasl_token(self, conn: KafkaChannel, request: Request, token: bytes, raw: bool) -> None:
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
                response = Response(
                    request,
                    (response_frame(request.header, message),),
                    close_connection=True,
                    close_reason=str(e),
                )
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

    def _answer(self, conn: KafkaChannel, response: Response) -> None:
        """Write a response built on this thread (the SASL exchange) to a muted connection."""
        conn.in_flight = True
        conn.response, conn.part, conn.offset = response, 0, 0
        self._write(conn)

    def _delay(self, conn: KafkaChannel, response: Response, delay_s: float) -> None:
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

    def _read(self, conn: KafkaChannel) -> None:
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
        except ChannelError as e:
            self._close(conn, str(e))

    def _read_some(self, conn: KafkaChannel) -> bool:
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
                raise ChannelError(f"read failed: {e}") from None
            n = 0  # a reset between requests is a client going away, as a clean close is
        except OSError as e:
            raise ChannelError(f"read failed: {e}") from None
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

    def _disconnected(self, conn: KafkaChannel) -> None:
        if conn.size_got == 0:
            self._close(conn, "", quiet=True)  # a clean close between requests
        elif conn.frame is None:
            self._close(conn, f"disconnected after {conn.size_got} of the 4 size bytes")
        else:
            self._close(
                conn,
                f"disconnected mid-request after {conn.frame_got} of {conn.frame_size} bytes",
            )

    def _start_frame(self, conn: KafkaChannel) -> None:
        (size,) = _SIZE.unpack(conn.size_buf)
        if size < 0:
            raise ChannelError(f"invalid frame size {size}")
        if size > self._max_request:
            raise ChannelError(
                f"frame of {size} bytes exceeds socket.request.max.bytes={self._max_request}"
            )
        if size > conn.security.max_token and not conn.authenticated:
            raise ChannelError(
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

    def _release_reservation(self, conn: KafkaChannel) -> None:
        if conn.reserved:
            self._pool.release(conn.reserved)
            conn.reserved = 0

    def _grow_frame(self, conn: KafkaChannel) -> None:
        """A buffer twice as large (at most the frame) with the bytes so far: a new zeroed
        bytearray, whose pages cost memory only once bytes arrive in them."""
        assert conn.frame is not None
        grown = bytearray(min(conn.frame_size, 2 * len(conn.frame)))
        grown[: len(conn.frame)] = conn.frame
        conn.frame = grown

    def _complete_frame(self, conn: KafkaChannel) -> None:
        frame = conn.frame
        assert frame is not None
        conn.frame = None
        conn.size_got = 0
        view = memoryview(frame).toreadonly()  # kio reads read-only
        if not conn.authenticated:
            self._authenticate_frame(conn, view)
            return
        self._queue(conn, self._parse(conn, view))

    def _queue(self, conn: KafkaChannel, request: Request) -> None:
        """Hand a request to the handlers; the connection is muted until its response."""
        conn.in_flight = True
        self._update_events(conn)
        if conn.times is not None:
            conn.times.reset()
        if not self._channel.send_request(request, lambda: self._running):
            raise ChannelError("the server stopped before the request was queued")

    def _parse(self, conn: KafkaChannel, frame: memoryview) -> Request:
        try:
            header, offset = parse_header(frame, self._versions.is_enabled)
            conn.client_id = header.client_id
            body = None  # an ApiVersions version above ours: answered by the v0 fallback
            own = self._versions.range(header.api_key)
            if header.api_key != API_VERSIONS_KEY or header.api_version in own:
                body = parse_body(header, frame, offset)
        except InvalidRequestError as e:
            conn.client_id = e.client_id
            raise ChannelError(str(e)) from None
        except Exception as e:  # a bug in parsing: this connection alone pays for it
            log.exception("parsing a request from %s failed", conn.describe())
            raise ChannelError(f"unparsable request: {e!r}") from None
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

    def _finish_response(self, conn: KafkaChannel, response: Response) -> None:
        conn.response = None
        if conn.response_dequeued_ns and self.metrics is not None and conn.times is not None:
            header, request = response.request.header, response.request
            self.metrics.finished(
                header.api_key,
                header.api_version,
                request.received_ns,
                conn.times,
                conn.response_dequeued_ns,
            )
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

    def _close(self, conn: KafkaChannel, reason: str, quiet: bool = False) -> None:
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


def _has_unread_bytes(conn: KafkaChannel) -> bool:
    """Whether the client sent bytes not read yet (in the kernel, or decrypted inside ssl)."""
    if conn.tls and conn.sock.pending():  # type: ignore[attr-defined]
        return True
    try:
        (count,) = _INT.unpack(fcntl.ioctl(conn.sock.fileno(), termios.FIONREAD, b"\0" * 4))
    except OSError:
        return False
    return count > 0
