"""The readiness poller of one network thread (the part of Kafka's ``Selector`` that waits):
:class:`Poller`, the processor's sockets in one epoll (``poll(2)`` where epoll is missing), and the
interest bits :data:`READ`, :data:`WRITE`, :data:`HANGUP` (a peer's close, watched alone for a
muted connection) and :data:`GONE` (hang-up or error reported). Thread safety: processor
thread only.
"""

from __future__ import annotations

import select
import socket
from typing import Any

if hasattr(select, "epoll"):  # Linux: epoll reports a peer's close (RDHUP) without read interest
    READ, WRITE, HANGUP = select.EPOLLIN, select.EPOLLOUT, select.EPOLLRDHUP
    GONE = select.EPOLLHUP | select.EPOLLERR
    _new_poll, _POLL_UNIT = select.epoll, 1.0
else:  # poll(2): a full close (HUP) is seen, a half close only where POLLRDHUP exists
    READ, WRITE, HANGUP = select.POLLIN, select.POLLOUT, getattr(select, "POLLRDHUP", 0)
    GONE = select.POLLHUP | select.POLLERR
    _new_poll, _POLL_UNIT = select.poll, 1000.0  # type: ignore[assignment]


class Poller:
    """The processor's sockets in one epoll (``poll`` elsewhere), each with its data: interest
    ``READ``, ``WRITE``, or ``HANGUP`` alone for a muted connection (only its close is
    watched). Processor thread only."""

    def __init__(self) -> None:
        self._poll = _new_poll()
        self._data: dict[int, Any] = {}

    def register(self, sock: socket.socket, events: int, data: Any) -> None:
        self._poll.register(sock.fileno(), events)
        self._data[sock.fileno()] = data

    def modify(self, sock: socket.socket, events: int, data: Any) -> None:
        self._poll.modify(sock.fileno(), events)
        self._data[sock.fileno()] = data

    def unregister(self, sock: socket.socket) -> None:
        self._poll.unregister(sock.fileno())
        del self._data[sock.fileno()]

    def select(self, timeout: float) -> list[tuple[Any, int]]:
        ready = self._poll.poll(timeout * _POLL_UNIT)
        return [(self._data[fd], events) for fd, events in ready if fd in self._data]

    def close(self) -> None:
        close = getattr(self._poll, "close", None)
        if close is not None:
            close()
