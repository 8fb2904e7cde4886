"""Connection limits of the network layer (Kafka's ``ConnectionQuotas``): open connections per
client IP (``max.connections.per.ip``: a connection beyond it is refused at accept) and in all
(``max.connections``: the acceptor waits for a slot, looking at its stop flag every
:data:`POLL_TIMEOUT_S`). Invariant: the counts are those of the connections accepted and not yet
closed. Thread safety: shared by the acceptors and processors, under one condition's lock.
"""

from __future__ import annotations

import threading

POLL_TIMEOUT_S = 0.3


class ConnectionQuotas:
    """Open connections per client IP and in all; shared by acceptors and processors."""

    def __init__(self, max_connections: int, max_per_ip: int) -> None:
        self.max_connections = max_connections
        self.max_per_ip = max_per_ip
        self._per_ip: dict[str, int] = {}
        self._total = 0
        self._slot_free = threading.Condition()

    def acquire(self, ip: str, stopping: threading.Event) -> str | None:
        """Count a new connection from ``ip``, waiting while ``max.connections`` are open;
        returns why it must be refused instead (or "stopping")."""
        with self._slot_free:
            while self._total >= self.max_connections:
                if stopping.is_set():
                    return "the server is stopping"
                self._slot_free.wait(POLL_TIMEOUT_S)
            count = self._per_ip.get(ip, 0)
            if count >= self.max_per_ip:
                return f"{ip} already has max.connections.per.ip={self.max_per_ip} connections"
            self._per_ip[ip] = count + 1
            self._total += 1
            return None

    def release(self, ip: str) -> None:
        with self._slot_free:
            left = self._per_ip[ip] - 1
            if left:
                self._per_ip[ip] = left
            else:
                del self._per_ip[ip]
            self._total -= 1
            self._slot_free.notify()

    def count(self, ip: str | None = None) -> int:
        with self._slot_free:
            return self._total if ip is None else self._per_ip.get(ip, 0)
