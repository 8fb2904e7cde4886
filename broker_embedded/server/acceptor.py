"""The accepting thread of one listener (Kafka's ``Acceptor``): accepts TCP connections, applies
the :class:`ConnectionQuotas` and hands each connection to a processor,
round-robin. Out of descriptors at accept (EMFILE/ENFILE): one error line per episode, retries
backing off over :data:`ACCEPT_BACKOFF_S`, one line when accepting works again; connections wait
in the listen backlog meanwhile. Thread safety: its own thread; :meth:`Acceptor.stop` and
:meth:`Acceptor.close` from the server's.
"""

from __future__ import annotations

import logging
import selectors
import socket
import threading
import time
from collections.abc import Sequence

from broker_embedded.server.connection_quotas import POLL_TIMEOUT_S, ConnectionQuotas
from broker_embedded.server.endpoint import Endpoint
from broker_embedded.server.processor import Processor
from broker_embedded.server.security.listener_security import (
    ListenerSecurity,
)

log = logging.getLogger(__name__)
ACCEPT_BACKOFF_S = (0.05, 1.0)  # out of descriptors, accept retries after 50 ms, doubling to 1 s


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
