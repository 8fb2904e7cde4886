"""Fixed-bucket latency histograms shared by the request metrics (server/request_metrics.py)
and the log flush timer (Kafka's ``LogFlushStats.LogFlushRateAndTimeMs``), with the quantiles
the metrics endpoint reports as Kafka's histogram MBeans do (50th .. 999th percentile).

Layout: ``BUCKETS`` counts per histogram, bucket ``i`` holding durations ``<=
BUCKET_BOUNDS_NS[i]`` (and above the previous bound), the last one everything above the last
bound; plus the sum (ns) and the count. Quantiles are interpolated linearly inside their bucket,
so they are exact to a bucket's width (a bucket spans a factor of 2 to 2.5).

:class:`LatencyHistogram` is the locked form for rare events (a flush); the request path keeps
its own lock-free lists of the same layout (one writer per processor).

Thread safety: :class:`LatencyHistogram` takes its lock in ``observe`` and ``snapshot``;
:func:`quantile` is pure.
"""

from __future__ import annotations

import bisect
import threading

MS = 1_000_000
# bucket upper bounds (ns): 50 µs .. 30 s, 1-2.5-5 per decade
BUCKET_BOUNDS_NS = tuple(
    int(ms * MS)
    for ms in (
        0.05,
        0.1,
        0.25,
        0.5,
        1,
        2.5,
        5,
        10,
        25,
        50,
        100,
        250,
        500,
        1000,
        2500,
        5000,
        10000,
        30000,
    )
)
BUCKETS = len(BUCKET_BOUNDS_NS) + 1  # the last one: above the last bound
# Kafka's histogram percentiles, as the JMX exporter labels them
QUANTILES = (
    ("0.50", 0.50),
    ("0.75", 0.75),
    ("0.95", 0.95),
    ("0.98", 0.98),
    ("0.99", 0.99),
    ("0.999", 0.999),
)


def bucket(took_ns: int) -> int:
    """The bucket of a duration."""
    return bisect.bisect_left(BUCKET_BOUNDS_NS, took_ns)


def quantile(buckets: list[int], offset: int, q: float) -> float:
    """The ``q`` quantile (ms) of the histogram at ``buckets[offset:offset + BUCKETS]`` (0 when
    empty; the last bound for the overflow bucket)."""
    counts = buckets[offset : offset + BUCKETS]
    total = sum(counts)
    if total == 0:
        return 0.0
    rank = q * total
    seen = 0
    for i, c in enumerate(counts):
        if c and seen + c >= rank:
            if i == len(BUCKET_BOUNDS_NS):
                break
            lower = BUCKET_BOUNDS_NS[i - 1] if i else 0
            return (lower + (BUCKET_BOUNDS_NS[i] - lower) * (rank - seen) / c) / MS
        seen += c
    return BUCKET_BOUNDS_NS[-1] / MS


class LatencyHistogram:
    """One histogram under a lock (module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._buckets = [0] * BUCKETS
        self._sum_ns = 0

    def observe(self, took_ns: int) -> None:
        took_ns = max(0, took_ns)
        with self._lock:
            self._buckets[bucket(took_ns)] += 1
            self._sum_ns += took_ns

    def snapshot(self) -> tuple[list[int], int]:
        """(bucket counts, sum in ns)."""
        with self._lock:
            return list(self._buckets), self._sum_ns
