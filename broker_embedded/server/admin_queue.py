"""The admin queue: topic creation, growth and deletion off the request handler threads
(Kafka's controller event queue: a KRaft broker forwards CreateTopics, CreatePartitions and
DeleteTopics to its controller and answers when the controller is done, while its request
handlers keep serving everyone else).

A handler parks the request here (:meth:`AdminQueue.submit`) and returns at once; one thread
runs the parked requests in order and sends each response through the request channel. The
connection stays muted until then (one request per connection, as for any request), so a
client waits for its own answer and nobody else does.

Background work (:meth:`AdminQueue.set_background`): a CreateTopics or CreatePartitions is
answered once its topic is registered, and the partitions' logs are made afterwards by this
same thread, one step (``Controller.CREATE_STEP`` partitions) at a time, whenever no request
waits (requests first: a registration costs one write, a step about a hundred logs). The step
function says when it is due again (at once, later after a failure, or never: nothing waits);
each answered request makes it due at once (it may have registered partitions).

Limits and what happens at them:

- at most :data:`MAX_QUEUED_REQUESTS` requests wait (kafkalog's own bound; Kafka's queue has
  none but the deadline below): one more is answered at once, every topic of it
  REQUEST_TIMED_OUT (7) "the controller's queue is full", which admin clients retry;
- a request whose ``timeout_ms`` passes before its turn is answered REQUEST_TIMED_OUT for
  every topic without being run (Kafka's controller fails an event not started by its
  deadline: Kafka 3.9 answers ``timeout_ms`` 0 or negative so, creating nothing); a request
  already running finishes (a creation: one registration, a write and a sync);
- the partitions waiting for their logs are bounded by the controller
  (``Controller.MAX_PENDING_PARTITIONS``: beyond, THROTTLING_QUOTA_EXCEEDED, see
  handlers/create_topics.py);
- shutdown (:meth:`AdminQueue.stop`): requests still waiting have their connections closed
  without an answer: nothing unfinished is acknowledged. A step of background creation under
  way ends first (one step: well under a second); what waits stays registered, and the next
  opening of the log dir makes it. ``stop`` waits for the thread at most its timeout.

An exception from a request is answered as on a handler thread: a :class:`KafkaApiError` or
:class:`BrokerClosedError` closes the connection with one log line; anything else is logged
with its traceback, then the connection is closed.

Thread safety: :meth:`submit` from any handler thread; :meth:`stop` from the server's owner.
The queue's thread is started by the first submit or :meth:`AdminQueue.set_background`, and is
a daemon.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from broker_embedded.errors import BrokerClosedError, KafkaApiError, RequestTimedOutError
from broker_embedded.server.request_channel import Request

log = logging.getLogger(__name__)

MAX_QUEUED_REQUESTS = 100
STEP_RETRY_S = 1.0  # after a background step raised

Respond = Callable[[Request], Any]  # the request's response message
Refuse = Callable[[Request, KafkaApiError], Any]  # every topic of it failed with the error
Send = Callable[[Request, Any], None]
Close = Callable[[Request, str], None]
Step = Callable[[], float | None]  # seconds until due again; None: nothing to do


@dataclass(frozen=True, slots=True)
class _Parked:
    request: Request
    respond: Respond
    refuse: Refuse
    deadline: float  # time.monotonic()


class AdminQueue:
    """See the module docstring. ``send`` answers a request with a message, ``close`` closes
    its connection with a reason (the dispatcher's and the channel's)."""

    def __init__(self, send: Send, close: Close, max_queued: int = MAX_QUEUED_REQUESTS) -> None:
        if max_queued < 1:
            raise ValueError(f"the admin queue holds at least 1 request, not {max_queued}")
        self._send = send
        self._close = close
        self._max_queued = max_queued
        self._queue: collections.deque[_Parked] = collections.deque()
        self._cond = threading.Condition()
        self.stopping = threading.Event()  # seen by a creation under way between its steps
        self._thread: threading.Thread | None = None
        self._background: Step | None = None
        self._due: float | None = None  # time.monotonic() of the next background step
        self._running = False

    def set_background(self, step: Step) -> None:
        """Run ``step`` whenever no request waits and it is due (module docstring), the first
        time at once (what an opening left waiting is made while the server runs)."""
        with self._cond:
            self._background = step
            self._due = time.monotonic()
            self._start()
            self._cond.notify()

    def submit(self, request: Request, respond: Respond, refuse: Refuse, timeout_ms: int) -> None:
        """Park ``request``: ``respond(request)`` is sent when its turn comes (see the module
        docstring for a full queue, a deadline, a stop)."""
        parked = _Parked(request, respond, refuse, time.monotonic() + timeout_ms / 1000)
        with self._cond:
            if self.stopping.is_set():
                raise BrokerClosedError("the server is stopping")
            full = len(self._queue) >= self._max_queued
            if not full:
                self._queue.append(parked)
                self._start()
                self._cond.notify()
        if full:
            error = RequestTimedOutError(
                f"the controller's queue is full ({self._max_queued} requests wait); retry"
            )
            self._send(request, refuse(request, error))

    def queued(self) -> int:
        with self._cond:
            return len(self._queue)

    def idle(self) -> bool:
        """Whether nothing runs, waits or is due: no request, and no background step until the
        next request (the last one found nothing to do)."""
        with self._cond:
            return not self._running and not self._queue and self._due is None

    def running(self) -> bool:
        """Whether a request is being run now (taken from the queue, not answered yet)."""
        with self._cond:
            return self._running

    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="admin-queue", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self.stopping.is_set():
                    wait = self._until_due()
                    if wait is not None and wait <= 0:
                        break
                    self._cond.wait(wait)
                if self.stopping.is_set():
                    return
                parked = self._queue.popleft() if self._queue else None
                self._running = parked is not None
            if parked is None:
                self._step()
                continue
            self._answer(parked)
            with self._cond:
                self._running = False
                if self._background is not None:
                    self._due = time.monotonic()

    def _until_due(self) -> float | None:
        """Seconds until the background step is due (None: not at all)."""
        if self._background is None or self._due is None:
            return None
        return self._due - time.monotonic()

    def _step(self) -> None:
        assert self._background is not None
        try:
            after = self._background()
        except Exception:
            log.exception("a background step of the controller failed")
            after = STEP_RETRY_S
        with self._cond:
            self._due = None if after is None else time.monotonic() + after

    def _answer(self, parked: _Parked) -> None:
        request = parked.request
        header = request.header
        what = f"{header.api_name} v{header.api_version}"
        try:
            if time.monotonic() > parked.deadline:
                error = RequestTimedOutError(
                    f"{what} waited in the controller's queue past its timeout"
                )
                self._send(request, parked.refuse(request, error))
            else:
                self._send(request, parked.respond(request))
        except (KafkaApiError, BrokerClosedError) as e:
            self._close(request, f"{what} request failed: {e}")
        except Exception as e:
            log.exception(
                "handling %s request %d from %s failed", what, header.correlation_id, request.client
            )
            self._close(request, f"internal error: {e!r}")

    def stop(self, timeout: float) -> bool:
        """Stop within ``timeout`` (module docstring); True when the thread has ended."""
        with self._cond:
            self.stopping.set()
            dropped = list(self._queue)
            self._queue.clear()
            self._cond.notify_all()
            thread = self._thread
        for parked in dropped:
            self._close(parked.request, "the server stopped before the controller ran it")
        if thread is None:
            return True
        thread.join(timeout)
        if thread.is_alive():
            log.error("the admin queue's request still runs after %.1f s", timeout)
            return False
        return True
