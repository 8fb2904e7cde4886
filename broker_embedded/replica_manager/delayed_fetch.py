"""A fetch waiting in the purgatory for data (Kafka's ``DelayedFetch``).

Completes when, re-checked after an append or a high watermark move on one of its partitions:
the partitions together have at least ``min_bytes`` readable within their bounds (a consumer's
bound is the HW or LSO, so a HW move counts through the bytes it makes visible), any partition
now answers with an error (leadership moved, partition gone, offset out of range), or, for a
follower's fetch, the high watermark of any partition differs from ``start_hws`` (those seen
before the fetch's first read), so that the follower learns the move at once; or when
``max_wait_ms`` runs out. Its answer is a fresh read of every partition, whatever completed it.
A read that fails while checking completes it too (its answer then reads again and fails).
With ``ready`` (a follower's fetch of ``min_bytes`` 1: replica_manager.py) no read is made to
check: ``ready()`` answers from the offsets whether a read would return data or an error.

``lazy`` (the blocking path, ``ReplicaManager.fetch_messages``): completing it only wakes the
waiter, which reads in its own thread. The appender that completes a follower's fetch then
does not pay for the follower's read, and the read, made when the follower runs, takes every
batch appended until then.

``respond`` (optional, the Fetch API's non-blocking path): called exactly once with the answer,
or with the exception the answer's read raised, by whichever thread completes the operation (an
appender, the purgatory's reaper, or the submitter when it completes at once), so that no
request handler thread waits for the data.

Thread safety: the purgatory serializes ``try_complete``; ``read`` is the replica manager's
thread-safe read.
"""

from __future__ import annotations

from collections.abc import Callable

from broker_embedded.common.fetch_request import FetchRequest, FetchResponse
from broker_embedded.common.purgatory import DelayedOperation


class DelayedFetch(DelayedOperation):
    """See the module docstring. ``read(request)`` returns the response; ``high_watermarks()``
    the current high watermark per partition (-1 unknown). ``min_bytes`` defaults to the
    request's; ``start_hws`` to the high watermarks when the operation is created."""

    def __init__(
        self,
        request: FetchRequest,
        read: Callable[[FetchRequest], FetchResponse],
        high_watermarks: Callable[[], tuple[int, ...]],
        min_bytes: int | None = None,
        start_hws: tuple[int, ...] | None = None,
        respond: Callable[[FetchResponse | Exception], None] | None = None,
        ready: Callable[[], bool] | None = None,
        *,
        lazy: bool = False,
    ) -> None:
        super().__init__(request.max_wait_ms)
        self._ready = ready
        self._lazy = lazy
        self.request = request
        self.min_bytes = request.min_bytes if min_bytes is None else min_bytes
        self._read = read
        self._high_watermarks = high_watermarks
        self._start_hws = high_watermarks() if start_hws is None else start_hws
        self._respond = respond

    def try_complete(self) -> bool:
        if self.request.is_from_follower and self._high_watermarks() != self._start_hws:
            return self.force_complete()
        if self._ready is not None:
            return self._ready() and self.force_complete()
        try:
            probe = self._read(self.request)
        except Exception:
            return self.force_complete()  # the answer's read reports it
        if any(p.error is not None for p in probe.partitions):
            return self.force_complete()
        if probe.readable_bytes >= self.min_bytes:
            return self.force_complete()
        return False

    def on_complete(self) -> FetchResponse | None:
        if self._lazy:
            return None  # the waiter reads
        try:
            response = self._read(self.request)
        except Exception as e:
            if self._respond is not None:
                self._respond(e)
            raise
        if self._respond is not None:
            self._respond(response)
        return response
