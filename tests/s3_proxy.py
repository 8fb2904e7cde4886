"""A small real TCP proxy between an S3 client and the test S3 server that injects faults:
:class:`FaultProxy` (``with FaultProxy(upstream) as proxy``, ``proxy.endpoint``).

One HTTP request per client connection: the proxy reads the request (head, then a body of its
``Content-Length``), forwards it on a new connection to the server with ``Connection: close``,
reads the whole answer and passes it back, then closes; the client opens a new connection for its
next request (S3 clients do so on ``Connection: close``). Faults are queued
(:meth:`FaultProxy.inject`) and each one answers the next request whose line matches (holds
``matching``, starts with ``method``) instead:

- ``("status", 503)`` / ``("status", 500)``: an S3 error answer (``SlowDown`` /
  ``InternalError``) without asking the server;
- ``("cut", n)``: the server's answer, its head and only ``n`` bytes of its body, then the
  connection closed (a body cut short of its ``Content-Length``);
- ``("stall", 0)``: nothing at all until the proxy stops (the client's own timeout must end it);
- ``("trickle", n)``: the server's answer, its head at once, then its body ``n`` bytes every
  :data:`DRIP_INTERVAL_S` (faster than curl's low-speed limit of 1 byte/s: no socket timeout
  fires) until it is all sent or the proxy stops;
- ``("stall_body", n)``: the server's answer, its head and ``n`` bytes of its body, then
  nothing until the proxy stops (at most :data:`FOREVER_S`);
- ``("before", 0, action=f)``: ``f()`` first (say, a write straight to the server), then the
  request forwarded as it came.

:meth:`FaultProxy.stop` closes the listening socket (new connections refused: a server that is
gone); :meth:`FaultProxy.start` listens on the same port again (the server back). Every wait is
bounded (:data:`IO_TIMEOUT_S`). Thread safety: faults are queued under a lock.
"""

from __future__ import annotations

import socket
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

IO_TIMEOUT_S = 10.0
DRIP_INTERVAL_S = 0.1
FOREVER_S = 300.0  # a stall "forever": longer than any test waits; the proxy's stop ends it
_ERRORS = {503: ("Slow Down", "SlowDown"), 500: ("Internal Server Error", "InternalError")}


@dataclass(frozen=True)
class Fault:
    kind: str  # status, cut, stall, trickle, stall_body, before
    value: int
    matching: str  # a substring of the request line ("" any request)
    method: str = ""  # the request's method ("" any)
    action: Callable[[], None] | None = None  # run by a "before" fault


class FaultProxy:
    def __init__(self, upstream: str) -> None:
        host, _, port = upstream.removeprefix("http://").partition(":")
        self._upstream = (host, int(port))
        self._faults: deque[Fault] = deque()
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._listener: socket.socket | None = None
        self.port = 0
        self.requests: list[str] = []  # every request line seen, in order
        self.injected = 0  # faults answered

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def inject(
        self,
        kind: str,
        value: int = 0,
        *,
        times: int = 1,
        matching: str = "",
        method: str = "",
        action: Callable[[], None] | None = None,
    ) -> None:
        with self._lock:
            self._faults.extend(Fault(kind, value, matching, method, action) for _ in range(times))

    def start(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        self._listener = listener
        self._stopped.clear()
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def stop(self) -> None:
        self._stopped.set()
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()

    def __enter__(self) -> FaultProxy:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _fault_for(self, line: str) -> Fault | None:
        with self._lock:
            self.requests.append(line)
            for f in self._faults:
                if f.matching in line and line.startswith(f.method):
                    self._faults.remove(f)
                    self.injected += 1
                    return f
        return None

    def _serve(self, client: socket.socket) -> None:
        client.settimeout(IO_TIMEOUT_S)
        try:
            head, body = _read_request(client)
            line = head.split(b"\r\n", 1)[0].decode("latin-1")
            fault = self._fault_for(line)
            if fault is not None and fault.kind == "status":
                reason, code = _ERRORS[fault.value]
                xml = f"<Error><Code>{code}</Code><Message>{reason}</Message></Error>".encode()
                client.sendall(
                    f"HTTP/1.1 {fault.value} {reason}\r\nContent-Type: application/"
                    f"xml\r\nContent-Length: {len(xml)}\r\nConnection: close\r\n\r\n".encode()
                    + xml
                )
                return
            if fault is not None and fault.kind == "stall":
                self._stopped.wait(IO_TIMEOUT_S)
                return
            if fault is not None and fault.kind == "before" and fault.action is not None:
                fault.action()
            answer = self._forward(head, body)
            if fault is not None and fault.kind in ("trickle", "stall_body"):
                self._drip(client, answer, fault)
                return
            if fault is not None and fault.kind == "cut":
                end = answer.index(b"\r\n\r\n") + 4
                answer = answer[: end + fault.value]
            client.sendall(answer)
        except OSError:
            pass
        finally:
            client.close()

    def _drip(self, client: socket.socket, answer: bytes, fault: Fault) -> None:
        """``answer``'s head, then its body slowly (``trickle``) or a little of it and nothing
        more (``stall_body``), until the proxy stops."""
        end = answer.index(b"\r\n\r\n") + 4
        client.sendall(answer[:end])
        body = memoryview(answer)[end:]
        if fault.kind == "stall_body":
            client.sendall(body[: fault.value])
            self._stopped.wait(FOREVER_S)
            return
        while body and not self._stopped.wait(DRIP_INTERVAL_S):
            client.sendall(body[: fault.value])
            body = body[fault.value :]

    def _forward(self, head: bytes, body: bytes) -> bytes:
        lines = [h for h in head.split(b"\r\n") if not h.lower().startswith(b"connection:")]
        request = b"\r\n".join([*lines, b"Connection: close", b"", b""]) + body
        with socket.create_connection(self._upstream, timeout=IO_TIMEOUT_S) as up:
            up.sendall(request)
            chunks = []
            while chunk := up.recv(1 << 16):
                chunks.append(chunk)
        return b"".join(chunks)


def _read_request(sock: socket.socket) -> tuple[bytes, bytes]:
    """The request's head (without the blank line and any ``Expect``, answered here) and its
    body (``Content-Length`` bytes)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(1 << 16)
        if not chunk:
            raise ConnectionError("the client closed before a whole request")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    kept = []
    for h in head.split(b"\r\n"):
        name, _, value = h.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
        if name.strip().lower() == b"expect":  # 100-continue: answered here, not forwarded
            sock.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
            continue
        kept.append(h)
    head = b"\r\n".join(kept)
    chunked = b"transfer-encoding: chunked" in head.lower()
    while not (_chunked_end(body) if chunked else len(body) >= length):
        chunk = sock.recv(1 << 16)
        if not chunk:
            raise ConnectionError("the client closed inside a request body")
        body += chunk
    return head, body


def _chunked_end(body: bytes) -> bool:
    """Whether ``body`` holds a whole chunked body (its last chunk and trailers)."""
    at = 0
    while (eol := body.find(b"\r\n", at)) >= 0:
        size = int(body[at:eol].split(b";")[0], 16)
        if size == 0:
            return body.find(b"\r\n\r\n", eol) >= 0 or body.endswith(b"\r\n\r\n")
        at = eol + 2 + size + 2
    return False
