"""The request handler threads (Kafka's ``KafkaRequestHandler`` and its pool).

``num.io.threads`` threads take requests from the :class:`RequestChannel` and call the API
dispatcher, the seam between the network layer and the broker::

    class ApiDispatcher(Protocol):
        def handle(self, request: Request) -> None: ...

``handle`` must not wait for data: it answers at once with
``request_channel.send_response(...)``, or parks a delayed operation whose completion sends the
response later from whatever thread completes it. Every request gets exactly one response
(possibly an empty one, or a close of the connection): its connection stays muted until then.

A dispatcher that raises a :class:`KafkaApiError` (a client's mistake) costs that connection:
it is closed with one log line. Any other exception is a bug in the dispatcher: it is logged
with its traceback and the connection is closed; the handler thread goes on.

Metrics: each thread adds the time it waits on the request queue to its ``idle`` clock (two
clock reads per request; Kafka's ``RequestHandlerAvgIdlePercent``); a request carrying latency
stamps (``Request.times``, request metrics on) gets its dequeue and handler-return stamps here
(request_metrics.py).

Shutdown: :meth:`KafkaRequestHandlerPool.shutdown` wakes every thread with a sentinel and joins
them within its timeout; requests still queued then are failed by closing their connections.
Thread safety: the pool is driven by one owner thread; the handler threads share only the
channel and the dispatcher, which must be thread-safe.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Protocol

from broker_embedded.errors import BrokerClosedError, KafkaApiError
from broker_embedded.server.request_channel import Request, RequestChannel
from broker_embedded.server.request_metrics import IdleClock

log = logging.getLogger(__name__)

TAKE_TIMEOUT_S = 0.3
_handling = threading.local()


def current_listener() -> str | None:
    """The name of the listener whose request this thread is handling (None outside one): the
    handlers advertise the brokers' endpoints of that listener, as Kafka does."""
    return getattr(_handling, "listener", None)


class ApiDispatcher(Protocol):
    """Handles one request; sends its response through the request channel, now or later."""

    def handle(self, request: Request) -> None: ...


class KafkaRequestHandler(threading.Thread):
    """One handler thread."""

    def __init__(self, handler_id: int, channel: RequestChannel, dispatcher: ApiDispatcher) -> None:
        super().__init__(name=f"kafka-request-handler-{handler_id}", daemon=True)
        self._channel = channel
        self._dispatcher = dispatcher
        self.stopping = threading.Event()
        self.idle = IdleClock()  # time waiting on the request queue

    def run(self) -> None:
        idle = self.idle
        while not self.stopping.is_set():
            waited = time.monotonic_ns()
            request = self._channel.receive_request(TAKE_TIMEOUT_S)
            dequeued = time.monotonic_ns()
            idle.idle_ns += dequeued - waited
            if request is not None:
                times = request.times
                if times is None:
                    self._handle(request)
                else:
                    times.dequeued_ns = dequeued
                    self._handle(request)
                    times.handler_returned(dequeued)

    def _handle(self, request: Request) -> None:
        header = request.header
        _handling.listener = request.listener
        try:
            self._dispatcher.handle(request)
        except KafkaApiError as e:
            self._channel.close_connection(
                request, f"{header.api_name} v{header.api_version} request failed: {e}"
            )
        except BrokerClosedError as e:  # a broker stopped while its server drains
            self._channel.close_connection(
                request, f"{header.api_name} v{header.api_version}: the broker is stopped ({e})"
            )
        except Exception as e:
            log.exception(
                "handling %s v%d request %d from %s failed",
                header.api_name,
                header.api_version,
                header.correlation_id,
                request.client,
            )
            self._channel.close_connection(request, f"internal error: {e!r}")
        finally:
            _handling.listener = None


class KafkaRequestHandlerPool:
    """``num_threads`` handler threads over one channel and dispatcher."""

    def __init__(self, channel: RequestChannel, dispatcher: ApiDispatcher, num_threads: int):
        if num_threads < 1:
            raise ValueError(f"num.io.threads must be >= 1, not {num_threads}")
        self._channel = channel
        self.threads = [KafkaRequestHandler(i, channel, dispatcher) for i in range(num_threads)]

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def shutdown(self, timeout: float) -> bool:
        """Stop the threads within ``timeout``; True when all have ended. Requests left in the
        queue have their connections closed."""
        deadline = time.monotonic() + timeout
        for thread in self.threads:
            thread.stopping.set()
        self._channel.wake_receivers(len(self.threads))
        for thread in self.threads:
            if thread.is_alive():
                thread.join(max(0.0, deadline - time.monotonic()))
        for request in self._channel.drain_requests():
            self._channel.close_connection(request, "the server stopped before handling it")
        alive = [t.name for t in self.threads if t.is_alive()]
        if alive:
            log.error("request handler threads still busy after %.1f s: %s", timeout, alive)
        return not alive
