"""Tiered storage's byte-rate quotas (Kafka's ``RLMQuotaManager``, KIP-956): one for copying
segments to the store (``remote.log.manager.copy.max.bytes.per.second``) and one for reading
them back for consumers (``remote.log.manager.fetch.max.bytes.per.second``), each over the whole
broker.

The rate is Kafka's ``SimpleRate`` over a ring of ``num_samples`` samples of ``window_s``
seconds each: the bytes recorded in the samples not older than ``num_samples * window_s``,
divided by the time since the oldest of them began (at least one window, so a first burst is
not an infinite rate). While that rate exceeds the quota, :meth:`RLMQuotaManager.throttle_time_ms`
is how long it takes to fall back to it (Kafka's ``QuotaUtils.throttleTime``: the excess over
the quota, as a fraction of the quota, times the rate's window). The copier waits that long
(at most a second at a time) before its next segment; a consumer's fetch that would read the
store is answered without records meanwhile (no error: the consumer fetches again).

The default, ``Long.MAX_VALUE`` bytes a second, never throttles. Thread-safe: one lock guards
the samples (the copier's thread records, the request threads and the reader pool read and
record).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

LONG_MAX = (1 << 63) - 1
DEFAULT_NUM_SAMPLES = 11  # Kafka's remote.log.manager.{copy,fetch}.quota.window.num
DEFAULT_WINDOW_S = 1  # Kafka's remote.log.manager.{copy,fetch}.quota.window.size.seconds


@dataclass(frozen=True, slots=True)
class RLMQuotaManagerConfig:
    """A quota in bytes a second and the samples its rate is measured over."""

    quota_bytes_per_second: int = LONG_MAX
    num_samples: int = DEFAULT_NUM_SAMPLES
    window_s: int = DEFAULT_WINDOW_S

    @property
    def unlimited(self) -> bool:
        return self.quota_bytes_per_second >= LONG_MAX


class RLMQuotaManager:
    """A byte-rate quota: :meth:`record` the bytes moved, :meth:`throttle_time_ms` how long to
    hold off. ``clock_ms`` is a monotonic clock in milliseconds (tests give their own)."""

    def __init__(
        self, config: RLMQuotaManagerConfig, clock_ms: Callable[[], float] | None = None
    ) -> None:
        self.config = config
        self._clock = clock_ms or (lambda: time.monotonic() * 1000.0)
        self._window_ms = config.window_s * 1000.0
        # [start ms, bytes] per sample, the current one last; at most num_samples
        self._samples: list[list[float]] = []
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"RLMQuotaManager({self.config.quota_bytes_per_second} bytes/s)"

    def record(self, size: int) -> None:
        if self.config.unlimited:
            return
        now = self._clock()
        with self._lock:
            self._purge(now)
            if not self._samples or now - self._samples[-1][0] >= self._window_ms:
                if len(self._samples) == self.config.num_samples:
                    self._samples.pop(0)
                self._samples.append([now, 0.0])
            self._samples[-1][1] += size

    def throttle_time_ms(self) -> int:
        """0 while the measured rate is within the quota; otherwise the milliseconds until it
        is back at the quota if nothing more is recorded."""
        if self.config.unlimited:
            return 0
        now = self._clock()
        with self._lock:
            self._purge(now)
            if not self._samples:
                return 0
            window = max(now - self._samples[0][0], self._window_ms)
            rate = sum(s[1] for s in self._samples) / (window / 1000.0)
        bound = self.config.quota_bytes_per_second
        return 0 if rate <= bound else round((rate - bound) / bound * window)

    def _purge(self, now: float) -> None:
        """Drop the samples that began ``num_samples`` windows ago or earlier."""
        expire = self.config.num_samples * self._window_ms
        while self._samples and now - self._samples[0][0] >= expire:
            self._samples.pop(0)
