"""Abandoned, slow and half-sending clients against ``kafkalog serve``: descriptors and memory.

    .venv/bin/python benchmarks/serve_abuse.py [--probe all|abandoned|emfile|slow|half]
                                               [--source DIR] [--scale S]

Each probe starts ``kafkalog serve`` (default config, 127.0.0.1 port 0) as a child process on a
fresh log dir in a temporary directory, and reads the child's descriptors (/proc/PID/fd) and
resident memory (/proc/PID/status VmRSS). ``--source DIR``: a checkout whose code the server
runs (default this one: compare two revisions). ``--scale`` multiplies every count (default 1:
the sizes of issue 27).

- abandoned: 10,500 times connect, send Fetch v4 with max_wait and min_bytes 2^31-1 on an empty
  partition, close; descriptors before, right after, and 3 s after; then a normal Fetch
  (max_wait 1000 ms, min_bytes 1) is timed (it should wait its 1000 ms).
- emfile: the same with the server's RLIMIT_NOFILE at 1024 and 1,040 clients; whether ApiVersions
  is answered 5 s after they left, and the server's ``accepting ... failed`` log lines.
- slow: 1,124 connections each send one Fetch of a 12 MiB partition and never read; resident
  memory before, at its peak over 15 s, and 5 s after they closed.
- half: 20 connections each declare a 104,857,599-byte frame and send 40 MiB of it (non-blocking,
  at most 60 s); resident memory before, at its peak, and 5 s after they closed.

Every loop is bounded in count and time; the server is stopped (SIGTERM, then kill) on every path
out and the temporary directory deleted. Prints one line per measure.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import resource
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

START_S = 120.0
STOP_S = 30.0
FOREVER = 2**31 - 1
MIB = 1 << 20
_LISTENING = re.compile(rb"listening on PLAINTEXT://127\.0\.0\.1:(\d+)")
_SIZE = struct.Struct(">i")
_HEADER = struct.Struct(">hhih")  # api key, api version, correlation id, client id length
_FETCH_HEAD = struct.Struct(">iiiibi")  # replica, max wait, min bytes, max bytes, isolation, topics
_PARTITION = struct.Struct(">iiqi")  # partitions count (1), partition, fetch offset, max bytes
CLIENT_ID = b"serve-abuse"


def fetch_v4(topic: str, max_wait_ms: int, min_bytes: int, max_bytes: int, corr: int = 1) -> bytes:
    name = topic.encode()
    body = (
        _HEADER.pack(1, 4, corr, len(CLIENT_ID))
        + CLIENT_ID
        + _FETCH_HEAD.pack(-1, max_wait_ms, min_bytes, max_bytes, 0, 1)
        + struct.pack(">h", len(name))
        + name
        + _PARTITION.pack(1, 0, 0, max_bytes)
    )
    return _SIZE.pack(len(body)) + body


def api_versions_v0(corr: int) -> bytes:
    body = _HEADER.pack(18, 0, corr, len(CLIENT_ID)) + CLIENT_ID
    return _SIZE.pack(len(body)) + body


@dataclass
class Served:
    proc: subprocess.Popen
    port: int
    out: Path

    def descriptors(self) -> int:
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))

    def rss_mib(self) -> float:
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        raise RuntimeError("no VmRSS")

    def log_count(self, *needles: str) -> int:
        text = self.out.read_text(errors="replace").splitlines()
        return sum(1 for line in text if all(n in line for n in needles))


@contextlib.contextmanager
def serve(source: Path, log_dir: Path, out: Path, nofile: int = 0) -> Iterator[Served]:
    cmd = [
        sys.executable,
        "-m",
        "spark_kafkalog.cli",
        "serve",
        "--log-dir",
        str(log_dir),
        "--listeners",
        "PLAINTEXT://127.0.0.1:0",
    ]
    env = dict(os.environ, PYTHONPATH=str(source))

    def lower_limit() -> None:
        if nofile:
            hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, hard))

    with out.open("wb") as sink:
        proc = subprocess.Popen(
            cmd, stdout=sink, stderr=subprocess.STDOUT, cwd=source, env=env, preexec_fn=lower_limit
        )
    try:
        deadline = time.monotonic() + START_S
        while not (found := _LISTENING.search(out.read_bytes())):
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError(f"server did not start:\n{out.read_text()[-2000:]}")
            time.sleep(0.05)
        yield Served(proc, int(found.group(1)), out)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(STOP_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(STOP_S)


def make_log_dir(path: Path, megabytes: int) -> Path:
    """Topic "t" (empty) and, with ``megabytes``, topic "big" holding that many MiB."""
    from broker_embedded.broker import Broker
    from broker_embedded.broker_config import BrokerConfig

    broker = Broker(path, create=True, config=BrokerConfig())
    try:
        broker.create_topic("t", 1)
        if megabytes:
            broker.create_topic("big", 1, config={"segment.bytes": 1 << 30})
            for _ in range(2 * megabytes):
                broker.produce("big", 0, [os.urandom(MIB // 2 - 200)])
    finally:
        broker.close()
    return path


def recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks = []
    while n:
        chunk = sock.recv(min(n, MIB))
        if not chunk:
            raise ConnectionError("closed")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def call(port: int, frame: bytes, timeout: float) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout) as sock:
        sock.sendall(frame)
        (size,) = _SIZE.unpack(recv_exact(sock, 4))
        return recv_exact(sock, size)


def abandon(port: int, count: int, seconds: float) -> int:
    """Connect, send a forever long poll, close; ``count`` times within ``seconds``."""
    frame, deadline, done = fetch_v4("t", FOREVER, FOREVER, MIB), time.monotonic() + seconds, 0
    while done < count and time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), 5) as sock:
                sock.sendall(frame)
        except OSError:
            pass
        done += 1
    return done


def probe_abandoned(source: Path, work: Path, scale: float) -> None:
    log_dir = make_log_dir(work / "abandoned", 0)
    with serve(source, log_dir, work / "abandoned.out") as s:
        before = s.descriptors()
        sent = abandon(s.port, int(10_500 * scale), 300)
        right_after = s.descriptors()
        time.sleep(3)
        print(
            f"abandoned: {sent} long polls; server descriptors {before} before, "
            f"{right_after} right after, {s.descriptors()} 3 s after"
        )
        started = time.monotonic()
        call(s.port, fetch_v4("t", 1000, 1, MIB), 10)
        print(
            f"abandoned: a Fetch(max_wait=1000) then answered in "
            f"{(time.monotonic() - started) * 1000:.0f} ms"
        )


def probe_emfile(source: Path, work: Path, scale: float) -> None:
    log_dir = make_log_dir(work / "emfile", 0)
    with serve(source, log_dir, work / "emfile.out", nofile=1024) as s:
        sent = abandon(s.port, int(1_040 * scale), 120)
        time.sleep(5)
        try:
            answered = bool(call(s.port, api_versions_v0(5), 2.0))
        except OSError as e:
            answered = False
            print(f"emfile: ApiVersions failed: {e!r}")
        failures = s.log_count("accepting on", "failed")
        print(
            f"emfile: {sent} long polls under ulimit -n 1024; 5 s later ApiVersions answered: "
            f"{answered}; server descriptors {s.descriptors()}; 'accepting ... failed' log "
            f"lines: {failures}"
        )


def peak_rss(s: Served, seconds: float) -> float:
    peak, deadline = 0.0, time.monotonic() + seconds
    while time.monotonic() < deadline:
        peak = max(peak, s.rss_mib())
        time.sleep(0.2)
    return peak


def probe_slow(source: Path, work: Path, scale: float) -> None:
    log_dir = make_log_dir(work / "slow", 12)
    with serve(source, log_dir, work / "slow.out") as s:
        request = fetch_v4("big", 0, 1, 55 * MIB)
        call(s.port, request, 30)  # warm
        before = s.rss_mib()
        clients, deadline = [], time.monotonic() + 120
        for i in range(int(1_124 * scale)):
            if time.monotonic() > deadline:
                break
            sock = socket.create_connection(("127.0.0.1", s.port), 10)
            sock.sendall(fetch_v4("big", 0, 1, 55 * MIB, i))
            clients.append(sock)
        peak = peak_rss(s, 15)
        for sock in clients:
            sock.close()
        time.sleep(5)
        print(
            f"slow: {len(clients)} non-reading 12 MiB fetches; server RSS {before:.0f} MiB "
            f"before, {peak:.0f} MiB peak, {s.rss_mib():.0f} MiB 5 s after they closed; "
            f"descriptors {s.descriptors()}"
        )


def probe_half(source: Path, work: Path, scale: float) -> None:
    log_dir = make_log_dir(work / "half", 0)
    with serve(source, log_dir, work / "half.out") as s:
        before = s.rss_mib()
        clients = [
            socket.create_connection(("127.0.0.1", s.port), 10) for _ in range(int(20 * scale))
        ]
        pending = {}
        for sock in clients:
            sock.setblocking(False)
            pending[sock] = memoryview(_SIZE.pack(104_857_599) + bytes(40 * MIB))
        deadline = time.monotonic() + 60
        while pending and time.monotonic() < deadline:
            for sock, data in list(pending.items()):
                with contextlib.suppress(BlockingIOError):
                    pending[sock] = data = data[sock.send(data[:MIB]) :]
                if not data:
                    del pending[sock]
            time.sleep(0.001)
        sent = sum(40 * MIB + 4 - len(pending.get(sock, b"")) for sock in clients) / MIB
        peak = peak_rss(s, 5)
        for sock in clients:
            sock.close()
        time.sleep(5)
        print(
            f"half: {len(clients)} frames of 104,857,599 declared, {sent:.0f} MiB sent in all; "
            f"server RSS {before:.0f} MiB before, {peak:.0f} MiB peak, {s.rss_mib():.0f} MiB "
            "5 s after they closed"
        )


PROBES = {
    "abandoned": probe_abandoned,
    "emfile": probe_emfile,
    "slow": probe_slow,
    "half": probe_half,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--probe", choices=["all", *PROBES], default="all")
    parser.add_argument("--source", type=Path, default=ROOT, help="the checkout the server runs")
    parser.add_argument("--scale", type=float, default=1.0, help="multiplies every count")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="serve-abuse-") as tmp:
        for name, probe in PROBES.items():
            if args.probe in ("all", name):
                probe(args.source.resolve(), Path(tmp), args.scale)
    return 0


if __name__ == "__main__":
    sys.exit(main())
