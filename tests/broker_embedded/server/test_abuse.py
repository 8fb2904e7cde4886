"""Protocol abuse: each bad client costs its own connection (closed, one log line naming it),
while a well-behaved client keeps being answered and the server's memory stays bounded."""

from __future__ import annotations

import contextlib
import logging
import os
import resource
import socket
import struct
import threading
import time

import pytest

from ._net import API_VERSIONS_V3, RawClient, config, port, raw_frame, request_frame, serve

PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


class WellBehaved(threading.Thread):
    """A client calling ApiVersions on one connection every 5 ms until stopped (bounded)."""

    def __init__(self, server):
        super().__init__(daemon=True)
        self.client = RawClient(server)
        self.answers = 0
        self.failure: BaseException | None = None
        self.halt = threading.Event()

    def run(self):
        corr = 0
        try:
            while not self.halt.is_set() and corr < 20_000:
                corr += 1
                frame = self.client.call(API_VERSIONS_V3, corr)
                assert frame[:4] == struct.pack(">i", corr)
                self.answers += 1
                time.sleep(0.005)
        except BaseException as e:  # reported by stop()
            self.failure = e

    def stop(self) -> int:
        self.halt.set()
        self.join(10)
        self.client.close()
        assert self.failure is None, self.failure
        return self.answers


SERVED_WITHIN_S = 30.0  # the hang guard of every wait here (an answer, a log line, a count)


@contextlib.contextmanager
def guarded(cfg=None):
    """A server with a well-behaved client running throughout; asserts it was served."""
    with serve(cfg) as server:
        good = WellBehaved(server)
        good.start()
        yield server
        before = good.answers
        deadline = time.monotonic() + SERVED_WITHIN_S
        while good.answers == before:  # still served after the abuse
            assert time.monotonic() < deadline, f"no answer in {SERVED_WITHIN_S} s"
            time.sleep(0.01)
        assert good.stop() > 0


def closing_lines(caplog, client_port: int) -> list[str]:
    needle = f"127.0.0.1:{client_port}"
    return [
        r.getMessage()
        for r in caplog.records
        if needle in r.getMessage() and r.levelno >= logging.WARNING
    ]


def truncated_body() -> bytes:
    frame = request_frame(API_VERSIONS_V3, 1)
    body = frame[4:-3]
    return struct.pack(">i", len(body)) + body


ABUSES = {
    "garbage": (struct.pack(">i", 12) + b"\xde\xad\xbe\xef" * 3, "malformed request header"),
    "size 2^31-1": (struct.pack(">i", 2**31 - 1), "exceeds socket.request.max.bytes=104857600"),
    "negative size": (struct.pack(">i", -5), "invalid frame size -5"),
    "empty frame": (struct.pack(">i", 0), "malformed request header"),
    "truncated header": (struct.pack(">i", 6) + b"\x00\x12\x00\x03\x00\x00", "malformed"),
    "truncated body": (truncated_body(), "malformed ApiVersions v3 request"),
    "unknown api key": (raw_frame(9999, 0, 1, b"", v2=False), "api key 9999 (unknown)"),
    "disabled api": (raw_frame(3, 12, 1, b"", v2=True), "api key 3 (Metadata) version 12 is not"),
    "bad utf-8 client id": (
        struct.pack(">ihhih", 12, 18, 0, 1, 2) + b"\xff\xfe",
        "malformed request header",
    ),
}


@pytest.mark.parametrize("name", sorted(ABUSES))
def test_abuse_closes_only_that_connection(name, caplog):
    data, reason = ABUSES[name]
    with guarded() as server:
        with RawClient(server) as bad:
            bad.send(data)
            assert bad.closed_by_server()
            lines = closing_lines(caplog, bad.sock.getsockname()[1])
    assert len(lines) == 1, lines
    assert reason in lines[0]


