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
  accepts the next one (as Kafka does); clients wait in the listen backlog.
- ``connections.max.idle.ms``: a connection with no request in flight and no traffic for that
  long is closed (checked about once a second).
- ``queued.max.requests``: a processor blocks on the full request queue, so it reads nothing
  more until a handler takes a request (back-pressure, not drops).

Whatever a client does wrong (malformed frame, bad size, truncated request, unknown or disabled
API key or version, disconnecting mid-request) closes that connection alone, with one log line
naming the client and the reason; the processor goes on serving its other connections.

Shutdown (:meth:`SocketServer.stop_accepting`, :meth:`SocketServer.drain`,
:meth:`SocketServer.shutdown`): acceptors close their listen sockets; processors stop reading
new requests and keep writing responses to in-flight ones until none is left or the deadline
passes; then every connection is closed and the unsent responses' ``on_done`` run. Every wait
is bounded.

Thread safety: a processor's connections are touched only by its own thread; other threads
reach it through its new-connection deque, its response deque and its wakeup socket.
:class:`ConnectionQuotas` is shared under a lock.
"""

from __future__ import annotations

import logging
import os
import selectors
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from broker_embedded.broker_config import BrokerConfig
from broker_embedded.server.api_version_manager import ApiVersionManager
from broker_embedded.server.protocol import (
    API_VERSIONS_KEY,
    InvalidRequestError,
    parse_body,
    parse_header,
)
from broker_embedded.server.request_channel import FileRegion, Request, RequestChannel, Response

log = logging.getLogger(__name__)

POLL_TIMEOUT_S = 0.3
IDLE_CHECK_INTERVAL_S = 1.0
FIRST_CHUNK = 64 << 10  # a frame buffer starts this large and doubles up to the frame's size
MAX_SENDMSG_BUFFERS = 64
_SIZE = struct.Struct(">i")


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
    )

    def __init__(self, conn_id: str, sock: socket.socket, address: tuple[str, int]) -> None:
        self.id = conn_id
        self.sock = sock
        self.address = address
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
    ) -> None:
        super().__init__(name=f"kafka-network-thread-{processor_id}", daemon=True)
        self.processor_id = processor_id
        self._max_request = config.socket_request_max_bytes
        self._idle_s = config.connections_max_idle_ms / 1000
        self._channel = channel
        self._versions = versions
        self._quotas = quotas
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._new: deque[tuple[socket.socket, tuple[str, int]]] = deque()
        self._responses = channel.add_processor(processor_id, self.wakeup)
        self._connections: dict[str, _Connection] = {}
        self._next_index = 0
        self._running = True
        self._draining = False
        self._next_idle_check = time.monotonic() + IDLE_CHECK_INTERVAL_S

    # --- called from other threads -------------------------------------------------------

    def wakeup(self) -> None:
        try:
            self._wake_w.send(b"\0")
        except (BlockingIOError, OSError):
            pass  # already woken (buffer full), or closed at shutdown

    def accept(self, sock: socket.socket, address: tuple[str, int]) -> None:
        self._new.append((sock, address))
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
                self._poll()
                self._close_idle()
        except Exception:
            log.exception("processor %d failed; closing its connections", self.processor_id)
        finally:
            self.close_all()

    def _configure_new_connections(self) -> None:
        while self._new:
            sock, address = self._new.popleft()
            if self._draining or not self._running:
                sock.close()
                self._quotas.release(address[0])
                continue
            local_host, local_port = sock.getsockname()[:2]
            conn_id = f"{local_host}:{local_port}-{address[0]}:{address[1]}-{self._next_index}"
            self._next_index += 1
            conn = _Connection(conn_id, sock, address)
            self._connections[conn_id] = conn
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
            self._write(conn)

    def _poll(self) -> None:
        for key, events in self._selector.select(POLL_TIMEOUT_S):
            conn = key.data
            if conn is None:
                self._drain_wakeups()
                continue
            if events & selectors.EVENT_WRITE and conn.response is not None:
                self._write(conn)
            if events & selectors.EVENT_READ and conn.id in self._connections:
                self._read(conn)

    def _drain_wakeups(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, OSError):
            pass

    def _update_events(self, conn: _Connection) -> None:
        events = 0
        if not conn.in_flight and not self._draining:
            events |= selectors.EVENT_READ
        if conn.response is not None:
            events |= selectors.EVENT_WRITE
        if events == conn.events:
            return
        if conn.events == 0:
            self._selector.register(conn.sock, events, conn)
        elif events == 0:
            self._selector.unregister(conn.sock)
        else:
            self._selector.modify(conn.sock, events, conn)
        conn.events = events

    # --- reading ---------------------------------------------------------------------------

    def _read(self, conn: _Connection) -> None:
        if self._draining:
            return  # read interest is being dropped; a partial frame is abandoned
        try:
            while not conn.in_flight and self._read_some(conn):
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
        except (BlockingIOError, InterruptedError):
            return False
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
        return True

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
        conn.frame_size = size
        conn.frame_got = 0
        conn.frame = bytearray(min(size, FIRST_CHUNK))

    def _grow_frame(self, conn: _Connection) -> None:
        assert conn.frame is not None
        grown = min(conn.frame_size, 2 * len(conn.frame))
        conn.frame.extend(bytes(grown - len(conn.frame)))

    def _complete_frame(self, conn: _Connection) -> None:
        frame = conn.frame
        assert frame is not None
        conn.frame = None
        conn.size_got = 0
        request = self._parse(conn, memoryview(frame).toreadonly())  # kio reads read-only
        conn.in_flight = True  # muted until its response is written
        self._update_events(conn)
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
            n = conn.sock.sendmsg(views)
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
                n = os.sendfile(
                    conn.sock.fileno(), fd, region.position + conn.offset, min(remaining, 1 << 30)
                )
            except (BlockingIOError, InterruptedError):
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

    def _region_fd(self, conn: _Connection, region: FileRegion) -> int:
        if region.fd is not None:
            return region.fd
        if conn.file_fd is None:
            try:
                conn.file_fd = os.open(region.path, os.O_RDONLY)  # type: ignore[arg-type]
            except OSError as e:
                raise _ConnectionError(f"cannot open {region.path}: {e}") from None
        return conn.file_fd

    def _close_region_file(self, conn: _Connection) -> None:
        if conn.file_fd is not None:
            os.close(conn.file_fd)
            conn.file_fd = None

    def _finish_response(self, conn: _Connection, response: Response) -> None:
        conn.response = None
        response.done()
        if response.close_connection:
            self._close(conn, response.close_reason or "closed after its response")
            return
        conn.in_flight = False  # unmute: the next pipelined request may be read
        self._update_events(conn)

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
            if not conn.in_flight and now - conn.last_active > self._idle_s:
                self._close(
                    conn, f"idle for more than connections.max.idle.ms={self._idle_s * 1000:.0f}"
                )

    def close_all(self) -> None:
        """Close every connection and the selector: on this thread when it ends, or by the
        server for a processor that never started."""
        for conn in list(self._connections.values()):
            self._close(conn, "the server is shutting down", quiet=True)
        while self._new:
            sock, address = self._new.popleft()
            sock.close()
            self._quotas.release(address[0])
        self._channel.remove_processor(self.processor_id)  # runs on_done of unsent responses
        self._selector.close()
        self._wake_r.close()
        self._wake_w.close()


class Acceptor(threading.Thread):
    """Accepts connections on one listener and hands them to the processors, round-robin."""

    def __init__(
        self,
        endpoint: Endpoint,
        processors: Sequence[Processor],
        quotas: ConnectionQuotas,
        backlog: int,
    ) -> None:
        super().__init__(name=f"kafka-acceptor-{endpoint.host}:{endpoint.port}", daemon=True)
        family = socket.AF_INET6 if ":" in endpoint.host else socket.AF_INET
        self._listen = socket.create_server(
            (endpoint.host, endpoint.port), family=family, backlog=backlog
        )
        self._listen.setblocking(False)
        self.endpoint = Endpoint(endpoint.host, self._listen.getsockname()[1])
        self._processors = processors
        self._quotas = quotas
        self._next = 0
        self._stopping = threading.Event()

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

    def _accept_one(self) -> None:
        try:
            sock, address = self._listen.accept()
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:  # e.g. out of file descriptors: back off, keep the listener
            log.error("accepting on %s:%d failed: %s", *self._listen.getsockname()[:2], e)
            self._stopping.wait(POLL_TIMEOUT_S)
            return
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
        processor.accept(sock, address[:2])


class SocketServer:
    """Acceptors for the listeners, ``num.network.threads`` processors, and the request
    channel they share with the request handlers (created here, as in Kafka)."""

    def __init__(
        self,
        config: BrokerConfig,
        versions: ApiVersionManager,
        listeners: Sequence[Endpoint | str],
    ) -> None:
        self.config = config
        self.request_channel = RequestChannel(config.queued_max_requests)
        self.quotas = ConnectionQuotas(config.max_connections, config.max_connections_per_ip)
        self.processors = [
            Processor(i, config, self.request_channel, versions, self.quotas)
            for i in range(config.num_network_threads)
        ]
        self.acceptors: list[Acceptor] = []
        try:
            for listener in listeners:
                endpoint = Endpoint.parse(listener) if isinstance(listener, str) else listener
                self.acceptors.append(Acceptor(endpoint, self.processors, self.quotas,
                                               config.socket_listen_backlog_size))  # fmt: skip
        except BaseException:
            self.shutdown(0)
            raise
        self._started = False

    @property
    def endpoints(self) -> list[Endpoint]:
        """The bound listeners (a port 0 listener shows the port the OS chose)."""
        return [a.endpoint for a in self.acceptors]

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
