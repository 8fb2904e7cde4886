"""The network layer (Kafka's ``SocketServer``): acceptors, processors and connection quotas.

Its structures, one module each: :class:`SocketServer` (here: the listeners' acceptors and the
processors, started and stopped together), acceptor.py, processor.py (with transport_layer.py:
its TLS handshakes and writes; selector.py: its poller), kafka_channel.py (one connection),
connection_quotas.py, endpoint.py; request_channel.py between processors and handlers.

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
- TLS (SSL, SASL_SSL): the processor drives the handshake from its selector, never blocking
  the loop, and sends file regions through ``ssl`` in chunks (``sendfile`` cannot go through
  TLS; PLAINTEXT keeps zero-copy): transport_layer.py.
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

import time
from collections.abc import Sequence

from broker_embedded.broker_config import BrokerConfig
from broker_embedded.server.acceptor import Acceptor, SocketBuffers
from broker_embedded.server.api_version_manager import ApiVersionManager
from broker_embedded.server.connection_quotas import ConnectionQuotas
from broker_embedded.server.endpoint import Endpoint
from broker_embedded.server.processor import Processor
from broker_embedded.server.request_channel import (
    MemoryPool,
    RequestChannel,
)
from broker_embedded.server.security.authentication_limiter import (
    AuthenticationLimiter,
    LimiterConfig,
)
from broker_embedded.server.security.listener_security import (
    ListenerSecurity,
)
from broker_embedded.server.security.scram_credentials import CredentialStore
from broker_embedded.server.security.security_config import (
    Listener,
    SecurityConfig,
    parse_listener,
)
from broker_embedded.server.security.ssl_context import server_context


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
                buffers = SocketBuffers(
                    config.socket_send_buffer_bytes, config.socket_receive_buffer_bytes
                )
                backlog = config.socket_listen_backlog_size
                self.acceptors.append(
                    Acceptor(security_of, self.processors, self.quotas, backlog, buffers)
                )
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
