"""Clients that abandon long polls, exhaust descriptors, never read, or send half a frame: the
server releases what they held and keeps answering everyone else, within its budgets.

- A client that closes while its Fetch waits in the purgatory: its connection is closed at once
  and its delayed fetch dropped, so neither descriptors nor purgatory slots pile up, and a
  normal long poll still waits.
- Out of descriptors at accept (EMFILE): one log line, a back-off, and service again as soon as
  descriptors are free; ``max.connections`` defaults below the descriptor limit, so the default
  server never gets there.
- Non-reading fetchers and half-sent frames: memory stays within ``queued.max.response.bytes``
  and ``queued.max.request.bytes`` (subprocess servers, resident memory from /proc).
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from broker_embedded.broker import Broker
from tests.broker_embedded.server._fetch import decode, fetch_request
from tests.broker_embedded.server._net import (
    API_VERSIONS_V3,
    RawClient,
    config,
    raw_frame,
    request_frame,
    serve,
)
from tests.broker_embedded.server._serve import served

ROOT = Path(__file__).resolve().parents[3]
MB = 1 << 20
FOREVER = 2**31 - 1
START_TIMEOUT_S = 60.0


def long_poll_frame(topic: str = "t", correlation_id: int = 1) -> bytes:
    """Fetch v4 on an empty partition with max_wait and min_bytes at 2^31-1."""
    request = fetch_request(4, [(topic, [(0, 0, MB, -1)])], max_wait_ms=FOREVER, min_bytes=FOREVER)
    return request_frame(request, correlation_id)


def abandon_long_polls(port: int, count: int) -> None:
    """``count`` times: connect, send a forever long poll, close."""
    frame = long_poll_frame()
    for _ in range(count):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(frame)


def wait_until(condition, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


DESCRIPTOR_SLACK = 2


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_abandoned_long_polls_release_their_connections_and_purgatory_slots(tmp_path):
    with served(tmp_path) as s:
        s.broker.create_topic("t", 1)
        port = s.server.endpoints[0].port
        purgatory = s.broker.replica_manager.fetch_purgatory
        descriptors = open_descriptors()
        abandon_long_polls(port, 300)
        sockets = s.server.socket_server
        wait_until(
            lambda: (
                (sockets.connection_count(), purgatory.pending) == (0, 0)
                and open_descriptors() <= descriptors
            ),
            20,
        )
        assert (sockets.connection_count(), purgatory.pending) == (0, 0)
        # none of the 300 connections' descriptors left; the slack is for other threads of this
        # test process (a worker runs other modules' background threads), not for the server
        assert open_descriptors() <= descriptors + DESCRIPTOR_SLACK
        # a client that stays gets its long poll answered at max_wait, as before
        with RawClient(s.server) as c:
            request = fetch_request(4, [("t", [(0, 0, MB, -1)])], max_wait_ms=300, min_bytes=1)
            started = time.monotonic()
            got = decode(4, c.call(request))
            assert time.monotonic() - started >= 0.29
            assert got.responses[0].partitions[0].high_watermark == 0


def test_a_long_poll_still_waits_after_abandoned_ones_filled_the_purgatory(tmp_path):
    """``purgatory.max.pending`` 100 and 150 abandoned long polls: the next long poll waits
    its max_wait (it was answered at once when the abandoned ones filled the purgatory)."""
    with served(tmp_path, purgatory_max_pending=100) as s:
        s.broker.create_topic("t", 1)
        abandon_long_polls(s.server.endpoints[0].port, 150)
        purgatory = s.broker.replica_manager.fetch_purgatory
        wait_until(lambda: purgatory.pending == 0, 20)
        with RawClient(s.server) as c:
            request = fetch_request(4, [("t", [(0, 0, MB, -1)])], max_wait_ms=1000, min_bytes=1)
            started = time.monotonic()
            c.call(request)
            waited = time.monotonic() - started
        assert waited >= 0.99, waited


def test_a_closed_connection_drops_its_waiting_fetch_without_closing_pipelined_work(tmp_path):
    """A client that sends a long poll and then an ApiVersions and half-closes (shutdown of its
    write side) still gets both answers: the long poll is completed early, not dropped, since
    a request follows it."""
    with served(tmp_path) as s:
        s.broker.create_topic("t", 1)
        with RawClient(s.server) as c:
            c.send(long_poll_frame(correlation_id=1) + request_frame(API_VERSIONS_V3, 2))
            wait_until(lambda: s.broker.replica_manager.fetch_purgatory.pending == 1, 10)
            c.sock.shutdown(socket.SHUT_WR)
            first, second = c.recv_frame(), c.recv_frame()
        assert struct.unpack(">i", first[:4]) == (1,)
        assert struct.unpack(">i", second[:4]) == (2,)
        assert wait_until(lambda: s.server.socket_server.connection_count() == 0, 10)


def padded_api_versions(size: int, correlation_id: int) -> bytes:
    """An ApiVersions v0 frame of ``size`` bytes (Kafka ignores bytes after the body)."""
    return raw_frame(18, 0, correlation_id, bytes(size - 13), v2=False)


def test_a_large_frame_waits_for_the_request_budget_and_small_ones_do_not():
    """queued.max.request.bytes 1 MiB: a 2 MiB frame half-sent holds the budget; a complete
    512 KiB frame on another connection is not read until the first is answered; small
    requests are answered meanwhile."""
    with serve(config(queued_max_request_bytes=MB)) as server:
        with RawClient(server) as big, RawClient(server) as waiting:
            frame = padded_api_versions(2 * MB, 1)
            big.send(frame[: MB + 4])
            time.sleep(0.2)
            waiting.send(padded_api_versions(MB // 2, 2))
            waiting.sock.settimeout(0.5)
            with pytest.raises(TimeoutError):
                waiting.recv_exact(4)
            with RawClient(server) as small:
                assert small.call(API_VERSIONS_V3, 3)[:4] == struct.pack(">i", 3)
            big.send(frame[MB + 4 :])
            assert big.recv_frame()[:4] == struct.pack(">i", 1)
            waiting.sock.settimeout(10)
            assert waiting.recv_frame()[:4] == struct.pack(">i", 2)
        pool = server.socket_server.request_pool
        assert wait_until(lambda: pool.available == MB, 10), pool.available


# -- subprocess servers: a lowered descriptor limit, resident memory ------------------------------


@dataclass
class Child:
    proc: subprocess.Popen
    port: int
    log: Path

    def rss(self) -> int:
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        raise AssertionError("no VmRSS")

    def log_lines(self, needle: str) -> list[str]:
        lines = self.log.read_text(errors="replace").splitlines()
        return [line for line in lines if needle in line]


@contextlib.contextmanager
def child_server(log_dir: Path, log: Path, nofile: int = 0, **overrides: object) -> Iterator[Child]:
    command = [
        sys.executable,
        "-m",
        "tests.broker_embedded.server._serve_child",
        str(log_dir),
        str(nofile),
        json.dumps(overrides),
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with open(log, "wb") as err:
        proc = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, cwd=ROOT, env=env
        )
    try:
        assert proc.stdout is not None
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            ready = sel.select(START_TIMEOUT_S)
        line = proc.stdout.readline().decode() if ready else ""
        assert line.startswith("port "), f"server did not start: {log.read_text()[-2000:]}"
        yield Child(proc, int(line.split()[1]), log)
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()


def answers_api_versions(port: int) -> bool:
    try:
        with RawClient(port, timeout=2.0) as c:
            return c.call(API_VERSIONS_V3, 9)[:4] == struct.pack(">i", 9)
    except OSError:
        return False


def hold_long_polls(port: int, count: int, settle_s: float = 2.0, cap_s: float = 20.0) -> list:
    """``count`` connections each with a forever long poll sent, kept open. The connects are
    made all at once (non-blocking): those the server's full backlog leaves hanging are given up
    once no connect has completed for ``settle_s`` (or at ``cap_s``), instead of one after the
    other at a timeout each."""
    frame = long_poll_frame()
    pending: dict[socket.socket, None] = {}
    held: list[socket.socket] = []
    with selectors.DefaultSelector() as sel:
        for _ in range(count):
            sock = socket.socket()
            sock.setblocking(False)
            sock.connect_ex(("127.0.0.1", port))
            sel.register(sock, selectors.EVENT_WRITE)
            pending[sock] = None
        start = last = time.monotonic()
        while pending:
            now = time.monotonic()
            if now - last >= settle_s or now - start >= cap_s:
                break
            for key, _ in sel.select(0.1):
                sock = key.fileobj
                sel.unregister(sock)
                del pending[sock]
                if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0:
                    sock.setblocking(True)
                    sock.settimeout(10)
                    sock.sendall(frame)
                    held.append(sock)
                    last = time.monotonic()
                else:
                    sock.close()
    for sock in pending:
        sock.close()
    return held


def empty_topic_log_dir(path: Path) -> Path:
    broker = Broker(path, create=True, config=config())
    try:
        broker.create_topic("t", 1)
    finally:
        broker.close()
    return path


@pytest.mark.parametrize("explicit", [True, False], ids=["max.connections above", "default"])
def test_out_of_descriptors_at_accept_backs_off_and_recovers(tmp_path, explicit):
    """Under RLIMIT_NOFILE 160, 220 clients hold long polls, then close. With max.connections
    above the limit the acceptor runs out of descriptors: one log line an episode, each ended by
    one line, and ApiVersions is answered once the clients are gone. With the default
    max.connections (below the limit) accept never fails."""
    log_dir = empty_topic_log_dir(tmp_path / "logs")
    overrides = {"max_connections": 100_000} if explicit else {}
    with child_server(log_dir, tmp_path / "server.log", nofile=160, **overrides) as child:
        held = hold_long_polls(child.port, 220)
        if explicit:
            assert wait_until(lambda: child.log_lines("Too many open files"), 20)
        for sock in held:
            sock.close()
        assert wait_until(lambda: answers_api_versions(child.port), 30)
        time.sleep(1.0)  # a server still failing would log again meanwhile
        lines = child.log_lines("accepting on")
        failures = [line for line in lines if "failed" in line]
        recoveries = [line for line in lines if "again after" in line]
        if explicit:  # one line an episode, not one a retry; a descriptor freed while the
            # clients still hold (a client giving up on a loaded machine) may end an episode
            assert 1 <= len(failures) <= 3 and len(recoveries) == len(failures), lines[:8]
        else:
            assert lines == []


def test_max_connections_defaults_below_the_descriptor_limit():
    code = (
        "import resource; hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]; "
        "resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard)); "
        "from broker_embedded.broker_config import BrokerConfig; "
        "print(BrokerConfig().max_connections)"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
        check=True,
    )
    assert out.stdout.split() == ["768"]


def big_topic_log_dir(path: Path, megabytes: int) -> Path:
    """A log dir whose topic "big" holds ``megabytes`` MiB in one segment."""
    broker = Broker(path, create=True, config=config())
    try:
        broker.create_topic("big", 1, config={"segment.bytes": 256 * MB})
        for _ in range(2 * megabytes):
            broker.produce("big", 0, [os.urandom(MB // 2 - 200)])
    finally:
        broker.close()
    return path


def peak_growth(child: Child, before: int, seconds: float) -> int:
    """The largest resident memory growth over ``before`` seen in ``seconds``."""
    peak, deadline = 0, time.monotonic() + seconds
    while time.monotonic() < deadline:
        peak = max(peak, child.rss() - before)
        time.sleep(0.1)
    return peak


def small_receive_buffer_socket(port: int) -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 << 10)
    sock.settimeout(10)
    sock.connect(("127.0.0.1", port))
    return sock


def test_non_reading_fetchers_do_not_copy_responses_without_bound(tmp_path):
    """40 connections each send an 8 MiB Fetch and never read, with 4 pinned regions: the other
    responses are copied only within queued.max.response.bytes, then sent from the files (they
    were all copied: about 290 MB). Memory returns when they close."""
    log_dir = big_topic_log_dir(tmp_path / "logs", 8)
    with child_server(log_dir, tmp_path / "server.log", fetch_max_pinned_regions=4) as child:
        request = fetch_request(4, [("big", [(0, 0, 16 * MB, -1)])], max_bytes=16 * MB)
        with RawClient(child.port) as warm:  # imports and first-use allocations
            assert len(warm.call(request)) > 8 * MB - 4096
        before = child.rss()
        clients = [small_receive_buffer_socket(child.port) for _ in range(40)]
        for i, sock in enumerate(clients):
            sock.sendall(request_frame(request, i))
        grown = peak_growth(child, before, 6.0)
        assert answers_api_versions(child.port)
        for sock in clients:
            sock.close()
        returned = wait_until(lambda: child.rss() - before < 48 * MB, 15)
        left = child.rss() - before
    assert grown < 160 * MB, grown
    assert returned, left


def test_half_sent_frames_stay_within_the_request_budget(tmp_path):
    """12 connections each declare a 104,857,599-byte frame and send 24 MiB of it: only frames
    within queued.max.request.bytes are read (each buffer grew to 32 MiB: about 390 MB), and a
    small request is answered meanwhile."""
    log_dir = empty_topic_log_dir(tmp_path / "logs")
    with child_server(log_dir, tmp_path / "server.log") as child:
        assert answers_api_versions(child.port)
        before = child.rss()
        clients = [socket.create_connection(("127.0.0.1", child.port), 10) for _ in range(12)]
        pending = {}
        for sock in clients:
            sock.setblocking(False)
            pending[sock] = memoryview(struct.pack(">i", 104_857_599) + bytes(24 * MB))
        deadline = time.monotonic() + 15
        while pending and time.monotonic() < deadline:
            for sock, data in list(pending.items()):
                try:
                    sent = sock.send(data[: 1 << 20])
                except BlockingIOError:
                    continue
                pending[sock] = data[sent:]
                if not pending[sock]:
                    del pending[sock]
            time.sleep(0.001)
        grown = peak_growth(child, before, 3.0)
        assert answers_api_versions(child.port)
        for sock in clients:
            sock.close()
        returned = wait_until(lambda: child.rss() - before < 48 * MB, 15)
        left = child.rss() - before
    assert grown < 160 * MB, grown
    assert returned, left
