"""A limit on failed SASL authentications per principal and per client address: kafkalog's
own (Apache Kafka has none: it waits ``connection.failed.authentication.delay.ms`` after every
failure, whatever came before, and never refuses a right password).

Each failure counts against the principal it named (the PLAIN authcid, the SCRAM client-first's
user, known or not; none for a token that names no one) and against the client's address, in
windows of ``authentication.failure.window.ms`` that start at a key's first failure (a key whose
window has passed starts again at 0). With ``n`` the larger of the two counts after a failure:

- the failure's answer waits ``connection.failed.authentication.delay.ms`` x 2^(n-1), at most
  ``authentication.failure.max.delay.ms`` (the connection is muted meanwhile; the network thread
  moves on: socket_server.py holds the answer in its timer heap, nothing sleeps);
- at ``authentication.failure.limit.per.principal`` failures of the principal, or
  ``authentication.failure.limit.per.host`` of the address, that key is locked for
  ``authentication.lockout.ms``: every authentication naming the principal, or from the
  address, fails (a right password too) with "Authentication failed: too many failed
  authentications for <user|address> (locked for N more seconds)", after the longest delay, and
  does not count again (a locked-out user who retries does not extend the lockout). One
  WARNING line per lockout, naming the key, its failures and the last address;
- while the principal has failures in its window, a success as that principal waits as long
  as the next failure would (so a guesser cannot tell a right password by an early answer and
  cut every wrong guess short; the address's count is left out, so users behind one address
  as a guesser are not slowed); a success resets nothing (the counts expire with the window).

A limit of 0 turns that lockout off; both limits 0 and the max delay equal to the base delay
are Kafka's behaviour but for a success while its principal is guessed. The lockout trades a
denial of service to the locked principal (anyone can lock a known user name out) for the end
of online guessing: the per-address limit stops one guessing host first, the per-principal one
a guess spread over many hosts.

Limits of the limiter itself: at most :data:`MAX_TRACKED` keys (principals and addresses
together, the least recently failed forgotten first), so names made up by a guesser cost a
bounded amount of memory. Counters for the metrics: failures, refusals (answers to a locked
key) and lockouts since the start, and the keys locked now.

Thread-safe: one lock, held for O(1) work per call (the network threads call it).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from broker_embedded.server.security.security_config import SecurityConfig

log = logging.getLogger(__name__)

MAX_TRACKED = 65_536


@dataclass(frozen=True)
class LimiterConfig:
    """The limits (module docstring), in seconds."""

    base_delay_s: float = 0.1
    max_delay_s: float = 5.0
    window_s: float = 60.0
    lockout_s: float = 300.0
    per_principal: int = 10
    per_host: int = 100

    @classmethod
    def of(cls, config: SecurityConfig) -> LimiterConfig:
        """From the ``[security]`` keys (module docstring)."""
        return cls(
            config.connection_failed_authentication_delay_ms / 1000,
            config.authentication_failure_max_delay_ms / 1000,
            config.authentication_failure_window_ms / 1000,
            config.authentication_lockout_ms / 1000,
            config.authentication_failure_limit_per_principal,
            config.authentication_failure_limit_per_host,
        )


@dataclass(frozen=True)
class LimiterCounts:
    """The counters a metrics scrape reads."""

    failures: int
    refusals: int
    lockouts: int
    locked: int


@dataclass
class _Key:
    """One principal's or address's failures in its window, and its lockout."""

    failures: int
    window_end: float
    locked_until: float = 0.0


class AuthenticationLimitedError(Exception):
    """An authentication refused because its principal or address is locked out."""


class AuthenticationLimiter:
    """The failed-authentication limits of one server (module docstring)."""

    def __init__(self, config: LimiterConfig, clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self._clock = clock
        self._lock = threading.Lock()
        self._keys: OrderedDict[tuple[str, str], _Key] = OrderedDict()
        self._failures = self._refusals = self._lockouts = 0

    def admit(self, user: str, host: str) -> None:
        """:class:`AuthenticationLimitedError` when ``user`` or ``host`` is locked out."""
        now = self._clock()
        with self._lock:
            for kind, name in (("user", user), ("address", host)):
                key = self._keys.get((kind, name))
                if key is not None and key.locked_until > now:
                    self._refusals += 1
                    raise AuthenticationLimitedError(
                        f"Authentication failed: too many failed authentications for {kind} "
                        f"{name!r} (locked for {key.locked_until - now:.0f} more seconds)"
                    )

    def failed(self, user: str, host: str, refused: bool = False) -> float:
        """Count a failure of ``user`` (``""``: none named) from ``host``; the seconds its
        answer waits. ``refused``: an answer to a locked key, not counted again."""
        now = self._clock()
        c = self.config
        with self._lock:
            if refused:
                return c.max_delay_s
            self._failures += 1
            counts = [self._count(("address", host), c.per_host, now, user, host)]
            if user:
                counts.append(self._count(("user", user), c.per_principal, now, user, host))
            return self._delay(max(counts))

    def succeeded(self, user: str) -> float:
        """The seconds a success of ``user`` waits: as long as its next failure would, while it
        has failures in its window; else 0."""
        now = self._clock()
        with self._lock:
            key = self._keys.get(("user", user))
            if key is None or now >= key.window_end:
                return 0.0
            return self._delay(key.failures + 1)

    def counts(self) -> LimiterCounts:
        now = self._clock()
        with self._lock:
            locked = sum(1 for k in self._keys.values() if k.locked_until > now)
            return LimiterCounts(self._failures, self._refusals, self._lockouts, locked)

    # -- under the lock ----------------------------------------------------------------------------

    def _count(self, name: tuple[str, str], limit: int, now: float, user: str, host: str) -> int:
        key = self._keys.pop(name, None)
        if key is None or now >= key.window_end:
            key = _Key(0, now + self.config.window_s, key.locked_until if key else 0.0)
        key.failures += 1
        self._keys[name] = key  # the most recent failure last
        while len(self._keys) > MAX_TRACKED:
            self._keys.popitem(last=False)
        if limit and key.failures >= limit and key.locked_until <= now:
            key.locked_until = now + self.config.lockout_s
            self._lockouts += 1
            log.warning(
                "authentication: %s %r locked for %.0f s after %d failed authentications in "
                "%.0f s (the last as user %r from %s)",
                name[0],
                name[1],
                self.config.lockout_s,
                key.failures,
                self.config.window_s,
                user,
                host,
            )
        return key.failures

    def _delay(self, failures: int) -> float:
        c = self.config
        return min(c.max_delay_s, c.base_delay_s * 2.0 ** min(failures - 1, 62))
