"""A PLAINTEXT listener's address (Kafka's ``EndPoint``): ``PLAINTEXT://host:port``, port 0 for
one the OS picks; :meth:`Endpoint.listener` is the same listener as a :class:`Listener` with its
security protocol. A frozen value: safe to share between threads.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker_embedded.server.security.security_config import (
    Listener,
    SecurityProtocol,
)


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A listener: ``PLAINTEXT://host:port`` (port 0: the OS picks one)."""

    host: str
    port: int

    @classmethod
    def parse(cls, listener: str) -> Endpoint:
        scheme, sep, rest = listener.partition("://")
        host, colon, port = rest.rpartition(":")
        if not sep or scheme.upper() != "PLAINTEXT" or not colon or not port.isdigit():
            raise ValueError(f"listener {listener!r} is not PLAINTEXT://host:port")
        return cls(host.strip("[]"), int(port))

    def listener(self) -> Listener:
        return Listener("PLAINTEXT", SecurityProtocol.PLAINTEXT, self.host, self.port)
