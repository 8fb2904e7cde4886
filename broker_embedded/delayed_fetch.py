"""A fetch waiting in the purgatory for data (Kafka's ``DelayedFetch``).

Completes when, re-checked after an append or a high watermark move on one of its partitions:
the partitions together have at least ``min_bytes`` readable within their bounds, any partition
now answers with an error (leadership moved, partition gone, offset out of range), or the high
watermark of any partition differs from when the fetch started (so a follower learns it); or when
``max_wait_ms`` runs out. Its answer is a fresh read of every partition, whatever completed it.

Thread safety: the purgatory serializes ``try_complete``; ``read`` is the replica manager's
thread-safe read.
"""

from __future__ import annotations

from collections.abc import Callable

from broker_embedded.fetch_request import FetchRequest, FetchResponse
from broker_embedded.purgatory import DelayedOperation


class DelayedFetch(DelayedOperation):
    """See the module docstring. ``read(request, min_one_message_budget_only)`` returns the
    response; ``high_watermarks()`` the current high watermark per partition (-1 unknown)."""

    def __init__(
        self,
        request: FetchRequest,
        read: Callable[[FetchRequest], FetchResponse],
        high_watermarks: Callable[[], tuple[int, ...]],
    ) -> None:
        super().__init__(request.max_wait_ms)
        self.request = request
        self._read = read
        self._high_watermarks = high_watermarks
        self._start_hws = high_watermarks()

    def try_complete(self) -> bool:
        if self._high_watermarks() != self._start_hws:
            return self.force_complete()
        probe = self._read(self.request)
        if any(p.error is not None for p in probe.partitions):
            return self.force_complete()
        if probe.size_in_bytes >= self.request.min_bytes:
            return self.force_complete()
        return False

    def on_complete(self) -> FetchResponse:
        return self._read(self.request)
