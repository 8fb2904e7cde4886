"""Request latency split as Kafka's ``RequestMetrics`` splits it, and the network and handler
threads' idle time, kept without a lock and without an object per request.

Kafka's split of one request's life (all in nanoseconds of ``time.monotonic_ns``):

    received ─ RequestQueueTime ─ dequeued ─ LocalTime ─ local done ─ RemoteTime ─ response
    ─ ResponseQueueTime ─ response dequeued ─ ResponseSendTime ─ sent;  TotalTime = sent - received

- received: the processor read the whole frame (``Request.received_ns``);
- dequeued: a handler thread took it from the request queue;
- local done: the handler returned, or it answered before returning (then RemoteTime is 0);
- response: the response reached the request channel (``RequestChannel.send_response``): at
  once, or later from a delayed operation (a Produce acks=all or a Fetch waiting in the
  purgatory: that wait is RemoteTime, as Kafka's purgatory time is);
- response dequeued: the processor took the response from its queue;
- sent: its last byte was written.

:class:`RequestTimes` holds the stamps of the one request in flight on a connection (a
connection is muted until its response is written, so one object per connection is reused by
each of its requests; the processor resets it when it queues a request). A handler that returns
after its response was written (a response sent from another thread first) stamps nothing if the
connection's next request has started meanwhile: it checks that ``dequeued_ns`` is still the
stamp it wrote.

:class:`RequestMetrics` (one per processor, written by that processor's thread alone) adds the
six times of each finished request to per-API histograms (latency_histogram.py's buckets), the
sums, the count; and counts requests per API and version. A
request whose response closed the connection, or that was answered by the processor itself (the
SASL exchange), is not timed. Readers (the metrics endpoint) copy the lists; a copy taken while
the processor writes may be one request behind in some stage, never torn inside an int.

Idle time: :class:`IdleClock` accumulates the nanoseconds a thread spent waiting for work (a
processor in ``select``, a handler on the request queue); the endpoint turns two readings into
Kafka's idle ratios (``NetworkProcessorAvgIdlePercent``, ``RequestHandlerAvgIdlePercent``).

Limits: API keys up to :data:`MAX_API_KEY` and versions up to :data:`MAX_VERSION` (kept from
the ApiVersions table; anything else is not counted).
"""

from __future__ import annotations

import time
from bisect import bisect_left

from broker_embedded.latency_histogram import BUCKET_BOUNDS_NS, BUCKETS

STAGES = (
    "RequestQueueTimeMs",
    "LocalTimeMs",
    "RemoteTimeMs",
    "ResponseQueueTimeMs",
    "ResponseSendTimeMs",
    "TotalTimeMs",
)
MAX_API_KEY = 127
MAX_VERSION = 31


class RequestTimes:
    """The stamps of a connection's request in flight (module docstring)."""

    __slots__ = ("dequeued_ns", "local_done_ns", "response_ns")

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.dequeued_ns = 0
        self.local_done_ns = 0
        self.response_ns = 0

    def handler_returned(self, dequeued_ns: int) -> None:
        """The handler that stamped ``dequeued_ns`` returned: local done, unless the response
        was sent first or the connection's next request has started."""
        if self.local_done_ns == 0 and self.dequeued_ns == dequeued_ns:
            self.local_done_ns = time.monotonic_ns()

    def response_sent(self) -> None:
        """The response reached the request channel."""
        now = time.monotonic_ns()
        if self.local_done_ns == 0:
            self.local_done_ns = now
        self.response_ns = now


class ApiHistograms:
    """The six stage histograms of one API, and its requests per version."""

    __slots__ = ("buckets", "sums", "count", "versions")

    def __init__(self) -> None:
        self.buckets = [0] * (len(STAGES) * BUCKETS)  # stage i's bucket j at i * BUCKETS + j
        self.sums = [0] * len(STAGES)  # ns
        self.count = 0
        self.versions = [0] * (MAX_VERSION + 1)


class RequestMetrics:
    """One processor's request histograms by API key (module docstring)."""

    def __init__(self) -> None:
        self.apis: list[ApiHistograms | None] = [None] * (MAX_API_KEY + 1)

    def finished(
        self,
        api_key: int,
        version: int,
        received_ns: int,
        times: RequestTimes,
        response_dequeued_ns: int,
    ) -> None:
        """A request's response was written now; adds its six times."""
        if not (0 <= api_key <= MAX_API_KEY and times.response_ns and times.dequeued_ns):
            return
        api = self.apis[api_key]
        if api is None:
            api = self.apis[api_key] = ApiHistograms()
        end = time.monotonic_ns()
        api.count += 1
        if 0 <= version <= MAX_VERSION:
            api.versions[version] += 1
        buckets, sums = api.buckets, api.sums
        stage = 0
        prev = received_ns
        for stamp in (
            times.dequeued_ns,
            times.local_done_ns,
            times.response_ns,
            response_dequeued_ns,
            end,
        ):
            if stamp < prev:  # a stamp raced by a late handler: that stage took 0
                stamp = prev
            took = stamp - prev
            sums[stage] += took
            buckets[stage * BUCKETS + bisect_left(BUCKET_BOUNDS_NS, took)] += 1
            prev = stamp
            stage += 1
        took = prev - received_ns  # the total: the five stages add up to it
        sums[5] += took
        buckets[5 * BUCKETS + bisect_left(BUCKET_BOUNDS_NS, took)] += 1


class IdleClock:
    """Nanoseconds a thread spent waiting for work (written by that thread alone)."""

    __slots__ = ("idle_ns",)

    def __init__(self) -> None:
        self.idle_ns = 0


def merged(metrics: list[RequestMetrics]) -> dict[int, ApiHistograms]:
    """The processors' histograms added up, by API key (copies)."""
    out: dict[int, ApiHistograms] = {}
    for m in metrics:
        for key, api in enumerate(list(m.apis)):
            if api is None:
                continue
            total = out.get(key)
            if total is None:
                total = out[key] = ApiHistograms()
            total.count += api.count
            _add(total.buckets, api.buckets)
            _add(total.sums, api.sums)
            _add(total.versions, api.versions)
    return out


def _add(into: list[int], values: list[int]) -> None:
    for i, v in enumerate(list(values)):
        into[i] += v
