"""The accepting thread of one listener (Kafka's ``Acceptor``): accepts TCP connections, applies
the :class:`ConnectionQuotas` and hands each connection to a processor,
round-robin. Out of descriptors at accept (EMFILE/ENFILE): one error line per episode, retries
backing off over :data:`ACCEPT_BACKOFF_S`, one line when accepting works again; connections wait
in the listen backlog meanwhile. ``socket.send.buffer.bytes`` and ``socket.receive.buffer.bytes``
(:class:`SocketBuffers`, Kafka's 100 KiB each by default) size each connection's kernel buffers.
Thread safety: its own thread; :meth:`Acceptor.stop` and
:meth:`Acceptor.close` from the server's.
"""

from __future__ import annotations

import logging
import selectors
import socket
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from broker_embedded.server.connection_quotas import POLL_TIMEOUT_S, ConnectionQuotas
from broker_embedded.server.endpoint import Endpoint
from broker_embedded.server.processor import Processor
from broker_embedded.server.security.listener_security import (
    ListenerSecurity,
)

log = logging.getLogger(__name__)
ACCEPT_BACKOFF_S = (0.05, 1.0)  # out of descriptors, accept retries after 50 ms, doubling to 1 s


USE_OS_DEFAULT = -1  # a buffer size left to the OS (and its autotuning)


@dataclass(frozen=True)
class SocketBuffers:
    """``socket.send.buffer.bytes`` and ``socket.receive.buffer.bytes`` (-1: the OS's)."""

    send: int
    receive: int


def _listen_socket(host: str, port: int, backlog: int, receive_buffer: int) -> socket.socket:
    """A non-blocking listen socket; SO_RCVBUF is set before ``listen`` so that the accepted
    connections inherit it and the TCP window scale is chosen from it at the handshake."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:  # an IPv6 listener takes IPv6 only, as create_server
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        if receive_buffer != USE_OS_DEFAULT:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        sock.bind((host, port))
        sock.listen(backlog)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


class Acceptor(threading.Thread):
    """Accepts connections on one listener and hands them to the processors, round-robin."""

    def __init__(
        self,
        security: ListenerSecurity,
        processors: Sequence[Processor],
        quotas: ConnectionQuotas,
        backlog: int,
        buffers: SocketBuffers,
    ) -> None:
        listener = security.listener
        super().__init__(name=f"kafka-acceptor-{listener}", daemon=True)
        self._listen = _listen_socket(listener.host, listener.port, backlog, buffers.receive)
        self._send_buffer = buffers.send
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
            log.error(
                "accepting on %s:%d failed: %s; retrying every %.2f-%.0f s until it works "
                "(clients wait in the listen backlog)",
                host,
                port,
                error,
                *ACCEPT_BACKOFF_S,
            )
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
            log.warning(
                "accepting on %s:%d again after %.1f s",
                host,
                port,
                time.monotonic() - self._failing_since,
            )
            self._failing_since, self._backoff = None, ACCEPT_BACKOFF_S[0]
        refused = self._quotas.acquire(address[0], self._stopping)
        if refused is not None:
            log.warning("refused connection from %s:%d: %s", address[0], address[1], refused)
            sock.close()
            return
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        if self._send_buffer != USE_OS_DEFAULT:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self._send_buffer)
        processor = self._processors[self._next % len(self._processors)]
        self._next += 1
        processor.accept(sock, address[:2], self.security)