def test_disconnect_mid_request(caplog):
    with guarded() as server:
        bad = RawClient(server)
        frame = request_frame(API_VERSIONS_V3, 1)
        bad.send(frame[:-5])
        client_port = bad.sock.getsockname()[1]
        bad.close()
        deadline = time.monotonic() + SERVED_WITHIN_S
        while not closing_lines(caplog, client_port):
            assert time.monotonic() < deadline
            time.sleep(0.01)
    (line,) = closing_lines(caplog, client_port)
    assert f"disconnected mid-request after {len(frame) - 9} of {len(frame) - 4} bytes" in line


def reset(sock) -> None:
    """Close with a TCP reset (SO_LINGER 0), as a client that is killed or aborts does."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def test_a_reset_between_requests_is_not_a_problem_but_one_mid_request_is(caplog):
    """librdkafka's admin clients reset their connections when they close: between requests
    that is a client going away (no line, as for a clean close); mid-request it is a line."""
    with guarded() as server:
        idle, busy = RawClient(server), RawClient(server)
        assert idle.call(API_VERSIONS_V3)  # answered: the next reset falls between requests
        busy.send(request_frame(API_VERSIONS_V3, 1)[:-5])
        ports = idle.sock.getsockname()[1], busy.sock.getsockname()[1]
        reset(idle.sock)
        reset(busy.sock)
        deadline = time.monotonic() + SERVED_WITHIN_S
        while not closing_lines(caplog, ports[1]):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        time.sleep(0.2)  # the idle connection's reset has been read by now
        assert closing_lines(caplog, ports[0]) == []
        (line,) = closing_lines(caplog, ports[1])
    assert "read failed: [Errno 104] Connection reset by peer" in line


def test_oversized_frame_with_a_small_limit(caplog):
    with guarded(config(socket_request_max_bytes=1000)) as server:
        with RawClient(server) as bad:
            with contextlib.suppress(ConnectionError):
                bad.send(struct.pack(">i", 1001) + b"\0" * 1001)
            assert bad.closed_by_server()
            (line,) = closing_lines(caplog, bad.sock.getsockname()[1])
        with RawClient(server) as fine:  # a 1000-byte request is within the limit
            fine.send(raw_frame(18, 0, 1, b"\0" * (1000 - 13), v2=False))
            # bytes after the body are ignored, as Kafka ignores them: it is answered
            assert struct.unpack(">i", fine.recv_exact(8)[4:])[0] == 1  # correlation id
            assert not closing_lines(caplog, fine.sock.getsockname()[1])
    assert "frame of 1001 bytes exceeds socket.request.max.bytes=1000" in line


def test_claimed_sizes_do_not_allocate_memory():
    """200 connections each claim a 100 MB frame and send 10 bytes of it: the server holds only
    what arrived (a frame buffer starts at 64 KiB), not 20 GB."""
    with guarded() as server:
        before = rss_bytes()
        clients = [RawClient(server) for _ in range(200)]
        for client in clients:
            client.send(struct.pack(">i", 100_000_000) + b"\0" * 10)
        deadline = time.monotonic() + SERVED_WITHIN_S
        while server.socket_server.connection_count() < 201:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        time.sleep(0.3)
        grown = rss_bytes() - before
        for client in clients:
            client.close()
    assert grown < 64 << 20, grown


def test_thousand_idle_connections():
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 2 * 1000 + 200:
        pytest.skip(f"ulimit -n is {soft}; 1,000 idle connections need about 2,200 descriptors")
    with guarded() as server:
        before = rss_bytes()
        clients = []
        for _ in range(1000):
            s = socket.create_connection(("127.0.0.1", port(server)), timeout=10)
            clients.append(s)
        deadline = time.monotonic() + SERVED_WITHIN_S
        while server.socket_server.connection_count() < 1001:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        with RawClient(server) as late:  # a newcomer is served with 1,000 idle connections open
            assert late.call(API_VERSIONS_V3, 5)[:4] == struct.pack(">i", 5)
        grown = rss_bytes() - before
        for s in clients:
            s.close()
        deadline = time.monotonic() + SERVED_WITHIN_S
        while server.socket_server.connection_count() > 1:
            assert time.monotonic() < deadline
            time.sleep(0.01)
    assert grown < 64 << 20, grown


def test_max_connections_per_ip(caplog):
    with guarded(config(max_connections_per_ip=4)) as server:  # the guard holds one
        held = [RawClient(server) for _ in range(3)]
        for client in held:
            assert client.call(API_VERSIONS_V3)
        with RawClient(server) as refused:
            assert refused.closed_by_server()
            refused_port = refused.sock.getsockname()[1]
        held.pop().close()
        deadline = time.monotonic() + SERVED_WITHIN_S
        while server.socket_server.connection_count() > 3:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        with RawClient(server) as again:
            assert again.call(API_VERSIONS_V3)
        for client in held:
            client.close()
    lines = [r.getMessage() for r in caplog.records if "refused connection" in r.getMessage()]
    assert len(lines) == 1
    assert f"127.0.0.1:{refused_port}" in lines[0]
    assert "max.connections.per.ip=4" in lines[0]


def test_max_connections_waits_for_a_free_slot():
    """At max.connections the acceptor waits (Kafka's behaviour): the newcomer is answered once
    another connection closes."""
    with guarded(config(max_connections=2)) as server:
        held = RawClient(server)
        assert held.call(API_VERSIONS_V3)
        waiting = RawClient(server)  # TCP completes in the backlog; not accepted yet
        waiting.send(request_frame(API_VERSIONS_V3, 3))
        waiting.sock.settimeout(0.5)
        with pytest.raises(TimeoutError):
            waiting.recv_frame()
        held.close()
        waiting.sock.settimeout(10)
        assert waiting.recv_frame()[:4] == struct.pack(">i", 3)
        waiting.close()


def test_idle_connections_are_closed(caplog):
    # 1 s: the busy client's gaps (a 50 ms pause and a call) stay under it at load 16, where
    # 300 ms closed the busy connection too
    with serve(config(connections_max_idle_ms=1000)) as server:
        with RawClient(server) as idle, RawClient(server) as busy:
            assert idle.call(API_VERSIONS_V3)
            deadline = time.monotonic() + 3
            while time.monotonic() < deadline:
                assert busy.call(API_VERSIONS_V3)
                time.sleep(0.05)
            assert idle.closed_by_server()
            assert busy.call(API_VERSIONS_V3)
            (line,) = closing_lines(caplog, idle.sock.getsockname()[1])
    assert "idle for more than connections.max.idle.ms=1000" in line


def test_a_parser_bug_costs_only_that_connection(caplog, monkeypatch):
    """An unexpected exception while parsing (a bug, injected here into the body parser for
    client id "buggy") closes that connection with the traceback logged once; the network
    thread lives on and serves the well-behaved client and the next connection."""
    from broker_embedded.server import processor

    real = processor.parse_body

    def buggy(header, frame, offset):
        if header.client_id == "buggy":
            raise RuntimeError("injected parser bug")
        return real(header, frame, offset)

    monkeypatch.setattr(processor, "parse_body", buggy)
    with guarded(config(num_network_threads=1)) as server:
        with RawClient(server) as bad:
            bad.send(request_frame(API_VERSIONS_V3, 1, client_id="buggy"))
            assert bad.closed_by_server()
            lines = closing_lines(caplog, bad.sock.getsockname()[1])
        with RawClient(server) as after:  # the same (only) network thread
            assert after.call(API_VERSIONS_V3, 2)[:4] == struct.pack(">i", 2)
    assert any("unparsable request: RuntimeError('injected parser bug')" in x for x in lines)
    assert [r.exc_info[0] for r in caplog.records if r.exc_info] == [RuntimeError]
