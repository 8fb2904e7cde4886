"""The request channel between the network threads and the request handler threads (Kafka's
``RequestChannel``), and the values that travel through it.

Shape:

    processors --put--> one bounded request queue (queued.max.requests) --take--> handlers
    handlers / delayed operations --send_response--> response queue of the request's processor
                                                      + a wakeup of that processor's selector

- The request queue is bounded by ``queued.max.requests``. When it is full a processor blocks
  in :meth:`RequestChannel.send_request` (retrying in short steps while the server runs), so it
  reads no new frames from any of its connections: back-pressure, never a dropped request.
- Each processor has its own response queue (a deque, appends and pops are atomic) and a wakeup
  callback that interrupts its selector. A response may be sent from any thread, at once by a
  handler or later by a delayed operation's completion; it goes to the processor that read
  the request (``Request.processor``).
- A response for a processor that has stopped is dropped and its ``on_done`` called.
- Abandoned waits: a handler whose answer waits (a long-poll Fetch in the purgatory) registers
  the waiting operation with :meth:`RequestChannel.watch_close`. When the processor sees the
  client close that connection (:meth:`RequestChannel.connection_closed`) the operation is
  abandoned with ``drop=True`` (nowhere to answer: it leaves the purgatory without a read); when
  the client half-closes with more requests behind it (:meth:`RequestChannel.complete_waiting`)
  it is completed at once (``drop=False``), so the requests behind it are read. A connection's
  registrations are cleared by its next response; at most one request per connection is in
  flight, so they stay few.

Budgets (:class:`MemoryPool`, Kafka's ``SimpleMemoryPool``): ``queued.max.request.bytes`` for the
bytes of request frames being read and handled, ``queued.max.response.bytes`` for response bytes
copied into memory and not yet sent (see socket_server.py and handlers/region_pins.py).

A :class:`Response` is a list of parts written to the socket in order: byte buffers and
:class:`FileRegion` s that the processor writes with ``os.sendfile`` (zero-copy: the bytes go
from the page cache to the socket and never into Python memory). The parts together are one
whole frame, size prefix included. A response with no parts (Kafka's NoOpResponse, e.g. a
Produce with acks=0) only unmutes the connection. ``on_done`` runs exactly once, on the
processor thread, when the response is written, dropped, or its connection closed: the hook
to release what its file regions read (a segment's reference).

With request metrics on, a request carries its connection's :class:`RequestTimes`, and
:meth:`RequestChannel.send_response` stamps the moment its response arrives (Kafka's end of the
local or remote time).

Thread safety: :class:`Request`, :class:`FileRegion` and :class:`Response` are immutable (a
request's ``times`` is the connection's mutable stamps, see request_metrics.py);
:class:`RequestChannel` may be used from any thread.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from broker_embedded.server.protocol import RequestHeader
from broker_embedded.server.request_metrics import RequestTimes
from broker_embedded.server.security.kafka_principal import ANONYMOUS, KafkaPrincipal

log = logging.getLogger(__name__)

_PUT_STEP_S = 0.1


@dataclass(frozen=True, slots=True)
class Request:
    """One request read by a processor: where it came from, its header and decoded body.

    ``body`` is kio's request message, or None for an ApiVersions request of a version this
    broker does not know (answered with the v0 fallback). ``principal`` (``User:alice``) and
    ``listener`` are what an authorizer and the advertised endpoints need. ``connection_id`` is
    Kafka's "localHost:localPort-remoteHost:remotePort-index", unique while the server runs.
    """

    processor: int
    connection_id: str
    client_address: tuple[str, int]
    header: RequestHeader
    body: Any
    size: int  # the frame's bytes (after its size prefix)
    received_ns: int  # time.monotonic_ns() when the frame was complete
    listener: str = "PLAINTEXT"  # the name of the listener it came in on
    principal: KafkaPrincipal = ANONYMOUS  # who the connection authenticated as
    # the connection's latency stamps, with request metrics on (request_metrics.py)
    times: RequestTimes | None = field(default=None, compare=False)

    @property
    def client(self) -> str:
        """Who sent it, for log lines: address and client id."""
        host, port = self.client_address
        return f"{host}:{port} (client id {self.header.client_id!r})"


@dataclass(frozen=True, slots=True)
class FileRegion:
    """``length`` bytes of a file from ``position``, sent with ``os.sendfile``.

    Either ``path`` (the processor opens it when it reaches this region, and again after each
    wait for the socket: a slow reader holds no descriptor while it does not read) or ``fd``
    (an open descriptor the sender keeps open until the response's ``on_done``). With
    ``file_id`` (``(st_dev, st_ino)``) each open of ``path`` checks it is still that file. The
    file must hold the whole region when it is sent; a shorter or replaced file closes the
    connection, since the frame's size has already gone out.
    """

    position: int
    length: int
    path: str | None = None
    fd: int | None = None
    file_id: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        if (self.path is None) == (self.fd is None):
            raise ValueError("a FileRegion names exactly one of path and fd")
        if self.position < 0 or self.length < 0:
            raise ValueError(f"bad file region position {self.position} length {self.length}")

    @property
    def name(self) -> str:
        return self.path if self.path is not None else f"fd {self.fd}"


Part = bytes | bytearray | memoryview | FileRegion


def parts_size(parts: Sequence[Part]) -> int:
    """The bytes a sequence of parts puts on the wire."""
    return sum(p.length if isinstance(p, FileRegion) else len(p) for p in parts)


@dataclass(frozen=True, slots=True)
class Response:
    """A response frame in parts (see the module docstring), for ``request``'s connection."""

    request: Request
    parts: tuple[Part, ...] = ()
    close_connection: bool = False  # close after the parts are written (or at once if none)
    close_reason: str = ""
    on_done: Callable[[], None] | None = field(default=None, compare=False)

    @property
    def size(self) -> int:
        return parts_size(self.parts)

    def done(self) -> None:
        """Run ``on_done``; an error in it is logged, never raised into the processor."""
        if self.on_done is not None:
            try:
                self.on_done()
            except Exception:
                log.exception("on_done of a %s response failed", self.request.header.api_name)


class Abandonable(Protocol):
    """An operation waiting to answer a request (a delayed fetch)."""

    def abandon(self, drop: bool) -> None:
        """Its client is gone (``drop``: complete it without answering) or half-closed with more
        requests behind it (complete it now)."""


class MemoryPool:
    """A budget of bytes shared by threads (Kafka's ``SimpleMemoryPool``): :meth:`try_reserve`
    takes bytes from it, :meth:`release` gives them back and calls the listeners (processors'
    wakeups) when a reservation had been refused. Non-strict reservations (Kafka's default for
    requests) succeed while any byte is left, so one reservation may exceed what is left and
    at most ``capacity`` plus one reservation is taken; strict ones need the whole size.
    Thread-safe (one lock)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._available = capacity
        self._lock = threading.Lock()
        self._starved = False
        self._listeners: list[Callable[[], None]] = []

    def add_listener(self, listener: Callable[[], None]) -> None:
        self._listeners.append(listener)

    @property
    def available(self) -> int:
        return self._available

    def try_reserve(self, size: int, strict: bool = False) -> bool:
        with self._lock:
            if self._available >= size if strict else self._available > 0:
                self._available -= size
                return True
            self._starved = True
            return False

    def release(self, size: int) -> None:
        if not size:
            return
        with self._lock:
            self._available += size
            wake, self._starved = self._starved, False
        if wake:
            for listener in self._listeners:
                listener()


class RequestChannel:
    """One bounded request queue and one response queue per processor."""

    def __init__(self, queued_max_requests: int) -> None:
        if queued_max_requests < 1:
            raise ValueError(f"queued.max.requests must be >= 1, not {queued_max_requests}")
        self._requests: queue.Queue[Request | None] = queue.Queue(queued_max_requests)
        self._responses: dict[int, deque[Response]] = {}
        self._wakeups: dict[int, Callable[[], None]] = {}
        self._lock = threading.Lock()  # guards the maps against a concurrent removal
        # open connections: the operations waiting to answer them (watch_close)
        self._waiting: dict[str, list[Abandonable]] = {}
        self._half_closed: set[str] = set()  # open connections whose client half-closed

    def add_processor(self, processor: int, wakeup: Callable[[], None]) -> deque[Response]:
        """Register a processor; returns the response queue it drains."""
        responses: deque[Response] = deque()
        with self._lock:
            self._responses[processor] = responses
            self._wakeups[processor] = wakeup
        return responses

    def remove_processor(self, processor: int) -> None:
        """A stopped processor: responses sent to it from now on are dropped."""
        with self._lock:
            self._wakeups.pop(processor, None)
            left = self._responses.pop(processor, deque())
        while left:
            left.popleft().done()

    def connection_opened(self, connection_id: str) -> None:
        with self._lock:
            self._waiting[connection_id] = []

    def watch_close(self, request: Request, operation: Abandonable) -> None:
        """Abandon ``operation`` when the request's connection closes before it answers (at
        once if it has already closed or half-closed); see the module docstring."""
        with self._lock:
            waiting = self._waiting.get(request.connection_id)
            half_closed = request.connection_id in self._half_closed
            if waiting is not None and not half_closed:
                waiting.append(operation)
                return
        operation.abandon(drop=waiting is None)

    def connection_closed(self, connection_id: str) -> None:
        """The processor closed a connection: drop the operations waiting to answer it."""
        with self._lock:
            waiting = self._waiting.pop(connection_id, ())
            self._half_closed.discard(connection_id)
        for operation in waiting:
            operation.abandon(drop=True)

    def complete_waiting(self, connection_id: str) -> None:
        """The client half-closed with requests behind the waiting one: answer it now."""
        with self._lock:
            waiting = self._waiting.get(connection_id)
            if waiting is None:
                return
            self._half_closed.add(connection_id)
            self._waiting[connection_id] = []
        for operation in waiting:
            operation.abandon(drop=False)

    def send_request(self, request: Request, running: Callable[[], bool]) -> bool:
        """Queue a request, blocking while the queue is full and ``running()``; False if the
        server stopped before it could be queued."""
        while True:
            try:
                self._requests.put(request, timeout=_PUT_STEP_S)
                return True
            except queue.Full:
                if not running():
                    return False

    def receive_request(self, timeout: float) -> Request | None:
        """The next request, or None after ``timeout`` seconds or for a stop sentinel."""
        try:
            return self._requests.get(timeout=timeout)
        except queue.Empty:
            return None

    def wake_receivers(self, count: int) -> None:
        """Put ``count`` stop sentinels (None) for handler threads, without blocking."""
        for _ in range(count):
            try:
                self._requests.put_nowait(None)
            except queue.Full:
                return  # handlers also poll their stop flag

    def drain_requests(self) -> list[Request]:
        """Take every queued request (at shutdown, to fail them)."""
        taken = []
        while True:
            try:
                request = self._requests.get_nowait()
            except queue.Empty:
                return taken
            if request is not None:
                taken.append(request)

    def send_response(self, response: Response) -> None:
        """Hand a response to the processor that read its request (any thread, any time)."""
        processor = response.request.processor
        times = response.request.times
        if times is not None:
            times.response_sent()
        with self._lock:
            responses = self._responses.get(processor)
            wakeup = self._wakeups.get(processor)
            if responses is not None:
                responses.append(response)
            waiting = self._waiting.get(response.request.connection_id)
            if waiting:
                waiting.clear()  # answered: nothing of it waits any more
        if responses is None or wakeup is None:
            response.done()  # that processor has stopped: the connection is gone
            return
        wakeup()

    def send_parts(self, request: Request, parts: Sequence[Part]) -> None:
        """Shorthand: a response of these parts."""
        self.send_response(Response(request, tuple(parts)))

    def close_connection(self, request: Request, reason: str) -> None:
        """Close the request's connection (after logging ``reason``) instead of answering."""
        self.send_response(Response(request, close_connection=True, close_reason=reason))

    def queued_requests(self) -> int:
        return self._requests.qsize()

    def queued_responses(self) -> int:
        """Responses waiting in the processors' queues (a snapshot)."""
        with self._lock:
            queues = list(self._responses.values())
        return sum(len(q) for q in queues)
